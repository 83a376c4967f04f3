// Internal: the table of kernel entry points of one SIMD target, and the
// functions of the kernel translation units that fill it.
//
// integer_kernels.cc, float_kernels.cc and pair_kernels.cc are each compiled
// once per Highway target (hwy/foreach_target.h); each fills its part of a
// KernelTable for the target asked. reduce.cc builds one table per target the
// CPU supports, once, and hands out Kernels pointing into it.
#ifndef NETFOLD_REDUCE_KERNEL_TABLE_H_
#define NETFOLD_REDUCE_KERNEL_TABLE_H_

#include <cstddef>
#include <cstdint>

#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::reduce::internal {

// Unchecked entry points; see reduce::Kernel for the contract.
using ReduceFn = void (*)(void* dst, const void* src, size_t count);
using FoldFn = void (*)(void* out, const void* const* inputs, size_t num_inputs,
                        size_t count);

struct KernelEntry {
  ReduceFn reduce = nullptr;
  FoldFn fold = nullptr;
};

// Indexed by wire code; entries of pairs MPI forbids stay null.
inline constexpr size_t kNumTypeCodes = 18;  // DataType codes 1..17
inline constexpr size_t kNumOpCodes = 13;    // ReduceOp codes 1..12

struct KernelTable {
  KernelEntry entries[kNumTypeCodes][kNumOpCodes];

  KernelEntry& at(proto::DataType type, proto::ReduceOp op) {
    return entries[static_cast<uint8_t>(type)][static_cast<uint8_t>(op)];
  }
  const KernelEntry& at(proto::DataType type, proto::ReduceOp op) const {
    return entries[static_cast<uint8_t>(type)][static_cast<uint8_t>(op)];
  }
};

// Each adds the kernels of its unit compiled for `target` (one HWY_* bit) to
// *table. Returns false if the unit holds no code for that target.
bool AddIntegerKernels(int64_t target, KernelTable* table);
bool AddFloatKernels(int64_t target, KernelTable* table);
bool AddPairKernels(int64_t target, KernelTable* table);

// Fills *table with the scalar reference (scalar_reference.cc).
void FillReferenceKernels(KernelTable* table);

}  // namespace netfold::reduce::internal

#endif  // NETFOLD_REDUCE_KERNEL_TABLE_H_
