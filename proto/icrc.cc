#include "proto/icrc.h"

#include <zlib.h>
#if NETFOLD_HAVE_ISAL
#include <isa-l/crc.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#endif

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "proto/big_endian.h"

namespace netfold::proto {
namespace {

constexpr size_t kLrhSize = 8;
constexpr size_t kPseudoHeaderSize = kLrhSize + kIpv4HeaderSize + kUdpHeaderSize;

// Byte offsets of the masked fields.
constexpr size_t kIpTosOffset = 1;
constexpr size_t kIpTtlOffset = 8;
constexpr size_t kIpChecksumOffset = 10;
constexpr size_t kUdpChecksumOffset = 6;

// zlib's crc32 (reflected CRC-32, initial and final inversion, continued
// from a previous result). ISA-L's crc32_gzip_refl is the same function
// with carry-less multiply folding (PCLMULQDQ/VPCLMULQDQ, chosen at run
// time): about ten times zlib's rate on a 4 KiB packet (docs/performance.md
// "transport/"), and every RoCEv2 packet is covered once on each side.
//
// ISA-L's assembly returns with the upper halves of the vector registers
// in use (its AVX-512 kernel does not end with VZEROUPPER, as compiled
// code does). Left so, every legacy-SSE instruction the caller's thread
// runs afterwards, in the application too (Debian's reference BLAS is
// such code), pays for that state: a dgemm after one collective took 6x
// its time (docs/performance.md, "The application's SSE code after a
// collective"). VZEROUPPER gives the state back clean; the ABI lets a
// callee clobber those halves, and it costs about a cycle.
#if NETFOLD_HAVE_ISAL && defined(__x86_64__)
__attribute__((target("avx"))) void ZeroUpper() { _mm256_zeroupper(); }
// Only a CPU with AVX has the state to clean (and the instruction).
const bool kCpuHasAvx = __builtin_cpu_supports("avx");
#endif

uint32_t Crc(uint32_t crc, const uint8_t* data, size_t size) {
#if NETFOLD_HAVE_ISAL
  const uint32_t result = crc32_gzip_refl(crc, data, size);
#if defined(__x86_64__)
  if (kCpuHasAvx) ZeroUpper();
#endif
  return result;
#else
  return static_cast<uint32_t>(crc32_z(crc, data, size));
#endif
}

// Masks the variant fields of a 36-byte LRH + IPv4 + UDP pseudo-header.
void MaskPseudoHeader(uint8_t* p) {
  std::memset(p, 0xFF, kLrhSize);
  uint8_t* ip = p + kLrhSize;
  ip[kIpTosOffset] = 0xFF;
  ip[kIpTtlOffset] = 0xFF;
  ip[kIpChecksumOffset] = 0xFF;
  ip[kIpChecksumOffset + 1] = 0xFF;
  uint8_t* udp = ip + kIpv4HeaderSize;
  udp[kUdpChecksumOffset] = 0xFF;
  udp[kUdpChecksumOffset + 1] = 0xFF;
}

// ISA-L's CRC folds 256 bytes a step and then the rest 16 bytes a step,
// slowly: a call over 4092 bytes takes ~1.4x one over 4096
// (docs/performance.md, "The ICRC in two calls"). So the ICRC is cut in
// two calls whose second covers a multiple of 256 bytes: the first takes
// the masked pseudo-header, the packet's first bytes (with BTH byte 4,
// which is masked) and as many after them as that leaves over.
constexpr size_t kStep = 256;
// Headers before a part that lies elsewhere (ComputeIcrcWithPart) go with
// the pseudo-header when they are this short, as a request's are.
constexpr size_t kMaxHead = 128;
using HeadBuffer = std::array<uint8_t, kPseudoHeaderSize + kMaxHead + kStep - 1>;

// The CRC over the masked pseudo-header in `buffer`, `head` (the packet's
// first bytes, BTH byte 4 masked) and `more` (bytes after them, at most
// kStep - 1), in one call.
uint32_t HeadCrc(HeadBuffer& buffer, std::span<const uint8_t> head,
                 std::span<const uint8_t> more = {}) {
  if (head.size() > kMaxHead + kStep - 1 - more.size() || more.size() > kStep - 1) {
    NETFOLD_LOG(kError) << "HeadCrc: " << head.size() << " + " << more.size()
                        << " bytes do not fit its buffer";
    std::abort();
  }
  uint8_t* p = buffer.data() + kPseudoHeaderSize;
  if (!head.empty()) std::memcpy(p, head.data(), head.size());
  if (head.size() > kBthFecnByteOffset) p[kBthFecnByteOffset] = 0xFF;
  if (!more.empty()) std::memcpy(p + head.size(), more.data(), more.size());
  return Crc(0, buffer.data(), kPseudoHeaderSize + head.size() + more.size());
}

// CRC over the masked pseudo-header in `buffer`, then `covered` with BTH
// byte 4 masked: two calls, the second over a multiple of kStep bytes.
uint32_t IcrcOver(HeadBuffer& buffer, std::span<const uint8_t> covered) {
  size_t head = std::min(covered.size(), kBthFecnByteOffset + 1);
  head += (covered.size() - head) % kStep;
  const uint32_t crc = HeadCrc(buffer, covered.first(head));
  return covered.size() > head ? Crc(crc, covered.data() + head, covered.size() - head) : crc;
}

void WriteCanonicalHeaders(const IcrcAddresses& addrs, size_t udp_payload_size, uint8_t ttl,
                           uint8_t tos, uint8_t* ip) {
  ip[0] = 0x45;
  ip[kIpTosOffset] = tos;
  StoreBigEndian<uint16_t>(ip + 2,
                           static_cast<uint16_t>(kIpv4HeaderSize + kUdpHeaderSize + udp_payload_size));
  StoreBigEndian<uint16_t>(ip + 4, addrs.ip_id);  // identification
  StoreBigEndian<uint16_t>(ip + 6, 0x4000);  // DF, fragment offset 0
  ip[kIpTtlOffset] = ttl;
  ip[9] = 17;  // UDP
  StoreBigEndian<uint16_t>(ip + kIpChecksumOffset, 0);
  StoreBigEndian<uint32_t>(ip + 12, addrs.src_ip);
  StoreBigEndian<uint32_t>(ip + 16, addrs.dst_ip);
  uint8_t* udp = ip + kIpv4HeaderSize;
  StoreBigEndian<uint16_t>(udp + 0, addrs.src_port);
  StoreBigEndian<uint16_t>(udp + 2, addrs.dst_port);
  StoreBigEndian<uint16_t>(udp + 4, static_cast<uint16_t>(kUdpHeaderSize + udp_payload_size));
  StoreBigEndian<uint16_t>(udp + kUdpChecksumOffset, 0);
}

}  // namespace

uint32_t ComputeIcrc(const IcrcAddresses& addrs, std::span<const uint8_t> covered) {
  HeadBuffer pseudo;
  WriteCanonicalHeaders(addrs, covered.size() + kIcrcSize, 0, 0, pseudo.data() + kLrhSize);
  MaskPseudoHeader(pseudo.data());
  return IcrcOver(pseudo, covered);
}

uint32_t ComputeIcrcWithPart(const IcrcAddresses& addrs, std::span<const uint8_t> covered,
                             size_t at, std::span<const uint8_t> part) {
  if (at <= kBthFecnByteOffset || at > covered.size() || part.size() > covered.size() - at) {
    NETFOLD_LOG(kError) << "ComputeIcrcWithPart: part of " << part.size() << " bytes at " << at
                        << " does not lie in the payload of a " << covered.size()
                        << "-byte packet";
    std::abort();
  }
  HeadBuffer pseudo;
  WriteCanonicalHeaders(addrs, covered.size() + kIcrcSize, 0, 0, pseudo.data() + kLrhSize);
  MaskPseudoHeader(pseudo.data());
  // The CRC goes on where it stopped: the headers, the part, the rest.
  // Short headers go with the pseudo-header and the part's first bytes,
  // so that the part's call covers a multiple of kStep bytes.
  size_t from = 0;  // of the part, what the first call took
  uint32_t crc;
  if (at <= kMaxHead) {
    from = part.size() % kStep;
    crc = HeadCrc(pseudo, covered.first(at), part.first(from));
  } else {
    crc = IcrcOver(pseudo, covered.first(at));
  }
  if (part.size() > from) crc = Crc(crc, part.data() + from, part.size() - from);
  const size_t after = at + part.size();
  return after < covered.size() ? Crc(crc, covered.data() + after, covered.size() - after) : crc;
}

uint32_t ComputeIcrcIpv4(std::span<const uint8_t, kIpv4HeaderSize> ipv4_header,
                         std::span<const uint8_t, kUdpHeaderSize> udp_header,
                         std::span<const uint8_t> covered) {
  HeadBuffer pseudo;
  std::memcpy(pseudo.data() + kLrhSize, ipv4_header.data(), kIpv4HeaderSize);
  std::memcpy(pseudo.data() + kLrhSize + kIpv4HeaderSize, udp_header.data(), kUdpHeaderSize);
  MaskPseudoHeader(pseudo.data());
  return IcrcOver(pseudo, covered);
}

const IcrcIdentificationTable::Size& IcrcIdentificationTable::For(size_t covered_size) {
  for (const Size& s : sizes_) {
    if (s.covered_size == covered_size) return s;
  }
  // The CRC is affine in its input, so an identification x changes the
  // ICRC by D(x), linear in x: the CRC difference that x makes in two bytes
  // (any starting state cancels), carried through the bytes after the
  // field. crc32_combine_op(a, 0, op) is exactly that carrying: zlib's
  // combine is M_len(a) ^ b.
  Size& s = sizes_[next_];
  next_ = (next_ + 1) % sizes_.size();
  s.covered_size = covered_size;
  constexpr size_t kIdOffset = kLrhSize + 4;
  const uLong carry =
      crc32_combine_gen(static_cast<z_off_t>(kPseudoHeaderSize + covered_size - kIdOffset - 2));
  static constexpr uint8_t kZeroId[2] = {};
  static const uLong zero_id = crc32_z(0, kZeroId, 2);
  for (int i = 0; i < 16; ++i) {
    const uint16_t x = static_cast<uint16_t>(1u << i);
    const uint8_t id[2] = {static_cast<uint8_t>(x >> 8), static_cast<uint8_t>(x)};
    s.bit[i] = static_cast<uint32_t>(crc32_combine_op(crc32_z(0, id, 2) ^ zero_id, 0, carry));
  }
  for (uint16_t x = 0; x < kSegmentIds; ++x) {
    uint32_t d = 0;
    for (int i = 0; i < 16; ++i) {
      if ((x >> i & 1) != 0) d ^= s.bit[i];
    }
    s.segment[x] = d;
  }
  return s;
}

uint32_t IcrcIdentificationTable::Difference(size_t covered_size, uint16_t ip_id) {
  if (ip_id == 0) return 0;
  const Size& s = For(covered_size);
  if (ip_id < kSegmentIds) return s.segment[ip_id];
  uint32_t d = 0;
  for (int i = 0; i < 16; ++i) {
    if ((ip_id >> i & 1) != 0) d ^= s.bit[i];
  }
  return d;
}

std::optional<uint16_t> IcrcIdentificationTable::FindSegment(size_t covered_size, uint32_t delta) {
  const Size& s = For(covered_size);
  for (uint16_t x = 0; x < kSegmentIds; ++x) {
    if (s.segment[x] == delta) return x;
  }
  return std::nullopt;
}

uint32_t IcrcIdentificationDifference(size_t covered_size, uint16_t ip_id) {
  IcrcIdentificationTable table;
  return table.Difference(covered_size, ip_id);
}

std::optional<uint16_t> SolveIpv4Identification(const IcrcAddresses& addrs,
                                                std::span<const uint8_t> covered,
                                                uint32_t received_icrc) {
  IcrcAddresses canonical = addrs;
  canonical.ip_id = 0;
  const uint32_t delta = ComputeIcrc(canonical, covered) ^ received_icrc;
  if (delta == 0) return 0;
  // D(x), the difference identification x makes, is linear in x: solve
  // D(x) = delta.
  IcrcIdentificationTable table;
  auto difference_of = [&](uint16_t x) { return table.Difference(covered.size(), x); };
  // Gaussian elimination over GF(2): basis[b] has its highest set bit b and
  // combo[b] the identification bits that produce it.
  uint32_t basis[32] = {};
  uint16_t combo[32] = {};
  for (int i = 0; i < 16; ++i) {
    uint32_t v = difference_of(static_cast<uint16_t>(1u << i));
    uint16_t c = static_cast<uint16_t>(1u << i);
    for (int b = 31; b >= 0 && v != 0; --b) {
      if ((v >> b & 1) == 0) continue;
      if (basis[b] == 0) {
        basis[b] = v;
        combo[b] = c;
        v = 0;
        break;
      }
      v ^= basis[b];
      c ^= combo[b];
    }
  }
  uint32_t rest = delta;
  uint16_t x = 0;
  for (int b = 31; b >= 0; --b) {
    if ((rest >> b & 1) == 0) continue;
    if (basis[b] == 0) return std::nullopt;  // not a difference any identification makes
    rest ^= basis[b];
    x ^= combo[b];
  }
  return x;
}

void StoreIcrc(uint32_t icrc, std::span<uint8_t, kIcrcSize> out) {
  for (size_t i = 0; i < kIcrcSize; ++i) out[i] = static_cast<uint8_t>(icrc >> (8 * i));
}

uint32_t LoadIcrc(std::span<const uint8_t, kIcrcSize> in) {
  uint32_t icrc = 0;
  for (size_t i = kIcrcSize; i-- > 0;) icrc = (icrc << 8) | in[i];
  return icrc;
}

std::array<uint8_t, kIpv4HeaderSize + kUdpHeaderSize> MakeIpv4UdpHeaders(
    const IcrcAddresses& addrs, size_t udp_payload_size, uint8_t ttl, uint8_t tos) {
  std::array<uint8_t, kIpv4HeaderSize + kUdpHeaderSize> headers{};
  uint8_t* ip = headers.data();
  WriteCanonicalHeaders(addrs, udp_payload_size, ttl, tos, ip);
  // RFC 1071 one's-complement sum over the header with checksum 0.
  uint32_t sum = 0;
  for (size_t i = 0; i < kIpv4HeaderSize; i += 2) sum += LoadBigEndian<uint16_t>(ip + i);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  StoreBigEndian<uint16_t>(ip + kIpChecksumOffset, static_cast<uint16_t>(~sum & 0xFFFF));
  return headers;
}

}  // namespace netfold::proto
