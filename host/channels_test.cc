// Channels (host/channels.h): a group's operations spread chunk by chunk
// over several fabric groups, against scripted leaves: which chunks each
// channel carries, where their results land, an operation with nothing for
// a channel, and the channels failing, writing and counting as one.
#include "host/channels.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/testing/group_engine_fixture.h"

namespace netfold::host {
namespace {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DataType;
using proto::ReduceOp;
using testing::FakeLeaf;

class ChannelsTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kChannels = 2;

  // Channel c of kChannels: K = 2 slots of four int32.
  GroupParams Params(uint32_t c) {
    GroupParams p;
    p.tree_id = 1;
    p.group_id = 9 + c;
    p.rank = 3;
    p.num_slots = 2;
    p.slot_bytes = 16;
    p.op_timeout = absl::Seconds(1);
    p.members = {3, 4};
    p.channel = c;
    p.channels = kChannels;
    return p;
  }

  Channels Make() {
    std::vector<FabricChannel> cs;
    for (uint32_t c = 0; c < kChannels; ++c) {
      cs.push_back({.group_id = 9 + c,
                    .plane = c,
                    .engine = std::make_unique<GroupEngine>(Params(c), &leaves_[c], clock_)});
    }
    return Channels(std::move(cs));
  }

  // The elements of leaf `leaf`'s request `i`.
  std::vector<int32_t> Elements(size_t leaf, size_t i) {
    const std::vector<uint8_t>& m = leaves_[leaf].sent.at(i);
    std::vector<int32_t> v((m.size() - proto::kAggregationHeaderSize) / 4);
    std::memcpy(v.data(), m.data() + proto::kAggregationHeaderSize, v.size() * 4);
    return v;
  }

  // Answers leaf `leaf`'s request `i` with `values` (or an error status).
  void Answer(GroupEngine& e, size_t leaf, size_t i, std::vector<int32_t> values,
              AggregationStatus status = AggregationStatus::kOk) {
    AggregationHeader h = leaves_[leaf].Header(i);
    h.type = AggregationMessageType::kResult;
    h.status = status;
    h.has_data = status == AggregationStatus::kOk && !values.empty();
    e.OnMessage(h, {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4});
  }

  FakeClock clock_;
  FakeLeaf leaves_[kChannels];
};

// Chunk i goes to channel i mod 2, each channel numbering its own from
// seq 0, and its result lands where chunk i is in the vector.
TEST_F(ChannelsTest, ChunksGoToTheChannelsInTurn) {
  Channels ch = Make();
  std::vector<int32_t> in(18), out(18, -1);  // 5 chunks: 4 x 4 + 2
  std::iota(in.begin(), in.end(), 0);
  auto op = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = in.data(),
                      .recv = out.data(), .count = in.size()});
  ASSERT_TRUE(op.ok()) << op.status();
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 2u) << "chunks 0 and 2; chunk 4 waits for the window";
  ASSERT_EQ(leaves_[1].sent.size(), 2u) << "chunks 1 and 3";
  EXPECT_EQ(Elements(0, 0), std::vector<int32_t>({0, 1, 2, 3}));
  EXPECT_EQ(Elements(1, 0), std::vector<int32_t>({4, 5, 6, 7}));
  EXPECT_EQ(Elements(0, 1), std::vector<int32_t>({8, 9, 10, 11}));
  EXPECT_EQ(Elements(1, 1), std::vector<int32_t>({12, 13, 14, 15}));
  EXPECT_EQ(leaves_[1].Header(1).seq, 1u) << "each channel's own sequence";
  EXPECT_EQ(leaves_[1].Header(0).group_id, 10u);
  // Results are the elements times ten.
  auto tenfold = [&](size_t leaf, size_t i) {
    std::vector<int32_t> v = Elements(leaf, i);
    for (int32_t& x : v) x *= 10;
    return v;
  };
  Answer(ch.engine(1), 1, 0, tenfold(1, 0));
  Answer(ch.engine(1), 1, 1, tenfold(1, 1));
  EXPECT_TRUE(ch.engine(1).Done(*op)) << "channel 1 carried two chunks";
  EXPECT_FALSE(ch.Done(*op));
  Answer(ch.engine(0), 0, 0, tenfold(0, 0));
  std::optional<WrittenChunks> w = ch.Written(*op);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->first_missing, 2u) << "chunks 0 and 1 from two channels";
  EXPECT_EQ(w->window, std::vector<bool>({false, true})) << "chunk 3";
  EXPECT_EQ(w->chunk_bytes, 16u);
  ch.engine(0).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 3u);
  EXPECT_EQ(Elements(0, 2), std::vector<int32_t>({16, 17}));
  Answer(ch.engine(0), 0, 1, tenfold(0, 1));
  Answer(ch.engine(0), 0, 2, tenfold(0, 2));
  ASSERT_TRUE(ch.Done(*op));
  EXPECT_TRUE(ch.Finish(*op).ok());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], 10 * in[i]) << i;
  EXPECT_EQ(ch.stats().ops_started, 1u) << "an operation counts once";
  EXPECT_EQ(ch.stats().ops_completed, 1u);
  EXPECT_EQ(ch.stats().chunks_posted, 5u);
  EXPECT_EQ(ch.window_slots(), 4u) << "K of each channel";
}

// The channels keep in step: a channel posts chunk g only once every
// channel has the results of its chunks up to g - N x K (here 4), so the
// chunks written of a result are never more than N x K apart.
TEST_F(ChannelsTest, NoChannelRunsAWindowAheadOfAnother) {
  Channels ch = Make();
  std::vector<int32_t> v(48, 1);  // 12 chunks, 6 per channel, K = 2 each
  auto op = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = v.data(),
                      .recv = v.data(), .count = v.size()});
  ASSERT_TRUE(op.ok());
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 2u);  // chunks 0, 2
  ASSERT_EQ(leaves_[1].sent.size(), 2u);  // chunks 1, 3
  Answer(ch.engine(1), 1, 0, {2, 2, 2, 2});
  Answer(ch.engine(1), 1, 1, {2, 2, 2, 2});
  ch.engine(1).Poll();
  EXPECT_EQ(leaves_[1].sent.size(), 2u) << "chunk 5 waits: chunk 0 (channel 0's) has no result";
  ASSERT_TRUE(ch.engine(1).NextTimerNs().has_value());
  EXPECT_GT(*ch.engine(1).NextTimerNs(), clock_.NowNanos())
      << "a chunk the gate holds is no work for now: the wait would spin";
  Answer(ch.engine(0), 0, 0, {2, 2, 2, 2});
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[1].sent.size(), 3u) << "chunk 5 may go once chunk 0 is in";
  EXPECT_EQ(leaves_[1].Header(2).seq, 2u);
  ch.engine(1).Poll();
  EXPECT_EQ(leaves_[1].sent.size(), 3u) << "chunk 7 waits for chunk 2";
  std::optional<WrittenChunks> w = ch.Written(*op);
  ASSERT_TRUE(w.has_value());
  EXPECT_LE(w->window.size(), 4u);
  // Every result in turn: the operation completes.
  for (size_t guard = 0; !ch.Done(*op) && guard < 100; ++guard) {
    for (size_t c = 0; c < kChannels; ++c) {
      ch.engine(c).Poll();
      for (size_t i = 0; i < leaves_[c].sent.size(); ++i) {
        if (ch.engine(c).idle()) break;
        Answer(ch.engine(c), c, i, {2, 2, 2, 2});
      }
    }
  }
  ASSERT_TRUE(ch.Done(*op));
  EXPECT_TRUE(ch.Finish(*op).ok());
  EXPECT_EQ(v, std::vector<int32_t>(48, 2));
}

// An operation of one chunk (and a barrier) is channel 0's alone: the
// others are done with it at once and send nothing.
TEST_F(ChannelsTest, AnOperationOfOneChunkIsTheFirstChannelsAlone) {
  Channels ch = Make();
  std::vector<int32_t> v = {1, 2, 3};
  auto op = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = v.data(),
                      .recv = v.data(), .count = v.size()});
  ASSERT_TRUE(op.ok());
  auto barrier = ch.Start({.collective = CollectiveType::kBarrier});
  ASSERT_TRUE(barrier.ok());
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  EXPECT_EQ(leaves_[0].sent.size(), 2u);
  EXPECT_TRUE(leaves_[1].sent.empty());
  EXPECT_TRUE(ch.engine(1).idle());
  Answer(ch.engine(0), 0, 0, {2, 4, 6});
  Answer(ch.engine(0), 0, 1, {});
  EXPECT_TRUE(ch.Finish(*op).ok());
  EXPECT_TRUE(ch.Finish(*barrier).ok());
  EXPECT_EQ(v, std::vector<int32_t>({2, 4, 6}));
}

// An allgather (a bcast per block) across channels: the chunks of every
// block go to the channels in turn, continuing across blocks.
TEST_F(ChannelsTest, BlocksAreChunkedAcrossTheChannels) {
  Channels ch = Make();
  // Rank 3 is member 0: its block of 9 elements is 3 chunks (0, 1, 2);
  // member 1's block of 4 is chunk 3.
  std::vector<int32_t> mine(9), out(13, -1);
  std::iota(mine.begin(), mine.end(), 100);
  auto op = ch.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                      .send = mine.data(), .recv = out.data(), .count = 13, .blocks = {9, 4}});
  ASSERT_TRUE(op.ok()) << op.status();
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 2u);  // chunks 0 and 2
  ASSERT_EQ(leaves_[1].sent.size(), 2u);  // chunks 1 and 3
  EXPECT_EQ(Elements(0, 1), std::vector<int32_t>({108}));
  EXPECT_EQ(Elements(1, 0), std::vector<int32_t>({104, 105, 106, 107}));
  EXPECT_TRUE(Elements(1, 1).empty()) << "member 1's block: no data from this rank";
  EXPECT_EQ(leaves_[1].Header(1).root_rank, 4u);
  Answer(ch.engine(0), 0, 0, {100, 101, 102, 103});
  Answer(ch.engine(0), 0, 1, {108});
  Answer(ch.engine(1), 1, 0, {104, 105, 106, 107});
  Answer(ch.engine(1), 1, 1, {7, 7, 7, 7});
  ASSERT_TRUE(ch.Done(*op));
  EXPECT_TRUE(ch.Finish(*op).ok());
  EXPECT_EQ(out, std::vector<int32_t>({100, 101, 102, 103, 104, 105, 106, 107, 108, 7, 7, 7, 7}));
}

// A reduce-scatter whose vector fits the window runs as one allreduce
// into a staged result, of which each rank keeps its block: each channel
// copies the chunks it carried, not the rest of the block over another
// channel's.
TEST_F(ChannelsTest, ASmallReduceScattersChannelsEachKeepTheirOwnChunks) {
  std::vector<FabricChannel> cs;
  for (uint32_t c = 0; c < kChannels; ++c) {
    GroupParams p = Params(c);
    p.members = {0, 1, 2, 4, 5, 6, 7, 3};  // this rank (3) is member 7
    cs.push_back({.group_id = 9 + c,
                  .engine = std::make_unique<GroupEngine>(p, &leaves_[c], clock_)});
  }
  Channels ch(std::move(cs));
  // Blocks of 1 element each: 8 elements, 2 chunks as one allreduce
  // (against 8 as blocks); member 7's element is in chunk 1 (channel 1).
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6, 7, 8}, out = {-1};
  auto op = ch.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .send = in.data(), .recv = out.data(), .count = 8,
                      .blocks = {1, 1, 1, 1, 1, 1, 1, 1}});
  ASSERT_TRUE(op.ok()) << op.status();
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 1u);
  ASSERT_EQ(leaves_[1].sent.size(), 1u);
  Answer(ch.engine(1), 1, 0, {50, 60, 70, 80});
  EXPECT_EQ(out[0], 80) << "channel 1 carried member 7's element";
  Answer(ch.engine(0), 0, 0, {10, 20, 30, 40});
  ASSERT_TRUE(ch.Done(*op));
  EXPECT_TRUE(ch.Finish(*op).ok());
  EXPECT_EQ(out[0], 80) << "channel 0 wrote over it";
}

// An in-place reduce-scatter: a rank's block of the result lands over the
// first elements of its input, which another channel may not have sent
// yet. The channels send from a copy.
TEST_F(ChannelsTest, AnInPlaceReduceScatterSendsItsInputNotAnotherChannelsResult) {
  std::vector<FabricChannel> cs;
  for (uint32_t c = 0; c < kChannels; ++c) {
    GroupParams p = Params(c);
    p.members = {4, 3};  // this rank is member 1: its block is chunk 1, channel 1's
    cs.push_back({.group_id = 9 + c,
                  .engine = std::make_unique<GroupEngine>(p, &leaves_[c], clock_)});
  }
  Channels ch(std::move(cs));
  std::vector<int32_t> v = {1, 2, 3, 4, 5, 6, 7, 8};
  auto op = ch.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .send = v.data(), .recv = v.data(), .count = 8,
                      .blocks = {4, 4}});
  ASSERT_TRUE(op.ok()) << op.status();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[1].sent.size(), 1u);
  EXPECT_EQ(Elements(1, 0), std::vector<int32_t>({5, 6, 7, 8}));
  Answer(ch.engine(1), 1, 0, {50, 60, 70, 80});
  EXPECT_EQ(v[0], 50) << "this rank's block of the result, over the input";
  ch.engine(0).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 1u);
  EXPECT_EQ(Elements(0, 0), std::vector<int32_t>({1, 2, 3, 4})) << "the input, not the result";
  Answer(ch.engine(0), 0, 0, {});
  EXPECT_TRUE(ch.Finish(*op).ok());
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.begin() + 4), std::vector<int32_t>({50, 60, 70, 80}));
}

// A channel that fails fails the group: the others stop with it, and the
// operation's outcome is the failure.
TEST_F(ChannelsTest, OneChannelFailingFailsThemAll) {
  Channels ch = Make();
  std::vector<int32_t> v(32, 1);  // 8 chunks, 4 per channel
  auto op = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = v.data(),
                      .recv = v.data(), .count = v.size()});
  ASSERT_TRUE(op.ok());
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  EXPECT_TRUE(ch.failure().ok());
  // The data path fails one channel's engine (its plane's link); until the
  // group looks, the other must not run ahead of what the failed one wrote.
  ch.engine(1).Fail(absl::UnavailableError("plane 1 lost its leaf"));
  EXPECT_TRUE(absl::IsUnavailable(ch.failure()));
  Answer(ch.engine(0), 0, 0, {2, 2, 2, 2});
  ch.engine(0).Poll();
  EXPECT_EQ(leaves_[0].sent.size(), 2u) << "chunk 4 went out past a failed channel";
  ASSERT_TRUE(ch.Done(*op)) << "channel 0 is failed with it, not waited for";
  EXPECT_TRUE(absl::IsUnavailable(ch.engine(0).failure()));
  EXPECT_TRUE(absl::IsUnavailable(ch.Finish(*op)));
  EXPECT_EQ(ch.stats().ops_failed, 1u) << "failed on one channel: failed";
  EXPECT_EQ(ch.stats().ops_completed, 0u);
  auto next = ch.Start({.collective = CollectiveType::kBarrier});
  EXPECT_TRUE(absl::IsFailedPrecondition(next.status()));
}

// An operation counts once: failed if one channel's part of it failed
// (an error result fails the operation, not the channel), whichever.
TEST_F(ChannelsTest, AnOperationFailedOnOneChannelCountsOnceAsFailed) {
  Channels ch = Make();
  std::vector<int32_t> a(8, 1), b(8, 1);  // 2 chunks each: one per channel
  auto first = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = a.data(),
                         .recv = a.data(), .count = a.size()});
  auto second = ch.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = b.data(),
                          .recv = b.data(), .count = b.size()});
  ASSERT_TRUE(first.ok() && second.ok());
  ch.engine(0).Poll();
  ch.engine(1).Poll();
  ASSERT_EQ(leaves_[0].sent.size(), 2u);
  ASSERT_EQ(leaves_[1].sent.size(), 2u);
  Answer(ch.engine(0), 0, 0, {}, AggregationStatus::kMismatch);  // the first, on channel 0
  Answer(ch.engine(1), 1, 0, {2, 2, 2, 2});
  Answer(ch.engine(0), 0, 1, {2, 2, 2, 2});
  Answer(ch.engine(1), 1, 1, {}, AggregationStatus::kMismatch);  // the second, on channel 1
  EXPECT_FALSE(ch.Finish(*first).ok());
  EXPECT_FALSE(ch.Finish(*second).ok());
  EXPECT_EQ(ch.stats().ops_started, 2u);
  EXPECT_EQ(ch.stats().ops_failed, 2u);
  EXPECT_EQ(ch.stats().ops_completed, 0u);
}

TEST(MergeWritten, EachChannelsChunksTogether) {
  // Channel 0 of two wrote chunks 0 and 4 (of 0, 2, 4), channel 1 none.
  WrittenChunks a{.chunk_bytes = 8, .first_missing = 1, .window = {false, false, false, true}};
  WrittenChunks b{.chunk_bytes = 8};
  WrittenChunks m = MergeWritten({a, b});
  EXPECT_EQ(m.first_missing, 1u);
  EXPECT_EQ(m.End(), 5u);
  EXPECT_TRUE(m.Has(4));
  EXPECT_FALSE(m.Has(2));
  // Channel 1 wrote chunks 1 and 3.
  WrittenChunks c{.chunk_bytes = 8, .first_missing = 0, .window = {false, true, false, true}};
  m = MergeWritten({a, c});
  EXPECT_EQ(m.first_missing, 2u) << "0 from one, 1 from the other";
  EXPECT_TRUE(m.Has(3));
  EXPECT_TRUE(m.Has(4));
  EXPECT_FALSE(m.Has(2));
}

}  // namespace
}  // namespace netfold::host
