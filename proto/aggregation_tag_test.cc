// Tests of the integrity tag: a round trip, every flipped bit of a tagged
// message refused, another key refused, the two-buffer form equal to the
// one-buffer form, and the RFC 7693 keyed BLAKE2b vector pinning the
// construction (so a change of library or of output size is seen).
#include "proto/aggregation_tag.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "proto/proto_test_util.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::ToHex;

AggregationKey CountingKey() {
  AggregationKey key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  return key;
}

std::vector<uint8_t> TaggedMessage(const AggregationKey& key) {
  AggregationHeader h;
  h.type = AggregationMessageType::kResult;
  h.collective = CollectiveType::kAllreduce;
  h.dtype = DataType::kInt32;
  h.op = ReduceOp::kSum;
  h.has_data = true;
  h.has_tag = true;
  h.tree_id = 2;
  h.group_id = 5;
  h.epoch = 1;
  h.count = 4;
  h.seq = 17;
  const int32_t values[4] = {1, -2, 3, 1 << 30};
  std::vector<uint8_t> m(kAggregationHeaderSize + sizeof(values) + kAggregationTagSize);
  auto n = EncodeAggregationMessage(
      h, {reinterpret_cast<const uint8_t*>(values), sizeof(values)}, m);
  EXPECT_TRUE(n.ok()) << n.status();
  auto tagged = AppendAggregationTag(key, m, *n);
  EXPECT_TRUE(tagged.ok()) << tagged.status();
  EXPECT_EQ(*tagged, m.size());
  return m;
}

TEST(AggregationTag, RoundTrip) {
  const AggregationKey key = NewAggregationKey();
  const std::vector<uint8_t> m = TaggedMessage(key);
  AggregationHeader h;
  std::span<const uint8_t> elements;
  ASSERT_EQ(ParseAggregationMessage(m, &h, &elements), AggregationParseResult::kOk);
  EXPECT_TRUE(h.has_tag);
  EXPECT_EQ(elements.size(), 16u);  // the tag is not an element
  EXPECT_TRUE(VerifyAggregationTag(key, m));
}

TEST(AggregationTag, EveryFlippedBitIsRefused) {
  const AggregationKey key = CountingKey();
  const std::vector<uint8_t> m = TaggedMessage(key);
  for (size_t bit = 0; bit < m.size() * 8; ++bit) {
    std::vector<uint8_t> bad = m;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(VerifyAggregationTag(key, bad)) << "bit " << bit;
  }
}

TEST(AggregationTag, AnotherKeyOrATruncatedMessageIsRefused) {
  const AggregationKey key = CountingKey();
  AggregationKey other = key;
  other[31] ^= 1;
  const std::vector<uint8_t> m = TaggedMessage(key);
  EXPECT_FALSE(VerifyAggregationTag(other, m));
  EXPECT_FALSE(VerifyAggregationTag(key, std::span<const uint8_t>(m).first(55)));
  EXPECT_FALSE(VerifyAggregationTag(key, {}));
  EXPECT_NE(NewAggregationKey(), NewAggregationKey());
}

TEST(AggregationTag, TwoBuffersGiveTheSameTag) {
  const AggregationKey key = CountingKey();
  const std::vector<uint8_t> m = TaggedMessage(key);
  const std::span<const uint8_t> signed_bytes(m.data(), m.size() - kAggregationTagSize);
  EXPECT_EQ(ComputeAggregationTag(key, signed_bytes),
            ComputeAggregationTag(key, signed_bytes.first(kAggregationHeaderSize),
                                  signed_bytes.subspan(kAggregationHeaderSize)));
}

TEST(AggregationTag, AppendNeedsRoom) {
  std::vector<uint8_t> buffer(40 + 15);
  EXPECT_EQ(AppendAggregationTag(CountingKey(), buffer, 40).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(AppendAggregationTag(CountingKey(), buffer, 56).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(AggregationTag, KeyBytesRoundTripAndWrongSizesAreRefused) {
  const AggregationKey key = NewAggregationKey();
  auto back = AggregationKeyFromBytes(AggregationKeyBytes(key));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, key);
  EXPECT_EQ(AggregationKeyFromBytes(std::string(31, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AggregationKeyFromBytes("").status().code(), absl::StatusCode::kInvalidArgument);
}

// Keyed BLAKE2b, 16-byte output, key 00..1f, message 00..3f: pins the
// construction (algorithm, key use, output length) independently of the
// code above. Value computed with Python's hashlib.blake2b(msg,
// key=key, digest_size=16).
TEST(AggregationTag, KnownAnswer) {
  std::vector<uint8_t> msg(64);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i);
  const AggregationTag tag = ComputeAggregationTag(CountingKey(), msg);
  EXPECT_EQ(ToHex(tag), "d70096919189ec3b386b4de2e4cf86d4");
}

}  // namespace
}  // namespace netfold::proto
