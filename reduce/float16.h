// fp16 (IEEE 754 binary16) and bf16 (bfloat16) <-> float conversions, and
// the canonical NaN of every floating type the reduction ALU produces.
//
//   uint16_t h = reduce::FloatToFp16(1.5f);   // 0x3E00
//   float f = reduce::Fp16ToFloat(h);         // 1.5f
//   uint16_t b = reduce::FloatToBf16(f);      // 0x3FC0
//
// Values travel as their bit patterns (uint16_t), the way they sit in
// buffers and on the wire.
//
// Widening (fp16/bf16 -> float) is exact. Narrowing (float -> fp16/bf16)
// rounds to nearest, ties to even; it overflows to infinity, produces fp16
// and bf16 subnormals (it never flushes them to zero), and keeps the sign. A
// NaN stays a NaN in both directions, and comes out quiet (quiet bit set),
// with the sign and as many of the top payload bits as fit.
//
// These are integer bit manipulations, not FPU instructions: the result does
// not depend on the caller's floating-point environment (rounding mode,
// flush-to-zero, denormals-are-zero). All functions are constexpr, pure and
// thread-safe. docs/reduction.md states how the ALU uses them.
#ifndef NETFOLD_REDUCE_FLOAT16_H_
#define NETFOLD_REDUCE_FLOAT16_H_

#include <bit>
#include <cstdint>

namespace netfold::reduce {

// The one NaN every floating-point reduction result uses (positive, quiet,
// zero payload). See docs/reduction.md, "NaN".
inline constexpr uint16_t kFp16CanonicalNan = 0x7E00;
inline constexpr uint16_t kBf16CanonicalNan = 0x7FC0;
inline constexpr uint32_t kFp32CanonicalNan = 0x7FC00000u;
inline constexpr uint64_t kFp64CanonicalNan = 0x7FF8000000000000u;

// Exact. Infinities map to infinities; a NaN maps to a quiet float NaN with
// the same sign and the 10-bit payload in the top payload bits.
constexpr float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  uint32_t bits = 0;
  if (exponent == 0x1F) {  // infinity or NaN
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u);
  } else if (exponent != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // zero
    bits = sign;
  } else {  // subnormal (mantissa * 2^-24): normalize around its top bit p
    const int p = 31 - std::countl_zero(mantissa);
    bits = sign | (static_cast<uint32_t>(p + 103) << 23) |
           ((mantissa << (23 - p)) & 0x7FFFFFu);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest even. |f| >= 65520 (the midpoint between 65504, the
// largest fp16, and 2^16) becomes infinity; |f| <= 2^-25 becomes a zero of
// the same sign.
constexpr uint16_t FloatToFp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  uint32_t r = 0;
  if (a > 0x7F800000u) {  // NaN: quiet, top 9 payload bits kept
    r = 0x7E00u | ((a >> 13) & 0x1FFu);
  } else if (a >= 0x477FF000u) {  // rounds to infinity (or is infinity)
    r = 0x7C00u;
  } else if (a >= 0x38800000u) {  // >= 2^-14: an fp16 normal
    const uint32_t rebiased = a - 0x38000000u;  // exponent 127 -> 15
    // Round to nearest even at bit 13; a carry into the exponent is right.
    r = (rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13;
  } else if (a > 0x33000000u) {  // (2^-25, 2^-14): fp16 subnormal, unit 2^-24
    const uint32_t e = a >> 23;                           // 102..112
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;       // value = m * 2^(e-150)
    const uint32_t shift = 126 - e;                       // 14..24
    r = (m + ((1u << (shift - 1)) - 1u) + ((m >> shift) & 1u)) >> shift;
  }  // else: <= 2^-25 rounds to zero (2^-25 itself is a tie, and 0 is even)
  return static_cast<uint16_t>(sign | r);
}

// Exact (a bf16 is the top half of a float); a signalling NaN comes out quiet.
constexpr float Bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) bits |= 0x400000u;
  return std::bit_cast<float>(bits);
}

// Round to nearest even at bit 16. Values above the midpoint between the
// largest bf16 and 2^128 become infinity; float subnormals round to bf16
// subnormals.
constexpr uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet, sign and top payload kept
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace netfold::reduce

#endif  // NETFOLD_REDUCE_FLOAT16_H_
