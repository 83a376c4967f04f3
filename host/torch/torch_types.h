// How torch's element types and reduce ops map onto netfold's (docs/pytorch.md,
// "Types and ops"). A reduction netfold cannot compute exactly is refused
// with a c10::Error (Python: RuntimeError) that names the type and the op;
// nothing falls back to another type.
//
//   Reduction r = ReductionFor(at::kFloat, c10d::ReduceOp::SUM);   // FP32, SUM
//   netfold_allreduce_nb(g, NETFOLD_IN_PLACE, p, n, r.dtype, r.op, &req);
//
// Types: uint8, int8, int16, int32, int64, float16, bfloat16, float32,
// float64 are netfold's own; bool rides uint8 (0 or 1) with the logical op
// that gives torch's answer (SUM and MAX: LOR; PRODUCT and MIN: LAND).
// Complex tensors never get here for the ops torch allows on them (torch
// reduces them as their float pairs, torch.view_as_real).
// Ops: SUM, PRODUCT, MIN, MAX, and BAND, BOR, BXOR on integer types (as
// netfold_op_supported says); AVG on floating types only: a SUM, then the
// result divided by the group's size on each rank (the same bits on every
// rank, since the SUM is). PREMUL_SUM is NCCL's alone.
//
// Data that is only moved (broadcast, allgather) needs no arithmetic:
// MovedType gives netfold's type for netfold's types and uint8 (bytes)
// for every other one (bool, complex, ...).
#ifndef NETFOLD_HOST_TORCH_TORCH_TYPES_H_
#define NETFOLD_HOST_TORCH_TORCH_TYPES_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <optional>
#include <string>

#include "netfold/netfold.h"

namespace netfold::pytorch {

// netfold's type for `t`, if netfold has it (bool: none).
std::optional<netfold_dtype_t> NetfoldDtype(at::ScalarType t);

struct Reduction {
  netfold_dtype_t dtype;
  netfold_op_t op;
  bool average = false;  // AVG: divide the SUM by the group's size
};

// What to run for `op` on tensors of `t`. Throws c10::Error if netfold
// cannot compute it exactly.
Reduction ReductionFor(at::ScalarType t, const c10d::ReduceOp& op);

struct MovedType {
  netfold_dtype_t dtype;
  size_t elements_per_torch_element;  // 1, or the element size for bytes
};
// How tensors of `t` are moved by broadcast and allgather.
MovedType MovedTypeFor(at::ScalarType t);

// "SUM", "AVG", ...: for messages.
std::string ReduceOpName(const c10d::ReduceOp& op);

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_TORCH_TYPES_H_
