// The responder half of an RC queue pair: the requests it accepts, the PSN
// it expects, and the coalesced ACKs and NAKs it answers with. Split from
// rc_queue_pair.cc, which holds the requester and the queue pair's set-up;
// the class and its contract are in rc_queue_pair.h.

#include "transport/rc_queue_pair.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/counter.h"
#include "base/log.h"
#include "proto/psn.h"

namespace netfold::transport {

using proto::BthOpcode;
using proto::PsnAdd;
using proto::PsnDiff;

void RcQueuePair::RejectInvalidRequest(QpDropReason reason, absl::Status why) {
  counters_.drops.Count(reason);
  pending_nak_ = proto::MakeNak(msn_, proto::NakCode::kInvalidRequest);
  nak_pending_ = true;
  // The NAK still has to go out, so the error is entered after Poll sends it.
  fatal_after_nak_ = std::move(why);
}

void RcQueuePair::RequestAck(absl::Duration delay) {
  const int64_t delay_ns = absl::ToInt64Nanoseconds(delay);
  // The pending ACK is due at the latest `ack_due_delay_ns_` after an
  // earlier reading of the clock, so no later request with as long a
  // delay can bring it forward: no need to read the clock (once per
  // received message otherwise).
  if (ack_pending_ && delay_ns >= ack_due_delay_ns_) return;
  const int64_t due = clock_.NowNanos() + delay_ns;
  if (!ack_pending_ || due < ack_due_ns_) {
    ack_due_ns_ = due;
    ack_due_delay_ns_ = delay_ns;
  }
  ack_pending_ = true;
}

bool RcQueuePair::AcceptPsn(uint32_t psn) {
  const int32_t d = PsnDiff(psn, expected_psn_);
  if (d < 0) {
    counters_.drops.Count(QpDropReason::kDuplicate);
    // The ACK for it may have been lost and the requester is retrying:
    // repeat it now.
    RequestAck(absl::ZeroDuration());
    return false;
  }
  if (d > 0) {
    counters_.drops.Count(QpDropReason::kOutOfSequence);
    if (!nak_outstanding_) {
      pending_nak_ = proto::MakeNak(msn_, proto::NakCode::kPsnSequenceError);
      nak_pending_ = true;
      nak_outstanding_ = true;
    }
    return false;
  }
  if (!fatal_after_nak_.ok()) return false;  // already rejecting an invalid request
  nak_outstanding_ = false;
  return true;
}

bool RcQueuePair::HandleSend(const proto::RocePacketView& packet, const Ipv4Endpoint& from,
                             PacketBuffer* buffer) {
  const proto::Bth& bth = packet.bth;
  if (!AcceptPsn(bth.psn)) return false;
  BindSourcePort(from);
  const BthOpcode op = bth.opcode;
  const bool starts = proto::OpcodeIsFirst(op) || proto::OpcodeIsOnly(op);
  const bool ends = proto::OpcodeIsLast(op) || proto::OpcodeIsOnly(op);
  if (in_message_ == starts) {
    RejectInvalidRequest(QpDropReason::kBadOpcodeSequence, absl::DataLossError(absl::StrFormat(
        "QP 0x%06x: %s at PSN 0x%06x %s a message", qpn_, proto::BthOpcodeName(op), bth.psn,
        in_message_ ? "inside" : "outside")));
    return false;
  }
  if (starts && rq_count_ == rq_.size()) {
    counters_.drops.Count(QpDropReason::kReceiveQueueFull);
    pending_nak_ = proto::MakeRnrNak(msn_, config_.min_rnr_timer);
    nak_pending_ = true;
    nak_outstanding_ = true;  // the rest of the refused message needs no NAK
    BumpCounter(counters_.rnr_naks_sent);
    return false;
  }
  RecvSlot& slot = rq_[(rq_head_ + rq_count_) % rq_.size()];
  // One packet, and a buffer offered: the message stays where it is.
  const bool keep = buffer != nullptr && starts && ends;
  if (starts) {
    // A copied message starts past the pad; a kept one needs no room (nor
    // the allocation a slot's first room costs).
    if (!keep) slot.data.assign(config_.recv_line_offset, 0);
    slot.imm.reset();
  }
  const size_t len = packet.payload.size();
  const size_t so_far = starts ? 0 : slot.data.size() - config_.recv_line_offset;
  const bool full_mtu_required = !ends;
  if ((full_mtu_required && len != attrs_.path_mtu) || len > attrs_.path_mtu ||
      so_far + len > config_.max_message_size) {
    RejectInvalidRequest(QpDropReason::kBadLength, absl::DataLossError(absl::StrFormat(
        "QP 0x%06x: %s at PSN 0x%06x carries %d bytes (MTU %d, message limit %d)", qpn_,
        proto::BthOpcodeName(op), bth.psn, len, attrs_.path_mtu, config_.max_message_size)));
    return false;
  }
  if (keep) {
    slot.held = buffer;
    slot.held_data = packet.payload;
  } else if (len > 0) {
    // resize + memcpy: the slot's allocator makes insert copy byte by byte
    // (base/aligned_buffer.h), and resize leaves the new bytes as they are.
    const size_t at = slot.data.size();
    slot.data.resize(at + len);
    std::memcpy(slot.data.data() + at, packet.payload.data(), len);
  }
  expected_psn_ = PsnAdd(expected_psn_, 1);
  BumpCounter(counters_.packets_received);
  BumpCounter(counters_.bytes_received, len);
  if (ends) {
    slot.imm = packet.imm;
    in_message_ = false;
    ++rq_count_;
    msn_ = (msn_ + 1) & proto::kPsnMask;
    BumpCounter(counters_.messages_received);
  } else {
    in_message_ = true;
  }
  ++packets_unacked_;
  if (packets_unacked_ >= config_.ack_coalesce_packets) {
    RequestAck(absl::ZeroDuration());
  } else if (bth.ack_req) {
    RequestAck(config_.ack_delay);
  }
  return keep;
}

// The requester's keepalive is a duplicate to the responder (AcceptPsn),
// which is why it is here.
absl::Status RcQueuePair::SendKeepalive() {
  if (state_ != QpState::kRts) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "QP 0x%06x: a keepalive needs RTS, not %s", qpn_, QpStateName(state_)));
  }
  keepalive_pending_ = true;
  return absl::OkStatus();
}

bool RcQueuePair::EmitKeepalive(const Ipv4Endpoint& local, PacketSink sink) {
  proto::RocePacketSpec spec;
  spec.bth.opcode = BthOpcode::kRcSendOnly;
  spec.bth.psn = PsnAdd(una_psn_, -1);  // behind everything unacknowledged: a duplicate
  spec.bth.ack_req = true;
  if (!EmitHeaderOnly(local, sink, spec)) return false;
  keepalive_psn_ = spec.bth.psn;
  keepalive_out_ = true;
  return true;
}

bool RcQueuePair::EmitAck(const Ipv4Endpoint& local, PacketSink sink, const proto::Aeth& aeth,
                          uint32_t psn) {
  proto::RocePacketSpec spec;
  spec.bth.opcode = BthOpcode::kRcAcknowledge;
  spec.bth.psn = psn;
  spec.aeth = aeth;
  return EmitHeaderOnly(local, sink, spec);
}

bool RcQueuePair::EmitHeaderOnly(const Ipv4Endpoint& local, PacketSink sink,
                                 proto::RocePacketSpec spec) {
  PacketBuffer* p = sink.pool->Alloc();
  if (p == nullptr) {
    counters_.drops.Count(QpDropReason::kNoBuffer);
    return false;
  }
  spec.bth.pkey = attrs_.pkey;
  spec.bth.dest_qp = attrs_.remote_qpn;
  const proto::IcrcAddresses addrs{local.ip, attrs_.remote.ip, local.port, attrs_.remote.port};
  auto n = proto::BuildRocePacket(spec, {}, addrs, {p->data(), p->capacity()});
  if (!n.ok()) {
    NETFOLD_LOG(kError) << "building a " << proto::BthOpcodeName(spec.bth.opcode)
                        << " packet failed: " << n.status();
    PacketPool::Free(p);
    return false;
  }
  p->set_len(static_cast<uint32_t>(*n));
  p->dst = attrs_.remote;
  sink.out->push_back(p);
  return true;
}

}  // namespace netfold::transport
