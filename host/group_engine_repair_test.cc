// When the group engine asks again for a multicast result (repair):
// backoff, the wait that follows how long results take, the first wait,
// a window that drains behind other ranks' queues, a rank late to the
// operation, and gaps that say a result was lost (docs/host.md, "Loss of
// multicast results").
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/group_engine.h"
#include "host/testing/group_engine_fixture.h"

namespace netfold::host {
namespace {

using proto::AggregationMessageType;
using proto::DataType;
using proto::ReduceOp;
using testing::GroupEngineTest;

TEST_F(GroupEngineTest, LostMulticastResultIsRepairedWithBackoff) {
  GroupEngine e(Params(), &leaf_, clock_);
  int32_t x = 5;
  auto first = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kMax, .send = &x,
                         .recv = &x, .count = 1});
  e.Poll();
  Answer(e, 0, {5});  // at once: the wait is repair_after's 10 ms from now on
  ASSERT_TRUE(e.Finish(first).ok());
  clock_.Advance(absl::Milliseconds(100));
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kMax, .send = &x, .recv = &x,
                      .count = 1});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u);
  clock_.Advance(absl::Milliseconds(9));
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 2u);
  clock_.Advance(absl::Milliseconds(1));
  e.Post();  // posting only: a result may be waiting unread
  EXPECT_EQ(leaf_.sent.size(), 2u);
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u);
  EXPECT_TRUE(leaf_.IsRepairOf(2, 1));
  EXPECT_FALSE(leaf_.Header(2).has_data);
  clock_.Advance(absl::Milliseconds(10));  // backoff doubled to 20 ms: not yet
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 3u);
  clock_.Advance(absl::Milliseconds(10));
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 4u);
  Answer(e, 1, {7});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(x, 7);
  EXPECT_EQ(e.stats().repairs_sent, 2u);
}

// Before a group's first result nothing says how long results take, and
// the first window of a long operation may wait behind every rank's: the
// first wait is kFirstRepairAfter (as TCP's first timeout), not
// repair_after.
TEST_F(GroupEngineTest, TheGroupsFirstResultsAreWaitedForLonger) {
  GroupParams p = Params();  // repair_after 10 ms
  p.op_timeout = absl::Seconds(5);  // (a quarter of it would be less than kFirstRepairAfter)
  GroupEngine e(p, &leaf_, clock_);
  int32_t x = 5;
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kMax, .send = &x, .recv = &x,
                      .count = 1});
  e.Poll();
  clock_.Advance(kFirstRepairAfter - absl::Milliseconds(1));
  e.Poll();
  EXPECT_EQ(e.stats().repairs_sent, 0u);
  clock_.Advance(absl::Milliseconds(1));
  e.Poll();
  ASSERT_EQ(e.stats().repairs_sent, 1u);
  Answer(e, 0, {7});
  EXPECT_TRUE(e.Finish(op).ok());
}

// A result that takes longer than repair_after is not asked for again as
// long as results take that long: the wait follows their smoothed time
// from request to result (RFC 6298's srtt + 4 rttvar); one that is really
// lost is still asked for once that wait is over.
TEST_F(GroupEngineTest, TheRepairWaitFollowsHowLongResultsTake) {
  GroupEngine e(Params(), &leaf_, clock_);  // repair_after 10 ms, K = 2
  std::vector<int32_t> data(4 * 8, 1);      // 8 chunks
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                      .recv = data.data(), .count = data.size()});
  size_t answered = 0;
  for (int round = 0; round < 3; ++round) {  // 6 results, each 50 ms after its request
    e.Poll();
    clock_.Advance(absl::Milliseconds(50));
    Answer(e, answered++, {2, 2, 2, 2});
    Answer(e, answered++, {2, 2, 2, 2});
  }
  e.Poll();  // chunks 6 and 7; srtt 50 ms, rttvar ~6 ms: a wait of ~74 ms
  ASSERT_EQ(leaf_.sent.size(), 8u);
  clock_.Advance(absl::Milliseconds(60));
  e.Poll();
  EXPECT_EQ(e.stats().repairs_sent, 0u) << "late by the 10 ms floor, not by their usual time";
  Answer(e, 6, {2, 2, 2, 2});
  // Chunk 7's result was lost. It is asked for once no result came for the
  // wait (~79 ms now): the last one may have been queued behind chunk 6.
  clock_.Advance(absl::Milliseconds(70));
  e.Poll();
  EXPECT_EQ(e.stats().repairs_sent, 0u);
  clock_.Advance(absl::Milliseconds(10));
  e.Poll();
  ASSERT_EQ(e.stats().repairs_sent, 1u);
  EXPECT_TRUE(leaf_.IsRepairOf(8, 7));
  Answer(e, 7, {2, 2, 2, 2});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(data, std::vector<int32_t>(32, 2));
}

// The data path reads the clock once for several results of a burst and
// hands that time over: the round trip is measured to it, however late
// the engine is called.
TEST_F(GroupEngineTest, AResultTakesTheArrivalTimeItsCallerRead) {
  GroupEngine e(Params(), &leaf_, clock_);  // repair_after 10 ms, K = 2
  std::vector<int32_t> data(4 * 4, 1);      // 4 chunks
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                      .recv = data.data(), .count = data.size()});
  e.Poll();  // chunks 0 and 1
  const int64_t arrived = clock_.NowNanos() + absl::ToInt64Nanoseconds(absl::Milliseconds(40));
  clock_.Advance(absl::Milliseconds(500));
  Answer(e, 0, {2, 2, 2, 2}, proto::AggregationStatus::kOk, arrived);
  Answer(e, 1, {2, 2, 2, 2}, proto::AggregationStatus::kOk, arrived);
  e.Poll();  // chunks 2 and 3
  ASSERT_EQ(leaf_.sent.size(), 4u);
  // Two 40 ms round trips make a wait of 40 + 4 x 15 ms: chunk 2, the
  // oldest, is asked for after it (500 ms, as the clock says, would make
  // it the longest wait, 1 s).
  clock_.Advance(absl::Milliseconds(90));
  e.Poll();
  EXPECT_EQ(e.stats().repairs_sent, 0u);
  clock_.Advance(absl::Milliseconds(20));
  e.Poll();
  ASSERT_EQ(e.stats().repairs_sent, 1u);
  EXPECT_TRUE(leaf_.IsRepairOf(4, 2));
  Answer(e, 2, {2, 2, 2, 2});
  Answer(e, 3, {2, 2, 2, 2});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(data, std::vector<int32_t>(16, 2));
}

// A long operation after short ones: its window of K chunks goes out at
// once and drains behind the other ranks' queues, each result later than
// the wait learned from the short operations. As long as results keep
// coming, none is asked for again; a result really lost (later ones came)
// still is, when its own wait is over.
TEST_F(GroupEngineTest, AWindowThatDrainsSlowlyIsNotRepairedButAGapIs) {
  GroupParams p = Params();
  p.num_slots = 8;
  GroupEngine e(p, &leaf_, clock_);  // repair_after 10 ms
  int32_t x = 1;
  for (int i = 0; i < 4; ++i) {  // short operations, 2 ms each: the wait stays 10 ms
    auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = &x,
                        .recv = &x, .count = 1});
    e.Poll();
    clock_.Advance(absl::Milliseconds(2));
    Answer(e, leaf_.sent.size() - 1, {1});
    ASSERT_TRUE(e.Finish(op).ok());
  }
  const size_t first = leaf_.sent.size();
  std::vector<int32_t> data(4 * 8, 1);  // 8 chunks, the whole window
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                      .recv = data.data(), .count = data.size()});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), first + 8);
  // One result every 4 ms: chunk i's comes 4 (i + 1) ms after its request,
  // up to 32 ms against a learned wait of 10.
  for (size_t i = 0; i < 8; ++i) {
    for (int ms = 0; ms < 4; ++ms) {
      clock_.Advance(absl::Milliseconds(1));
      e.Poll();
    }
    if (i == 2) continue;  // chunk 2's result is lost
    Answer(e, first + i, {4, 4, 4, 4});
  }
  // Chunk 2 was asked for again as soon as the results of chunks 3, 4 and
  // 5 came (at 24 ms: later results showed a gap); nothing else was.
  ASSERT_EQ(e.stats().repairs_sent, 1u);
  EXPECT_TRUE(leaf_.IsRepairOf(leaf_.sent.size() - 1, leaf_.Header(first + 2).seq));
  Answer(e, first + 2, {4, 4, 4, 4});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(data, std::vector<int32_t>(32, 4));
}

// A rank that joins an operation late holds every result of it back. Its
// peers' whole windows are past their waits, but asking for results not
// computed yet gets no answer (the root stays silent): they ask for the
// oldest chunk alone, once per wait (with backoff), not for every chunk of
// their windows. Once results come, a result lost among them (later ones
// came) is asked for at once, and the tail of the window chunk by chunk
// as each becomes the oldest.
TEST_F(GroupEngineTest, WhileNoResultComesOnlyTheOldestChunkIsAskedFor) {
  GroupParams p = Params();
  p.num_slots = 8;
  p.op_timeout = absl::Seconds(10);
  GroupEngine e(p, &leaf_, clock_);  // repair_after 10 ms
  int32_t x = 1;
  auto first = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = &x, .recv = &x,
                         .count = 1});
  e.Poll();
  Answer(e, 0, {1});  // the group's first result: the wait is 10 ms from now on
  ASSERT_TRUE(e.Finish(first).ok());
  clock_.Advance(absl::Seconds(1));  // the application computes

  std::vector<int32_t> data(4 * 8, 1);  // 8 chunks, the whole window
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                      .recv = data.data(), .count = data.size()});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 9u);
  for (int ms = 0; ms < 300; ++ms) {  // a peer comes 300 ms late
    clock_.Advance(absl::Milliseconds(1));
    e.Poll();
  }
  // Asked for at 10, 30, 70, 150 and 310 ms: the backoff of one chunk.
  EXPECT_EQ(e.stats().repairs_sent, 4u);
  for (size_t i = 9; i < leaf_.sent.size(); ++i) {
    EXPECT_TRUE(leaf_.IsRepairOf(i, 1)) << "only the oldest chunk";
  }
  // The results come; those of chunks 3 and 7 are lost.
  for (size_t c = 0; c < 8; ++c) {
    if (c != 3 && c != 7) Answer(e, 1 + c, {4, 4, 4, 4});
  }
  e.Poll();  // chunk 3: later results came
  ASSERT_EQ(e.stats().repairs_sent, 5u);
  EXPECT_EQ(leaf_.Header(leaf_.sent.size() - 1).seq, 4u);
  Answer(e, 4, {4, 4, 4, 4});
  // Chunk 7, now the oldest, once nothing came for a wait: 10 ms still
  // (results late for a late rank say nothing of the round trip).
  int waited_ms = 0;
  while (e.stats().repairs_sent == 5 && waited_ms <= 1000) {
    clock_.Advance(absl::Milliseconds(1));
    e.Poll();
    ++waited_ms;
  }
  ASSERT_EQ(e.stats().repairs_sent, 6u);
  EXPECT_EQ(waited_ms, 10);
  EXPECT_EQ(leaf_.Header(leaf_.sent.size() - 1).seq, 8u);
  Answer(e, 8, {4, 4, 4, 4});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(data, std::vector<int32_t>(32, 4));
}

}  // namespace
}  // namespace netfold::host
