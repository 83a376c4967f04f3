// One aggregation node fed messages by hand, its outputs recorded: bad
// configs refused; children that disagree (type, count, root, bcast data)
// complete with a mismatch on every rank; stale epochs, duplicates and
// window violations dropped and counted; repairs answered until a slot is
// reused, and relayed below the root to the child that asked; aborts;
// root_data results routed toward their root. The
// node inside whole trees is in aggregation_node_test.cc.
#include "switch/aggregation_node.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"

namespace netfold::sw {
namespace {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DataType;
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

AggregationHeader Header(uint64_t seq, DataType t = DataType::kInt32, uint32_t count = 4) {
  AggregationHeader h;
  h.type = AggregationMessageType::kRequest;
  h.collective = CollectiveType::kAllreduce;
  h.dtype = t;
  h.op = ReduceOp::kSum;
  h.tree_id = 1;
  h.group_id = 2;
  h.epoch = 3;
  h.count = count;
  h.seq = seq;
  h.has_data = true;
  return h;
}

AggregationHeader Parse(const Bytes& m) {
  auto h = proto::DecodeAggregationMessage(m);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : AggregationHeader{};
}

class NodeValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                                 .slot_bytes = 64,
                                 .children = {{{0}}, {{1}}, {{2}}}};
    node_ = std::move(*AggregationNode::Create(config, &out_, clock_));
  }
  void Send(size_t child, const AggregationHeader& h) {
    Bytes data(proto::AggregationPayloadSize(h), static_cast<uint8_t>(child + 1));
    node_->OnChildMessage(child, h, data);
  }
  FakeClock clock_;
  Recorder out_;
  std::unique_ptr<AggregationNode> node_;
};

TEST_F(NodeValidation, RejectsBadConfigs) {
  Recorder r;
  FakeClock c;
  EXPECT_FALSE(AggregationNode::Create({.children = {}}, &r, c).ok());
  EXPECT_FALSE(AggregationNode::Create({.num_slots = 0, .children = {{{0}}}}, &r, c).ok());
  EXPECT_FALSE(AggregationNode::Create({.slot_bytes = 100, .children = {{{0}}}}, &r, c).ok());
  EXPECT_FALSE(AggregationNode::Create({.children = {{{0}}}}, nullptr, c).ok());
}

TEST_F(NodeValidation, DisagreeingChildrenCompleteWithMismatchOnEveryRank) {
  Send(0, Header(0));
  Send(1, Header(0, DataType::kUint32));
  Send(2, Header(0));
  ASSERT_EQ(out_.multicast.size(), 1u);
  AggregationHeader r = Parse(out_.multicast[0]);
  EXPECT_EQ(r.status, AggregationStatus::kMismatch);
  EXPECT_FALSE(r.has_data);
  EXPECT_EQ(node_->counters().errors_distributed, 1u);
  // The group goes on: the next operation in that slot works.
  out_.multicast.clear();
  for (size_t c = 0; c < 3; ++c) Send(c, Header(2));
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(Parse(out_.multicast[0]).status, AggregationStatus::kOk);
}

TEST_F(NodeValidation, CountAndRootMismatchesToo) {
  Send(0, Header(0, DataType::kInt32, 4));
  Send(1, Header(0, DataType::kInt32, 5));
  Send(2, Header(0, DataType::kInt32, 4));
  EXPECT_EQ(Parse(out_.multicast.at(0)).status, AggregationStatus::kMismatch);
  AggregationHeader a = Header(1), b = Header(1);
  a.root_rank = 1;
  Send(0, a);
  Send(1, b);
  Send(2, b);
  EXPECT_EQ(Parse(out_.multicast.at(1)).status, AggregationStatus::kMismatch);
}

TEST_F(NodeValidation, OversizedOperationIsAnInvalidRequest) {
  for (size_t c = 0; c < 3; ++c) Send(c, Header(0, DataType::kInt64, 9));  // 72 > 64 bytes
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(Parse(out_.multicast[0]).status, AggregationStatus::kInvalidRequest);
}

TEST_F(NodeValidation, StaleEpochIsAbortedToThatChildOnly) {
  AggregationHeader h = Header(0);
  h.epoch = 2;
  Send(1, h);
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kStaleEpoch), 1u);
  ASSERT_EQ(out_.to_child[1].size(), 1u);
  AggregationHeader a = Parse(out_.to_child[1][0]);
  EXPECT_EQ(a.type, AggregationMessageType::kAbort);
  EXPECT_EQ(a.status, AggregationStatus::kStaleEpoch);
  EXPECT_TRUE(out_.to_child[0].empty());
  EXPECT_EQ(node_->num_busy_slots(), 0u);
}

TEST_F(NodeValidation, DuplicatesAndWindowViolationsAreDroppedNotCounted) {
  Send(0, Header(0));
  Send(0, Header(0));  // duplicate while collecting
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kDuplicate), 1u);
  Send(0, Header(2));  // slot 0 is busy with seq 0: seq 2 is beyond the window
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kOutsideWindow), 1u);
  Send(0, Header(5));  // slot 1 never used: seq 5 is not 1
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kOutsideWindow), 2u);
  Send(1, Header(0));
  Send(2, Header(0));
  ASSERT_EQ(out_.multicast.size(), 1u);
  // The duplicate did not count twice: the sum is 1 + 2 + 3 per byte lane.
  AggregationHeader h;
  std::span<const uint8_t> data;
  ASSERT_EQ(proto::ParseAggregationMessage(out_.multicast[0], &h, &data),
            proto::AggregationParseResult::kOk);
  int32_t v;
  std::memcpy(&v, data.data(), 4);
  EXPECT_EQ(v, 0x06060606);
  Send(2, Header(0));  // after completion: an old operation
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kDuplicate), 2u);
}

TEST_F(NodeValidation, RepairIsAnsweredUntilTheSlotIsReused) {
  for (size_t c = 0; c < 3; ++c) Send(c, Header(0));
  AggregationHeader repair = Header(0);
  repair.type = AggregationMessageType::kRepairRequest;
  repair.has_data = false;
  node_->OnChildMessage(2, repair, {});
  ASSERT_EQ(out_.to_child[2].size(), 1u);
  EXPECT_EQ(out_.to_child[2][0], out_.multicast[0]) << "the same result bits";
  for (size_t c = 0; c < 3; ++c) Send(c, Header(2));  // slot 0 reused by seq 2
  node_->OnChildMessage(2, repair, {});
  ASSERT_EQ(out_.to_child[2].size(), 2u);
  AggregationHeader gone = Parse(out_.to_child[2][1]);
  EXPECT_EQ(gone.status, AggregationStatus::kResultGone);
  EXPECT_EQ(gone.seq, 0u);
}

// Below the root, a repaired result comes back from the parent to the
// children that asked. Ranks waiting for results not computed yet (behind
// the rank that lost one) keep asking too, and the root stays silent about
// those: their requests must not push out the request of the rank whose
// result is on its way, or that rank waits for its next repair (up to a
// second later) and, after a few such losses, past its deadline. Child 2
// is a switch over ranks 2 and 3, one window apart: rank 3 lost result 0
// while rank 2 already asks about 2 and 3.
TEST(AggregationNodeRepair, ARelayedRepairReachesTheChildThatAskedWhateverOthersAskMeanwhile) {
  FakeClock clock;
  Recorder out;
  AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                               .slot_bytes = 64,
                               .children = {{{0}}, {{1}}, {{2, 3}}},
                               .has_parent = true};
  std::unique_ptr<AggregationNode> node = std::move(*AggregationNode::Create(config, &out, clock));
  for (uint64_t seq : {0u, 1u}) {
    for (size_t c = 0; c < 3; ++c) {
      const AggregationHeader h = Header(seq);
      const Bytes data(proto::AggregationPayloadSize(h), static_cast<uint8_t>(c + 1));
      node->OnChildMessage(c, h, data);
    }
  }
  ASSERT_EQ(out.to_parent.size(), 2u);
  auto repair = [&](size_t child, uint64_t seq) {
    AggregationHeader r = Header(seq);
    r.type = AggregationMessageType::kRepairRequest;
    r.has_data = false;
    node->OnChildMessage(child, r, {});
  };
  repair(2, 0);
  repair(2, 0);  // asked again: still one answer
  // Far more requests for 2 and 3 (not computed yet) than the node keeps.
  for (int i = 0; i < 20; ++i) {
    for (size_t c = 0; c < 3; ++c) {
      repair(c, 2);
      repair(c, 3);
    }
  }
  EXPECT_EQ(out.to_parent.size(), 2u + 2u + 120u) << "every request goes up";
  AggregationHeader result = Header(0);
  result.type = AggregationMessageType::kResult;
  const Bytes data(proto::AggregationPayloadSize(result), 0x06);
  node->OnParentMessage(result, data);
  ASSERT_EQ(out.to_child[2].size(), 1u);
  EXPECT_EQ(Parse(out.to_child[2][0]).seq, 0u);
  EXPECT_EQ(Parse(out.to_child[2][0]).type, AggregationMessageType::kResult);
  EXPECT_TRUE(out.to_child[0].empty());
  EXPECT_TRUE(out.to_child[1].empty());
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kUnexpectedResult), 0u);
  EXPECT_EQ(node->counters().results_relayed, 1u);
}

TEST_F(NodeValidation, ResultFromAChildAndMessagesForOtherGroupsAreDropped) {
  AggregationHeader r = Header(0);
  r.type = AggregationMessageType::kResult;
  Send(0, r);
  AggregationHeader other = Header(0);
  other.group_id = 99;
  Send(0, other);
  node_->OnParentMessage(Header(0), {});  // the root has no parent
  EXPECT_EQ(node_->counters().Drops(NodeDropReason::kUnexpectedType), 3u);
  EXPECT_TRUE(out_.multicast.empty());
}

TEST_F(NodeValidation, AbortTellsEveryChildAndFreesTheSlots) {
  Send(0, Header(0));
  Send(1, Header(1));
  EXPECT_EQ(node_->num_busy_slots(), 2u);
  node_->Abort(AggregationStatus::kAborted);
  EXPECT_EQ(node_->num_busy_slots(), 0u);
  for (size_t c = 0; c < 3; ++c) {
    ASSERT_EQ(out_.to_child[c].size(), 1u);
    EXPECT_EQ(Parse(out_.to_child[c][0]).type, AggregationMessageType::kAbort);
  }
}

// Contributions that arrive before their turn wait in the slot: with the
// children in reverse order two wait per operation, both slots hold
// waiting contributions at once, slots come round again and again, and
// every result is still its own operation's sum (a waiting contribution
// read from another child's or another operation's place would show
// here), also after an abort that left two waiting.
TEST_F(NodeValidation, ContributionsThatWaitKeepTheirOwnDataAcrossSlotsAndAborts) {
  auto bytes = [](size_t child, uint64_t seq) {
    Bytes b(16);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(child * 31 + seq * 7 + i);
    return b;
  };
  auto send = [&](size_t c, uint64_t seq) { node_->OnChildMessage(c, Header(seq), bytes(c, seq)); };
  auto expect_sum = [&](const Bytes& m, uint64_t seq) {
    ASSERT_EQ(m.size(), proto::kAggregationHeaderSize + 16u) << "seq " << seq;
    const AggregationHeader h = Parse(m);
    EXPECT_EQ(h.seq, seq);
    EXPECT_EQ(h.status, AggregationStatus::kOk);
    EXPECT_TRUE(h.has_data);
    for (size_t e = 0; e < 4; ++e) {
      uint32_t want = 0;  // int32 sums wrap, as the ALU's do
      for (size_t c = 0; c < 3; ++c) {
        uint32_t v;
        std::memcpy(&v, bytes(c, seq).data() + 4 * e, 4);
        want += v;
      }
      uint32_t got;
      std::memcpy(&got, m.data() + proto::kAggregationHeaderSize + 4 * e, 4);
      EXPECT_EQ(got, want) << "seq " << seq << " element " << e;
    }
  };
  // Two operations in flight, both slots waiting for child 0.
  for (uint64_t seq = 0; seq < 40; seq += 2) {
    for (size_t c : {2, 1}) {
      send(c, seq);
      send(c, seq + 1);
    }
    send(0, seq);
    send(0, seq + 1);
    ASSERT_EQ(out_.multicast.size(), seq + 2);
    expect_sum(out_.multicast[seq], seq);
    expect_sum(out_.multicast[seq + 1], seq + 1);
  }
  EXPECT_EQ(node_->counters().contributions_buffered.load(), 80u);

  // Abandoned while two wait; the slots start again from sequence 0.
  send(2, 40);
  send(1, 41);
  node_->Abort(AggregationStatus::kAborted);
  for (uint64_t seq = 0; seq < 4; ++seq) {
    for (size_t c : {2, 1, 0}) send(c, seq);
  }
  ASSERT_EQ(out_.multicast.size(), 44u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out_.multicast[40 + i], out_.multicast[i]) << "seq " << i << " again, same inputs";
  }
  EXPECT_EQ(node_->counters().TotalDrops(), 0u);
}

// A MessageKeeper as the switch's: each message arrives in a buffer of
// its own, which the node may keep past the call (KeepCurrent) instead of
// copying; every buffer handed back is overwritten before it is freed, so
// a node that read a kept contribution after releasing it, or one that
// never waited to fold it, would get a wrong sum. `refuse_every` > 0
// refuses every n-th keep (the switch's budget), which the node copies.
class TestKeeper : public MessageKeeper {
 public:
  explicit TestKeeper(int refuse_every = 0) : refuse_every_(refuse_every) {}
  ~TestKeeper() override { EXPECT_TRUE(kept_.empty()) << kept_.size() << " never released"; }
  // Hands `bytes` to the node in a buffer of their own.
  void Deliver(AggregationNode& node, size_t child, const AggregationHeader& h, const Bytes& bytes) {
    current_ = new Bytes(bytes);
    node.OnChildMessage(child, h, *current_);
    delete current_;  // nullptr when kept
    current_ = nullptr;
  }
  void* KeepCurrent() override {
    if (current_ == nullptr) return nullptr;
    if (refuse_every_ > 0 && ++asked_ % refuse_every_ == 0) return nullptr;
    Bytes* b = current_;
    current_ = nullptr;
    kept_.insert(b);
    return b;
  }
  void Release(void* handle) override {
    auto* b = static_cast<Bytes*>(handle);
    ASSERT_EQ(kept_.erase(b), 1u) << "released twice or never kept";
    std::fill(b->begin(), b->end(), 0xAB);
    delete b;
  }
  size_t outstanding() const { return kept_.size(); }

 private:
  int refuse_every_;
  int asked_ = 0;
  Bytes* current_ = nullptr;
  std::set<Bytes*> kept_;
};

// Contributions that come before their turn wait in their own receive
// buffers when the switch can keep them: the same sums as copied ones,
// nothing copied, every buffer handed back once its contribution is
// folded, or when an abort or the node's end abandons it; with the
// switch's budget refusing some, those are copied and the rest kept.
TEST(NodeKeeper, EarlyContributionsWaitInTheirBuffersAndComeBackWhenFolded) {
  auto bytes = [](size_t child, uint64_t seq) {
    Bytes b(16);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(child * 31 + seq * 7 + i);
    return b;
  };
  for (int refuse_every : {0, 3}) {
    SCOPED_TRACE(refuse_every);
    FakeClock clock;
    Recorder copied_out, kept_out;
    AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                                 .slot_bytes = 64, .children = {{{0}}, {{1}}, {{2}}}};
    auto copying = std::move(*AggregationNode::Create(config, &copied_out, clock));
    TestKeeper keeper(refuse_every);
    {
      auto keeping = std::move(*AggregationNode::Create(config, &kept_out, clock));
      keeping->SetKeeper(&keeper);
      auto send = [&](size_t c, uint64_t seq) {
        copying->OnChildMessage(c, Header(seq), bytes(c, seq));
        keeper.Deliver(*keeping, c, Header(seq), bytes(c, seq));
      };
      // Two operations in flight, both slots waiting for child 0, then
      // child 0 of one of them: only that one's buffers come back.
      for (uint64_t seq = 0; seq < 40; seq += 2) {
        for (size_t c : {2, 1}) {
          send(c, seq);
          send(c, seq + 1);
        }
        send(0, seq + 1);
        if (refuse_every == 0) {
          EXPECT_EQ(keeper.outstanding(), 2u) << "seq " << seq;
        }
        send(0, seq);
        EXPECT_EQ(keeper.outstanding(), 0u) << "seq " << seq;
      }
      ASSERT_EQ(kept_out.multicast.size(), 40u);
      EXPECT_EQ(kept_out.multicast, copied_out.multicast);
      const NodeCounters& c = keeping->counters();
      EXPECT_EQ(c.contributions_buffered.load(), 80u);
      EXPECT_EQ(c.contributions_copied.load(), refuse_every == 0 ? 0u : 80u / 3);
      EXPECT_EQ(copying->counters().contributions_copied.load(), 80u);
      // An abort abandons what waits; so does the node's end.
      send(2, 40);
      send(1, 41);
      if (refuse_every == 0) {
        EXPECT_EQ(keeper.outstanding(), 2u);
      }
      keeping->Abort(AggregationStatus::kAborted);
      EXPECT_EQ(keeper.outstanding(), 0u);
      keeper.Deliver(*keeping, 2, Header(0), bytes(2, 0));
      keeper.Deliver(*keeping, 1, Header(1), bytes(1, 1));
    }
    EXPECT_EQ(keeper.outstanding(), 0u);
  }
}

TEST_F(NodeValidation, BcastDataFromAChildNotHoldingTheRootIsAMismatch) {
  AggregationHeader h = Header(0, DataType::kUint8, 8);
  h.collective = CollectiveType::kBcast;
  h.op = proto::kNoReduceOp;
  h.root_rank = 1;
  AggregationHeader no_data = h;
  no_data.has_data = false;
  Send(0, h);  // child 0 does not hold rank 1 but sends data
  Send(1, h);
  Send(2, no_data);
  ASSERT_EQ(out_.multicast.size(), 1u);
  EXPECT_EQ(Parse(out_.multicast[0]).status, AggregationStatus::kMismatch);
}

AggregationHeader RootDataReduce(uint64_t seq, uint32_t root) {
  AggregationHeader h = Header(seq);
  h.collective = CollectiveType::kReduce;
  h.delivery = proto::DeliveryMode::kRootData;
  h.root_rank = root;
  return h;
}

// root_data: the group root multicasts the header and sends the data to
// the child holding root_rank alone; a root that is no member is an
// invalid request.
TEST_F(NodeValidation, ARootDataResultIsAHeaderToAllAndTheDataToTheRootsChild) {
  for (size_t c = 0; c < 3; ++c) Send(c, RootDataReduce(0, 1));
  ASSERT_EQ(out_.multicast.size(), 1u);
  const AggregationHeader header = Parse(out_.multicast[0]);
  EXPECT_EQ(header.status, AggregationStatus::kOk);
  EXPECT_FALSE(header.has_data);
  EXPECT_EQ(header.delivery, proto::DeliveryMode::kRootData);
  ASSERT_EQ(out_.to_child[1].size(), 1u);
  EXPECT_TRUE(Parse(out_.to_child[1][0]).has_data);
  EXPECT_TRUE(out_.to_child[0].empty());
  EXPECT_TRUE(out_.to_child[2].empty());
  for (size_t c = 0; c < 3; ++c) Send(c, RootDataReduce(1, 7));
  ASSERT_EQ(out_.multicast.size(), 2u);
  EXPECT_EQ(Parse(out_.multicast[1]).status, AggregationStatus::kInvalidRequest);
}

// A group root without multicast cannot serve root_data: the error goes
// the way the data would have (the root does not ask again), not by a
// multicast that does not exist.
TEST(AggregationNodeRootData, WithoutMulticastTheErrorGoesToTheRootsChild) {
  FakeClock clock;
  Recorder out;
  AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                               .slot_bytes = 64, .children = {{{0}}, {{1, 2}}},
                               .multicast = false};
  std::unique_ptr<AggregationNode> node = std::move(*AggregationNode::Create(config, &out, clock));
  for (size_t c = 0; c < 2; ++c) {
    const AggregationHeader h = RootDataReduce(0, 2);
    const Bytes data(proto::AggregationPayloadSize(h), 1);
    node->OnChildMessage(c, h, data);
  }
  EXPECT_TRUE(out.multicast.empty());
  ASSERT_EQ(out.to_child[1].size(), 1u);
  EXPECT_EQ(Parse(out.to_child[1][0]).status, AggregationStatus::kInvalidRequest);
  EXPECT_EQ(Parse(out.to_child[1][0]).delivery, proto::DeliveryMode::kRootData);
  EXPECT_TRUE(out.to_child[0].empty());
}

// Below the group root the slot does not wait for the data (the ranks may
// post s + K once the multicast header reached them); the data is routed
// by root_rank, and to a child with a pending repair too.
TEST(AggregationNodeRootData, ASwitchBelowTheRootRoutesTheDataWithoutHoldingItsSlot) {
  FakeClock clock;
  Recorder out;
  AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 2,
                               .slot_bytes = 64,
                               .children = {{{0}}, {{1}}, {{2, 3}}},
                               .has_parent = true};
  std::unique_ptr<AggregationNode> node = std::move(*AggregationNode::Create(config, &out, clock));
  auto contribute = [&](uint64_t seq) {
    for (size_t c = 0; c < 3; ++c) {
      const AggregationHeader h = RootDataReduce(seq, 3);
      const Bytes data(proto::AggregationPayloadSize(h), static_cast<uint8_t>(c + 1));
      node->OnChildMessage(c, h, data);
    }
  };
  contribute(0);
  contribute(1);
  EXPECT_EQ(node->num_busy_slots(), 0u);
  contribute(2);  // slot 0 again, before result 0 came down
  ASSERT_EQ(out.to_parent.size(), 3u);
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 0u);

  AggregationHeader result = RootDataReduce(0, 3);
  result.type = AggregationMessageType::kResult;
  const Bytes data(proto::AggregationPayloadSize(result), 0x06);
  node->OnParentMessage(result, data);
  ASSERT_EQ(out.to_child[2].size(), 1u);
  EXPECT_TRUE(Parse(out.to_child[2][0]).has_data);
  EXPECT_TRUE(out.to_child[0].empty());
  EXPECT_TRUE(out.to_child[1].empty());

  AggregationHeader repair = RootDataReduce(1, 3);
  repair.type = AggregationMessageType::kRepairRequest;
  repair.has_data = false;
  node->OnChildMessage(0, repair, {});  // rank 0 lost the header of 1
  result.seq = 1;
  node->OnParentMessage(result, data);
  EXPECT_EQ(out.to_child[0].size(), 1u);
  EXPECT_EQ(out.to_child[2].size(), 2u);

  result.seq = 2;
  result.root_rank = 9;  // below no child, and nobody asked
  node->OnParentMessage(result, data);
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kUnexpectedResult), 1u);
  EXPECT_EQ(out.to_child[0].size() + out.to_child[1].size() + out.to_child[2].size(), 3u);
}

AggregationHeader BareBcast(uint64_t seq, uint32_t repeat, uint32_t count = 8) {
  AggregationHeader h = Header(seq, DataType::kUint8, count);
  h.collective = CollectiveType::kBcast;
  h.op = proto::kNoReduceOp;
  h.root_rank = 1;
  h.has_data = false;
  h.repeat = repeat;
  return h;
}

// A bcast child without the data stands for a run of operations in one
// request: each one is checked as if it came alone (window, duplicates,
// agreement), and a run longer than the window is dropped whole.
TEST(AggregationNodeRuns, ARunStandsForEachOperationItNames) {
  Recorder out;
  FakeClock clock;
  AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 4,
                               .slot_bytes = 64, .children = {{{0}}, {{1}}, {{2}}}};
  auto node = std::move(*AggregationNode::Create(config, &out, clock));
  auto data = [&](uint64_t seq, uint32_t count = 8) {
    AggregationHeader h = BareBcast(seq, 0, count);
    h.has_data = true;
    Bytes bytes(count, static_cast<uint8_t>(seq + 1));
    node->OnChildMessage(1, h, bytes);
  };
  node->OnChildMessage(0, BareBcast(0, 3), {});
  node->OnChildMessage(2, BareBcast(0, 4), {});  // five operations: more than K
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 1u);
  node->OnChildMessage(2, BareBcast(0, 1), {});
  node->OnChildMessage(2, BareBcast(2, 1), {});
  node->OnChildMessage(0, BareBcast(3, 0), {});  // already named by the run
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kDuplicate), 1u);
  EXPECT_TRUE(out.multicast.empty()) << "nothing completes before the root's data";
  for (uint64_t s = 0; s < 4; ++s) data(s);
  ASSERT_EQ(out.multicast.size(), 4u);
  for (uint64_t s = 0; s < 4; ++s) {
    const AggregationHeader r = Parse(out.multicast[s]);
    EXPECT_EQ(r.seq, s);
    EXPECT_EQ(r.status, AggregationStatus::kOk);
    EXPECT_TRUE(r.has_data);
    EXPECT_EQ(r.repeat, 0u) << "results are one per operation";
    EXPECT_EQ(out.multicast[s].back(), s + 1) << "the root's data";
  }
  // A run whose second operation another child describes otherwise: that
  // one completes with a mismatch, the first is fine.
  node->OnChildMessage(0, BareBcast(4, 1), {});
  node->OnChildMessage(2, BareBcast(4, 1), {});
  data(4);
  data(5, 7);
  ASSERT_EQ(out.multicast.size(), 6u);
  EXPECT_EQ(Parse(out.multicast[4]).status, AggregationStatus::kOk);
  EXPECT_EQ(Parse(out.multicast[5]).status, AggregationStatus::kMismatch);
  EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 1u);
}

// Below the root, the operations a run completes without data go up as one
// run; an operation completed by data from below goes up on its own.
TEST(AggregationNodeRuns, ASwitchSendsTheRunsItCompletesUpAsRuns) {
  Recorder out;
  FakeClock clock;
  AggregationNodeConfig config{.tree_id = 1, .group_id = 2, .epoch = 3, .num_slots = 8,
                               .slot_bytes = 64, .children = {{{0}}, {{2}}},
                               .has_parent = true};
  auto node = std::move(*AggregationNode::Create(config, &out, clock));
  node->OnChildMessage(0, BareBcast(0, 5), {});
  EXPECT_TRUE(out.to_parent.empty());
  node->OnChildMessage(1, BareBcast(0, 1), {});
  node->OnChildMessage(1, BareBcast(2, 3), {});
  ASSERT_EQ(out.to_parent.size(), 2u);
  AggregationHeader up = Parse(out.to_parent[0]);
  EXPECT_EQ(up.seq, 0u);
  EXPECT_EQ(up.repeat, 1u);
  EXPECT_FALSE(up.has_data);
  EXPECT_EQ(up.type, AggregationMessageType::kRequest);
  up = Parse(out.to_parent[1]);
  EXPECT_EQ(up.seq, 2u);
  EXPECT_EQ(up.repeat, 3u);
  // Operations of different counts do not share a run.
  node->OnChildMessage(0, BareBcast(6, 0), {});
  node->OnChildMessage(0, BareBcast(7, 0, 5), {});
  node->OnChildMessage(1, BareBcast(6, 0), {});
  node->OnChildMessage(1, BareBcast(7, 0, 5), {});
  ASSERT_EQ(out.to_parent.size(), 4u);
  EXPECT_EQ(Parse(out.to_parent[3]).count, 5u);
  EXPECT_EQ(Parse(out.to_parent[3]).repeat, 0u);
  EXPECT_EQ(node->counters().TotalDrops(), 0u);
}

}  // namespace
}  // namespace netfold::sw
