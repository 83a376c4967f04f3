// Internal, per SIMD target: the reduction engine and the policies that say
// how each (data type, op) combines one vector of elements. Highway's
// "-inl.h" form: integer_kernels.cc, float_kernels.cc and pair_kernels.cc
// include it once per target through hwy/foreach_target.h, and everything
// between HWY_BEFORE_NAMESPACE and HWY_AFTER_NAMESPACE is compiled for that
// target (SSSE3, SSE4, AVX2, AVX3, SCALAR, ...).
//
// The engine. A vector policy P handles one "step": P::StepBytes() bytes of
// each operand (about one SIMD register):
//   using Acc;                                   // accumulator
//   static Acc Load(const uint8_t* p);           // first operand -> Acc
//   static void Step(Acc& acc, const uint8_t* p);  // acc = acc op operand
//   static void StepLast(Acc& acc, const uint8_t* p);  // the same, for the
//       last operand: Acc may stay unrounded, Store rounds it (saves one
//       fp16/bf16 rounding per output; the bits are the same)
//   static void Store(uint8_t* p, const Acc& acc);  // after >= 1 step
//   optional: static void Step2(Acc& acc, const uint8_t* p, const uint8_t* q);
//       Step(p) then Step(q) in one: folds take two inputs at a time through
//       it where a policy can share work between them
//   static constexpr size_t kElementSize; static constexpr bool kUsesFpu;
// ReduceBytes/FoldBytes walk the buffers UnrollOf<P>() steps per iteration,
// then one step at a time, and run the tail through zero-padded stack
// buffers, so the tail executes the very same vector code and never reads
// past the end.
// An element policy E (pair types, 8-bit products) works on one element at a
// time in plain C++ (ElementReduce/ElementFold; the compiler may vectorize).
//
// Why every path gives the same bits: a policy combines element i of one
// operand only with element i of the others (lanes never mix), floating
// operands are combined in the documented order (no -ffast-math, and
// -ffp-contract=off: the compiler may regroup only exact integer ops), and
// each op is defined per element exactly (docs/reduction.md). So vector
// width, unrolling and tail handling cannot change a result;
// reduce_test.cc checks every target against the scalar reference.
//
// Aliasing: every step loads all of its operands before it stores, so the
// output may be the same pointer as any input.

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

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/float16.h"
#include "reduce/fp_env.h"
#include "reduce/kernel_table.h"

HWY_BEFORE_NAMESPACE();
namespace netfold::reduce::internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- engine

// No policy steps over more than one full vector.
inline constexpr size_t kMaxStepBytes = HWY_MAX_BYTES;

// Steps per iteration of the main loops: P::kUnroll if the policy sets it,
// else 4. In a fold every accumulator is a dependency chain through all
// inputs, so policies with long per-step latency (fp16/bf16 rounding) want
// more independent accumulators.
template <class P>
constexpr size_t UnrollOf() {
  if constexpr (requires { P::kUnroll; }) {
    return P::kUnroll;
  } else {
    return 4;
  }
}

// For operands of at least kPrefetchMinBytes, the main loops prefetch every
// operand kPrefetchDistance bytes ahead. The hardware prefetchers alone keep
// too few misses in flight when a loop computes a lot per cache line
// (fp16/bf16, 8-input folds), and then compute and memory time add up
// instead of overlapping. Smaller operands are likely cached (a packet just
// received), where prefetches would only take load slots. A prefetch past
// the end of a buffer is harmless (it never faults).
inline constexpr size_t kPrefetchDistance = 1024;
inline constexpr size_t kPrefetchMinBytes = 256 * 1024;

HWY_INLINE void PrefetchBlock(const uint8_t* p, size_t block_bytes) {
  for (size_t off = 0; off < block_bytes; off += 64) {
    hwy::Prefetch(p + kPrefetchDistance + off);
  }
}

// One iteration of ReduceBytes' main loop: sizeof...(I) steps.
template <class P, size_t... I>
HWY_INLINE void ReduceBlock(std::index_sequence<I...>, uint8_t* dst, const uint8_t* src,
                            size_t step) {
  typename P::Acc a[] = {P::Load(dst + I * step)...};
  (P::StepLast(a[I], src + I * step), ...);
  (P::Store(dst + I * step, a[I]), ...);
}

// The main loop of ReduceBytes: returns the bytes done (whole blocks).
template <bool kPrefetch, class P>
HWY_INLINE size_t ReduceBlocks(uint8_t* dst, const uint8_t* src, size_t bytes, size_t step) {
  constexpr size_t kUnroll = UnrollOf<P>();
  size_t i = 0;
  if (bytes >= kUnroll * step) {
    for (; i <= bytes - kUnroll * step; i += kUnroll * step) {
      if constexpr (kPrefetch) {
        PrefetchBlock(dst + i, kUnroll * step);
        PrefetchBlock(src + i, kUnroll * step);
      }
      ReduceBlock<P>(std::make_index_sequence<kUnroll>(), dst + i, src + i, step);
    }
  }
  return i;
}

template <class P>
HWY_NOINLINE void ReduceBytes(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const size_t step = P::StepBytes();
  size_t i = bytes >= kPrefetchMinBytes ? ReduceBlocks<true, P>(dst, src, bytes, step)
                                        : ReduceBlocks<false, P>(dst, src, bytes, step);
  for (; i + step <= bytes; i += step) {
    ReduceBlock<P>(std::make_index_sequence<1>(), dst + i, src + i, step);
  }
  if (i < bytes) {
    const size_t rem = bytes - i;
    alignas(64) uint8_t acc_buf[kMaxStepBytes] = {};
    alignas(64) uint8_t src_buf[kMaxStepBytes] = {};
    memcpy(acc_buf, dst + i, rem);
    memcpy(src_buf, src + i, rem);
    ReduceBlock<P>(std::make_index_sequence<1>(), acc_buf, src_buf, step);
    memcpy(dst + i, acc_buf, rem);
  }
}

// acc = (acc op p) op q, through P::Step2 where the policy has one.
template <class P>
HWY_INLINE void StepTwo(typename P::Acc& acc, const uint8_t* p, const uint8_t* q) {
  if constexpr (requires { P::Step2(acc, p, q); }) {
    P::Step2(acc, p, q);
  } else {
    P::Step(acc, p);
    P::Step(acc, q);
  }
}

// One iteration of FoldBytes' main loop: sizeof...(I) steps of every input,
// at byte offset `at`. All loads of a step happen before its store.
template <bool kPrefetch, class P, size_t... I>
HWY_INLINE void FoldBlock(std::index_sequence<I...>, uint8_t* out, const void* const* inputs,
                          size_t num_inputs, size_t at, size_t step) {
  constexpr size_t kSteps = sizeof...(I);
  const uint8_t* in0 = static_cast<const uint8_t*>(inputs[0]) + at;
  if constexpr (kPrefetch) PrefetchBlock(in0, kSteps * step);
  typename P::Acc a[] = {P::Load(in0 + I * step)...};
  // Inputs two at a time: half the loop overhead (and GCC keeps the
  // accumulators in place instead of copying them every iteration).
  size_t j = 1;
  for (; j + 2 < num_inputs; j += 2) {
    const uint8_t* in = static_cast<const uint8_t*>(inputs[j]) + at;
    const uint8_t* next = static_cast<const uint8_t*>(inputs[j + 1]) + at;
    if constexpr (kPrefetch) {
      PrefetchBlock(in, kSteps * step);
      PrefetchBlock(next, kSteps * step);
    }
    (StepTwo<P>(a[I], in + I * step, next + I * step), ...);
  }
  if (j + 1 < num_inputs) {
    const uint8_t* in = static_cast<const uint8_t*>(inputs[j]) + at;
    if constexpr (kPrefetch) PrefetchBlock(in, kSteps * step);
    (P::Step(a[I], in + I * step), ...);
  }
  const uint8_t* last = static_cast<const uint8_t*>(inputs[num_inputs - 1]) + at;
  if constexpr (kPrefetch) PrefetchBlock(last, kSteps * step);
  (P::StepLast(a[I], last + I * step), ...);
  (P::Store(out + at + I * step, a[I]), ...);
}

// FoldBlock for a number of inputs fixed at compile time: the input
// pointers live in registers and the loop over the inputs unrolls, which
// the general FoldBlock (inputs from memory, a loop of unknown length)
// cannot give the compiler.
template <size_t kInputs, bool kPrefetch, class P, size_t... I>
HWY_INLINE void FoldBlockFixed(std::index_sequence<I...>, uint8_t* out,
                               const uint8_t* const (&in)[kInputs], size_t at, size_t step) {
  constexpr size_t kSteps = sizeof...(I);
  if constexpr (kPrefetch) {
    for (size_t j = 0; j < kInputs; ++j) PrefetchBlock(in[j] + at, kSteps * step);
  }
  typename P::Acc a[] = {P::Load(in[0] + at + I * step)...};
  // The inputs between the first and the last, two at a time.
#pragma GCC unroll 16
  for (size_t j = 1; j + 2 < kInputs; j += 2) {
    (StepTwo<P>(a[I], in[j] + at + I * step, in[j + 1] + at + I * step), ...);
  }
  if constexpr (kInputs % 2 == 1 && kInputs > 2) {
    (P::Step(a[I], in[kInputs - 2] + at + I * step), ...);
  }
  (P::StepLast(a[I], in[kInputs - 1] + at + I * step), ...);
  (P::Store(out + at + I * step, a[I]), ...);
}

// The main loop of FoldBytes for kInputs inputs: returns the bytes done.
template <size_t kInputs, class P>
HWY_INLINE size_t FoldBlocksFixed(uint8_t* out, const void* const* inputs, size_t bytes,
                                  size_t step) {
  constexpr size_t kUnroll = UnrollOf<P>();
  const uint8_t* in[kInputs];
  for (size_t j = 0; j < kInputs; ++j) in[j] = static_cast<const uint8_t*>(inputs[j]);
  size_t i = 0;
  if (bytes < kUnroll * step) return 0;
  const size_t end = bytes - kUnroll * step;
  if (bytes >= kPrefetchMinBytes) {
    for (; i <= end; i += kUnroll * step) {
      FoldBlockFixed<kInputs, true, P>(std::make_index_sequence<kUnroll>(), out, in, i, step);
    }
  } else {
    for (; i <= end; i += kUnroll * step) {
      FoldBlockFixed<kInputs, false, P>(std::make_index_sequence<kUnroll>(), out, in, i, step);
    }
  }
  return i;
}

template <class P>
HWY_NOINLINE void FoldBytes(uint8_t* out, const void* const* inputs, size_t num_inputs,
                            size_t bytes) {
  if (num_inputs == 0) return;
  const uint8_t* in0 = static_cast<const uint8_t*>(inputs[0]);
  if (num_inputs == 1) {
    if (out != in0 && bytes != 0) memmove(out, in0, bytes);
    return;
  }
  constexpr size_t kUnroll = UnrollOf<P>();
  const size_t step = P::StepBytes();
  size_t i = 0;
  // Up to 8 inputs (a switch's usual fan-in) in a loop made for that count,
  // for the one-vector policies; the fp16/bf16 ones (their own kUnroll, two
  // vectors per accumulator) run out of registers there: bf16 sum fell from
  // 0.76x to 0.60x of the reference at DRAM size.
  if (!requires { P::kUnroll; } && num_inputs <= 8) {
    switch (num_inputs) {
      case 2: i = FoldBlocksFixed<2, P>(out, inputs, bytes, step); break;
      case 3: i = FoldBlocksFixed<3, P>(out, inputs, bytes, step); break;
      case 4: i = FoldBlocksFixed<4, P>(out, inputs, bytes, step); break;
      case 5: i = FoldBlocksFixed<5, P>(out, inputs, bytes, step); break;
      case 6: i = FoldBlocksFixed<6, P>(out, inputs, bytes, step); break;
      case 7: i = FoldBlocksFixed<7, P>(out, inputs, bytes, step); break;
      default: i = FoldBlocksFixed<8, P>(out, inputs, bytes, step); break;
    }
  } else if (bytes >= kUnroll * step) {
    const size_t end = bytes - kUnroll * step;
    if (bytes >= kPrefetchMinBytes) {
      for (; i <= end; i += kUnroll * step) {
        FoldBlock<true, P>(std::make_index_sequence<kUnroll>(), out, inputs, num_inputs, i, step);
      }
    } else {
      for (; i <= end; i += kUnroll * step) {
        FoldBlock<false, P>(std::make_index_sequence<kUnroll>(), out, inputs, num_inputs, i, step);
      }
    }
  }
  for (; i + step <= bytes; i += step) {
    FoldBlock<false, P>(std::make_index_sequence<1>(), out, inputs, num_inputs, i, step);
  }
  if (i < bytes) {
    const size_t rem = bytes - i;
    alignas(64) uint8_t acc_buf[kMaxStepBytes] = {};
    alignas(64) uint8_t src_buf[kMaxStepBytes] = {};
    memcpy(acc_buf, in0 + i, rem);
    auto a = P::Load(acc_buf);
    for (size_t j = 1; j < num_inputs; ++j) {
      memcpy(src_buf, static_cast<const uint8_t*>(inputs[j]) + i, rem);
      if (j + 1 < num_inputs) {
        P::Step(a, src_buf);
      } else {
        P::StepLast(a, src_buf);
      }
    }
    P::Store(acc_buf, a);
    memcpy(out + i, acc_buf, rem);
  }
}

template <class E>
HWY_NOINLINE void ElementReduce(uint8_t* dst, const uint8_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const size_t at = i * E::kElementSize;
    E::Store(dst + at, E::Apply(E::Load(dst + at), E::Load(src + at)));
  }
}

template <class E>
HWY_NOINLINE void ElementFold(uint8_t* out, const void* const* inputs, size_t num_inputs,
                              size_t count) {
  if (num_inputs == 0) return;
  const uint8_t* in0 = static_cast<const uint8_t*>(inputs[0]);
  if (num_inputs == 1) {
    if (out != in0 && count != 0) memmove(out, in0, count * E::kElementSize);
    return;
  }
  // Blocks keep the inner loops simple (vectorizable) and read every input
  // of a block before the block is written.
  constexpr size_t kBlock = 64;
  typename E::Elem acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    const size_t at = base * E::kElementSize;
    for (size_t e = 0; e < n; ++e) acc[e] = E::Load(in0 + at + e * E::kElementSize);
    for (size_t j = 1; j < num_inputs; ++j) {
      const uint8_t* in = static_cast<const uint8_t*>(inputs[j]) + at;
      for (size_t e = 0; e < n; ++e) acc[e] = E::Apply(acc[e], E::Load(in + e * E::kElementSize));
    }
    for (size_t e = 0; e < n; ++e) E::Store(out + at + e * E::kElementSize, acc[e]);
  }
}

// Table entry points. Floating-point arithmetic runs under FpEnvGuard.
template <class P>
void VectorReduceEntry(void* dst, const void* src, size_t count) {
  if constexpr (P::kUsesFpu) {
    FpEnvGuard guard;
    ReduceBytes<P>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
                   count * P::kElementSize);
  } else {
    ReduceBytes<P>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
                   count * P::kElementSize);
  }
}

template <class P>
void VectorFoldEntry(void* out, const void* const* inputs, size_t num_inputs, size_t count) {
  if constexpr (P::kUsesFpu) {
    FpEnvGuard guard;
    FoldBytes<P>(static_cast<uint8_t*>(out), inputs, num_inputs, count * P::kElementSize);
  } else {
    FoldBytes<P>(static_cast<uint8_t*>(out), inputs, num_inputs, count * P::kElementSize);
  }
}

template <class E>
void ElementReduceEntry(void* dst, const void* src, size_t count) {
  ElementReduce<E>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count);
}

template <class E>
void ElementFoldEntry(void* out, const void* const* inputs, size_t num_inputs, size_t count) {
  ElementFold<E>(static_cast<uint8_t*>(out), inputs, num_inputs, count);
}

template <class P>
void PutVector(KernelTable* table, proto::DataType type, proto::ReduceOp op) {
  table->at(type, op) = KernelEntry{&VectorReduceEntry<P>, &VectorFoldEntry<P>};
}

template <class E>
void PutElement(KernelTable* table, proto::DataType type, proto::ReduceOp op) {
  static_assert(!E::kUsesFpu, "element policies do no floating-point arithmetic");
  table->at(type, op) = KernelEntry{&ElementReduceEntry<E>, &ElementFoldEntry<E>};
}

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
