// The switch's ARP cache: IPv4 next hop -> MAC, with the packets waiting
// for a resolution and the timers that retry or give up.
//
//   ArpCache arp({});
//   ArpCache::LookupResult r = arp.Lookup(next_hop, now);
//   if (r.refresh) SendArpRequest(next_hop);       // entry getting old
//   if (r.mac) { send to *r.mac; }
//   else if (arp.Hold(next_hop, packet, now) == ArpCache::HoldResult::kHeldSendRequest) {
//     SendArpRequest(next_hop);
//   }
//   ...on an ARP reply (or a request from that host)...
//   arp.Learn(ip, mac, now, &released);             // the held packets, to send now
//   ...every poll...
//   arp.Tick(now, &retry, &failed);                 // re-request / drop what timed out
//
// Lifetimes: an entry is used as is for `reachable`; after that, a lookup
// also asks for a refresh (one request per `retry_interval`) while the
// entry stays usable; an entry not confirmed for `lifetime` is removed. An
// unresolved address is asked `max_requests` times, `retry_interval` apart;
// then its held packets are handed back as failed (the caller frees and
// counts them). At most `max_held_per_address` packets wait per address;
// more are refused (the caller frees and counts them).
//
// Ownership: held packets belong to the cache until released, failed or
// the cache is destroyed (then freed). Thread-safety: one thread.
#ifndef NETFOLD_TRANSPORT_DPDK_ARP_CACHE_H_
#define NETFOLD_TRANSPORT_DPDK_ARP_CACHE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "transport/dpdk/ethernet_frame.h"
#include "transport/packet_pool.h"

namespace netfold::transport::dpdk {

struct ArpConfig {
  absl::Duration reachable = absl::Seconds(30);
  absl::Duration lifetime = absl::Minutes(5);
  absl::Duration retry_interval = absl::Milliseconds(250);
  int max_requests = 4;
  size_t max_held_per_address = 64;
  size_t max_entries = 4096;
};

class ArpCache {
 public:
  explicit ArpCache(const ArpConfig& config);
  ArpCache(const ArpCache&) = delete;
  ArpCache& operator=(const ArpCache&) = delete;
  ~ArpCache();  // frees held packets

  struct LookupResult {
    std::optional<MacAddress> mac;
    bool refresh = false;  // send an ARP request for this address now
  };
  LookupResult Lookup(uint32_t ip, int64_t now_ns);

  // Records ip -> mac (from an ARP request or reply). Packets held for `ip`
  // are appended to `released` (the caller owns them now). Returns false
  // if the table is full and `ip` was not in it.
  bool Learn(uint32_t ip, const MacAddress& mac, int64_t now_ns,
             std::vector<PacketBuffer*>* released);
  // As Learn, but only refreshes an address already known or awaited
  // (gratuitous ARP, requests not aimed at us): a cache does not fill up
  // with every host that talks.
  bool Update(uint32_t ip, const MacAddress& mac, int64_t now_ns,
              std::vector<PacketBuffer*>* released);
  bool Contains(uint32_t ip) const { return entries_.contains(ip); }

  enum class HoldResult {
    kHeldSendRequest,  // first packet for this address: send a request now
    kHeld,             // a request is already out
    kRefused,          // too many held for this address (or table full): the caller keeps `p`
  };
  HoldResult Hold(uint32_t ip, PacketBuffer* p, int64_t now_ns);

  // Appends to `requests` the addresses to ask again now, and to `failed`
  // the held packets whose address did not resolve in time (caller owns).
  void Tick(int64_t now_ns, std::vector<uint32_t>* requests, std::vector<PacketBuffer*>* failed);
  // When Tick next has something to do (pending resolutions only).
  std::optional<int64_t> NextTimerNs() const;

  size_t num_entries() const { return entries_.size(); }
  size_t num_pending() const { return pending_.size(); }
  size_t num_held() const;

 private:
  struct Entry {
    MacAddress mac;
    int64_t confirmed_ns;
    int64_t last_request_ns;
  };
  struct Pending {
    std::vector<PacketBuffer*> held;
    int requests_sent = 1;
    int64_t next_request_ns = 0;
  };

  bool Store(uint32_t ip, const MacAddress& mac, int64_t now_ns,
             std::vector<PacketBuffer*>* released);

  ArpConfig config_;
  int64_t reachable_ns_;
  int64_t lifetime_ns_;
  int64_t retry_ns_;
  absl::flat_hash_map<uint32_t, Entry> entries_;
  absl::flat_hash_map<uint32_t, Pending> pending_;
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_ARP_CACHE_H_
