// Tests of the fp16/bf16 <-> float conversions (reduce/float16.h) against
// independent oracles (double arithmetic with frexp/ldexp/nearbyint, and the
// x86 F16C instructions when the CPU has them), and of the claim in
// docs/reduction.md that computing an fp16/bf16 sum or product in float and
// rounding once more is the correctly rounded result.
//
// The exhaustive variants are DISABLED_ (minutes); run them with
//   build/reduce/float16_test --gtest_also_run_disabled_tests
//       --gtest_filter='*Exhaustive*'
#include "reduce/float16.h"

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define NETFOLD_TEST_HAVE_F16C_INTRINSICS 1
#endif

namespace netfold::reduce {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

bool IsFp16Nan(uint16_t h) { return (h & 0x7FFF) > 0x7C00; }
bool IsBf16Nan(uint16_t h) { return (h & 0x7FFF) > 0x7F80; }

// Value of fp16 bits, computed with ldexp (non-NaN only).
double Fp16Value(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  if (e == 0x1F) return sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Rounds an exact value `d` (not NaN) to the nearest value with `precision`
// significand bits, minimum normal exponent `emin` and maximum finite
// exponent `emax`, ties to even (nearbyint in the default rounding mode).
// Returns the rounded value (possibly infinity).
double RoundToFormat(double d, int precision, int emin, int emax) {
  if (std::isinf(d) || d == 0) return d;
  const double a = std::fabs(d);
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, emin);
  const double ulp = std::ldexp(1.0, exponent - (precision - 1));
  const double rounded = std::nearbyint(a / ulp) * ulp;
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - precision), emax);
  // Overflow: the rounded value lies beyond the largest finite one (the
  // rounding above already decided whether it passes the midpoint).
  const double result = rounded > max_finite ? std::numeric_limits<double>::infinity() : rounded;
  return std::copysign(result, d);
}

// Encodes a value that is exactly representable in fp16 (or infinite).
uint16_t EncodeFp16(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7C00;
  if (a < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<int>(a * std::ldexp(1.0, 24)));
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int mantissa = static_cast<int>((f * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mantissa);
}

uint16_t EncodeBf16(double v) {
  // Any bf16 value is a float; the float's top half is the bf16.
  return static_cast<uint16_t>(Bits(static_cast<float>(v)) >> 16);
}

uint16_t OracleFp16(double d) { return EncodeFp16(RoundToFormat(d, 11, -14, 15)); }
uint16_t OracleBf16(double d) { return EncodeBf16(RoundToFormat(d, 8, -126, 127)); }

#ifdef NETFOLD_TEST_HAVE_F16C_INTRINSICS
// Asked once: CPUID traps to the hypervisor in a VM (~15 us a call here,
// which made the 2 million checks below take half a minute).
bool HaveF16c() {
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return have;
}
__attribute__((target("f16c"))) uint16_t HardwareFloatToFp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareFp16ToFloat(uint16_t h) { return _cvtsh_ss(h); }
#else
bool HaveF16c() { return false; }
uint16_t HardwareFloatToFp16(float) { return 0; }
float HardwareFp16ToFloat(uint16_t) { return 0; }
#endif

// Checks FloatToFp16(f) against the oracle (and F16C): "" if right, else a
// description.
::testing::AssertionResult CheckFloatToFp16(float f) {
  const uint16_t got = FloatToFp16(f);
  if (HaveF16c() && got != HardwareFloatToFp16(f)) {
    return ::testing::AssertionFailure() << std::hex << "f=0x" << Bits(f) << " got 0x" << got
                                         << " F16C 0x" << HardwareFloatToFp16(f);
  }
  if (std::isnan(f)) {
    const uint32_t b = Bits(f);
    const uint16_t want = static_cast<uint16_t>(((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x1FF));
    if (got == want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << std::hex << "NaN 0x" << b << " got 0x" << got;
  }
  const uint16_t want = OracleFp16(f);
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << "f=0x" << Bits(f) << " (" << f << ") got 0x"
                                       << got << " want 0x" << want;
}

::testing::AssertionResult CheckFloatToBf16(float f) {
  const uint16_t got = FloatToBf16(f);
  if (std::isnan(f)) {
    const uint16_t want = static_cast<uint16_t>((Bits(f) >> 16) | 0x40);
    if (got == want) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << std::hex << "NaN 0x" << Bits(f) << " got 0x" << got;
  }
  const uint16_t want = OracleBf16(f);
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << "f=0x" << Bits(f) << " (" << f << ") got 0x"
                                       << got << " want 0x" << want;
}

TEST(Float16, Fp16ToFloatIsExactForAllValues) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto h16 = static_cast<uint16_t>(h);
    const float f = Fp16ToFloat(h16);
    if (IsFp16Nan(h16)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(Bits(f) >> 31, h >> 15u);
      EXPECT_EQ(Bits(f) & 0x7FE000u, ((h & 0x3FFu) << 13) | 0x400000u) << std::hex << h;
    } else {
      const double want = Fp16Value(h16);
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), std::signbit(want)) << std::hex << h;
    }
    if (HaveF16c()) {
      ASSERT_EQ(Bits(f), Bits(HardwareFp16ToFloat(h16))) << std::hex << h;
    }
    // Round trip: every fp16 is a float, and comes back (NaNs come back quiet).
    const uint16_t back = FloatToFp16(f);
    if (IsFp16Nan(h16)) {
      EXPECT_EQ(back, h16 | 0x0200) << std::hex << h;
    } else {
      EXPECT_EQ(back, h16) << std::hex << h;
    }
  }
}

TEST(Float16, Bf16ToFloatIsExactForAllValues) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto h16 = static_cast<uint16_t>(h);
    const float f = Bf16ToFloat(h16);
    if (IsBf16Nan(h16)) {
      ASSERT_TRUE(std::isnan(f));
      EXPECT_EQ(Bits(f), (h << 16) | 0x400000u) << std::hex << h;
      EXPECT_EQ(FloatToBf16(f), h16 | 0x0040) << std::hex << h;
    } else {
      ASSERT_EQ(Bits(f), h << 16) << std::hex << h;
      EXPECT_EQ(FloatToBf16(f), h16) << std::hex << h;
    }
  }
}

// Values that exercise rounding: every midpoint between neighbouring
// 16-bit values and the floats just around it.
template <typename Check, typename ToFloat>
void CheckMidpoints(Check check, ToFloat to_float, bool (*is_nan)(uint16_t)) {
  for (uint32_t h = 0; h < 0xFFFF; ++h) {
    const auto lo = static_cast<uint16_t>(h);
    const auto hi = static_cast<uint16_t>(h + 1);
    if (is_nan(lo) || is_nan(hi) || (lo & 0x7FFF) == 0x7FFF || lo == 0x7FFF) continue;
    if ((lo & 0x8000) != (hi & 0x8000)) continue;
    const double mid = (static_cast<double>(to_float(lo)) + to_float(hi)) / 2;
    if (std::isinf(mid)) continue;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);  // midpoints are floats
    ASSERT_TRUE(check(m));
    ASSERT_TRUE(check(std::nextafter(m, 0.0f)));
    ASSERT_TRUE(check(std::nextafter(m, std::numeric_limits<float>::infinity())));
    ASSERT_TRUE(check(std::nextafter(m, -std::numeric_limits<float>::infinity())));
  }
}

TEST(Float16, FloatToFp16RoundsToNearestEven) {
  CheckMidpoints([](float f) { return CheckFloatToFp16(f); },
                 [](uint16_t h) { return Fp16ToFloat(h); }, IsFp16Nan);
  const float specials[] = {
      0.0f, -0.0f, 1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e30f,
      std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
      std::numeric_limits<float>::min(), 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, -0x1p-25f,
      0x1.8p-24f, 0x1p-14f, 0x1.ffcp-15f, 0x1.ffep-15f, 0x1p-26f,
      FromBits(0x7FC00000), FromBits(0xFFC00001), FromBits(0x7F800001), FromBits(0x7FFFFFFF)};
  for (float f : specials) EXPECT_TRUE(CheckFloatToFp16(f));
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);  // the tie above 65504 goes to infinity
  EXPECT_EQ(FloatToFp16(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(0x1p-25f), 0x0000);        // tie between 0 and 2^-24: even
  EXPECT_EQ(FloatToFp16(-0x1p-25f), 0x8000);
  EXPECT_EQ(FloatToFp16(0x1.000002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(FloatToFp16(0x1.8p-24f), 0x0002);       // 1.5 ulp: tie, to even
  EXPECT_EQ(FloatToFp16(FromBits(0x7F800001)), 0x7E00);  // signalling NaN comes out quiet
  EXPECT_EQ(FloatToFp16(FromBits(0xFFC00001)), 0xFE00);

  std::mt19937 rng(1);
  for (int i = 0; i < 1'000'000; ++i) ASSERT_TRUE(CheckFloatToFp16(FromBits(rng())));
  // Every 4093rd float: a sweep through all binades.
  for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 4093) {
    ASSERT_TRUE(CheckFloatToFp16(FromBits(static_cast<uint32_t>(b))));
  }
}

TEST(Float16, FloatToBf16RoundsToNearestEven) {
  CheckMidpoints([](float f) { return CheckFloatToBf16(f); },
                 [](uint16_t h) { return Bf16ToFloat(h); }, IsBf16Nan);
  const float specials[] = {0.0f, -0.0f, 1.0f, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(), FromBits(0x7F7F7FFF),
                            FromBits(0x7F7F8000), FromBits(0x7F7F8001), FromBits(0x00008000),
                            FromBits(0x00018000), FromBits(0x7F800001), FromBits(0xFFFFFFFF)};
  for (float f : specials) EXPECT_TRUE(CheckFloatToBf16(f));
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);  // overflows
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000)), 0x0000);  // subnormal tie, to even
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F800001)), 0x7FC0);
  std::mt19937 rng(2);
  for (int i = 0; i < 1'000'000; ++i) ASSERT_TRUE(CheckFloatToBf16(FromBits(rng())));
  for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 4093) {
    ASSERT_TRUE(CheckFloatToBf16(FromBits(static_cast<uint32_t>(b))));
  }
}

TEST(Float16, ConversionsIgnoreTheFloatingPointEnvironment) {
  // volatile: convert at run time, under the changed rounding mode.
  volatile float below_fp16_midpoint = 0x1.001p0f;
  volatile float below_bf16_midpoint = 0x1.00fep0f;
  const int saved = std::fegetround();
  ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
  const uint16_t fp16 = FloatToFp16(below_fp16_midpoint);
  const uint16_t bf16 = FloatToBf16(below_bf16_midpoint);
  std::fesetround(saved);
  EXPECT_EQ(fp16, 0x3C00);
  EXPECT_EQ(bf16, 0x3F80);
}

// Double rounding is innocuous: float has 24 >= 2*11+2 (fp16) and 2*8+2
// (bf16) significand bits, so rounding a float sum/product of two fp16/bf16
// values once more gives the correctly rounded result. The oracle rounds the
// exact result, which double holds for fp16 sums and products and bf16
// products; bf16 sums are checked where double holds them exactly.
enum class Arith { kSum, kProd };

template <typename T>
T Do(Arith op, T a, T b) {
  return op == Arith::kSum ? a + b : a * b;
}

::testing::AssertionResult CheckFp16Pair(Arith op, uint16_t a, uint16_t b) {
  if (IsFp16Nan(a) || IsFp16Nan(b)) return ::testing::AssertionSuccess();
  const uint16_t via_float = FloatToFp16(Do(op, Fp16ToFloat(a), Fp16ToFloat(b)));
  const double exact = Do(op, static_cast<double>(Fp16ToFloat(a)), static_cast<double>(Fp16ToFloat(b)));
  if (std::isnan(exact)) {
    if (IsFp16Nan(via_float)) return ::testing::AssertionSuccess();
  } else if (via_float == OracleFp16(exact)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << std::hex << "fp16 0x" << a << (op == Arith::kSum ? " + " : " * ")
                                       << "0x" << b << ": via float 0x" << via_float;
}

::testing::AssertionResult CheckBf16Pair(Arith op, uint16_t a, uint16_t b) {
  if (IsBf16Nan(a) || IsBf16Nan(b)) return ::testing::AssertionSuccess();
  const double x = Bf16ToFloat(a);
  const double y = Bf16ToFloat(b);
  const double exact = Do(op, x, y);
  const uint16_t via_float = FloatToBf16(Do(op, Bf16ToFloat(a), Bf16ToFloat(b)));
  if (op == Arith::kSum && !std::isinf(exact) && !std::isnan(exact)) {
    // The double sum is exact iff its rounding error is zero (TwoSum). If
    // it is not, the exponents differ by more than 45, the smaller operand
    // is far below half an ulp of the larger, and the correctly rounded sum
    // is the larger operand itself.
    const double bv = exact - x;
    const double err = (x - (exact - bv)) + (y - bv);
    if (err != 0) {
      const uint16_t larger = std::fabs(x) > std::fabs(y) ? a : b;
      if (via_float == larger) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << std::hex << "bf16 0x" << a << " + 0x" << b
                                           << ": via float 0x" << via_float << ", want 0x" << larger;
    }
  }
  if (std::isnan(exact)) {
    if (IsBf16Nan(via_float)) return ::testing::AssertionSuccess();
  } else if (via_float == OracleBf16(exact)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << std::hex << "bf16 0x" << a << (op == Arith::kSum ? " + " : " * ")
                                       << "0x" << b << ": via float 0x" << via_float;
}

TEST(Float16, OneRoundingPerOpThroughFloatIsCorrectlyRounded) {
  std::mt19937 rng(3);
  for (int i = 0; i < 300'000; ++i) {
    const auto a = static_cast<uint16_t>(rng());
    // Half the partners are near `a` in magnitude, where sums round most.
    const auto b = static_cast<uint16_t>(i % 2 ? rng() : (a ^ (rng() & 0x83FF)));
    for (Arith op : {Arith::kSum, Arith::kProd}) {
      ASSERT_TRUE(CheckFp16Pair(op, a, b));
      ASSERT_TRUE(CheckBf16Pair(op, a, b));
    }
  }
}

void ExhaustivePairs(Arith op, bool fp16) {
  for (uint32_t a = 0; a <= 0xFFFF; ++a) {
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
      const auto a16 = static_cast<uint16_t>(a);
      const auto b16 = static_cast<uint16_t>(b);
      ASSERT_TRUE(fp16 ? CheckFp16Pair(op, a16, b16) : CheckBf16Pair(op, a16, b16));
    }
  }
}

TEST(Float16, DISABLED_ExhaustiveFp16Sum) { ExhaustivePairs(Arith::kSum, true); }
TEST(Float16, DISABLED_ExhaustiveFp16Prod) { ExhaustivePairs(Arith::kProd, true); }
TEST(Float16, DISABLED_ExhaustiveBf16Sum) { ExhaustivePairs(Arith::kSum, false); }
TEST(Float16, DISABLED_ExhaustiveBf16Prod) { ExhaustivePairs(Arith::kProd, false); }

TEST(Float16, DISABLED_ExhaustiveFloatToFp16AndBf16) {
  for (uint64_t b = 0; b <= 0xFFFFFFFFu; ++b) {
    const float f = FromBits(static_cast<uint32_t>(b));
    ASSERT_TRUE(CheckFloatToFp16(f));
    ASSERT_TRUE(CheckFloatToBf16(f));
  }
}

}  // namespace
}  // namespace netfold::reduce
