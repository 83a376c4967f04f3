// Kernels for the integer types (int8..int64, uint8..uint64): sum, prod,
// min, max, band, bor, bxor, land, lor, lxor. Compiled once per SIMD target.
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

template <typename T>
void AddIntegerType(proto::DataType type, KernelTable* table) {
  using proto::ReduceOp;
  PutVector<LanePolicy<T, OpAdd>>(table, type, ReduceOp::kSum);
  if constexpr (sizeof(T) == 1) {
    PutElement<ProdElement<T>>(table, type, ReduceOp::kProd);  // no 8-bit lane multiply
  } else {
    PutVector<LanePolicy<T, OpMul>>(table, type, ReduceOp::kProd);
  }
  PutVector<LanePolicy<T, OpMin>>(table, type, ReduceOp::kMin);
  PutVector<LanePolicy<T, OpMax>>(table, type, ReduceOp::kMax);
  PutVector<LanePolicy<T, OpAnd>>(table, type, ReduceOp::kBand);
  PutVector<LanePolicy<T, OpOr>>(table, type, ReduceOp::kBor);
  PutVector<LanePolicy<T, OpXor>>(table, type, ReduceOp::kBxor);
  PutVector<LanePolicy<T, OpLand>>(table, type, ReduceOp::kLand);
  PutVector<LanePolicy<T, OpLor>>(table, type, ReduceOp::kLor);
  PutVector<LanePolicy<T, OpLxor>>(table, type, ReduceOp::kLxor);
}

void FillIntegerKernels(KernelTable* table) {
  using proto::DataType;
  AddIntegerType<int8_t>(DataType::kInt8, table);
  AddIntegerType<int16_t>(DataType::kInt16, table);
  AddIntegerType<int32_t>(DataType::kInt32, table);
  AddIntegerType<int64_t>(DataType::kInt64, table);
  AddIntegerType<uint8_t>(DataType::kUint8, table);
  AddIntegerType<uint16_t>(DataType::kUint16, table);
  AddIntegerType<uint32_t>(DataType::kUint32, table);
  AddIntegerType<uint64_t>(DataType::kUint64, table);
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
