// Host-side allreduce: runs the ring, bidirectional ring, tree and
// tree-scatter algorithms (docs/algorithms.md) over PeerChannels, as a
// nonblocking state machine in the caller's thread, like host::GroupEngine:
// Start queues an operation, Poll/Progress advance it, Done/Finish collect
// it. No threads, no busy waiting: Progress blocks in the channels' endpoint
// for at most its timeout.
//
//   auto engine = *AllreduceEngine::Create(channels.get(), {.fragment_bytes = 64 << 10});
//   auto op = engine->Start({.algorithm = Algorithm::kRing, .dtype = DataType::kFp32,
//                            .op = ReduceOp::kSum, .send = in, .recv = out, .count = n});
//   while (!engine->Done(*op)) engine->Progress(absl::Milliseconds(1));
//   OpStats stats;
//   absl::Status s = engine->Finish(*op, &stats);   // stats.bytes_sent: 2(p-1)n/p elements
//
// Contract:
// - Every rank of the group starts the same allreduces in the same order
//   with the same algorithm, dtype, op, count and tree (as MPI requires of
//   collectives). A rank that disagrees is detected from the message headers:
//   InvalidArgument on the ranks that notice, then the abort below.
// - recv may equal send (in place); otherwise they must not overlap. The
//   input is read at activation; recv holds partial results while the
//   operation runs and the result once it is done. send is never written.
// - An operation is done when its result is in recv and every message it
//   sent has been acknowledged by the receiving rank, so a rank that
//   returns from an allreduce owes the others no further progress. Between
//   operations the channels still need Progress() now and then (they answer
//   the peers' acknowledgements and keepalives).
// - Operations run one at a time in start order (the next starts when the
//   previous one is done). The result bits depend only on the inputs, the
//   algorithm, the number of ranks, the count and the tree — never on
//   timing, loss or the fragment size: the association order of each
//   algorithm is written in docs/algorithms.md.
// - Every operation has a deadline (args.timeout or options.op_timeout from
//   Start): DeadlineExceeded, naming the message or rank it waits for. A
//   peer whose connection fails gives Unavailable naming that rank. A rank
//   whose operation fails sends an abort to its peers, which fail with the
//   same code and a message naming the cause, so a dead rank brings the
//   others down promptly instead of at their deadline.
// - After a failure the engine refuses new operations (FailedPrecondition)
//   and fails those queued: the ranks no longer agree on where they are.
//   Build new channels and a new engine to go on.
//
// Thread-safety: not thread-safe; one thread drives an engine and its channels.
#ifndef NETFOLD_HOST_ALGORITHMS_ALLREDUCE_ENGINE_H_
#define NETFOLD_HOST_ALGORITHMS_ALLREDUCE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/algorithms/algorithm.h"
#include "host/algorithms/peer_channels.h"
#include "host/algorithms/schedule.h"
#include "host/algorithms/tree_spec.h"
#include "proto/data_type.h"
#include "proto/peer_header.h"
#include "proto/reduce_op.h"

namespace netfold::host::algorithms {

// Bytes of the header in front of every message (proto/peer_header.h).
inline constexpr size_t kMessageHeaderBytes = proto::kPeerHeaderSize;

struct EngineOptions {
  // The largest payload of one message. Vectors are cut into fragments of
  // this size, which pipeline through the schedule. At least 16 bytes, and
  // fragment_bytes + kMessageHeaderBytes <= channels->max_message_bytes().
  size_t fragment_bytes = 64 * 1024;
  absl::Duration op_timeout = absl::Seconds(30);
  // The degree of TreeSpec::KAry, the tree kTree and kTreeScatter follow
  // when AllreduceArgs::tree is null.
  uint32_t tree_degree = 2;
};

struct AllreduceArgs {
  Algorithm algorithm = Algorithm::kRing;  // a host algorithm (kHostAlgorithms)
  proto::DataType dtype = proto::DataType::kFp32;
  proto::ReduceOp op = proto::ReduceOp::kSum;
  const void* send = nullptr;  // count elements
  void* recv = nullptr;        // count elements; may equal send
  size_t count = 0;            // 0: a barrier
  // kTree / kTreeScatter: the tree to follow, e.g. the fabric tree the group
  // was planned on (tree-order mode); copied by Start. nullptr: the k-ary
  // tree of EngineOptions::tree_degree. The rings ignore it except for
  // count 0.
  const TreeSpec* tree = nullptr;
  absl::Duration timeout = absl::ZeroDuration();  // 0: EngineOptions::op_timeout
};

using OpId = uint64_t;

// What one operation put on the wire from this rank.
struct OpStats {
  uint64_t bytes_sent = 0;         // payload (element) bytes
  uint64_t bytes_received = 0;     // payload bytes consumed
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t header_bytes_sent = 0;  // kMessageHeaderBytes per message
  absl::Duration elapsed;          // Start to done
};

struct EngineStats {
  uint64_t ops_started = 0;
  uint64_t ops_completed = 0;  // successfully
  uint64_t ops_failed = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t aborts_sent = 0;
};

class AllreduceEngine {
 public:
  // InvalidArgument for a null channels or options that do not fit them.
  // `channels` is not owned and must outlive the engine.
  static absl::StatusOr<std::unique_ptr<AllreduceEngine>> Create(PeerChannels* channels,
                                                                 const EngineOptions& options);
  ~AllreduceEngine();
  AllreduceEngine(const AllreduceEngine&) = delete;
  AllreduceEngine& operator=(const AllreduceEngine&) = delete;

  // Validates `args` and queues the operation. InvalidArgument: not a host
  // algorithm, (dtype, op) not allowed, null buffers with count > 0,
  // overlapping send/recv, an invalid tree. FailedPrecondition after a
  // failure. Nothing is sent before Poll/Progress.
  absl::StatusOr<OpId> Start(const AllreduceArgs& args);

  // Advances the operations as far as received messages allow and posts the
  // messages that became ready; expires the deadline. Never waits.
  void Poll();
  // Poll, then wait in the channels up to `timeout` (less if the deadline
  // is sooner, zero if Poll made progress), then Poll again.
  void Progress(absl::Duration timeout);
  // The active operation's deadline (clock nanoseconds); nullopt if idle.
  std::optional<int64_t> NextTimerNs() const;

  bool Done(OpId id) const;
  // The outcome once Done, and forgets the operation; NotFound for an
  // unknown id, FailedPrecondition while it is pending.
  absl::Status Finish(OpId id, OpStats* stats = nullptr);
  // The outcome without forgetting it; nullopt while pending or unknown.
  std::optional<absl::Status> Peek(OpId id) const;

  // Not OK once an operation failed (the first failure).
  const absl::Status& failure() const { return failure_; }
  // No operation queued or running.
  bool idle() const { return queue_.empty(); }
  const EngineStats& stats() const { return stats_; }
  const EngineOptions& options() const { return options_; }
  PeerChannels& channels() { return *channels_; }

 private:
  struct Op;
  AllreduceEngine(PeerChannels* channels, const EngineOptions& options);

  bool PollOnce();  // true if anything moved
  void Activate(Op& op);
  bool Advance(Op& op);
  bool RunAction(Op& op, uint32_t lane);
  bool PostReady(Op& op, uint32_t peer);
  void BuildMessage(Op& op, uint32_t send_index);
  void CheckHealth(Op& op);
  void Fail(Op& op, absl::Status why);
  void FlushAborts();
  void Complete(Op& op);
  std::string Describe(const Op& op) const;
  std::string WaitingOn(const Op& op) const;
  std::vector<uint8_t> TakeBuffer();
  void GiveBuffer(std::vector<uint8_t> b);

  PeerChannels* channels_;
  EngineOptions options_;
  absl::Status failure_;
  OpId next_id_ = 1;
  uint32_t next_seq_ = 0;
  std::deque<Op*> queue_;                    // started, not done; front is active
  std::map<OpId, std::unique_ptr<Op>> ops_;  // owner, until Finish
  std::deque<std::pair<uint32_t, std::vector<uint8_t>>> aborts_;  // not yet posted
  std::vector<std::vector<uint8_t>> free_buffers_;
  std::vector<const void*> sources_;  // RunAction's fold inputs
  EngineStats stats_;
};

// Start, Progress until done (the operation's deadline bounds the wait),
// Finish. For benchmarks, tests and blocking callers.
absl::Status RunAllreduce(AllreduceEngine& engine, const AllreduceArgs& args,
                          OpStats* stats = nullptr,
                          absl::Duration poll = absl::Milliseconds(1));

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_ALLREDUCE_ENGINE_H_
