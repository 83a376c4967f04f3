// libFuzzer target: ParseRocePacket without the ICRC check, on arbitrary
// bytes (the path of a backend whose NIC checked the ICRC).
//
// Properties, beyond "no crash, no out-of-bounds read" (ASan/UBSan):
//   - the result is one of RoceParseResult, and DecodeRocePacket agrees;
//   - an accepted packet's payload lies inside the input;
//   - BuildRocePacket rebuilds an accepted packet into the same bytes,
//     except what the parser ignores (reserved bits, pad bytes, ICRC), and
//     the rebuilt packet parses, ICRC checked, to the same view.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "proto/fuzz/fuzz_check.h"
#include "proto/roce_packet.h"

namespace {

using namespace ::netfold::proto;  // NOLINT: a fuzz target, not library code

constexpr IcrcAddresses kAddrs{
    .src_ip = 0x0A000001, .dst_ip = 0x0A000002, .src_port = 49152, .dst_port = kRoceUdpPort};

void CheckRebuild(std::span<const uint8_t> input, const RocePacketView& view) {
  const BthOpcode op = view.bth.opcode;
  const RocePacketSpec spec{view.bth, view.deth, view.aeth, view.imm};
  std::vector<uint8_t> rebuilt(input.size());
  const absl::StatusOr<size_t> n = BuildRocePacket(spec, view.payload, kAddrs, rebuilt);
  FUZZ_CHECK(n.ok());
  FUZZ_CHECK(*n == input.size());

  // Bytes the parser ignores: resv6 (byte 4, bits 5..0), resv7 (byte 8,
  // bits 6..0), the DETH reserved byte, the pad bytes and the ICRC.
  std::vector<uint8_t> expected(input.begin(), input.end());
  expected[4] &= 0xC0;
  expected[8] &= 0x80;
  if (OpcodeHasDeth(op)) expected[kBthSize + 4] = 0;
  const size_t pad_begin = RoceHeadersSize(op) + view.payload.size();
  for (size_t i = pad_begin; i < expected.size(); ++i) expected[i] = 0;
  std::vector<uint8_t> got = rebuilt;
  for (size_t i = pad_begin; i < got.size(); ++i) got[i] = 0;
  FUZZ_CHECK(got == expected);

  RocePacketView again;
  FUZZ_CHECK(ParseRocePacket(rebuilt, &kAddrs, &again) == RoceParseResult::kOk);
  FUZZ_CHECK(again.bth == view.bth);
  FUZZ_CHECK(again.deth == view.deth);
  FUZZ_CHECK(again.aeth == view.aeth);
  FUZZ_CHECK(again.imm == view.imm);
  FUZZ_CHECK(again.payload.size() == view.payload.size());
  FUZZ_CHECK(view.payload.empty() ||
             std::memcmp(again.payload.data(), view.payload.data(), view.payload.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  RocePacketView view;
  const RoceParseResult result = ParseRocePacket(input, nullptr, &view);
  FUZZ_CHECK(static_cast<size_t>(result) < kNumRoceParseResults);
  FUZZ_CHECK(DecodeRocePacket(input, nullptr).ok() == (result == RoceParseResult::kOk));
  if (result != RoceParseResult::kOk) return 0;
  FUZZ_CHECK(view.payload.empty() ||
             (view.payload.data() >= data &&
              view.payload.data() + view.payload.size() <= data + size));
  if (size <= kMaxRoceUdpPayload) CheckRebuild(input, view);
  return 0;
}
