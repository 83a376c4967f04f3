// A Port decorator with seeded link faults: a LinkImpairment stage on the
// send path and one on the receive path of another port, for each peer the
// port exchanges datagrams with, with counters per peer, as a physical
// switch has per port. One link (a host's link to its leaf switch, the two
// ends of a test) is the special case of one peer.
//
//   // One link: every datagram goes through the same two stages.
//   auto port = std::make_unique<ImpairedPort>(std::move(udp), ImpairmentConfig{},
//                                              *ParseImpairment("drop=0.1,seed=3"),
//                                              RealClock());
//   port->SetReceiveImpairment(*ParseImpairment("down=1"));   // at run time
//
//   // Per peer: a switch has one data-plane UDP address, and its "ports"
//   // toward each host, child and parent are virtual.
//   auto port = std::make_unique<ImpairedPort>(std::move(udp), RealClock());
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
// With max_peers 1 every datagram belongs to that overflow peer: that is
// the one-link port, whose constructor creates it up front.
//
// Seeds. With more than one peer, a configuration set for many peers at once
// (the default, SetAllImpairment, Set{Send,Receive}Impairment) gives each
// peer the seed DeriveSeed(seed, peer), so peers do not lose packets in
// lockstep, and the same seed still gives the same faults. A configuration
// set for one peer, and every configuration of a one-link port, keeps its
// seed as given.
//
// Held packets. Packets the inner port would not take are kept and retried
// on the next call (bounded by kMaxPendingTx; beyond that they are dropped
// and counted in num_tx_overflow, as a full transmit queue does). RecvBurst
// waits no longer than the next held (delayed, reordered, rate-limited)
// packet's due time, so held packets come out on time.
//
// Thread-safety: as for every Port, RecvBurst/SendBurst/Flush belong to one
// thread; Set*Impairment, Snapshot and the counters may be used from any
// thread.
#ifndef NETFOLD_TRANSPORT_IMPAIRED_PORT_H_
#define NETFOLD_TRANSPORT_IMPAIRED_PORT_H_

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
  Ipv4Endpoint peer;  // 0.0.0.0:0 is the overflow peer (the link of a one-link port)
  ImpairmentConfig send;
  ImpairmentConfig receive;
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  // The stages' counters, copied (ImpairmentCounters holds atomics).
  struct Stage {
    uint64_t packets_in = 0, packets_out = 0;
    uint64_t dropped_down = 0, dropped_random = 0, dropped_burst = 0, dropped_rate = 0;
    uint64_t duplicated = 0, corrupted = 0, reordered = 0, delayed = 0;
    uint64_t dropped() const {
      return dropped_down + dropped_random + dropped_burst + dropped_rate;
    }
  };
  Stage send_stage;
  Stage receive_stage;
};

class ImpairedPort : public Port {
 public:
  static constexpr size_t kMaxPendingTx = 4096;
  static constexpr size_t kDefaultMaxPeers = 4096;

  // Stages per peer, from the defaults (the identity until set).
  ImpairedPort(std::unique_ptr<Port> inner, const Clock& clock,
               size_t max_peers = kDefaultMaxPeers);
  // One link: `send` and `receive` for every datagram, seeds as given.
  ImpairedPort(std::unique_ptr<Port> inner, const ImpairmentConfig& send,
               const ImpairmentConfig& receive, const Clock& clock);
  ~ImpairedPort() override;
  ImpairedPort(const ImpairedPort&) = delete;
  ImpairedPort& operator=(const ImpairedPort&) = delete;

  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  // As its inner port: a packet a stage reads or holds, or that waits for
  // the inner port, is made whole first.
  bool TakesExternalBytes() const override { return inner_->TakesExternalBytes(); }
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
  bool CanWake() const override { return inner_->CanWake(); }
  int wait_fd() const override { return inner_->wait_fd(); }
  absl::Duration SleepBound(absl::Duration limit) override;
  // What the stages hold ready or due now, or what the inner port may hold.
  bool MayHoldMore() const override;
  void ReserveReceive(size_t bytes) override { inner_->ReserveReceive(bytes); }
  // Placed packets pass a stage that is not the identity made whole
  // (LinkImpairment::Process), so none is held past the RecvBurst that
  // read it.
  void SetReceivePlacer(ReceivePlacer* placer) override { inner_->SetReceivePlacer(placer); }

  // The configuration of peers created from now on. Existing peers keep
  // theirs.
  void SetDefaultImpairment(LinkDirection direction, const ImpairmentConfig& config);
  // The default and every existing peer.
  void SetAllImpairment(LinkDirection direction, const ImpairmentConfig& config);
  // Every link in one direction: SetAllImpairment(kSend / kReceive, config).
  void SetSendImpairment(const ImpairmentConfig& config) {
    SetAllImpairment(LinkDirection::kSend, config);
  }
  void SetReceiveImpairment(const ImpairmentConfig& config) {
    SetAllImpairment(LinkDirection::kReceive, config);
  }
  // One peer (created if new; its seed as given). ResourceExhausted if the
  // peer is new and max_peers are already tracked (always, on a one-link
  // port).
  absl::Status SetPeerImpairment(const Ipv4Endpoint& peer, LinkDirection direction,
                                 const ImpairmentConfig& config);

  // The stages of a one-link port (its counters, its held packets); must
  // not be called on a port with peers. Read-only; any thread.
  const LinkImpairment& send_stage() const;
  const LinkImpairment& receive_stage() const;

  ImpairmentConfig default_send() const;
  ImpairmentConfig default_receive() const;
  // Every tracked peer, ordered by address.
  std::vector<PeerLinkSnapshot> Snapshot() const;
  // One peer, if tracked.
  std::optional<PeerLinkSnapshot> SnapshotPeer(const Ipv4Endpoint& peer) const;
  size_t num_peers() const;
  // Whether any impairment was ever set on this port (Set*Impairment,
  // even to none): what bypasses the port must stop doing so.
  bool ever_impaired() const { return ever_impaired_.load(std::memory_order_acquire); }
  uint64_t num_tx_overflow() const { return tx_overflow_.load(std::memory_order_relaxed); }
  Port& inner() { return *inner_; }

  // Sends held packets that are due. Called by RecvBurst and SendBurst; call
  // it from an idle loop if neither runs.
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
  // `config` for `peer` when applied to many peers: its seed derived, unless
  // the port has one link.
  ImpairmentConfig ForPeer(const ImpairmentConfig& config, const Ipv4Endpoint& peer) const;
  static PeerLinkSnapshot SnapshotOf(const Peer& p);
  // Takes `packets` through the send (`sending`) or receive stages of their
  // peers (destination or source), counting them per peer first; appends
  // what passes now to `out`. Data-plane thread.
  void ThroughStages(std::span<PacketBuffer* const> packets, bool sending,
                     std::deque<PacketBuffer*>* out);
  void TransmitPending();
  void ReleaseHeld();
  std::optional<int64_t> NextDueNs() const;
  // The peer of `address` for the data-plane thread (creates it if new).
  Peer* DataPlanePeer(const Ipv4Endpoint& address);
  // Picks up peers another thread added (data-plane thread).
  void RefreshDataPlanePeers();

  std::atomic<bool> woken_{false};  // Wake(): stop waiting
  std::atomic<bool> ever_impaired_{false};
  std::unique_ptr<Port> inner_;
  const Clock& clock_;
  const size_t max_peers_;
  // The one peer of a one-link port (created by its constructor), else null.
  Peer* link_ = nullptr;

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

#endif  // NETFOLD_TRANSPORT_IMPAIRED_PORT_H_
