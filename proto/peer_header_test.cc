// Tests of the host algorithms' peer header: golden bytes written by hand
// from the layout table (proto/peer_header.h, docs/algorithms.md), round
// trips, and the abort body.
#include "proto/peer_header.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/data_type.h"
#include "proto/proto_test_util.h"
#include "proto/reduce_op.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::ToHex;

PeerHeader Data() {
  PeerHeader h;
  h.algorithm = 3;  // tree
  h.dtype = static_cast<uint8_t>(DataType::kFp32);
  h.op = static_cast<uint8_t>(ReduceOp::kSum);
  h.seq = 0x01020304;
  h.index = 5;
  h.offset = 0x1122334455667788ull;
  h.count = 1000;
  return h;
}

TEST(PeerHeader, GoldenBytes) {
  std::vector<uint8_t> out(kPeerHeaderSize + 2, 0xEE);
  EncodePeerHeader(Data(), out.data());
  EXPECT_EQ(ToHex(std::span<const uint8_t>(out).first(kPeerHeaderSize)),
            "0101030b" "01000000"   // version, type data, algorithm tree, dtype fp32 (11); op sum (1), zero
            "04030201" "05000000"   // seq, index
            "8877665544332211"      // offset
            "e803000000000000");    // count
  EXPECT_EQ(out[kPeerHeaderSize], 0xEE);  // nothing written past the header
}

TEST(PeerHeader, RoundTrips) {
  PeerHeader h = Data();
  h.type = PeerMessageType::kAbort;
  h.count = ~0ull;
  uint8_t buf[kPeerHeaderSize];
  EncodePeerHeader(h, buf);
  EXPECT_EQ(DecodePeerHeader(buf), h);
}

TEST(PeerHeader, AbortCarriesCodeAndMessageCutToFit) {
  const std::vector<uint8_t> m = EncodePeerAbort(Data(), 14, "the switch went away", 40);
  ASSERT_EQ(m.size(), 40u);
  const PeerHeader h = DecodePeerHeader(m.data());
  EXPECT_EQ(h.type, PeerMessageType::kAbort);
  EXPECT_EQ(h.seq, Data().seq);
  EXPECT_EQ(ToHex(std::span<const uint8_t>(m).subspan(kPeerHeaderSize, 4)), "0e000000");
  uint32_t code = 0;
  std::string why;
  ASSERT_TRUE(DecodePeerAbortBody(std::span<const uint8_t>(m).subspan(kPeerHeaderSize), &code, &why));
  EXPECT_EQ(code, 14u);
  EXPECT_EQ(why, "the ");
}

TEST(PeerHeader, ShortAbortBodyIsRefused) {
  const uint8_t body[3] = {1, 2, 3};
  uint32_t code = 0;
  std::string why;
  EXPECT_FALSE(DecodePeerAbortBody(body, &code, &why));
}

}  // namespace
}  // namespace netfold::proto
