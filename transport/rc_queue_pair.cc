#include "transport/rc_queue_pair.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/counter.h"
#include "base/log.h"
#include "proto/psn.h"

namespace netfold::transport {

using proto::BthOpcode;
using proto::PsnAdd;
using proto::PsnDiff;
using proto::PsnLess;
using proto::PsnLessEq;

namespace {

bool IsValidMtu(uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

bool IsValidRemoteQpn(uint32_t qpn) {
  return qpn >= kFirstAssignableQpn && qpn < kMulticastQpn;
}

}  // namespace

void RcQpCounters::AddTo(RcQpCounters& into) const {
  auto add = [](const std::atomic<uint64_t>& from, std::atomic<uint64_t>& to) {
    to.fetch_add(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
  };
  add(messages_sent, into.messages_sent);
  add(messages_received, into.messages_received);
  add(packets_sent, into.packets_sent);
  add(packets_retransmitted, into.packets_retransmitted);
  add(bytes_sent, into.bytes_sent);
  add(packets_received, into.packets_received);
  add(bytes_received, into.bytes_received);
  add(acks_sent, into.acks_sent);
  add(acks_received, into.acks_received);
  add(naks_sent, into.naks_sent);
  add(naks_received, into.naks_received);
  add(rnr_naks_sent, into.rnr_naks_sent);
  add(rnr_naks_received, into.rnr_naks_received);
  add(timeouts, into.timeouts);
  add(spurious_timeouts, into.spurious_timeouts);
  drops.AddTo(into.drops);
}

RcQueuePair::RcQueuePair(uint32_t qpn, const RcQpConfig& config, const Clock& clock)
    : qpn_(qpn), config_(config), clock_(clock) {
  rq_.resize(std::max<uint32_t>(config_.max_recv_queue, 1));
  wqe_storage_.reserve(config_.max_send_queue);
}

RcQueuePair::~RcQueuePair() {
  FreeHeldReceives();
  // Frames whose packets are still queued somewhere go with their last view.
  for (const std::unique_ptr<SendWqe>& w : wqe_storage_) PacketPool::Free(w->frames);
}

namespace {

// SendWqe::frames: each packet's payload starts a cache line into its
// frame, after room for the largest RC SEND headers (BTH + ImmDt, 16
// bytes); the frame holds the payload, up to 3 bytes of pad and the ICRC.
constexpr size_t kFrameHeadroom = 64;
static_assert(kFrameHeadroom >= proto::kBthSize + 4);

size_t FrameStride(uint32_t mtu) {
  return kFrameHeadroom + (size_t{mtu} + 3 + proto::kIcrcSize + 63) / 64 * 64;
}

}  // namespace

size_t RcQueuePair::PayloadOffset(uint32_t k) const {
  return static_cast<size_t>(k) * FrameStride(attrs_.path_mtu) + kFrameHeadroom;
}

size_t RcQueuePair::FramesBytes(uint32_t packets) const {
  return static_cast<size_t>(packets) * FrameStride(attrs_.path_mtu);
}

void RcQueuePair::FreeHeldReceives() {
  for (RecvSlot& slot : rq_) {
    PacketPool::Free(slot.held);
    slot.held = nullptr;
    slot.held_data = {};
  }
}

uint32_t RcQueuePair::num_outstanding() const {
  return static_cast<uint32_t>(PsnDiff(max_sent_psn_, una_psn_));
}

absl::Status RcQueuePair::Modify(QpState target, const RcQpAttributes& attrs) {
  if (target == QpState::kError) {
    if (state_ != QpState::kError) {
      EnterError(absl::CancelledError("QP moved to ERROR by its owner"));
    }
    return absl::OkStatus();
  }
  if (target == QpState::kReset) {
    for (SendWqe* w : sq_) free_wqes_.push_back(w);
    sq_.clear();
    completions_.clear();
    FreeHeldReceives();
    rq_head_ = rq_count_ = 0;
    in_message_ = nak_outstanding_ = ack_pending_ = false;
    packets_unacked_ = 0;
    pending_nak_.reset();
    nak_pending_ = false;
    fatal_after_nak_ = absl::OkStatus();
    retransmit_at_ns_ = rnr_resume_at_ns_ = -1;
    retries_ = rnr_retries_ = backoff_ = 0;
    probing_ = keepalive_pending_ = keepalive_answered_ = keepalive_out_ = false;
    source_port_bound_ = false;
    error_ = absl::OkStatus();
    state_ = QpState::kReset;
    return absl::OkStatus();
  }
  auto bad_transition = [&] {
    return absl::FailedPreconditionError(absl::StrFormat(
        "QP 0x%06x: cannot go from %s to %s", qpn_, QpStateName(state_), QpStateName(target)));
  };
  switch (target) {
    case QpState::kInit:
      if (state_ != QpState::kReset) return bad_transition();
      if ((attrs.pkey & 0x7fff) == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("P_Key 0x%04x is invalid (low 15 bits are zero)", attrs.pkey));
      }
      attrs_.pkey = attrs.pkey;
      state_ = QpState::kInit;
      return absl::OkStatus();
    case QpState::kRtr:
      if (state_ != QpState::kInit) return bad_transition();
      if (!IsValidMtu(attrs.path_mtu)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "path MTU %d is not one of 256, 512, 1024, 2048, 4096", attrs.path_mtu));
      }
      if (!IsValidRemoteQpn(attrs.remote_qpn)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("remote QPN 0x%x is not a valid RC QPN", attrs.remote_qpn));
      }
      if (!proto::IsValidPsn(attrs.rq_psn)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("rq_psn 0x%x does not fit in 24 bits", attrs.rq_psn));
      }
      if (attrs.remote.IsMulticast() || attrs.remote.port == 0 || attrs.remote.ip == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "remote %s is not a unicast endpoint", attrs.remote.ToString()));
      }
      attrs_.remote = attrs.remote;
      attrs_.remote_qpn = attrs.remote_qpn;
      attrs_.rq_psn = attrs.rq_psn;
      attrs_.path_mtu = attrs.path_mtu;
      expected_psn_ = attrs.rq_psn;
      msn_ = 0;
      source_port_bound_ = false;
      state_ = QpState::kRtr;
      return absl::OkStatus();
    case QpState::kRts:
      if (state_ != QpState::kRtr) return bad_transition();
      if (!proto::IsValidPsn(attrs.sq_psn)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("sq_psn 0x%x does not fit in 24 bits", attrs.sq_psn));
      }
      if (attrs.retry_count > 7 || attrs.rnr_retry > 7) {
        return absl::InvalidArgumentError("retry_count and rnr_retry are 0..7");
      }
      if (attrs.timeout <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError("the ACK timeout must be positive");
      }
      attrs_.sq_psn = attrs.sq_psn;
      attrs_.timeout = attrs.timeout;
      attrs_.retry_count = attrs.retry_count;
      attrs_.rnr_retry = attrs.rnr_retry;
      next_post_psn_ = una_psn_ = send_psn_ = max_sent_psn_ = attrs.sq_psn;
      send_wqe_index_ = 0;
      state_ = QpState::kRts;
      return absl::OkStatus();
    default:
      return bad_transition();
  }
}

void RcQueuePair::EnterError(absl::Status why) {
  if (state_ == QpState::kError) return;
  NETFOLD_LOG(kInfo) << absl::StrFormat("QP 0x%06x -> ERROR: %s", qpn_, why.ToString());
  state_ = QpState::kError;
  error_ = why;
  // Flush: every posted message completes with the reason.
  for (SendWqe* w : sq_) {
    completions_.push_back({w->wr_id, why});
    free_wqes_.push_back(w);
  }
  sq_.clear();
  retransmit_at_ns_ = rnr_resume_at_ns_ = -1;
  ack_pending_ = false;
}

absl::Status RcQueuePair::PostSend(std::span<const uint8_t> message, uint64_t wr_id,
                                   std::optional<uint32_t> imm) {
  const std::span<const uint8_t> one[] = {message};
  return PostSendGather(one, wr_id, imm);
}

absl::Status RcQueuePair::ReserveSends(uint32_t messages) {
  if (state_ != QpState::kRts) {
    return absl::FailedPreconditionError(
        absl::StrFormat("QP 0x%06x is in %s; reserving sends needs RTS", qpn_, QpStateName(state_)));
  }
  messages = std::min(messages, config_.max_send_queue);
  while (wqe_storage_.size() < messages) free_wqes_.push_back(NewWqe());
  const size_t frames_bytes = FramesBytes(1);
  for (SendWqe* w : free_wqes_) {
    if (FitFrames(w, frames_bytes)) std::memset(w->frames->data(), 0, frames_bytes);
  }
  return absl::OkStatus();
}

RcQueuePair::SendWqe* RcQueuePair::NewWqe() {
  wqe_storage_.push_back(std::make_unique<SendWqe>());
  return wqe_storage_.back().get();
}

bool RcQueuePair::FitFrames(SendWqe* w, size_t frames_bytes) {
  if (w->frames != nullptr &&
      (w->frames->num_views() > 0 || w->frames->capacity() < frames_bytes)) {
    // Packets of its last message are still on their way out (a delaying
    // impairment holds them), or it is too small: a buffer of its own.
    PacketPool::Free(w->frames);
    w->frames = nullptr;
  }
  // Kept with the WQE: the steady state allocates nothing.
  if (w->frames != nullptr) return false;
  w->frames = PacketPool::NewHeapBuffer(static_cast<uint32_t>(frames_bytes));
  ++send_frames_made_;
  return true;
}

absl::Status RcQueuePair::PostSendGather(std::span<const std::span<const uint8_t>> pieces,
                                         uint64_t wr_id, std::optional<uint32_t> imm) {
  return Post(pieces, wr_id, imm, std::nullopt);
}

absl::Status RcQueuePair::PostSendGatherReferencing(
    std::span<const std::span<const uint8_t>> pieces, size_t referenced, uint64_t wr_id,
    std::optional<uint32_t> imm) {
  if (referenced >= pieces.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "piece %d referenced of a message of %d pieces", referenced, pieces.size()));
  }
  return Post(pieces, wr_id, imm, referenced);
}

absl::Status RcQueuePair::Post(std::span<const std::span<const uint8_t>> pieces, uint64_t wr_id,
                               std::optional<uint32_t> imm, std::optional<size_t> referenced) {
  size_t size = 0;
  for (std::span<const uint8_t> piece : pieces) size += piece.size();
  if (state_ != QpState::kRts) {
    if (state_ == QpState::kError) {
      return absl::FailedPreconditionError(
          absl::StrFormat("QP 0x%06x is in ERROR: %s", qpn_, error_.ToString()));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("QP 0x%06x is in %s; sending needs RTS", qpn_, QpStateName(state_)));
  }
  if (size > config_.max_message_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "message of %d bytes exceeds the QP's limit of %d", size, config_.max_message_size));
  }
  if (sq_.size() >= config_.max_send_queue) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "send queue of QP 0x%06x is full (%d messages)", qpn_, config_.max_send_queue));
  }
  const uint32_t mtu = attrs_.path_mtu;
  const uint32_t packets = size == 0 ? 1 : static_cast<uint32_t>((size + mtu - 1) / mtu);
  // Never let the PSNs in flight span half the PSN space.
  if (static_cast<uint64_t>(PsnDiff(next_post_psn_, una_psn_)) + packets >= proto::kPsnHalfRange) {
    return absl::ResourceExhaustedError("too many packets queued on the QP");
  }
  SendWqe* w;
  if (!free_wqes_.empty()) {
    w = free_wqes_.back();
    free_wqes_.pop_back();
  } else {
    w = NewWqe();
  }
  w->wr_id = wr_id;
  const size_t frames_bytes = FramesBytes(packets);
  FitFrames(w, frames_bytes);
  w->frames->set_len(static_cast<uint32_t>(frames_bytes));
  uint8_t* frames = w->frames->data();
  uint32_t k = 0;
  size_t in_packet = 0;
  w->referenced = nullptr;
  w->referenced_at = w->referenced_len = 0;
  // One packet: the referenced piece stays where it is (a NIC's SGE).
  if (referenced.has_value() && packets == 1 && !pieces[*referenced].empty()) {
    size_t at = 0;
    for (size_t i = 0; i < *referenced; ++i) at += pieces[i].size();
    w->referenced = pieces[*referenced].data();
    w->referenced_at = static_cast<uint32_t>(at);
    w->referenced_len = static_cast<uint32_t>(pieces[*referenced].size());
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::span<const uint8_t> piece = pieces[i];
    if (w->referenced != nullptr && i == *referenced) {
      in_packet += piece.size();  // one packet: never reaches the MTU's end
      continue;
    }
    while (!piece.empty()) {
      const size_t n = std::min<size_t>(piece.size(), mtu - in_packet);
      std::memcpy(frames + PayloadOffset(k) + in_packet, piece.data(), n);
      piece = piece.subspan(n);
      in_packet += n;
      if (in_packet == mtu) {
        ++k;
        in_packet = 0;
      }
    }
  }
  w->size = size;
  w->imm = imm;
  w->first_psn = next_post_psn_;
  w->num_packets = packets;
  next_post_psn_ = PsnAdd(next_post_psn_, static_cast<int32_t>(packets));
  sq_.push_back(w);
  // The next post takes the entry freed last, whose frame left a window
  // ago and is out of cache: its header (read to check the frame is free)
  // is fetched while the caller prepares that post, and the entry after it
  // (read here, on the next post, to find its frame) likewise.
  if (const size_t n = free_wqes_.size(); n > 0) {
    __builtin_prefetch(free_wqes_[n - 1]->frames);
    if (n > 1) __builtin_prefetch(free_wqes_[n - 2]);
  }
  return absl::OkStatus();
}

bool RcQueuePair::Admits(uint16_t pkey, const Ipv4Endpoint& from) {
  if (state_ != QpState::kRtr && state_ != QpState::kRts) {
    counters_.drops.Count(QpDropReason::kBadState);
    return false;
  }
  // The peer's address, and once the QP has taken a packet from it, the
  // UDP source port that packet came from. A RoCE NIC sends from a port of
  // its own choosing (per QP, for ECMP entropy) and listens on 4791, so the
  // port cannot be known at RTR; but it is stable for the QP, and a packet
  // from another port of that address is not the peer's (docs/verbs.md,
  // "UDP ports"). Replies go to attrs_.remote.
  if (from.ip != attrs_.remote.ip || (source_port_bound_ && from.port != source_port_)) {
    counters_.drops.Count(QpDropReason::kWrongSource);
    return false;
  }
  if (!PkeyMatches(pkey, attrs_.pkey)) {
    counters_.drops.Count(QpDropReason::kWrongPkey);
    return false;
  }
  return true;
}

void RcQueuePair::OnUnsupportedRequest(uint8_t opcode, uint16_t pkey, uint32_t psn,
                                       const Ipv4Endpoint& from) {
  if (!Admits(pkey, from)) return;
  // Dropped whatever its PSN: no answer, nothing consumed, the QP stays up.
  // A NAK invalid request would put the QP in ERROR (IBTA 9.7.5.2.2) and
  // revoke the job's groups: one packet would be enough to stop a job.
  counters_.drops.Count(QpDropReason::kUnsupportedOpcode);
  NETFOLD_LOG(kDebug) << absl::StrFormat(
      "QP 0x%06x: dropped opcode 0x%02x at PSN 0x%06x (netfold implements SEND only)", qpn_,
      opcode, psn);
}

void RcQueuePair::OnPacket(const proto::RocePacketView& packet, const Ipv4Endpoint& from) {
  Receive(packet, from, nullptr);
}

bool RcQueuePair::OnPacket(const proto::RocePacketView& packet, PacketBuffer* buffer) {
  return Receive(packet, buffer->src, config_.zero_copy_receive ? buffer : nullptr);
}

bool RcQueuePair::Receive(const proto::RocePacketView& packet, const Ipv4Endpoint& from,
                          PacketBuffer* buffer) {
  if (state_ == QpState::kRtr || state_ == QpState::kRts) {
    if (!proto::OpcodeIsRc(packet.bth.opcode)) {
      counters_.drops.Count(QpDropReason::kWrongTransport);
      return false;
    }
  }
  if (!Admits(packet.bth.pkey, from)) return false;
  if (packet.bth.opcode == BthOpcode::kRcAcknowledge) {
    if (state_ != QpState::kRts) {
      counters_.drops.Count(QpDropReason::kBadState);
      return false;
    }
    HandleAck(packet, from);
    return false;
  }
  return HandleSend(packet, from, buffer);
}

// ---------------------------------------------------------------------------
// Requester.

void RcQueuePair::HandleAck(const proto::RocePacketView& packet, const Ipv4Endpoint& from) {
  if (!packet.aeth.has_value()) {
    counters_.drops.Count(QpDropReason::kUnexpectedAck);
    return;
  }
  const proto::Aeth& aeth = *packet.aeth;
  const uint32_t psn = packet.bth.psn;
  const uint32_t last_sent = PsnAdd(max_sent_psn_, -1);
  switch (proto::GetAethType(aeth)) {
    case proto::AethType::kAck: {
      BumpCounter(counters_.acks_received);
      // The responder answers a duplicate with the PSN before the one it
      // expects: for a keepalive, the keepalive's own (nothing is expected
      // beyond what this side sent).
      if (keepalive_out_ && psn == keepalive_psn_ && PsnAdd(psn, 1) == una_psn_) {
        keepalive_answered_ = true;
      }
      if (PsnLess(psn, una_psn_)) return;  // stale or repeated: nothing new
      if (una_psn_ == max_sent_psn_ || PsnLess(last_sent, psn)) {
        counters_.drops.Count(QpDropReason::kUnexpectedAck);
        return;
      }
      BindSourcePort(from);
      AckUpTo(psn);
      return;
    }
    case proto::AethType::kRnrNak:
    case proto::AethType::kNak: {
      const bool rnr = proto::GetAethType(aeth) == proto::AethType::kRnrNak;
      // The PSN is the one the responder expects: everything before it arrived.
      if (PsnLess(psn, una_psn_) || PsnLess(max_sent_psn_, psn)) {
        counters_.drops.Count(QpDropReason::kUnexpectedAck);
        return;
      }
      BindSourcePort(from);
      if (psn != una_psn_) AckUpTo(PsnAdd(psn, -1));
      probing_ = false;  // an answer: the receiver said where it is
      if (rnr) {
        BumpCounter(counters_.rnr_naks_received);
        ++rnr_retries_;
        if (attrs_.rnr_retry != 7 && rnr_retries_ > attrs_.rnr_retry) {
          EnterError(absl::UnavailableError(absl::StrFormat(
              "QP 0x%06x: RNR retry count (%d) exceeded: the receiver at %s QP 0x%06x had no "
              "room for PSN 0x%06x",
              qpn_, attrs_.rnr_retry, attrs_.remote.ToString(), attrs_.remote_qpn, psn)));
          return;
        }
        rnr_resume_at_ns_ = clock_.NowNanos() +
                            absl::ToInt64Nanoseconds(RnrTimerDelay(proto::GetAethValue(aeth)));
        // The receiver answered: it is alive. The ACK timer and its retry
        // budget start over when the packets go out again after the RNR
        // wait (TransmitOne arms it), so a wait longer than the ACK
        // timeout is not taken for silence.
        retries_ = 0;
        backoff_ = 0;
        retransmit_at_ns_ = -1;
        GoBackTo(psn);
        return;
      }
      BumpCounter(counters_.naks_received);
      const auto code = static_cast<proto::NakCode>(proto::GetAethValue(aeth));
      if (code != proto::NakCode::kPsnSequenceError) {
        EnterError(absl::AbortedError(absl::StrFormat(
            "QP 0x%06x: the receiver at %s QP 0x%06x answered NAK %s at PSN 0x%06x", qpn_,
            attrs_.remote.ToString(), attrs_.remote_qpn, proto::NakCodeName(code), psn)));
        return;
      }
      GoBackTo(psn);
      return;
    }
    case proto::AethType::kReserved:
      break;
  }
  counters_.drops.Count(QpDropReason::kUnexpectedAck);
}

void RcQueuePair::AckUpTo(uint32_t psn) {
  // After a timeout only the first unacknowledged packet (probe_psn_) went
  // out again. An ACK beyond it covers packets sent once, before the
  // timeout: they arrived, the receiver was only slow to answer, and the
  // ones after them are most likely on their way too. Go on after the
  // last packet ever sent rather than sending them all again (F-RTO); a
  // real loss among them is NAKed, or the timer finds it.
  const bool spurious = probing_ && PsnLess(probe_psn_, psn);
  while (!sq_.empty()) {
    SendWqe* w = sq_.front();
    const uint32_t last = PsnAdd(w->first_psn, static_cast<int32_t>(w->num_packets) - 1);
    if (!PsnLessEq(last, psn)) break;
    completions_.push_back({w->wr_id, absl::OkStatus()});
    BumpCounter(counters_.messages_sent);
    sq_.pop_front();
    free_wqes_.push_back(w);
    if (send_wqe_index_ > 0) --send_wqe_index_;
  }
  una_psn_ = PsnAdd(psn, 1);
  probing_ = false;
  if (spurious) {
    BumpCounter(counters_.spurious_timeouts);
    if (PsnLess(send_psn_, max_sent_psn_)) GoBackTo(max_sent_psn_);
  }
  if (PsnLess(send_psn_, una_psn_)) GoBackTo(una_psn_);
  // Progress: the retry budget and the backoff start over.
  retries_ = 0;
  rnr_retries_ = 0;
  backoff_ = 0;
  retransmit_at_ns_ =
      una_psn_ == max_sent_psn_
          ? -1
          : clock_.NowNanos() + absl::ToInt64Nanoseconds(attrs_.timeout);
}

void RcQueuePair::GoBackTo(uint32_t psn) {
  send_psn_ = psn;
  send_wqe_index_ = 0;
  while (send_wqe_index_ < sq_.size()) {
    const SendWqe* w = sq_[send_wqe_index_];
    const uint32_t end = PsnAdd(w->first_psn, static_cast<int32_t>(w->num_packets));
    if (PsnLess(psn, end)) break;
    ++send_wqe_index_;
  }
}

bool RcQueuePair::TransmitOne(const Ipv4Endpoint& local, PacketSink sink) {
  if (send_psn_ == next_post_psn_ || send_wqe_index_ >= sq_.size()) return false;
  if (rnr_resume_at_ns_ >= 0) {
    if (clock_.NowNanos() < rnr_resume_at_ns_) return false;
    rnr_resume_at_ns_ = -1;
  }
  const uint32_t in_flight = static_cast<uint32_t>(PsnDiff(send_psn_, una_psn_));
  const uint32_t window = probing_ ? 1 : config_.max_outstanding_packets;
  if (in_flight >= window) return false;

  SendWqe* w = sq_[send_wqe_index_];
  const uint32_t k = static_cast<uint32_t>(PsnDiff(send_psn_, w->first_psn));
  const uint32_t mtu = attrs_.path_mtu;
  const size_t offset = static_cast<size_t>(k) * mtu;
  const size_t len = std::min<size_t>(mtu, w->size - std::min(offset, w->size));
  const bool first = k == 0;
  const bool last = k + 1 == w->num_packets;
  BthOpcode op;
  if (first && last) {
    op = w->imm ? BthOpcode::kRcSendOnlyWithImmediate : BthOpcode::kRcSendOnly;
  } else if (first) {
    op = BthOpcode::kRcSendFirst;
  } else if (last) {
    op = w->imm ? BthOpcode::kRcSendLastWithImmediate : BthOpcode::kRcSendLast;
  } else {
    op = BthOpcode::kRcSendMiddle;
  }
  bool ack_req = last || ++packets_since_ack_req_ >= config_.ack_req_interval ||
                 in_flight + 1 >= window;
  if (ack_req) packets_since_ack_req_ = 0;

  proto::RocePacketSpec spec;
  spec.bth.opcode = op;
  spec.bth.pkey = attrs_.pkey;
  spec.bth.dest_qp = attrs_.remote_qpn;
  spec.bth.psn = send_psn_;
  spec.bth.ack_req = ack_req;
  if (proto::OpcodeHasImm(op)) spec.imm = *w->imm;
  const proto::IcrcAddresses addrs{local.ip, attrs_.remote.ip, local.port, attrs_.remote.port};
  const bool retransmission = PsnLess(send_psn_, max_sent_psn_);
  PacketBuffer* p = BuildSend(spec, *w, k, len, addrs, !retransmission, sink);
  if (p == nullptr) return false;
  p->dst = attrs_.remote;
  sink.out->push_back(p);

  if (retransmission) {
    BumpCounter(counters_.packets_retransmitted);
  } else {
    BumpCounter(counters_.packets_sent);
    BumpCounter(counters_.bytes_sent, len);
    max_sent_psn_ = PsnAdd(send_psn_, 1);
  }
  send_psn_ = PsnAdd(send_psn_, 1);
  if (last) ++send_wqe_index_;
  if (retransmit_at_ns_ < 0) {
    retransmit_at_ns_ =
        clock_.NowNanos() + (absl::ToInt64Nanoseconds(attrs_.timeout) << backoff_);
  }
  return true;
}

void RcQueuePair::CopyReferenced(SendWqe& w) {
  if (w.referenced == nullptr) return;
  std::memcpy(w.frames->data() + PayloadOffset(0) + w.referenced_at, w.referenced,
              w.referenced_len);
  w.referenced = nullptr;
}

size_t RcQueuePair::ReleaseReferences(std::span<const uint8_t> memory) {
  size_t copied = 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(memory.data());
  const uintptr_t end = begin + memory.size();
  for (SendWqe* w : sq_) {
    if (w->referenced == nullptr) continue;
    const uintptr_t at = reinterpret_cast<uintptr_t>(w->referenced);
    if (at < begin || at + w->referenced_len > end) continue;
    copied += w->referenced_len;
    CopyReferenced(*w);
  }
  return copied;
}

PacketBuffer* RcQueuePair::BuildSend(const proto::RocePacketSpec& spec, SendWqe& w, uint32_t k,
                                     size_t len, const proto::IcrcAddresses& addrs,
                                     bool first_transmission, const PacketSink& sink) {
  PacketPool* pool = sink.pool;
  const BthOpcode op = spec.bth.opcode;
  const size_t headers = proto::RoceHeadersSize(op);
  const size_t needed = proto::RocePacketSize(op, len);
  uint8_t* payload = w.frames->data() + PayloadOffset(k);
  auto failed = [&](const absl::Status& why, PacketBuffer* built) -> PacketBuffer* {
    NETFOLD_LOG(kError) << "building a SEND failed: " << why;
    PacketPool::Free(built);
    EnterError(absl::InternalError(why.ToString()));
    return nullptr;
  };
  // A port that cannot send bytes from where they are gets them copied
  // into the frame, once.
  if (w.referenced != nullptr && first_transmission && !sink.takes_external) CopyReferenced(w);
  if (first_transmission) {
    // Headers, pad and ICRC around the payload in its frame, and a view of
    // it; a referenced part of the payload goes out from where the caller
    // keeps it (PacketBuffer::external). A retransmission must not rewrite
    // a frame whose earlier view may still wait in a queue: it copies
    // (below), as does a pool without a free view header.
    const std::span<const uint8_t> part =
        w.referenced != nullptr ? std::span<const uint8_t>(w.referenced, w.referenced_len)
                                : std::span<const uint8_t>();
    absl::StatusOr<size_t> n = proto::FinishRocePacketAroundPart(
        spec, len, addrs, {payload - headers, needed}, w.referenced_at, part);
    if (!n.ok()) return failed(n.status(), nullptr);
    const auto at = static_cast<uint32_t>(payload - headers - w.frames->data());
    if (PacketBuffer* view = pool->AllocView(w.frames, at, static_cast<uint32_t>(*n))) {
      if (!part.empty()) view->SetExternal(static_cast<uint32_t>(headers + w.referenced_at), part);
      return view;
    }
  }
  PacketBuffer* p = pool->Alloc();
  if (p == nullptr || p->capacity() < needed) {
    if (p != nullptr) {
      NETFOLD_LOG(kError) << "packet buffers of " << p->capacity() << " bytes cannot hold "
                          << needed << "-byte packets: use a larger pool buffer_size";
      PacketPool::Free(p);
    }
    counters_.drops.Count(QpDropReason::kNoBuffer);
    return nullptr;
  }
  std::memcpy(p->data() + headers, payload, len);
  if (w.referenced != nullptr) {
    std::memcpy(p->data() + headers + w.referenced_at, w.referenced, w.referenced_len);
  }
  absl::StatusOr<size_t> n =
      proto::FinishRocePacketInPlace(spec, len, addrs, {p->data(), p->capacity()});
  if (!n.ok()) return failed(n.status(), p);
  p->set_len(static_cast<uint32_t>(*n));
  return p;
}

void RcQueuePair::Poll(const Ipv4Endpoint& local, PacketSink sink) {
  if (state_ == QpState::kReset || state_ == QpState::kInit || state_ == QpState::kError) return;
  // Responder first: a NAK implies the ACK of everything before it.
  if (nak_pending_ && pending_nak_.has_value()) {
    const bool is_rnr = proto::GetAethType(*pending_nak_) == proto::AethType::kRnrNak;
    if (EmitAck(local, sink, *pending_nak_, expected_psn_)) {
      if (!is_rnr) BumpCounter(counters_.naks_sent);
      nak_pending_ = false;
      pending_nak_.reset();
      ack_pending_ = false;
      packets_unacked_ = 0;
    }
    if (!fatal_after_nak_.ok()) {
      EnterError(std::move(fatal_after_nak_));
      fatal_after_nak_ = absl::OkStatus();
      return;
    }
  } else if (AckDue(clock_.NowNanos())) {
    if (EmitAck(local, sink, proto::MakeAck(msn_), PsnAdd(expected_psn_, -1))) {
      BumpCounter(counters_.acks_sent);
      ack_pending_ = false;
      packets_unacked_ = 0;
    }
  }
  if (state_ != QpState::kRts) return;

  // Requester: the retransmission timer, then new or repeated packets.
  const int64_t now = clock_.NowNanos();
  if (retransmit_at_ns_ >= 0 && now >= retransmit_at_ns_ && una_psn_ != max_sent_psn_) {
    BumpCounter(counters_.timeouts);
    if (retries_ == 0) stalled_since_ns_ = now;
    if (++retries_ > attrs_.retry_count &&
        now - stalled_since_ns_ >= absl::ToInt64Nanoseconds(config_.min_failure_time)) {
      EnterError(absl::DeadlineExceededError(absl::StrFormat(
          "QP 0x%06x: retry count (%d) exceeded: no ACK from %s QP 0x%06x for PSN 0x%06x "
          "(retried for %s)",
          qpn_, attrs_.retry_count, attrs_.remote.ToString(), attrs_.remote_qpn, una_psn_,
          absl::FormatDuration(
              absl::Trunc(absl::Nanoseconds(now - stalled_since_ns_), absl::Milliseconds(1))))));
      return;
    }
    backoff_ = std::min(backoff_ + 1, config_.max_backoff);
    GoBackTo(una_psn_);
    probing_ = true;
    probe_psn_ = una_psn_;
    retransmit_at_ns_ = now + (absl::ToInt64Nanoseconds(attrs_.timeout) << backoff_);
  }
  if (keepalive_pending_ && EmitKeepalive(local, sink)) keepalive_pending_ = false;
  constexpr int kMaxPacketsPerPoll = 64;
  for (int i = 0; i < kMaxPacketsPerPoll && TransmitOne(local, sink); ++i) {
  }
}

std::optional<int64_t> RcQueuePair::NextExpiryNs() const {
  if (state_ != QpState::kRtr && state_ != QpState::kRts) return std::nullopt;
  std::optional<int64_t> next;
  auto consider = [&](int64_t t) { next = next ? std::min(*next, t) : t; };
  if (ack_pending_) consider(ack_due_ns_);
  if (retransmit_at_ns_ >= 0 && una_psn_ != max_sent_psn_) consider(retransmit_at_ns_);
  if (rnr_resume_at_ns_ >= 0 && send_psn_ != next_post_psn_) consider(rnr_resume_at_ns_);
  return next;
}

std::optional<int64_t> RcQueuePair::NextTimerNs() const {
  if (state_ != QpState::kRtr && state_ != QpState::kRts) return std::nullopt;
  if (nak_pending_ || (keepalive_pending_ && state_ == QpState::kRts)) return clock_.NowNanos();
  std::optional<int64_t> next = NextExpiryNs();
  // Packets Poll left queued (it sends a bounded number per call, and only
  // what the pool has buffers for) are due now, not at the next packet.
  const uint32_t window = probing_ ? 1 : config_.max_outstanding_packets;
  if (state_ == QpState::kRts && send_psn_ != next_post_psn_ && rnr_resume_at_ns_ < 0 &&
      static_cast<uint32_t>(PsnDiff(send_psn_, una_psn_)) < window) {
    const int64_t now = clock_.NowNanos();
    next = next ? std::min(*next, now) : now;
  }
  return next;
}

bool RcQueuePair::HasWork(int64_t now) const {
  if (state_ != QpState::kRtr && state_ != QpState::kRts) return false;
  if (nak_pending_ || AckDue(now)) return true;
  if (state_ != QpState::kRts) return false;
  if (keepalive_pending_) return true;
  if (retransmit_at_ns_ >= 0 && now >= retransmit_at_ns_ && una_psn_ != max_sent_psn_) return true;
  if (send_psn_ == next_post_psn_) return false;
  if (rnr_resume_at_ns_ >= 0 && now < rnr_resume_at_ns_) return false;
  return static_cast<uint32_t>(PsnDiff(send_psn_, una_psn_)) < config_.max_outstanding_packets;
}

bool RcQueuePair::PollSendCompletion(SendCompletion* out) {
  if (completions_.empty()) return false;
  *out = std::move(completions_.front());
  completions_.pop_front();
  return true;
}

bool RcQueuePair::PeekRecv(RecvMessage* out) const {
  if (rq_count_ == 0) return false;
  const RecvSlot& slot = rq_[rq_head_];
  out->data = slot.held != nullptr
                  ? slot.held_data
                  : std::span<const uint8_t>(slot.data).subspan(config_.recv_line_offset);
  out->imm = slot.imm;
  return true;
}

PacketBuffer* RcQueuePair::DequeueRecv() {
  RecvSlot& slot = rq_[rq_head_];
  PacketBuffer* held = slot.held;
  slot.held = nullptr;
  slot.held_data = {};
  rq_head_ = (rq_head_ + 1) % rq_.size();
  --rq_count_;
  return held;
}

PacketBuffer* RcQueuePair::TakeRecv() {
  if (rq_count_ == 0 || rq_[rq_head_].held == nullptr) return nullptr;
  return DequeueRecv();
}

void RcQueuePair::PopRecv() {
  if (rq_count_ > 0) PacketPool::Free(DequeueRecv());
}

}  // namespace netfold::transport
