#include "host/host_collectives.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/awake_clock.h"
#include "base/status_macros.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::host {

namespace alg = algorithms;

absl::StatusOr<std::unique_ptr<HostCollectives>> HostCollectives::Connect(
    transport::RoceEndpoint* endpoint, Oob& group_oob, const HostCollectivesOptions& options) {
  std::unique_ptr<HostCollectives> hc(new HostCollectives());
  hc->options_ = options;
  hc->rank_ = static_cast<uint32_t>(group_oob.rank());
  hc->size_ = static_cast<uint32_t>(group_oob.size());
  hc->ops_by_algorithm_.assign(alg::kHostAlgorithms.size() + 1, 0);
  alg::RcPeerChannelsOptions co;
  co.pkey = options.pkey;
  NETFOLD_ASSIGN_OR_RETURN(hc->channels_,
                           alg::RcPeerChannels::Create(endpoint, hc->rank_, hc->size_, co));
  NETFOLD_RETURN_IF_ERROR(hc->channels_->ConnectWithOob({
      .allgather = [&](std::span<const uint8_t> mine, std::span<uint8_t> all) {
        return group_oob.Allgather(mine.data(), all.data(), mine.size());
      },
      .barrier = [&] { return group_oob.Barrier(); },
  }));
  alg::EngineOptions eo;
  eo.op_timeout = options.op_timeout;
  eo.fragment_bytes = std::min<size_t>(eo.fragment_bytes,
                                       hc->channels_->max_message_bytes() - alg::kMessageHeaderBytes);
  NETFOLD_ASSIGN_OR_RETURN(hc->engine_, alg::AllreduceEngine::Create(hc->channels_.get(), eo));
  return hc;
}

HostCollectives::~HostCollectives() = default;

absl::StatusOr<OpId> HostCollectives::Start(const CollectiveArgs& args) {
  const size_t elem = proto::DataTypeSize(args.dtype);
  const size_t bytes = args.count * elem;
  if (args.count > 0 && args.recv == nullptr && args.blocks.empty() &&
      !(args.collective == proto::CollectiveType::kReduce && args.root != rank_)) {
    return absl::InvalidArgumentError("recv is null");
  }
  Op op;
  alg::AllreduceArgs a;
  a.dtype = args.dtype;
  a.op = args.op;
  a.count = args.count;
  a.send = args.send;
  a.recv = args.recv;
  if (!args.blocks.empty()) {
    NETFOLD_RETURN_IF_ERROR(LayOutBlocks(args, op, a));
  } else {
    switch (args.collective) {
      case proto::CollectiveType::kAllreduce:
        break;
      case proto::CollectiveType::kReduce:
        if (args.root >= size_) return absl::InvalidArgumentError("root out of range");
        if (args.root != rank_) {
          op.scratch_out.resize(bytes);
          a.recv = op.scratch_out.data();
        }
        break;
      case proto::CollectiveType::kBcast:
        if (args.root >= size_) return absl::InvalidArgumentError("root out of range");
        // Bitwise OR over bytes: the root's data OR zeros from everyone else.
        a.dtype = proto::DataType::kUint8;
        a.op = proto::ReduceOp::kBor;
        a.count = bytes;
        if (args.root != rank_) {
          op.scratch_in.assign(bytes, 0);
          a.send = op.scratch_in.data();
        } else if (a.send == nullptr) {
          a.send = args.recv;
        }
        break;
      case proto::CollectiveType::kBarrier:
        a.count = 0;
        a.send = a.recv = nullptr;
        break;
    }
  }
  if (a.count > 0 && a.send == nullptr) a.send = a.recv;  // in place
  NETFOLD_ASSIGN_OR_RETURN(
      alg::Selection sel,
      alg::SelectAlgorithm({.policy = options_.policy,
                            .fabric_available = false,
                            .fabric_tree_known = options_.fabric_tree.has_value(),
                            .bytes = a.count * proto::DataTypeSize(a.dtype),
                            .num_ranks = size_}));
  a.algorithm = sel.algorithm;
  if (sel.use_fabric_tree && options_.fabric_tree) a.tree = &*options_.fabric_tree;
  NETFOLD_ASSIGN_OR_RETURN(op.inner, engine_->Start(a));
  const size_t index = static_cast<size_t>(sel.algorithm);
  if (index < ops_by_algorithm_.size()) ++ops_by_algorithm_[index];
  const OpId id = next_id_++;
  ops_.emplace(id, std::move(op));
  return id;
}

bool HostCollectives::Done(OpId id) const {
  auto it = ops_.find(id);
  return it == ops_.end() || engine_->Done(it->second.inner);
}

absl::Status HostCollectives::Finish(OpId id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return absl::NotFoundError(absl::StrFormat("no operation %d", id));
  absl::Status s = engine_->Finish(it->second.inner);
  const Op& op = it->second;
  if (s.ok() && op.keep_to != nullptr && op.keep_bytes > 0) {
    std::memcpy(op.keep_to, op.scratch_out.data() + op.keep_from, op.keep_bytes);
  }
  ops_.erase(it);
  return s;
}

absl::Status HostCollectives::LayOutBlocks(const CollectiveArgs& args, Op& op,
                                           alg::AllreduceArgs& a) const {
  if (args.blocks.size() != static_cast<size_t>(size_)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d blocks for a %d-rank group", args.blocks.size(), size_));
  }
  size_t total = 0, before = 0;
  for (size_t r = 0; r < args.blocks.size(); ++r) {
    if (r == static_cast<size_t>(rank_)) before = total;
    total += args.blocks[r];
  }
  if (total != args.count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the blocks hold %d elements, the operation %d", total, args.count));
  }
  const size_t elem = proto::DataTypeSize(args.dtype);
  const size_t mine = args.blocks[static_cast<size_t>(rank_)] * elem;
  switch (args.collective) {
    case proto::CollectiveType::kBcast:
      // Allgather: a bitwise OR over the whole vector, to which each rank
      // contributes its block.
      if (mine > 0 && args.send == nullptr) return absl::InvalidArgumentError("send is null");
      if (total > 0 && args.recv == nullptr) return absl::InvalidArgumentError("recv is null");
      op.scratch_in.assign(total * elem, 0);
      if (mine > 0) std::memcpy(op.scratch_in.data() + before * elem, args.send, mine);
      a.dtype = proto::DataType::kUint8;
      a.op = proto::ReduceOp::kBor;
      a.count = total * elem;
      a.send = op.scratch_in.data();
      return absl::OkStatus();
    case proto::CollectiveType::kReduce:
      // Reduce-scatter: an allreduce of the whole vector, of which this
      // rank keeps its block (recv null: keeps nothing).
      if (total > 0 && args.send == nullptr) return absl::InvalidArgumentError("send is null");
      op.scratch_out.resize(total * elem);
      a.recv = op.scratch_out.data();
      op.keep_to = static_cast<uint8_t*>(args.recv);
      op.keep_from = before * elem;
      op.keep_bytes = mine;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("only bcast and reduce come in blocks");
  }
}

void HostCollectives::Progress(absl::Duration timeout) { engine_->Progress(timeout); }

absl::Status HostCollectives::Run(const CollectiveArgs& args,
                                  const std::function<void()>& while_waiting) {
  NETFOLD_ASSIGN_OR_RETURN(OpId id, Start(args));
  // The engine's deadline ends the operation; this guard only catches a bug.
  Deadline guard(ProcessAwakeClock(), options_.op_timeout + absl::Seconds(5));
  while (!Done(id) && !guard.Expired()) {
    Progress(absl::Milliseconds(5));
    if (while_waiting && !Done(id)) while_waiting();
  }
  if (!Done(id)) {
    ops_.erase(id);
    return absl::DeadlineExceededError("a host-side collective did not finish in time");
  }
  return Finish(id);
}

}  // namespace netfold::host
