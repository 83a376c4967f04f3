#include "host/torch/torch_types.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::pytorch {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(at::ScalarType t, const c10d::ReduceOp& op) {
  try {
    ReductionFor(t, op);
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

TEST(TorchTypes, EveryTypeNetfoldHasMapsToItself) {
  EXPECT_EQ(NetfoldDtype(at::kByte), NETFOLD_DTYPE_UINT8);
  EXPECT_EQ(NetfoldDtype(at::kChar), NETFOLD_DTYPE_INT8);
  EXPECT_EQ(NetfoldDtype(at::kShort), NETFOLD_DTYPE_INT16);
  EXPECT_EQ(NetfoldDtype(at::kInt), NETFOLD_DTYPE_INT32);
  EXPECT_EQ(NetfoldDtype(at::kLong), NETFOLD_DTYPE_INT64);
  EXPECT_EQ(NetfoldDtype(at::kHalf), NETFOLD_DTYPE_FP16);
  EXPECT_EQ(NetfoldDtype(at::kBFloat16), NETFOLD_DTYPE_BF16);
  EXPECT_EQ(NetfoldDtype(at::kFloat), NETFOLD_DTYPE_FP32);
  EXPECT_EQ(NetfoldDtype(at::kDouble), NETFOLD_DTYPE_FP64);
  EXPECT_EQ(NetfoldDtype(at::kBool), std::nullopt);
  EXPECT_EQ(NetfoldDtype(at::kComplexFloat), std::nullopt);
}

TEST(TorchTypes, OpsMapOneToOne) {
  const Reduction sum = ReductionFor(at::kFloat, c10d::ReduceOp::SUM);
  EXPECT_EQ(sum.dtype, NETFOLD_DTYPE_FP32);
  EXPECT_EQ(sum.op, NETFOLD_OP_SUM);
  EXPECT_FALSE(sum.average);
  EXPECT_EQ(ReductionFor(at::kLong, c10d::ReduceOp::PRODUCT).op, NETFOLD_OP_PROD);
  EXPECT_EQ(ReductionFor(at::kHalf, c10d::ReduceOp::MIN).op, NETFOLD_OP_MIN);
  EXPECT_EQ(ReductionFor(at::kBFloat16, c10d::ReduceOp::MAX).op, NETFOLD_OP_MAX);
  EXPECT_EQ(ReductionFor(at::kByte, c10d::ReduceOp::BAND).op, NETFOLD_OP_BAND);
  EXPECT_EQ(ReductionFor(at::kInt, c10d::ReduceOp::BOR).op, NETFOLD_OP_BOR);
  EXPECT_EQ(ReductionFor(at::kChar, c10d::ReduceOp::BXOR).op, NETFOLD_OP_BXOR);
}

TEST(TorchTypes, BoolRidesUint8WithTheLogicalOpThatGivesTorchsAnswer) {
  for (auto [op, expected] : {std::pair{c10d::ReduceOp::SUM, NETFOLD_OP_LOR},
                              {c10d::ReduceOp::MAX, NETFOLD_OP_LOR},
                              {c10d::ReduceOp::PRODUCT, NETFOLD_OP_LAND},
                              {c10d::ReduceOp::MIN, NETFOLD_OP_LAND},
                              {c10d::ReduceOp::BXOR, NETFOLD_OP_BXOR}}) {
    const Reduction r = ReductionFor(at::kBool, op);
    EXPECT_EQ(r.dtype, NETFOLD_DTYPE_UINT8);
    EXPECT_EQ(r.op, expected) << ReduceOpName(op);
  }
}

TEST(TorchTypes, AvgIsASumDividedOnFloatingTypesAndRefusedOnIntegers) {
  const Reduction avg = ReductionFor(at::kDouble, c10d::ReduceOp::AVG);
  EXPECT_EQ(avg.op, NETFOLD_OP_SUM);
  EXPECT_TRUE(avg.average);
  EXPECT_THAT(ErrorOf(at::kInt, c10d::ReduceOp::AVG),
              HasSubstr("ReduceOp.AVG on Int is not supported: AVG is defined on floating-point"));
  EXPECT_THAT(ErrorOf(at::kBool, c10d::ReduceOp::AVG), HasSubstr("ReduceOp.AVG on Bool"));
}

TEST(TorchTypes, WhatNetfoldCannotComputeIsRefusedWithTheReason) {
  EXPECT_THAT(ErrorOf(at::kFloat, c10d::ReduceOp::BAND),
              HasSubstr("ReduceOp.BAND on Float is not supported: bitwise ops need integer"));
  EXPECT_THAT(ErrorOf(at::kComplexFloat, c10d::ReduceOp::SUM),
              HasSubstr("ReduceOp.SUM on ComplexFloat is not supported: netfold reduces uint8"));
  EXPECT_THAT(ErrorOf(at::kFloat, c10d::makeNCCLPreMulSum(2.0)),
              HasSubstr("ReduceOp.PREMUL_SUM on Float is not supported"));
}

TEST(TorchTypes, MovedDataKeepsNetfoldsTypeOrGoesAsBytes) {
  EXPECT_EQ(MovedTypeFor(at::kLong).dtype, NETFOLD_DTYPE_INT64);
  EXPECT_EQ(MovedTypeFor(at::kLong).elements_per_torch_element, 1u);
  EXPECT_EQ(MovedTypeFor(at::kComplexDouble).dtype, NETFOLD_DTYPE_UINT8);
  EXPECT_EQ(MovedTypeFor(at::kComplexDouble).elements_per_torch_element, 16u);
  EXPECT_EQ(MovedTypeFor(at::kBool).elements_per_torch_element, 1u);
}

}  // namespace
}  // namespace netfold::pytorch
