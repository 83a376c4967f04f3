// The deterministic reduction ALU: element-wise reductions for every
// (data type, op) pair MPI allows, shared by the switch's aggregation nodes
// and by host-side algorithms. The result bits are a pure function of the
// inputs and their order: the same on every code path (SIMD target or scalar
// reference), in every process, whatever the caller's floating-point
// environment. docs/reduction.md defines every bit.
//
//   // Checked, one call:
//   NETFOLD_RETURN_IF_ERROR(reduce::Reduce(DataType::kFp32, ReduceOp::kSum,
//                                          acc, packet_payload, count));
//
//   // Hot path: validate once, then call per packet without checks.
//   NETFOLD_ASSIGN_OR_RETURN(reduce::Kernel kernel, reduce::GetKernel(type, op));
//   const void* children[] = {child0, child1, child2};  // fixed child order
//   kernel.Fold(slot_buffer, children, count);
//
// Buffers are raw bytes in the layout of proto/data_type.h (host byte order,
// pair types as C lays out the MPI structs); they may have any alignment.
// Nothing here allocates, blocks or keeps a pointer after returning. Every
// function is thread-safe; concurrent calls may share inputs but not outputs.
#ifndef NETFOLD_REDUCE_REDUCE_H_
#define NETFOLD_REDUCE_REDUCE_H_

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/float16.h"  // IWYU pragma: export (fp16/bf16 conversions)

namespace netfold::reduce {

class Kernel;

// dst[i] = dst[i] op src[i] for i < count (dst is the left operand).
// dst and src may be unaligned. They may be the same pointer (x op x), but
// must not otherwise overlap. count == 0 is a no-op (null pointers allowed).
// Returns InvalidArgument, leaving dst untouched, if (type, op) is not
// allowed (proto::CheckOpAllowed), a pointer is null while count > 0,
// count * element size overflows, or the buffers partially overlap.
absl::Status Reduce(proto::DataType type, proto::ReduceOp op, void* dst, const void* src,
                    size_t count);

// out = ((inputs[0] op inputs[1]) op inputs[2]) ... op inputs[k-1], element by
// element, for k = inputs.size() >= 1, in exactly that order (the order is
// part of the result for fp sum/prod). k == 1 copies inputs[0] unchanged.
// out may be the same pointer as any input (typically inputs[0]) but must not
// otherwise overlap one; inputs may overlap each other. Returns
// InvalidArgument, leaving out untouched, for k == 0 and for the cases listed
// under Reduce.
absl::Status Fold(proto::DataType type, proto::ReduceOp op, void* out,
                  std::span<const void* const> inputs, size_t count);

// A resolved (type, op) kernel for the hot path: GetKernel validates once,
// the entry points then run without any check. A small value type (a few
// pointers): copy it freely; copies stay valid for the life of the process.
// Calls are thread-safe.
class Kernel {
 public:
  using ReduceFn = void (*)(void* dst, const void* src, size_t count);
  using FoldFn = void (*)(void* out, const void* const* inputs, size_t num_inputs,
                          size_t count);

  // An invalid kernel (valid() == false); calling it is undefined.
  Kernel() = default;

  // Same contract as reduce::Reduce, but unchecked: the caller guarantees
  // non-null, non-overlapping (or identical) buffers of count elements.
  void Reduce(void* dst, const void* src, size_t count) const { reduce_(dst, src, count); }

  // Same contract as reduce::Fold, unchecked. inputs.size() == 0 does
  // nothing.
  void Fold(void* out, std::span<const void* const> inputs, size_t count) const {
    fold_(out, inputs.data(), inputs.size(), count);
  }

  bool valid() const { return reduce_ != nullptr; }
  proto::DataType type() const { return type_; }
  proto::ReduceOp op() const { return op_; }
  // Bytes per element, proto::DataTypeSize(type()).
  size_t element_size() const { return element_size_; }
  // The SIMD target the code was compiled for ("AVX3", "AVX2", "SSE4",
  // "SCALAR", ...), or "reference" for the scalar reference. Static string.
  std::string_view target() const { return target_; }

  // The raw entry points, e.g. to store in a C-style table.
  ReduceFn reduce_fn() const { return reduce_; }
  FoldFn fold_fn() const { return fold_; }

 private:
  friend struct KernelFactory;  // reduce.cc
  Kernel(proto::DataType type, proto::ReduceOp op, size_t element_size, ReduceFn reduce,
         FoldFn fold, std::string_view target)
      : type_(type), op_(op), element_size_(element_size), reduce_(reduce), fold_(fold),
        target_(target) {}

  proto::DataType type_ = proto::DataType::kInt8;
  proto::ReduceOp op_ = proto::ReduceOp::kSum;
  size_t element_size_ = 0;
  ReduceFn reduce_ = nullptr;
  FoldFn fold_ = nullptr;
  std::string_view target_;
};

// The kernel of the best SIMD target this CPU supports (chosen once per
// process; see ActiveTarget). InvalidArgument if (type, op) is not allowed.
absl::StatusOr<Kernel> GetKernel(proto::DataType type, proto::ReduceOp op);

// The SIMD targets compiled into this library that this CPU supports, best
// first, e.g. {"AVX3", "AVX2", "SSE4", "SSSE3", "SCALAR"}. All of them give
// bitwise identical results; tests and benchmarks iterate over them.
std::vector<std::string_view> AvailableTargets();

// The target GetKernel, Reduce and Fold use: AvailableTargets().front().
std::string_view ActiveTarget();

// Like GetKernel, but compiled for `target` (a name from AvailableTargets(),
// or "reference" for the scalar reference). NotFound for any other name.
absl::StatusOr<Kernel> GetKernelForTarget(proto::DataType type, proto::ReduceOp op,
                                          std::string_view target);

// The plain scalar reference: the same semantics element by element, no
// SIMD, written independently of the kernels. Same contracts and errors as
// Reduce and Fold. Slow; for tests across the project.
absl::Status ReduceScalarReference(proto::DataType type, proto::ReduceOp op, void* dst,
                                   const void* src, size_t count);
absl::Status FoldScalarReference(proto::DataType type, proto::ReduceOp op, void* out,
                                 std::span<const void* const> inputs, size_t count);

}  // namespace netfold::reduce

#endif  // NETFOLD_REDUCE_REDUCE_H_
