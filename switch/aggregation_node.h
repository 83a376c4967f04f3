// An aggregation node (AN): the reduction state of one group on one switch,
// for one tree, as DESIGN.md "Aggregation semantics" states it. Pure logic:
// no sockets, no queue pairs. The switch feeds it parsed aggregation
// messages and it answers through a NodeOutput; tests and benchmarks drive
// it directly.
//
//   AggregationNodeConfig config{.tree_id = 1, .group_id = 7, .epoch = 1,
//                                .num_slots = 8, .slot_bytes = 4096,
//                                .children = {{.ranks = {0}}, {.ranks = {1}}},
//                                .has_parent = false};
//   auto node = AggregationNode::Create(config, &output, RealClock());
//   (*node)->OnChildMessage(1, header, elements);   // child 1's request for seq s
//   (*node)->OnChildMessage(0, header, elements);   // child 0's: result s goes out
//
// Semantics:
// - Operation s uses slot s mod K. The node collects every child's request
//   for s and reduces them in child order 0, 1, 2... whatever order they
//   arrive in (in-order contributions are folded as they come, others are
//   buffered until their turn), so the bits are a pure function of the
//   inputs and the tree. A non-root node sends the partial result to its
//   parent as a request; the group root (no parent) distributes the result:
//     multicast  one UD datagram to the group (NodeOutput::Multicast);
//     rc_tree    to every child over RC; child switches relay it down;
//     to_root    the data to the child holding root_rank, a header-only
//                result (has_data = 0) to the others, so every rank learns
//                that s completed (it may then post s + K).
//     root_data  (reduce) a header-only result to the group by multicast,
//                the data to the child holding root_rank over RC; child
//                switches relay it toward that rank alone.
// - Bcast: the child holding root_rank carries the data, the others none.
//   A child without the data may send one request for a run of operations
//   (`repeat`, docs/protocol.md): the node takes it as a request for each,
//   and sends the ones it completes without data up as one run too.
//   Barrier: no data at all. Reduce (collective) aggregates like allreduce.
// - The slot window: a child posts s + K only after it received result s,
//   so when s + K completes at the root, result s is no longer needed. The
//   root keeps result s until then; a repair request for s is answered
//   from it over RC (kResultGone once it was overwritten). A non-root node
//   forwards the repair request to its parent and relays the answer to the
//   children that asked.
// - Validation, each a counted drop or an error result, never a crash:
//   stale or future epoch (an abort with kStaleEpoch to that child), a seq
//   outside the window, a duplicate request, a result nobody waits for;
//   children disagreeing on collective, dtype, op, count, root, delivery,
//   or a data layout that does not fit (bcast data from a child not holding
//   the root) complete the operation with kMismatch on every rank; an
//   operation larger than a slot, an op not allowed on the dtype, or a
//   delivery the group cannot do completes with kInvalidRequest. A child
//   switch that reports an error status passes it up; the root distributes it.
// - Integrity (a job created with it; docs/security.md): with
//   `integrity_key` set, every message from a child or the parent must
//   carry a valid tag (proto/aggregation_tag.h) or it is dropped as
//   kBadTag before anything else looks at it (not even a stale epoch is
//   answered), and every message the node sends is tagged. Operations
//   then carry at most P - 16 bytes of elements, so that a message with
//   its tag still fits a slot. Without a key, a tagged message is dropped
//   as kBadTag too: the job did not ask for tags, so its sender is
//   misconfigured or not one of the job's.
//
// Thread-safety: a node belongs to the switch's data-plane thread. Not
// thread-safe; counters are atomics readable from any thread.
#ifndef NETFOLD_SWITCH_AGGREGATION_NODE_H_
#define NETFOLD_SWITCH_AGGREGATION_NODE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/aligned_buffer.h"
#include "base/clock.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "reduce/reduce.h"

namespace netfold::sw {

struct NodeChild {
  // The ranks below this child (one for a host; every rank of a child
  // switch's subtree), sorted. Used to route to_root results and to check
  // which child carries bcast data.
  std::vector<uint32_t> ranks;
};

struct AggregationNodeConfig {
  uint16_t tree_id = 0;
  uint32_t group_id = 0;
  uint32_t epoch = 0;
  uint32_t num_slots = 8;     // K: operations in flight
  uint32_t slot_bytes = 4096; // P: the largest operation payload
  std::vector<NodeChild> children;  // the fixed reduction order
  bool has_parent = false;          // false: this node is the group root
  bool multicast = true;            // the root may deliver by multicast
  // The job's integrity key: tags checked on every message in, made on
  // every message out. nullopt: a job without integrity (no tags).
  std::optional<proto::AggregationKey> integrity_key;
};

// Where a node sends messages. Each call passes one complete aggregation
// message (header and elements); the callee copies what it keeps. Delivery
// must be reliable for SendToParent/SendToChild (RC); Multicast may lose.
class NodeOutput {
 public:
  virtual ~NodeOutput() = default;
  virtual void SendToParent(std::span<const uint8_t> message) = 0;
  virtual void SendToChild(size_t child, std::span<const uint8_t> message) = 0;
  virtual void Multicast(std::span<const uint8_t> message) = 0;
};

// Lets a node keep the bytes of the message it is handling past the call
// instead of copying them: a contribution that came before its turn in the
// reduction order waits in the buffer it arrived in. The switch implements
// it over its queue pairs' receive buffers (a bounded number at a time);
// a node without one copies.
class MessageKeeper {
 public:
  virtual ~MessageKeeper() = default;
  // Keeps the message being handled (the `elements` of the current
  // OnChildMessage) where it is, until Release(handle). nullptr: it cannot
  // be kept now, and the node copies it.
  virtual void* KeepCurrent() = 0;
  virtual void Release(void* handle) = 0;
};

// Why a node dropped a message. Values index counter arrays.
enum class NodeDropReason : uint8_t {
  kStaleEpoch = 0,     // an abort with kStaleEpoch was sent back
  kOutsideWindow,      // seq older than the slot's, or more than K ahead
  kDuplicate,          // this child already contributed to this seq
  kUnexpectedResult,   // a result from the parent nobody waits for
  kUnexpectedType,     // e.g. a result from a child, a request from the parent
  kNotRoot,            // (internal) repair reply with no waiter
  kBadTag,             // integrity: tag missing, wrong, or present on a job without a key
  kNumReasons
};
inline constexpr size_t kNumNodeDropReasons = static_cast<size_t>(NodeDropReason::kNumReasons);
std::string_view NodeDropReasonName(NodeDropReason reason);

struct NodeCounters {
  std::atomic<uint64_t> requests_received{0};
  std::atomic<uint64_t> operations_completed{0};  // at this node (partial or final)
  std::atomic<uint64_t> results_distributed{0};   // at the root
  std::atomic<uint64_t> errors_distributed{0};    // results with a non-OK status
  std::atomic<uint64_t> bytes_reduced{0};         // element bytes folded in
  std::atomic<uint64_t> repairs_answered{0};
  std::atomic<uint64_t> repairs_forwarded{0};
  std::atomic<uint64_t> results_relayed{0};
  // Contributions that came before their turn in the reduction order and
  // waited in the slot (the others are folded straight from the receive
  // buffer as they come), and of those the ones copied to wait (the
  // others waited in their receive buffer, MessageKeeper).
  std::atomic<uint64_t> contributions_buffered{0};
  std::atomic<uint64_t> contributions_copied{0};
  std::array<std::atomic<uint64_t>, kNumNodeDropReasons> drops{};
  // Time from the first contribution to completion, log2 buckets of
  // microseconds: [0] < 1 us, [1] < 2 us, ... [19] >= 2^18 us.
  std::array<std::atomic<uint64_t>, 20> latency_us_log2{};

  uint64_t Drops(NodeDropReason r) const {
    return drops[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
  uint64_t TotalDrops() const;
};

class AggregationNode {
 public:
  // InvalidArgument for an unusable config (no children, K or P zero, P not
  // a multiple of 16, more than kMaxChildren children). `output` and `clock`
  // must outlive the node.
  static constexpr size_t kMaxChildren = 1024;
  static absl::StatusOr<std::unique_ptr<AggregationNode>> Create(
      const AggregationNodeConfig& config, NodeOutput* output, const Clock& clock);
  ~AggregationNode();

  // A parsed aggregation message from child `child` (< num_children()) or
  // from the parent. `elements` are the bytes after the header (without the
  // tag); `message` is the whole message as received (header, elements,
  // tag), which a node with an integrity key needs to check the tag (empty:
  // no tag can be checked, so such a node drops it as kBadTag).
  void OnChildMessage(size_t child, const proto::AggregationHeader& header,
                      std::span<const uint8_t> elements, std::span<const uint8_t> message = {});
  void OnParentMessage(const proto::AggregationHeader& header, std::span<const uint8_t> elements,
                       std::span<const uint8_t> message = {});

  // Abandons every operation in progress and tells every child (kAbort with
  // `why`), e.g. when the group is revoked. The node stays usable with a new
  // epoch (SetEpoch).
  void Abort(proto::AggregationStatus why);
  void SetEpoch(uint32_t epoch) { config_.epoch = epoch; }
  // Early contributions wait in their receive buffers through `keeper`
  // instead of being copied. Set before the first message; `keeper` must
  // outlive the node (which releases what it keeps when destroyed).
  void SetKeeper(MessageKeeper* keeper) { keeper_ = keeper; }

  const AggregationNodeConfig& config() const { return config_; }
  size_t num_children() const { return config_.children.size(); }
  // Slots collecting contributions or waiting for the parent's result.
  size_t num_busy_slots() const;
  const NodeCounters& counters() const { return counters_; }

 private:
  struct Slot;
  AggregationNode(const AggregationNodeConfig& config, NodeOutput* output, const Clock& clock);

  void Drop(NodeDropReason r);
  // False (and counted as kBadTag) if `message` breaks the integrity rule.
  bool TagOk(const proto::AggregationHeader& h, std::span<const uint8_t> message);
  // Bytes a message buffer needs beyond header and elements: room for a tag.
  size_t TagRoom() const { return config_.integrity_key ? proto::kAggregationTagSize : 0; }
  // A request, or a run of them (`repeat`): each operation of a run goes
  // through HandleOneRequest.
  void HandleRequest(size_t child, const proto::AggregationHeader& h,
                     std::span<const uint8_t> elements);
  void HandleOneRequest(size_t child, const proto::AggregationHeader& h,
                        std::span<const uint8_t> elements);
  // Sends run_up_ to the parent, if there is one.
  void SendRunUp();
  void HandleRepair(size_t child, const proto::AggregationHeader& h);
  // Folds the contributions that are next in child order: buffered ones,
  // and child `in_hand`'s `elements` if it is among them.
  void Advance(Slot& slot, size_t in_hand, std::span<const uint8_t> elements);
  // Hands back the receive buffers children [from, to) of the slot wait in.
  void ReleaseKept(Slot& slot, size_t from, size_t to);
  void Complete(Slot& slot);
  void Distribute(Slot& slot);
  void SendResultDown(const proto::AggregationHeader& result, std::span<const uint8_t> data,
                      bool relay);
  // A message buffer: 40 bytes of header, then elements on a cache line
  // (what reduce/'s kernels run fastest on).
  using FrameBuffer = LineOffsetVector<kCacheLine - proto::kAggregationHeaderSize>;
  // Encodes `h` into the first 40 bytes of `buffer` and returns header+data
  // (and the tag after the data, with an integrity key: `buffer` then has
  // 16 bytes of room after the data).
  std::span<const uint8_t> Frame(std::span<uint8_t> buffer, const proto::AggregationHeader& h,
                                 size_t data_bytes);
  // Bytes between two slots' message buffers in frames_: header room, P
  // bytes and the tag's room, rounded up to a cache line (so every
  // buffer's elements start on a line, as frames_' own do).
  size_t FrameStride() const {
    const size_t room = proto::kAggregationHeaderSize + config_.slot_bytes + TagRoom();
    return (room + kCacheLine - 1) / kCacheLine * kCacheLine;
  }
  // Bytes between two children's buffered contributions: P rounded up to
  // a cache line.
  size_t PendingStride() const {
    return (config_.slot_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  }
  std::optional<size_t> ChildOfRank(uint32_t rank) const;
  void SendError(size_t child, const proto::AggregationHeader& about,
                 proto::AggregationMessageType type, proto::AggregationStatus status);

  AggregationNodeConfig config_;
  NodeOutput* output_;
  const Clock& clock_;
  std::vector<Slot> slots_;
  // The slots' storage, a few allocations per node rather than several
  // per slot (a switch installs a group per communicator an application
  // makes): every slot's accumulator, and at the root its kept result, in
  // frames_ (each FrameStride() bytes); the per-child state of slot s at
  // [s * children, (s + 1) * children) of the arrays below.
  FrameBuffer frames_;
  std::vector<uint8_t> arrived_;
  std::vector<uint8_t> child_data_;
  std::vector<void*> kept_;
  std::vector<const uint8_t*> kept_elements_;
  // (seq, child) pairs waiting for a repaired result from the parent.
  std::vector<std::pair<uint64_t, uint32_t>> pending_repairs_;
  MessageKeeper* keeper_ = nullptr;
  std::vector<const void*> fold_inputs_;  // Advance's inputs of one Fold
  FrameBuffer scratch_;  // header-only and error messages
  FrameBuffer out_;      // full results sent down
  // While a run of requests is handled: the operations it completed here
  // that go up without data, as one request standing for them all.
  bool collecting_run_ = false;
  std::optional<proto::AggregationHeader> run_up_;
  NodeCounters counters_;
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_AGGREGATION_NODE_H_
