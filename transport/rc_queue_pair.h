// A reliable-connected (RC) queue pair of the user-space RoCEv2 engine: the
// requester (SEND messages, go-back-N) and the responder (ACK/NAK, in-order
// delivery) of one connection. The responder's half is rc_responder.cc, the
// rest rc_queue_pair.cc.
//
//   RcQueuePair qp(qpn, RcQpConfig{}, RealClock());
//   qp.Modify(QpState::kInit, attrs);   // P_Key
//   qp.Modify(QpState::kRtr, attrs);    // remote address, remote QPN, rq_psn, MTU
//   qp.Modify(QpState::kRts, attrs);    // sq_psn, timeout, retry count
//   qp.PostSend(message, /*wr_id=*/7);  // copied; completes when ACKed
//   ... the endpoint calls OnPacket() for packets to this QP and Poll() to
//   ... collect packets to send; the application polls completions:
//   SendCompletion sc;  while (qp.PollSendCompletion(&sc)) ...
//   RecvMessage m;      while (qp.PeekRecv(&m)) { use(m.data); qp.PopRecv(); }
//
// The protocol (IBTA Vol. 1, chapter 9, restricted to SEND):
// - A message longer than the path MTU goes out as SEND_FIRST, MIDDLE...,
//   LAST, each full-MTU but the last; otherwise as SEND_ONLY. Each packet
//   takes the next 24-bit PSN (wrapping). The requester asks for an ACK
//   (AckReq) on the last packet of every message and every
//   `ack_req_interval` packets, and keeps at most `max_outstanding_packets`
//   unacknowledged.
// - The responder accepts only the expected PSN. It ACKs coalesced: one ACK
//   per Poll() covering everything received so far, and with `ack_delay`
//   the ACK waits that long for later packets to cover them too (a result
//   that answers a request does not need the ACK to arrive first; fewer
//   ACKs are fewer wakeups of the requester). NAKs and re-ACKs never wait.
//   A PSN ahead of the expected one gets one NAK (PSN sequence error) until
//   the gap is filled; a duplicate gets a re-ACK. A message that cannot be
//   queued because the receive queue is full gets an RNR NAK; the requester
//   waits the RNR timer and resends.
// - The requester goes back to the first unacknowledged PSN on a NAK, on an
//   RNR NAK (after the RNR delay), and when no ACK arrives within `timeout`;
//   each timeout doubles the timeout (up to `max_backoff` times). After a
//   timeout it sends only that first packet (asking for an ACK) until an
//   ACK or NAK answers: a receiver that was merely slow, or whose socket
//   was full, is not buried under a whole window of duplicates, and its
//   answer says where to go on from (as TCP restarts from one segment
//   after a retransmission timeout). An answer that acknowledges packets
//   sent after that first one (sent once, before the timeout) shows the
//   timeout was spurious: the receiver was slow, not losing packets
//   (F-RTO, RFC 5682). The requester then goes on after the last packet it
//   ever sent instead of sending the rest of the window again; a packet
//   that was really lost among them is NAKed when a later one arrives, or
//   found by the next timeout (spurious_timeouts counts these). After
//   `retry_count` retransmissions without progress (or `rnr_retry` RNR NAKs;
//   7 means unlimited, as in verbs) the QP goes to ERROR, every posted
//   message completes with that error, and error() says why.
// - An invalid request (bad opcode sequence, a message over the limit) is
//   NAKed with "invalid request" and puts the responder's QP in ERROR, as
//   IBTA requires; the requester that receives that NAK goes to ERROR too.
//
// Posted messages are copied into buffers the QP keeps and reuses, so the
// caller's memory is free on return and the steady state allocates nothing;
// or, posted with PostSendGatherReferencing, one piece of a one-packet
// message is read where the caller keeps it until the message completes or
// the caller releases it (ReleaseReferences), and a port that takes
// external bytes sends it from there: the message is not copied at all.
// Received messages are assembled in a ring of slots, or, with
// zero_copy_receive, a one-packet message stays in its packet buffer.
//
// Thread-safety: a QP belongs to the thread that runs its endpoint. Not
// thread-safe; counters may be read from any thread.
#ifndef NETFOLD_TRANSPORT_RC_QUEUE_PAIR_H_
#define NETFOLD_TRANSPORT_RC_QUEUE_PAIR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/aligned_buffer.h"
#include "base/clock.h"
#include "proto/roce_packet.h"
#include "transport/ipv4_endpoint.h"
#include "transport/queue_pair_common.h"

namespace netfold::transport {

// Limits fixed when the QP is created.
struct RcQpConfig {
  uint32_t max_send_queue = 256;           // posted, not yet completed messages
  uint32_t max_recv_queue = 256;           // received, not yet popped messages
  uint32_t max_message_size = 1u << 20;    // bytes, both directions
  uint32_t max_outstanding_packets = 256;  // the go-back-N window
  uint32_t ack_req_interval = 32;          // AckReq at least every N packets
  // Responder: how long a positive ACK may wait to cover later packets as
  // well (0: sent at the next Poll). Keep it well below the requester's
  // ACK timeout. At most `ack_coalesce_packets` packets wait for one ACK.
  absl::Duration ack_delay = absl::ZeroDuration();
  uint32_t ack_coalesce_packets = 16;
  // Received messages start this many bytes past a cache line (< 64):
  // e.g. 64 - 40 puts the elements after a 40-byte aggregation header on a
  // line, where reduce/'s kernels run fastest.
  uint32_t recv_line_offset = 0;
  // A message of one packet (SEND_ONLY) stays in the packet buffer it
  // arrived in (no copy; recv_line_offset does not apply) until PopRecv,
  // when the endpoint hands the buffer over (OnPacket with the buffer).
  // For owners that pop what a receive brought before the next one: a
  // held message holds its buffer, and that of the GRO batch it came in.
  bool zero_copy_receive = false;
  uint8_t min_rnr_timer = 12;              // RNR NAK timer code we send (0.64 ms)
  uint32_t max_backoff = 6;                // timeout doubles at most 6 times (x64)
  // The QP fails only once it has also gone this long without progress,
  // retrying at the capped backoff until then: a peer that is a process on
  // a shared machine may not run for a while (0: retry_count alone).
  absl::Duration min_failure_time = absl::ZeroDuration();
};

// What verbs' ibv_modify_qp carries for each transition.
struct RcQpAttributes {
  uint16_t pkey = 0xFFFF;                   // INIT
  Ipv4Endpoint remote;                      // RTR: the peer's address
  uint32_t remote_qpn = 0;                  // RTR
  uint32_t rq_psn = 0;                      // RTR: first PSN expected from the peer
  uint32_t path_mtu = 4096;                 // RTR: 256, 512, 1024, 2048 or 4096
  uint32_t sq_psn = 0;                      // RTS: first PSN we send
  absl::Duration timeout = absl::Milliseconds(4);  // RTS: ACK timeout
  uint8_t retry_count = 7;                  // RTS: 0..7 retransmissions
  uint8_t rnr_retry = 7;                    // RTS: 0..7, 7 = unlimited
};

struct SendCompletion {
  uint64_t wr_id = 0;
  absl::Status status;  // OK, or why the message was not delivered
};

struct RecvMessage {
  std::span<const uint8_t> data;  // valid until PopRecv() or the QP dies
  std::optional<uint32_t> imm;
};

struct RcQpCounters {
  std::atomic<uint64_t> messages_sent{0};      // completed with OK
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> packets_sent{0};       // first transmissions
  std::atomic<uint64_t> packets_retransmitted{0};
  std::atomic<uint64_t> bytes_sent{0};         // payload bytes, first transmissions
  std::atomic<uint64_t> packets_received{0};   // accepted in sequence
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> acks_sent{0};
  std::atomic<uint64_t> acks_received{0};
  std::atomic<uint64_t> naks_sent{0};
  std::atomic<uint64_t> naks_received{0};
  std::atomic<uint64_t> rnr_naks_sent{0};
  std::atomic<uint64_t> rnr_naks_received{0};
  std::atomic<uint64_t> timeouts{0};
  // Of those, timeouts the receiver's answer showed to be spurious: packets
  // sent once, before the timeout, had arrived (the rest of the window was
  // not sent again).
  std::atomic<uint64_t> spurious_timeouts{0};
  QpDropCounters drops;

  // Adds every count to `into`'s (a switch's total over the QPs it has had).
  void AddTo(RcQpCounters& into) const;
};

class RcQueuePair {
 public:
  RcQueuePair(uint32_t qpn, const RcQpConfig& config, const Clock& clock);
  RcQueuePair(const RcQueuePair&) = delete;
  RcQueuePair& operator=(const RcQueuePair&) = delete;
  ~RcQueuePair();

  // Moves the QP to `target`, taking the attributes that transition uses:
  // RESET->INIT, INIT->RTR, RTR->RTS as verbs does; any state -> ERROR or
  // RESET. Returns FailedPrecondition for another transition and
  // InvalidArgument for a bad attribute (MTU, 24-bit fields, P_Key).
  absl::Status Modify(QpState target, const RcQpAttributes& attrs);

  // Queues `message` (copied) for sending; `wr_id` comes back in its
  // completion. Requires RTS. FailedPrecondition in another state (ERROR:
  // the message includes why the QP failed), ResourceExhausted when
  // max_send_queue messages are outstanding, InvalidArgument for a message
  // over max_message_size.
  absl::Status PostSend(std::span<const uint8_t> message, uint64_t wr_id,
                        std::optional<uint32_t> imm = std::nullopt);
  // The same for a message gathered from `pieces` in order (a verbs
  // scatter/gather list): copied once, straight into the QP's buffer.
  absl::Status PostSendGather(std::span<const std::span<const uint8_t>> pieces, uint64_t wr_id,
                              std::optional<uint32_t> imm = std::nullopt);
  // PostSendGather, but pieces[referenced] is not copied when the message
  // is one packet: the QP reads it where it is, as a NIC reads a send from
  // registered memory, when it builds the packet (a port that takes
  // external bytes, Port::TakesExternalBytes, sends them from there: no
  // copy at all) and for every retransmission, until the message
  // completes or ReleaseReferences covers it. The caller keeps those bytes
  // unchanged and alive until then. A longer message is copied whole.
  absl::Status PostSendGatherReferencing(std::span<const std::span<const uint8_t>> pieces,
                                         size_t referenced, uint64_t wr_id,
                                         std::optional<uint32_t> imm = std::nullopt);
  // Copies the referenced bytes of every queued message whose referenced
  // piece lies inside `memory` into the QP's own buffer: from then on the
  // caller may change or free `memory`. Returns how many bytes it copied
  // (those of messages not yet acknowledged).
  size_t ReleaseReferences(std::span<const uint8_t> memory);

  // Makes room for `messages` one-packet messages in flight (at most
  // max_send_queue) before they are posted: their send queue entries and
  // frames, the frames' memory written once. A NIC's buffers are
  // registered, and so in memory, before the first send; grown on demand,
  // the first long operation took each new page's fault (~400 per rank
  // at a window of 128, 10 us each on a VM: docs/performance.md, "The
  // first long operation"). Requires RTS (the frames follow the path MTU).
  absl::Status ReserveSends(uint32_t messages);
  // Send queue entries with their frames, in use or free: only grows.
  size_t num_send_buffers() const { return wqe_storage_.size(); }
  // Frames the send queue has allocated since it was made, reserved or on
  // demand: steady once the reservation covers what is in flight.
  uint64_t num_send_frames_made() const { return send_frames_made_; }

  // Handles a packet the endpoint parsed and addressed to this QP. `from` is
  // the datagram's source: it must be the connected peer's address and,
  // once the QP has taken a packet, the UDP source port of that first
  // packet (a NIC picks its source port per QP; it does not change). Other
  // sources are dropped as wrong_source. `packet` stays owned by the caller.
  void OnPacket(const proto::RocePacketView& packet, const Ipv4Endpoint& from);
  // The same for a packet the caller holds in `buffer` (`packet` is its
  // parsed view; the source is buffer->src). With zero_copy_receive, a
  // one-packet message is kept in `buffer`: returns true, the buffer is the
  // QP's. Otherwise false and the buffer stays the caller's.
  bool OnPacket(const proto::RocePacketView& packet, PacketBuffer* buffer);
  // A valid packet (ICRC checked) with an RC request opcode netfold does not
  // implement (RDMA WRITE/READ, atomics, SEND with invalidate): after the
  // same source, P_Key and state checks as OnPacket, it is dropped and
  // counted as unsupported_opcode, whatever its PSN: no answer, the
  // expected PSN and the QP's state unchanged (docs/protocol.md). IBTA would
  // NAK it and put the QP in ERROR; that would let one packet stop a job.
  void OnUnsupportedRequest(uint8_t opcode, uint16_t pkey, uint32_t psn,
                            const Ipv4Endpoint& from);

  // Appends the packets to send now (ACK/NAK, new and retransmitted SENDs)
  // to `sink`, built with ICRCs for `local` -> remote. Call it after
  // delivering a burst and whenever NextTimerNs() has passed.
  void Poll(const Ipv4Endpoint& local, PacketSink sink);

  // Asks whether the responder is there: at the next Poll, a SEND of no
  // payload with the PSN before the oldest unacknowledged one. The
  // responder takes it for a duplicate and acknowledges it again without
  // delivering anything (IBA 9.9.2.1: duplicates are answered, never
  // executed twice): an ACK of exactly that PSN sets keepalive_answered().
  // It is not a message and has no completion. Sent again, it asks again
  // (keepalive_answered() stays true once set). FailedPrecondition outside
  // RTS.
  absl::Status SendKeepalive();
  // An ACK of the last keepalive's PSN came (since the first SendKeepalive
  // after a RESET).
  bool keepalive_answered() const { return keepalive_answered_; }

  // When Poll() has something to do without new input (retransmission
  // timer, RNR wait, pending ACK); nullopt if nothing is pending.
  std::optional<int64_t> NextTimerNs() const;
  // NextTimerNs() of the timers alone (retransmission, RNR wait, delayed
  // ACK): what reading the packets that have arrived may answer first.
  // Packets queued to send and a pending NAK are not timers: reading
  // first changes nothing for them.
  std::optional<int64_t> NextExpiryNs() const;
  // True if Poll() would send something at `now` (clock nanoseconds).
  bool HasWork(int64_t now) const;
  // A delayed positive ACK is waiting and its delay has passed at `now`.
  bool AckDue(int64_t now) const { return ack_pending_ && now >= ack_due_ns_; }
  // Makes a waiting ACK, if any, go out at the next Poll (the endpoint
  // sends every waiting ACK together when one is due).
  void ExpediteAck(int64_t now) {
    if (ack_pending_) ack_due_ns_ = std::min(ack_due_ns_, now);
  }

  bool PollSendCompletion(SendCompletion* out);
  // The oldest received message, if any, without removing it.
  bool PeekRecv(RecvMessage* out) const;
  void PopRecv();
  // PopRecv for a message its owner keeps: removes the oldest message and
  // hands over the packet buffer holding it (zero_copy_receive), which the
  // caller frees (PacketPool::Free); PeekRecv's data stays valid until
  // then. nullptr, and nothing removed, when that message is not held in
  // a packet buffer (zero_copy_receive off, or several packets) or there
  // is none.
  PacketBuffer* TakeRecv();

  uint32_t qpn() const { return qpn_; }
  QpState state() const { return state_; }
  // Why the QP is in ERROR (OK otherwise).
  const absl::Status& error() const { return error_; }
  const RcQpAttributes& attributes() const { return attrs_; }
  const RcQpCounters& counters() const { return counters_; }
  // The peer's UDP source port the QP is bound to; nullopt until the QP
  // has taken a packet after RTR.
  std::optional<uint16_t> bound_source_port() const {
    return source_port_bound_ ? std::optional<uint16_t>(source_port_) : std::nullopt;
  }
  // Messages posted and not yet completed.
  size_t num_send_queued() const { return sq_.size(); }
  size_t num_recv_queued() const { return rq_count_; }
  // Packets sent and not yet acknowledged.
  uint32_t num_outstanding() const;

 private:
  // A posted message, laid out as the packets it goes out in: packet k's
  // payload at PayloadOffset(k) of `frames`, with room before it for the
  // headers and after it for pad and ICRC. The first transmission of a
  // packet writes them around the payload and sends a view of the frame
  // (no copy); retransmissions copy the payload into a packet of their own.
  struct SendWqe {
    uint64_t wr_id = 0;
    PacketBuffer* frames = nullptr;  // a heap buffer (PacketPool::NewHeapBuffer)
    size_t size = 0;                 // message bytes
    std::optional<uint32_t> imm;
    uint32_t first_psn = 0;
    uint32_t num_packets = 0;
    // PostSendGatherReferencing: the message's bytes [referenced_at,
    // referenced_at + referenced_len) are read from `referenced`, not from
    // `frames` (a one-packet message); nullptr once copied there.
    const uint8_t* referenced = nullptr;
    uint32_t referenced_at = 0;
    uint32_t referenced_len = 0;
  };
  // A new send queue entry, owned by wqe_storage_.
  SendWqe* NewWqe();
  // Gives `w` frames of at least `frames_bytes` it may write (its own, not
  // one whose packets are still queued); true if they are new.
  bool FitFrames(SendWqe* w, size_t frames_bytes);
  bool EmitKeepalive(const Ipv4Endpoint& local, PacketSink sink);
  // A packet of `spec`'s headers alone (an ACK, a keepalive) to the peer.
  bool EmitHeaderOnly(const Ipv4Endpoint& local, PacketSink sink, proto::RocePacketSpec spec);
  struct RecvSlot {
    LineOffsetVector<0> data;  // recv_line_offset bytes of pad, then the message
    std::optional<uint32_t> imm;
    // zero_copy_receive: the packet buffer holding the message (`held_data`)
    // instead of `data`.
    PacketBuffer* held = nullptr;
    std::span<const uint8_t> held_data;
  };

  void EnterError(absl::Status why);
  // Removes the oldest received message (there is one) and returns the
  // packet buffer holding it, if any, for PopRecv to free or TakeRecv to
  // hand over.
  PacketBuffer* DequeueRecv();
  // Requester side.
  void HandleAck(const proto::RocePacketView& packet, const Ipv4Endpoint& from);
  void AckUpTo(uint32_t psn);  // PSNs up to and including psn are delivered
  void GoBackTo(uint32_t psn);
  bool TransmitOne(const Ipv4Endpoint& local, PacketSink sink);
  // Where packet k of a message starts its payload in SendWqe::frames, and
  // the frame bytes a message of `packets` packets needs.
  size_t PayloadOffset(uint32_t k) const;
  size_t FramesBytes(uint32_t packets) const;
  // Packet k of `w` (`len` payload bytes) as `spec` describes it: on its
  // first transmission a view of its frame, else (or without a free view
  // header) a copy from `pool`; nullptr (counted, or the QP failed) if
  // neither could be had.
  PacketBuffer* BuildSend(const proto::RocePacketSpec& spec, SendWqe& w, uint32_t k,
                          size_t len, const proto::IcrcAddresses& addrs, bool first_transmission,
                          const PacketSink& sink);
  // Posts `pieces` as a message, copied but for pieces[*referenced].
  absl::Status Post(std::span<const std::span<const uint8_t>> pieces, uint64_t wr_id,
                    std::optional<uint32_t> imm, std::optional<size_t> referenced);
  // Writes the referenced bytes of `w` into its frame (nothing if none).
  void CopyReferenced(SendWqe& w);
  // Responder side.
  bool Receive(const proto::RocePacketView& packet, const Ipv4Endpoint& from,
               PacketBuffer* buffer);
  // True if it kept `buffer` (zero_copy_receive; nullptr: copy).
  bool HandleSend(const proto::RocePacketView& packet, const Ipv4Endpoint& from,
                  PacketBuffer* buffer);
  void FreeHeldReceives();
  // The checks every packet to the QP passes first (counted drops if not):
  // state, the peer's address (and bound source port), P_Key.
  bool Admits(uint16_t pkey, const Ipv4Endpoint& from);
  // Binds the QP to `from`'s UDP source port if it is not bound yet; called
  // for the first packet the QP takes (a request at the expected PSN, an
  // ACK or NAK inside the window).
  void BindSourcePort(const Ipv4Endpoint& from) {  // inline: every packet's
    if (source_port_bound_) return;
    source_port_ = from.port;
    source_port_bound_ = true;
  }
  // Responder PSN check: true for the expected PSN; duplicates are
  // re-ACKed, gaps NAKed once (counted drops).
  bool AcceptPsn(uint32_t psn);
  // Asks for an ACK no later than `delay` from now (earlier requests win).
  void RequestAck(absl::Duration delay);
  void RejectInvalidRequest(QpDropReason reason, absl::Status why);
  bool EmitAck(const Ipv4Endpoint& local, PacketSink sink, const proto::Aeth& aeth,
               uint32_t psn);

  const uint32_t qpn_;
  const RcQpConfig config_;
  const Clock& clock_;
  QpState state_ = QpState::kReset;
  RcQpAttributes attrs_;
  absl::Status error_;
  // The peer's UDP source port, learnt from the first packet taken after
  // RTR; from then on packets from another port are dropped (wrong_source).
  bool source_port_bound_ = false;
  uint16_t source_port_ = 0;

  // Requester.
  std::deque<SendWqe*> sq_;              // in PSN order; front holds una_psn_
  std::vector<std::unique_ptr<SendWqe>> wqe_storage_;
  uint64_t send_frames_made_ = 0;
  std::vector<SendWqe*> free_wqes_;
  uint32_t next_post_psn_ = 0;           // PSN the next posted message starts at
  uint32_t una_psn_ = 0;                 // oldest unacknowledged PSN
  uint32_t send_psn_ = 0;                // next PSN to (re)transmit
  uint32_t max_sent_psn_ = 0;            // one past the highest PSN ever sent
  size_t send_wqe_index_ = 0;            // sq_ index holding send_psn_
  uint32_t packets_since_ack_req_ = 0;
  int64_t retransmit_at_ns_ = -1;        // -1: timer stopped
  int64_t rnr_resume_at_ns_ = -1;        // -1: not waiting on an RNR NAK
  uint32_t retries_ = 0;
  int64_t stalled_since_ns_ = -1;  // the first timeout since the last progress
  uint32_t rnr_retries_ = 0;
  uint32_t backoff_ = 0;
  bool keepalive_pending_ = false;       // SendKeepalive: goes out at the next Poll
  bool keepalive_answered_ = false;
  bool keepalive_out_ = false;           // one went out since the last RESET
  uint32_t keepalive_psn_ = 0;           // the PSN the last one went out with
  bool probing_ = false;                 // after a timeout: one packet until answered
  uint32_t probe_psn_ = 0;               // una_psn_ when the last timeout fired
  std::deque<SendCompletion> completions_;

  // Responder.
  uint32_t expected_psn_ = 0;
  uint32_t msn_ = 0;
  bool in_message_ = false;
  bool nak_outstanding_ = false;         // a sequence-error NAK was sent for this gap
  bool ack_pending_ = false;
  int64_t ack_due_ns_ = 0;               // when the pending ACK goes out
  int64_t ack_due_delay_ns_ = 0;         // the delay ack_due_ns_ was set with
  uint32_t packets_unacked_ = 0;         // accepted since the last ACK or NAK
  bool nak_pending_ = false;
  std::optional<proto::Aeth> pending_nak_;
  absl::Status fatal_after_nak_;         // invalid request: ERROR once the NAK is out
  std::vector<RecvSlot> rq_;             // ring of max_recv_queue slots
  size_t rq_head_ = 0;
  size_t rq_count_ = 0;

  RcQpCounters counters_;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_RC_QUEUE_PAIR_H_
