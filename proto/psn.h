// 24-bit packet sequence number (PSN) arithmetic of InfiniBand/RoCEv2, as RC
// go-back-N needs it: PSNs wrap from 0xFFFFFF to 0, and "before"/"after" are
// decided by the signed distance modulo 2^24 (half the space each way).
//
//   uint32_t next = PsnAdd(psn, 1);                 // 0xFFFFFF + 1 == 0
//   int32_t ahead = PsnDiff(received, expected);    // > 0: a gap, < 0: a duplicate
//   if (PsnLess(acked, oldest_unacked)) ...         // a stale ACK
//
// Arguments are PSNs (only their low 24 bits are used). All functions are
// constexpr, pure and thread-safe.
#ifndef NETFOLD_PROTO_PSN_H_
#define NETFOLD_PROTO_PSN_H_

#include <cstdint>

namespace netfold::proto {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnModulus = 0x1000000;  // 2^24
// PSNs within this distance of each other compare sensibly; a sender must
// never have more than this many packets outstanding.
inline constexpr uint32_t kPsnHalfRange = 0x800000;  // 2^23

// True if `psn` fits in 24 bits.
constexpr bool IsValidPsn(uint32_t psn) { return psn <= kPsnMask; }

// Returns (psn + delta) mod 2^24; `delta` may be negative.
constexpr uint32_t PsnAdd(uint32_t psn, int32_t delta) {
  // Unsigned wrap-around modulo 2^32 is also correct modulo 2^24.
  return (psn + static_cast<uint32_t>(delta)) & kPsnMask;
}

// Returns the signed distance a - b modulo 2^24, in [-2^23, 2^23): positive
// when `a` is after `b`. A distance of exactly 2^23 is reported as -2^23.
constexpr int32_t PsnDiff(uint32_t a, uint32_t b) {
  const uint32_t d = (a - b) & kPsnMask;
  return d >= kPsnHalfRange ? static_cast<int32_t>(d) - static_cast<int32_t>(kPsnModulus)
                            : static_cast<int32_t>(d);
}

// True if `a` comes strictly before `b` (modulo 2^24).
constexpr bool PsnLess(uint32_t a, uint32_t b) { return PsnDiff(a, b) < 0; }

// True if `a` comes before `b` or equals it (modulo 2^24).
constexpr bool PsnLessEq(uint32_t a, uint32_t b) { return PsnDiff(a, b) <= 0; }

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_PSN_H_
