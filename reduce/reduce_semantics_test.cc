// Tests of the reduction ALU (reduce/reduce.h) on hand-picked values:
//  - each decision of docs/reduction.md (wrapping integers, logical ops,
//    canonical NaNs, signed zeros, no flushing, fp16/bf16 rounding,
//    MINLOC/MAXLOC ties and padding), the same on every SIMD target and
//    the scalar reference;
//  - the checked API rejects what it must, with clear errors.
// Random data on every target, and the caller's FP environment, are in
// reduce_test.cc.
#include "reduce/reduce.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "reduce/float16.h"
#include "reduce/reduce_test_util.h"

namespace netfold::reduce {
namespace {

using proto::DataType;
using proto::ReduceOp;

// ------------------------------------------- the decisions, by example

// Runs a op b on every target and the reference; all must agree. Returns
// the result.
template <typename T>
std::vector<T> Apply(DataType type, ReduceOp op, const std::vector<T>& a,
                     const std::vector<T>& b) {
  const size_t count = a.size() * sizeof(T) / proto::DataTypeSize(type);
  std::vector<T> want = a;
  EXPECT_TRUE(ReduceScalarReference(type, op, want.data(), b.data(), count).ok());
  std::vector<std::string_view> targets = AvailableTargets();
  for (std::string_view target : targets) {
    std::vector<T> got = a;
    absl::StatusOr<Kernel> kernel = GetKernelForTarget(type, op, target);
    EXPECT_TRUE(kernel.ok());
    if (!kernel.ok()) continue;
    kernel->Reduce(got.data(), b.data(), count);
    EXPECT_EQ(0, memcmp(got.data(), want.data(), want.size() * sizeof(T)))
        << Describe(type, op) << " on " << target;
  }
  return want;
}

template <typename T>
std::vector<uint64_t> AsBits(const std::vector<T>& v) {
  std::vector<uint64_t> bits;
  for (const T& x : v) {
    uint64_t b = 0;
    memcpy(&b, &x, sizeof(T));
    bits.push_back(b);
  }
  return bits;
}

float F32(uint32_t bits) { return std::bit_cast<float>(bits); }
double F64(uint64_t bits) { return std::bit_cast<double>(bits); }

TEST(Semantics, IntegerArithmeticWraps) {
  EXPECT_EQ(Apply<int8_t>(DataType::kInt8, ReduceOp::kSum, {127, -128}, {1, -1}),
            (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(Apply<uint8_t>(DataType::kUint8, ReduceOp::kSum, {255}, {1}), std::vector<uint8_t>{0});
  EXPECT_EQ(Apply<int8_t>(DataType::kInt8, ReduceOp::kProd, {-128, 16}, {-1, 16}),
            (std::vector<int8_t>{-128, 0}));
  EXPECT_EQ(Apply<uint16_t>(DataType::kUint16, ReduceOp::kProd, {65535}, {65535}),
            std::vector<uint16_t>{1});
  EXPECT_EQ(Apply<int16_t>(DataType::kInt16, ReduceOp::kProd, {-32768}, {-1}),
            std::vector<int16_t>{-32768});
  EXPECT_EQ(Apply<int32_t>(DataType::kInt32, ReduceOp::kProd, {65536, std::numeric_limits<int32_t>::min()}, {65536, -1}),
            (std::vector<int32_t>{0, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(Apply<int64_t>(DataType::kInt64, ReduceOp::kProd, {std::numeric_limits<int64_t>::min(), 3},
                           {-1, 0x5555555555555556}),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 2}));
  EXPECT_EQ(Apply<uint64_t>(DataType::kUint64, ReduceOp::kSum, {~0ull}, {2}), std::vector<uint64_t>{1});
}

TEST(Semantics, LogicalOpsYieldZeroOrOne) {
  const std::vector<int32_t> a = {5, 0, -3, 0};
  const std::vector<int32_t> b = {-7, 9, 0, 0};
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kLand, a, b), (std::vector<int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kLor, a, b), (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kLxor, a, b), (std::vector<int32_t>{0, 1, 1, 0}));
  EXPECT_EQ(Apply<uint8_t>(DataType::kUint8, ReduceOp::kLxor, {0x80, 0x80}, {0x01, 0}),
            (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(Apply<int64_t>(DataType::kInt64, ReduceOp::kLand, {1ll << 40}, {-1}),
            std::vector<int64_t>{1});
  // Bitwise ops are plain bitwise.
  EXPECT_EQ(Apply<uint16_t>(DataType::kUint16, ReduceOp::kBxor, {0xF0F0}, {0xFF00}),
            std::vector<uint16_t>{0x0FF0});
}

TEST(Semantics, FloatNanResultsAreCanonical) {
  // Payloads, signs and x86's negative "default NaN" (inf - inf) all become
  // the canonical positive quiet NaN, on sum, prod, min and max.
  const std::vector<uint32_t> expected(4, kFp32CanonicalNan);
  const std::vector<float> a = {F32(0xFFC12345), 1.0f, std::numeric_limits<float>::infinity(), 0.0f};
  const std::vector<float> b = {1.0f, F32(0x7F800001), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity()};
  EXPECT_EQ(AsBits(Apply(DataType::kFp32, ReduceOp::kSum, a, b)),
            (std::vector<uint64_t>{kFp32CanonicalNan, kFp32CanonicalNan, kFp32CanonicalNan,
                                   0x7F800000u}));
  EXPECT_EQ(AsBits(Apply(DataType::kFp32, ReduceOp::kProd, a, b)),
            (std::vector<uint64_t>{kFp32CanonicalNan, kFp32CanonicalNan, 0xFF800000u,
                                   kFp32CanonicalNan}));
  EXPECT_EQ(AsBits(Apply<double>(DataType::kFp64, ReduceOp::kSum, {F64(0xFFF8000000000001)}, {1.0})),
            std::vector<uint64_t>{kFp64CanonicalNan});
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kFp16, ReduceOp::kSum, {0x7C00, 0xFE01}, {0xFC00, 0x3C00})),
            (std::vector<uint64_t>{kFp16CanonicalNan, kFp16CanonicalNan}));
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kBf16, ReduceOp::kProd, {0x7F80, 0xFFC1}, {0x0000, 0x3F80})),
            (std::vector<uint64_t>{kBf16CanonicalNan, kBf16CanonicalNan}));
}

TEST(Semantics, MinMaxPropagateNanAndOrderSignedZeros) {
  const float nan = F32(0xFFC00123);
  const std::vector<float> a = {nan, 1.0f, 0.0f, -0.0f, -1.0f};
  const std::vector<float> b = {1.0f, nan, -0.0f, 0.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_EQ(AsBits(Apply(DataType::kFp32, ReduceOp::kMin, a, b)),
            (std::vector<uint64_t>{kFp32CanonicalNan, kFp32CanonicalNan, 0x80000000u, 0x80000000u,
                                   0xFF800000u}));
  EXPECT_EQ(AsBits(Apply(DataType::kFp32, ReduceOp::kMax, a, b)),
            (std::vector<uint64_t>{kFp32CanonicalNan, kFp32CanonicalNan, 0x00000000u, 0x00000000u,
                                   0xBF800000u}));
  // The same rule on fp64, fp16 and bf16.
  EXPECT_EQ(AsBits(Apply<double>(DataType::kFp64, ReduceOp::kMin, {0.0, F64(0x7FF0000000000001)}, {-0.0, 2.0})),
            (std::vector<uint64_t>{0x8000000000000000u, kFp64CanonicalNan}));
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kFp16, ReduceOp::kMax, {0x8000, 0x7C01, 0x0001}, {0x0000, 0x3C00, 0x8400})),
            (std::vector<uint64_t>{0x0000, kFp16CanonicalNan, 0x0001}));
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kBf16, ReduceOp::kMin, {0x0000, 0x3F80, 0xFF80}, {0x8000, 0xFFC0, 0x7F7F})),
            (std::vector<uint64_t>{0x8000, kBf16CanonicalNan, 0xFF80}));
}

TEST(Semantics, SubnormalsAreNeverFlushed) {
  EXPECT_EQ(AsBits(Apply<float>(DataType::kFp32, ReduceOp::kSum, {F32(0x00000001), F32(0x007FFFFF)},
                                {F32(0x00000001), F32(0x00000001)})),
            (std::vector<uint64_t>{0x00000002u, 0x00800000u}));
  EXPECT_EQ(AsBits(Apply<float>(DataType::kFp32, ReduceOp::kProd, {0x1p-100f}, {0x1p-30f})),
            std::vector<uint64_t>{std::bit_cast<uint32_t>(0x1p-130f)});
  EXPECT_EQ(AsBits(Apply<double>(DataType::kFp64, ReduceOp::kSum, {F64(1)}, {F64(1)})),
            std::vector<uint64_t>{2});
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kFp16, ReduceOp::kSum, {0x0001, 0x03FF}, {0x0001, 0x0001})),
            (std::vector<uint64_t>{0x0002, 0x0400}));
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kBf16, ReduceOp::kSum, {0x0001}, {0x0001})),
            std::vector<uint64_t>{0x0002});
  // fp16 products round into the subnormal range: 2^-14 * 2^-5 = 2^-19.
  EXPECT_EQ(AsBits(Apply<uint16_t>(DataType::kFp16, ReduceOp::kProd, {0x0400}, {0x2800})),
            std::vector<uint64_t>{0x0020});
}

TEST(Semantics, HalfPrecisionRoundsOncePerOp) {
  // fp16 spacing at 2048 is 2: 2048 + 1 is a tie and goes to even (2048);
  // 2048 + 3 = 2051 is a tie and goes to 2052.
  EXPECT_EQ(Apply<uint16_t>(DataType::kFp16, ReduceOp::kSum, {0x6800, 0x6800}, {0x3C00, 0x4200}),
            (std::vector<uint16_t>{0x6800, 0x6802}));
  // 65504 + 16 = 65520, the tie to infinity; 65504 + 8 stays 65504.
  EXPECT_EQ(Apply<uint16_t>(DataType::kFp16, ReduceOp::kSum, {0x7BFF, 0x7BFF}, {0x4C00, 0x4800}),
            (std::vector<uint16_t>{0x7C00, 0x7BFF}));
  // bf16 spacing at 256 is 2: 256 + 1 -> 256, 256 + 3 -> 260.
  EXPECT_EQ(Apply<uint16_t>(DataType::kBf16, ReduceOp::kSum, {0x4380, 0x4380}, {0x3F80, 0x4040}),
            (std::vector<uint16_t>{0x4380, 0x4382}));
  // The order matters and is kept: ((2048 + 1) + 1) = 2048, but
  // ((1 + 1) + 2048) = 2050.
  const uint16_t big = 0x6800, one = 0x3C00;
  for (std::string_view target : AvailableTargets()) {
    absl::StatusOr<Kernel> kernel = GetKernelForTarget(DataType::kFp16, ReduceOp::kSum, target);
    ASSERT_TRUE(kernel.ok());
    uint16_t out = 0;
    const void* big_first[] = {&big, &one, &one};
    kernel->Fold(&out, big_first, 1);
    EXPECT_EQ(out, 0x6800) << target;
    const void* big_last[] = {&one, &one, &big};
    kernel->Fold(&out, big_last, 1);
    EXPECT_EQ(out, 0x6801) << target;
  }
}

struct TwoInt {
  int32_t v;
  int32_t i;
  bool operator==(const TwoInt&) const = default;
};
struct FloatInt {
  float v;
  int32_t i;
};

TEST(Semantics, MinlocMaxlocTiesTakeTheLowerIndex) {
  const std::vector<TwoInt> a = {{3, 7}, {1, 9}, {5, 5}, {-2, 4}};
  const std::vector<TwoInt> b = {{3, 2}, {3, 2}, {5, -1}, {-2, 4}};
  EXPECT_EQ(Apply(DataType::k2Int, ReduceOp::kMinloc, a, b),
            (std::vector<TwoInt>{{3, 2}, {1, 9}, {5, -1}, {-2, 4}}));
  EXPECT_EQ(Apply(DataType::k2Int, ReduceOp::kMaxloc, a, b),
            (std::vector<TwoInt>{{3, 2}, {3, 2}, {5, -1}, {-2, 4}}));
  // A 3-way fold picks the lowest index among the tied minima.
  const TwoInt x{4, 8}, y{2, 6}, z{2, 1};
  TwoInt out{};
  const void* inputs[] = {&x, &y, &z};
  ASSERT_TRUE(Fold(DataType::k2Int, ReduceOp::kMinloc, &out, inputs, 1).ok());
  EXPECT_EQ(out, (TwoInt{2, 1}));
}

TEST(Semantics, FloatMinlocMaxlocOrderNanAndZeros) {
  const float nan = F32(0xFFC00042);
  const std::vector<FloatInt> a = {{nan, 5}, {nan, 5}, {-0.0f, 3}, {0.0f, 3}, {1.0f, 0}};
  const std::vector<FloatInt> b = {{1.0f, 2}, {nan, 3}, {0.0f, 1}, {-0.0f, 1}, {nan, 9}};
  for (ReduceOp op : {ReduceOp::kMinloc, ReduceOp::kMaxloc}) {
    const std::vector<FloatInt> r = Apply(DataType::kFloatInt, op, a, b);
    // A NaN value wins (it is the location of the NaN), with the canonical NaN.
    EXPECT_EQ(std::bit_cast<uint32_t>(r[0].v), kFp32CanonicalNan);
    EXPECT_EQ(r[0].i, 5);
    EXPECT_EQ(std::bit_cast<uint32_t>(r[1].v), kFp32CanonicalNan);
    EXPECT_EQ(r[1].i, 3);
    EXPECT_EQ(r[4].i, 9);
    // -0 < +0.
    const bool is_min = op == ReduceOp::kMinloc;
    EXPECT_EQ(std::signbit(r[2].v), is_min);
    EXPECT_EQ(r[2].i, is_min ? 3 : 1);
    EXPECT_EQ(std::signbit(r[3].v), is_min);
    EXPECT_EQ(r[3].i, is_min ? 1 : 3);
  }
}

TEST(Semantics, PairPaddingComesOutZero) {
  // double_int and long_int: bytes 12..15; short_int: bytes 2..3.
  for (DataType type : {DataType::kDoubleInt, DataType::kLongInt, DataType::kShortInt}) {
    const size_t size = proto::DataTypeSize(type);
    std::vector<uint8_t> a(size, 0xEE), b(size, 0xDD);
    const int32_t ia = 1, ib = 2;
    memcpy(a.data() + proto::PairIndexOffset(type), &ia, 4);
    memcpy(b.data() + proto::PairIndexOffset(type), &ib, 4);
    for (ReduceOp op : {ReduceOp::kMinloc, ReduceOp::kMaxloc}) {
      std::vector<uint8_t> r = Apply(type, op, a, b);
      const size_t value_end = proto::PairValueSize(type);
      const size_t index_end = proto::PairIndexOffset(type) + 4;
      for (size_t i = value_end; i < proto::PairIndexOffset(type); ++i) EXPECT_EQ(r[i], 0) << i;
      for (size_t i = index_end; i < size; ++i) EXPECT_EQ(r[i], 0) << i;
    }
  }
}

TEST(Semantics, FoldOfOneInputCopiesUnchanged) {
  // No op is applied: NaN payloads and pair padding pass through.
  const uint32_t nan = 0xFFC12345;
  uint32_t out = 0;
  const void* one[] = {&nan};
  ASSERT_TRUE(Fold(DataType::kFp32, ReduceOp::kSum, &out, one, 1).ok());
  EXPECT_EQ(out, nan);
  uint32_t in_place = nan;
  const void* self[] = {&in_place};
  ASSERT_TRUE(Fold(DataType::kFp32, ReduceOp::kMax, &in_place, self, 1).ok());
  EXPECT_EQ(in_place, nan);
}

// ---------------------------------------------------------------- errors

TEST(Errors, ForbiddenPairsAreRejectedNotComputed) {
  float dst[2] = {1, 2};
  const float src[2] = {3, 4};
  absl::Status s = Reduce(DataType::kFp32, ReduceOp::kBxor, dst, src, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bxor"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("fp32"), std::string_view::npos) << s;
  EXPECT_EQ(dst[0], 1);
  EXPECT_EQ(Reduce(DataType::kInt32, ReduceOp::kMinloc, dst, src, 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(DataType::k2Int, ReduceOp::kSum, dst, src, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReduceScalarReference(DataType::kFp16, ReduceOp::kLand, dst, src, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(static_cast<DataType>(0), ReduceOp::kSum, dst, src, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(DataType::kInt32, static_cast<ReduceOp>(99), dst, src, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetKernel(DataType::kBf16, ReduceOp::kBor).status().code(),
            absl::StatusCode::kInvalidArgument);
  const void* inputs[] = {src, src};
  EXPECT_EQ(Fold(DataType::kFp64, ReduceOp::kLxor, dst, inputs, 1).code(),
            absl::StatusCode::kInvalidArgument);
  // Every forbidden pair, through every entry point.
  for (DataType type : proto::kAllDataTypes) {
    for (ReduceOp op : proto::kAllReduceOps) {
      if (proto::IsOpAllowed(type, op)) continue;
      EXPECT_FALSE(GetKernel(type, op).ok());
      EXPECT_FALSE(GetKernelForTarget(type, op, "reference").ok());
      EXPECT_FALSE(Reduce(type, op, dst, src, 0).ok());
      EXPECT_FALSE(FoldScalarReference(type, op, dst, inputs, 0).ok());
    }
  }
}

TEST(Errors, BadBuffersAreRejected) {
  int32_t buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  // Zero elements: nothing to touch, null is fine.
  EXPECT_TRUE(Reduce(DataType::kInt32, ReduceOp::kSum, nullptr, nullptr, 0).ok());
  absl::Status s = Reduce(DataType::kInt32, ReduceOp::kSum, nullptr, buf, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dst"), std::string_view::npos) << s;
  EXPECT_EQ(Reduce(DataType::kInt32, ReduceOp::kSum, buf, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  // Same pointer is fine, partial overlap is not.
  EXPECT_TRUE(Reduce(DataType::kInt32, ReduceOp::kSum, buf, buf, 4).ok());
  EXPECT_EQ(buf[3], 8);
  s = Reduce(DataType::kInt32, ReduceOp::kSum, buf, buf + 1, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overlap"), std::string_view::npos) << s;
  EXPECT_EQ(buf[1], 4);  // untouched
  EXPECT_TRUE(Reduce(DataType::kInt32, ReduceOp::kSum, buf, buf + 4, 4).ok());  // adjacent
  // Overflowing byte count.
  s = Reduce(DataType::kFp64, ReduceOp::kSum, buf, buf + 4, std::numeric_limits<size_t>::max() / 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflow"), std::string_view::npos) << s;

  // Fold: at least one input, no null input, no partial overlap with out.
  s = Fold(DataType::kInt32, ReduceOp::kSum, buf, {}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at least one input"), std::string_view::npos) << s;
  const void* with_null[] = {buf, nullptr};
  s = Fold(DataType::kInt32, ReduceOp::kSum, buf + 4, with_null, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inputs[1]"), std::string_view::npos) << s;
  const void* overlapping[] = {buf, buf + 2};
  EXPECT_EQ(Fold(DataType::kInt32, ReduceOp::kSum, buf + 1, overlapping, 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FoldScalarReference(DataType::kInt32, ReduceOp::kSum, buf + 1, overlapping, 2).code(),
            absl::StatusCode::kInvalidArgument);
  // Inputs may overlap each other, and out may be any input.
  const void* shared[] = {buf, buf + 1, buf};
  EXPECT_TRUE(Fold(DataType::kInt32, ReduceOp::kSum, buf + 4, shared, 3).ok());
  const void* out_is_second[] = {buf + 4, buf};
  EXPECT_TRUE(Fold(DataType::kInt32, ReduceOp::kSum, buf, out_is_second, 4).ok());
}

TEST(Errors, UncheckedFoldOfZeroInputsDoesNothing) {
  absl::StatusOr<Kernel> kernel = GetKernel(DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(kernel.ok());
  int32_t out = 42;
  kernel->Fold(&out, {}, 1);
  EXPECT_EQ(out, 42);
}

}  // namespace
}  // namespace netfold::reduce
