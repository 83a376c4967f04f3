// The group engine's bcast runs (a non-root's one request for a run of
// chunks) and its blocked operations: allgather and reduce-scatter as a
// bcast (reduce) per block, small ones as one allreduce, blocks refused.
// Split from group_engine_test.cc.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/group_engine.h"
#include "host/testing/group_engine_fixture.h"

namespace netfold::host {
namespace {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DataType;
using proto::DeliveryMode;
using proto::ReduceOp;

using testing::FakeLeaf;
using testing::GroupEngineTest;

// Allgather and reduce-scatter: a bcast (reduce) per block, block i
// rooted at group rank i. This engine is job rank 3, group rank 1 of
// members {5, 3, 7}.
GroupParams BlockedParams(GroupParams p) {
  p.members = {5, 3, 7};
  return p;
}

TEST_F(GroupEngineTest, AllgatherIsABcastPerBlockRootedAtItsRank) {
  GroupEngine e(BlockedParams(Params()), &leaf_, clock_);
  // Blocks of 3, 6 and 0 elements: chunks (block, elements) 0:(0,3), 1:(1,4), 2:(1,2).
  std::vector<int32_t> mine = {10, 11, 12, 13, 14, 15};
  std::vector<int32_t> all(9, -1);
  auto op = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                      .send = mine.data(), .recv = all.data(), .count = 9, .blocks = {3, 6, 0}});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u);
  EXPECT_EQ(leaf_.Header(0).collective, CollectiveType::kBcast);
  EXPECT_EQ(leaf_.Header(0).root_rank, 5u) << "block 0 belongs to group rank 0, job rank 5";
  EXPECT_EQ(leaf_.Header(0).count, 3u);
  EXPECT_FALSE(leaf_.Header(0).has_data) << "not this rank's block";
  EXPECT_EQ(leaf_.Header(1).root_rank, 3u);
  EXPECT_EQ(leaf_.Header(1).count, 4u);
  ASSERT_TRUE(leaf_.Header(1).has_data);
  EXPECT_EQ(leaf_.sent[1].size(), proto::kAggregationHeaderSize + 16);
  EXPECT_EQ(std::memcmp(leaf_.sent[1].data() + proto::kAggregationHeaderSize, mine.data(), 16), 0);
  Answer(e, 0, {1, 2, 3});
  Answer(e, 1, {10, 11, 12, 13});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u) << "the empty block has no chunk";
  EXPECT_EQ(leaf_.Header(2).root_rank, 3u);
  EXPECT_EQ(leaf_.Header(2).count, 2u);
  EXPECT_EQ(std::memcmp(leaf_.sent[2].data() + proto::kAggregationHeaderSize, &mine[4], 8), 0);
  EXPECT_FALSE(e.Done(op));
  Answer(e, 2, {14, 15});
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 10, 11, 12, 13, 14, 15}));
}

// A bcast rank without the data posts one request for a run of chunks
// (repeat), once the window has room for all of it; the root posts each
// chunk with its data; results still come one per chunk and land in place.
TEST_F(GroupEngineTest, BcastNonRootStandsForARunOfChunksInOneRequest) {
  GroupParams params = Params();
  params.num_slots = 8;
  params.bcast_run = 4;
  GroupEngine e(params, &leaf_, clock_);
  std::vector<int32_t> out(46, -1);  // 12 chunks: 11 of four elements, one of two
  auto op = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32, .root = 0,
                      .recv = out.data(), .count = out.size()});
  auto answer = [&](uint64_t seq) {
    AggregationHeader h = leaf_.Header(0);
    h.type = AggregationMessageType::kResult;
    h.repeat = 0;
    h.seq = seq;
    h.count = seq == 11 ? 2 : 4;
    h.has_data = true;
    std::vector<int32_t> v(h.count, static_cast<int32_t>(seq));
    e.OnMessage(h, {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
  };
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u) << "chunks 0-3 and 4-7: the window is full";
  for (size_t i = 0; i < 2; ++i) {
    const AggregationHeader h = leaf_.Header(i);
    EXPECT_EQ(h.seq, 4 * i);
    EXPECT_EQ(h.repeat, 3u);
    EXPECT_FALSE(h.has_data);
    EXPECT_EQ(h.count, 4u);
    EXPECT_EQ(leaf_.sent[i].size(), proto::kAggregationHeaderSize);
  }
  answer(0);
  answer(1);
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 2u) << "room for 2 of the next run of 3: wait";
  EXPECT_GT(*e.NextTimerNs(), clock_.NowNanos()) << "waiting for room is not work to do now";
  answer(2);
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u);
  EXPECT_EQ(leaf_.Header(2).seq, 8u);
  EXPECT_EQ(leaf_.Header(2).repeat, 2u) << "chunks 8-10; the last chunk is shorter";
  answer(3);
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  EXPECT_EQ(leaf_.Header(3).seq, 11u);
  EXPECT_EQ(leaf_.Header(3).repeat, 0u);
  EXPECT_EQ(leaf_.Header(3).count, 2u);
  EXPECT_EQ(e.stats().chunks_posted, 12u);
  for (uint64_t s = 4; s < 12; ++s) {
    EXPECT_FALSE(e.Done(op));
    answer(s);
  }
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<int32_t>(i / 4)) << i;

  // The root sends every chunk with its data; bcast_run 1 is a request per chunk.
  leaf_.sent.clear();
  auto root = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                        .root = 3, .send = out.data(), .recv = out.data(), .count = 16});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(leaf_.Header(i).has_data);
    EXPECT_EQ(leaf_.Header(i).repeat, 0u);
  }
  for (uint64_t s = 12; s < 16; ++s) answer(s);
  EXPECT_TRUE(e.Finish(root).ok());
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], static_cast<int32_t>(i / 4))
        << "the root's buffer is its input: not rewritten";
  }
  params.bcast_run = 1;
  FakeLeaf one_each;
  GroupEngine single(params, &one_each, clock_);
  ASSERT_TRUE(single.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                            .root = 0, .recv = out.data(), .count = 16})
                  .ok());
  single.Poll();
  ASSERT_EQ(one_each.sent.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(one_each.Header(i).repeat, 0u);
}

// An allgather's runs stop where a block (and its root) changes, and the
// rank's own block goes chunk by chunk with its data.
TEST_F(GroupEngineTest, AllgatherRunsStopAtEachBlock) {
  GroupParams params = BlockedParams(Params());
  params.num_slots = 16;
  params.bcast_run = 8;
  GroupEngine e(params, &leaf_, clock_);
  std::vector<int32_t> mine(8, 7), all(24, -1);  // three blocks of two chunks
  auto op = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                      .send = mine.data(), .recv = all.data(), .count = 24,
                      .blocks = {8, 8, 8}});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  EXPECT_EQ(leaf_.Header(0).root_rank, 5u);
  EXPECT_EQ(leaf_.Header(0).repeat, 1u);
  EXPECT_FALSE(leaf_.Header(0).has_data);
  EXPECT_EQ(leaf_.Header(1).repeat, 0u);
  EXPECT_TRUE(leaf_.Header(1).has_data) << "this rank's block";
  EXPECT_EQ(leaf_.Header(2).repeat, 0u);
  EXPECT_TRUE(leaf_.Header(2).has_data);
  EXPECT_EQ(leaf_.Header(3).root_rank, 7u);
  EXPECT_EQ(leaf_.Header(3).seq, 4u);
  EXPECT_EQ(leaf_.Header(3).repeat, 1u);
  EXPECT_FALSE(e.Done(op));
}

TEST_F(GroupEngineTest, ReduceScatterIsAReducePerBlockAndKeepsOnlyItsOwn) {
  GroupParams p = BlockedParams(Params());
  p.num_slots = 4;
  GroupEngine e(p, &leaf_, clock_);
  // Blocks of 4, 5 and 4: chunks 0:(0,4) 1:(1,4) 2:(1,1) 3:(2,4), every one
  // with data (as many chunks as a whole-vector allreduce would take).
  std::vector<int32_t> in = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<int32_t> out(5, -1);
  auto op = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .send = in.data(), .recv = out.data(), .count = 13,
                      .blocks = {4, 5, 4}});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  const uint32_t roots[] = {5, 3, 3, 7}, counts[] = {4, 4, 1, 4}, firsts[] = {0, 4, 8, 9};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(leaf_.Header(i).collective, CollectiveType::kReduce);
    EXPECT_EQ(leaf_.Header(i).delivery, DeliveryMode::kToRoot)
        << "each block to its rank alone, not V to everyone by multicast";
    EXPECT_EQ(leaf_.Header(i).root_rank, roots[i]);
    EXPECT_EQ(leaf_.Header(i).count, counts[i]);
    ASSERT_TRUE(leaf_.Header(i).has_data);
    EXPECT_EQ(std::memcmp(leaf_.sent[i].data() + proto::kAggregationHeaderSize, &in[firsts[i]],
                          counts[i] * 4),
              0);
  }
  Answer(e, 3, {90, 100, 110, 120});  // another rank's block: dropped
  Answer(e, 0, {0, 10, 20, 30});
  Answer(e, 2, {80});
  Answer(e, 1, {40, 50, 60, 70});
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{40, 50, 60, 70, 80}));
}

// Blocks smaller than a slot would cost a chunk each: a vector that fits
// the window goes as one allreduce instead, in fewer chunks.
TEST_F(GroupEngineTest, SmallAllgatherIsAnOrOverTheWholeVector) {
  GroupEngine e(BlockedParams(Params()), &leaf_, clock_);  // K = 2 slots of 16 bytes
  std::vector<int32_t> mine = {7}, all(3, -1);
  auto op = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                      .send = mine.data(), .recv = all.data(), .count = 3, .blocks = {1, 1, 1}});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 1u) << "one chunk, not one per block";
  const AggregationHeader h = leaf_.Header(0);
  EXPECT_EQ(h.collective, CollectiveType::kAllreduce);
  EXPECT_EQ(h.dtype, DataType::kUint8);
  EXPECT_EQ(h.op, ReduceOp::kBor);
  EXPECT_EQ(h.count, 12u);
  const std::vector<int32_t> contributed = {0, 7, 0};  // its block at its place, zeros elsewhere
  EXPECT_EQ(std::memcmp(leaf_.sent[0].data() + proto::kAggregationHeaderSize, contributed.data(),
                        12),
            0);
  const std::vector<int32_t> ored = {5, 7, 9};
  AggregationHeader r = h;
  r.type = AggregationMessageType::kResult;
  r.status = AggregationStatus::kOk;
  r.has_data = true;
  e.OnMessage(r, {reinterpret_cast<const uint8_t*>(ored.data()), 12});
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(all, ored);
}

TEST_F(GroupEngineTest, SmallReduceScatterIsAnAllreduceOfWhichItKeepsItsBlock) {
  GroupEngine e(BlockedParams(Params()), &leaf_, clock_);
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, out = {-1, -1, -9};
  auto op = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .send = in.data(), .recv = out.data(), .count = 6,
                      .blocks = {2, 2, 2}});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u) << "two chunks of four, not three of two";
  EXPECT_EQ(leaf_.Header(0).collective, CollectiveType::kAllreduce);
  EXPECT_EQ(leaf_.Header(0).delivery, DeliveryMode::kMulticast);
  Answer(e, 0, {10, 20, 30, 40});
  Answer(e, 1, {50, 60});
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{30, 40, -9})) << "its block, and nothing beyond it";
}

TEST_F(GroupEngineTest, ReduceScatterInPlaceReadsEveryInputBeforeItsResultLands) {
  GroupEngine e(BlockedParams(Params()), &leaf_, clock_);  // K = 2
  // Group rank 1's block starts at element 1 and its result at element 0:
  // each result lands where an input was already sent.
  std::vector<int32_t> data = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto op = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .send = data.data(), .recv = data.data(),
                      .count = 10, .blocks = {1, 8, 1}});
  std::vector<std::vector<int32_t>> sent_inputs;
  for (size_t i = 0; i < 4; ++i) {
    e.Poll();
    ASSERT_EQ(leaf_.sent.size(), std::min<size_t>(i + 2, 4)) << i;
    const AggregationHeader h = leaf_.Header(i);
    std::vector<int32_t> v(h.count);
    std::memcpy(v.data(), leaf_.sent[i].data() + proto::kAggregationHeaderSize, h.count * 4);
    sent_inputs.push_back(v);
    for (int32_t& x : v) x *= 10;  // "the sum" over ranks
    Answer(e, i, v);
  }
  EXPECT_EQ(sent_inputs, (std::vector<std::vector<int32_t>>{{0}, {1, 2, 3, 4}, {5, 6, 7, 8}, {9}}));
  ASSERT_TRUE(e.Done(op));
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(std::vector<int32_t>(data.begin(), data.begin() + 8),
            (std::vector<int32_t>{10, 20, 30, 40, 50, 60, 70, 80}));
}

TEST_F(GroupEngineTest, BlocksThatDoNotFitTheGroupAreRefused) {
  int32_t x[4] = {};
  GroupEngine no_members(Params(), &leaf_, clock_);
  EXPECT_EQ(no_members.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                              .send = x, .recv = x, .count = 3, .blocks = {1, 1, 1}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument)
      << "an engine that does not know its members";
  GroupEngine e(BlockedParams(Params()), &leaf_, clock_);
  EXPECT_FALSE(e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                        .send = x, .recv = x, .count = 4, .blocks = {1, 1, 1}})
                   .ok())
      << "blocks that do not add up to count";
  EXPECT_FALSE(e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                        .send = x, .recv = x, .count = 2, .blocks = {1, 1}})
                   .ok())
      << "a block per member";
  EXPECT_FALSE(e.Start({.collective = CollectiveType::kAllreduce, .dtype = DataType::kInt32,
                        .send = x, .recv = x, .count = 3, .blocks = {1, 1, 1}})
                   .ok())
      << "allreduce has no blocks";
  EXPECT_FALSE(e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                        .send = nullptr, .recv = x, .count = 3, .blocks = {1, 1, 1}})
                   .ok())
      << "this rank's block is not empty: it needs a send buffer";
  EXPECT_TRUE(e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                       .send = nullptr, .recv = x, .count = 2, .blocks = {1, 0, 1}})
                  .ok())
      << "an empty block of its own needs none";
  EXPECT_TRUE(e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                       .send = x, .recv = nullptr, .count = 2, .blocks = {1, 0, 1}})
                  .ok());
}

}  // namespace
}  // namespace netfold::host
