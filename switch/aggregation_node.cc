#include "switch/aggregation_node.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/counter.h"
#include "base/log.h"

namespace netfold::sw {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DeliveryMode;
using proto::kAggregationHeaderSize;

namespace {

constexpr uint8_t kNotArrived = 0;
constexpr uint8_t kBuffered = 1;  // arrived out of order, waits (kept or in `pending`)
constexpr uint8_t kFolded = 2;    // folded into the accumulator (or carried no data)

bool SameOperation(const AggregationHeader& a, const AggregationHeader& b) {
  return a.collective == b.collective && a.dtype == b.dtype && a.op == b.op &&
         a.count == b.count && a.root_rank == b.root_rank && a.delivery == b.delivery;
}

}  // namespace

std::string_view NodeDropReasonName(NodeDropReason reason) {
  switch (reason) {
    case NodeDropReason::kStaleEpoch: return "stale_epoch";
    case NodeDropReason::kOutsideWindow: return "outside_window";
    case NodeDropReason::kDuplicate: return "duplicate";
    case NodeDropReason::kUnexpectedResult: return "unexpected_result";
    case NodeDropReason::kUnexpectedType: return "unexpected_type";
    case NodeDropReason::kNotRoot: return "not_root";
    case NodeDropReason::kBadTag: return "bad_tag";
    case NodeDropReason::kNumReasons: break;
  }
  return "invalid";
}

uint64_t NodeCounters::TotalDrops() const {
  uint64_t total = 0;
  for (const auto& d : drops) total += d.load(std::memory_order_relaxed);
  return total;
}

struct AggregationNode::Slot {
  enum class State : uint8_t { kFree, kCollecting, kWaitingParent };
  State state = State::kFree;
  bool used = false;  // held an operation since the last reset
  uint64_t seq = 0;   // the operation collected, waited for, or last completed
  AggregationHeader header;  // from the first contribution
  AggregationStatus status = AggregationStatus::kOk;
  reduce::Kernel kernel;
  bool folds = false;  // allreduce/reduce with data: contributions are reduced
  std::span<uint8_t> arrived;       // per child: kNotArrived / kBuffered / kFolded
  std::span<uint8_t> child_data;    // per child: it carried elements
  uint32_t num_arrived = 0;
  size_t next_fold = 0;
  bool acc_started = false;
  std::span<uint8_t> acc;       // header room + P bytes: the partial result
  // children x PendingStride(): out-of-order contributions copied to wait;
  // allocated on a slot's first copy (most wait in their buffers).
  LineOffsetVector<0> pending;
  // Per child: an out-of-order contribution waiting in its receive buffer
  // (MessageKeeper's handle, and where its elements are) instead of in
  // `pending`.
  std::span<void*> kept;
  std::span<const uint8_t*> kept_elements;
  int64_t first_arrival_ns = 0;
  // The root's last distributed result, kept until seq + K completes
  // (below the root, empty).
  bool has_result = false;
  uint64_t result_seq = 0;
  size_t result_len = 0;
  std::span<uint8_t> result;
};

absl::StatusOr<std::unique_ptr<AggregationNode>> AggregationNode::Create(
    const AggregationNodeConfig& config, NodeOutput* output, const Clock& clock) {
  if (config.children.empty() || config.children.size() > kMaxChildren) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "group %d: an aggregation node needs 1..%d children, got %d", config.group_id,
        kMaxChildren, config.children.size()));
  }
  if (config.num_slots == 0 || config.slot_bytes == 0 || config.slot_bytes % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "group %d: slots K=%d and payload P=%d must be positive, P a multiple of 16",
        config.group_id, config.num_slots, config.slot_bytes));
  }
  if (output == nullptr) return absl::InvalidArgumentError("aggregation node without output");
  return std::unique_ptr<AggregationNode>(new AggregationNode(config, output, clock));
}

AggregationNode::AggregationNode(const AggregationNodeConfig& config, NodeOutput* output,
                                 const Clock& clock)
    : config_(config), output_(output), clock_(clock) {
  for (NodeChild& c : config_.children) std::sort(c.ranks.begin(), c.ranks.end());
  const size_t n = config_.children.size();
  const size_t k = config_.num_slots;
  const size_t stride = FrameStride();
  const size_t room = kAggregationHeaderSize + config_.slot_bytes + TagRoom();
  // Written (zeros) now: the first operations take no page faults.
  frames_.assign(stride * k * (config_.has_parent ? 1 : 2), 0);
  arrived_.assign(k * n, kNotArrived);
  child_data_.assign(k * n, 0);
  kept_.assign(k * n, nullptr);
  kept_elements_.assign(k * n, nullptr);
  slots_.resize(k);
  for (size_t i = 0; i < k; ++i) {
    Slot& slot = slots_[i];
    slot.arrived = {arrived_.data() + i * n, n};
    slot.child_data = {child_data_.data() + i * n, n};
    slot.kept = {kept_.data() + i * n, n};
    slot.kept_elements = {kept_elements_.data() + i * n, n};
    slot.acc = {frames_.data() + i * stride, room};
    if (!config_.has_parent) slot.result = {frames_.data() + (k + i) * stride, room};
  }
  fold_inputs_.reserve(n + 1);
  scratch_.assign(kAggregationHeaderSize + TagRoom(), 0);
  out_.assign(kAggregationHeaderSize + config_.slot_bytes + TagRoom(), 0);
}

AggregationNode::~AggregationNode() {
  for (Slot& slot : slots_) ReleaseKept(slot, 0, slot.kept.size());
}

void AggregationNode::ReleaseKept(Slot& slot, size_t from, size_t to) {
  for (size_t c = from; c < to; ++c) {
    if (slot.kept[c] == nullptr) continue;
    keeper_->Release(slot.kept[c]);
    slot.kept[c] = nullptr;
    slot.kept_elements[c] = nullptr;
  }
}

size_t AggregationNode::num_busy_slots() const {
  size_t busy = 0;
  for (const Slot& s : slots_) busy += s.state != Slot::State::kFree;
  return busy;
}

void AggregationNode::Drop(NodeDropReason r) {
  BumpCounter(counters_.drops[static_cast<size_t>(r)], 1);
}

bool AggregationNode::TagOk(const AggregationHeader& h, std::span<const uint8_t> message) {
  const bool ok = config_.integrity_key
                      ? h.has_tag && proto::VerifyAggregationTag(*config_.integrity_key, message)
                      : !h.has_tag;
  if (!ok) Drop(NodeDropReason::kBadTag);
  return ok;
}

std::optional<size_t> AggregationNode::ChildOfRank(uint32_t rank) const {
  for (size_t c = 0; c < config_.children.size(); ++c) {
    const auto& ranks = config_.children[c].ranks;
    if (std::binary_search(ranks.begin(), ranks.end(), rank)) return c;
  }
  return std::nullopt;
}

std::span<const uint8_t> AggregationNode::Frame(std::span<uint8_t> buffer,
                                                const AggregationHeader& h, size_t data_bytes) {
  // The header was validated on the way in (or built here from validated
  // fields), so encoding cannot fail; check anyway: a bug must not send junk.
  AggregationHeader out = h;
  out.has_tag = config_.integrity_key.has_value();
  auto n = proto::EncodeAggregationHeader(out, {buffer.data(), kAggregationHeaderSize});
  if (!n.ok()) {
    NETFOLD_LOG(kError) << "aggregation node: cannot encode a header: " << n.status();
    return {};
  }
  const size_t length = kAggregationHeaderSize + data_bytes;
  if (!out.has_tag) return {buffer.data(), length};
  auto tagged = proto::AppendAggregationTag(*config_.integrity_key,
                                            {buffer.data(), buffer.size()}, length);
  if (!tagged.ok()) {
    NETFOLD_LOG(kError) << "aggregation node: cannot tag a message: " << tagged.status();
    return {};
  }
  return {buffer.data(), *tagged};
}

void AggregationNode::SendError(size_t child, const AggregationHeader& about,
                                AggregationMessageType type, AggregationStatus status) {
  AggregationHeader h = about;
  h.type = type;
  h.status = status;
  h.has_data = false;
  h.epoch = config_.epoch;
  std::span<const uint8_t> msg = Frame(scratch_, h, 0);
  if (!msg.empty()) output_->SendToChild(child, msg);
}

void AggregationNode::OnChildMessage(size_t child, const AggregationHeader& h,
                                     std::span<const uint8_t> elements,
                                     std::span<const uint8_t> message) {
  // Before anything else: an untagged or forged message must not even
  // learn whether its epoch or seq was right.
  if (!TagOk(h, message)) return;
  if (child >= config_.children.size() || h.tree_id != config_.tree_id ||
      h.group_id != config_.group_id) {
    Drop(NodeDropReason::kUnexpectedType);
    return;
  }
  if (h.epoch != config_.epoch) {
    Drop(NodeDropReason::kStaleEpoch);
    SendError(child, h, AggregationMessageType::kAbort, AggregationStatus::kStaleEpoch);
    return;
  }
  switch (h.type) {
    case AggregationMessageType::kRequest:
      HandleRequest(child, h, elements);
      return;
    case AggregationMessageType::kRepairRequest:
      HandleRepair(child, h);
      return;
    default:
      Drop(NodeDropReason::kUnexpectedType);
      return;
  }
}

void AggregationNode::HandleRequest(size_t child, const AggregationHeader& h,
                                    std::span<const uint8_t> elements) {
  BumpCounter(counters_.requests_received, 1);
  if (h.repeat == 0) {
    HandleOneRequest(child, h, elements);
    return;
  }
  // A bcast child without the data stands for a run of operations (the
  // parser allows repeat on nothing else): each goes through the same
  // checks as a request of its own. The whole run must fit the window.
  if (h.repeat >= config_.num_slots) {
    Drop(NodeDropReason::kOutsideWindow);
    return;
  }
  AggregationHeader one = h;
  one.repeat = 0;
  run_up_.reset();
  collecting_run_ = true;
  for (uint64_t i = 0; i <= h.repeat; ++i) {
    one.seq = h.seq + i;
    HandleOneRequest(child, one, {});
  }
  collecting_run_ = false;
  SendRunUp();
}

void AggregationNode::SendRunUp() {
  if (!run_up_.has_value()) return;
  std::span<const uint8_t> msg = Frame(scratch_, *run_up_, 0);
  if (!msg.empty()) output_->SendToParent(msg);
  run_up_.reset();
}

void AggregationNode::HandleOneRequest(size_t child, const AggregationHeader& h,
                                       std::span<const uint8_t> elements) {
  const uint32_t k = config_.num_slots;
  Slot& slot = slots_[h.seq % k];
  switch (slot.state) {
    case Slot::State::kCollecting:
      if (h.seq != slot.seq) {
        Drop(h.seq < slot.seq ? NodeDropReason::kDuplicate : NodeDropReason::kOutsideWindow);
        return;
      }
      if (slot.arrived[child] != kNotArrived) {
        Drop(NodeDropReason::kDuplicate);
        return;
      }
      break;
    case Slot::State::kWaitingParent:
      Drop(h.seq <= slot.seq ? NodeDropReason::kDuplicate : NodeDropReason::kOutsideWindow);
      return;
    case Slot::State::kFree: {
      const uint64_t expected = slot.used ? slot.seq + k : h.seq % k;
      if (h.seq != expected) {
        Drop(h.seq < expected ? NodeDropReason::kDuplicate : NodeDropReason::kOutsideWindow);
        return;
      }
      // A new operation in this slot.
      slot.state = Slot::State::kCollecting;
      slot.seq = h.seq;
      slot.header = h;
      slot.status = AggregationStatus::kOk;
      std::fill(slot.arrived.begin(), slot.arrived.end(), kNotArrived);
      std::fill(slot.child_data.begin(), slot.child_data.end(), 0);
      slot.num_arrived = 0;
      slot.next_fold = 0;
      slot.acc_started = false;
      slot.first_arrival_ns = clock_.NowNanos();
      slot.folds = false;
      if (h.collective == CollectiveType::kAllreduce || h.collective == CollectiveType::kReduce) {
        if (h.count > 0) {
          auto kernel = reduce::GetKernel(h.dtype, h.op);
          if (kernel.ok()) {
            slot.kernel = *kernel;
            slot.folds = true;
          } else {
            slot.status = AggregationStatus::kInvalidRequest;
          }
        }
      }
      if (static_cast<uint64_t>(h.count) * proto::DataTypeSize(h.dtype) + TagRoom() >
          config_.slot_bytes) {
        slot.status = AggregationStatus::kInvalidRequest;
      }
      const bool routed_to_root = h.collective == CollectiveType::kBcast ||
                                  h.delivery == DeliveryMode::kRootData;
      if (routed_to_root && !config_.has_parent && !ChildOfRank(h.root_rank).has_value()) {
        slot.status = AggregationStatus::kInvalidRequest;  // the root is not a member
      }
      break;
    }
  }

  // The contribution must describe the same operation as the first one.
  if (slot.status == AggregationStatus::kOk) {
    if (h.status != AggregationStatus::kOk) {
      slot.status = h.status;  // a child switch reports an error: pass it on
    } else if (!SameOperation(h, slot.header)) {
      slot.status = AggregationStatus::kMismatch;
    } else {
      bool want_data = false;
      switch (h.collective) {
        case CollectiveType::kAllreduce:
        case CollectiveType::kReduce:
          want_data = h.count > 0;
          break;
        case CollectiveType::kBcast: {
          const auto& ranks = config_.children[child].ranks;
          want_data = h.count > 0 && std::binary_search(ranks.begin(), ranks.end(), h.root_rank);
          break;
        }
        case CollectiveType::kBarrier:
          want_data = false;
          break;
      }
      if (h.has_data != want_data) slot.status = AggregationStatus::kMismatch;
    }
  }

  slot.arrived[child] = kBuffered;
  ++slot.num_arrived;
  const bool has_data = slot.status == AggregationStatus::kOk && h.has_data;
  slot.child_data[child] = has_data;
  if (has_data && child != slot.next_fold) {
    // Out of order: wait until the children before it are in, in the
    // receive buffer if the keeper can hold it, else copied into the slot.
    BumpCounter(counters_.contributions_buffered, 1);
    void* handle = keeper_ != nullptr ? keeper_->KeepCurrent() : nullptr;
    if (handle != nullptr) {
      slot.kept[child] = handle;
      slot.kept_elements[child] = elements.data();
    } else {
      BumpCounter(counters_.contributions_copied, 1);
      if (slot.pending.empty()) slot.pending.assign(config_.children.size() * PendingStride(), 0);
      std::memcpy(slot.pending.data() + child * PendingStride(), elements.data(),
                  elements.size());
    }
  }
  // In order, the message is folded straight from the receive buffer.
  Advance(slot, child, elements);
  if (slot.num_arrived == config_.children.size()) Complete(slot);
}

void AggregationNode::Advance(Slot& slot, size_t in_hand, std::span<const uint8_t> elements) {
  const size_t n = config_.children.size();
  const size_t bytes = static_cast<size_t>(slot.header.count) * proto::DataTypeSize(slot.header.dtype);
  uint8_t* acc = slot.acc.data() + kAggregationHeaderSize;
  // Every contribution that is next in child order, in one pass over the
  // accumulator: acc = ((acc op next) op next+1) ...
  fold_inputs_.clear();
  const size_t first = slot.next_fold;
  const bool had_acc = slot.acc_started;
  if (had_acc) fold_inputs_.push_back(acc);
  while (slot.next_fold < n && slot.arrived[slot.next_fold] != kNotArrived) {
    const size_t c = slot.next_fold;
    if (slot.arrived[c] == kBuffered && slot.child_data[c] &&
        slot.status == AggregationStatus::kOk) {
      const uint8_t* src = c == in_hand              ? elements.data()
                           : slot.kept[c] != nullptr ? slot.kept_elements[c]
                                                     : slot.pending.data() + c * PendingStride();
      if (slot.folds) {
        fold_inputs_.push_back(src);
      } else {
        std::memcpy(acc, src, bytes);  // bcast: the one child with the data
      }
      slot.acc_started = true;
      BumpCounter(counters_.bytes_reduced, bytes);
    }
    slot.arrived[c] = kFolded;
    ++slot.next_fold;
  }
  // (Contributions are collected only while the status is OK.)
  if (slot.folds && fold_inputs_.size() > (had_acc ? 1u : 0u)) {
    slot.kernel.Fold(acc, fold_inputs_, slot.header.count);
  }
  // The children folded now are done with: their receive buffers go back.
  ReleaseKept(slot, first, slot.next_fold);
}

void AggregationNode::Complete(Slot& slot) {
  const int64_t us = (clock_.NowNanos() - slot.first_arrival_ns) / 1000;
  size_t bucket = 0;
  while (bucket + 1 < counters_.latency_us_log2.size() && (int64_t{1} << bucket) <= us) ++bucket;
  BumpCounter(counters_.latency_us_log2[bucket], 1);
  BumpCounter(counters_.operations_completed, 1);

  AggregationHeader& r = slot.header;
  r.status = slot.status;
  r.epoch = config_.epoch;
  r.has_data = slot.status == AggregationStatus::kOk && slot.acc_started;
  slot.used = true;
  if (config_.has_parent) {
    r.type = AggregationMessageType::kRequest;
    if (collecting_run_ && r.collective == CollectiveType::kBcast && !r.has_data &&
        r.status == AggregationStatus::kOk) {
      // A run of bcast operations none of this node's children holds the
      // data for: one request up stands for all of them, as it came in.
      if (run_up_.has_value() && run_up_->seq + run_up_->repeat + 1 == r.seq &&
          SameOperation(*run_up_, r)) {
        ++run_up_->repeat;
      } else {
        SendRunUp();
        run_up_ = r;
        run_up_->repeat = 0;
      }
    } else {
      const size_t bytes = r.has_data ? proto::AggregationPayloadSize(r) : 0;
      std::span<const uint8_t> msg = Frame(slot.acc, r, bytes);
      if (!msg.empty()) output_->SendToParent(msg);
    }
    // Results delivered over RC come back through this node; multicast
    // results go straight to the hosts. So does a root_data result's
    // header: its ranks may post s + K before the data passes here on its
    // way to the root, so the slot does not wait for it (OnParentMessage
    // routes it by root_rank).
    slot.state = r.delivery == DeliveryMode::kMulticast || r.delivery == DeliveryMode::kRootData
                     ? Slot::State::kFree
                     : Slot::State::kWaitingParent;
    return;
  }
  Distribute(slot);
}

void AggregationNode::Distribute(Slot& slot) {
  AggregationHeader r = slot.header;
  r.type = AggregationMessageType::kResult;
  const bool multicast =
      r.delivery == DeliveryMode::kMulticast || r.delivery == DeliveryMode::kRootData;
  if (multicast && !config_.multicast) {
    r.status = AggregationStatus::kInvalidRequest;
    r.has_data = false;
    // The error itself still has to arrive: over RC to every child, or, for
    // root_data, the way the data would have gone (the switches below route
    // it to the root, which does not ask again; the others ask for it).
    if (r.delivery == DeliveryMode::kMulticast) r.delivery = DeliveryMode::kRcTree;
  }
  const size_t bytes = r.has_data ? proto::AggregationPayloadSize(r) : 0;
  std::span<const uint8_t> msg = Frame(slot.acc, r, bytes);
  if (msg.empty()) {
    slot.state = Slot::State::kFree;
    return;
  }
  if (r.status == AggregationStatus::kOk) {
    BumpCounter(counters_.results_distributed, 1);
  } else {
    BumpCounter(counters_.errors_distributed, 1);
  }
  if (r.delivery == DeliveryMode::kMulticast) {
    output_->Multicast(msg);
  } else if (r.delivery == DeliveryMode::kRootData) {
    // Every rank learns that s completed from the header; only the root
    // receives the data (the full message, kept below for repair).
    if (config_.multicast) {
      AggregationHeader bare = r;
      bare.has_data = false;
      std::span<const uint8_t> bare_msg = Frame(scratch_, bare, 0);
      if (!bare_msg.empty()) output_->Multicast(bare_msg);
    }
    if (std::optional<size_t> c = ChildOfRank(r.root_rank); c.has_value()) {
      output_->SendToChild(*c, msg);
    }
  } else {
    SendResultDown(r, msg.subspan(kAggregationHeaderSize, bytes), /*relay=*/false);  // not the tag
  }
  // Keep the result for repair until seq + K completes: swap buffers so the
  // accumulator is free for the next operation without a copy.
  std::swap(slot.acc, slot.result);
  slot.has_result = true;
  slot.result_seq = slot.seq;
  slot.result_len = msg.size();
  slot.state = Slot::State::kFree;
}

void AggregationNode::SendResultDown(const AggregationHeader& result,
                                     std::span<const uint8_t> data, bool relay) {
  // The full message to the children that get the data, header-only to the
  // others (to_root: all but the child holding root_rank). Not root_data:
  // Distribute and OnParentMessage route it to the root alone.
  std::optional<size_t> data_child;
  const bool to_root_alone = result.delivery == DeliveryMode::kToRoot;
  if (to_root_alone) data_child = ChildOfRank(result.root_rank);
  AggregationHeader full = result;
  full.type = AggregationMessageType::kResult;
  AggregationHeader bare = full;
  bare.has_data = false;
  std::span<const uint8_t> full_msg;
  if (full.has_data) {
    if (out_.size() < kAggregationHeaderSize + data.size() + TagRoom()) {
      out_.resize(kAggregationHeaderSize + data.size() + TagRoom());
    }
    std::memmove(out_.data() + kAggregationHeaderSize, data.data(), data.size());
    full_msg = Frame(out_, full, data.size());
  }
  std::span<const uint8_t> bare_msg = Frame(scratch_, bare, 0);
  for (size_t c = 0; c < config_.children.size(); ++c) {
    const bool gets_data = full.has_data && (!to_root_alone || data_child == c);
    std::span<const uint8_t> msg = gets_data ? full_msg : bare_msg;
    if (!msg.empty()) output_->SendToChild(c, msg);
  }
  if (relay) BumpCounter(counters_.results_relayed, 1);
}

void AggregationNode::HandleRepair(size_t child, const AggregationHeader& h) {
  Slot& slot = slots_[h.seq % config_.num_slots];
  if (config_.has_parent) {
    // A repair request for s proves every rank got result s - 2K: the rank
    // asking posted s, so result s - K was computed, so every rank had
    // posted s - K, so every rank had received s - 2K. This child's entries
    // that old are stale (its ranks got those results some other way) and
    // go; an entry it already has is kept once. So a child holds fewer
    // than 4K entries and the bound below is never reached: the repairs of
    // ranks waiting for results not computed yet (the root stays silent
    // about those) cannot push out the entry of a rank whose result is on
    // its way back.
    const uint32_t c32 = static_cast<uint32_t>(child);
    const uint64_t two_k = 2 * static_cast<uint64_t>(config_.num_slots);
    bool known = false;
    std::erase_if(pending_repairs_, [&](const std::pair<uint64_t, uint32_t>& e) {
      if (e.second != c32) return false;
      known = known || e.first == h.seq;
      return e.first + two_k <= h.seq;
    });
    if (!known) {
      constexpr size_t kMaxPendingPerChild = 4;
      if (pending_repairs_.size() >=
          config_.num_slots * config_.children.size() * kMaxPendingPerChild) {
        pending_repairs_.erase(pending_repairs_.begin());
      }
      pending_repairs_.emplace_back(h.seq, c32);
    }
    AggregationHeader up = h;
    up.has_data = false;
    std::span<const uint8_t> msg = Frame(scratch_, up, 0);
    if (!msg.empty()) output_->SendToParent(msg);
    BumpCounter(counters_.repairs_forwarded, 1);
    return;
  }
  if (slot.has_result && slot.result_seq == h.seq) {
    output_->SendToChild(child, {slot.result.data(), slot.result_len});
    BumpCounter(counters_.repairs_answered, 1);
    return;
  }
  if ((slot.has_result && slot.result_seq > h.seq) || (slot.used && slot.seq > h.seq)) {
    SendError(child, h, AggregationMessageType::kResult, AggregationStatus::kResultGone);
    BumpCounter(counters_.repairs_answered, 1);
    return;
  }
  // Not computed yet: the result will be multicast when it is.
}

void AggregationNode::OnParentMessage(const AggregationHeader& h,
                                      std::span<const uint8_t> elements,
                                      std::span<const uint8_t> message) {
  if (!TagOk(h, message)) return;
  if (!config_.has_parent || h.tree_id != config_.tree_id || h.group_id != config_.group_id) {
    Drop(NodeDropReason::kUnexpectedType);
    return;
  }
  switch (h.type) {
    case AggregationMessageType::kResult: {
      Slot& slot = slots_[h.seq % config_.num_slots];
      if (slot.state == Slot::State::kWaitingParent && slot.seq == h.seq) {
        slot.state = Slot::State::kFree;
        SendResultDown(h, elements, /*relay=*/true);
        return;
      }
      // A root_data result goes on toward its root; a repaired result to
      // the children that asked for it.
      std::span<const uint8_t> msg;
      auto send = [&](size_t c) {
        if (msg.empty()) {
          if (out_.size() < kAggregationHeaderSize + elements.size() + TagRoom()) {
            out_.resize(kAggregationHeaderSize + elements.size() + TagRoom());
          }
          std::memcpy(out_.data() + kAggregationHeaderSize, elements.data(), elements.size());
          msg = Frame(out_, h, elements.size());
        }
        if (!msg.empty()) output_->SendToChild(c, msg);
      };
      std::optional<size_t> root_child;
      if (h.delivery == DeliveryMode::kRootData) root_child = ChildOfRank(h.root_rank);
      bool delivered = false;
      for (size_t i = 0; i < pending_repairs_.size();) {
        if (pending_repairs_[i].first == h.seq) {
          const uint32_t c = pending_repairs_[i].second;
          if (root_child != c) send(c);
          pending_repairs_.erase(pending_repairs_.begin() + static_cast<ptrdiff_t>(i));
          delivered = true;
        } else {
          ++i;
        }
      }
      if (root_child.has_value()) {
        send(*root_child);
        delivered = true;
      }
      if (delivered) {
        BumpCounter(counters_.results_relayed, 1);
      } else {
        Drop(NodeDropReason::kUnexpectedResult);
      }
      return;
    }
    case AggregationMessageType::kAbort:
      Abort(h.status);
      return;
    default:
      Drop(NodeDropReason::kUnexpectedType);
      return;
  }
}

void AggregationNode::Abort(AggregationStatus why) {
  AggregationHeader h;
  h.type = AggregationMessageType::kAbort;
  h.collective = CollectiveType::kBarrier;
  h.tree_id = config_.tree_id;
  h.group_id = config_.group_id;
  h.status = why == AggregationStatus::kOk ? AggregationStatus::kAborted : why;
  for (size_t c = 0; c < config_.children.size(); ++c) {
    SendError(c, h, AggregationMessageType::kAbort, h.status);
  }
  for (Slot& slot : slots_) {
    ReleaseKept(slot, 0, slot.kept.size());
    slot.state = Slot::State::kFree;
    slot.used = false;
    slot.has_result = false;
  }
  pending_repairs_.clear();
}

}  // namespace netfold::sw
