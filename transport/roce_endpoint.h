// A RoCEv2 endpoint: one port, the queue pairs behind it, and the receive
// path that parses, checks and demultiplexes every packet.
//
//   auto udp = *UdpPort::Create({.local = *ParseIpv4Endpoint("127.0.0.1:0")});
//   RoceEndpoint ep(std::move(udp), RealClock());
//   RcQueuePair* qp = *ep.CreateRcQp();
//   ... Modify(qp) to RTS with the peer's address/QPN/PSN ...
//   qp->PostSend(bytes, 1);
//   while (...) ep.Progress(absl::Milliseconds(10));   // receive, dispatch, send
//
// Receive path per packet: parse (bounds, opcode, pad, ICRC over the
// datagram's addresses) -> destination QP (or every UD QP attached to the
// multicast group the datagram was sent to) -> the QP's own checks (P_Key,
// Q_Key, source, state, PSN). Every drop is counted with its reason, at the
// endpoint (parse results, unknown QP) or at the QP.
//
// Progress() never blocks longer than its timeout and wakes early for QP
// timers (retransmission, RNR wait, pending ACKs). QPs that delay their
// ACKs (RcQpConfig::ack_delay) send them together: when one is due, every
// waiting ACK goes in the same burst.
//
// Determinism: QPs are polled in QPN order, never in hash-table order, so
// the packets of a pass leave in the same order in every process; a seeded
// impairment stage (link_impairment.h) then drops the same packets in every
// run, as the same seed promises.
//
// Thread-safety: an endpoint and its QPs belong to one thread. Counters may
// be read from any thread.
#ifndef NETFOLD_TRANSPORT_ROCE_ENDPOINT_H_
#define NETFOLD_TRANSPORT_ROCE_ENDPOINT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"
#include "transport/port.h"
#include "transport/rc_queue_pair.h"
#include "transport/ud_queue_pair.h"

namespace netfold::transport {

// How long an endpoint knows a destroyed RC QP's peer, and how many such
// QPs at most (RoceEndpointCounters::late_for_destroyed_qp).
inline constexpr int64_t kLateAfterDestroyNs = 10'000'000'000;
inline constexpr size_t kMaxDestroyedRemembered = 4096;

struct RoceEndpointConfig {
  bool check_icrc = true;
  // For ports that cannot see the IPv4 header (kernel sockets, which assume
  // identification 0): accept a packet whose ICRC is right for some IPv4
  // identification (proto::SolveIpv4Identification), as a RoCE NIC's
  // packets are. Weakens the check on such packets from 32 to 16 bits, so
  // off unless a peer is a NIC (docs/verbs.md). Counted in
  // ip_identification_solved.
  bool solve_ip_identification = false;
  // Accept a packet whose ICRC is right for an IPv4 identification below
  // 64: a segment of a peer's UDP GSO send (segment i carries
  // identification i, transport/udp_port.h) that the path cut and the
  // receiving stack handed over alone or in another batch than the one it
  // was sent in. Such a packet's ICRC is checked to 26 bits instead of 32.
  // Counted in ip_identification_solved.
  bool accept_segment_identifications = true;
  uint32_t first_qpn = 0x100;  // QPNs are assigned upwards from here
  size_t burst = 32;           // packets per RecvBurst
};

struct RoceEndpointCounters {
  std::atomic<uint64_t> rx_packets{0};
  std::atomic<uint64_t> tx_packets{0};
  std::atomic<uint64_t> tx_dropped{0};  // the port would not take them
  // Packets accepted by RoceEndpointConfig::solve_ip_identification (their
  // sender's IPv4 identification was not 0).
  std::atomic<uint64_t> ip_identification_solved{0};
  std::array<std::atomic<uint64_t>, proto::kNumRoceParseResults> parse_drops{};
  QpDropCounters drops;  // kUnknownQp and kNoBuffer at the endpoint level
  // ACKs and NAKs from the peer of an RC QP destroyed less than
  // kLateAfterDestroyNs ago, to that QP: the acknowledgement of a last
  // message that crossed the destruction. Discarded as a NIC does for a QP
  // it no longer has, and not counted as unknown_qp: an orderly end of
  // every job leaves some. Anything else to a destroyed QP is unknown_qp.
  std::atomic<uint64_t> late_for_destroyed_qp{0};

  uint64_t ParseDrops(proto::RoceParseResult r) const {
    return parse_drops[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
};

class RoceEndpoint {
 public:
  RoceEndpoint(std::unique_ptr<Port> port, const Clock& clock,
               const RoceEndpointConfig& config = {});
  RoceEndpoint(const RoceEndpoint&) = delete;
  RoceEndpoint& operator=(const RoceEndpoint&) = delete;
  ~RoceEndpoint();

  // Creates a QP in RESET with a fresh QPN. The endpoint owns it; the pointer
  // is valid until DestroyQp or the endpoint's destruction.
  absl::StatusOr<RcQueuePair*> CreateRcQp(const RcQpConfig& config = {});
  // Creates a QP in RESET with the QPN `qpn`, for peers configured with fixed
  // QPNs (static configurations). InvalidArgument if `qpn` is reserved
  // (0, 1) or not a 24-bit unicast QPN; AlreadyExists if an RC or UD QP has
  // it. Automatic numbering (CreateRcQp/CreateUdQp) skips taken QPNs.
  absl::StatusOr<RcQueuePair*> CreateRcQpWithQpn(uint32_t qpn, const RcQpConfig& config = {});
  absl::StatusOr<UdQueuePair*> CreateUdQp(const UdQpConfig& config);
  // NotFound if there is no such QP. Detaches a UD QP from its groups.
  absl::Status DestroyQp(uint32_t qpn);
  RcQueuePair* FindRcQp(uint32_t qpn);
  UdQueuePair* FindUdQp(uint32_t qpn);

  // Delivers datagrams sent to multicast `group` (ip:port) to UD QP `qpn`;
  // the port joins the group with the first QP attached to it.
  absl::Status AttachMulticast(uint32_t qpn, const Ipv4Endpoint& group);
  absl::Status DetachMulticast(uint32_t qpn, const Ipv4Endpoint& group);

  // Receives for at most `timeout` (less if a QP needs attention sooner),
  // hands every packet to its QP, then sends what the QPs have to send.
  // Returns the number of packets received.
  size_t Progress(absl::Duration timeout);
  // Progress() without its last step: what the received packets call for
  // (ACKs, NAKs) waits for the caller's Flush(), to leave in one burst with
  // what the caller sends in answer to the messages (one system call
  // instead of two). For owners that always Flush after handling messages.
  size_t Receive(absl::Duration timeout);
  // Sends what the QPs have to send. Receives only if a QP timer is due
  // (packets that arrived while the owner was away are read before a
  // retransmission timer fires or a delayed ACK leaves), without waiting;
  // not for packets merely queued to send.
  void Flush();
  // When a QP next needs Progress() without new input (clock nanoseconds).
  std::optional<int64_t> NextTimerNs() const;
  // How long the owner may sleep on port().wait_fd() before the next
  // Receive, at most `limit` (Port::SleepBound): zero if Flush read packets
  // not yet handed over, else until the next QP timer or what the port holds.
  absl::Duration SleepBound(absl::Duration limit);
  // Whether packets may be waiting that the last Receive did not take
  // (Port::MayHoldMore), or Flush read packets the owner has not seen.
  bool MayHoldMore() const { return flushed_receives_ || port_->MayHoldMore(); }

  Port& port() { return *port_; }
  Ipv4Endpoint local() const { return port_->local(); }
  const Clock& clock() const { return clock_; }
  const RoceEndpointCounters& counters() const { return counters_; }
  size_t num_qps() const { return rc_qps_.size() + ud_qps_.size(); }

 private:
  uint32_t NextQpn();
  // Whether `p`, an ACK or NAK to a QPN no QP has, comes from the peer an
  // RC QP of that QPN had when it was destroyed, less than
  // kLateAfterDestroyNs ago: its address, and the source port the QP had
  // bound (RcQueuePair::Admits), if any.
  bool LateForDestroyedQp(uint32_t qpn, const proto::RocePacketView& view,
                          const PacketBuffer& p);
  // An RC request netfold does not implement, to an RC QP of ours: the QP
  // answers it (NAK invalid request). False if it is not one (the caller
  // counts the parse drop).
  bool DispatchUnsupportedRequest(const PacketBuffer& p);
  void Dispatch(PacketBuffer* p);
  // Whether `p`'s ICRC is right for an IPv4 identification it may have left
  // with (RoceEndpointConfig): kOk, kTruncated or kBadIcrc; `solved` when
  // that was neither 0 nor its place in the batch. One CRC pass whatever
  // the identification.
  proto::RoceParseResult CheckIcrc(PacketBuffer& p, bool* solved);
  // `limit`, or less if a QP timer falls due sooner.
  absl::Duration UntilNextTimer(absl::Duration limit) const;
  // Reads what is queued, without waiting, if a QP timer is due
  // (RcQueuePair::NextExpiryNs).
  size_t ReceiveIfTimerDue();
  // Polls every QP that has something to send and sends it in one burst.
  void SendDue();

  std::unique_ptr<Port> port_;
  const Clock& clock_;
  RoceEndpointConfig config_;
  uint32_t next_qpn_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<RcQueuePair>> rc_qps_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<UdQueuePair>> ud_qps_;
  // The same QPs sorted by QPN: every pass over all of them goes in this
  // order (see "Determinism" above); the maps serve lookups.
  std::vector<RcQueuePair*> rc_in_order_;
  std::vector<UdQueuePair*> ud_in_order_;
  absl::flat_hash_map<Ipv4Endpoint, std::vector<uint32_t>> groups_;
  std::vector<PacketBuffer*> rx_;
  bool flushed_receives_ = false;  // Flush read packets the owner has not seen
  std::vector<PacketBuffer*> tx_;
  // RC QPs destroyed lately, by QPN: their peer's address, the source port
  // it sent from (if the QP had bound one), when (clock nanoseconds), and
  // the destruction's number. At most kMaxDestroyedRemembered, the oldest
  // forgotten first: destroyed_order_ holds (QPN, number) in order of
  // destruction, and an entry goes only if its number is still the QPN's.
  struct Destroyed {
    uint32_t peer_ip = 0;
    std::optional<uint16_t> peer_port;
    int64_t at_ns = 0;
    uint64_t number = 0;
  };
  absl::flat_hash_map<uint32_t, Destroyed> destroyed_;
  std::deque<std::pair<uint32_t, uint64_t>> destroyed_order_;
  uint64_t destructions_ = 0;
  RoceEndpointCounters counters_;
  proto::IcrcIdentificationTable icrc_ids_;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_ROCE_ENDPOINT_H_
