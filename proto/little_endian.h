// Typed little-endian integer fields for packed wire structs, for the
// formats netfold defines itself between its own hosts (the host
// algorithms' peer header, proto/peer_header.h). The IBTA headers and the
// aggregation header are big-endian (proto/big_endian.h); the conventions
// are the same: each field is an array of bytes, so a struct of them has
// alignment 1, no padding, and its layout is the wire layout; fill and read
// such structs by memcpy, never by casting a pointer into a buffer.
//
//   struct Wire { Le32 seq; Le64 offset; };
//   static_assert(sizeof(Wire) == 12 && alignof(Wire) == 1);
//   Wire w;
//   w.seq.set(7);
//   std::memcpy(out, &w, sizeof(w));
//
// The types are trivially copyable values; none of them is synchronised.
#ifndef NETFOLD_PROTO_LITTLE_ENDIAN_H_
#define NETFOLD_PROTO_LITTLE_ENDIAN_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace netfold::proto {

// An unsigned little-endian field of `N` bytes (1 <= N <= 8) holding a `T`.
template <typename T, size_t N>
struct LittleEndianField {
  static_assert(N >= 1 && N <= sizeof(T) && sizeof(T) <= 8);

  // The bytes as they are on the wire; least significant first.
  std::array<uint8_t, N> bytes{};

  // Returns the value in host order.
  constexpr T get() const {
    uint64_t v = 0;
    for (size_t i = N; i-- > 0;) v = (v << 8) | bytes[i];
    return static_cast<T>(v);
  }

  // Stores the low N*8 bits of `value`; higher bits are dropped.
  constexpr void set(T value) {
    uint64_t v = static_cast<uint64_t>(value);
    for (size_t i = 0; i < N; ++i) {
      bytes[i] = static_cast<uint8_t>(v & 0xFF);
      v >>= 8;
    }
  }

  friend constexpr bool operator==(const LittleEndianField&, const LittleEndianField&) = default;
};

using Le32 = LittleEndianField<uint32_t, 4>;
using Le64 = LittleEndianField<uint64_t, 8>;

static_assert(sizeof(Le32) == 4 && alignof(Le32) == 1);
static_assert(sizeof(Le64) == 8 && alignof(Le64) == 1);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_LITTLE_ENDIAN_H_
