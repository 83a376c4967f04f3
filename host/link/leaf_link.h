// The data path between one rank and its leaf switch, whatever carries it:
// one RC connection for requests (and for results when a group delivers over
// RC), one UD queue pair attached to each group's multicast address for
// results. Two implementations: `soft` (netfold's own RoCEv2 engine over a
// UDP socket, soft_leaf_link.h) and `verbs` (libibverbs on an RDMA NIC or
// Soft-RoCE, verbs_leaf_link.h). The group engine (host/group_engine.h) sits
// above either and owns chunking, the window and repair.
//
//   std::unique_ptr<LeafLink> link = ...;          // INIT: local end known
//   attach.endpoint = {link->address(), link->qpn(), psn};   // to the manager
//   link->Connect({.remote = switch_end, .remote_qpn = ..., .rq_psn = ...,
//                  .sq_psn = psn, .pkey = job_pkey, .qkey = job_qkey});
//   link->AttachMulticast(group_address, root_switch_data_address);
//   link->PostRequest(header, elements, tag);      // ResourceExhausted: try later
//   link->Progress(timeout, [&](const LinkMessage& m) { ... });
//
// Thread-safety: a link belongs to the thread that drives its context;
// stats() may be called from that thread only; Wake() from any thread.
#ifndef NETFOLD_HOST_LINK_LEAF_LINK_H_
#define NETFOLD_HOST_LINK_LEAF_LINK_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::host {

// A message as a link delivers it: its bytes, except that with a placed
// part, bytes [placed_at, placed_at + placed.size()) are not in `bytes`
// but in `placed`, where the port wrote them straight into the memory
// its receive placer named (the caller's result buffer: the soft link's
// multicast results, transport::ReceivePlacer). Converts from a span: a
// message whole.
struct LinkMessage {
  LinkMessage(std::span<const uint8_t> whole) : bytes(whole) {}  // NOLINT: implicit
  LinkMessage(std::span<const uint8_t> with_hole, std::span<const uint8_t> part, size_t at)
      : bytes(with_hole), placed(part), placed_at(at) {}
  std::span<const uint8_t> bytes;
  std::span<const uint8_t> placed;
  size_t placed_at = 0;
};

// The switch's end of the RC connection and the job's keys, from Attach.
struct LeafPeer {
  transport::Ipv4Endpoint remote;  // the switch's data address
  uint32_t remote_qpn = 0;
  uint32_t rq_psn = 0;  // the switch's first PSN: what this side expects
  uint32_t sq_psn = 0;  // this side's first PSN (sent to the manager)
  uint16_t pkey = 0xffff;
  uint32_t qkey = 0;
  // How long an unacknowledged request waits before it is sent again. The
  // switch delays its ACKs by up to 1 ms (transport.ack_delay_us), and on
  // machines where switches share cores with the ranks its timer can fire
  // late: at 4 ms, `netfold demo` saw up to 14 spurious retransmissions a
  // run, at 8 ms none.
  absl::Duration ack_timeout = absl::Milliseconds(8);
};

struct LeafLinkStats {
  uint64_t tx_bytes = 0;         // on the wire (soft) or posted payload (verbs)
  uint64_t rx_bytes = 0;
  uint64_t retransmissions = 0;  // soft only; a NIC retransmits on its own
  uint64_t packets_dropped = 0;  // received and discarded, every reason
  // Of those, packets to this rank's queue pairs from a sender that is not
  // the switch (another address, or another UDP port of its address):
  // forged results or data (soft only: a NIC counts them as it may).
  uint64_t foreign_packets_dropped = 0;
  // Multicast results the port wrote straight into the caller's buffer,
  // and those read into a place that was not theirs and copied (soft
  // only: transport::PortCounters::rx_placed, rx_place_missed).
  uint64_t results_placed = 0;
  uint64_t results_place_missed = 0;
};

class LeafLink {
 public:
  virtual ~LeafLink() = default;

  // What this rank tells the manager in Attach: its data address
  // ("a.b.c.d:port") and the QPN of its RC QP (in RESET until Connect).
  virtual std::string address() const = 0;
  virtual uint32_t qpn() const = 0;
  // The most payload one multicast result datagram may carry to this link
  // (the path MTU for a NIC). Groups whose results would be larger are
  // refused with the reason.
  virtual size_t max_datagram_payload() const = 0;

  // Brings the RC QP through INIT and RTR to RTS toward the switch, and
  // creates the UD QP for the job's Q_Key and P_Key. Once only.
  virtual absl::Status Connect(const LeafPeer& peer) = 0;
  // After the connection failed or the manager detached this rank: takes
  // the RC QP through RESET and connects it to `peer`, the switch's new QP
  // from another Attach (this side's QPN stays, `peer.sq_psn` is new). The
  // UD QP and its multicast attachments stay; status() is OK again. What
  // was queued is dropped. Unimplemented for a link that cannot (verbs).
  virtual absl::Status Reconnect(const LeafPeer& peer) {
    (void)peer;
    return absl::UnimplementedError("this link cannot connect again after a failure");
  }
  // Asks the switch to answer without delivering anything (an RC
  // keepalive: transport::RcQueuePair::SendKeepalive), sent at the next
  // Progress. Unimplemented where Reconnect is.
  virtual absl::Status SendKeepalive() {
    return absl::UnimplementedError("this link sends no keepalives");
  }
  // The switch answered a keepalive since the last Reconnect.
  virtual bool keepalive_answered() const { return false; }
  // Queues one request message: `header`, `elements`, then `tag` (16 bytes
  // with integrity, else empty). The header and tag are copied; the
  // elements may be read where they are (soft: sent from there, as a NIC
  // sends from registered memory) until the message is acknowledged or
  // ReleaseRequests covers them, so the caller keeps them unchanged until
  // then. ResourceExhausted when the send queue is full (call again after
  // Progress); Unavailable once the connection failed.
  virtual absl::Status PostRequest(std::span<const uint8_t> header,
                                   std::span<const uint8_t> elements,
                                   std::span<const uint8_t> tag) = 0;
  // Copies what queued requests still read of `memory` into the link's own
  // buffers: the caller may change or free it from then on. Nothing to do
  // for a link that copied the elements when they were posted (the default).
  virtual void ReleaseRequests(std::span<const uint8_t> memory) { (void)memory; }
  // Receive results sent to `group` (an IPv4 multicast address with the
  // RoCEv2 port) by `source`, the group root switch's data address: results
  // from any other address or port are dropped and counted
  // (foreign_packets_dropped). Detach is best-effort.
  virtual absl::Status AttachMulticast(const transport::Ipv4Endpoint& group,
                                       const transport::Ipv4Endpoint& source) = 0;
  virtual void DetachMulticast(const transport::Ipv4Endpoint& group) = 0;

  // Sends what is queued without waiting.
  virtual void Flush() = 0;
  // Makes room, before they are posted, for `messages` one-packet requests
  // in flight, as a NIC's registered buffers are in memory before the
  // first send. Best-effort; a link whose buffers are fixed does nothing.
  virtual void ReserveRequests(uint32_t messages) { (void)messages; }
  // Waits at most `timeout` for traffic, then hands every received message
  // (RC or multicast) to `deliver`; it is valid during the call only.
  // The link may hold their acknowledgments for the next Flush, which the
  // caller makes after posting what the messages called for: both leave in
  // one burst. Returns how many packets (or completions) it took in.
  virtual size_t Progress(absl::Duration timeout,
                          absl::FunctionRef<void(const LinkMessage&)> deliver) = 0;
  // Hands `deliver` what the link's queue pairs already hold, without
  // reading: for a link that shares another's engine (a data plane's,
  // DataPath::AddPlane), whose read took its packets too. Returns how many
  // messages. The default: a Progress that does not wait.
  virtual size_t Drain(absl::FunctionRef<void(const LinkMessage&)> deliver) {
    return Progress(absl::ZeroDuration(), deliver);
  }
  // Whether its queue pairs hold messages not handed over yet (then a
  // Progress of the link that shares its engine must not wait).
  virtual bool HoldsMessages() const { return false; }
  // After a Progress that took packets in: false if the link knows it took
  // everything that had arrived by then, so that asking again at once
  // would most likely find nothing. The default: more may be waiting.
  virtual bool MayHoldMore() const { return true; }
  // Makes a Progress waiting in another thread return soon (or the next
  // one, if none is waiting). The one call that may come from any thread.
  virtual void Wake() = 0;
  // OK while the RC connection works; the reason once it failed (retries
  // exhausted, the QP in error, the device gone). Failure is final.
  virtual absl::Status status() const = 0;
  virtual LeafLinkStats stats() const = 0;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_LEAF_LINK_H_
