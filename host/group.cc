#include "host/group.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/awake_clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/resync.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::host {

// Operations run on the fabric (GroupEngine) or on the hosts
// (HostCollectives). With a host fallback (policy auto/treeorder), a fabric
// operation that fails because the fabric went away (the group revoked, the
// leaf or root switch gone, no result in time) moves the group to the
// hosts: the members first agree on how many operations each completed
// (Resync), the ranks ahead hand the result of the one operation some ranks
// missed to those behind, and every operation not completed anywhere is run
// again on the hosts from its inputs (in-place inputs are kept for that).

namespace {

bool CanFailOver(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsAborted(s) || absl::IsDeadlineExceeded(s);
}

bool InPlace(const CollectiveArgs& a) { return a.send == nullptr || a.send == a.recv; }

// Released reduces (Group::Wait): at most this many, holding at most this
// many bytes of input copies, complete in the background at once; a larger
// input with a host fallback is not released (its copy would cost more
// than the wait it saves).
constexpr int kMaxDetached = 8;
constexpr size_t kMaxDetachedBytes = size_t{64} << 20;

// The groups whose failover this thread is in, outermost first: a failover
// follows another group's from its exchanges (FollowFailover), nested.
thread_local std::vector<uint64_t> t_failovers;

}  // namespace

Group::~Group() {
  if (owner_ != nullptr) {
    // Under the data path's lock: the owner's list of groups is read under
    // it (statistics, WhileWaiting) by other threads; not while another
    // thread is in this group's failover.
    ProgressThread::Inside inside(owner_->progress());
    (void)AwaitOthersFailover();
    if (fabric_ != nullptr) {
      // Operations still pending (a group dropped without Destroy): the
      // link must stop reading their buffers, which the caller may free now.
      fabric_->Fail(
          WithErrorCode(absl::AbortedError("the group was destroyed"), NETFOLD_ERR_ABORTED));
    }
    owner_->Forget(*this);
  }
  ReleaseData();
}

absl::StatusOr<OpId> Group::Start(CollectiveArgs args) {
  if (owner_ == nullptr) return absl::FailedPreconditionError("the context was finalized");
  ProgressThread::Inside inside(owner_->progress());
  if (!AwaitOthersFailover()) return OthersFailoverTooLong();
  const uint32_t group_root = args.root;
  if (!args.blocks.empty()) {
    if (args.blocks.size() != world_ranks_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%d blocks for a %d-rank group: one per rank", args.blocks.size(), size()));
    }
    args.root = 0;  // every rank roots its own block
  }
  if (args.collective == proto::CollectiveType::kReduce ||
      args.collective == proto::CollectiveType::kBcast) {
    if (args.root >= world_ranks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("root %d is not a rank of this %d-rank group", args.root, size()));
    }
    args.root = static_cast<uint32_t>(world_ranks_[args.root]);
  }
  if ((args.collective == proto::CollectiveType::kAllreduce ||
       args.collective == proto::CollectiveType::kReduce)) {
    if (absl::Status s = proto::CheckOpAllowed(args.dtype, args.op); !s.ok()) {
      return WithErrorCode(absl::UnimplementedError(s.message()), NETFOLD_ERR_NOT_SUPPORTED);
    }
  }
  NETFOLD_RETURN_IF_ERROR(TakeDeferred());
  Pending p;
  p.group_root = group_root;
  const size_t bytes =
      args.count == 0 ? 0 : args.count * proto::DataTypeSize(args.dtype);
  if (mode_ == Mode::kFabric && max_released_ > 0 &&
      args.collective == proto::CollectiveType::kReduce && args.blocks.empty() && args.count > 0 &&
      args.root != static_cast<uint32_t>(owner_->world_rank()) &&
      (host_ == nullptr || bytes <= kMaxDetachedBytes)) {
    p.released = true;
    if (host_ != nullptr) {
      // The hosts may have to reduce it again after the caller reused its
      // buffer: the fabric and they read this copy.
      const auto* in = static_cast<const uint8_t*>(InPlace(args) ? args.recv : args.send);
      p.owned_input.assign(in, in + bytes);
      args.send = args.recv = p.owned_input.data();
    }
  }
  p.args = args;
  // The fabric failed while no operation was in flight (a revocation, a
  // member that failed over): this one goes to the hosts, after the others.
  FailOverIfTheFabricFailed();
  if (mode_ == Mode::kHost) {
    NETFOLD_RETURN_IF_ERROR(StartOnHost(p));
  } else {
    // An in-place input the hosts may have to reduce again is copied first.
    // Not an allreduce that is the only operation in flight: a failover
    // completes that one chunk by chunk (host/resync.h) from the chunks the
    // fabric wrote and the inputs it did not touch. One started behind
    // another may have to be run again whole (Failover).
    const bool unsettled =
        std::any_of(ops_.begin(), ops_.end(), [](const auto& e) { return !e.second.outcome; });
    const bool keep =
        args.collective == proto::CollectiveType::kReduce ||
        (args.collective == proto::CollectiveType::kAllreduce && unsettled);
    NETFOLD_ASSIGN_OR_RETURN(p.inner, fabric_->Start(args));
    if (host_ != nullptr && keep && InPlace(args) && args.count > 0 && !p.released) {
      const auto* in = static_cast<const uint8_t*>(args.recv);
      p.saved_input.assign(in, in + args.count * proto::DataTypeSize(args.dtype));
    }
  }
  const OpId id = next_id_++;
  ops_.emplace(id, std::move(p));
  // Post what the window allows now: a nonblocking operation is under way
  // before the caller's next library call (or the progress thread) moves it.
  Progress(absl::ZeroDuration());
  return id;
}

absl::Status Group::StartOnHost(Pending& p) {
  if (host_ == nullptr) return absl::FailedPreconditionError("no host fallback");
  CollectiveArgs a = p.args;
  a.root = p.group_root;
  if (!p.saved_input.empty()) {
    std::memcpy(a.recv, p.saved_input.data(), p.saved_input.size());
    a.send = a.recv;
  }
  NETFOLD_ASSIGN_OR_RETURN(p.inner, host_->Start(a));
  p.on_host = true;
  ++host_ops_;
  return absl::OkStatus();
}

void Group::Progress(absl::Duration timeout) {
  // Not in the middle of another thread's failover of this group (it is
  // outside the lock in an exchange): that thread settles what it failed over.
  if (owner_ == nullptr || OtherThreadFailingOver()) return;
  if (mode_ == Mode::kHost) {
    host_->Progress(timeout);
    owner_->Progress(absl::ZeroDuration());
  } else {
    owner_->Progress(timeout);
    if (host_ != nullptr) {
      host_->Progress(absl::ZeroDuration());
      FollowMembersOnHosts();
    }
  }
  Settle();
  FailOverIfTheFabricFailed();
}

void Group::FollowMembersOnHosts() {
  // A member that failed over waits for this one in the hosts' resync:
  // follow it now, not when this rank's own operation times out.
  if (mode_ != Mode::kFabric || host_ == nullptr || !fabric_->failure().ok()) return;
  if (const std::optional<uint32_t> member = host_->MemberOnHosts(); member.has_value()) {
    fabric_->Fail(WithErrorCode(
        absl::UnavailableError(absl::StrFormat("group %d: member %d failed over to the hosts",
                                               group_id_, *member)),
        NETFOLD_ERR_UNAVAILABLE));
  }
}

void Group::FollowFailover() {
  // Not a group on its way out: its members are in Destroy's barriers,
  // not in a failover (its own Destroy ends its operations).
  if (owner_ == nullptr || destroyed_ || host_ == nullptr) return;
  if (mode_ == Mode::kHost) {
    // Inside this thread's failovers, whose exchanges may be suspended
    // further up the stack (this group's among them): its host engine
    // moves, so that what the members there wait for is answered.
    if (!t_failovers.empty()) host_->Progress(absl::ZeroDuration());
    return;
  }
  FollowMembersOnHosts();
  if (fabric_->failure().ok()) return;
  // Nested in this thread's failovers only below them all (group ids fall
  // down the stack). Nested in any order, two ranks could nest two groups
  // in opposite orders, each waiting in its inner exchange for the next
  // step of the other's outer one, suspended under it. In one order, the
  // lowest group in failover can always be followed, and finishes first.
  if (!t_failovers.empty() && group_id_ >= t_failovers.back()) return;
  Settle();
  FailOverIfTheFabricFailed();
}

void Group::FailOverIfTheFabricFailed() {
  // Settle fails over for an operation in flight; this is for a group with
  // none (between operations, or in Destroy): the members that failed over
  // cannot finish their resync without this one.
  if (mode_ != Mode::kFabric || host_ == nullptr || fabric_->failure().ok() ||
      !CanFailOver(fabric_->failure())) {
    return;
  }
  Failover(fabric_->failure());
}

void Group::Settle() {
  for (auto it = ops_.begin(); it != ops_.end();) {
    Pending& p = it->second;
    if (!p.outcome) {
      if (p.on_host) {
        if (!host_->Done(p.inner)) break;
        p.outcome = host_->Finish(p.inner);
        ++completed_;
      } else {
        if (!fabric_->Done(p.inner)) break;
        // For the caller's failover (Wait): also when the operation itself
        // succeeded, since Wait may still return an earlier reduce's error.
        p.written = fabric_->Written(p.inner);
        absl::Status s = fabric_->Finish(p.inner);
        if (!s.ok() && host_ != nullptr && CanFailOver(s)) {
          Failover(s);
          break;
        }
        p.outcome = s;
        ++completed_;
        if (host_ != nullptr && s.ok()) Record(p);
      }
    }
    if (!p.detached) {
      ++it;
      continue;
    }
    // Nobody waits for a released reduce: its failure goes to the next call.
    if (!p.outcome->ok() && deferred_.ok()) deferred_ = *p.outcome;
    --detached_;
    detached_bytes_ -= p.owned_input.size();
    it = ops_.erase(it);
  }
}

void Group::Record(const Pending& p) {
  // Kept for the ranks that may have missed it (Resync).
  const CollectiveArgs& a = p.args;
  const size_t bytes = a.count * proto::DataTypeSize(a.dtype);
  last_.collective = a.collective;
  last_.group_root = p.group_root;
  last_.dtype = a.dtype;
  last_.op = a.op;
  last_.count = a.count;
  last_.blocks = a.blocks;
  last_.result_bytes = 0;
  last_.result.clear();
  last_.input_bytes = 0;
  last_.input.clear();
  if (a.collective == proto::CollectiveType::kAllreduce ||
      a.collective == proto::CollectiveType::kBcast) {
    std::span<const uint8_t> kept = KeptResult({static_cast<const uint8_t*>(a.recv), bytes},
                                               fabric_->window_slots(), fabric_->slot_bytes());
    if (a.collective == proto::CollectiveType::kBcast && a.blocks.empty() &&
        !BcastRootKeeps(p.group_root, static_cast<uint32_t>(group_rank_))) {
      kept = {};  // the root keeps it for everyone
    }
    last_.result_bytes = bytes;
    last_.result.assign(kept.begin(), kept.end());
  } else if (a.collective == proto::CollectiveType::kReduce) {
    const auto* in = static_cast<const uint8_t*>(p.saved_input.empty() ? a.send
                                                                        : p.saved_input.data());
    std::span<const uint8_t> kept(in, bytes);
    if (a.blocks.empty()) {
      kept = KeptInput(kept, fabric_->window_slots(), fabric_->slot_bytes(),
                       proto::DataTypeSize(a.dtype));
      // The root keeps nothing: members reduce again only for a root
      // behind, and then its input is its current operation's.
      if (p.group_root == static_cast<uint32_t>(group_rank_)) kept = {};
    }
    last_.input_bytes = bytes;
    last_.input.assign(kept.begin(), kept.end());
  }
}

void Group::Failover(const absl::Status& why) {
  NETFOLD_LOG(kWarning) << absl::StrFormat(
      "rank %d: group %d: the fabric failed (%s); the hosts take over", owner_->world_rank(),
      group_id_, why.message());
  mode_ = Mode::kHost;
  failed_over_ = true;
  failing_over_ = std::this_thread::get_id();
  t_failovers.push_back(group_id_);
  fabric_->Fail(WithErrorCode(absl::AbortedError("the group failed over to the hosts"),
                              NETFOLD_ERR_ABORTED));
  for (auto& [id, p] : ops_) {
    if (p.outcome || p.on_host) continue;
    if (!p.written) p.written = fabric_->Written(p.inner);
    (void)fabric_->Finish(p.inner);
  }
  // The members still on the fabric follow at once (Progress), whatever
  // the host algorithm's first messages reach: the resync needs them all.
  host_->AnnounceFailover();
  // A second round when some members were behind: every member then
  // stands at its next operation, which the fabric may have written in
  // part at some of them.
  absl::StatusOr<bool> again = Resync();
  if (again.ok() && *again) again = Resync();
  absl::Status s = again.status();
  for (auto& [id, p] : ops_) {
    if (p.outcome || p.on_host) continue;
    if (s.ok()) s = StartOnHost(p);
    if (!s.ok()) {
      p.outcome = WithErrorCode(
          absl::UnavailableError(absl::StrFormat(
              "the fabric failed (%s) and the hosts could not take over: %s", why.message(),
              s.message())),
          NETFOLD_ERR_UNAVAILABLE);
    }
  }
  t_failovers.pop_back();
  failing_over_.reset();
}

void Group::LetOthersIn() {
  if (owner_ == nullptr || !owner_->progress().OthersWaiting()) return;
  ProgressThread::Outside let_in(owner_->progress());
  std::this_thread::yield();
}

bool Group::OtherThreadFailingOver() const {
  return failing_over_.has_value() && *failing_over_ != std::this_thread::get_id();
}

absl::Status Group::OthersFailoverTooLong() {
  return WithErrorCode(absl::DeadlineExceededError(absl::StrFormat(
                           "group %d: another thread's failover of the group did not end in time",
                           group_id_)),
                       NETFOLD_ERR_TIMEOUT);
}

bool Group::AwaitOthersFailover() {
  if (!OtherThreadFailingOver() || owner_ == nullptr) return true;
  // Its exchanges end by the operation deadline, each; a few of them.
  Deadline guard(ProcessAwakeClock(), 4 * owner_->op_timeout() + absl::Seconds(5));
  while (OtherThreadFailingOver() && !guard.Expired()) {
    ProgressThread::Outside wait(owner_->progress());
    absl::SleepFor(absl::Milliseconds(1));
  }
  return !OtherThreadFailingOver();
}

// The failover's exchanges, over the hosts' own collectives.
class Group::HostResyncExchange : public ResyncExchange {
 public:
  HostResyncExchange(Group& group, Pending* behind) : g_(group), behind_(behind) {}

  // A MAX over values to which each member contributes its own row.
  absl::Status AllgatherCounts(std::span<const uint64_t> mine,
                               std::vector<uint64_t>* all) override {
    all->assign(static_cast<size_t>(g_.size()) * mine.size(), 0);
    std::copy(mine.begin(), mine.end(),
              all->begin() + static_cast<std::ptrdiff_t>(g_.group_rank_ * mine.size()));
    return g_.host_->Run({.collective = proto::CollectiveType::kAllreduce,
                          .dtype = proto::DataType::kUint64,
                          .op = proto::ReduceOp::kMax,
                          .send = all->data(),
                          .recv = all->data(),
                          .count = all->size()},
                         Others());
  }

  // An OR over bytes to which only `from` contributes.
  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    if (g_.group_rank_ != from) std::fill(bytes.begin(), bytes.end(), 0);
    return OrAll(bytes);
  }

  absl::Status OrAll(std::span<uint8_t> bytes) override {
    if (bytes.empty()) return absl::OkStatus();
    return g_.host_->Run({.collective = proto::CollectiveType::kAllreduce,
                          .dtype = proto::DataType::kUint8,
                          .op = proto::ReduceOp::kBor,
                          .send = bytes.data(),
                          .recv = bytes.data(),
                          .count = bytes.size()},
                         Others());
  }

  absl::Status AllreduceAgain(const uint8_t* in, uint8_t* out, size_t bytes) override {
    if (behind_ == nullptr) return absl::InternalError("resync: no operation to run again");
    const CollectiveArgs& b = behind_->args;
    return g_.host_->Run({.collective = proto::CollectiveType::kAllreduce,
                          .dtype = b.dtype,
                          .op = b.op,
                          .send = in,
                          .recv = out,
                          .count = bytes / proto::DataTypeSize(b.dtype)},
                         Others());
  }

  absl::Status ReduceAgain(bool behind, size_t from) override {
    CollectiveArgs a;
    a.collective = proto::CollectiveType::kReduce;
    std::span<const uint8_t> input;
    if (behind) {
      const CollectiveArgs& b = behind_->args;
      a.root = behind_->group_root;
      a.dtype = b.dtype;
      a.op = b.op;
      a.count = b.count;
      a.blocks = b.blocks;
      const size_t bytes = a.count * proto::DataTypeSize(a.dtype);
      const auto* in = static_cast<const uint8_t*>(
          behind_->saved_input.empty() ? b.send : behind_->saved_input.data());
      input = {in, bytes};
      a.recv = b.recv;
    } else {
      // Ahead (so not the root): the recorded operation and the end of its
      // input (KeptInput).
      a.root = g_.last_.group_root;
      a.dtype = g_.last_.dtype;
      a.op = g_.last_.op;
      a.count = g_.last_.count;
      a.blocks = g_.last_.blocks;
      input = g_.last_.input;
      a.recv = nullptr;
    }
    // Only the bytes from `from` on: what the record starts at, or later.
    const size_t whole = a.count * proto::DataTypeSize(a.dtype);
    const size_t element = proto::DataTypeSize(a.dtype);
    if (from > whole || from % element != 0 || input.size() < whole - from ||
        (from > 0 && !a.blocks.empty())) {
      return absl::InternalError(absl::StrFormat(
          "resync: cannot reduce bytes %d.. of a %d-byte reduce from %d bytes of input", from,
          whole, input.size()));
    }
    input = input.last(whole - from);
    a.count = input.size() / element;
    if (a.recv != nullptr) a.recv = static_cast<uint8_t*>(a.recv) + from;
    a.send = input.data();
    return g_.host_->Run(a, Others());
  }

 private:
  // While an exchange waits: the owner's other groups follow their
  // failovers (GroupOwner::WhileWaiting).
  std::function<void()> Others() {
    return [this] {
      if (g_.owner_ == nullptr) return;
      g_.owner_->WhileWaiting();
      g_.LetOthersIn();
    };
  }

  Group& g_;
  Pending* behind_;  // the first unsettled operation, if any
};

absl::StatusOr<bool> Group::Resync() {
  Pending* first = nullptr;
  for (auto& [id, p] : ops_) {
    if (!p.outcome) {
      first = &p;
      break;
    }
  }
  ResyncMember me{.rank = group_rank_, .size = size(), .completed = completed_};
  if (first != nullptr) {
    const CollectiveArgs& a = first->args;
    me.current = ResyncOp{a.collective, a.blocks.empty() ? first->group_root : kEveryMember};
    if (a.collective == proto::CollectiveType::kAllreduce ||
        a.collective == proto::CollectiveType::kBcast) {
      me.current_result = {static_cast<uint8_t*>(a.recv), a.count * proto::DataTypeSize(a.dtype)};
    }
    if (a.collective == proto::CollectiveType::kAllreduce && !first->on_host) {
      me.current_written = first->written;
      me.current_input = {static_cast<const uint8_t*>(InPlace(a) ? a.recv : a.send),
                          me.current_result.size()};
      me.current_input_unsure = InPlace(a) && first->saved_input.empty() && !first->written;
    }
  }
  me.second_round = true;
  me.last = ResyncOp{last_.collective, last_.blocks.empty() ? last_.group_root : kEveryMember};
  me.last_result_bytes = last_.result_bytes;
  me.last_result = last_.result;
  me.last_input_bytes = last_.input_bytes;
  me.last_input_kept = last_.input.size();
  HostResyncExchange exchange(*this, first);
  NETFOLD_ASSIGN_OR_RETURN(ResyncOutcome outcome, netfold::host::Resync(exchange, me));
  if (outcome == ResyncOutcome::kCurrentCompleted) {
    first->outcome = absl::OkStatus();
    completed_ = me.completed;
  }
  return me.another_round;
}

bool Group::Test(OpId id) {
  // Under the lock from the first look: another group's wait may settle
  // this one's operations (FollowFailover).
  std::optional<ProgressThread::Inside> inside;
  if (owner_ != nullptr) inside.emplace(owner_->progress());
  auto it = ops_.find(id);
  if (it == ops_.end()) return true;
  // Another thread is in this group's failover: not done yet.
  if (OtherThreadFailingOver()) return false;
  if (!it->second.outcome && owner_ != nullptr) {
    Progress(absl::ZeroDuration());
    if (!it->second.outcome && CanDetach(it->second)) return true;  // Wait releases it
    // A caller polling with Test waits too (GroupOwner::WhileWaiting).
    if (!it->second.outcome) owner_->WhileWaiting();
  }
  return it->second.outcome.has_value();
}

absl::Status Group::TakeDeferred() {
  if (deferred_.ok()) return absl::OkStatus();
  absl::Status why = std::exchange(deferred_, absl::OkStatus());
  return WithErrorCode(
      absl::Status(why.code(), absl::StrFormat("an earlier reduce of group %d, from which this "
                                               "rank had already returned, failed: %s",
                                               group_id_, why.message())),
      static_cast<netfold_status_t>(ToErrorCode(why)));
}

bool Group::CanDetach(const Pending& p) const {
  if (!p.released || p.on_host || mode_ != Mode::kFabric || !fabric_->Posted(p.inner)) {
    return false;
  }
  // (A caller that fails over itself and counts a released reduce as done,
  // the MPI interposer, allows one: its resync needs every member within
  // one operation of the others.)
  if (detached_ >= std::min(max_released_, kMaxDetached)) return false;
  return detached_ == 0 || detached_bytes_ + p.owned_input.size() <= kMaxDetachedBytes;
}

void Group::DrainDetached() {
  if (detached_ == 0 || owner_ == nullptr) return;
  ProgressThread::Inside inside(owner_->progress());
  Deadline guard(ProcessAwakeClock(), 2 * owner_->op_timeout() + absl::Seconds(5));
  while (detached_ > 0 && !guard.Expired()) Progress(absl::Milliseconds(10));
  if (detached_ > 0 && deferred_.ok()) {
    deferred_ = absl::DeadlineExceededError("a released reduce did not complete in time");
  }
}

absl::Status Group::Wait(OpId id, std::optional<WrittenChunks>* written) {
  // Under the lock from the first look: another group's wait may settle
  // this one's operations (FollowFailover).
  std::optional<ProgressThread::Inside> inside;
  if (owner_ != nullptr) inside.emplace(owner_->progress());
  if (!AwaitOthersFailover()) return OthersFailoverTooLong();
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  if (owner_ == nullptr && !it->second.outcome) {
    return absl::FailedPreconditionError("the context was finalized");
  }
  // The engines enforce the operation's deadline; this one only guards
  // against a bug leaving an operation forever pending (a failover may add
  // a second deadline).
  const absl::Duration op_timeout = owner_ != nullptr ? owner_->op_timeout() : absl::ZeroDuration();
  Deadline guard(ProcessAwakeClock(), 2 * op_timeout + absl::Seconds(5));
  while (!it->second.outcome) {
    // Another thread may have begun this group's failover while this one
    // was outside the lock (LetOthersIn, or another group's failover that
    // WhileWaiting followed): it settles this operation.
    if (!AwaitOthersFailover()) return OthersFailoverTooLong();
    if (it->second.outcome) break;
    if (CanDetach(it->second)) {
      // A reduce whose input has left: the caller may reuse its buffer.
      it->second.detached = true;
      ++detached_;
      detached_bytes_ += it->second.owned_input.size();
      return absl::OkStatus();
    }
    if (guard.Expired()) {
      it->second.outcome = absl::DeadlineExceededError("operation did not complete in time");
      // The caller gets its buffers back: nothing may write into them after
      // (results placed in the caller's buffer, docs/host.md), so the
      // engine lets go of every chunk of the group's.
      if (!it->second.on_host) fabric_->Fail(*it->second.outcome);
      break;
    }
    Progress(absl::Milliseconds(10));
    if (!it->second.outcome && owner_ != nullptr) owner_->WhileWaiting();
    if (!it->second.outcome) LetOthersIn();
  }
  absl::Status s = *it->second.outcome;
  if (written != nullptr) *written = std::move(it->second.written);
  ops_.erase(it);
  // A released reduce that failed meanwhile is reported by the first call after.
  if (s.ok()) s = TakeDeferred();
  return s;
}

bool Group::Keepable() const {
  return owner_ != nullptr && mode_ == Mode::kFabric && fabric_ != nullptr &&
         fabric_->failure().ok() && !failed_over_ && ops_.empty() && detached_ == 0 &&
         deferred_.ok() && !failing_over_.has_value();
}

absl::Status Group::Destroy(Oob& group_oob) {
  return DestroyOrKeep(group_oob, std::nullopt).status();
}

absl::StatusOr<bool> Group::DestroyOrKeep(Oob& group_oob, std::optional<uint64_t> keep_vote) {
  if (owner_ == nullptr) return false;
  absl::Status deferred;
  {
    // Under the lock: another group's wait reads destroyed_ and may settle
    // this one's operations (FollowFailover).
    ProgressThread::Inside inside(owner_->progress());
    // (A failover another thread follows: the group is freed after this.)
    (void)AwaitOthersFailover();
    if (destroyed_) return false;
    destroyed_ = true;
    DrainDetached();
    deferred = TakeDeferred();
  }
  // On the fabric, a barrier of the group first, an operation like any
  // other: a member still in its last operation when the fabric fails finds
  // this one in the failover's resync (with that operation's result), not
  // in a wait of the out-of-band channel. Its outcome is not Destroy's: a
  // fabric that failed under the group does not make the release fail. (On
  // the hosts, every member took part in the resync of the failover.)
  absl::StatusOr<OpId> last = absl::FailedPreconditionError("on the hosts");
  if (mode_ == Mode::kFabric && host_ != nullptr) {
    last = Start({.collective = proto::CollectiveType::kBarrier});
  }
  if (last.ok()) {
    if (absl::Status s = Wait(*last); !s.ok()) {
      NETFOLD_LOG(kInfo) << absl::StrFormat("group %d: the barrier before release: %s",
                                            group_id_, s.ToString());
      keep_vote.reset();
    }
  }
  // Waits for the members and for the manager happen outside the data
  // path's lock: the progress thread keeps the link answered meanwhile.
  // The first is the members' word on keeping the group: kept if every one
  // can, with the same vote (one that cannot releases nothing alone, so
  // none may keep it). 0: release.
  uint64_t keep = 0;
  if (keep_vote && deferred.ok()) {
    ProgressThread::Inside inside(owner_->progress());
    keep = Keepable() ? *keep_vote + 1 : 0;
  }
  std::vector<uint64_t> keeps(world_ranks_.size(), 0);
  absl::Status result = group_oob.Allgather(&keep, keeps.data(), sizeof(keep));
  if (result.ok() && keep != 0 &&
      std::all_of(keeps.begin(), keeps.end(), [keep](uint64_t k) { return k == keep; })) {
    return true;  // destroyed_ stays set until Reopen
  }
  if (result.ok()) result = deferred;
  if (fabric_ != nullptr) {
    ProgressThread::Inside inside(owner_->progress());
    fabric_failed_ = !fabric_->failure().ok();
  }
  if (group_rank_ == 0 && fabric_ != nullptr) {
    for (size_t c = 0; c < fabric_->size(); ++c) {
      absl::Status s = owner_->ReleaseAtManager(fabric_->channel(c).group_id, fabric_failed_);
      // A group the manager already revoked (the failover's cause) is gone.
      if (result.ok() && !(failed_over_ && absl::IsNotFound(s))) result = s;
    }
  }
  {
    ProgressThread::Inside inside(owner_->progress());
    if (fabric_ != nullptr) {
      fabric_->Fail(
          WithErrorCode(absl::AbortedError("the group was destroyed"), NETFOLD_ERR_ABORTED));
    }
    owner_->Forget(*this);
  }
  absl::Status barrier = group_oob.Barrier();
  {
    // The members are past their last message: the peer QPs can go.
    ProgressThread::Inside inside(owner_->progress());
    host_.reset();
  }
  owner_ = nullptr;
  if (!result.ok()) return result;
  if (!barrier.ok()) return barrier;
  return false;
}

}  // namespace netfold::host
