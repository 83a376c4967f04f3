// Kernels for the floating types (fp16, bf16, fp32, fp64): sum, prod, min,
// max. Compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reduce/float_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "reduce/hwy_dispatch.h"
#include "reduce/kernel_table.h"
#include "reduce/kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace netfold::reduce::internal {
namespace HWY_NAMESPACE {

// Min/max of a floating type whose bits are TI, +infinity is kInf and the
// canonical NaN is kNan.
template <typename TI, TI kInf, TI kNan>
void AddFloatMinMax(proto::DataType type, KernelTable* table) {
  PutVector<FloatMinMaxPolicy<TI, kInf, kNan, false>>(table, type, proto::ReduceOp::kMin);
  PutVector<FloatMinMaxPolicy<TI, kInf, kNan, true>>(table, type, proto::ReduceOp::kMax);
}

void FillFloatKernels(KernelTable* table) {
  using proto::DataType;
  using proto::ReduceOp;
  PutVector<FloatArithPolicy<float, OpAdd>>(table, DataType::kFp32, ReduceOp::kSum);
  PutVector<FloatArithPolicy<float, OpMul>>(table, DataType::kFp32, ReduceOp::kProd);
  PutVector<FloatMinMaxNativePolicy<float, false>>(table, DataType::kFp32, ReduceOp::kMin);
  PutVector<FloatMinMaxNativePolicy<float, true>>(table, DataType::kFp32, ReduceOp::kMax);

  PutVector<FloatArithPolicy<double, OpAdd>>(table, DataType::kFp64, ReduceOp::kSum);
  PutVector<FloatArithPolicy<double, OpMul>>(table, DataType::kFp64, ReduceOp::kProd);
  PutVector<FloatMinMaxNativePolicy<double, false>>(table, DataType::kFp64, ReduceOp::kMin);
  PutVector<FloatMinMaxNativePolicy<double, true>>(table, DataType::kFp64, ReduceOp::kMax);

  PutVector<Fp16ArithPolicy<OpAdd>>(table, DataType::kFp16, ReduceOp::kSum);
  PutVector<Fp16ArithPolicy<OpMul>>(table, DataType::kFp16, ReduceOp::kProd);
  AddFloatMinMax<int16_t, 0x7C00, static_cast<int16_t>(kFp16CanonicalNan)>(DataType::kFp16,
                                                                            table);

  PutVector<Bf16ArithPolicy<OpAdd>>(table, DataType::kBf16, ReduceOp::kSum);
  PutVector<Bf16ArithPolicy<OpMul>>(table, DataType::kBf16, ReduceOp::kProd);
  AddFloatMinMax<int16_t, 0x7F80, static_cast<int16_t>(kBf16CanonicalNan)>(DataType::kBf16,
                                                                            table);
}

}  // namespace HWY_NAMESPACE
}  // namespace netfold::reduce::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace netfold::reduce::internal {

HWY_EXPORT(FillFloatKernels);

bool AddFloatKernels(int64_t target, KernelTable* table) {
  const auto fill = FunctionForTarget(HWY_DISPATCH_TABLE(FillFloatKernels), target);
  if (fill == nullptr) return false;
  fill(table);
  return true;
}

}  // namespace netfold::reduce::internal
#endif  // HWY_ONCE
