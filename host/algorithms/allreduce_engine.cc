#include "host/algorithms/allreduce_engine.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/peer_header.h"
#include "reduce/reduce.h"

namespace netfold::host::algorithms {

namespace {

using proto::PeerHeader;
using proto::PeerMessageType;

std::string DescribeHeader(const PeerHeader& h, size_t payload) {
  return absl::StrFormat("message %d of op %d (%s, %s %s, %d elements, offset %d, %d bytes)",
                         h.index, h.seq, AlgorithmName(static_cast<Algorithm>(h.algorithm)),
                         proto::DataTypeName(static_cast<proto::DataType>(h.dtype)),
                         proto::ReduceOpName(static_cast<proto::ReduceOp>(h.op)), h.count,
                         h.offset, payload);
}

bool Overlap(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

struct AllreduceEngine::Op {
  OpId id = 0;
  uint32_t seq = 0;
  AllreduceArgs args;
  TreeSpec tree;
  bool has_tree = false;
  reduce::Kernel kernel;
  size_t elem = 0;
  Schedule schedule;
  std::vector<uint32_t> peers;
  // Actions of each lane, in order, and how far each lane got.
  std::vector<std::vector<uint32_t>> lane_actions;
  std::vector<size_t> lane_cursor;
  // Sends to each peer (indexed by rank), in order; the next to post; the
  // messages consumed from each peer.
  std::vector<std::vector<uint32_t>> peer_sends;
  std::vector<size_t> next_post;
  std::vector<uint32_t> received;
  // Sends that become ready after action a: ready[ready_begin[a + 1] ..
  // ready_begin[a + 2]); index 0 is "at the start".
  std::vector<uint32_t> ready_begin;
  std::vector<uint32_t> ready;
  std::vector<uint32_t> send_index_to_peer;  // position of each send in its peer's list
  std::vector<std::vector<uint8_t>> built;   // built, not yet posted messages
  std::vector<bool> is_built;
  int64_t start_ns = 0;
  int64_t deadline_ns = 0;
  bool active = false;
  bool done = false;
  int32_t waiting_peer = -1;  // the peer the blocked lane waits on
  absl::Status status;
  OpStats stats;
};

AllreduceEngine::AllreduceEngine(PeerChannels* channels, const EngineOptions& options)
    : channels_(channels), options_(options) {}

AllreduceEngine::~AllreduceEngine() = default;

absl::StatusOr<std::unique_ptr<AllreduceEngine>> AllreduceEngine::Create(
    PeerChannels* channels, const EngineOptions& options) {
  if (channels == nullptr) return absl::InvalidArgumentError("no peer channels");
  if (options.fragment_bytes < 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fragment_bytes %d is below the minimum of 16", options.fragment_bytes));
  }
  if (options.fragment_bytes + kMessageHeaderBytes > channels->max_message_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragment_bytes %d plus the %d-byte header exceeds the channels' message limit of %d",
        options.fragment_bytes, kMessageHeaderBytes, channels->max_message_bytes()));
  }
  if (options.op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("op_timeout must be positive");
  }
  return std::unique_ptr<AllreduceEngine>(new AllreduceEngine(channels, options));
}

absl::StatusOr<OpId> AllreduceEngine::Start(const AllreduceArgs& args) {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "host allreduce engine of rank %d is no longer usable: %s", channels_->rank(),
        failure_.ToString()));
  }
  if (!IsHostAlgorithm(args.algorithm)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not a host-side allreduce algorithm", AlgorithmName(args.algorithm)));
  }
  auto op = std::make_unique<Op>();
  NETFOLD_ASSIGN_OR_RETURN(op->kernel, reduce::GetKernel(args.dtype, args.op));
  op->elem = op->kernel.element_size();
  if (args.count > 0) {
    if (args.send == nullptr || args.recv == nullptr) {
      return absl::InvalidArgumentError("allreduce: send and recv must not be null");
    }
    if (args.count > SIZE_MAX / op->elem) {
      return absl::InvalidArgumentError(absl::StrFormat("allreduce: count %d too large", args.count));
    }
    const size_t bytes = args.count * op->elem;
    if (args.send != args.recv && Overlap(args.send, args.recv, bytes)) {
      return absl::InvalidArgumentError(
          "allreduce: send and recv overlap without being the same buffer");
    }
  }
  if (args.tree != nullptr) {
    op->tree = *args.tree;
    op->has_tree = true;
  }
  op->args = args;
  op->args.tree = nullptr;
  NETFOLD_ASSIGN_OR_RETURN(
      op->schedule,
      BuildSchedule({.algorithm = args.algorithm,
                     .rank = channels_->rank(),
                     .num_ranks = channels_->num_ranks(),
                     .count = args.count,
                     .fragment_elements = std::max<uint64_t>(1, options_.fragment_bytes / op->elem),
                     .tree = op->has_tree ? &op->tree : nullptr,
                     .tree_degree = options_.tree_degree}));
  op->id = next_id_++;
  op->seq = next_seq_++;
  op->start_ns = channels_->clock().NowNanos();
  const absl::Duration timeout =
      args.timeout > absl::ZeroDuration() ? args.timeout : options_.op_timeout;
  op->deadline_ns = op->start_ns + absl::ToInt64Nanoseconds(timeout);
  ++stats_.ops_started;
  const OpId id = op->id;
  queue_.push_back(op.get());
  ops_[id] = std::move(op);
  return id;
}

void AllreduceEngine::Activate(Op& op) {
  op.active = true;
  const Schedule& s = op.schedule;
  const uint32_t p = channels_->num_ranks();
  if (op.args.count > 0 && op.args.send != op.args.recv) {
    std::memcpy(op.args.recv, op.args.send, op.args.count * op.elem);
  }
  op.peers = s.Peers();
  op.lane_actions.assign(s.num_lanes, {});
  for (uint32_t a = 0; a < s.actions.size(); ++a) op.lane_actions[s.actions[a].lane].push_back(a);
  op.lane_cursor.assign(s.num_lanes, 0);
  op.peer_sends.assign(p, {});
  op.send_index_to_peer.resize(s.sends.size());
  for (uint32_t i = 0; i < s.sends.size(); ++i) {
    op.send_index_to_peer[i] = static_cast<uint32_t>(op.peer_sends[s.sends[i].peer].size());
    op.peer_sends[s.sends[i].peer].push_back(i);
  }
  op.next_post.assign(p, 0);
  op.received.assign(p, 0);
  op.ready_begin.assign(s.actions.size() + 2, 0);
  for (const ScheduleSend& send : s.sends) ++op.ready_begin[send.ready_after + 2];
  for (size_t i = 1; i < op.ready_begin.size(); ++i) op.ready_begin[i] += op.ready_begin[i - 1];
  op.ready.resize(s.sends.size());
  std::vector<uint32_t> fill(op.ready_begin.begin(), op.ready_begin.end() - 1);
  for (uint32_t i = 0; i < s.sends.size(); ++i) op.ready[fill[s.sends[i].ready_after + 1]++] = i;
  op.built.resize(s.sends.size());
  op.is_built.assign(s.sends.size(), false);
  for (uint32_t i = op.ready_begin[0]; i < op.ready_begin[1]; ++i) BuildMessage(op, op.ready[i]);
}

std::vector<uint8_t> AllreduceEngine::TakeBuffer() {
  if (free_buffers_.empty()) return {};
  std::vector<uint8_t> b = std::move(free_buffers_.back());
  free_buffers_.pop_back();
  return b;
}

void AllreduceEngine::GiveBuffer(std::vector<uint8_t> b) {
  if (free_buffers_.size() < 256) free_buffers_.push_back(std::move(b));
}

void AllreduceEngine::BuildMessage(Op& op, uint32_t send_index) {
  const ScheduleSend& s = op.schedule.sends[send_index];
  std::vector<uint8_t> m = TakeBuffer();
  const size_t payload = s.count * op.elem;
  m.resize(kMessageHeaderBytes + payload);
  PeerHeader h;
  h.algorithm = static_cast<uint8_t>(op.args.algorithm);
  h.dtype = static_cast<uint8_t>(op.args.dtype);
  h.op = static_cast<uint8_t>(op.args.op);
  h.seq = op.seq;
  h.index = op.send_index_to_peer[send_index];
  h.offset = s.offset;
  h.count = op.args.count;
  proto::EncodePeerHeader(h, m.data());
  if (payload > 0) {
    std::memcpy(m.data() + kMessageHeaderBytes,
                static_cast<const uint8_t*>(op.args.recv) + s.offset * op.elem, payload);
  }
  op.built[send_index] = std::move(m);
  op.is_built[send_index] = true;
}

bool AllreduceEngine::PostReady(Op& op, uint32_t peer) {
  bool posted = false;
  const std::vector<uint32_t>& list = op.peer_sends[peer];
  while (op.next_post[peer] < list.size()) {
    const uint32_t i = list[op.next_post[peer]];
    if (!op.is_built[i]) break;
    absl::Status s = channels_->Send(peer, op.built[i]);
    if (absl::IsResourceExhausted(s)) break;
    if (!s.ok()) {
      Fail(op, absl::Status(s.code(), absl::StrFormat("%s: sending message %d to rank %d: %s",
                                                     Describe(op), op.next_post[peer], peer,
                                                     s.message())));
      return posted;
    }
    const uint64_t payload = op.built[i].size() - kMessageHeaderBytes;
    op.stats.bytes_sent += payload;
    op.stats.header_bytes_sent += kMessageHeaderBytes;
    ++op.stats.messages_sent;
    stats_.bytes_sent += payload;
    ++stats_.messages_sent;
    GiveBuffer(std::move(op.built[i]));
    op.built[i] = {};
    ++op.next_post[peer];
    posted = true;
  }
  return posted;
}

bool AllreduceEngine::RunAction(Op& op, uint32_t lane) {
  const std::vector<uint32_t>& actions = op.lane_actions[lane];
  if (op.lane_cursor[lane] >= actions.size()) return false;
  const uint32_t index = actions[op.lane_cursor[lane]];
  const ScheduleAction& a = op.schedule.actions[index];
  const std::span<const int32_t> inputs = op.schedule.InputsOf(a);
  uint8_t* out = static_cast<uint8_t*>(op.args.recv) + a.offset * op.elem;
  const size_t bytes = a.count * op.elem;
  std::vector<const void*>& sources = sources_;  // reused: no allocation per action
  sources.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == kOwnInput) {
      sources[i] = out;
      continue;
    }
    const uint32_t peer = static_cast<uint32_t>(inputs[i]);
    std::span<const uint8_t> m;
    if (!channels_->Peek(peer, &m)) {
      op.waiting_peer = static_cast<int32_t>(peer);
      return false;
    }
    if (m.size() < kMessageHeaderBytes) {
      Fail(op, absl::InvalidArgumentError(absl::StrFormat(
                   "%s: rank %d sent a %d-byte message, shorter than the %d-byte header",
                   Describe(op), peer, m.size(), kMessageHeaderBytes)));
      return false;
    }
    const PeerHeader h = proto::DecodePeerHeader(m.data());
    const size_t payload = m.size() - kMessageHeaderBytes;
    if (h.version == proto::kPeerVersion && h.type == PeerMessageType::kAbort) {
      absl::StatusCode code = absl::StatusCode::kAborted;
      std::string why = "(no reason given)";
      uint32_t sent_code = 0;
      if (proto::DecodePeerAbortBody(m.subspan(kMessageHeaderBytes), &sent_code, &why)) {
        code = static_cast<absl::StatusCode>(sent_code);
      }
      if (code == absl::StatusCode::kOk) code = absl::StatusCode::kAborted;
      Fail(op, absl::Status(code, absl::StrFormat("%s: rank %d aborted op %d: %s", Describe(op),
                                                  peer, h.seq, why)));
      return false;
    }
    PeerHeader want;
    want.algorithm = static_cast<uint8_t>(op.args.algorithm);
    want.dtype = static_cast<uint8_t>(op.args.dtype);
    want.op = static_cast<uint8_t>(op.args.op);
    want.seq = op.seq;
    want.index = op.received[peer];
    want.offset = a.offset;
    want.count = op.args.count;
    if (h != want || payload != bytes) {
      Fail(op, absl::InvalidArgumentError(absl::StrFormat(
                   "%s: rank %d sent %s where %s was expected: the ranks must start the same "
                   "allreduces in the same order, with the same algorithm, type, op, count "
                   "and tree",
                   Describe(op), peer, DescribeHeader(h, payload), DescribeHeader(want, bytes))));
      return false;
    }
    sources[i] = m.data() + kMessageHeaderBytes;
  }
  if (sources.size() == 1) {
    if (bytes > 0) std::memcpy(out, sources[0], bytes);
  } else {
    op.kernel.Fold(out, sources, a.count);
  }
  for (int32_t in : inputs) {
    if (in == kOwnInput) continue;
    channels_->Pop(static_cast<uint32_t>(in));
    ++op.received[in];
    op.stats.bytes_received += bytes;
    ++op.stats.messages_received;
    stats_.bytes_received += bytes;
    ++stats_.messages_received;
  }
  op.waiting_peer = -1;
  ++op.lane_cursor[lane];
  for (uint32_t i = op.ready_begin[index + 1]; i < op.ready_begin[index + 2]; ++i) {
    BuildMessage(op, op.ready[i]);
  }
  return true;
}

bool AllreduceEngine::Advance(Op& op) {
  bool progressed = false;
  for (;;) {
    bool moved = false;
    for (uint32_t lane = 0; lane < op.lane_actions.size() && !op.done; ++lane) {
      while (!op.done && RunAction(op, lane)) moved = true;
    }
    for (uint32_t peer : op.peers) {
      if (op.done) break;
      moved |= PostReady(op, peer);
    }
    if (op.done) return true;
    if (!moved) break;
    progressed = true;
  }
  bool finished = true;
  for (uint32_t lane = 0; lane < op.lane_actions.size(); ++lane) {
    finished &= op.lane_cursor[lane] == op.lane_actions[lane].size();
  }
  // Done once every message is not only posted but acknowledged: a rank
  // that returns from an allreduce owes its peers nothing (they need no
  // further progress from it).
  for (uint32_t peer : op.peers) {
    finished &= op.next_post[peer] == op.peer_sends[peer].size() &&
                channels_->Unacknowledged(peer) == 0;
  }
  if (finished) {
    Complete(op);
    return true;
  }
  return progressed;
}

void AllreduceEngine::Complete(Op& op) {
  op.done = true;
  op.stats.elapsed = absl::Nanoseconds(channels_->clock().NowNanos() - op.start_ns);
  ++stats_.ops_completed;
}

std::string AllreduceEngine::Describe(const Op& op) const {
  return absl::StrFormat("allreduce #%d (%s, %d x %s %s) on rank %d of %d", op.seq,
                         AlgorithmName(op.args.algorithm), op.args.count,
                         proto::DataTypeName(op.args.dtype), proto::ReduceOpName(op.args.op),
                         channels_->rank(), channels_->num_ranks());
}

std::string AllreduceEngine::WaitingOn(const Op& op) const {
  if (!op.active) return "still queued behind earlier operations";
  if (op.waiting_peer >= 0) {
    return absl::StrFormat("waiting for message %d from rank %d", op.received[op.waiting_peer],
                           op.waiting_peer);
  }
  for (uint32_t peer : op.peers) {
    if (op.next_post[peer] < op.peer_sends[peer].size()) {
      return absl::StrFormat("message %d to rank %d not yet sent", op.next_post[peer], peer);
    }
  }
  for (uint32_t peer : op.peers) {
    if (const size_t n = channels_->Unacknowledged(peer); n > 0) {
      return absl::StrFormat("%d messages to rank %d not yet acknowledged", n, peer);
    }
  }
  return "nothing pending";
}

void AllreduceEngine::CheckHealth(Op& op) {
  for (uint32_t peer : op.peers) {
    absl::Status s = channels_->PeerStatus(peer);
    if (!s.ok()) {
      Fail(op, absl::Status(s.code(), absl::StrFormat("%s: %s", Describe(op), s.message())));
      return;
    }
  }
  if (channels_->clock().NowNanos() >= op.deadline_ns) {
    Fail(op, absl::DeadlineExceededError(absl::StrFormat(
                 "%s: not done within %s; %s", Describe(op),
                 absl::FormatDuration(absl::Nanoseconds(op.deadline_ns - op.start_ns)),
                 WaitingOn(op))));
  }
}

void AllreduceEngine::Fail(Op& op, absl::Status why) {
  if (op.done) return;
  op.done = true;
  op.status = why;
  op.stats.elapsed = absl::Nanoseconds(channels_->clock().NowNanos() - op.start_ns);
  ++stats_.ops_failed;
  if (failure_.ok()) failure_ = why;
  // Tell every peer of the operation: after the data already posted, so it
  // is seen by a peer blocked on this rank's next message.
  if (op.active) {
    PeerHeader h;
    h.algorithm = static_cast<uint8_t>(op.args.algorithm);
    h.dtype = static_cast<uint8_t>(op.args.dtype);
    h.op = static_cast<uint8_t>(op.args.op);
    h.seq = op.seq;
    h.count = op.args.count;
    for (uint32_t peer : op.peers) {
      aborts_.emplace_back(peer, proto::EncodePeerAbort(h, static_cast<uint32_t>(why.code()),
                                                        std::string_view(why.message().data(),
                                                                         why.message().size()),
                                                        channels_->max_message_bytes()));
    }
  }
  // The queued operations cannot run any more.
  for (Op* other : queue_) {
    if (other == &op || other->done) continue;
    other->done = true;
    other->status = absl::FailedPreconditionError(
        absl::StrFormat("allreduce #%d not run: an earlier operation failed: %s", other->seq,
                        why.message()));
    ++stats_.ops_failed;
  }
}

void AllreduceEngine::FlushAborts() {
  while (!aborts_.empty()) {
    auto& [peer, m] = aborts_.front();
    absl::Status s = channels_->Send(peer, m);
    if (absl::IsResourceExhausted(s)) return;  // retried on the next Poll
    if (s.ok()) ++stats_.aborts_sent;
    aborts_.pop_front();
  }
}

bool AllreduceEngine::PollOnce() {
  bool progressed = false;
  while (!queue_.empty()) {
    Op& op = *queue_.front();
    if (!op.done && !op.active) Activate(op);
    if (!op.done && Advance(op)) progressed = true;
    if (op.done) {
      // Only the outcome and the stats wait for Finish.
      for (auto& b : op.built) {
        if (b.capacity() > 0) GiveBuffer(std::move(b));
      }
      op.schedule = {};
      op.lane_actions = {};
      op.peer_sends = {};
      op.ready = {};
      op.ready_begin = {};
      op.send_index_to_peer = {};
      op.built = {};
      op.is_built = {};
      queue_.pop_front();
      progressed = true;
      continue;
    }
    CheckHealth(op);
    if (!op.done) break;
  }
  FlushAborts();
  return progressed;
}

void AllreduceEngine::Poll() { PollOnce(); }

void AllreduceEngine::Progress(absl::Duration timeout) {
  const bool progressed = PollOnce();
  channels_->Flush();
  absl::Duration wait = progressed ? absl::ZeroDuration() : timeout;
  if (std::optional<int64_t> next = NextTimerNs()) {
    wait = std::min(wait, std::max(absl::ZeroDuration(),
                                   absl::Nanoseconds(*next - channels_->clock().NowNanos())));
  }
  channels_->Progress(wait);
  PollOnce();
  channels_->Flush();
}

std::optional<int64_t> AllreduceEngine::NextTimerNs() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.front()->deadline_ns;
}

bool AllreduceEngine::Done(OpId id) const {
  auto it = ops_.find(id);
  return it != ops_.end() && it->second->done;
}

std::optional<absl::Status> AllreduceEngine::Peek(OpId id) const {
  auto it = ops_.find(id);
  if (it == ops_.end() || !it->second->done) return std::nullopt;
  return it->second->status;
}

absl::Status AllreduceEngine::Finish(OpId id, OpStats* stats) {
  auto it = ops_.find(id);
  if (it == ops_.end()) {
    return absl::NotFoundError(absl::StrFormat("no host allreduce with id %d", id));
  }
  if (!it->second->done) {
    return absl::FailedPreconditionError(
        absl::StrFormat("host allreduce %d is still running", id));
  }
  absl::Status s = it->second->status;
  if (stats != nullptr) *stats = it->second->stats;
  ops_.erase(it);
  return s;
}

absl::Status RunAllreduce(AllreduceEngine& engine, const AllreduceArgs& args, OpStats* stats,
                          absl::Duration poll) {
  NETFOLD_ASSIGN_OR_RETURN(OpId id, engine.Start(args));
  while (!engine.Done(id)) engine.Progress(poll);
  return engine.Finish(id, stats);
}

}  // namespace netfold::host::algorithms
