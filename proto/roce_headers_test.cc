// Tests of the big-endian field types and of the single RoCEv2 headers:
// golden bytes for BTH, DETH, AETH and ImmDt, reserved bits, opcode
// properties and AETH syndromes.
#include "proto/roce_headers.h"

#include <cstring>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "proto/big_endian.h"
#include "proto/proto_test_util.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::FromHex;
using ::netfold::proto::testing::ToHex;

template <typename Wire>
std::string WireHex(const Wire& wire) {
  uint8_t bytes[sizeof(Wire)];
  std::memcpy(bytes, &wire, sizeof(Wire));
  return ToHex(bytes);
}

template <typename Wire>
Wire WireFromHex(std::string_view hex) {
  const std::vector<uint8_t> bytes = FromHex(hex);
  Wire wire;
  EXPECT_EQ(bytes.size(), sizeof(Wire));
  std::memcpy(&wire, bytes.data(), sizeof(Wire));
  return wire;
}

TEST(BigEndian, FieldsStoreMostSignificantByteFirst) {
  Be16 b16;
  b16.set(0x1234);
  EXPECT_EQ(ToHex(b16.bytes), "1234");
  EXPECT_EQ(b16.get(), 0x1234);
  Be24 b24;
  b24.set(0xABCDEF);
  EXPECT_EQ(ToHex(b24.bytes), "abcdef");
  EXPECT_EQ(b24.get(), 0xABCDEFu);
  b24.set(0x12ABCDEF);  // keeps the low 24 bits
  EXPECT_EQ(b24.get(), 0xABCDEFu);
  Be32 b32;
  b32.set(0xDEADBEEF);
  EXPECT_EQ(ToHex(b32.bytes), "deadbeef");
  EXPECT_EQ(b32.get(), 0xDEADBEEFu);
  Be64 b64;
  b64.set(0x0102030405060708ull);
  EXPECT_EQ(ToHex(b64.bytes), "0102030405060708");
  EXPECT_EQ(b64.get(), 0x0102030405060708ull);

  uint8_t raw[8] = {};
  StoreBigEndian<uint32_t>(raw + 1, 0xA1B2C3D4);
  EXPECT_EQ(ToHex(raw), "00a1b2c3d4000000");
  EXPECT_EQ(LoadBigEndian<uint32_t>(raw + 1), 0xA1B2C3D4u);
  EXPECT_EQ(LoadBigEndian<uint16_t>(raw + 2), 0xB2C3u);
}

TEST(Bth, GoldenBytes) {
  Bth bth;  // defaults: RC SEND_ONLY, P_Key 0xFFFF, everything else 0
  EXPECT_EQ(WireHex(EncodeBth(bth)), "0400ffff0000000000000000");

  bth.opcode = BthOpcode::kRcSendOnly;
  bth.solicited_event = true;
  bth.pad_count = 3;
  bth.pkey = 0x8001;
  bth.fecn = true;
  bth.dest_qp = 0xABCDEF;
  bth.ack_req = true;
  bth.psn = 0x123456;
  EXPECT_EQ(WireHex(EncodeBth(bth)), "04b0800180abcdef80123456");
  EXPECT_EQ(DecodeBth(EncodeBth(bth)), bth);

  Bth other;
  other.opcode = BthOpcode::kUdSendOnlyWithImmediate;
  other.mig_req = true;
  other.pad_count = 1;
  other.transport_version = 0xF;
  other.pkey = 0x7FFF;
  other.becn = true;
  other.dest_qp = 0xFFFFFF;
  other.psn = 0xFFFFFF;
  EXPECT_EQ(WireHex(EncodeBth(other)), "655f7fff40ffffff00ffffff");
  EXPECT_EQ(DecodeBth(EncodeBth(other)), other);
}

TEST(Bth, ReservedBitsAreIgnoredOnDecodeAndZeroOnEncode) {
  // resv6 = 0x3F and resv7 = 0x7F set, nothing else.
  const Bth bth = DecodeBth(WireFromHex<BthWire>("1100ffff3f0000017f000005"));
  EXPECT_EQ(bth.opcode, BthOpcode::kRcAcknowledge);
  EXPECT_FALSE(bth.fecn);
  EXPECT_FALSE(bth.becn);
  EXPECT_FALSE(bth.ack_req);
  EXPECT_EQ(bth.dest_qp, 1u);
  EXPECT_EQ(bth.psn, 5u);
  EXPECT_EQ(WireHex(EncodeBth(bth)), "1100ffff0000000100000005");
}

TEST(Bth, OverWideValuesAreTruncated) {
  Bth bth;
  bth.dest_qp = 0x01000002;
  bth.psn = 0xFF000003;
  bth.pad_count = 7;
  bth.transport_version = 0x1F;
  const Bth back = DecodeBth(EncodeBth(bth));
  EXPECT_EQ(back.dest_qp, 2u);
  EXPECT_EQ(back.psn, 3u);
  EXPECT_EQ(back.pad_count, 3);
  EXPECT_EQ(back.transport_version, 0xF);
}

TEST(Deth, GoldenBytes) {
  const Deth deth{.qkey = 0x80010203, .src_qp = 0x000102};
  EXPECT_EQ(WireHex(EncodeDeth(deth)), "8001020300000102");
  EXPECT_EQ(DecodeDeth(EncodeDeth(deth)), deth);
  // The reserved byte is ignored.
  EXPECT_EQ(DecodeDeth(WireFromHex<DethWire>("11223344ffabcdef")),
            (Deth{.qkey = 0x11223344, .src_qp = 0xABCDEF}));
}

TEST(Aeth, GoldenBytes) {
  EXPECT_EQ(WireHex(EncodeAeth(Aeth{})), "1f000000");
  EXPECT_EQ(WireHex(EncodeAeth(MakeAck(5, 3))), "03000005");
  EXPECT_EQ(WireHex(EncodeAeth(MakeAck(0x123456))), "1f123456");
  EXPECT_EQ(WireHex(EncodeAeth(MakeRnrNak(1, 0x0E))), "2e000001");
  EXPECT_EQ(WireHex(EncodeAeth(MakeNak(0x123456, NakCode::kPsnSequenceError))), "60123456");
  EXPECT_EQ(WireHex(EncodeAeth(MakeNak(7, NakCode::kInvalidRequest))), "61000007");
  EXPECT_EQ(WireHex(EncodeAeth(MakeNak(7, NakCode::kRemoteAccessError))), "62000007");
  EXPECT_EQ(WireHex(EncodeAeth(MakeNak(7, NakCode::kRemoteOperationalError))), "63000007");
  EXPECT_EQ(WireHex(EncodeAeth(MakeNak(0xFFFFFF, NakCode::kInvalidRdRequest))), "64ffffff");
  const Aeth aeth = DecodeAeth(WireFromHex<AethWire>("63abcdef"));
  EXPECT_EQ(GetAethType(aeth), AethType::kNak);
  EXPECT_EQ(static_cast<NakCode>(GetAethValue(aeth)), NakCode::kRemoteOperationalError);
  EXPECT_EQ(aeth.msn, 0xABCDEFu);
}

TEST(Aeth, SyndromeTypesAndValidity) {
  EXPECT_EQ(GetAethType(MakeAck(0)), AethType::kAck);
  EXPECT_EQ(GetAethValue(MakeAck(0)), kAethUnlimitedCredits);
  EXPECT_EQ(GetAethType(MakeRnrNak(0, 31)), AethType::kRnrNak);
  EXPECT_EQ(GetAethValue(MakeRnrNak(0, 31)), 31);
  EXPECT_EQ(GetAethType(MakeNak(0, NakCode::kInvalidRequest)), AethType::kNak);
  EXPECT_EQ(MakeAck(0x1000001).msn, 1u);

  struct Case {
    uint8_t syndrome;
    bool valid;
  };
  const Case cases[] = {
      {0x00, true},  {0x1F, true},  {0x20, true},  {0x3F, true},
      {0x40, false}, {0x5F, false},  // reserved type
      {0x60, true},  {0x64, true},  {0x65, false}, {0x7F, false},  // NAK codes 5..31
      {0x80, false}, {0x9F, false}, {0xE0, false}, {0xFF, false},  // bit 7
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsValidAethSyndrome(c.syndrome), c.valid) << std::hex << int{c.syndrome};
  }
  EXPECT_EQ(AethTypeName(AethType::kRnrNak), "rnr_nak");
  EXPECT_EQ(NakCodeName(NakCode::kPsnSequenceError), "psn_sequence_error");
  EXPECT_EQ(NakCodeName(static_cast<NakCode>(9)), "unknown");
}

TEST(ImmDt, GoldenBytes) {
  EXPECT_EQ(WireHex(EncodeImmDt(0xDEADBEEF)), "deadbeef");
  EXPECT_EQ(DecodeImmDt(WireFromHex<ImmDtWire>("01020304")), 0x01020304u);
}

TEST(BthOpcode, PropertiesOfEveryOpcode) {
  struct Case {
    BthOpcode op;
    uint8_t code;
    std::string_view name;
    bool rc, ud, first, middle, last, only, deth, aeth, imm;
    size_t headers;
  };
  const Case cases[] = {
      {BthOpcode::kRcSendFirst, 0x00, "RC_SEND_FIRST", true, false, true, false, false, false,
       false, false, false, 12},
      {BthOpcode::kRcSendMiddle, 0x01, "RC_SEND_MIDDLE", true, false, false, true, false, false,
       false, false, false, 12},
      {BthOpcode::kRcSendLast, 0x02, "RC_SEND_LAST", true, false, false, false, true, false,
       false, false, false, 12},
      {BthOpcode::kRcSendLastWithImmediate, 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", true, false,
       false, false, true, false, false, false, true, 16},
      {BthOpcode::kRcSendOnly, 0x04, "RC_SEND_ONLY", true, false, false, false, false, true,
       false, false, false, 12},
      {BthOpcode::kRcSendOnlyWithImmediate, 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", true, false,
       false, false, false, true, false, false, true, 16},
      {BthOpcode::kRcAcknowledge, 0x11, "RC_ACKNOWLEDGE", true, false, false, false, false,
       false, false, true, false, 16},
      {BthOpcode::kUdSendOnly, 0x64, "UD_SEND_ONLY", false, true, false, false, false, true,
       true, false, false, 20},
      {BthOpcode::kUdSendOnlyWithImmediate, 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", false, true,
       false, false, false, true, true, false, true, 24},
  };
  int supported = 0;
  for (int code = 0; code < 256; ++code) supported += IsSupportedBthOpcode(code) ? 1 : 0;
  EXPECT_EQ(supported, 9);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(static_cast<uint8_t>(c.op), c.code);
    EXPECT_TRUE(IsSupportedBthOpcode(c.code));
    EXPECT_EQ(BthOpcodeName(c.op), c.name);
    EXPECT_EQ(OpcodeIsRc(c.op), c.rc);
    EXPECT_EQ(OpcodeIsUd(c.op), c.ud);
    EXPECT_EQ(OpcodeIsFirst(c.op), c.first);
    EXPECT_EQ(OpcodeIsMiddle(c.op), c.middle);
    EXPECT_EQ(OpcodeIsLast(c.op), c.last);
    EXPECT_EQ(OpcodeIsOnly(c.op), c.only);
    EXPECT_EQ(OpcodeIsSend(c.op), c.op != BthOpcode::kRcAcknowledge);
    EXPECT_EQ(OpcodeHasDeth(c.op), c.deth);
    EXPECT_EQ(OpcodeHasAeth(c.op), c.aeth);
    EXPECT_EQ(OpcodeHasImm(c.op), c.imm);
    EXPECT_EQ(RoceHeadersSize(c.op), c.headers);
  }
  // RDMA WRITE ONLY, UC SEND ONLY, CNP: not ours.
  for (uint8_t code : {0x0A, 0x24, 0x81, 0x12, 0x66, 0x06}) {
    EXPECT_FALSE(IsSupportedBthOpcode(code)) << int{code};
    EXPECT_EQ(RoceHeadersSize(static_cast<BthOpcode>(code)), 0u);
    EXPECT_EQ(BthOpcodeName(static_cast<BthOpcode>(code)), "UNKNOWN");
    EXPECT_FALSE(OpcodeIsSend(static_cast<BthOpcode>(code)));
  }
}

}  // namespace
}  // namespace netfold::proto
