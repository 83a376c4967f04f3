// The scalar reference of the reduction ALU: docs/reduction.md written as
// plain C++, one element at a time, sharing no code with the SIMD kernels
// (kernels-inl.h) except the fp16/bf16 conversions of float16.h, which have
// their own exhaustive tests. Slow on purpose: clarity first.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/float16.h"
#include "reduce/fp_env.h"
#include "reduce/kernel_table.h"

namespace netfold::reduce::internal {
namespace {

using proto::DataType;
using proto::ReduceOp;

// ------------------------------------------------------------- integers

template <typename T>
T ApplyInteger(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  // Arithmetic modulo 2^bits: unsigned, and at least as wide as unsigned int
  // so that uint8/uint16 operands are not promoted to (overflowing) int.
  using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
  const W wa = static_cast<U>(a);
  const W wb = static_cast<U>(b);
  switch (op) {
    case ReduceOp::kSum: return static_cast<T>(static_cast<U>(wa + wb));
    case ReduceOp::kProd: return static_cast<T>(static_cast<U>(wa * wb));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
    case ReduceOp::kBand: return static_cast<T>(a & b);
    case ReduceOp::kBor: return static_cast<T>(a | b);
    case ReduceOp::kBxor: return static_cast<T>(a ^ b);
    case ReduceOp::kLand: return static_cast<T>((a != 0 && b != 0) ? 1 : 0);
    case ReduceOp::kLor: return static_cast<T>((a != 0 || b != 0) ? 1 : 0);
    case ReduceOp::kLxor: return static_cast<T>(((a != 0) != (b != 0)) ? 1 : 0);
    default: return a;  // not reached: CheckOpAllowed ran first
  }
}

// ----------------------------------------------------------- floating

template <typename F>
using BitsOf = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

template <typename F>
F CanonicalNan() {
  if constexpr (sizeof(F) == 4) {
    return std::bit_cast<F>(kFp32CanonicalNan);
  } else {
    return std::bit_cast<F>(kFp64CanonicalNan);
  }
}

// Strict order of min/max and minloc/maxloc on non-NaN values: the usual
// one, and -0 < +0.
template <typename F>
bool FloatLess(F a, F b) {
  if (a == b) return std::signbit(a) && !std::signbit(b);
  return a < b;
}

template <typename F>
F ApplyFloat(ReduceOp op, F a, F b) {
  F r = a;
  switch (op) {
    case ReduceOp::kSum: r = a + b; break;
    case ReduceOp::kProd: r = a * b; break;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return CanonicalNan<F>();
      if (op == ReduceOp::kMin) {
        r = FloatLess(b, a) ? b : a;
      } else {
        r = FloatLess(a, b) ? b : a;
      }
      break;
    default: break;  // not reached
  }
  return std::isnan(r) ? CanonicalNan<F>() : r;
}

// fp16/bf16: through float (exact), one rounding back per op.
template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float), uint16_t kNan>
uint16_t ApplyHalf(ReduceOp op, uint16_t a, uint16_t b) {
  const float r = ApplyFloat<float>(op, kToFloat(a), kToFloat(b));
  return std::isnan(r) ? kNan : kFromFloat(r);
}

constexpr float Fp16ToFloatFn(uint16_t h) { return Fp16ToFloat(h); }
constexpr uint16_t FloatToFp16Fn(float f) { return FloatToFp16(f); }
constexpr float Bf16ToFloatFn(uint16_t h) { return Bf16ToFloat(h); }
constexpr uint16_t FloatToBf16Fn(float f) { return FloatToBf16(f); }

// ---------------------------------------------------------- pair types

// MPI's MINLOC/MAXLOC (MPI 4.0, 6.9.4) on {value, index}. Floats use the
// order above, and a NaN value is "the most extreme" (it wins; between NaNs
// the lower index wins), like NaN propagates through min and max.
template <typename V>
void ApplyPair(bool is_max, size_t index_offset, size_t size, uint8_t* a, const uint8_t* b) {
  V u, v;
  int32_t i, j;
  memcpy(&u, a, sizeof(V));
  memcpy(&i, a + index_offset, sizeof(i));
  memcpy(&v, b, sizeof(V));
  memcpy(&j, b + index_offset, sizeof(j));
  V w = u;
  int32_t k = i;
  bool u_nan = false, v_nan = false;
  if constexpr (std::is_floating_point_v<V>) {
    u_nan = std::isnan(u);
    v_nan = std::isnan(v);
  }
  if (u_nan || v_nan) {
    if constexpr (std::is_floating_point_v<V>) w = CanonicalNan<V>();
    k = (u_nan && v_nan) ? std::min(i, j) : (u_nan ? i : j);
  } else {
    bool u_first, v_first;  // u strictly better than v, and v than u
    if constexpr (std::is_floating_point_v<V>) {
      u_first = is_max ? FloatLess(v, u) : FloatLess(u, v);
      v_first = is_max ? FloatLess(u, v) : FloatLess(v, u);
    } else {
      u_first = is_max ? u > v : u < v;
      v_first = is_max ? v > u : v < u;
    }
    if (u_first) {
      w = u;
      k = i;
    } else if (v_first) {
      w = v;
      k = j;
    } else {
      w = u;
      k = std::min(i, j);
    }
  }
  uint8_t out[16] = {};  // padding bytes come out zero
  memcpy(out, &w, sizeof(V));
  memcpy(out + index_offset, &k, sizeof(k));
  memcpy(a, out, size);
}

// ----------------------------------------------------- element dispatch

// a = a op b for one element of `type`, on raw (unaligned) bytes.
void ApplyElement(DataType type, ReduceOp op, uint8_t* a, const uint8_t* b) {
  auto apply = [&](auto zero, auto fn) {
    using T = decltype(zero);
    T x, y;
    memcpy(&x, a, sizeof(T));
    memcpy(&y, b, sizeof(T));
    const T r = fn(x, y);
    memcpy(a, &r, sizeof(T));
  };
  auto integer = [&](auto zero) {
    apply(zero, [op](auto x, auto y) { return ApplyInteger(op, x, y); });
  };
  const bool is_max = op == ReduceOp::kMaxloc;
  const size_t offset = proto::PairIndexOffset(type);
  const size_t size = proto::DataTypeSize(type);
  switch (type) {
    case DataType::kInt8: return integer(int8_t{});
    case DataType::kInt16: return integer(int16_t{});
    case DataType::kInt32: return integer(int32_t{});
    case DataType::kInt64: return integer(int64_t{});
    case DataType::kUint8: return integer(uint8_t{});
    case DataType::kUint16: return integer(uint16_t{});
    case DataType::kUint32: return integer(uint32_t{});
    case DataType::kUint64: return integer(uint64_t{});
    case DataType::kFp32:
      return apply(float{}, [op](float x, float y) { return ApplyFloat(op, x, y); });
    case DataType::kFp64:
      return apply(double{}, [op](double x, double y) { return ApplyFloat(op, x, y); });
    case DataType::kFp16:
      return apply(uint16_t{}, [op](uint16_t x, uint16_t y) {
        return ApplyHalf<Fp16ToFloatFn, FloatToFp16Fn, kFp16CanonicalNan>(op, x, y);
      });
    case DataType::kBf16:
      return apply(uint16_t{}, [op](uint16_t x, uint16_t y) {
        return ApplyHalf<Bf16ToFloatFn, FloatToBf16Fn, kBf16CanonicalNan>(op, x, y);
      });
    case DataType::kFloatInt: return ApplyPair<float>(is_max, offset, size, a, b);
    case DataType::kDoubleInt: return ApplyPair<double>(is_max, offset, size, a, b);
    case DataType::kLongInt: return ApplyPair<int64_t>(is_max, offset, size, a, b);
    case DataType::k2Int: return ApplyPair<int32_t>(is_max, offset, size, a, b);
    case DataType::kShortInt: return ApplyPair<int16_t>(is_max, offset, size, a, b);
  }
}

template <DataType kType, ReduceOp kOp>
void ReferenceReduce(void* dst, const void* src, size_t count) {
  FpEnvGuard guard;
  const size_t size = proto::DataTypeSize(kType);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; ++i) {
    uint8_t b[16];  // copy first: src may be dst
    memcpy(b, s + i * size, size);
    ApplyElement(kType, kOp, d + i * size, b);
  }
}

template <DataType kType, ReduceOp kOp>
void ReferenceFold(void* out, const void* const* inputs, size_t num_inputs, size_t count) {
  if (num_inputs == 0) return;
  FpEnvGuard guard;
  const size_t size = proto::DataTypeSize(kType);
  auto* o = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    uint8_t acc[16];
    memcpy(acc, static_cast<const uint8_t*>(inputs[0]) + i * size, size);
    for (size_t j = 1; j < num_inputs; ++j) {
      ApplyElement(kType, kOp, acc, static_cast<const uint8_t*>(inputs[j]) + i * size);
    }
    memcpy(o + i * size, acc, size);
  }
}

template <DataType kType, ReduceOp kOp>
void Put(KernelTable* table) {
  if (proto::IsOpAllowed(kType, kOp)) {
    table->at(kType, kOp) = KernelEntry{&ReferenceReduce<kType, kOp>, &ReferenceFold<kType, kOp>};
  }
}

template <DataType kType, size_t... kOps>
void PutAllOps(KernelTable* table, std::index_sequence<kOps...>) {
  (Put<kType, static_cast<ReduceOp>(kOps + 1)>(table), ...);
}

template <size_t... kTypes>
void PutAllTypes(KernelTable* table, std::index_sequence<kTypes...>) {
  (PutAllOps<static_cast<DataType>(kTypes + 1)>(table, std::make_index_sequence<12>()), ...);
}

}  // namespace

void FillReferenceKernels(KernelTable* table) {
  PutAllTypes(table, std::make_index_sequence<17>());
}

}  // namespace netfold::reduce::internal
