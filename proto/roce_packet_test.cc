// Tests of whole RoCEv2 packets: golden bytes of every opcode form, round
// trips, every rejection of the parser and of the builder, and the ICRC
// (what it covers, what it masks, that it catches every single-bit error).
#include "proto/roce_packet.h"

#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <zlib.h>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "proto/proto_test_util.h"
#include "proto/psn.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::FromHex;
using ::netfold::proto::testing::MessageContains;
using ::netfold::proto::testing::ToHex;

constexpr IcrcAddresses kAddrs{
    .src_ip = 0x0A000001, .dst_ip = 0x0A000002, .src_port = 49152, .dst_port = kRoceUdpPort};

std::vector<uint8_t> Iota(size_t n, uint8_t first = 0) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<uint8_t> Build(const RocePacketSpec& spec, std::span<const uint8_t> payload,
                           const IcrcAddresses& addrs = kAddrs) {
  std::vector<uint8_t> out(RocePacketSize(spec.bth.opcode, payload.size()) + 7, 0xEE);
  absl::StatusOr<size_t> n = BuildRocePacket(spec, payload, addrs, out);
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok()) return {};
  EXPECT_EQ(*n, RocePacketSize(spec.bth.opcode, payload.size()));
  out.resize(*n);
  return out;
}

RocePacketSpec Spec(BthOpcode op, uint32_t dest_qp, uint32_t psn) {
  RocePacketSpec spec;
  spec.bth.opcode = op;
  spec.bth.dest_qp = dest_qp;
  spec.bth.psn = psn;
  return spec;
}

// The packet without its ICRC, after checking the ICRC is the right one.
std::string HexWithoutIcrc(const std::vector<uint8_t>& packet) {
  if (packet.size() < kIcrcSize) return "short";
  std::span<const uint8_t> bytes(packet);
  EXPECT_EQ(LoadIcrc(bytes.last<4>()), ComputeIcrc(kAddrs, bytes.first(bytes.size() - 4)));
  return ToHex(bytes.first(bytes.size() - 4));
}

TEST(RocePacket, GoldenBytesOfEveryOpcodeForm) {
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendFirst, 0x300, 0xFFFFFE);
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(8))), "0000ffff0000030000fffffe0001020304050607");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendMiddle, 0x300, 0xFFFFFF);
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(4))), "0100ffff0000030000ffffff00010203");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendLast, 0x300, 0);
    s.bth.ack_req = true;
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(5, 1))),
              "0230ffff00000300800000000102030405000000");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendLastWithImmediate, 0x300, 1);
    s.bth.ack_req = true;
    s.imm = 0xDEADBEEF;
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(2, 0xA0))),
              "0320ffff0000030080000001deadbeefa0a10000");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 0x11, 2);
    s.bth.solicited_event = true;
    s.bth.pkey = 0x8001;
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(1, 0x55))), "04b080010000001100000002" "55000000");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 0x11, 3);
    EXPECT_EQ(HexWithoutIcrc(Build(s, {})), "0400ffff0000001100000003");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcSendOnlyWithImmediate, 0x11, 2);
    s.imm = 1;
    EXPECT_EQ(HexWithoutIcrc(Build(s, {})), "0500ffff000000110000000200000001");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcAcknowledge, 0x77, 0x10);
    s.aeth = MakeNak(0x10, NakCode::kPsnSequenceError);
    EXPECT_EQ(HexWithoutIcrc(Build(s, {})), "1100ffff000000770000001060000010");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kRcAcknowledge, 0x77, 0x123456);
    s.aeth = MakeAck(0xABCDEF);
    EXPECT_EQ(HexWithoutIcrc(Build(s, {})), "1100ffff00000077001234561fabcdef");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kUdSendOnly, 0xFFFFFF, 7);
    s.bth.pkey = 0x8003;
    s.deth = Deth{.qkey = 0x80010203, .src_qp = 0x102};
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(4, 9))),
              "6400800300ffffff000000078001020300000102090a0b0c");
  }
  {
    RocePacketSpec s = Spec(BthOpcode::kUdSendOnlyWithImmediate, 0x55, 8);
    s.deth = Deth{.qkey = 0x11111111, .src_qp = 0xFFFFFF};
    s.imm = 0xCAFEF00D;
    EXPECT_EQ(HexWithoutIcrc(Build(s, Iota(3, 1))),
              "6510ffff00000055000000081111111100ffffffcafef00d01020300");
  }
}

// One packet computed by scapy 2.5.0 (IP(src=10.0.0.1, dst=10.0.0.2, id=0,
// flags=DF) / UDP(sport=49152, dport=4791) / BTH(opcode=4, dqpn=0x123456,
// psn=0xabcdef, pkey=0x8001) / b"abcd"), ICRC included; the full set is in
// roce_interop_test.cc.
TEST(RocePacket, GoldenIcrcFromScapy) {
  RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 0x123456, 0xABCDEF);
  s.bth.pkey = 0x8001;
  const std::vector<uint8_t> payload = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(ToHex(Build(s, payload)), "040080010012345600abcdef61626364ab33372c");
  // scapy's headers of that packet; ours differ only in the UDP checksum
  // (0: none), which the ICRC masks.
  const std::vector<uint8_t> scapy_headers =
      FromHex("4500003000004000401126bb0a0000010a000002c00012b7001cead0");
  const auto ours = MakeIpv4UdpHeaders(kAddrs, 20);
  EXPECT_EQ(ToHex(std::span<const uint8_t>(ours).first(26)),
            ToHex(std::span<const uint8_t>(scapy_headers).first(26)));
  EXPECT_EQ(ours[26], 0);
  EXPECT_EQ(ours[27], 0);
}

TEST(RocePacket, RoundTripsEveryOpcodeAndPadCount) {
  const BthOpcode ops[] = {
      BthOpcode::kRcSendFirst,       BthOpcode::kRcSendMiddle,
      BthOpcode::kRcSendLast,        BthOpcode::kRcSendLastWithImmediate,
      BthOpcode::kRcSendOnly,        BthOpcode::kRcSendOnlyWithImmediate,
      BthOpcode::kRcAcknowledge,     BthOpcode::kUdSendOnly,
      BthOpcode::kUdSendOnlyWithImmediate,
  };
  int checked = 0;
  for (BthOpcode op : ops) {
    for (size_t size : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 1021, 4096}) {
      RocePacketSpec s = Spec(op, 0xABC000 + size, PsnAdd(0xFFFFF0, static_cast<int32_t>(size)));
      s.bth.solicited_event = size % 2 == 1;
      s.bth.mig_req = size % 3 == 1;
      s.bth.pkey = static_cast<uint16_t>(0x8000 | size);
      s.bth.fecn = size % 4 == 1;
      s.bth.becn = size % 5 == 1;
      s.bth.ack_req = size % 2 == 0;
      if (OpcodeHasDeth(op)) s.deth = Deth{.qkey = 0x80000000u + static_cast<uint32_t>(size), .src_qp = 0x00FF00};
      if (OpcodeHasAeth(op)) s.aeth = MakeRnrNak(static_cast<uint32_t>(size), 3);
      if (OpcodeHasImm(op)) s.imm = 0x12345678u ^ static_cast<uint32_t>(size);
      const std::vector<uint8_t> payload = Iota(size, static_cast<uint8_t>(size));
      if (!ValidateRocePacketSpec(s, size).ok()) continue;  // e.g. ACK with payload
      SCOPED_TRACE(absl::StrFormat("%s with %d bytes", BthOpcodeName(op), size));
      const std::vector<uint8_t> packet = Build(s, payload);
      ASSERT_EQ(packet.size() % 4, 0u);
      RocePacketView view;
      ASSERT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kOk);
      Bth expected = s.bth;
      expected.pad_count = RocePadCount(size);
      EXPECT_EQ(view.bth, expected);
      EXPECT_EQ(view.deth, s.deth);
      EXPECT_EQ(view.aeth, s.aeth);
      EXPECT_EQ(view.imm, s.imm);
      EXPECT_EQ(ToHex(view.payload), ToHex(payload));
      EXPECT_EQ(view.icrc, LoadIcrc(std::span<const uint8_t>(packet).last<4>()));
      // The view points into the packet, not into a copy.
      if (!view.payload.empty()) {
        EXPECT_EQ(view.payload.data(), packet.data() + RoceHeadersSize(op));
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 4 + 6 * 13 + 1);  // FIRST/MIDDLE: 4-byte multiples > 0
}

TEST(RocePacket, APayloadPartFromElsewhereGivesTheSameIcrcAsThePacketWhole) {
  RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 0x123, 77);
  const std::vector<uint8_t> payload = Iota(4072);
  const std::vector<uint8_t> whole = Build(s, payload);
  const size_t headers = RoceHeadersSize(s.bth.opcode);
  for (const auto& [at, len] : std::vector<std::pair<size_t, size_t>>{
           {40, 4032}, {0, 4072}, {40, 1}, {4071, 1}, {100, 0},
           // Headers of 128 bytes or fewer before the part go with the
           // pseudo-header in one CRC call, longer ones in two (icrc.cc).
           {116, 10}, {117, 10}}) {
    // The part is not in the packet: its place holds something else.
    std::vector<uint8_t> packet(4200, 0xEE);
    std::memcpy(packet.data() + headers, payload.data(), payload.size());
    std::memset(packet.data() + headers + at, 0x5A, len);
    const std::span<const uint8_t> part = std::span<const uint8_t>(payload).subspan(at, len);
    absl::StatusOr<size_t> n =
        FinishRocePacketAroundPart(s, payload.size(), kAddrs, packet, at, part);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, whole.size());
    // With the part in its place, the packet is the one built whole.
    std::memcpy(packet.data() + headers + at, part.data(), part.size());
    packet.resize(*n);
    EXPECT_EQ(ToHex(packet), ToHex(whole)) << "part of " << len << " at " << at;
  }
  std::vector<uint8_t> packet(4200);
  EXPECT_EQ(FinishRocePacketAroundPart(s, 100, kAddrs, packet, 90,
                                       std::span<const uint8_t>(payload).first(11))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RocePacket, InPlaceBuildEqualsCopyingBuild) {
  RocePacketSpec s = Spec(BthOpcode::kUdSendOnlyWithImmediate, 0xFFFFFF, 99);
  s.deth = Deth{.qkey = 5, .src_qp = 6};
  s.imm = 7;
  const std::vector<uint8_t> payload = Iota(37);
  const std::vector<uint8_t> copied = Build(s, payload);

  std::vector<uint8_t> buffer(2048, 0xEE);
  std::memcpy(buffer.data() + RoceHeadersSize(s.bth.opcode), payload.data(), payload.size());
  absl::StatusOr<size_t> n = FinishRocePacketInPlace(s, payload.size(), kAddrs, buffer);
  ASSERT_TRUE(n.ok()) << n.status();
  buffer.resize(*n);
  EXPECT_EQ(ToHex(buffer), ToHex(copied));

  // BuildRocePacket accepts a payload that overlaps its output.
  std::vector<uint8_t> overlap(2048, 0xEE);
  std::memcpy(overlap.data(), payload.data(), payload.size());
  n = BuildRocePacket(s, std::span<const uint8_t>(overlap).first(payload.size()), kAddrs,
                      overlap);
  ASSERT_TRUE(n.ok()) << n.status();
  overlap.resize(*n);
  EXPECT_EQ(ToHex(overlap), ToHex(copied));
}

TEST(RocePacket, BuilderRejectsInconsistentSpecs) {
  struct Case {
    std::string name;
    std::function<void(RocePacketSpec&)> mutate;
    size_t payload_size;
  };
  const std::vector<Case> cases = {
      {"unsupported opcode", [](RocePacketSpec& s) { s.bth.opcode = static_cast<BthOpcode>(0x0A); }, 4},
      {"transport version", [](RocePacketSpec& s) { s.bth.transport_version = 1; }, 4},
      {"wide dest QP", [](RocePacketSpec& s) { s.bth.dest_qp = 0x1000000; }, 4},
      {"wide PSN", [](RocePacketSpec& s) { s.bth.psn = 0x1000000; }, 4},
      {"RC with DETH", [](RocePacketSpec& s) { s.deth = Deth{}; }, 4},
      {"RC with AETH", [](RocePacketSpec& s) { s.aeth = Aeth{}; }, 4},
      {"SEND_ONLY with imm", [](RocePacketSpec& s) { s.imm = 1; }, 4},
      {"UD without DETH", [](RocePacketSpec& s) { s.bth.opcode = BthOpcode::kUdSendOnly; }, 4},
      {"UD with wide source QP",
       [](RocePacketSpec& s) {
         s.bth.opcode = BthOpcode::kUdSendOnly;
         s.deth = Deth{.qkey = 1, .src_qp = 0x1000000};
       },
       4},
      {"WITH_IMMEDIATE without imm",
       [](RocePacketSpec& s) { s.bth.opcode = BthOpcode::kRcSendOnlyWithImmediate; }, 4},
      {"ACK without AETH", [](RocePacketSpec& s) { s.bth.opcode = BthOpcode::kRcAcknowledge; }, 0},
      {"ACK with payload",
       [](RocePacketSpec& s) {
         s.bth.opcode = BthOpcode::kRcAcknowledge;
         s.aeth = MakeAck(1);
       },
       4},
      {"ACK with wide MSN",
       [](RocePacketSpec& s) {
         s.bth.opcode = BthOpcode::kRcAcknowledge;
         s.aeth = Aeth{.syndrome = 0, .msn = 0x1000000};
       },
       0},
      {"ACK with reserved syndrome",
       [](RocePacketSpec& s) {
         s.bth.opcode = BthOpcode::kRcAcknowledge;
         s.aeth = Aeth{.syndrome = 0x40, .msn = 0};
       },
       0},
      {"SEND_FIRST empty", [](RocePacketSpec& s) { s.bth.opcode = BthOpcode::kRcSendFirst; }, 0},
      {"SEND_MIDDLE unaligned",
       [](RocePacketSpec& s) { s.bth.opcode = BthOpcode::kRcSendMiddle; }, 6},
      {"larger than a datagram", [](RocePacketSpec&) {}, kMaxRoceUdpPayload},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 1, 1);
    c.mutate(s);
    EXPECT_EQ(ValidateRocePacketSpec(s, c.payload_size).code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<uint8_t> payload(c.payload_size);
    std::vector<uint8_t> out(70000);
    EXPECT_EQ(BuildRocePacket(s, payload, kAddrs, out).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(FinishRocePacketInPlace(s, c.payload_size, kAddrs, out).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // The largest payload that fits (with its pad) is accepted: 65488 bytes.
  const size_t largest = (kMaxRoceUdpPayload - kBthSize - kIcrcSize) & ~size_t{3};
  EXPECT_EQ(largest, 65488u);
  EXPECT_TRUE(ValidateRocePacketSpec(Spec(BthOpcode::kRcSendOnly, 1, 1), largest).ok());
  EXPECT_FALSE(ValidateRocePacketSpec(Spec(BthOpcode::kRcSendOnly, 1, 1), largest + 1).ok());
}

TEST(RocePacket, BuilderRejectsASmallBuffer) {
  const RocePacketSpec s = Spec(BthOpcode::kRcSendOnly, 1, 1);
  const std::vector<uint8_t> payload = Iota(5);
  std::vector<uint8_t> out(RocePacketSize(s.bth.opcode, payload.size()) - 1);
  EXPECT_EQ(out.size(), 23u);
  EXPECT_EQ(BuildRocePacket(s, payload, kAddrs, out).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(FinishRocePacketInPlace(s, payload.size(), kAddrs, out).status().code(),
            absl::StatusCode::kOutOfRange);
  out.push_back(0);
  EXPECT_TRUE(BuildRocePacket(s, payload, kAddrs, out).ok());
}

// A valid packet of each kind, to be broken by the cases below.
std::vector<uint8_t> ValidSendOnly(size_t payload_size) {
  return Build(Spec(BthOpcode::kRcSendOnly, 1, 1), Iota(payload_size));
}
std::vector<uint8_t> ValidAck() {
  RocePacketSpec s = Spec(BthOpcode::kRcAcknowledge, 1, 1);
  s.aeth = MakeAck(1);
  return Build(s, {});
}
std::vector<uint8_t> ValidFirst() { return Build(Spec(BthOpcode::kRcSendFirst, 1, 1), Iota(8)); }

TEST(RocePacket, ParserRejectsEveryMalformedPacket) {
  struct Case {
    std::string name;
    std::function<std::vector<uint8_t>()> make;
    RoceParseResult expected;
  };
  const std::vector<Case> cases = {
      {"empty", [] { return std::vector<uint8_t>(); }, RoceParseResult::kTruncated},
      {"BTH without ICRC", [] { return std::vector<uint8_t>(15, 0x04); },
       RoceParseResult::kTruncated},
      {"UD without room for DETH",
       [] {
         auto p = ValidSendOnly(0);
         p[0] = static_cast<uint8_t>(BthOpcode::kUdSendOnly);
         return p;  // 16 bytes: BTH + ICRC, DETH missing
       },
       RoceParseResult::kTruncated},
      {"ACK without room for AETH",
       [] {
         auto p = ValidSendOnly(0);
         p[0] = static_cast<uint8_t>(BthOpcode::kRcAcknowledge);
         return p;
       },
       RoceParseResult::kTruncated},
      {"transport version 1",
       [] {
         auto p = ValidSendOnly(4);
         p[1] |= 0x01;
         return p;
       },
       RoceParseResult::kBadTransportVersion},
      {"transport version 15",
       [] {
         auto p = ValidSendOnly(4);
         p[1] |= 0x0F;
         return p;
       },
       RoceParseResult::kBadTransportVersion},
      {"RDMA WRITE ONLY",
       [] {
         auto p = ValidSendOnly(4);
         p[0] = 0x0A;
         return p;
       },
       RoceParseResult::kUnknownOpcode},
      {"UC SEND ONLY",
       [] {
         auto p = ValidSendOnly(4);
         p[0] = 0x24;
         return p;
       },
       RoceParseResult::kUnknownOpcode},
      {"CNP",
       [] {
         auto p = ValidSendOnly(16);
         p[0] = 0x81;
         return p;
       },
       RoceParseResult::kUnknownOpcode},
      {"length not a multiple of 4",
       [] {
         auto p = ValidSendOnly(4);
         p.push_back(0);
         return p;
       },
       RoceParseResult::kBadLength},
      {"ACK with payload",
       [] {
         auto p = ValidAck();
         p.insert(p.begin() + 16, 4, 0);
         return p;
       },
       RoceParseResult::kBadLength},
      {"SEND_FIRST without payload",
       [] {
         auto p = ValidSendOnly(0);
         p[0] = static_cast<uint8_t>(BthOpcode::kRcSendFirst);
         return p;
       },
       RoceParseResult::kBadLength},
      {"SEND_MIDDLE without payload",
       [] {
         auto p = ValidSendOnly(0);
         p[0] = static_cast<uint8_t>(BthOpcode::kRcSendMiddle);
         return p;
       },
       RoceParseResult::kBadLength},
      {"SEND_FIRST with pad",
       [] {
         auto p = ValidFirst();
         p[1] |= 0x10;
         return p;
       },
       RoceParseResult::kBadPadCount},
      {"ACK with pad",
       [] {
         auto p = ValidAck();
         p[1] |= 0x20;
         return p;
       },
       RoceParseResult::kBadPadCount},
      {"pad without payload",
       [] {
         auto p = ValidSendOnly(0);
         p[1] |= 0x30;
         return p;
       },
       RoceParseResult::kBadPadCount},
      {"AETH reserved type",
       [] {
         auto p = ValidAck();
         p[12] = 0x40;
         return p;
       },
       RoceParseResult::kBadAeth},
      {"AETH bit 7",
       [] {
         auto p = ValidAck();
         p[12] = 0x9F;
         return p;
       },
       RoceParseResult::kBadAeth},
      {"AETH NAK code 5",
       [] {
         auto p = ValidAck();
         p[12] = 0x65;
         return p;
       },
       RoceParseResult::kBadAeth},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> packet = c.make();
    RocePacketView view;
    EXPECT_EQ(ParseRocePacket(packet, nullptr, &view), c.expected);
    // With a correct ICRC the same reason is found by the checking parser;
    // with a wrong one the ICRC is reported first.
    if (RewriteIcrc(kAddrs, packet).ok()) {
      EXPECT_EQ(ParseRocePacket(packet, &kAddrs, &view), c.expected);
      packet[packet.size() - 1] ^= 0x01;
      EXPECT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kBadIcrc);
    } else {
      EXPECT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kTruncated);
    }
    const absl::StatusOr<RocePacketView> decoded = DecodeRocePacket(c.make(), nullptr);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageContains(decoded.status(), RoceParseResultName(c.expected)))
        << decoded.status();
  }
}

TEST(RocePacket, ParseResultNamesAreDistinct) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kNumRoceParseResults; ++i) {
    const std::string_view name = RoceParseResultName(static_cast<RoceParseResult>(i));
    EXPECT_NE(name, "invalid");
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_EQ(RoceParseResultName(RoceParseResult::kOk), "ok");
  EXPECT_EQ(RoceParseResultName(RoceParseResult::kBadIcrc), "bad_icrc");
  EXPECT_EQ(RoceParseResultName(static_cast<RoceParseResult>(kNumRoceParseResults)), "invalid");
}

TEST(RocePacket, DecodeReportsIcrcErrorsAsDataLoss) {
  std::vector<uint8_t> packet = ValidSendOnly(9);
  EXPECT_TRUE(DecodeRocePacket(packet, &kAddrs).ok());
  packet[13] ^= 0x40;
  const absl::StatusOr<RocePacketView> decoded = DecodeRocePacket(packet, &kAddrs);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(MessageContains(decoded.status(), "bad_icrc"));
  // Without an ICRC check the corrupted payload is accepted as it is.
  EXPECT_TRUE(DecodeRocePacket(packet, nullptr).ok());
}

// The ICRC as the specification defines it, built without proto/icrc.cc:
// zlib's CRC-32 over 8 bytes of 0xFF (the LRH), the IPv4 and UDP headers
// with TOS, TTL and both checksums set to 0xFF, then the packet with BTH
// byte 4 set to 0xFF.
uint32_t ReferenceIcrc(const IcrcAddresses& a, std::vector<uint8_t> covered) {
  const size_t udp_length = 8 + covered.size() + kIcrcSize;
  std::vector<uint8_t> bytes(8, 0xFF);
  const uint8_t ip[20] = {0x45,
                          0xFF,
                          static_cast<uint8_t>((20 + udp_length) >> 8),
                          static_cast<uint8_t>(20 + udp_length),
                          static_cast<uint8_t>(a.ip_id >> 8),
                          static_cast<uint8_t>(a.ip_id),
                          0x40,
                          0x00,
                          0xFF,
                          17,
                          0xFF,
                          0xFF,
                          static_cast<uint8_t>(a.src_ip >> 24),
                          static_cast<uint8_t>(a.src_ip >> 16),
                          static_cast<uint8_t>(a.src_ip >> 8),
                          static_cast<uint8_t>(a.src_ip),
                          static_cast<uint8_t>(a.dst_ip >> 24),
                          static_cast<uint8_t>(a.dst_ip >> 16),
                          static_cast<uint8_t>(a.dst_ip >> 8),
                          static_cast<uint8_t>(a.dst_ip)};
  const uint8_t udp[8] = {static_cast<uint8_t>(a.src_port >> 8), static_cast<uint8_t>(a.src_port),
                          static_cast<uint8_t>(a.dst_port >> 8), static_cast<uint8_t>(a.dst_port),
                          static_cast<uint8_t>(udp_length >> 8),  static_cast<uint8_t>(udp_length),
                          0xFF,                                   0xFF};
  bytes.insert(bytes.end(), ip, ip + 20);
  bytes.insert(bytes.end(), udp, udp + 8);
  if (covered.size() > 4) covered[4] = 0xFF;
  bytes.insert(bytes.end(), covered.begin(), covered.end());
  return static_cast<uint32_t>(crc32_z(0, bytes.data(), bytes.size()));
}

// Every size from nothing to past the 128-byte head and the 256-byte step
// of icrc.cc's cut, sizes around whole packets, and every way a part may
// lie in the packet (at the edges of the head and of the packet, empty,
// around the step, reaching the end), against the reference.
TEST(Icrc, EveryWayOfComputingItMatchesTheSpecification) {
  const IcrcAddresses a{.src_ip = 0x0A000001, .dst_ip = 0x0A000102, .src_port = 0xC123,
                        .ip_id = 0x1234};
  std::vector<size_t> sizes(301);
  std::iota(sizes.begin(), sizes.end(), size_t{0});
  for (size_t big : {511, 512, 513, 1024, 4084, 4092, 4096, 4353}) sizes.push_back(big);
  int checked = 0;
  for (size_t size : sizes) {
    std::vector<uint8_t> covered(size);
    for (size_t i = 0; i < size; ++i) covered[i] = static_cast<uint8_t>(i * 37 + 11);
    ASSERT_EQ(ComputeIcrc(a, covered), ReferenceIcrc(a, covered)) << size;
    ++checked;
    for (size_t at : {size_t{5}, size_t{6}, size_t{11}, size_t{12}, size_t{127}, size_t{128},
                      size_t{129}, size}) {
      if (at <= 4 || at > size) continue;
      for (size_t len : {size_t{0}, size_t{1}, size_t{17}, size_t{255}, size_t{256}, size_t{257},
                         size - at}) {
        if (len > size - at) continue;
        // The part's bytes elsewhere; their place in the packet holds others.
        const std::vector<uint8_t> part(covered.begin() + static_cast<std::ptrdiff_t>(at),
                                        covered.begin() + static_cast<std::ptrdiff_t>(at + len));
        std::vector<uint8_t> holey = covered;
        std::fill_n(holey.begin() + static_cast<std::ptrdiff_t>(at), len, uint8_t{0xA5});
        ASSERT_EQ(ComputeIcrcWithPart(a, holey, at, part), ReferenceIcrc(a, covered))
            << "size " << size << ", part of " << len << " at " << at;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(Icrc, CatchesEverySingleBitErrorOutsideTheMaskedByte) {
  RocePacketSpec s = Spec(BthOpcode::kUdSendOnlyWithImmediate, 0x123, 0x456);
  s.deth = Deth{.qkey = 1, .src_qp = 2};
  s.imm = 3;
  std::vector<uint8_t> packet = Build(s, Iota(61));
  RocePacketView view;
  ASSERT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kOk);
  for (size_t byte = 0; byte < packet.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      packet[byte] ^= static_cast<uint8_t>(1 << bit);
      const RoceParseResult r = ParseRocePacket(packet, &kAddrs, &view);
      if (byte == kBthFecnByteOffset) {
        EXPECT_EQ(r, RoceParseResult::kOk) << "FECN/BECN/resv6 are masked";
      } else {
        EXPECT_EQ(r, RoceParseResult::kBadIcrc) << "byte " << byte << " bit " << bit;
      }
      packet[byte] ^= static_cast<uint8_t>(1 << bit);
    }
  }
}

// A NIC's packet (identification chosen by the sender, as rdma_rxe does)
// received through a kernel socket: the identification that explains the
// ICRC is found, for every packet size and identification tried; the
// packet without that identification (a different one) is not confused.
TEST(Icrc, SolvesTheIdentificationANicPutInItsHeader) {
  for (size_t payload : {0, 1, 61, 256, 1024, 4096}) {
    const std::vector<uint8_t> packet = ValidSendOnly(payload);
    const std::span<const uint8_t> covered =
        std::span<const uint8_t>(packet).first(packet.size() - kIcrcSize);
    EXPECT_EQ(SolveIpv4Identification(kAddrs, covered, ComputeIcrc(kAddrs, covered)), 0u);
    for (uint16_t id : {0x0001, 0x8000, 0x1234, 0xBEEF, 0xFFFF}) {
      auto headers = MakeIpv4UdpHeaders(kAddrs, packet.size(), 64, 0);
      headers[4] = static_cast<uint8_t>(id >> 8);
      headers[5] = static_cast<uint8_t>(id);
      const auto ip = std::span<const uint8_t>(headers).first<kIpv4HeaderSize>();
      const auto udp = std::span<const uint8_t>(headers).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
      const uint32_t icrc = ComputeIcrcIpv4(ip, udp, covered);
      ASSERT_NE(icrc, ComputeIcrc(kAddrs, covered));
      std::optional<uint16_t> solved = SolveIpv4Identification(kAddrs, covered, icrc);
      ASSERT_TRUE(solved.has_value()) << "payload " << payload << " id " << id;
      EXPECT_EQ(*solved, id) << "payload " << payload;
    }
  }
}

// The table keeps several sizes at once: sizes that alternate (a full chunk,
// the last one, ACKs) and more sizes than it holds give the same
// differences as the one-shot function, for identifications below and above
// its segment range; FindSegment finds exactly the segment identifications.
TEST(Icrc, TheIdentificationTableServesManySizesAndFindsSegments) {
  IcrcIdentificationTable table;
  for (int round = 0; round < 3; ++round) {
    for (size_t size : {4032u, 16u, 4033u, 100u, 12u, 2000u, 1u, 3000u, 4096u, 40u, 77u}) {
      for (uint16_t id : {0, 1, 2, 31, 63, 64, 0x1234, 0xFFFF}) {
        ASSERT_EQ(table.Difference(size, id), IcrcIdentificationDifference(size, id))
            << "size " << size << " id " << id;
      }
      for (uint16_t id : {0, 1, 17, 63}) {
        EXPECT_EQ(table.FindSegment(size, IcrcIdentificationDifference(size, id)), id);
      }
      EXPECT_FALSE(table.FindSegment(size, IcrcIdentificationDifference(size, 64)).has_value());
      EXPECT_FALSE(table.FindSegment(size, IcrcIdentificationDifference(size, 0xBEEF)).has_value());
    }
  }
}

// The segments of a UDP GSO send leave with identifications 0, 1, 2, ...:
// the ICRC over the real header of segment i is the canonical ICRC with
// addrs.ip_id = i, which is the canonical ICRC of identification 0 XOR the
// difference i makes; the cached table agrees with the one-shot function.
TEST(Icrc, AnIdentificationChangesTheIcrcByItsDifferenceAlone) {
  IcrcIdentificationTable table;
  for (size_t payload : {0, 61, 1024, 4032}) {
    const std::vector<uint8_t> packet = ValidSendOnly(payload);
    const std::span<const uint8_t> covered =
        std::span<const uint8_t>(packet).first(packet.size() - kIcrcSize);
    EXPECT_EQ(IcrcIdentificationDifference(covered.size(), 0), 0u);
    for (uint16_t id : {1, 2, 3, 63, 0x1234, 0xFFFF}) {
      IcrcAddresses with_id = kAddrs;
      with_id.ip_id = id;
      auto headers = MakeIpv4UdpHeaders(kAddrs, packet.size(), 64, 0);
      headers[4] = static_cast<uint8_t>(id >> 8);
      headers[5] = static_cast<uint8_t>(id);
      const auto ip = std::span<const uint8_t>(headers).first<kIpv4HeaderSize>();
      const auto udp = std::span<const uint8_t>(headers).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
      const uint32_t real = ComputeIcrcIpv4(ip, udp, covered);
      EXPECT_EQ(ComputeIcrc(with_id, covered), real) << payload << " " << id;
      EXPECT_EQ(ComputeIcrc(kAddrs, covered) ^ IcrcIdentificationDifference(covered.size(), id),
                real);
      EXPECT_EQ(table.Difference(covered.size(), id),
                IcrcIdentificationDifference(covered.size(), id));
      // A packet built for identification `id` parses with it, not with 0.
      std::vector<uint8_t> segment = packet;
      StoreIcrc(real, std::span<uint8_t>(segment).last<kIcrcSize>());
      RocePacketView view;
      EXPECT_EQ(ParseRocePacket(segment, &with_id, &view), RoceParseResult::kOk);
      EXPECT_EQ(ParseRocePacket(segment, &kAddrs, &view), RoceParseResult::kBadIcrc);
    }
  }
}

TEST(Icrc, MostCorruptionsHaveNoIdentificationThatExplainsThem) {
  const std::vector<uint8_t> packet = ValidSendOnly(256);
  const std::span<const uint8_t> covered =
      std::span<const uint8_t>(packet).first(packet.size() - kIcrcSize);
  const uint32_t icrc = ComputeIcrc(kAddrs, covered);
  // Single-bit ICRC errors: a 16-dimensional space of differences cannot
  // hold 32 independent bits, and these land outside it almost always.
  int explained = 0;
  for (int bit = 0; bit < 32; ++bit) {
    if (SolveIpv4Identification(kAddrs, covered, icrc ^ (1u << bit)).has_value()) ++explained;
  }
  EXPECT_LE(explained, 16);
  // Random ICRC values: about 1 in 65536 is explained.
  std::mt19937 rng(7);
  int random_explained = 0;
  for (int i = 0; i < 20000; ++i) {
    if (SolveIpv4Identification(kAddrs, covered, static_cast<uint32_t>(rng())).has_value()) {
      ++random_explained;
    }
  }
  EXPECT_LE(random_explained, 3);
}

TEST(Icrc, CoversAddressesAndPortsButNotTtlTosOrChecksums) {
  const std::vector<uint8_t> packet = ValidSendOnly(20);
  RocePacketView view;
  ASSERT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kOk);
  for (int field = 0; field < 4; ++field) {
    IcrcAddresses other = kAddrs;
    if (field == 0) other.src_ip ^= 1;
    if (field == 1) other.dst_ip ^= 0x100;
    if (field == 2) other.src_port ^= 0x8000;
    if (field == 3) other.dst_port ^= 2;
    EXPECT_EQ(ParseRocePacket(packet, &other, &view), RoceParseResult::kBadIcrc) << field;
  }

  // Real headers: TTL, TOS and both checksums are masked ...
  const std::span<const uint8_t> covered = std::span<const uint8_t>(packet).first(packet.size() - 4);
  const uint32_t icrc = ComputeIcrc(kAddrs, covered);
  for (uint8_t ttl : {1, 64, 255}) {
    for (uint8_t tos : {0x00, 0x03, 0xB8}) {
      auto headers = MakeIpv4UdpHeaders(kAddrs, packet.size(), ttl, tos);
      headers[26] = 0x12;  // a UDP checksum
      const auto ip = std::span<const uint8_t>(headers).first<kIpv4HeaderSize>();
      const auto udp = std::span<const uint8_t>(headers).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
      EXPECT_EQ(ComputeIcrcIpv4(ip, udp, covered), icrc);
      EXPECT_EQ(ParseRocePacketIpv4(ip, udp, packet, &view), RoceParseResult::kOk);
    }
  }
  // ... every other byte of them is covered (identification, flags, lengths,
  // protocol, addresses, ports).
  const auto headers = MakeIpv4UdpHeaders(kAddrs, packet.size());
  const std::set<size_t> masked = {1, 8, 10, 11, 26, 27};
  for (size_t i = 0; i < headers.size(); ++i) {
    auto changed = headers;
    changed[i] ^= 0x04;
    const auto ip = std::span<const uint8_t>(changed).first<kIpv4HeaderSize>();
    const auto udp = std::span<const uint8_t>(changed).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
    EXPECT_EQ(ComputeIcrcIpv4(ip, udp, covered) == icrc, masked.count(i) == 1) << "byte " << i;
  }
}

TEST(Icrc, WireByteOrderIsLeastSignificantFirst) {
  uint8_t bytes[4];
  StoreIcrc(0x11223344, bytes);
  EXPECT_EQ(ToHex(bytes), "44332211");
  EXPECT_EQ(LoadIcrc(bytes), 0x11223344u);
}

TEST(Icrc, RewriteAfterEditingAStoredPacket) {
  std::vector<uint8_t> packet = ValidSendOnly(8);
  packet[8] |= 0x80;  // set AckReq for the retransmission
  RocePacketView view;
  EXPECT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kBadIcrc);
  ASSERT_TRUE(RewriteIcrc(kAddrs, packet).ok());
  ASSERT_EQ(ParseRocePacket(packet, &kAddrs, &view), RoceParseResult::kOk);
  EXPECT_TRUE(view.bth.ack_req);
  std::vector<uint8_t> tiny(15);
  EXPECT_EQ(RewriteIcrc(kAddrs, tiny).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace netfold::proto
