// libFuzzer target: ParseRocePacket with the ICRC checked, and the ICRC
// functions. Input: src_ip, dst_ip (4 bytes each), src_port, dst_port (2
// bytes each), all big-endian, then the UDP payload.
//
// Properties, beyond "no crash, no out-of-bounds read" (ASan/UBSan):
//   - checking the ICRC only ever adds kBadIcrc to the unchecked result;
//   - the canonical-header and real-header (MakeIpv4UdpHeaders, any TTL and
//     TOS) checks agree;
//   - after RewriteIcrc the checked parser gives the unchecked result, so
//     the fuzzer explores the structure behind a valid ICRC too.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "proto/big_endian.h"
#include "proto/fuzz/fuzz_check.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ::netfold::proto;  // NOLINT: a fuzz target, not library code
  constexpr size_t kAddressBytes = 12;
  if (size < kAddressBytes) return 0;
  const IcrcAddresses addrs{.src_ip = LoadBigEndian<uint32_t>(data),
                            .dst_ip = LoadBigEndian<uint32_t>(data + 4),
                            .src_port = LoadBigEndian<uint16_t>(data + 8),
                            .dst_port = LoadBigEndian<uint16_t>(data + 10)};
  const std::span<const uint8_t> packet(data + kAddressBytes, size - kAddressBytes);

  RocePacketView view;
  const RoceParseResult unchecked = ParseRocePacket(packet, nullptr, &view);
  const RoceParseResult checked = ParseRocePacket(packet, &addrs, &view);
  FUZZ_CHECK(checked == unchecked || checked == RoceParseResult::kBadIcrc);
  if (packet.size() < kBthSize + kIcrcSize) FUZZ_CHECK(checked == RoceParseResult::kTruncated);

  const uint8_t ttl = packet.empty() ? 64 : packet[packet.size() / 2];
  const uint8_t tos = packet.empty() ? 0 : packet[packet.size() - 1];
  const auto headers = MakeIpv4UdpHeaders(addrs, packet.size(), ttl, tos);
  const auto ip = std::span<const uint8_t>(headers).first<kIpv4HeaderSize>();
  const auto udp = std::span<const uint8_t>(headers).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
  FUZZ_CHECK(ParseRocePacketIpv4(ip, udp, packet, &view) == checked);
  if (packet.size() >= kIcrcSize) {
    const std::span<const uint8_t> covered = packet.first(packet.size() - kIcrcSize);
    FUZZ_CHECK(ComputeIcrc(addrs, covered) == ComputeIcrcIpv4(ip, udp, covered));
  }

  std::vector<uint8_t> fixed(packet.begin(), packet.end());
  if (RewriteIcrc(addrs, fixed).ok()) {
    FUZZ_CHECK(ParseRocePacket(fixed, &addrs, &view) == unchecked);
  } else {
    FUZZ_CHECK(fixed.size() < kBthSize + kIcrcSize);
  }
  return 0;
}
