#include "host/group_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "host/error_codes.h"
#include "host/group_engine_op.h"
#include "proto/reduce_op.h"
#include "proto/roce_packet.h"

namespace netfold::host {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DeliveryMode;

namespace {

absl::Status StatusFromResult(AggregationStatus s, uint64_t seq) {
  switch (s) {
    case AggregationStatus::kOk:
      return absl::OkStatus();
    case AggregationStatus::kMismatch:
      return WithErrorCode(
          absl::InvalidArgumentError(absl::StrFormat(
              "the ranks of the group disagree on operation %d (collective, type, op, count, "
              "root or, for a reduce, NETFOLD_REDUCE_DATA differ between ranks)",
              seq)),
          NETFOLD_ERR_MISMATCH);
    case AggregationStatus::kInvalidRequest:
      return absl::InvalidArgumentError(
          absl::StrFormat("the fabric refused operation %d as invalid", seq));
    case AggregationStatus::kAborted:
      return absl::AbortedError(absl::StrFormat("operation %d was aborted: the group was revoked",
                                                seq));
    case AggregationStatus::kStaleEpoch:
      return absl::FailedPreconditionError(absl::StrFormat(
          "operation %d used a stale group epoch: the group was re-planned", seq));
    case AggregationStatus::kResultGone:
      return absl::DataLossError(absl::StrFormat(
          "the result of operation %d was lost and is no longer held by the fabric", seq));
    case AggregationStatus::kInternal:
      break;
  }
  return absl::InternalError(absl::StrFormat("the fabric failed operation %d", seq));
}

}  // namespace

void GroupEngine::ReleaseSent(Op& op) {
  if (op.sent_released) return;
  op.sent_released = true;
  if (op.sent_end > op.sent_begin) {
    sender_->ReleaseElements({op.sent_begin, static_cast<size_t>(op.sent_end - op.sent_begin)});
  }
}

GroupEngine::GroupEngine(const GroupParams& params, RequestSender* sender, const Clock& clock)
    : params_(params), sender_(sender), clock_(clock) {
  window_.resize(std::max<uint32_t>(params_.num_slots, 1));
}

GroupEngine::~GroupEngine() = default;

absl::StatusOr<OpId> GroupEngine::Start(const CollectiveArgs& args) {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("group %d is no longer usable: %s", params_.group_id, failure_.ToString()));
  }
  auto op = std::make_unique<Op>();
  op->args = args;
  switch (args.collective) {
    case CollectiveType::kAllreduce:
    case CollectiveType::kReduce:
      if (absl::Status s = proto::CheckOpAllowed(args.dtype, args.op); !s.ok()) return s;
      break;
    case CollectiveType::kBcast:
      if (!proto::IsValidDataType(static_cast<uint8_t>(args.dtype))) {
        return absl::InvalidArgumentError("bcast needs a valid data type");
      }
      break;
    case CollectiveType::kBarrier:
      op->args.count = 0;
      break;
    default:
      return absl::InvalidArgumentError("unknown collective");
  }
  op->elem_size = op->args.count > 0 ? proto::DataTypeSize(args.dtype) : 0;
  if (op->elem_size > ChunkBytes()) {
    return absl::InvalidArgumentError("an element does not fit a slot");
  }
  if (!op->args.blocks.empty()) {
    if (absl::Status s = LayOutBlocks(*op); !s.ok()) return s;
    op->vector_chunks = op->num_chunks;
    op->num_chunks = ChannelChunks(op->vector_chunks);
  } else if (op->args.count > 0) {
    const bool reads_send = args.collective != CollectiveType::kBcast || args.root == params_.rank;
    if ((reads_send && args.send == nullptr) || args.recv == nullptr) {
      return absl::InvalidArgumentError("null buffer for a non-empty operation");
    }
    const size_t per_chunk = ElementsPerChunk(*op);
    op->vector_chunks = (op->args.count + per_chunk - 1) / per_chunk;
    op->num_chunks = ChannelChunks(op->vector_chunks);
    if (args.collective == CollectiveType::kAllreduce) op->written.assign(op->num_chunks, false);
    // Not where the result buffer is also read: a bcast root's (its
    // input), an in-place allreduce's or reduce's (retransmissions read
    // the input there), nor with the integrity tag (checked over the
    // whole message in one piece).
    const auto* recv = static_cast<const uint8_t*>(args.recv);
    const auto* send = static_cast<const uint8_t*>(args.send);
    const size_t bytes = op->args.count * op->elem_size;
    const bool overlaps = reads_send && send < recv + bytes && recv < send + bytes;
    op->places_results = !params_.integrity_key.has_value() && !overlaps &&
                         DeliveryOf(*op) == DeliveryMode::kMulticast;
  }
  if (op->args.count == 0) op->num_chunks = ChannelChunks(1);  // channel 0's alone
  op->id = next_op_id_++;
  op->deadline_ns = clock_.NowNanos() + absl::ToInt64Nanoseconds(params_.op_timeout);
  const OpId id = op->id;
  Op& started = *op;
  ops_[id] = std::move(op);
  ++stats_.ops_started;
  if (started.num_chunks == 0) {
    FinishOpIfDone(started);  // another channel carries all of it
  } else {
    queue_.push_back(&started);
  }
  return id;
}

DeliveryMode GroupEngine::DeliveryOf(const Op& op) const {
  if (op.args.collective != CollectiveType::kReduce) return params_.delivery;
  // A reduce's data goes to its root alone. With multicast, every rank
  // gets the result's header by it and the root its data over RC
  // (root_data), or every rank gets the whole result, which the others
  // drop (ReduceData says which). Without multicast, or in a
  // reduce-scatter, the others get a header over RC (to_root): a
  // reduce-scatter's multicast would bring each rank all of V where it
  // keeps V / p.
  if (params_.delivery != DeliveryMode::kMulticast || !op.args.blocks.empty()) {
    return DeliveryMode::kToRoot;
  }
  switch (params_.reduce_data) {
    case ReduceData::kAll:
      return DeliveryMode::kMulticast;
    case ReduceData::kRoot:
      return DeliveryMode::kRootData;
    case ReduceData::kAuto:
      break;
  }
  return op.num_chunks > window_.size() ? DeliveryMode::kRootData : DeliveryMode::kMulticast;
}

bool GroupEngine::MayLose(const Op& op, size_t chunk) const {
  switch (DeliveryOf(op)) {
    case DeliveryMode::kMulticast:
      return true;
    case DeliveryMode::kRootData:
      return Locate(op, chunk).recv == nullptr;  // the root's data comes over RC
    default:
      return false;  // RC is reliable
  }
}

std::optional<GroupEngine::Request> GroupEngine::BuildRequest(const Op& op, size_t chunk,
                                                             uint64_t seq,
                                                             AggregationMessageType type,
                                                             uint32_t repeat) const {
  const CollectiveArgs& a = op.args;
  AggregationHeader h;
  h.type = type;
  h.collective = a.collective;
  h.dtype = a.collective == CollectiveType::kBarrier ? proto::kNoDataType : a.dtype;
  h.op = (a.collective == CollectiveType::kAllreduce || a.collective == CollectiveType::kReduce)
             ? a.op
             : proto::kNoReduceOp;
  h.delivery = DeliveryOf(op);
  h.tree_id = params_.tree_id;
  h.group_id = params_.group_id;
  h.epoch = params_.epoch;
  const ChunkSpan c = Locate(op, chunk);
  h.root_rank = (a.collective == CollectiveType::kReduce || a.collective == CollectiveType::kBcast)
                    ? c.root
                    : 0;
  h.seq = seq;
  h.repeat = repeat;
  h.count = static_cast<uint32_t>(c.n);
  const bool carries = type == AggregationMessageType::kRequest && c.n > 0 && c.send != nullptr;
  h.has_data = carries;
  h.has_tag = params_.integrity_key.has_value();
  Request r;
  if (carries) r.elements = {c.send, c.n * op.elem_size};
  auto written = proto::EncodeAggregationHeader(h, r.header);
  if (!written.ok()) {
    NETFOLD_LOG(kError) << "group engine built an invalid request: " << written.status();
    return std::nullopt;
  }
  if (h.has_tag) {
    r.tag = proto::ComputeAggregationTag(*params_.integrity_key, r.header, r.elements);
    r.tag_size = proto::kAggregationTagSize;
  }
  return r;
}

size_t GroupEngine::RunLength(const Op& op, size_t chunk) const {
  if (op.args.collective != CollectiveType::kBcast) return 1;
  const size_t k = params_.num_slots;
  const size_t most = std::min<size_t>(
      params_.bcast_run == 0 ? std::max<size_t>(k / 4, 1) : std::min<size_t>(params_.bcast_run, k),
      size_t{proto::kMaxAggregationRepeat} + 1);
  const ChunkSpan first = Locate(op, chunk);
  if (first.send != nullptr) return 1;
  size_t run = 1;
  while (run < most && chunk + run < op.num_chunks) {
    const ChunkSpan next = Locate(op, chunk + run);
    if (next.send != nullptr || next.root != first.root || next.n != first.n) break;
    ++run;
  }
  return run;
}

bool GroupEngine::PostNextChunk(std::optional<int64_t>& now_ns) {
  if (queue_.empty() || pending_request_.has_value()) return false;
  if (next_seq_ >= low_seq_ + params_.num_slots) return false;
  Op& op = *queue_.front();
  const size_t chunk = op.chunks_posted;
  const uint64_t seq = next_seq_;
  // A run waits until the window has room for all of it (a run is at most
  // K long, and room reaches K once every result is in: no deadlock).
  const size_t run = RunLength(op, chunk);
  if (!MayPostRun(op, run)) return false;
  std::optional<Request> request = BuildRequest(op, chunk, seq, AggregationMessageType::kRequest,
                                                static_cast<uint32_t>(run - 1));
  if (!request.has_value()) {
    Fail(absl::InternalError("could not encode a request"));
    return false;
  }
  if (const std::span<const uint8_t> e = request->elements; !e.empty()) {
    if (op.sent_begin == nullptr || e.data() < op.sent_begin) op.sent_begin = e.data();
    if (e.data() + e.size() > op.sent_end) op.sent_end = e.data() + e.size();
  }
  absl::Status s = Send(*request);
  if (absl::IsResourceExhausted(s)) {
    pending_request_ = *request;  // committed: retried first on the next Poll
    pending_op_ = op.id;
  } else if (!s.ok()) {
    Fail(s);
    return false;
  }
  if (!now_ns.has_value()) now_ns = clock_.NowNanos();
  const int64_t now = *now_ns;
  for (size_t i = 0; i < run; ++i) {
    InFlight& slot = window_[(seq + i) % window_.size()];
    slot.used = true;
    slot.seq = seq + i;
    slot.op = &op;
    slot.chunk = chunk + i;
    slot.posted_ns = now;
    slot.repaired = false;
    slot.late = false;
    slot.placed = false;
    slot.repair_backoff = RepairAfter();
    slot.repair_at_ns = now + absl::ToInt64Nanoseconds(slot.repair_backoff);
  }
  next_seq_ += run;
  op.chunks_posted += run;
  stats_.chunks_posted += run;
  stats_.bytes_sent += request->elements.size();
  if (op.chunks_posted == op.num_chunks) queue_.pop_front();
  return !pending_request_.has_value();
}

void GroupEngine::OnMessage(const AggregationHeader& h, std::span<const uint8_t> elements,
                            std::span<const uint8_t> message, std::optional<int64_t> arrived_ns) {
  message_ns_ = arrived_ns;
  HandleMessage(h, elements, message);
  message_ns_.reset();
}

void GroupEngine::HandleMessage(const AggregationHeader& h, std::span<const uint8_t> elements,
                                std::span<const uint8_t> message) {
  // First: a result or abort without the job's tag must not complete,
  // fail or even be told apart from another (docs/security.md).
  const bool tag_ok = params_.integrity_key
                          ? h.has_tag && proto::VerifyAggregationTag(*params_.integrity_key, message)
                          : !h.has_tag;
  if (!tag_ok) {
    ++stats_.bad_tags;
    return;
  }
  if (h.tree_id != params_.tree_id || h.group_id != params_.group_id) {
    ++stats_.unexpected_messages;
    return;
  }
  if (h.type == AggregationMessageType::kAbort) {
    // A revocation aborts every operation at once and its message names none
    // (its seq is 0): blaming "operation 0" would point at the wrong one. A
    // stale-epoch abort answers one request and names it.
    if (h.status == AggregationStatus::kOk || h.status == AggregationStatus::kAborted) {
      Fail(absl::AbortedError(absl::StrFormat(
          "group %d: the fabric aborted its operations: the group was revoked",
          params_.group_id)));
    } else {
      Fail(StatusFromResult(h.status, h.seq));
    }
    return;
  }
  if (h.type != AggregationMessageType::kResult) {
    ++stats_.unexpected_messages;
    return;
  }
  InFlight& slot = window_[h.seq % window_.size()];
  if (!slot.used || slot.seq != h.seq) {
    // Seen already (multicast and repair both came), or not ours.
    if (h.seq < low_seq_ || (h.seq < next_seq_ && !slot.used)) {
      ++stats_.duplicate_results;
    } else {
      ++stats_.unexpected_messages;
    }
    return;
  }
  if (h.delivery == DeliveryMode::kRootData && !h.has_data && h.status == AggregationStatus::kOk &&
      Locate(*slot.op, slot.chunk).recv != nullptr) {
    return;  // the root's copy of the header: its data follows over RC
  }
  CompleteChunk(slot, h, elements);
}

void GroupEngine::CompleteChunk(InFlight& slot, const AggregationHeader& h,
                                std::span<const uint8_t> elements) {
  Op& op = *slot.op;
  const CollectiveArgs& a = op.args;
  absl::Status chunk_status = StatusFromResult(h.status, h.seq);
  if (chunk_status.ok()) {
    const ChunkSpan c = Locate(op, slot.chunk);
    if (h.count != c.n || h.collective != a.collective) {
      chunk_status = absl::InternalError(absl::StrFormat(
          "result %d describes another operation (count %d, expected %d)", h.seq, h.count, c.n));
    } else if (c.n > 0 && c.recv != nullptr) {
      if (!h.has_data || elements.size() != c.n * op.elem_size) {
        chunk_status = absl::InternalError(
            absl::StrFormat("result %d carries no or wrong-sized data", h.seq));
      } else {
        // A bcast root's result is its own input, and a result the port
        // placed (ClaimPlace) is where it goes: nothing to write.
        if (elements.data() != c.recv && (a.collective != CollectiveType::kBcast || c.recv != c.send)) {
          std::memcpy(c.recv, elements.data(), elements.size());
        }
        stats_.bytes_received += elements.size();
        if (slot.chunk < op.written.size()) op.written[slot.chunk] = true;
      }
    }
  }
  if (!chunk_status.ok() && op.status.ok()) op.status = chunk_status;
  const int64_t now = NowNs();
  last_result_ns_ = now;
  if (slot.seq + 1 > results_end_seq_) {
    // Chunks kGapResults or more before the newest result are missing, not
    // queued: asked for at once (TCP's fast retransmit after three
    // duplicate ACKs). Waiting for their timers instead held every rank
    // back behind the one that lost a result, and those waits then
    // lengthened everyone's timers.
    const uint64_t from = results_end_seq_ > kGapResults ? results_end_seq_ - kGapResults : 0;
    for (uint64_t seq = std::max(low_seq_, from); seq + kGapResults <= slot.seq; ++seq) {
      InFlight& w = window_[seq % window_.size()];
      if (w.used && w.seq == seq && !w.repaired) w.repair_at_ns = std::min(w.repair_at_ns, now);
    }
    results_end_seq_ = slot.seq + 1;
  }
  if (!slot.repaired && !slot.late) {
    // RFC 6298's estimator, in nanoseconds.
    const int64_t sample = std::max<int64_t>(0, now - slot.posted_ns);
    if (!have_rtt_) {
      srtt_ns_ = sample;
      rttvar_ns_ = sample / 2;
      have_rtt_ = true;
    } else {
      rttvar_ns_ += (std::abs(srtt_ns_ - sample) - rttvar_ns_) / 4;
      srtt_ns_ += (sample - srtt_ns_) / 8;
    }
  }
  ++stats_.results_received;
  if (gate_ != nullptr) {
    if (op.landed.size() != op.num_chunks) op.landed.assign(op.num_chunks, false);
    op.landed[slot.chunk] = true;
    while (op.first_missing < op.num_chunks && op.landed[op.first_missing]) ++op.first_missing;
  }
  slot.used = false;
  slot.op = nullptr;
  while (low_seq_ < next_seq_ && !window_[low_seq_ % window_.size()].used) ++low_seq_;
  ++op.chunks_done;
  FinishOpIfDone(op);
}

size_t GroupEngine::PredictPlaces(std::span<transport::ReceivePlace> out) const {
  size_t n = 0;
  for (uint64_t seq = low_seq_; seq < next_seq_ && n < out.size(); ++seq) {
    const InFlight& slot = window_[seq % window_.size()];
    if (!slot.used || slot.seq != seq || slot.placed || !slot.op->places_results) continue;
    const ChunkSpan c = Locate(*slot.op, slot.chunk);
    if (c.recv == nullptr || c.n == 0) continue;
    const size_t bytes = c.n * slot.op->elem_size;
    out[n++] = {.at = c.recv,
                .len = static_cast<uint32_t>(bytes),
                .head = kResultHead,
                .tail = static_cast<uint32_t>(proto::RocePadCount(bytes) + proto::kIcrcSize),
                .id = seq};
  }
  return n;
}

bool GroupEngine::ClaimPlace(const AggregationHeader& h, const transport::ReceivePlace& place) {
  if (place.id != h.seq || h.type != AggregationMessageType::kResult || !h.has_data ||
      h.has_tag || h.status != AggregationStatus::kOk || h.tree_id != params_.tree_id ||
      h.group_id != params_.group_id) {
    return false;
  }
  InFlight& slot = window_[h.seq % window_.size()];
  if (!slot.used || slot.seq != h.seq || slot.placed || !slot.op->places_results) return false;
  const ChunkSpan c = Locate(*slot.op, slot.chunk);
  // Its elements are then exactly the place's: count and type are the chunk's.
  if (c.recv != place.at || h.count != c.n || h.collective != slot.op->args.collective ||
      h.dtype != slot.op->args.dtype) {
    return false;
  }
  slot.placed = true;
  return true;
}

absl::Duration GroupEngine::RepairAfter() const {
  // Before the first result: kFirstRepairAfter, or a quarter of the
  // operation's deadline if that is shorter (the repair has time to come).
  if (!have_rtt_) {
    return std::max(params_.repair_after, std::min(kFirstRepairAfter, params_.op_timeout / 4));
  }
  const absl::Duration rto = absl::Nanoseconds(srtt_ns_ + 4 * rttvar_ns_);
  return std::clamp(rto, params_.repair_after, std::max(params_.repair_after, kMaxRepairAfter));
}

void GroupEngine::FinishOpIfDone(Op& op) {
  if (op.done || op.chunks_done < op.num_chunks) return;
  op.done = true;
  // Every result is in: the fabric took every request (a retransmission
  // would be a duplicate it drops unread), and the buffer goes back.
  ReleaseSent(op);
  if (op.status.ok() && op.keep_bytes > 0) {
    // This channel's chunks of the block kept (all of them with one
    // channel): another channel writes its own.
    const size_t chunk_bytes = ElementsPerChunk(op) * op.elem_size;
    const size_t keep_end = op.keep_from + op.keep_bytes;
    for (size_t i = 0, g = VectorChunk(0); chunk_bytes > 0 && g * chunk_bytes < keep_end;
         g = VectorChunk(++i)) {
      const size_t from = std::max(g * chunk_bytes, op.keep_from);
      const size_t to = std::min((g + 1) * chunk_bytes, keep_end);
      if (from < to) std::memcpy(op.keep_to + (from - op.keep_from), op.staged.data() + from, to - from);
    }
  }
  if (op.status.ok()) {
    ++stats_.ops_completed;
  } else {
    ++stats_.ops_failed;
  }
}

void GroupEngine::Post() {
  if (!failure_.ok()) return;
  if (pending_request_.has_value()) {
    absl::Status s = Send(*pending_request_);
    if (absl::IsResourceExhausted(s)) return;
    if (!s.ok()) {
      Fail(s);
      return;
    }
    pending_request_.reset();
  }
  // One reading of the clock for what this pass posts: a run of posts
  // takes microseconds, a round trip milliseconds.
  std::optional<int64_t> now_ns;
  while (PostNextChunk(now_ns)) {
  }
}

void GroupEngine::Poll() {
  // Nothing queued, in flight or running: no timer can be due. A job's
  // idle groups then cost the data path's passes nothing (each scanned its
  // window here, and in NextTimerNs: 15 idle communicators made an 8-byte
  // allreduce 20-28 % slower).
  if (Quiet()) return;
  Post();
  if (!failure_.ok()) return;
  const int64_t now = clock_.NowNanos();
  // The oldest chunk whose result may be lost (found when first needed).
  std::optional<uint64_t> oldest_losable;
  auto OldestLosable = [&] {
    if (!oldest_losable.has_value()) {
      oldest_losable = UINT64_MAX;
      for (uint64_t seq = low_seq_; seq < next_seq_; ++seq) {
        const InFlight& w = window_[seq % window_.size()];
        if (w.used && w.seq == seq && MayLose(*w.op, w.chunk)) {
          oldest_losable = seq;
          break;
        }
      }
    }
    return *oldest_losable;
  };
  for (InFlight& slot : window_) {
    if (!slot.used || slot.repair_at_ns > now) continue;
    if (!MayLose(*slot.op, slot.chunk)) {
      slot.repair_at_ns = INT64_MAX;
      continue;
    }
    if (!slot.repaired && results_end_seq_ < slot.seq + 1 + kGapResults) {
      // No later result says it was lost (kGapResults).
      const int64_t wait = absl::ToInt64Nanoseconds(RepairAfter());
      slot.late = true;
      if (last_result_ns_ + wait > now) {
        // Results still come: it is queued behind them.
        slot.repair_at_ns = last_result_ns_ + wait;
        continue;
      }
      if (slot.seq != OldestLosable()) {
        // Nothing comes: only the oldest chunk is asked for (a probe, as
        // TCP resends one segment when its timer fires; the oldest of
        // those that may be lost: one delivered over RC is not). A rank
        // that joins the operation late holds every result back; its peers
        // then ask once per wait, not once per chunk of their windows.
        slot.repair_at_ns = now + wait;
        continue;
      }
    }
    std::optional<Request> repair =
        BuildRequest(*slot.op, slot.chunk, slot.seq, AggregationMessageType::kRepairRequest);
    absl::Status s = repair.has_value() ? Send(*repair)
                                        : absl::InternalError("could not encode a repair request");
    if (!s.ok() && !absl::IsResourceExhausted(s)) {
      Fail(s);
      return;
    }
    if (s.ok()) ++stats_.repairs_sent;
    slot.repaired = true;
    slot.repair_backoff = std::min(slot.repair_backoff * 2, kMaxRepairAfter);
    slot.repair_at_ns = now + absl::ToInt64Nanoseconds(slot.repair_backoff);
  }
  for (auto& [id, op] : ops_) {
    if (!op->done && now >= op->deadline_ns) {
      // The fabric stopped answering: nothing more will come for this group.
      Fail(absl::DeadlineExceededError(absl::StrFormat(
          "group %d: operation %d had no result within %s (%d of %d chunks done)",
          params_.group_id, id, absl::FormatDuration(params_.op_timeout), op->chunks_done,
          op->num_chunks)));
      return;
    }
  }
}

std::optional<int64_t> GroupEngine::NextTimerNs() const {
  if (!failure_.ok() || Quiet()) return std::nullopt;
  const int64_t now = clock_.NowNanos();
  if (pending_request_.has_value()) return now;
  if (!queue_.empty()) {
    // A chunk the window has room for goes now, unless the channels' gate
    // holds it: then a result of another channel opens it, and that
    // result's arrival ends the wait (returning now here spun the wait).
    const Op& op = *queue_.front();
    if (MayPostRun(op, RunLength(op, op.chunks_posted))) return now;
  }
  std::optional<int64_t> next;
  auto consider = [&](int64_t t) { next = next ? std::min(*next, t) : t; };
  for (const InFlight& slot : window_) {
    if (slot.used && slot.repair_at_ns != INT64_MAX) consider(slot.repair_at_ns);
  }
  for (const auto& [id, op] : ops_) {
    if (!op->done) consider(op->deadline_ns);
  }
  return next;
}

bool GroupEngine::Posted(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end() || it->second->done) return true;
  Op& op = *it->second;
  if (op.chunks_posted < op.num_chunks || (pending_request_.has_value() && pending_op_ == id)) {
    return false;
  }
  ReleaseSent(op);  // what is not acknowledged yet is copied
  return true;
}

bool GroupEngine::MayPostRun(const Op& op, size_t run) const {
  return next_seq_ + run <= low_seq_ + params_.num_slots &&
         (gate_ == nullptr || gate_->MayPost(op.id, VectorChunk(op.chunks_posted + run - 1)));
}

std::optional<size_t> GroupEngine::FirstMissing(OpId id) const {
  auto it = ops_.find(id);
  if (it == ops_.end() || it->second->done) return std::nullopt;
  const Op& op = *it->second;
  if (op.first_missing >= op.num_chunks) return std::nullopt;
  return VectorChunk(op.first_missing);
}

bool GroupEngine::Done(OpId id) const {
  auto it = ops_.find(id);
  return it == ops_.end() || it->second->done;
}

std::optional<absl::Status> GroupEngine::Peek(OpId id) const {
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  if (!it->second->done) return std::nullopt;
  return it->second->status;
}

std::optional<WrittenChunks> GroupEngine::Written(OpId id) const {
  auto it = ops_.find(id);
  if (it == ops_.end()) return std::nullopt;
  const Op& op = *it->second;
  if (op.args.collective != CollectiveType::kAllreduce || !op.args.blocks.empty()) {
    return std::nullopt;
  }
  const size_t chunk_bytes = op.args.count > 0 ? ElementsPerChunk(op) * op.elem_size : 0;
  if (params_.channels <= 1) return WrittenChunks::Of(op.written, chunk_bytes);
  // In the whole vector's numbering: this channel's chunks, every
  // channels-th from its own.
  std::vector<bool> written(op.args.count > 0 ? op.vector_chunks : 0, false);
  for (size_t i = 0; i < op.written.size(); ++i) {
    if (op.written[i]) written[VectorChunk(i)] = true;
  }
  return WrittenChunks::Of(written, chunk_bytes);
}

absl::Status GroupEngine::Finish(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  if (!it->second->done) {
    return absl::FailedPreconditionError(absl::StrFormat("operation %d is still running", id));
  }
  absl::Status s = it->second->status;
  ops_.erase(it);
  return s;
}

void GroupEngine::Fail(absl::Status why) {
  if (why.ok()) why = absl::AbortedError("group failed");
  if (failure_.ok()) {
    NETFOLD_LOG(kInfo) << "group " << params_.group_id << " rank " << params_.rank
                       << " failed: " << why;
    failure_ = why;
  }
  for (auto& [id, op] : ops_) {
    ReleaseSent(*op);
    if (op->done) continue;
    op->done = true;
    op->status = failure_;
    ++stats_.ops_failed;
  }
  queue_.clear();
  for (InFlight& slot : window_) slot = InFlight{};
  pending_request_.reset();
}

bool GroupEngine::idle() const { return queue_.empty() && low_seq_ == next_seq_; }

bool GroupEngine::Quiet() const { return idle() && ops_.empty() && !pending_request_.has_value(); }

}  // namespace netfold::host
