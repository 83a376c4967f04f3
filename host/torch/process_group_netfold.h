// ProcessGroupNetfold: torch.distributed's backend "netfold" (docs/pytorch.md).
// Collectives on CPU tensors run on the fabric through libnetfold's C API:
// allreduce, broadcast, reduce, barrier, allgather (all_gather and
// all_gather_into_tensor) and reduce_scatter (reduce_scatter and
// reduce_scatter_tensor). Each returns at once with a WorkNetfold whose
// netfold request is in flight.
//
//   # Python, after `import netfold_torch` (which registers the backend):
//   dist.init_process_group("netfold")          # torchrun, or env:// under mpirun
//   work = dist.all_reduce(t, async_op=True); ...; work.wait()
//
// torch calls Create (the creator registered with
// Backend.register_backend(..., extended_api=True)) for the default group
// and for every dist.new_group this rank belongs to.
//
// Tensors: one CPU strided tensor per call (torch passes one for CPU).
// A tensor that is not contiguous is staged through a contiguous copy.
// Types and ops: torch_types.h. Anything else is refused with a
// RuntimeError naming what is not supported.
//
// Thread-safety: as torch requires of a process group: collectives of one
// group are called in the same order on every rank.
#ifndef NETFOLD_HOST_TORCH_PROCESS_GROUP_NETFOLD_H_
#define NETFOLD_HOST_TORCH_PROCESS_GROUP_NETFOLD_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <string>
#include <vector>

#include "host/torch/fabric_group.h"
#include "host/torch/torch_types.h"

namespace netfold::pytorch {

class ProcessGroupNetfold : public c10d::ProcessGroup {
 public:
  // Joins the fabric (the default group) or creates a netfold group in it
  // (a subgroup): collective over the group's members, through its store.
  static c10::intrusive_ptr<c10d::ProcessGroup> Create(
      const c10d::DistributedBackendOptions& options);

  ProcessGroupNetfold(std::shared_ptr<FabricGroup> group, int rank, int size);
  ~ProcessGroupNetfold() override;

  const std::string getBackendName() const override { return "netfold"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

 private:
  c10::intrusive_ptr<WorkNetfold> NewWork(c10d::OpType type, std::vector<at::Tensor> outputs);
  // Gathers every rank's `send` into `recv` (contiguous, size blocks of
  // send's elements, in group-rank order). `send` undefined: in place,
  // this rank's block of `recv` holds them already. `work` holds both.
  void StartAllgather(WorkNetfold& work, const at::Tensor& send, const at::Tensor& recv);
  // Reduces `send` (contiguous, size blocks of recv's elements) with `r`
  // and leaves block `rank` of the result in `recv` (contiguous). `work`
  // holds both.
  void StartReduceScatter(WorkNetfold& work, const at::Tensor& send, const at::Tensor& recv,
                          const Reduction& r);

  std::shared_ptr<FabricGroup> group_;
};

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_PROCESS_GROUP_NETFOLD_H_
