// Kernels for the integer types (int8..int64, uint8..uint64): sum, prod,
// min, max, band, bor, bxor, land, lor, lxor. Compiled once per SIMD target.
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reduce/integer_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "reduce/hwy_dispatch.h"
#include "reduce/kernel_table.h"
#include "reduce/kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace netfold::reduce::internal {
namespace HWY_NAMESPACE {

// Every op but min and max gives the same bits for a signed type and its
// unsigned twin (two's complement wraps alike; the logical ops only compare
// with zero), so those kernels are compiled once, on the unsigned type, and
// serve both: this unit is compiled for every SIMD target and was the
// longest step of the build.
template <typename U>
void AddSignlessOps(proto::DataType type, KernelTable* table) {
  using proto::ReduceOp;
  static_assert(std::is_unsigned_v<U>);
  PutVector<LanePolicy<U, OpAdd>>(table, type, ReduceOp::kSum);
  if constexpr (sizeof(U) == 1) {
    PutElement<ProdElement<U>>(table, type, ReduceOp::kProd);  // no 8-bit lane multiply
  } else {
    PutVector<LanePolicy<U, OpMul>>(table, type, ReduceOp::kProd);
  }
  PutVector<LanePolicy<U, OpAnd>>(table, type, ReduceOp::kBand);
  PutVector<LanePolicy<U, OpOr>>(table, type, ReduceOp::kBor);
  PutVector<LanePolicy<U, OpXor>>(table, type, ReduceOp::kBxor);
  PutVector<LanePolicy<U, OpLand>>(table, type, ReduceOp::kLand);
  PutVector<LanePolicy<U, OpLor>>(table, type, ReduceOp::kLor);
  PutVector<LanePolicy<U, OpLxor>>(table, type, ReduceOp::kLxor);
}

// The kernels of a signed type S and its unsigned twin.
template <typename S>
void AddIntegerPair(proto::DataType signed_type, proto::DataType unsigned_type,
                    KernelTable* table) {
  using proto::ReduceOp;
  using U = std::make_unsigned_t<S>;
  AddSignlessOps<U>(signed_type, table);
  AddSignlessOps<U>(unsigned_type, table);
  PutVector<LanePolicy<S, OpMin>>(table, signed_type, ReduceOp::kMin);
  PutVector<LanePolicy<S, OpMax>>(table, signed_type, ReduceOp::kMax);
  PutVector<LanePolicy<U, OpMin>>(table, unsigned_type, ReduceOp::kMin);
  PutVector<LanePolicy<U, OpMax>>(table, unsigned_type, ReduceOp::kMax);
}

void FillIntegerKernels(KernelTable* table) {
  using proto::DataType;
  AddIntegerPair<int8_t>(DataType::kInt8, DataType::kUint8, table);
  AddIntegerPair<int16_t>(DataType::kInt16, DataType::kUint16, table);
  AddIntegerPair<int32_t>(DataType::kInt32, DataType::kUint32, table);
  AddIntegerPair<int64_t>(DataType::kInt64, DataType::kUint64, table);
}

}  // namespace HWY_NAMESPACE
}  // namespace netfold::reduce::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace netfold::reduce::internal {

HWY_EXPORT(FillIntegerKernels);

bool AddIntegerKernels(int64_t target, KernelTable* table) {
  const auto fill = FunctionForTarget(HWY_DISPATCH_TABLE(FillIntegerKernels), target);
  if (fill == nullptr) return false;
  fill(table);
  return true;
}

}  // namespace netfold::reduce::internal
#endif  // HWY_ONCE
