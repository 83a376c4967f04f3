// What a packet's ICRC costs against the CRC it is made of (docs/performance.md,
// "The ICRC in two calls"): per packet size, ComputeIcrc over a RoCEv2
// packet (the 36-byte masked pseudo-header, the BTH with its masked byte,
// the rest) against one CRC-32 call over as many bytes (36 more than the
// packet's), what an ICRC would cost if the bytes it covers lay in one
// place; measured in the same run, each after a warm-up, in turns.
//
//   icrc_bench [--packets N] [--quick]
//
// Prints, per size, nanoseconds per packet for both and their ratio; the
// last row is a request whose elements are sent from the caller's buffer
// (ComputeIcrcWithPart).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "proto/icrc.h"

#if NETFOLD_HAVE_ISAL
#include <isa-l/crc.h>
#else
#include <zlib.h>
#endif

namespace {

// The CRC proto/icrc.cc uses, called once (without the VZEROUPPER that
// proto/icrc.cc adds after each call, about a cycle).
uint32_t OneCrc(const uint8_t* data, size_t size) {
#if NETFOLD_HAVE_ISAL
  return crc32_gzip_refl(0, data, size);
#else
  return static_cast<uint32_t>(crc32_z(0, data, size));
#endif
}

template <typename F>
double NsPerCall(int n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f(i);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int packets = 2'000'000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--packets" && i + 1 < argc) {
      packets = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      packets = 200'000;
    } else {
      std::fprintf(stderr, "usage: icrc_bench [--packets N] [--quick]\n");
      return 2;
    }
  }
  if (packets < 1) {
    std::fprintf(stderr, "icrc_bench: --packets at least 1\n");
    return 2;
  }
  // The bytes an ICRC covers: BTH (12), DETH (8), aggregation header (40)
  // and elements, as a multicast result of P = 4032 is, and smaller ones.
  std::vector<uint8_t> packet(4096 + 128);
  for (size_t i = 0; i < packet.size(); ++i) packet[i] = static_cast<uint8_t>(i * 7 + 1);
  const netfold::proto::IcrcAddresses addrs{
      .src_ip = 0x7f000001, .dst_ip = 0x7f000001, .src_port = 49152};
  std::printf("icrc_bench: %d packets per size\n", packets);
  uint32_t sink = 0;
  constexpr size_t kPseudoHeader = 36;
  // Times `icrc` and `bound` in turns, a tenth of the packets each time,
  // after a warm-up of each: ns per call of each.
  auto measure = [&](auto&& icrc, auto&& bound) {
    NsPerCall(packets / 10 + 1, icrc);
    NsPerCall(packets / 10 + 1, bound);
    double a = 0, b = 0;
    for (int turn = 0; turn < 10; ++turn) {
      a += NsPerCall(packets / 10 + 1, icrc) / 10;
      b += NsPerCall(packets / 10 + 1, bound) / 10;
    }
    return std::pair{a, b};
  };
  for (size_t covered : {size_t{64}, size_t{1024}, size_t{4032 + 60}}) {
    const std::span<const uint8_t> bytes(packet.data(), covered);
    // Each packet differs in its PSN byte, as a stream's do.
    const auto [icrc, crc] = measure(
        [&](int i) {
          packet[11] = static_cast<uint8_t>(i);
          sink ^= netfold::proto::ComputeIcrc(addrs, bytes);
        },
        [&](int i) {
          packet[11] = static_cast<uint8_t>(i);
          sink ^= OneCrc(packet.data(), kPseudoHeader + covered);
        });
    std::printf("%5zu bytes: ICRC %.1f ns, one CRC call %.1f ns, %.2fx\n", covered, icrc, crc,
                icrc / crc);
  }
  // A request sent from the caller's buffer (ComputeIcrcWithPart): its
  // 52 bytes of headers (BTH and aggregation header) in the packet, its
  // 4032 bytes of elements where the caller has them (no pad: 4084 is a
  // multiple of 4).
  {
    constexpr size_t kAt = 52, kPart = 4032, kCovered = kAt + kPart;
    std::vector<uint8_t> elements(kPart, 0x5a);
    const std::span<const uint8_t> bytes(packet.data(), kCovered);
    const auto [icrc, crc] = measure(
        [&](int i) {
          packet[11] = static_cast<uint8_t>(i);
          sink ^= netfold::proto::ComputeIcrcWithPart(addrs, bytes, kAt, elements);
        },
        [&](int i) {
          packet[11] = static_cast<uint8_t>(i);
          sink ^= OneCrc(packet.data(), kPseudoHeader + kCovered);
        });
    std::printf("%5zu bytes, elements apart: ICRC %.1f ns, one CRC call %.1f ns, %.2fx\n",
                kCovered, icrc, crc, icrc / crc);
  }
  return sink == 0x12345678 ? 3 : 0;  // keeps the results alive
}
