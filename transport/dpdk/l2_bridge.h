// An IEEE 802.1D-style learning bridge: the forwarding decision a switch
// makes for every frame that is not for itself.
//
//   L2Bridge bridge({.num_links = 4});
//   L2Bridge::Decision d = bridge.Process(in_link, frame_src, frame_dst, now_ns);
//   switch (d.action) {
//     case L2Bridge::Action::kForward: send on d.link; break;
//     case L2Bridge::Action::kFlood:   send on every link but in_link; break;
//     case L2Bridge::Action::kFilter:  drop (the destination is behind in_link); break;
//   }
//
// Learning: the source address of every frame is (re)bound to the link it
// came in on, unless it is a group address or zero. A known address that
// shows up on another link moves (a station move, counted). Entries age out
// after `aging` without a frame from that address. A full table learns
// nothing new (counted) until entries age out, so an address flood cannot
// grow it without bound.
//
// Forwarding: group (multicast, broadcast) and unknown unicast
// destinations are flooded; known unicast goes to its link, or is filtered
// when that link is the one it came from.
//
// Thread-safety: one thread (the data plane) calls everything but
// counters(), which may be read from anywhere.
#ifndef NETFOLD_TRANSPORT_DPDK_L2_BRIDGE_H_
#define NETFOLD_TRANSPORT_DPDK_L2_BRIDGE_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "transport/dpdk/ethernet_frame.h"

namespace netfold::transport::dpdk {

struct BridgeConfig {
  uint32_t num_links = 1;
  size_t max_entries = 8192;
  absl::Duration aging = absl::Seconds(300);  // 802.1D's default
};

struct BridgeCounters {
  std::atomic<uint64_t> learned{0};     // new addresses
  std::atomic<uint64_t> moved{0};       // known addresses seen on another link
  std::atomic<uint64_t> aged{0};        // entries removed for age
  std::atomic<uint64_t> table_full{0};  // addresses not learned: table full
  std::atomic<uint64_t> forwarded{0};   // known unicast sent to one link
  std::atomic<uint64_t> flooded_unknown{0};  // unknown unicast flooded
  std::atomic<uint64_t> flooded_group{0};    // broadcast/multicast flooded
  std::atomic<uint64_t> filtered{0};    // destination behind the ingress link
  std::atomic<uint64_t> bad_source{0};  // group or zero source address: not learned
};

class L2Bridge {
 public:
  enum class Action { kForward, kFlood, kFilter };
  struct Decision {
    Action action = Action::kFlood;
    uint32_t link = 0;  // for kForward
  };

  explicit L2Bridge(const BridgeConfig& config);
  L2Bridge(const L2Bridge&) = delete;
  L2Bridge& operator=(const L2Bridge&) = delete;

  // Learns `src` on `in_link` and decides where a frame to `dst` goes.
  // `in_link` must be < num_links (checked).
  Decision Process(uint32_t in_link, const MacAddress& src, const MacAddress& dst, int64_t now_ns);

  // Learns without forwarding (frames the switch terminates also teach it
  // where their sender is). Returns false if not learned (group/zero
  // address, table full).
  bool Learn(const MacAddress& mac, uint32_t link, int64_t now_ns);

  // The link `mac` was last seen on, if known and not aged out. For frames
  // the switch itself originates.
  std::optional<uint32_t> Lookup(const MacAddress& mac, int64_t now_ns);

  // Forgets every address learned on `link` (the link went down).
  void FlushLink(uint32_t link);
  // Removes aged entries; Process/Learn call it when the table is full.
  void Sweep(int64_t now_ns);

  size_t num_entries() const { return table_.size(); }
  uint32_t num_links() const { return config_.num_links; }
  const BridgeCounters& counters() const { return counters_; }

 private:
  struct Entry {
    uint32_t link;
    int64_t last_seen_ns;
  };

  BridgeConfig config_;
  int64_t aging_ns_;
  absl::flat_hash_map<uint64_t, Entry> table_;
  BridgeCounters counters_;
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_L2_BRIDGE_H_
