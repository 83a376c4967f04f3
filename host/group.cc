#include "host/group.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/context.h"
#include "host/error_codes.h"
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

}  // namespace

Group::~Group() {
  if (ctx_ != nullptr) ctx_->Unregister(this);
}

absl::StatusOr<OpId> Group::Start(CollectiveArgs args) {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("the context was finalized");
  const uint32_t group_root = args.root;
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
  Pending p;
  p.args = args;
  p.group_root = group_root;
  if (mode_ == Mode::kHost) {
    NETFOLD_RETURN_IF_ERROR(StartOnHost(p));
  } else {
    NETFOLD_ASSIGN_OR_RETURN(p.inner, engine_->Start(args));
    const bool reduces = args.collective == proto::CollectiveType::kAllreduce ||
                         args.collective == proto::CollectiveType::kReduce;
    if (host_ != nullptr && reduces && InPlace(args) && args.count > 0) {
      const auto* in = static_cast<const uint8_t*>(args.recv);
      p.saved_input.assign(in, in + args.count * proto::DataTypeSize(args.dtype));
    }
  }
  const OpId id = next_id_++;
  ops_.emplace(id, std::move(p));
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
  if (ctx_ == nullptr) return;
  if (mode_ == Mode::kHost) {
    host_->Progress(timeout);
    ctx_->Progress(absl::ZeroDuration());
  } else {
    ctx_->Progress(timeout);
    if (host_ != nullptr) host_->Progress(absl::ZeroDuration());
  }
  Settle();
}

void Group::Settle() {
  for (auto it = ops_.begin(); it != ops_.end(); ++it) {
    Pending& p = it->second;
    if (p.outcome) continue;
    if (p.on_host) {
      if (!host_->Done(p.inner)) return;
      p.outcome = host_->Finish(p.inner);
      ++completed_;
      continue;
    }
    if (!engine_->Done(p.inner)) return;
    absl::Status s = engine_->Finish(p.inner);
    if (!s.ok() && host_ != nullptr && CanFailOver(s)) {
      Failover(s);
      return;
    }
    p.outcome = s;
    ++completed_;
    if (host_ != nullptr && s.ok()) {
      // Kept for the ranks that may have missed it (Resync).
      const CollectiveArgs& a = p.args;
      const size_t bytes = a.count * proto::DataTypeSize(a.dtype);
      last_.collective = a.collective;
      last_.group_root = p.group_root;
      last_.dtype = a.dtype;
      last_.op = a.op;
      last_.count = a.count;
      last_.result.clear();
      last_.input.clear();
      if (a.collective == proto::CollectiveType::kAllreduce ||
          a.collective == proto::CollectiveType::kBcast) {
        const auto* r = static_cast<const uint8_t*>(a.recv);
        last_.result.assign(r, r + bytes);
      } else if (a.collective == proto::CollectiveType::kReduce) {
        if (!p.saved_input.empty()) {
          last_.input = p.saved_input;
        } else {
          const auto* in = static_cast<const uint8_t*>(a.send);
          last_.input.assign(in, in + bytes);
        }
      }
    }
  }
}

void Group::Failover(const absl::Status& why) {
  NETFOLD_LOG(kWarning) << absl::StrFormat(
      "rank %d: group %d: the fabric failed (%s); the hosts take over", ctx_->options_.rank,
      group_id_, why.message());
  mode_ = Mode::kHost;
  failed_over_ = true;
  engine_->Fail(WithErrorCode(absl::AbortedError("the group failed over to the hosts"),
                              NETFOLD_ERR_ABORTED));
  for (auto& [id, p] : ops_) {
    if (!p.outcome && !p.on_host) (void)engine_->Finish(p.inner);
  }
  absl::Status s = Resync();
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
}

absl::Status Group::Resync() {
  // hi and lo: the most and the fewest operations a member completed.
  int64_t marks[2] = {static_cast<int64_t>(completed_), -static_cast<int64_t>(completed_)};
  NETFOLD_RETURN_IF_ERROR(host_->Run({.collective = proto::CollectiveType::kAllreduce,
                                      .dtype = proto::DataType::kInt64,
                                      .op = proto::ReduceOp::kMax,
                                      .send = marks,
                                      .recv = marks,
                                      .count = 2}));
  const uint64_t hi = static_cast<uint64_t>(marks[0]);
  const uint64_t lo = static_cast<uint64_t>(-marks[1]);
  if (hi == lo) return absl::OkStatus();
  if (hi > lo + 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the members completed between %d and %d operations: only one operation apart can be "
        "recovered (wait for each operation before starting the next to fail over safely)",
        lo, hi));
  }
  // Operation `lo` completed on some members only. Those behind have it as
  // their first unsettled operation; those ahead recorded it in last_.
  Pending* behind = nullptr;
  if (completed_ == lo) {
    for (auto& [id, p] : ops_) {
      if (!p.outcome) {
        behind = &p;
        break;
      }
    }
    if (behind == nullptr) return absl::InternalError("resync: no operation to complete");
  }
  const proto::CollectiveType kind = behind ? behind->args.collective : last_.collective;
  const uint32_t root = behind ? behind->group_root : last_.group_root;
  if (kind == proto::CollectiveType::kAllreduce || kind == proto::CollectiveType::kBcast) {
    // The ranks ahead hold the result: OR it over bytes with zeros from
    // those behind.
    const size_t bytes = behind ? behind->args.count * proto::DataTypeSize(behind->args.dtype)
                                : last_.result.size();
    std::vector<uint8_t> buf = behind ? std::vector<uint8_t>(bytes, 0) : last_.result;
    NETFOLD_RETURN_IF_ERROR(host_->Run({.collective = proto::CollectiveType::kAllreduce,
                                        .dtype = proto::DataType::kUint8,
                                        .op = proto::ReduceOp::kBor,
                                        .send = buf.data(),
                                        .recv = buf.data(),
                                        .count = buf.size()}));
    if (behind && bytes > 0) std::memcpy(behind->args.recv, buf.data(), bytes);
  } else if (kind == proto::CollectiveType::kReduce) {
    // Whether the root has the result: it is behind or ahead.
    int64_t root_behind = (behind != nullptr && static_cast<uint32_t>(group_rank_) == root) ? 1 : 0;
    NETFOLD_RETURN_IF_ERROR(host_->Run({.collective = proto::CollectiveType::kAllreduce,
                                        .dtype = proto::DataType::kInt64,
                                        .op = proto::ReduceOp::kMax,
                                        .send = &root_behind,
                                        .recv = &root_behind,
                                        .count = 1}));
    if (root_behind != 0) {
      // The root missed it: everyone reduces again from the inputs.
      CollectiveArgs a;
      a.collective = proto::CollectiveType::kReduce;
      a.root = root;
      std::vector<uint8_t> input;
      if (behind) {
        a.dtype = behind->args.dtype;
        a.op = behind->args.op;
        a.count = behind->args.count;
        const size_t bytes = a.count * proto::DataTypeSize(a.dtype);
        const auto* in = static_cast<const uint8_t*>(
            behind->saved_input.empty() ? behind->args.send : behind->saved_input.data());
        input.assign(in, in + bytes);
        a.recv = behind->args.recv;
      } else {
        // Ahead (so not the root): the recorded operation and input.
        a.dtype = last_.dtype;
        a.op = last_.op;
        a.count = last_.count;
        input = last_.input;
        a.recv = nullptr;
      }
      a.send = input.data();
      NETFOLD_RETURN_IF_ERROR(host_->Run(a));
    }
  }
  if (behind) {
    behind->outcome = absl::OkStatus();
    ++completed_;
  }
  return absl::OkStatus();
}

bool Group::Test(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return true;
  if (!it->second.outcome) Progress(absl::ZeroDuration());
  return it->second.outcome.has_value();
}

absl::Status Group::Wait(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  if (ctx_ == nullptr && !it->second.outcome) {
    return absl::FailedPreconditionError("the context was finalized");
  }
  // The engines enforce the operation's deadline; this one only guards
  // against a bug leaving an operation forever pending (a failover may add
  // a second deadline).
  Deadline guard(RealClock(), 2 * ctx_->options_.timeout + absl::Seconds(5));
  while (!it->second.outcome) {
    if (guard.Expired()) {
      it->second.outcome = absl::DeadlineExceededError("operation did not complete in time");
      break;
    }
    Progress(absl::Milliseconds(10));
  }
  absl::Status s = *it->second.outcome;
  ops_.erase(it);
  return s;
}

absl::Status Group::Destroy(Oob& group_oob) {
  if (destroyed_ || ctx_ == nullptr) return absl::OkStatus();
  destroyed_ = true;
  absl::Status result = group_oob.Barrier();
  if (group_rank_ == 0 && engine_ != nullptr) {
    absl::Status s = ctx_->DestroyGroupAtManager(group_id_);
    // A group the manager already revoked (the failover's cause) is gone.
    if (result.ok() && !(failed_over_ && absl::IsNotFound(s))) result = s;
  }
  if (engine_ != nullptr) {
    engine_->Fail(WithErrorCode(absl::AbortedError("the group was destroyed"), NETFOLD_ERR_ABORTED));
  }
  ctx_->Unregister(this);
  ctx_ = nullptr;
  absl::Status barrier = group_oob.Barrier();
  host_.reset();
  return result.ok() ? barrier : result;
}

}  // namespace netfold::host
