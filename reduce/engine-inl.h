// Internal, per SIMD target: the reduction engine, which walks buffers and
// applies a policy (kernels-inl.h has the policies). Highway's "-inl.h"
// form: kernels-inl.h includes it, so it is compiled once per target.
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

#if defined(NETFOLD_REDUCE_ENGINE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NETFOLD_REDUCE_ENGINE_INL_H_
#undef NETFOLD_REDUCE_ENGINE_INL_H_
#else
#define NETFOLD_REDUCE_ENGINE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
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

}  // namespace HWY_NAMESPACE
}  // namespace netfold::reduce::internal
HWY_AFTER_NAMESPACE();

#endif  // NETFOLD_REDUCE_ENGINE_INL_H_ include guard (per target)
