// A Port decorator with link faults per peer: a switch has one data-plane
// UDP address, and its "ports" toward each host, child and parent are
// virtual. This decorator gives each of them (each remote address the port
// exchanges datagrams with) its own send and receive LinkImpairment stage
// and its own counters, as a physical switch has per port.
//
//   auto port = std::make_unique<PeerImpairedPort>(std::move(udp), RealClock());
//   port->SetDefaultImpairment(LinkDirection::kBoth, *ParseImpairment("drop=0.01,seed=5"));
//   port->SetPeerImpairment(*ParseIpv4Endpoint("127.0.0.1:5000"), LinkDirection::kSend,
//                           *ParseImpairment("down=1"));      // from any thread
//   for (const PeerLinkSnapshot& p : port->Snapshot()) ...    // from any thread
//
// Peers. A peer is keyed by the remote address of a datagram: its source on
// receive, its destination on send (a multicast group is a peer of its own
// on the send side). A peer's stages are created the first time it is seen
// (or named by SetPeerImpairment) from the default configuration. At most
// `max_peers` peers are tracked; traffic of any further address shares one
// overflow peer (address 0.0.0.0:0), so spoofed sources cannot grow memory.
//
// Seeds. A configuration set for many peers at once (the default, or
// SetAllImpairment) gives each peer the seed DeriveSeed(seed, peer), so
// peers do not lose packets in lockstep, and the same seed still gives the
// same faults. A configuration set for one peer keeps its seed as given.
//
// Everything else is ImpairedPort's behaviour: packets the inner port would
// not take are retried (bounded by kMaxPendingTx, then dropped and counted
// in num_tx_overflow), and RecvBurst never waits past the moment a held
// (delayed, reordered, rate-limited) packet becomes due.
//
// Thread-safety: as for every Port, RecvBurst/SendBurst/Flush belong to one
// thread; Set*Impairment, Snapshot and the counters may be used from any
// thread.
#ifndef NETFOLD_TRANSPORT_PEER_IMPAIRED_PORT_H_
#define NETFOLD_TRANSPORT_PEER_IMPAIRED_PORT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "transport/link_impairment.h"
#include "transport/port.h"

namespace netfold::transport {

enum class LinkDirection : uint8_t { kSend, kReceive, kBoth };
// "send", "receive" (or "recv"), "both".
absl::StatusOr<LinkDirection> ParseLinkDirection(std::string_view text);
std::string_view LinkDirectionName(LinkDirection direction);

// Traffic of one peer as the data plane sees it: rx counts datagrams from the
// network before the receive stage, tx datagrams from the data plane before
// the send stage (what the stages then did is in their own counters).
struct PeerTrafficCounters {
  std::atomic<uint64_t> rx_packets{0};
  std::atomic<uint64_t> rx_bytes{0};
  std::atomic<uint64_t> tx_packets{0};
  std::atomic<uint64_t> tx_bytes{0};
};

// A copy of one peer's state, for status and admin tools.
struct PeerLinkSnapshot {
  Ipv4Endpoint peer;  // 0.0.0.0:0 is the overflow peer
  ImpairmentConfig send;
  ImpairmentConfig receive;
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  // The stages' counters, copied (ImpairmentCounters holds atomics).
  struct Stage {
    uint64_t packets_in = 0, packets_out = 0;
    uint64_t dropped_down = 0, dropped_random = 0, dropped_burst = 0, dropped_rate = 0;
    uint64_t duplicated = 0, corrupted = 0, reordered = 0, delayed = 0;
    uint64_t dropped() const { return dropped_down + dropped_random + dropped_burst + dropped_rate; }
  };
  Stage send_stage;
  Stage receive_stage;
};

class PeerImpairedPort : public Port {
 public:
  static constexpr size_t kMaxPendingTx = 4096;
  static constexpr size_t kDefaultMaxPeers = 4096;

  PeerImpairedPort(std::unique_ptr<Port> inner, const Clock& clock,
                   size_t max_peers = kDefaultMaxPeers);
  ~PeerImpairedPort() override;
  PeerImpairedPort(const PeerImpairedPort&) = delete;
  PeerImpairedPort& operator=(const PeerImpairedPort&) = delete;

  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override {
    return inner_->JoinMulticast(group);
  }
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override {
    return inner_->LeaveMulticast(group);
  }
  Ipv4Endpoint local() const override { return inner_->local(); }
  PacketPool& pool() override { return inner_->pool(); }
  const PortCounters& counters() const override { return inner_->counters(); }
  void Wake() override {
    woken_.store(true, std::memory_order_relaxed);
    inner_->Wake();
  }

  // The configuration of peers created from now on (seeds derived per peer).
  // Existing peers keep theirs.
  void SetDefaultImpairment(LinkDirection direction, const ImpairmentConfig& config);
  // The default and every existing peer (seeds derived per peer).
  void SetAllImpairment(LinkDirection direction, const ImpairmentConfig& config);
  // One peer (created if new; its seed as given). ResourceExhausted if the
  // peer is new and max_peers are already tracked.
  absl::Status SetPeerImpairment(const Ipv4Endpoint& peer, LinkDirection direction,
                                 const ImpairmentConfig& config);

  ImpairmentConfig default_send() const;
  ImpairmentConfig default_receive() const;
  // Every tracked peer, ordered by address.
  std::vector<PeerLinkSnapshot> Snapshot() const;
  // One peer, if tracked.
  std::optional<PeerLinkSnapshot> SnapshotPeer(const Ipv4Endpoint& peer) const;
  size_t num_peers() const;
  uint64_t num_tx_overflow() const { return tx_overflow_.load(std::memory_order_relaxed); }
  Port& inner() { return *inner_; }

  // Sends held packets that are due. Called by RecvBurst and SendBurst.
  void Flush();

  // The seed a peer gets from a configuration applied to many peers.
  static uint64_t DeriveSeed(uint64_t seed, const Ipv4Endpoint& peer);

 private:
  struct Peer {
    Peer(const Ipv4Endpoint& address, const ImpairmentConfig& send, const ImpairmentConfig& receive,
         const Clock& clock)
        : address(address), send(send, clock), receive(receive, clock) {}
    Ipv4Endpoint address;
    LinkImpairment send;
    LinkImpairment receive;
    PeerTrafficCounters traffic;
  };

  // The peer of `address`, created from the defaults if new (or the
  // overflow peer when full). Requires mu_.
  Peer* FindOrCreateLocked(const Ipv4Endpoint& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static ImpairmentConfig ForPeer(const ImpairmentConfig& config, const Ipv4Endpoint& peer);
  static PeerLinkSnapshot SnapshotOf(const Peer& p);
  void TransmitPending();
  void ReleaseHeld();
  std::optional<int64_t> NextDueNs();
  // The peer of `address` for the data-plane thread (creates it if new).
  Peer* DataPlanePeer(const Ipv4Endpoint& address);
  // Picks up peers another thread added (data-plane thread).
  void RefreshDataPlanePeers();

  std::atomic<bool> woken_{false};  // Wake(): stop waiting
  std::unique_ptr<Port> inner_;
  const Clock& clock_;
  const size_t max_peers_;

  mutable absl::Mutex mu_;
  ImpairmentConfig default_send_ ABSL_GUARDED_BY(mu_);
  ImpairmentConfig default_receive_ ABSL_GUARDED_BY(mu_);
  // Peers are never removed, so Peer pointers stay valid for the port's life.
  absl::flat_hash_map<Ipv4Endpoint, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<Peer*> peer_list_ ABSL_GUARDED_BY(mu_);
  // The data-plane thread's copy of peer_list_, refreshed when it grows,
  // and its address -> peer cache (bounded), so that the packet path takes
  // mu_ only for an address it has not seen.
  std::vector<Peer*> dp_peers_;
  absl::flat_hash_map<Ipv4Endpoint, Peer*> dp_lookup_;
  std::atomic<size_t> num_peers_{0};

  std::vector<PacketBuffer*> scratch_;
  std::vector<PacketBuffer*> staged_;
  std::deque<PacketBuffer*> pending_tx_;  // passed the send stage, not yet taken
  std::deque<PacketBuffer*> ready_rx_;    // passed the receive stage, not yet returned
  std::atomic<uint64_t> tx_overflow_{0};
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_PEER_IMPAIRED_PORT_H_
