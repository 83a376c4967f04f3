// Internal, per SIMD target: the policies that say how each (data type, op)
// combines one vector (or one element) of operands, over the engine of
// engine-inl.h (which documents the policy contract, and why every path
// gives the same bits). Highway's "-inl.h" form: integer_kernels.cc,
// float_kernels.cc and pair_kernels.cc include it once per target through
// hwy/foreach_target.h, and everything between HWY_BEFORE_NAMESPACE and
// HWY_AFTER_NAMESPACE is compiled for that target (SSSE3, SSE4, AVX2, AVX3,
// SCALAR, ...).

#if defined(NETFOLD_REDUCE_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NETFOLD_REDUCE_KERNELS_INL_H_
#undef NETFOLD_REDUCE_KERNELS_INL_H_
#else
#define NETFOLD_REDUCE_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "hwy/highway.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/engine-inl.h"
#include "reduce/float16.h"
#include "reduce/fp_env.h"
#include "reduce/kernel_table.h"

HWY_BEFORE_NAMESPACE();
namespace netfold::reduce::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------- lane operations

struct OpAdd {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::Add(a, b);
  }
};
struct OpMul {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return a * b;
  }
};
struct OpMin {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::Min(a, b);
  }
};
struct OpMax {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::Max(a, b);
  }
};
struct OpAnd {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::And(a, b);
  }
};
struct OpOr {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::Or(a, b);
  }
};
struct OpXor {
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    return hn::Xor(a, b);
  }
};
// Logical ops: an element is true iff it is nonzero; the result is 0 or 1.
struct OpLand {
  template <class D, class V>
  static HWY_INLINE V Apply(D d, V a, V b) {
    const V zero = hn::Zero(d);
    return hn::IfThenElseZero(hn::And(hn::Ne(a, zero), hn::Ne(b, zero)),
                              hn::Set(d, hn::TFromD<D>{1}));
  }
};
struct OpLor {
  template <class D, class V>
  static HWY_INLINE V Apply(D d, V a, V b) {
    return hn::IfThenElseZero(hn::Ne(hn::Or(a, b), hn::Zero(d)), hn::Set(d, hn::TFromD<D>{1}));
  }
};
struct OpLxor {
  template <class D, class V>
  static HWY_INLINE V Apply(D d, V a, V b) {
    const V zero = hn::Zero(d);
    return hn::IfThenElseZero(hn::Xor(hn::Ne(a, zero), hn::Ne(b, zero)),
                              hn::Set(d, hn::TFromD<D>{1}));
  }
};

// -------------------------------------------------------- vector policies

// Integer lanes: the op applies lane by lane (Add/Mul wrap modulo 2^bits).
template <typename T, class Op>
struct LanePolicy {
  using D = hn::ScalableTag<T>;
  using Acc = hn::Vec<D>;
  static constexpr size_t kElementSize = sizeof(T);
  static constexpr bool kUsesFpu = false;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(D()) * sizeof(T); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    return hn::LoadU(D(), reinterpret_cast<const T*>(p));
  }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) { acc = Op::Apply(D(), acc, Load(p)); }
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) { Step(acc, p); }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    hn::StoreU(acc, D(), reinterpret_cast<T*>(p));
  }
};

template <typename T>
constexpr auto CanonicalNanBits() {
  if constexpr (sizeof(T) == 4) {
    return kFp32CanonicalNan;
  } else {
    return kFp64CanonicalNan;
  }
}

// fp32/fp64 sum and prod: IEEE arithmetic (round to nearest even, no FMA),
// any NaN result replaced by the canonical NaN when stored. NaN propagates
// through + and *, so canonicalizing once at the end of a fold gives the
// same bits as after every step.
template <typename T, class Op>
struct FloatArithPolicy {
  using D = hn::ScalableTag<T>;
  using DU = hn::RebindToUnsigned<D>;
  using Acc = hn::Vec<D>;
  static constexpr size_t kElementSize = sizeof(T);
  static constexpr bool kUsesFpu = true;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(D()) * sizeof(T); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    return hn::LoadU(D(), reinterpret_cast<const T*>(p));
  }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) { acc = Op::Apply(D(), acc, Load(p)); }
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) { Step(acc, p); }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const D d;
    const Acc nan = hn::BitCast(d, hn::Set(DU(), CanonicalNanBits<T>()));
    hn::StoreU(hn::IfThenElse(hn::IsNaN(acc), nan, acc), d, reinterpret_cast<T*>(p));
  }
};

// fp32/fp64 min/max: the native min/max, corrected where it is not what
// docs/reduction.md says. Highway's Min/Max (x86 MINPS & co.) give the
// smaller/larger of two distinct non-NaN values but leave NaNs and equal
// operands (like -0 and +0) to the implementation, so: where a == b the
// result is a | b for min and a & b for max (-0 for min(-0, +0), +0 for max;
// the value itself when the bits are equal), and a NaN anywhere makes the
// result the canonical NaN (tracked as a mask, applied in Store).
template <typename T, bool kMax>
struct FloatMinMaxNativePolicy {
  using D = hn::ScalableTag<T>;
  using DU = hn::RebindToUnsigned<D>;
  using V = hn::Vec<D>;
  using M = hn::Mask<D>;
  struct Acc {
    V value;
    M nan;
  };
  static constexpr size_t kElementSize = sizeof(T);
  // Compares are FPU work: with DAZ set, a subnormal would compare equal to
  // zero. FpEnvGuard keeps DAZ off.
  static constexpr bool kUsesFpu = true;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(D()) * sizeof(T); }
  static HWY_INLINE V LoadV(const uint8_t* p) {
    return hn::LoadU(D(), reinterpret_cast<const T*>(p));
  }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    const V v = LoadV(p);
    return Acc{v, hn::IsNaN(v)};
  }
  // min/max of two non-NaN vectors with -0 < +0 (NaN lanes: don't care).
  static HWY_INLINE V MinMax(V a, V b) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // AVX-512DQ VRANGEPS/PD does it in one instruction: imm8[1:0] = 00 min,
    // 01 max; imm8[3:2] = 01 sign from the comparison; opposite-signed
    // zeros compare as -0 < +0 (Intel SDM, VRANGEPD/PS).
    constexpr int kImm = kMax ? 0x05 : 0x04;
    if constexpr (sizeof(T) == 4) {
      return V{_mm512_range_ps(a.raw, b.raw, kImm)};
    } else {
      return V{_mm512_range_pd(a.raw, b.raw, kImm)};
    }
#else
    const V extreme = kMax ? hn::Max(a, b) : hn::Min(a, b);
    const V tie = kMax ? hn::And(a, b) : hn::Or(a, b);
    return hn::IfThenElse(a == b, tie, extreme);
#endif
  }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) {
    const V b = LoadV(p);
    acc.value = MinMax(acc.value, b);
    acc.nan = hn::Or(acc.nan, hn::IsNaN(b));
  }
  // Two operands, one NaN test: an unordered compare of b with c is true
  // where either is NaN. With AVX-512 (VRANGE, the compare and the mask OR
  // compete for ports) this took the L2-sized 8-input Fold of fp32/fp64
  // min/max from 0.73-0.78x of the reference to 0.81-0.85x (Intel Xeon,
  // docs/performance.md). A compare under the `nan` mask instead of the
  // OR was slower (0.72-0.75x): it puts the compare's latency on the chain
  // from one input to the next.
  static HWY_INLINE void Step2(Acc& acc, const uint8_t* p, const uint8_t* q) {
    const V b = LoadV(p);
    const V c = LoadV(q);
    acc.value = MinMax(MinMax(acc.value, b), c);
    acc.nan = hn::Or(acc.nan, EitherNaN(b, c));
  }
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) { Step(acc, p); }
  static HWY_INLINE M EitherNaN(V b, V c) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (sizeof(T) == 4) {
      return M{_mm512_cmp_ps_mask(b.raw, c.raw, _CMP_UNORD_Q)};
    } else {
      return M{_mm512_cmp_pd_mask(b.raw, c.raw, _CMP_UNORD_Q)};
    }
#else
    return hn::Or(hn::IsNaN(b), hn::IsNaN(c));
#endif
  }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const D d;
    const V nan = hn::BitCast(d, hn::Set(DU(), CanonicalNanBits<T>()));
    hn::StoreU(hn::IfThenElse(acc.nan, nan, acc.value), d, reinterpret_cast<T*>(p));
  }
};

// fp16/bf16 min/max (and usable for any width), on the bits (no FPU). The key
//   key(x) = x ^ (sign(x) ? 0x7F..F : 0)    (as a signed integer)
// orders all non-NaN values like the reals, with -0 < +0; it is its own
// inverse. A NaN operand makes the result the canonical NaN.
template <typename TI, TI kInfBits, TI kNanBits, bool kMax>
struct FloatMinMaxPolicy {
  using D = hn::ScalableTag<TI>;
  using V = hn::Vec<D>;
  using M = hn::Mask<D>;
  struct Acc {
    V key;
    M nan;
  };
  static constexpr size_t kElementSize = sizeof(TI);
  static constexpr bool kUsesFpu = false;

  static HWY_INLINE V Key(V bits) {
    return hn::Xor(bits, hn::And(hn::BroadcastSignBit(bits),
                                 hn::Set(D(), std::numeric_limits<TI>::max())));
  }
  static HWY_INLINE M IsNan(V bits) {
    return hn::And(bits, hn::Set(D(), std::numeric_limits<TI>::max())) > hn::Set(D(), kInfBits);
  }
  static HWY_INLINE size_t StepBytes() { return hn::Lanes(D()) * sizeof(TI); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    const V bits = hn::LoadU(D(), reinterpret_cast<const TI*>(p));
    return Acc{Key(bits), IsNan(bits)};
  }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) {
    const V bits = hn::LoadU(D(), reinterpret_cast<const TI*>(p));
    acc.key = kMax ? hn::Max(acc.key, Key(bits)) : hn::Min(acc.key, Key(bits));
    acc.nan = hn::Or(acc.nan, IsNan(bits));
  }
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) { Step(acc, p); }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const D d;
    hn::StoreU(hn::IfThenElse(acc.nan, hn::Set(d, kNanBits), Key(acc.key)), d,
               reinterpret_cast<TI*>(p));
  }
};

// More accumulators in flight for the fp16/bf16 folds, where they fit in
// registers (AVX-512 has 32; AVX2 and SSE have 16).
#if HWY_ARCH_X86
inline constexpr size_t kHalfUnroll = HWY_TARGET <= HWY_AVX3 ? 8 : 4;
#else
inline constexpr size_t kHalfUnroll = 4;
#endif

// bf16 sum and prod through float, rounded back to bf16 after every op. The
// data is read as 32-bit lanes holding two bf16 each: the low half becomes a
// float by a shift, the high half by a mask, so no lane shuffles are needed
// and element order is kept on any endianness.
//
// Round() needs no NaN case: every float that enters an op here has its low
// 16 bits zero (a widened bf16, or a rounded result), and a NaN result of +
// or * is one of the operand NaNs, quieted, or the default NaN; so a NaN
// result has zero low bits too, adding at most 0x8000 cannot carry out of
// them, and the NaN survives the rounding (its payload is replaced by the
// canonical NaN in Store).
template <class Op>
struct Bf16ArithPolicy {
  using DU = hn::ScalableTag<uint32_t>;
  using DF = hn::Repartition<float, DU>;
  using VU = hn::Vec<DU>;
  using VF = hn::Vec<DF>;
  struct Acc {
    VF lo;
    VF hi;
  };
  static constexpr size_t kElementSize = 2;
  static constexpr bool kUsesFpu = true;
  static constexpr size_t kUnroll = kHalfUnroll;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(DU()) * sizeof(uint32_t); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    const DU du;
    const DF df;
    const VU v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
    return Acc{hn::BitCast(df, hn::ShiftLeft<16>(v)),
               hn::BitCast(df, hn::And(v, hn::Set(du, 0xFFFF0000u)))};
  }
  // Nearest bf16 (ties to even) as bits with the low half zero.
  static HWY_INLINE VU RoundBits(VF x) {
    const DU du;
    const VU bits = hn::BitCast(du, x);
    const VU odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    return hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), odd)), hn::Set(du, 0xFFFF0000u));
  }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) {
    const DF df;
    const Acc b = Load(p);
    acc.lo = hn::BitCast(df, RoundBits(Op::Apply(df, acc.lo, b.lo)));
    acc.hi = hn::BitCast(df, RoundBits(Op::Apply(df, acc.hi, b.hi)));
  }
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) {
    const Acc b = Load(p);
    acc.lo = Op::Apply(DF(), acc.lo, b.lo);
    acc.hi = Op::Apply(DF(), acc.hi, b.hi);
  }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const DU du;
    const VU nan = hn::Set(du, kFp32CanonicalNan);
    const VU lo = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(acc.lo)), nan, RoundBits(acc.lo));
    const VU hi = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(acc.hi)), nan, RoundBits(acc.hi));
    hn::StoreU(hn::Or(hn::ShiftRight<16>(lo), hi), du, reinterpret_cast<uint32_t*>(p));
  }
};

// fp16 <-> float in integer code, for targets without F16C. Same algorithm
// as reduce/float16.h, except that a NaN becomes the canonical NaN.
template <class DU>
HWY_INLINE hn::Vec<hn::Repartition<float, DU>> Fp16BitsToF32(DU du, hn::Vec<DU> h) {
  const hn::Repartition<float, DU> df;
  const hn::RebindToSigned<DU> di;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto mag = hn::And(h, hn::Set(du, 0x7FFFu));
  const auto exponent = hn::ShiftRight<10>(mag);
  const auto normal = hn::Add(hn::ShiftLeft<13>(mag), hn::Set(du, 112u << 23));
  const auto inf_nan = hn::Or(hn::ShiftLeft<13>(mag), hn::Set(du, 0x7F800000u));
  // Zero and subnormals: mantissa * 2^-24, exact in float.
  const auto tiny = hn::BitCast(
      du, hn::ConvertTo(df, hn::BitCast(di, mag)) * hn::Set(df, 0x1.0p-24f));
  auto bits = hn::IfThenElse(exponent == hn::Zero(du), tiny, normal);
  bits = hn::IfThenElse(exponent == hn::Set(du, 31u), inf_nan, bits);
  return hn::BitCast(df, hn::Or(bits, sign));
}

// Returns fp16 bits in the low half of each 32-bit lane.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> F32ToFp16Bits(DF, hn::Vec<DF> x) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, x);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto ai = hn::BitCast(di, a);
  // Normal fp16: rebias and round at bit 13.
  const auto rebiased = hn::Sub(a, hn::Set(du, 0x38000000u));
  const auto normal = hn::ShiftRight<13>(hn::Add(
      rebiased, hn::Add(hn::Set(du, 0xFFFu), hn::And(hn::ShiftRight<13>(rebiased), hn::Set(du, 1u)))));
  // Subnormal fp16: shift the full significand right by 126 - exponent,
  // clamped to [14, 25] (25 and beyond give 0).
  const auto e = hn::BitCast(di, hn::ShiftRight<23>(a));
  const auto shift = hn::BitCast(
      du, hn::Min(hn::Max(hn::Sub(hn::Set(di, 126), e), hn::Set(di, 14)), hn::Set(di, 25)));
  const auto m = hn::Or(hn::And(a, hn::Set(du, 0x7FFFFFu)), hn::Set(du, 0x800000u));
  const auto half_minus_one =
      hn::Sub(hn::Set(du, 1u) << hn::Sub(shift, hn::Set(du, 1u)), hn::Set(du, 1u));
  const auto odd = hn::And(m >> shift, hn::Set(du, 1u));
  const auto subnormal = hn::Add(hn::Add(m, half_minus_one), odd) >> shift;
  auto r = hn::IfThenElse(hn::RebindMask(du, ai < hn::Set(di, 0x38800000)), subnormal, normal);
  r = hn::IfThenElse(hn::RebindMask(du, ai > hn::Set(di, 0x477FEFFF)), hn::Set(du, 0x7C00u), r);
  r = hn::Or(r, sign);
  return hn::IfThenElse(hn::RebindMask(du, ai > hn::Set(di, 0x7F800000)), hn::Set(du, 0x7E00u),
                        r);
}

// fp16 sum and prod without F16C: 32-bit lanes holding two fp16 each (as
// Bf16ArithPolicy), converted in integer code.
template <class Op>
struct Fp16EmulatedArithPolicy {
  using DU = hn::ScalableTag<uint32_t>;
  using DF = hn::Repartition<float, DU>;
  using VU = hn::Vec<DU>;
  using VF = hn::Vec<DF>;
  struct Acc {
    VF lo;
    VF hi;
  };
  static constexpr size_t kElementSize = 2;
  static constexpr bool kUsesFpu = true;
  static constexpr size_t kUnroll = kHalfUnroll;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(DU()) * sizeof(uint32_t); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    const DU du;
    const VU v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
    return Acc{Fp16BitsToF32(du, hn::And(v, hn::Set(du, 0xFFFFu))),
               Fp16BitsToF32(du, hn::ShiftRight<16>(v))};
  }
  static HWY_INLINE VF Round(VF x) { return Fp16BitsToF32(DU(), F32ToFp16Bits(DF(), x)); }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) {
    const Acc b = Load(p);
    acc.lo = Round(Op::Apply(DF(), acc.lo, b.lo));
    acc.hi = Round(Op::Apply(DF(), acc.hi, b.hi));
  }
  // Store rounds (F32ToFp16Bits), so the last op needs no Round.
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) {
    const Acc b = Load(p);
    acc.lo = Op::Apply(DF(), acc.lo, b.lo);
    acc.hi = Op::Apply(DF(), acc.hi, b.hi);
  }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const DU du;
    const VU out =
        hn::Or(F32ToFp16Bits(DF(), acc.lo), hn::ShiftLeft<16>(F32ToFp16Bits(DF(), acc.hi)));
    hn::StoreU(out, du, reinterpret_cast<uint32_t*>(p));
  }
};

// True where the hardware converts fp16 <-> float (x86 F16C, part of
// Highway's AVX2 and AVX3 targets): VCVTPS2PH with an immediate
// round-to-nearest-even, which is IEEE-correct including subnormals and
// overflow, so it gives the same bits as the integer code above.
#if HWY_ARCH_X86 && !defined(HWY_DISABLE_F16C)
inline constexpr bool kHaveF16c = HWY_TARGET <= HWY_AVX2;
#else
inline constexpr bool kHaveF16c = false;
#endif

// fp16 sum and prod with F16C: half-width fp16 loads promoted to float.
template <class Op>
struct Fp16F16cArithPolicy {
  using DF = hn::ScalableTag<float>;
  using DH = hn::Rebind<hwy::float16_t, DF>;
  using DU = hn::RebindToUnsigned<DF>;
  using Acc = hn::Vec<DF>;
  static constexpr size_t kElementSize = 2;
  static constexpr bool kUsesFpu = true;
  static constexpr size_t kUnroll = kHalfUnroll;

  static HWY_INLINE size_t StepBytes() { return hn::Lanes(DF()) * sizeof(uint16_t); }
  static HWY_INLINE Acc Load(const uint8_t* p) {
    return hn::PromoteTo(DF(), hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static HWY_INLINE Acc Round(Acc x) { return hn::PromoteTo(DF(), hn::DemoteTo(DH(), x)); }
  static HWY_INLINE void Step(Acc& acc, const uint8_t* p) {
    acc = Round(Op::Apply(DF(), acc, Load(p)));
  }
  // Store rounds (DemoteTo), so the last op needs no Round.
  static HWY_INLINE void StepLast(Acc& acc, const uint8_t* p) {
    acc = Op::Apply(DF(), acc, Load(p));
  }
  static HWY_INLINE void Store(uint8_t* p, const Acc& acc) {
    const DF df;
    const Acc nan = hn::BitCast(df, hn::Set(DU(), kFp32CanonicalNan));
    hn::StoreU(hn::DemoteTo(DH(), hn::IfThenElse(hn::IsNaN(acc), nan, acc)), DH(),
               reinterpret_cast<hwy::float16_t*>(p));
  }
};

template <class Op>
using Fp16ArithPolicy =
    std::conditional_t<kHaveF16c, Fp16F16cArithPolicy<Op>, Fp16EmulatedArithPolicy<Op>>;

// ------------------------------------------------------- element policies

// Integer product modulo 2^bits, for lane widths Highway cannot multiply.
template <typename T>
struct ProdElement {
  using Elem = T;
  static constexpr size_t kElementSize = sizeof(T);
  static constexpr bool kUsesFpu = false;

  static HWY_INLINE Elem Load(const uint8_t* p) {
    T v;
    memcpy(&v, p, sizeof(T));
    return v;
  }
  static HWY_INLINE Elem Apply(Elem a, Elem b) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) *
                                          static_cast<W>(static_cast<U>(b))));
  }
  static HWY_INLINE void Store(uint8_t* p, Elem v) { memcpy(p, &v, sizeof(T)); }
};

// MINLOC/MAXLOC on a {value, int32 index} pair type. Values are compared by
// rank: integers by value; floats by the min/max key above, with any NaN
// ranking below everything for MINLOC and above everything for MAXLOC. The
// better rank wins; on equal rank the value is kept and the index is the
// smaller one. The output has a canonical NaN value and zeroed padding.
// TV is the value as stored: a signed integer, or the float's bits
// (uint32_t/uint64_t) when kFloat.
template <typename TV, bool kFloat, size_t kSize, size_t kIndexOffset, bool kMax>
struct PairElement {
  struct Elem {
    TV value;
    int32_t index;
  };
  static constexpr size_t kElementSize = kSize;
  static constexpr bool kUsesFpu = false;
  using TS = std::make_signed_t<TV>;
  static constexpr TS kAbs = std::numeric_limits<TS>::max();
  // +infinity's bits (only meaningful when kFloat).
  static constexpr TS kInf =
      static_cast<TS>(sizeof(TV) == 4 ? 0x7F800000ull : 0x7FF0000000000000ull);

  static HWY_INLINE bool IsNan(TV v) {
    return kFloat && (static_cast<TS>(v) & kAbs) > kInf;
  }
  static HWY_INLINE int64_t Rank(TV v) {
    if constexpr (kFloat) {
      const TS s = static_cast<TS>(v);
      if ((s & kAbs) > kInf) {
        return kMax ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
      }
      return static_cast<int64_t>(s ^ ((s >> (sizeof(TS) * 8 - 1)) & kAbs));
    } else {
      return static_cast<int64_t>(v);
    }
  }
  static HWY_INLINE Elem Load(const uint8_t* p) {
    Elem e;
    memcpy(&e.value, p, sizeof(TV));
    memcpy(&e.index, p + kIndexOffset, sizeof(int32_t));
    return e;
  }
  static HWY_INLINE Elem Apply(Elem a, Elem b) {
    const int64_t ra = Rank(a.value);
    const int64_t rb = Rank(b.value);
    if (ra == rb) return Elem{a.value, std::min(a.index, b.index)};
    const bool a_wins = kMax ? ra > rb : ra < rb;
    return a_wins ? a : b;
  }
  static HWY_INLINE void Store(uint8_t* p, Elem e) {
    uint8_t bytes[kSize] = {};
    TV value = e.value;
    if constexpr (kFloat) {
      if (IsNan(value)) value = static_cast<TV>(CanonicalNanBits<TV>());
    }
    memcpy(bytes, &value, sizeof(TV));
    memcpy(bytes + kIndexOffset, &e.index, sizeof(int32_t));
    memcpy(p, bytes, kSize);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace netfold::reduce::internal
HWY_AFTER_NAMESPACE();

#endif  // NETFOLD_REDUCE_KERNELS_INL_H_ include guard (per target)
