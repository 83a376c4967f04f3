// Typed big-endian (network order) integer fields for packed wire structs.
//
//   struct UdpWire {
//     Be16 src_port;
//     Be16 dst_port;
//     Be16 length;
//     Be16 checksum;
//   };
//   static_assert(sizeof(UdpWire) == 8 && alignof(UdpWire) == 1);
//
//   UdpWire udp;
//   std::memcpy(&udp, bytes.data(), sizeof(udp));  // bytes: untrusted input
//   uint16_t port = udp.dst_port.get();
//   udp.length.set(8 + payload_size);
//
// Each field is an array of bytes, so a struct made of them has alignment 1
// and no padding: it is packed by construction and its layout is the wire
// layout on every compiler. Wire structs are meant to be filled and read by
// memcpy to and from untrusted buffers (never by casting a pointer into the
// buffer), which keeps decoders free of alignment and aliasing traps.
//
// Be24 is the 24-bit field of the InfiniBand headers (QP numbers, PSN, MSN):
// set() keeps the low 24 bits of its argument.
//
// The types are trivially copyable values; none of them is synchronised.
#ifndef NETFOLD_PROTO_BIG_ENDIAN_H_
#define NETFOLD_PROTO_BIG_ENDIAN_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace netfold::proto {

// An unsigned big-endian field of `N` bytes (1 <= N <= 8) holding a `T`.
template <typename T, size_t N>
struct BigEndianField {
  static_assert(N >= 1 && N <= sizeof(T) && sizeof(T) <= 8);

  // The bytes as they are on the wire; most significant first.
  std::array<uint8_t, N> bytes{};

  // Returns the value in host order.
  constexpr T get() const {
    uint64_t v = 0;
    for (size_t i = 0; i < N; ++i) v = (v << 8) | bytes[i];
    return static_cast<T>(v);
  }

  // Stores the low N*8 bits of `value`; higher bits are dropped.
  constexpr void set(T value) {
    uint64_t v = static_cast<uint64_t>(value);
    for (size_t i = N; i-- > 0;) {
      bytes[i] = static_cast<uint8_t>(v & 0xFF);
      v >>= 8;
    }
  }

  friend constexpr bool operator==(const BigEndianField&, const BigEndianField&) = default;
};

using Be16 = BigEndianField<uint16_t, 2>;
using Be24 = BigEndianField<uint32_t, 3>;
using Be32 = BigEndianField<uint32_t, 4>;
using Be64 = BigEndianField<uint64_t, 8>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be24) == 3 && alignof(Be24) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

// The largest value a 24-bit field holds.
inline constexpr uint32_t kMax24 = 0xFFFFFF;

// Reads and writes a big-endian integer at `p` (which has at least
// sizeof(T) bytes); for code that walks a buffer without a wire struct.
template <typename T>
constexpr T LoadBigEndian(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = (v << 8) | p[i];
  return static_cast<T>(v);
}
template <typename T>
constexpr void StoreBigEndian(uint8_t* p, T value) {
  uint64_t v = static_cast<uint64_t>(value);
  for (size_t i = sizeof(T); i-- > 0;) {
    p[i] = static_cast<uint8_t>(v & 0xFF);
    v >>= 8;
  }
}

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_BIG_ENDIAN_H_
