#include "host/torch/process_group_netfold.h"

#include <cstdint>
#include <utility>

#include "host/torch/torch_types.h"

namespace netfold::pytorch {
namespace {

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "netfold ", what, ": CPU tensors only (this one is on ",
              t.device(), ")");
  TORCH_CHECK(t.layout() == at::kStrided, "netfold ", what, ": dense tensors only (this one is ",
              t.layout(), ")");
}

at::Tensor& SingleTensor(std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "netfold ", what, ": one tensor per call (got ", tensors.size(),
              ")");
  CheckTensor(tensors[0], what);
  return tensors[0];
}

void CheckRoot(int64_t root, int size, const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "netfold ", what, ": root ", root,
              " is not a rank of this group of ", size);
}

// The same element type and count as `like`, for list arguments.
void CheckLike(const at::Tensor& t, const at::Tensor& like, const char* what) {
  CheckTensor(t, what);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "netfold ", what, ": tensors of ",
              t.scalar_type(), " and ", like.scalar_type(), " in one call");
  TORCH_CHECK(t.numel() == like.numel(), "netfold ", what, ": tensors of ", t.numel(), " and ",
              like.numel(), " elements in one call");
}

uint8_t* Bytes(const at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

// `buffer` (contiguous, maybe `tensor` itself) back into `tensor`.
void CopyBackIfStaged(at::Tensor& tensor, const at::Tensor& buffer) {
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroupNetfold::Create(
    const c10d::DistributedBackendOptions& options) {
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  std::shared_ptr<FabricContext> context;
  std::vector<int> world_ranks;
  if (options.global_ranks_in_group.empty()) {  // the default group: the world
    context = FabricContext::JoinWorld(options.store, options.group_rank, options.group_size,
                                       timeout);
  } else {
    context = FabricContext::Current();
    for (int64_t r : options.global_ranks_in_group) world_ranks.push_back(static_cast<int>(r));
  }
  std::shared_ptr<FabricGroup> group =
      FabricGroup::Create(std::move(context), options.store, options.group_rank,
                          options.group_size, std::move(world_ranks), timeout);
  return c10::make_intrusive<ProcessGroupNetfold>(std::move(group), options.group_rank,
                                                  options.group_size);
}

ProcessGroupNetfold::ProcessGroupNetfold(std::shared_ptr<FabricGroup> group, int rank, int size)
    : c10d::ProcessGroup(rank, size), group_(std::move(group)) {
  init();
}

ProcessGroupNetfold::~ProcessGroupNetfold() { FabricContext::Retire(std::move(group_)); }

c10::intrusive_ptr<WorkNetfold> ProcessGroupNetfold::NewWork(c10d::OpType type,
                                                             std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<WorkNetfold>(rank_, type, group_->calls(), std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor& tensor = SingleTensor(tensors, "allreduce");
  const Reduction r = ReductionFor(tensor.scalar_type(), opts.reduceOp);
  at::Tensor buffer = tensor.contiguous();
  auto work = NewWork(c10d::OpType::ALLREDUCE, {tensor});
  work->Hold(buffer);
  group_->Start(*work, [&](netfold_group_t g, netfold_request_t* request) {
    return netfold_allreduce_nb(g, NETFOLD_IN_PLACE, buffer.data_ptr(),
                                static_cast<size_t>(buffer.numel()), r.dtype, r.op, request);
  });
  work->AndThen([tensor, buffer, r, size = size_]() mutable {
    if (r.average) buffer.div_(size);
    CopyBackIfStaged(tensor, buffer);
  });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor& tensor = SingleTensor(tensors, "broadcast");
  CheckRoot(opts.rootRank, size_, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  const MovedType moved = MovedTypeFor(tensor.scalar_type());
  at::Tensor buffer = tensor.contiguous();
  auto work = NewWork(c10d::OpType::BROADCAST, {tensor});
  work->Hold(buffer);
  group_->Start(*work, [&](netfold_group_t g, netfold_request_t* request) {
    return netfold_bcast_nb(g, buffer.data_ptr(),
                            static_cast<size_t>(buffer.numel()) * moved.elements_per_torch_element,
                            moved.dtype, root, request);
  });
  if (rank_ != root) work->AndThen([tensor, buffer]() mutable { CopyBackIfStaged(tensor, buffer); });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  at::Tensor& tensor = SingleTensor(tensors, "reduce");
  CheckRoot(opts.rootRank, size_, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  const Reduction r = ReductionFor(tensor.scalar_type(), opts.reduceOp);
  at::Tensor buffer = tensor.contiguous();
  auto work = NewWork(c10d::OpType::REDUCE, {tensor});
  work->Hold(buffer);
  // The root reduces in place; the others only send (their tensors stay).
  const bool at_root = rank_ == root;
  group_->Start(*work, [&](netfold_group_t g, netfold_request_t* request) {
    return netfold_reduce_nb(g, at_root ? NETFOLD_IN_PLACE : buffer.data_ptr(),
                             at_root ? buffer.data_ptr() : nullptr,
                             static_cast<size_t>(buffer.numel()), r.dtype, r.op, root, request);
  });
  if (at_root) {
    work->AndThen([tensor, buffer, r, size = size_]() mutable {
      if (r.average) buffer.div_(size);
      CopyBackIfStaged(tensor, buffer);
    });
  }
  group_->Submit(work);
  return work;
}

void ProcessGroupNetfold::StartAllgather(WorkNetfold& work, const at::Tensor& send,
                                         const at::Tensor& recv) {
  const MovedType moved = MovedTypeFor(recv.scalar_type());
  const size_t count =
      static_cast<size_t>(recv.numel() / size_) * moved.elements_per_torch_element;
  if (send.defined()) work.Hold(send);
  work.Hold(recv);
  group_->Start(work, [&](netfold_group_t g, netfold_request_t* request) {
    return netfold_allgather_nb(g, send.defined() ? send.data_ptr() : NETFOLD_IN_PLACE,
                                recv.data_ptr(), count, moved.dtype, request);
  });
}

void ProcessGroupNetfold::StartReduceScatter(WorkNetfold& work, const at::Tensor& send,
                                             const at::Tensor& recv, const Reduction& r) {
  work.Hold(send);
  work.Hold(recv);
  group_->Start(work, [&](netfold_group_t g, netfold_request_t* request) {
    return netfold_reduce_scatter_block_nb(g, send.data_ptr(), recv.data_ptr(),
                                           static_cast<size_t>(recv.numel()), r.dtype, r.op,
                                           request);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  at::Tensor& input = SingleTensor(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
              "netfold allgather: one list of ", size_, " output tensors");
  std::vector<at::Tensor>& list = outputs[0];
  for (const at::Tensor& out : list) CheckLike(out, input, "allgather");
  const int64_t n = input.numel();
  // Gathered into one buffer (this rank's block first), then copied out.
  at::Tensor gathered = at::empty({size_ * n}, input.options());
  gathered.narrow(0, rank_ * n, n).view(input.sizes()).copy_(input);
  auto work = NewWork(c10d::OpType::ALLGATHER, list);
  StartAllgather(*work, at::Tensor(), gathered);
  work->AndThen([list, gathered, n]() mutable {
    for (size_t r = 0; r < list.size(); ++r) {
      list[r].copy_(gathered.narrow(0, static_cast<int64_t>(r) * n, n).view(list[r].sizes()));
    }
  });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  CheckTensor(input, "all_gather_into_tensor");
  CheckTensor(output, "all_gather_into_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "netfold all_gather_into_tensor: output of ", output.scalar_type(), ", input of ",
              input.scalar_type());
  TORCH_CHECK(output.numel() == size_ * input.numel(), "netfold all_gather_into_tensor: output of ",
              output.numel(), " elements for ", size_, " x ", input.numel());
  at::Tensor gathered = output.contiguous();
  const size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
  // In place when the input is this rank's block of the output already.
  const bool in_place = input.is_contiguous() && gathered.is_same(output) &&
                        input.data_ptr() == Bytes(gathered) + rank_ * bytes;
  at::Tensor send = in_place ? at::Tensor() : input.contiguous();
  auto work = NewWork(c10d::OpType::_ALLGATHER_BASE, {output});
  StartAllgather(*work, send, gathered);
  work->AndThen([output, gathered]() mutable { CopyBackIfStaged(output, gathered); });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor& output = SingleTensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
              "netfold reduce_scatter: one list of ", size_, " input tensors");
  for (const at::Tensor& in : inputs[0]) CheckLike(in, output, "reduce_scatter");
  const Reduction r = ReductionFor(output.scalar_type(), opts.reduceOp);
  const int64_t n = output.numel();
  at::Tensor send = at::empty({size_ * n}, output.options());
  for (int i = 0; i < size_; ++i) {
    const at::Tensor& in = inputs[0][static_cast<size_t>(i)];
    send.narrow(0, i * n, n).view(in.sizes()).copy_(in);
  }
  at::Tensor result = output.contiguous();
  auto work = NewWork(c10d::OpType::REDUCE_SCATTER, {output});
  StartReduceScatter(*work, send, result, r);
  work->AndThen([output, result, r, size = size_]() mutable {
    if (r.average) result.div_(size);
    CopyBackIfStaged(output, result);
  });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckTensor(input, "reduce_scatter_tensor");
  CheckTensor(output, "reduce_scatter_tensor");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "netfold reduce_scatter_tensor: output of ", output.scalar_type(), ", input of ",
              input.scalar_type());
  TORCH_CHECK(input.numel() == size_ * output.numel(), "netfold reduce_scatter_tensor: input of ",
              input.numel(), " elements for ", size_, " x ", output.numel());
  const Reduction r = ReductionFor(output.scalar_type(), opts.reduceOp);
  at::Tensor send = input.contiguous();
  at::Tensor result = output.contiguous();
  auto work = NewWork(c10d::OpType::_REDUCE_SCATTER_BASE, {output});
  StartReduceScatter(*work, send.view({-1}), result, r);
  work->AndThen([output, result, r, size = size_]() mutable {
    if (r.average) result.div_(size);
    CopyBackIfStaged(output, result);
  });
  group_->Submit(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNetfold::barrier(const c10d::BarrierOptions& /*opts*/) {
  auto work = NewWork(c10d::OpType::BARRIER, {});
  group_->Start(*work, [](netfold_group_t g, netfold_request_t* request) {
    return netfold_barrier_nb(g, request);
  });
  group_->Submit(work);
  return work;
}

}  // namespace netfold::pytorch
