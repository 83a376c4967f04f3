// Kernels for the MPI pair types (float_int, double_int, long_int, 2int,
// short_int): minloc and maxloc. Compiled once per SIMD target; the element
// loops are plain C++ that the compiler vectorizes where it can.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reduce/pair_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "reduce/hwy_dispatch.h"
#include "reduce/kernel_table.h"
#include "reduce/kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace netfold::reduce::internal {
namespace HWY_NAMESPACE {

// kSize and kIndexOffset are the C layout of proto/data_type.h, checked by
// reduce_test.cc against proto::DataTypeSize and proto::PairIndexOffset.
template <typename TV, bool kFloat, size_t kSize, size_t kIndexOffset>
void AddPairType(proto::DataType type, KernelTable* table) {
  PutElement<PairElement<TV, kFloat, kSize, kIndexOffset, false>>(table, type,
                                                                   proto::ReduceOp::kMinloc);
  PutElement<PairElement<TV, kFloat, kSize, kIndexOffset, true>>(table, type,
                                                                  proto::ReduceOp::kMaxloc);
}

void FillPairKernels(KernelTable* table) {
  using proto::DataType;
  AddPairType<uint32_t, true, 8, 4>(DataType::kFloatInt, table);
  AddPairType<uint64_t, true, 16, 8>(DataType::kDoubleInt, table);
  AddPairType<int64_t, false, 16, 8>(DataType::kLongInt, table);
  AddPairType<int32_t, false, 8, 4>(DataType::k2Int, table);
  AddPairType<int16_t, false, 8, 4>(DataType::kShortInt, table);
}

}  // namespace HWY_NAMESPACE
}  // namespace netfold::reduce::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace netfold::reduce::internal {

HWY_EXPORT(FillPairKernels);

bool AddPairKernels(int64_t target, KernelTable* table) {
  const auto fill = FunctionForTarget(HWY_DISPATCH_TABLE(FillPairKernels), target);
  if (fill == nullptr) return false;
  fill(table);
  return true;
}

}  // namespace netfold::reduce::internal
#endif  // HWY_ONCE
