// A group's collectives run by the hosts themselves (host/algorithms/): when
// the fabric cannot serve the group, when NETFOLD_ALGORITHM asks for a host
// algorithm, and after a failover (docs/algorithms.md, "In libnetfold").
//
//   auto hc = *HostCollectives::Connect(&endpoint, group_oob, {.policy = policy});
//   OpId op = *hc->Start({.collective = kAllreduce, .dtype = ..., .send = in, .recv = out, ...});
//   while (!hc->Done(op)) hc->Progress(absl::Milliseconds(1));
//   absl::Status s = hc->Finish(op);
//
// Every collective is an allreduce of the host engine: reduce keeps the
// result at the root only, bcast is a bitwise OR over bytes to which only
// the root contributes, barrier is an allreduce of nothing; allgather is an
// OR to which each rank contributes its block, reduce-scatter an allreduce
// of which each rank keeps its block. The algorithm of
// each operation follows algorithms::SelectAlgorithm (by size, or what the
// policy forces); every rank of the group selects the same, since the
// inputs are the same.
//
// Thread-safety: not thread-safe; the thread that runs the endpoint drives it.
#ifndef NETFOLD_HOST_HOST_COLLECTIVES_H_
#define NETFOLD_HOST_HOST_COLLECTIVES_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/peer_channels.h"
#include "host/algorithms/selection.h"
#include "host/algorithms/tree_spec.h"
#include "host/group_engine.h"
#include "host/oob.h"
#include "transport/roce_endpoint.h"

namespace netfold::host {

struct HostCollectivesOptions {
  algorithms::AlgorithmPolicy policy = algorithms::AlgorithmPolicy::kAuto;
  uint16_t pkey = 0xFFFF;
  absl::Duration op_timeout = absl::Seconds(30);
  // The tree the fabric planned the group on (group ranks as leaves): with
  // the treeorder policy the hosts associate exactly as its switches do.
  std::optional<algorithms::TreeSpec> fabric_tree;
};

class HostCollectives {
 public:
  // Collective over the group (group_oob): one RC connection to every other
  // member on `endpoint` (not owned; it must outlive this object).
  static absl::StatusOr<std::unique_ptr<HostCollectives>> Connect(
      transport::RoceEndpoint* endpoint, Oob& group_oob, const HostCollectivesOptions& options);
  ~HostCollectives();

  // `args.root` is a group rank. InvalidArgument for bad arguments.
  absl::StatusOr<OpId> Start(const CollectiveArgs& args);
  bool Done(OpId id) const;
  // The outcome once Done; the operation is forgotten.
  absl::Status Finish(OpId id);
  // Start + Progress until done + Finish, for the failover's own exchanges;
  // `while_waiting`, if given, is called between moves (Group: other
  // groups' failovers this member's peers may wait for).
  absl::Status Run(const CollectiveArgs& args, const std::function<void()>& while_waiting = {});

  // Moves messages, waiting at most `timeout` (zero: never waits).
  void Progress(absl::Duration timeout);

  // Tells the other members this one failed over (Group::Failover).
  void AnnounceFailover() { channels_->AnnounceOnHosts(); }
  // A member (group rank) that announced its failover or sent a message
  // while this one runs no collective of the hosts: it failed over.
  std::optional<uint32_t> MemberOnHosts() { return channels_->PeerOnHosts(); }

  // Not OK once an operation failed: the members no longer agree on where
  // they are, and new operations are refused.
  const absl::Status& failure() const { return engine_->failure(); }
  const algorithms::EngineStats& stats() const { return engine_->stats(); }
  // Operations per algorithm (index: algorithms::Algorithm).
  const std::vector<uint64_t>& ops_by_algorithm() const { return ops_by_algorithm_; }

 private:
  struct Op {
    algorithms::OpId inner = 0;
    std::vector<uint8_t> scratch_in;   // zeros for non-roots of bcast
    std::vector<uint8_t> scratch_out;  // the result at non-roots of reduce; reduce-scatter's
    uint8_t* keep_to = nullptr;        // reduce-scatter: where this rank's block goes
    size_t keep_from = 0;              //   its offset in scratch_out
    size_t keep_bytes = 0;
  };
  // Allgather and reduce-scatter (CollectiveArgs::blocks) as one allreduce.
  absl::Status LayOutBlocks(const CollectiveArgs& args, Op& op,
                            algorithms::AllreduceArgs& a) const;
  HostCollectives() = default;

  HostCollectivesOptions options_;
  uint32_t rank_ = 0, size_ = 1;
  std::unique_ptr<algorithms::RcPeerChannels> channels_;
  std::unique_ptr<algorithms::AllreduceEngine> engine_;
  std::map<OpId, Op> ops_;
  OpId next_id_ = 1;
  std::vector<uint64_t> ops_by_algorithm_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_HOST_COLLECTIVES_H_
