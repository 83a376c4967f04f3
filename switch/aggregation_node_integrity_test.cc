// The integrity tag at an aggregation node (docs/security.md): with the
// job's key, a child's request or a parent's result with a bad or missing
// tag is dropped and counted (bad_tag) before anything looks at it, never
// folded or relayed; everything the node sends is tagged. Without a key a
// tagged message is dropped too. And a two-level tree gives bit for bit
// the same elements with and without tags.
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "switch/aggregation_node.h"

namespace netfold::sw {
namespace {

using proto::AggregationHeader;
using proto::AggregationKey;
using proto::AggregationMessageType;
using proto::CollectiveType;
using proto::DataType;
using proto::DeliveryMode;
using proto::ReduceOp;

using Bytes = std::vector<uint8_t>;

struct Recorder : NodeOutput {
  std::vector<Bytes> to_parent, multicast;
  std::map<size_t, std::vector<Bytes>> to_child;
  void SendToParent(std::span<const uint8_t> m) override { to_parent.emplace_back(m.begin(), m.end()); }
  void SendToChild(size_t c, std::span<const uint8_t> m) override {
    to_child[c].emplace_back(m.begin(), m.end());
  }
  void Multicast(std::span<const uint8_t> m) override { multicast.emplace_back(m.begin(), m.end()); }
};

AggregationKey TestKey(uint8_t fill) {
  AggregationKey key;
  key.fill(fill);
  return key;
}

AggregationHeader Request(uint64_t seq, uint32_t count = 4) {
  AggregationHeader h;
  h.type = AggregationMessageType::kRequest;
  h.collective = CollectiveType::kAllreduce;
  h.dtype = DataType::kInt32;
  h.op = ReduceOp::kSum;
  h.tree_id = 1;
  h.group_id = 2;
  h.epoch = 3;
  h.count = count;
  h.seq = seq;
  h.has_data = true;
  return h;
}

// The message as a sender with `key` (none: untagged) writes it.
Bytes Encode(AggregationHeader h, const std::vector<int32_t>& values,
             const AggregationKey* key) {
  h.has_tag = key != nullptr;
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(values.data()),
                                      values.size() * sizeof(int32_t));
  Bytes m(proto::kAggregationHeaderSize + data.size() + proto::kAggregationTagSize);
  size_t n = *proto::EncodeAggregationMessage(h, data, m);
  if (key != nullptr) n = *proto::AppendAggregationTag(*key, m, n);
  m.resize(n);
  return m;
}

// Hands a received message to a node as the switch's data plane does.
void ToChild(AggregationNode& node, size_t child, const Bytes& m) {
  AggregationHeader h;
  std::span<const uint8_t> elements;
  ASSERT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
  node.OnChildMessage(child, h, elements, m);
}
void ToParentSide(AggregationNode& node, const Bytes& m) {
  AggregationHeader h;
  std::span<const uint8_t> elements;
  ASSERT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
  node.OnParentMessage(h, elements, m);
}

std::vector<int32_t> Elements(const Bytes& m) {
  AggregationHeader h;
  std::span<const uint8_t> elements;
  EXPECT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
  std::vector<int32_t> out(elements.size() / sizeof(int32_t));
  std::memcpy(out.data(), elements.data(), elements.size());
  return out;
}

class NodeIntegrity : public ::testing::Test {
 protected:
  std::unique_ptr<AggregationNode> Node(std::optional<AggregationKey> key, bool has_parent = false,
                                        uint32_t slot_bytes = 64) {
    AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                                 .slot_bytes = slot_bytes, .children = {{{0}}, {{1}}},
                                 .has_parent = has_parent};
    config.integrity_key = key;
    return std::move(*AggregationNode::Create(config, &out_, clock_));
  }
  FakeClock clock_;
  Recorder out_;
};

TEST_F(NodeIntegrity, ABadTaggedChildRequestIsDroppedCountedAndNeverFolded) {
  const AggregationKey key = TestKey(7);
  const AggregationKey forger = TestKey(8);
  auto node = Node(key);
  ToChild(*node, 0, Encode(Request(0), {1, 2, 3, 4}, &key));
  // Child 1's place taken by a forger: a wrong key, a flipped byte, no tag.
  ToChild(*node, 1, Encode(Request(0), {1000, 1000, 1000, 1000}, &forger));
  Bytes flipped = Encode(Request(0), {10, 20, 30, 40}, &key);
  flipped[proto::kAggregationHeaderSize] ^= 1;
  ToChild(*node, 1, flipped);
  ToChild(*node, 1, Encode(Request(0), {1000, 1000, 1000, 1000}, nullptr));
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kBadTag), 3u);
  EXPECT_TRUE(out_.multicast.empty()) << "a forged contribution completed the operation";
  // The real child 1: the result is exact, and tagged with the job's key.
  ToChild(*node, 1, Encode(Request(0), {10, 20, 30, 40}, &key));
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(Elements(out_.multicast[0]), (std::vector<int32_t>{11, 22, 33, 44}));
  EXPECT_TRUE(proto::VerifyAggregationTag(key, out_.multicast[0]));
  EXPECT_TRUE(proto::DecodeAggregationMessage(out_.multicast[0])->has_tag);
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kBadTag), 3u);
}

TEST_F(NodeIntegrity, AStaleEpochWithoutTheTagGetsNoAnswer) {
  const AggregationKey key = TestKey(7);
  auto node = Node(key);
  AggregationHeader stale = Request(0);
  stale.epoch = 2;
  ToChild(*node, 0, Encode(stale, {1, 2, 3, 4}, nullptr));
  EXPECT_TRUE(out_.to_child.empty()) << "an untagged probe learned the group's epoch";
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kBadTag), 1u);
  // With the tag, the abort answers, tagged.
  ToChild(*node, 0, Encode(stale, {1, 2, 3, 4}, &key));
  ASSERT_EQ(out_.to_child[0].size(), 1u);
  EXPECT_TRUE(proto::VerifyAggregationTag(key, out_.to_child[0][0]));
}

TEST_F(NodeIntegrity, ARelayedResultIsCheckedBeforeItGoesDown) {
  const AggregationKey key = TestKey(7);
  auto node = Node(key, /*has_parent=*/true);
  AggregationHeader up = Request(0);
  up.delivery = DeliveryMode::kRcTree;
  ToChild(*node, 0, Encode(up, {1, 2, 3, 4}, &key));
  ToChild(*node, 1, Encode(up, {1, 1, 1, 1}, &key));
  ASSERT_EQ(out_.to_parent.size(), 1u);
  EXPECT_TRUE(proto::VerifyAggregationTag(key, out_.to_parent[0]));
  EXPECT_EQ(Elements(out_.to_parent[0]), (std::vector<int32_t>{2, 3, 4, 5}));
  AggregationHeader result = up;
  result.type = AggregationMessageType::kResult;
  const AggregationKey forger = TestKey(9);
  ToParentSide(*node, Encode(result, {666, 666, 666, 666}, &forger));
  ToParentSide(*node, Encode(result, {666, 666, 666, 666}, nullptr));
  EXPECT_TRUE(out_.to_child.empty()) << "a forged result was relayed";
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kBadTag), 2u);
  ToParentSide(*node, Encode(result, {2, 3, 4, 5}, &key));
  ASSERT_EQ(out_.to_child[0].size(), 1u);
  ASSERT_EQ(out_.to_child[1].size(), 1u);
  EXPECT_TRUE(proto::VerifyAggregationTag(key, out_.to_child[1][0]));
  EXPECT_EQ(Elements(out_.to_child[1][0]), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST_F(NodeIntegrity, ARootSendsRcTreeResultsWithOneTag) {
  const AggregationKey key = TestKey(7);
  auto node = Node(key);
  AggregationHeader h = Request(0);
  h.delivery = DeliveryMode::kRcTree;
  ToChild(*node, 0, Encode(h, {1, 2, 3, 4}, &key));
  ToChild(*node, 1, Encode(h, {5, 6, 7, 8}, &key));
  for (size_t c : {0u, 1u}) {
    ASSERT_EQ(out_.to_child[c].size(), 1u);
    const Bytes& m = out_.to_child[c][0];
    EXPECT_EQ(m.size(), proto::kAggregationHeaderSize + 16 + proto::kAggregationTagSize);
    EXPECT_TRUE(proto::VerifyAggregationTag(key, m));
    EXPECT_EQ(Elements(m), (std::vector<int32_t>{6, 8, 10, 12}));
  }
}

TEST_F(NodeIntegrity, WithoutAKeyATaggedMessageIsDroppedAndNothingIsTagged) {
  const AggregationKey key = TestKey(7);
  auto node = Node(std::nullopt);
  ToChild(*node, 0, Encode(Request(0), {1, 2, 3, 4}, &key));
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kBadTag), 1u);
  ToChild(*node, 0, Encode(Request(0), {1, 2, 3, 4}, nullptr));
  ToChild(*node, 1, Encode(Request(0), {1, 2, 3, 4}, nullptr));
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(out_.multicast[0].size(), proto::kAggregationHeaderSize + 16);  // no tag
  EXPECT_FALSE(proto::DecodeAggregationMessage(out_.multicast[0])->has_tag);
}

TEST_F(NodeIntegrity, WithATagAnOperationMustLeaveRoomForIt) {
  const AggregationKey key = TestKey(7);
  auto node = Node(key, false, /*slot_bytes=*/64);
  // 16 int32 = 64 bytes: a slot's worth, no room for the tag.
  ToChild(*node, 0, Encode(Request(0, 16), std::vector<int32_t>(16, 1), &key));
  ToChild(*node, 1, Encode(Request(0, 16), std::vector<int32_t>(16, 1), &key));
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(proto::DecodeAggregationMessage(out_.multicast[0])->status,
            proto::AggregationStatus::kInvalidRequest);
}

// A root over two leaves over two hosts each, messages delivered in a
// fixed interleaving: the elements of every result are the same bits with
// and without tags (the tag changes what is on the wire, not the fold).
std::vector<Bytes> RunTree(const std::optional<AggregationKey>& key, int ops) {
  FakeClock clock;
  struct Wire : NodeOutput {
    std::deque<std::pair<int, Bytes>>* up;  // (leaf, message) to the root
    int leaf = 0;
    std::vector<Bytes>* results;
    void SendToParent(std::span<const uint8_t> m) override { up->emplace_back(leaf, Bytes(m.begin(), m.end())); }
    void SendToChild(size_t, std::span<const uint8_t>) override {}
    void Multicast(std::span<const uint8_t> m) override { results->emplace_back(m.begin(), m.end()); }
  };
  std::deque<std::pair<int, Bytes>> up;
  std::vector<Bytes> results;
  Wire wires[3];
  std::unique_ptr<AggregationNode> nodes[3];  // 0 root, 1 and 2 leaves
  for (int i = 0; i < 3; ++i) {
    wires[i].up = &up;
    wires[i].leaf = i - 1;
    wires[i].results = &results;
    AggregationNodeConfig c{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 4,
                            .slot_bytes = 256, .has_parent = i > 0};
    c.children = i == 0 ? std::vector<NodeChild>{{{0, 1}}, {{2, 3}}}
                        : std::vector<NodeChild>{{{static_cast<uint32_t>(2 * (i - 1))}},
                                                 {{static_cast<uint32_t>(2 * (i - 1) + 1)}}};
    c.integrity_key = key;
    nodes[i] = std::move(*AggregationNode::Create(c, &wires[i], clock));
  }
  for (int s = 0; s < ops; ++s) {
    AggregationHeader h = Request(static_cast<uint64_t>(s), 48);
    h.dtype = DataType::kFp32;
    for (int rank : {3, 0, 2, 1}) {  // out of child order on purpose
      std::vector<int32_t> bits(48);
      for (int e = 0; e < 48; ++e) {
        const float v = 0.1f * static_cast<float>(rank + 1) * static_cast<float>(e + s + 1) +
                        1e7f * static_cast<float>((e + rank) % 3 == 0);
        std::memcpy(&bits[e], &v, sizeof(v));
      }
      ToChild(*nodes[1 + rank / 2], static_cast<size_t>(rank % 2),
              Encode(h, bits, key ? &*key : nullptr));
    }
    while (!up.empty()) {
      auto [leaf, m] = std::move(up.back());  // the second leaf first
      up.pop_back();
      ToChild(*nodes[0], static_cast<size_t>(leaf), m);
    }
  }
  for (auto& n : nodes) EXPECT_EQ(n->counters().Drops(NodeDropReason::kBadTag), 0u);
  return results;
}

TEST(NodeIntegrityTree, ResultsAreBitwiseIdenticalWithAndWithoutTheTag) {
  const std::vector<Bytes> plain = RunTree(std::nullopt, 12);
  const std::vector<Bytes> tagged = RunTree(TestKey(3), 12);
  ASSERT_EQ(plain.size(), 12u);
  ASSERT_EQ(tagged.size(), 12u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(tagged[i].size(), plain[i].size() + proto::kAggregationTagSize);
    EXPECT_EQ(Elements(tagged[i]), Elements(plain[i])) << "result " << i;
    EXPECT_TRUE(proto::VerifyAggregationTag(TestKey(3), tagged[i]));
  }
}

}  // namespace
}  // namespace netfold::sw
