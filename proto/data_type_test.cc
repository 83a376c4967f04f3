// Tests of the data type and reduction op enums: codes, sizes, names, parsing
// and MPI's op/type rules.
#include <cstdint>
#include <set>

#include "gtest/gtest.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::proto {
namespace {

struct FloatInt { float v; int32_t i; };
struct DoubleInt { double v; int32_t i; };
struct LongInt { int64_t v; int32_t i; };
struct TwoInt { int32_t v; int32_t i; };
struct ShortInt { int16_t v; int32_t i; };

TEST(DataType, SizesMatchCLayout) {
  EXPECT_EQ(DataTypeSize(DataType::kInt8), 1u);
  EXPECT_EQ(DataTypeSize(DataType::kUint64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kFp16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBf16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kFp64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kFloatInt), sizeof(FloatInt));
  EXPECT_EQ(DataTypeSize(DataType::kDoubleInt), sizeof(DoubleInt));
  EXPECT_EQ(DataTypeSize(DataType::kLongInt), sizeof(LongInt));
  EXPECT_EQ(DataTypeSize(DataType::k2Int), sizeof(TwoInt));
  EXPECT_EQ(DataTypeSize(DataType::kShortInt), sizeof(ShortInt));
  EXPECT_EQ(PairIndexOffset(DataType::kDoubleInt), offsetof(DoubleInt, i));
  EXPECT_EQ(PairIndexOffset(DataType::kShortInt), offsetof(ShortInt, i));
  EXPECT_EQ(PairIndexOffset(DataType::kLongInt), offsetof(LongInt, i));
  EXPECT_EQ(PairValueSize(DataType::kShortInt), 2u);
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(0)), 0u);
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(200)), 0u);
}

TEST(DataType, NamesRoundTripAndCodesAreStable) {
  std::set<std::string_view> names;
  uint8_t expected_code = 1;
  for (DataType t : kAllDataTypes) {
    EXPECT_EQ(static_cast<uint8_t>(t), expected_code++);
    EXPECT_TRUE(IsValidDataType(static_cast<uint8_t>(t)));
    auto parsed = ParseDataType(DataTypeName(t));
    ASSERT_TRUE(parsed.ok()) << DataTypeName(t);
    EXPECT_EQ(*parsed, t);
    EXPECT_TRUE(names.insert(DataTypeName(t)).second);
    // Exactly one class per type.
    EXPECT_EQ(int{IsIntegerType(t)} + int{IsFloatingType(t)} + int{IsPairType(t)}, 1);
  }
  EXPECT_FALSE(IsValidDataType(0));
  EXPECT_FALSE(IsValidDataType(18));
  EXPECT_EQ(DataTypeName(static_cast<DataType>(99)), "invalid");
}

TEST(DataType, ParsesAliasesAndRejectsJunk) {
  EXPECT_EQ(*ParseDataType("FLOAT"), DataType::kFp32);
  EXPECT_EQ(*ParseDataType("double"), DataType::kFp64);
  EXPECT_EQ(*ParseDataType("bfloat16"), DataType::kBf16);
  EXPECT_EQ(*ParseDataType("half"), DataType::kFp16);
  auto bad = ParseDataType("int128");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("int128"), std::string_view::npos);
  EXPECT_NE(bad.status().message().find("accepted"), std::string_view::npos);
  EXPECT_FALSE(ParseDataType("").ok());
}

TEST(ReduceOp, NamesRoundTrip) {
  uint8_t expected_code = 1;
  for (ReduceOp op : kAllReduceOps) {
    EXPECT_EQ(static_cast<uint8_t>(op), expected_code++);
    EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
  }
  EXPECT_EQ(*ParseReduceOp("MPI_MAXLOC"), ReduceOp::kMaxloc);
  EXPECT_FALSE(ParseReduceOp("avg").ok());
  EXPECT_FALSE(IsValidReduceOp(0));
  EXPECT_FALSE(IsValidReduceOp(13));
}

TEST(ReduceOp, MpiRules) {
  // Allowed count per type class, over all 12 ops.
  for (DataType t : kAllDataTypes) {
    int allowed = 0;
    for (ReduceOp op : kAllReduceOps) allowed += IsOpAllowed(t, op);
    int expected = IsIntegerType(t) ? 10 : IsFloatingType(t) ? 4 : 2;
    EXPECT_EQ(allowed, expected) << DataTypeName(t);
  }
  absl::Status s = CheckOpAllowed(DataType::kFp32, ReduceOp::kBxor);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bxor"), std::string_view::npos);
  EXPECT_NE(s.message().find("fp32"), std::string_view::npos);
  EXPECT_FALSE(IsOpAllowed(DataType::k2Int, ReduceOp::kSum));
  EXPECT_TRUE(IsOpAllowed(DataType::k2Int, ReduceOp::kMinloc));
  EXPECT_FALSE(IsOpAllowed(DataType::kInt32, ReduceOp::kMaxloc));
  EXPECT_FALSE(IsOpAllowed(static_cast<DataType>(0), ReduceOp::kSum));
  EXPECT_FALSE(IsOpAllowed(DataType::kInt32, static_cast<ReduceOp>(77)));
}

}  // namespace
}  // namespace netfold::proto
