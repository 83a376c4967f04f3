// Tests of the reduction ALU (reduce/reduce.h):
//  - every allowed (type, op), on every SIMD target this CPU supports, equals
//    the scalar reference bit for bit: random data mixed with edge values
//    (NaNs with payloads, infinities, -0, subnormals, min/max integers),
//    every length 0..257, unaligned buffers, nothing written outside;
//  - the k-way fold equals the chain of pairwise ops, and aliasing works;
//  - the caller's floating-point environment does not change any bit.
// Each decision of docs/reduction.md on hand-picked values, and the checked
// API's errors, are in reduce_semantics_test.cc.
#include "reduce/reduce.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "reduce/float16.h"
#include "reduce/reduce_test_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

// Readable test parameter values ("fp32", "sum") in gtest output.
namespace netfold::proto {
void PrintTo(DataType type, std::ostream* os) { *os << DataTypeName(type); }
void PrintTo(ReduceOp op, std::ostream* os) { *os << ReduceOpName(op); }
}  // namespace netfold::proto

namespace netfold::reduce {
namespace {

using proto::DataType;
using proto::ReduceOp;
using Rng = std::mt19937_64;

std::vector<std::pair<DataType, ReduceOp>> AllowedPairs() {
  std::vector<std::pair<DataType, ReduceOp>> pairs;
  for (DataType type : proto::kAllDataTypes) {
    for (ReduceOp op : proto::kAllReduceOps) {
      if (proto::IsOpAllowed(type, op)) pairs.emplace_back(type, op);
    }
  }
  return pairs;
}

// ------------------------------------------------------------ test data

template <typename T>
T Pick(Rng& rng, std::initializer_list<T> values) {
  return values.begin()[rng() % values.size()];
}

template <typename T>
T RandomInteger(Rng& rng) {
  using L = std::numeric_limits<T>;
  switch (rng() % 8) {
    case 0:
      return Pick<T>(rng, {T{0}, T{1}, static_cast<T>(-1), L::min(), L::max(),
                           static_cast<T>(L::min() + 1), static_cast<T>(L::max() - 1), T{2}});
    case 1:
    case 2:  // small values: zeros for the logical ops, equal values for min/max
      return static_cast<T>(static_cast<int>(rng() % 5) - 2);
    default:
      return static_cast<T>(rng());
  }
}

// Floating bits: `edges` (NaNs with payloads and signs, infinities, zeros,
// subnormals, extremes), uniformly random bits, or values of moderate
// magnitude (sign, exponent in [bias - spread, bias + spread], random
// mantissa) whose sums and products round.
template <typename U>
U RandomFloatBits(Rng& rng, std::initializer_list<U> edges, int mantissa_bits, int bias,
                  int spread) {
  switch (rng() % 8) {
    case 0:
    case 1: return Pick<U>(rng, edges);
    case 2: return static_cast<U>(rng());
    default: {
      const U sign = static_cast<U>(rng() & 1) << (sizeof(U) * 8 - 1);
      const U exponent = static_cast<U>(bias - spread + static_cast<int>(rng() % (2 * spread + 1)));
      const U mantissa = static_cast<U>(rng()) & ((U{1} << mantissa_bits) - 1);
      return sign | static_cast<U>(exponent << mantissa_bits) | mantissa;
    }
  }
}

uint16_t RandomFp16(Rng& rng) {
  return RandomFloatBits<uint16_t>(
      rng, {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0x7D55, 0xFF3F, 0x0001,
            0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x6800},
      10, 15, 6);
}

uint16_t RandomBf16(Rng& rng) {
  return RandomFloatBits<uint16_t>(
      rng, {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x7FD5, 0xFFBF, 0x0001,
            0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x4380},
      7, 127, 6);
}

uint32_t RandomFp32(Rng& rng) {
  return RandomFloatBits<uint32_t>(
      rng, {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
            0x7F800001u, 0x7FC12345u, 0xFFA5A5A5u, 0x00000001u, 0x80000001u, 0x007FFFFFu,
            0x00800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u, 0x4B800000u},
      23, 127, 10);
}

uint64_t RandomFp64(Rng& rng) {
  return RandomFloatBits<uint64_t>(
      rng, {0x0ull, 0x8000000000000000ull, 0x7FF0000000000000ull, 0xFFF0000000000000ull,
            0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x7FF0000000000001ull,
            0x7FF8123456789ABCull, 0x1ull, 0x8000000000000001ull, 0x000FFFFFFFFFFFFFull,
            0x0010000000000000ull, 0x7FEFFFFFFFFFFFFFull, 0xFFEFFFFFFFFFFFFFull,
            0x3FF0000000000000ull, 0xBFF0000000000000ull},
      52, 1023, 20);
}

// A pair element: value from a small set (ties!) or the edges, index from a
// small range or random, padding bytes random (the output must zero them).
void RandomPair(DataType type, Rng& rng, uint8_t* p) {
  const size_t size = proto::DataTypeSize(type);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(rng());
  const bool small = rng() % 4 != 0;
  auto put = [&](auto v) { memcpy(p, &v, sizeof(v)); };
  switch (type) {
    case DataType::kFloatInt:
      put(small ? std::bit_cast<uint32_t>(Pick<float>(rng, {-1.0f, 0.0f, -0.0f, 1.0f, 2.0f}))
                : RandomFp32(rng));
      break;
    case DataType::kDoubleInt:
      put(small ? std::bit_cast<uint64_t>(Pick<double>(rng, {-1.0, 0.0, -0.0, 1.0, 2.0}))
                : RandomFp64(rng));
      break;
    case DataType::kLongInt:
      put(small ? static_cast<int64_t>(rng() % 5) - 2 : RandomInteger<int64_t>(rng));
      break;
    case DataType::k2Int:
      put(small ? static_cast<int32_t>(rng() % 5) - 2 : RandomInteger<int32_t>(rng));
      break;
    case DataType::kShortInt:
      put(small ? static_cast<int16_t>(static_cast<int>(rng() % 5) - 2) : RandomInteger<int16_t>(rng));
      break;
    default: break;
  }
  const int32_t index = rng() % 4 != 0 ? static_cast<int32_t>(rng() % 6) - 2 : RandomInteger<int32_t>(rng);
  memcpy(p + proto::PairIndexOffset(type), &index, sizeof(index));
}

std::vector<uint8_t> RandomElements(DataType type, size_t count, Rng& rng) {
  const size_t size = proto::DataTypeSize(type);
  std::vector<uint8_t> bytes(count * size);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = bytes.data() + i * size;
    auto put = [&](auto v) { memcpy(p, &v, sizeof(v)); };
    switch (type) {
      case DataType::kInt8: put(RandomInteger<int8_t>(rng)); break;
      case DataType::kInt16: put(RandomInteger<int16_t>(rng)); break;
      case DataType::kInt32: put(RandomInteger<int32_t>(rng)); break;
      case DataType::kInt64: put(RandomInteger<int64_t>(rng)); break;
      case DataType::kUint8: put(RandomInteger<uint8_t>(rng)); break;
      case DataType::kUint16: put(RandomInteger<uint16_t>(rng)); break;
      case DataType::kUint32: put(RandomInteger<uint32_t>(rng)); break;
      case DataType::kUint64: put(RandomInteger<uint64_t>(rng)); break;
      case DataType::kFp16: put(RandomFp16(rng)); break;
      case DataType::kBf16: put(RandomBf16(rng)); break;
      case DataType::kFp32: put(RandomFp32(rng)); break;
      case DataType::kFp64: put(RandomFp64(rng)); break;
      default: RandomPair(type, rng, p); break;
    }
  }
  return bytes;
}

// A buffer holding `data` at byte offset `offset` (so, unaligned), with
// guard bytes before and after that no kernel may touch.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;

  GuardedBuffer(const std::vector<uint8_t>& data, size_t offset)
      : offset_(kGuard + offset), size_(data.size()),
        storage_(kGuard + offset + data.size() + kGuard, kGuardByte) {
    if (!data.empty()) memcpy(storage_.data() + offset_, data.data(), data.size());
  }
  uint8_t* data() { return storage_.data() + offset_; }
  std::vector<uint8_t> contents() const {
    return {storage_.begin() + static_cast<ptrdiff_t>(offset_),
            storage_.begin() + static_cast<ptrdiff_t>(offset_ + size_)};
  }
  bool GuardsIntact() const {
    for (size_t i = 0; i < storage_.size(); ++i) {
      if ((i < offset_ || i >= offset_ + size_) && storage_[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t offset_;
  size_t size_;
  std::vector<uint8_t> storage_;
};

struct TargetKernel {
  std::string_view target;
  Kernel kernel;
};

std::vector<TargetKernel> KernelsOnAllTargets(DataType type, ReduceOp op) {
  std::vector<TargetKernel> kernels;
  for (std::string_view target : AvailableTargets()) {
    absl::StatusOr<Kernel> kernel = GetKernelForTarget(type, op, target);
    EXPECT_TRUE(kernel.ok()) << target << " " << kernel.status();
    if (kernel.ok()) kernels.push_back({target, *kernel});
  }
  return kernels;
}

// ------------------------------------- every type x op x target x length

class AllTargets : public testing::TestWithParam<std::pair<DataType, ReduceOp>> {};

std::string ParamName(const testing::TestParamInfo<std::pair<DataType, ReduceOp>>& info) {
  return absl::StrFormat("%s_%s", proto::DataTypeName(info.param.first),
                         proto::ReduceOpName(info.param.second));
}

INSTANTIATE_TEST_SUITE_P(Reduce, AllTargets, testing::ValuesIn(AllowedPairs()), ParamName);

constexpr size_t kMaxLength = 257;

TEST_P(AllTargets, ReduceEqualsReferenceForAllLengths) {
  const auto [type, op] = GetParam();
  const auto kernels = KernelsOnAllTargets(type, op);
  ASSERT_FALSE(kernels.empty());
  Rng rng(static_cast<uint64_t>(type) * 100 + static_cast<uint64_t>(op));
  for (size_t n = 0; n <= kMaxLength; ++n) {
    const std::vector<uint8_t> dst = RandomElements(type, n, rng);
    const std::vector<uint8_t> src = RandomElements(type, n, rng);
    std::vector<uint8_t> want = dst;
    ASSERT_TRUE(ReduceScalarReference(type, op, want.data(), src.data(), n).ok());
    // Aligned when n % 4 == 0, odd byte offsets otherwise; dst and src differ.
    const size_t dst_offset = n % 4 == 0 ? 0 : 1 + (n * 7) % 31;
    const size_t src_offset = n % 4 == 0 ? 0 : 1 + (n * 13) % 29;
    for (const TargetKernel& k : kernels) {
      GuardedBuffer d(dst, dst_offset);
      GuardedBuffer s(src, src_offset);
      k.kernel.Reduce(d.data(), s.data(), n);
      ASSERT_EQ(d.contents(), want) << Describe(type, op) << " on " << k.target << ", n=" << n
                                    << ": " << FirstDifference(type, d.contents(), want);
      ASSERT_TRUE(d.GuardsIntact()) << k.target << " n=" << n;
      ASSERT_EQ(s.contents(), src) << k.target << " wrote to src, n=" << n;
      // x op x, in place (dst == src).
      if (n % 3 == 0) {
        std::vector<uint8_t> self_want = src;
        ASSERT_TRUE(ReduceScalarReference(type, op, self_want.data(), self_want.data(), n).ok());
        GuardedBuffer x(src, dst_offset);
        k.kernel.Reduce(x.data(), x.data(), n);
        ASSERT_EQ(x.contents(), self_want) << k.target << " in place, n=" << n << ": "
                                           << FirstDifference(type, x.contents(), self_want);
      }
    }
    // The checked entry point uses the active target.
    std::vector<uint8_t> checked = dst;
    ASSERT_TRUE(Reduce(type, op, checked.data(), src.data(), n).ok());
    ASSERT_EQ(checked, want) << "n=" << n;
  }
}

TEST_P(AllTargets, FoldEqualsReferenceAndTheChainOfPairwiseOps) {
  const auto [type, op] = GetParam();
  const auto kernels = KernelsOnAllTargets(type, op);
  ASSERT_FALSE(kernels.empty());
  Rng rng(static_cast<uint64_t>(type) * 1000 + static_cast<uint64_t>(op));
  constexpr size_t kNumInputs[] = {2, 3, 8, 1, 5, 4, 6, 7};  // every fixed-arity fold, and 1
  for (size_t n = 0; n <= kMaxLength; ++n) {
    const size_t k = kNumInputs[n % 8];
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t j = 0; j < k; ++j) inputs.push_back(RandomElements(type, n, rng));
    std::vector<const void*> pointers;
    for (const auto& in : inputs) pointers.push_back(in.data());

    std::vector<uint8_t> want(n * proto::DataTypeSize(type));
    ASSERT_TRUE(FoldScalarReference(type, op, want.data(), pointers, n).ok());
    // The fold is the chain ((in0 op in1) op in2) ...
    std::vector<uint8_t> chain = inputs[0];
    for (size_t j = 1; j < k; ++j) {
      ASSERT_TRUE(ReduceScalarReference(type, op, chain.data(), inputs[j].data(), n).ok());
    }
    ASSERT_EQ(want, chain) << Describe(type, op) << " n=" << n << " k=" << k;

    for (const TargetKernel& t : kernels) {
      std::vector<GuardedBuffer> guarded;
      guarded.reserve(k);
      std::vector<const void*> unaligned;
      for (size_t j = 0; j < k; ++j) {
        guarded.emplace_back(inputs[j], (n + 5 * j) % 17);
        unaligned.push_back(guarded.back().data());
      }
      GuardedBuffer out(std::vector<uint8_t>(want.size(), 0x5A), (n * 3) % 11);
      t.kernel.Fold(out.data(), unaligned, n);
      ASSERT_EQ(out.contents(), want) << Describe(type, op) << " on " << t.target << ", n=" << n
                                      << " k=" << k << ": "
                                      << FirstDifference(type, out.contents(), want);
      ASSERT_TRUE(out.GuardsIntact()) << t.target << " n=" << n;
      for (size_t j = 0; j < k; ++j) ASSERT_EQ(guarded[j].contents(), inputs[j]);

      // out may be inputs[0], or any other input.
      if (n % 2 == 0) {
        const size_t alias = (n / 2) % k;
        std::vector<uint8_t> saved = guarded[alias].contents();
        t.kernel.Fold(guarded[alias].data(), unaligned, n);
        ASSERT_EQ(guarded[alias].contents(), want)
            << t.target << " out == inputs[" << alias << "], n=" << n << " k=" << k;
        ASSERT_TRUE(guarded[alias].GuardsIntact());
      }
    }
    std::vector<uint8_t> checked(want.size());
    ASSERT_TRUE(Fold(type, op, checked.data(), pointers, n).ok());
    ASSERT_EQ(checked, want) << "n=" << n;
  }
}

TEST_P(AllTargets, LongFoldOnLargeVector) {
  // Many inputs and a vector long enough for the unrolled main loop to run
  // many times; the same input may appear twice.
  const auto [type, op] = GetParam();
  Rng rng(static_cast<uint64_t>(type) * 7 + static_cast<uint64_t>(op));
  constexpr size_t kCount = 5000;
  std::vector<std::vector<uint8_t>> inputs;
  for (int j = 0; j < 9; ++j) inputs.push_back(RandomElements(type, kCount, rng));
  std::vector<const void*> pointers;
  for (const auto& in : inputs) pointers.push_back(in.data());
  pointers.push_back(inputs[3].data());
  std::vector<uint8_t> want(inputs[0].size());
  ASSERT_TRUE(FoldScalarReference(type, op, want.data(), pointers, kCount).ok());
  for (const TargetKernel& t : KernelsOnAllTargets(type, op)) {
    std::vector<uint8_t> out(want.size());
    t.kernel.Fold(out.data(), pointers, kCount);
    ASSERT_EQ(out, want) << t.target << ": " << FirstDifference(type, out, want);
  }
}

TEST_P(AllTargets, OperandsLargeEnoughToPrefetch) {
  // Kernels prefetch ahead for operands of 256 KiB and more: another loop.
  const auto [type, op] = GetParam();
  Rng rng(static_cast<uint64_t>(type) * 31 + static_cast<uint64_t>(op));
  const size_t count = (260 << 10) / proto::DataTypeSize(type) + 3;
  std::vector<std::vector<uint8_t>> inputs;
  for (int j = 0; j < 3; ++j) inputs.push_back(RandomElements(type, count, rng));
  const std::vector<const void*> pointers = {inputs[0].data(), inputs[1].data(), inputs[2].data()};
  std::vector<uint8_t> want_fold(inputs[0].size());
  ASSERT_TRUE(FoldScalarReference(type, op, want_fold.data(), pointers, count).ok());
  std::vector<uint8_t> want_reduce = inputs[0];
  ASSERT_TRUE(ReduceScalarReference(type, op, want_reduce.data(), inputs[1].data(), count).ok());
  for (const TargetKernel& t : KernelsOnAllTargets(type, op)) {
    std::vector<uint8_t> out(want_fold.size());
    t.kernel.Fold(out.data(), pointers, count);
    ASSERT_EQ(out, want_fold) << t.target << ": " << FirstDifference(type, out, want_fold);
    std::vector<uint8_t> dst = inputs[0];
    t.kernel.Reduce(dst.data(), inputs[1].data(), count);
    ASSERT_EQ(dst, want_reduce) << t.target << ": " << FirstDifference(type, dst, want_reduce);
  }
}

// ------------------------------------------------------------ targets

TEST(Targets, EveryAllowedPairHasAKernelOnEveryTarget) {
  const std::vector<std::string_view> targets = AvailableTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(ActiveTarget(), targets.front());
  // The portable fallback is always compiled and always supported.
  EXPECT_TRUE(targets.back() == "SCALAR" || targets.back() == "EMU128") << targets.back();
  for (std::string_view target : targets) {
    for (auto [type, op] : AllowedPairs()) {
      absl::StatusOr<Kernel> kernel = GetKernelForTarget(type, op, target);
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      EXPECT_TRUE(kernel->valid());
      EXPECT_EQ(kernel->target(), target);
      EXPECT_EQ(kernel->type(), type);
      EXPECT_EQ(kernel->op(), op);
      EXPECT_EQ(kernel->element_size(), proto::DataTypeSize(type));
    }
  }
  absl::StatusOr<Kernel> active = GetKernel(DataType::kFp32, ReduceOp::kSum);
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(active->target(), ActiveTarget());
  absl::StatusOr<Kernel> reference = GetKernelForTarget(DataType::kFp32, ReduceOp::kSum, "reference");
  ASSERT_TRUE(reference.ok());
  EXPECT_EQ(reference->target(), "reference");
  absl::StatusOr<Kernel> bogus = GetKernelForTarget(DataType::kFp32, ReduceOp::kSum, "AVX9");
  EXPECT_EQ(bogus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bogus.status().message().find("available"), std::string_view::npos);
  EXPECT_FALSE(Kernel().valid());
}

// ------------------------------------------- floating-point environment

#if defined(__x86_64__) || defined(__i386__)
TEST(FpEnvironment, CallersFtzDazAndRoundingModeChangeNothing) {
  Rng rng(99);
  const std::pair<DataType, ReduceOp> cases[] = {
      {DataType::kFp32, ReduceOp::kSum},  {DataType::kFp32, ReduceOp::kProd},
      {DataType::kFp64, ReduceOp::kSum},  {DataType::kFp64, ReduceOp::kProd},
      {DataType::kFp16, ReduceOp::kSum},  {DataType::kBf16, ReduceOp::kSum},
      {DataType::kFp16, ReduceOp::kProd}, {DataType::kBf16, ReduceOp::kProd},
      {DataType::kFp32, ReduceOp::kMin},  {DataType::kFp32, ReduceOp::kMax},
      {DataType::kFp64, ReduceOp::kMin},  {DataType::kFp64, ReduceOp::kMax}};
  // FTZ | DAZ | round toward zero | all exceptions unmasked (a trap would
  // crash the test).
  const uint32_t hostile = (1u << 15) | (1u << 6) | (3u << 13);
  for (auto [type, op] : cases) {
    constexpr size_t kCount = 300;
    std::vector<uint8_t> a = RandomElements(type, kCount, rng);
    std::vector<uint8_t> b = RandomElements(type, kCount, rng);
    // Plenty of subnormals and zeros, on both sides.
    for (size_t i = 0; i < kCount; i += 3) {
      if (type == DataType::kFp32) {
        const uint32_t sub = static_cast<uint32_t>(rng()) & 0x807FFFFFu;
        memcpy(a.data() + 4 * i, &sub, 4);
        const uint32_t zero_or_sub = i % 2 ? 0u : static_cast<uint32_t>(rng()) & 0x0000FFFFu;
        memcpy(b.data() + 4 * i, &zero_or_sub, 4);
      } else if (type == DataType::kFp64) {
        const uint64_t sub = rng() & 0x800FFFFFFFFFFFFFull;
        memcpy(a.data() + 8 * i, &sub, 8);
        const uint64_t zero_or_sub = i % 2 ? 0u : rng() & 0xFFFFull;
        memcpy(b.data() + 8 * i, &zero_or_sub, 8);
      }
    }
    for (std::string_view target : AvailableTargets()) {
      for (bool reference : {false, true}) {
        absl::StatusOr<Kernel> kernel =
            GetKernelForTarget(type, op, reference ? "reference" : target);
        ASSERT_TRUE(kernel.ok());
        std::vector<uint8_t> normal = a;
        kernel->Reduce(normal.data(), b.data(), kCount);
        std::vector<uint8_t> under = a;
        const unsigned saved = _mm_getcsr();
        _mm_setcsr(hostile);
        kernel->Reduce(under.data(), b.data(), kCount);
        const unsigned after = _mm_getcsr();
        _mm_setcsr(saved);
        EXPECT_EQ(after & 0xFFC0u, hostile) << "the caller's MXCSR must be restored";
        EXPECT_EQ(under, normal) << Describe(type, op) << " on " << kernel->target() << ": "
                                 << FirstDifference(type, under, normal);
      }
    }
  }
}
#endif

}  // namespace
}  // namespace netfold::reduce
