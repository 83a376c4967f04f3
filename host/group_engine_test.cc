// The host group engine against a scripted leaf: chunking, the K window,
// results in place, duplicates, errors, deadlines (when lost results are
// asked for again: group_engine_repair_test.cc; bcast runs and blocked
// operations: group_engine_blocks_test.cc).
#include "host/group_engine.h"

#include <cstring>
#include <random>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/error_codes.h"
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


// Posted: every chunk handed to the sender (what lets a reduce's non-root
// return, host/group.h), not while the window or a full queue holds one.
TEST_F(GroupEngineTest, PostedOnlyOnceTheSenderTookEveryChunk) {
  GroupEngine e(Params(), &leaf_, clock_);
  std::vector<int32_t> data(10, 1), out(10);  // 3 chunks, K = 2
  auto op = e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                     .op = ReduceOp::kSum, .root = 0, .send = data.data(), .recv = out.data(),
                     .count = data.size()});
  ASSERT_TRUE(op.ok());
  EXPECT_FALSE(e.Posted(*op)) << "nothing sent before Poll";
  e.Poll();
  EXPECT_FALSE(e.Posted(*op)) << "the third chunk waits for the window";
  leaf_.refuse_next = 1;
  Answer(e, 0, {});
  e.Poll();
  EXPECT_FALSE(e.Posted(*op)) << "the sender refused the third chunk: it still reads the buffer";
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 3u);
  EXPECT_TRUE(e.Posted(*op));
  EXPECT_FALSE(e.Done(*op));
  EXPECT_TRUE(e.Posted(12345)) << "unknown operations hold no buffer";
}

// A link may send the elements from the caller's buffer (as a NIC does):
// the engine tells it to let go of that memory, once, before it hands the
// buffer back: when every result is in, when a reduce's non-root may
// return (Posted), or when the group fails.
TEST_F(GroupEngineTest, TheSenderLetsGoOfTheSendBufferBeforeItIsHandedBack) {
  auto covers = [](std::span<const uint8_t> s, const std::vector<int32_t>& v, size_t elements) {
    return s.data() == reinterpret_cast<const uint8_t*>(v.data()) &&
           s.size() == elements * sizeof(int32_t);
  };
  {
    GroupEngine e(Params(), &leaf_, clock_);
    std::vector<int32_t> data(10, 1), out(10);  // 3 chunks, K = 2
    auto op = e.Start({.collective = CollectiveType::kAllreduce, .dtype = DataType::kInt32,
                       .op = ReduceOp::kSum, .send = data.data(), .recv = out.data(),
                       .count = data.size()});
    ASSERT_TRUE(op.ok());
    e.Poll();
    Answer(e, 0, {1, 1, 1, 1});
    e.Poll();
    Answer(e, 1, {1, 1, 1, 1});
    EXPECT_TRUE(leaf_.released.empty()) << "a result still to come: the buffer is still read";
    Answer(e, 2, {1, 1});
    ASSERT_TRUE(e.Done(*op));
    ASSERT_EQ(leaf_.released.size(), 1u);
    EXPECT_TRUE(covers(leaf_.released[0], data, 10));
    EXPECT_TRUE(e.Finish(*op).ok());
  }
  leaf_ = FakeLeaf{};
  {
    // A reduce at a non-root: let go of once every chunk was posted.
    GroupEngine e(Params(), &leaf_, clock_);
    std::vector<int32_t> data(10, 1), out(10);
    auto op = e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                       .op = ReduceOp::kSum, .root = 0, .send = data.data(), .recv = out.data(),
                       .count = data.size()});
    ASSERT_TRUE(op.ok());
    e.Poll();
    Answer(e, 0, {});
    e.Poll();
    EXPECT_TRUE(leaf_.released.empty());
    ASSERT_TRUE(e.Posted(*op));
    ASSERT_EQ(leaf_.released.size(), 1u);
    EXPECT_TRUE(covers(leaf_.released[0], data, 10));
    Answer(e, 1, {});
    Answer(e, 2, {});
    EXPECT_TRUE(e.Done(*op));
    EXPECT_EQ(leaf_.released.size(), 1u) << "once";
  }
  leaf_ = FakeLeaf{};
  {
    // The group fails with two chunks out: what was sent is let go of.
    GroupEngine e(Params(), &leaf_, clock_);
    std::vector<int32_t> data(10, 1), out(10);
    auto op = e.Start({.collective = CollectiveType::kAllreduce, .dtype = DataType::kInt32,
                       .op = ReduceOp::kSum, .send = data.data(), .recv = out.data(),
                       .count = data.size()});
    ASSERT_TRUE(op.ok());
    e.Poll();
    e.Fail(absl::AbortedError("revoked"));
    ASSERT_EQ(leaf_.released.size(), 1u);
    EXPECT_TRUE(covers(leaf_.released[0], data, 8));
    EXPECT_FALSE(e.Finish(*op).ok());
  }
}

// Placed receives (transport::ReceivePlacer): the engine offers each chunk
// in flight its place in the result buffer, oldest first, a place once a
// result claimed it no more, and takes a result whose elements are already
// there without writing them; it offers nothing where the result buffer is
// also read (in place, a bcast root) or with the integrity tag.
TEST_F(GroupEngineTest, OffersEachChunkItsPlaceUntilAResultClaimsIt) {
  GroupEngine e(Params(), &leaf_, clock_);
  std::vector<int32_t> data(6, 1), out(6, -1);  // chunks of 4 and 2, K = 2
  auto op = e.Start({.collective = CollectiveType::kAllreduce, .dtype = DataType::kInt32,
                     .op = ReduceOp::kSum, .send = data.data(), .recv = out.data(),
                     .count = data.size()});
  ASSERT_TRUE(op.ok());
  transport::ReceivePlace places[4];
  EXPECT_EQ(e.PredictPlaces(places), 0u) << "nothing in flight";
  e.Poll();
  ASSERT_EQ(e.PredictPlaces(places), 2u);
  auto* recv = reinterpret_cast<uint8_t*>(out.data());
  EXPECT_EQ(places[0].at, recv);
  EXPECT_EQ(places[0].len, 16u);
  EXPECT_EQ(places[0].head, GroupEngine::kResultHead);
  EXPECT_EQ(places[0].tail, proto::kIcrcSize);
  EXPECT_EQ(places[1].at, recv + 16);
  EXPECT_EQ(places[1].len, 8u);
  AggregationHeader h0 = leaf_.Header(0), h1 = leaf_.Header(1);
  for (AggregationHeader* h : {&h0, &h1}) {
    h->type = AggregationMessageType::kResult;
    h->has_data = true;
  }
  EXPECT_FALSE(e.ClaimPlace(h1, places[0])) << "another chunk's place";
  AggregationHeader tagged = h0;
  tagged.has_tag = true;
  EXPECT_FALSE(e.ClaimPlace(tagged, places[0]));
  ASSERT_TRUE(e.ClaimPlace(h0, places[0]));
  EXPECT_FALSE(e.ClaimPlace(h0, places[0])) << "claimed once";
  ASSERT_EQ(e.PredictPlaces(places), 1u) << "the claimed place is not offered again";
  EXPECT_EQ(places[0].at, recv + 16);
  // The port wrote chunk 0's result into its place; the engine takes it
  // from there.
  const int32_t sum[4] = {5, 5, 5, 5};
  std::memcpy(recv, sum, sizeof(sum));
  e.OnMessage(h0, {recv, 16});
  Answer(e, 1, {7, 7});
  ASSERT_TRUE(e.Done(*op));
  EXPECT_TRUE(e.Finish(*op).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{5, 5, 5, 5, 7, 7}));
  EXPECT_EQ(e.PredictPlaces(places), 0u);

  // Where the result buffer is read too: no place.
  auto none_in_flight = [&](const CollectiveArgs& args, std::optional<proto::AggregationKey> key) {
    GroupParams p = Params();
    p.integrity_key = key;
    if (key) p.slot_bytes += proto::kAggregationTagSize;  // the tag's room
    GroupEngine g(p, &leaf_, clock_);
    EXPECT_TRUE(g.Start(args).ok());
    g.Poll();
    return g.PredictPlaces(places) == 0;
  };
  const CollectiveArgs in_place{.collective = CollectiveType::kAllreduce,
                                .dtype = DataType::kInt32, .op = ReduceOp::kSum,
                                .send = out.data(), .recv = out.data(), .count = out.size()};
  EXPECT_TRUE(none_in_flight(in_place, std::nullopt)) << "in place";
  CollectiveArgs bcast{.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                       .root = Params().rank, .send = out.data(), .recv = out.data(),
                       .count = out.size()};
  EXPECT_TRUE(none_in_flight(bcast, std::nullopt)) << "a bcast's root";
  bcast.root = 0;
  EXPECT_FALSE(none_in_flight(bcast, std::nullopt)) << "a bcast's other ranks";
  CollectiveArgs apart = in_place;
  apart.send = data.data();
  EXPECT_TRUE(none_in_flight(apart, proto::AggregationKey{})) << "with the integrity tag";
  EXPECT_FALSE(none_in_flight(apart, std::nullopt));
}

// Written (the failover's view, host/resync.h): the chunks whose result
// reached the buffer, whole, and no others, also after the op failed.
TEST_F(GroupEngineTest, WrittenSaysWhichChunksReachedTheBuffer) {
  GroupParams params = Params();
  params.num_slots = 4;
  GroupEngine e(params, &leaf_, clock_);
  std::vector<int32_t> data(18, 7);  // 5 chunks: 4 x 4 + 2
  auto op = e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                     .recv = data.data(), .count = data.size()});
  ASSERT_TRUE(op.ok());
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  Answer(e, 0, {1, 1, 1, 1});
  Answer(e, 2, {3, 3, 3, 3});
  Answer(e, 3, {}, AggregationStatus::kAborted);  // an error writes nothing
  std::optional<WrittenChunks> w = e.Written(*op);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->chunk_bytes, 16u);
  EXPECT_EQ(w->first_missing, 1u);
  EXPECT_EQ(w->window, std::vector<bool>({false, true}));
  EXPECT_EQ(w->End(), 3u);
  e.Fail(absl::UnavailableError("the leaf went away"));
  ASSERT_TRUE(e.Done(*op));
  w = e.Written(*op);
  ASSERT_TRUE(w.has_value()) << "known until Finish";
  EXPECT_EQ(w->first_missing, 1u);
  EXPECT_EQ(data, std::vector<int32_t>({1, 1, 1, 1, 7, 7, 7, 7, 3, 3, 3, 3, 7, 7, 7, 7, 7, 7}));
  EXPECT_FALSE(e.Finish(*op).ok());
  EXPECT_FALSE(e.Written(*op).has_value());
  auto bcast = e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32,
                        .root = 3, .send = data.data(), .recv = data.data(), .count = 4});
  EXPECT_FALSE(bcast.ok() && e.Written(*bcast).has_value()) << "allreduces only";
}

TEST_F(GroupEngineTest, ChunksStreamThroughTheWindowAndLandInPlace) {
  GroupEngine e(Params(), &leaf_, clock_);
  std::vector<int32_t> data = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 3 chunks: 4 + 4 + 2
  auto op = e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                     .recv = data.data(), .count = data.size()});
  ASSERT_TRUE(op.ok());
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u) << "K = 2 chunks in flight";
  EXPECT_EQ(leaf_.Header(0).seq, 0u);
  EXPECT_EQ(leaf_.Header(0).count, 4u);
  EXPECT_EQ(leaf_.Header(1).seq, 1u);
  EXPECT_EQ(leaf_.Header(0).epoch, 2u);
  EXPECT_EQ(leaf_.Header(0).group_id, 9u);
  // Results out of order: seq 1 first does not open the window (seq 0 is oldest).
  Answer(e, 1, {50, 60, 70, 80});
  e.Poll();
  EXPECT_EQ(leaf_.sent.size(), 2u);
  Answer(e, 0, {10, 20, 30, 40});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u);
  EXPECT_EQ(leaf_.Header(2).count, 2u);
  // The request of chunk 2 carried the original input (in place is safe).
  std::vector<uint8_t> third = leaf_.sent[2];
  int32_t first_of_third;
  std::memcpy(&first_of_third, third.data() + proto::kAggregationHeaderSize, 4);
  EXPECT_EQ(first_of_third, 9);
  EXPECT_FALSE(e.Done(*op));
  Answer(e, 2, {90, 100});
  EXPECT_TRUE(e.Done(*op));
  EXPECT_TRUE(e.Finish(*op).ok());
  EXPECT_EQ(data, (std::vector<int32_t>{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}));
  EXPECT_TRUE(e.idle());
  Answer(e, 2, {90, 100});  // late duplicate (multicast and repair both came)
  EXPECT_EQ(e.stats().duplicate_results, 1u);
}

// What the failover's resync relies on (KeptResult, host/resync.h): when
// chunk s goes out, the results of every chunk up to s - K are already in
// the caller's buffer, whatever order the results come in.
TEST_F(GroupEngineTest, WhenChunkSGoesOutEveryResultUpToSMinusKHasLanded) {
  const GroupParams params = Params();
  const size_t k = params.num_slots, per_chunk = params.slot_bytes / 4, chunks = 10;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    leaf_.sent.clear();
    std::mt19937 random(seed);
    GroupEngine e(params, &leaf_, clock_);
    std::vector<int32_t> data(chunks * per_chunk - 1, 1);  // the last chunk one short
    auto op = e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                       .recv = data.data(), .count = data.size()});
    ASSERT_TRUE(op.ok());
    e.Poll();
    std::vector<size_t> unanswered;
    size_t checked = 0;
    while (!e.Done(*op)) {
      for (; checked < leaf_.sent.size(); ++checked) {
        unanswered.push_back(checked);
        const uint64_t seq = leaf_.Header(checked).seq;
        for (size_t i = 0; i + k <= seq; ++i) {
          for (size_t j = i * per_chunk; j < (i + 1) * per_chunk; ++j) {
            ASSERT_EQ(data[j], 7) << "seed " << seed << ": chunk " << seq << " went out before "
                                  << "the result of chunk " << i << " landed";
          }
        }
      }
      ASSERT_FALSE(unanswered.empty()) << "seed " << seed;
      const size_t pick = random() % unanswered.size();
      const size_t i = unanswered[pick];
      unanswered.erase(unanswered.begin() + static_cast<std::ptrdiff_t>(pick));
      Answer(e, i, std::vector<int32_t>(leaf_.Header(i).count, 7));
      e.Poll();
    }
    ASSERT_TRUE(e.Finish(*op).ok());
    EXPECT_EQ(leaf_.sent.size(), chunks);
    EXPECT_EQ(data, std::vector<int32_t>(data.size(), 7));
  }
}

TEST_F(GroupEngineTest, ErrorResultFailsTheOperationButKeepsTheRanksAligned) {
  GroupEngine e(Params(), &leaf_, clock_);
  std::vector<int32_t> a(8, 1), b(4, 1);
  auto op1 = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = a.data(),
                       .recv = a.data(), .count = 8});
  auto op2 = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = b.data(),
                       .recv = b.data(), .count = 4});
  e.Poll();
  Answer(e, 0, {}, AggregationStatus::kMismatch);
  e.Poll();
  Answer(e, 1, {2, 2, 2, 2});  // op1's second chunk is still collected
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u);
  EXPECT_EQ(leaf_.Header(2).seq, 2u) << "op2 got the next sequence number on every rank";
  Answer(e, 2, {3, 3, 3, 3});
  absl::Status s = e.Finish(op1);
  EXPECT_EQ(ToErrorCode(s), NETFOLD_ERR_MISMATCH) << s;
  EXPECT_TRUE(e.Finish(op2).ok());
  EXPECT_TRUE(e.failure().ok()) << "the group itself is fine";
}

TEST_F(GroupEngineTest, ReduceWithoutMulticastGoesToTheRootAlone) {
  GroupParams p = Params();
  p.delivery = DeliveryMode::kRcTree;
  GroupEngine e(p, &leaf_, clock_);
  int32_t in[4] = {1, 2, 3, 4}, out[4] = {};
  auto op = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 4});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 1u);
  EXPECT_EQ(leaf_.Header(0).delivery, DeliveryMode::kToRoot);
  Answer(e, 0, {});
  EXPECT_TRUE(e.Finish(op).ok());
}

TEST_F(GroupEngineTest, RcDeliveryNeverRepairsButHasADeadline) {
  GroupParams p = Params();
  p.delivery = DeliveryMode::kRcTree;
  GroupEngine e(p, &leaf_, clock_);
  int32_t x = 5;
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kMax, .send = &x, .recv = &x,
                      .count = 1});
  e.Poll();
  for (int i = 0; i < 99; ++i) {
    clock_.Advance(absl::Milliseconds(10));
    e.Poll();
  }
  EXPECT_EQ(leaf_.sent.size(), 1u) << "no repair over RC";
  EXPECT_FALSE(e.Done(op));
  clock_.Advance(absl::Milliseconds(10));
  e.Poll();
  ASSERT_TRUE(e.Done(op));
  EXPECT_EQ(e.Finish(op).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(e.Start({.collective = CollectiveType::kBarrier}).ok()) << "the group failed";
}

TEST_F(GroupEngineTest, AbortFailsEverythingPending) {
  GroupEngine e(Params(), &leaf_, clock_);
  auto op = *e.Start({.collective = CollectiveType::kBarrier});
  e.Poll();
  AggregationHeader h = leaf_.Header(0);
  h.type = AggregationMessageType::kAbort;
  h.status = AggregationStatus::kAborted;
  h.has_data = false;
  e.OnMessage(h, {});
  const absl::Status s = e.Finish(op);
  EXPECT_EQ(ToErrorCode(s), NETFOLD_ERR_ABORTED);
  // A revocation names no operation (the abort's seq is 0, whatever ran).
  EXPECT_NE(s.message().find("revoked"), std::string_view::npos) << s;
  EXPECT_EQ(s.message().find("operation 0"), std::string_view::npos) << s;
  EXPECT_EQ(e.Start({.collective = CollectiveType::kBarrier}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(GroupEngineTest, FullSendQueueIsRetriedNotLost) {
  GroupEngine e(Params(), &leaf_, clock_);
  leaf_.refuse_next = 1;
  int32_t x = 1;
  auto op = *e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = &x, .recv = &x,
                      .count = 1});
  e.Poll();
  EXPECT_TRUE(leaf_.sent.empty());
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 1u);
  Answer(e, 0, {4});
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(x, 4);
}

TEST_F(GroupEngineTest, BadArgumentsAreRefused) {
  GroupEngine e(Params(), &leaf_, clock_);
  int32_t x = 0;
  EXPECT_EQ(e.Start({.dtype = DataType::kFp32, .op = ReduceOp::kBand, .send = &x, .recv = &x,
                     .count = 1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = nullptr,
                        .recv = &x, .count = 1})
                   .ok());
  // Bcast needs no send buffer away from the root.
  EXPECT_TRUE(e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32, .root = 0,
                       .send = nullptr, .recv = &x, .count = 1})
                  .ok());
  EXPECT_EQ(e.Finish(12345).code(), absl::StatusCode::kNotFound);
}

TEST_F(GroupEngineTest, ReduceNonRootsGetNoDataAndBcastRootSendsIt) {
  GroupEngine e(Params(), &leaf_, clock_);
  int32_t in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  auto op = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                      .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 4});
  e.Poll();
  EXPECT_EQ(leaf_.Header(0).delivery, DeliveryMode::kMulticast) << "a reduce rides multicast";
  EXPECT_TRUE(leaf_.Header(0).has_data);
  Answer(e, 0, {});  // header-only completion for a non-root (rank 3)
  EXPECT_TRUE(e.Finish(op).ok());
  EXPECT_EQ(out[0], 0);
  auto b = *e.Start({.collective = CollectiveType::kBcast, .dtype = DataType::kInt32, .root = 3,
                     .send = in, .recv = in, .count = 4});
  e.Poll();
  EXPECT_TRUE(leaf_.Header(1).has_data) << "rank 3 is the bcast root";
  Answer(e, 1, {1, 2, 3, 4});
  EXPECT_TRUE(e.Finish(b).ok());
}

// NETFOLD_REDUCE_DATA=auto (the default): a reduce of at most K chunks is
// multicast whole, a longer one asks for root_data on every chunk (every
// rank of the group computes the same choice from the count, K and P).
TEST_F(GroupEngineTest, AutoReduceDataSendsOnlyAReduceLongerThanTheWindowByRootData) {
  GroupParams p = Params();  // K = 2, four int32 per chunk
  ASSERT_EQ(p.reduce_data, ReduceData::kAuto);
  GroupEngine e(p, &leaf_, clock_);
  int32_t in[9] = {}, out[9] = {};
  auto within = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                          .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 8});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u);
  EXPECT_EQ(leaf_.Header(0).delivery, DeliveryMode::kMulticast);
  EXPECT_EQ(leaf_.Header(1).delivery, DeliveryMode::kMulticast);
  Answer(e, 0, {1, 2, 3, 4});
  Answer(e, 1, {5, 6, 7, 8});
  EXPECT_TRUE(e.Finish(within).ok());

  auto beyond = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                          .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 9});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 4u);
  Answer(e, 2, {});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 5u);
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(leaf_.Header(i).delivery, DeliveryMode::kRootData) << "request " << i;
  }
  Answer(e, 3, {});
  Answer(e, 4, {});
  EXPECT_TRUE(e.Finish(beyond).ok());
  EXPECT_EQ(out[0], 0) << "a rank that is not the root keeps its buffer";

  // NETFOLD_REDUCE_DATA=all multicasts the longer one whole too.
  p.reduce_data = ReduceData::kAll;
  GroupEngine all(p, &leaf_, clock_);
  ASSERT_TRUE(all.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                         .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 9})
                  .ok());
  all.Poll();
  ASSERT_EQ(leaf_.sent.size(), 7u);
  EXPECT_EQ(leaf_.Header(5).delivery, DeliveryMode::kMulticast);
}

// NETFOLD_REDUCE_DATA=root: a reduce's requests ask for root_data. The
// root waits for its data over RC (the multicast header does not complete
// its chunk, and it never asks for the data again: RC does not lose it);
// another rank completes on the header and repairs a lost one.
TEST_F(GroupEngineTest, RootDataReduceCompletesTheRootOnItsDataAndTheOthersOnTheHeader) {
  GroupParams p = Params();
  p.reduce_data = ReduceData::kRoot;
  GroupEngine e(p, &leaf_, clock_);
  int32_t in[4] = {1, 2, 3, 4}, out[4] = {};
  auto mine = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                        .op = ReduceOp::kSum, .root = 3, .send = in, .recv = out, .count = 4});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 1u);
  EXPECT_EQ(leaf_.Header(0).delivery, DeliveryMode::kRootData);
  Answer(e, 0, {});  // the multicast header: not the root's result
  EXPECT_FALSE(e.Done(mine));
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(30));
    e.Poll();
  }
  EXPECT_EQ(leaf_.sent.size(), 1u) << "the root's data comes over RC: no repair";
  Answer(e, 0, {10, 20, 30, 40});
  ASSERT_TRUE(e.Done(mine));
  EXPECT_TRUE(e.Finish(mine).ok());
  EXPECT_EQ(out[3], 40);
  EXPECT_EQ(e.stats().unexpected_messages, 0u);

  auto other = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                         .op = ReduceOp::kSum, .root = 0, .send = in, .recv = out, .count = 4});
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u);
  EXPECT_EQ(leaf_.Header(1).delivery, DeliveryMode::kRootData);
  // The first result took 150 ms: the wait before a repair is now
  // srtt + 4 rttvar = 150 + 4 x 75 ms, not repair_after.
  clock_.Advance(absl::Milliseconds(440));
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 2u);
  clock_.Advance(absl::Milliseconds(20));
  e.Poll();
  ASSERT_EQ(leaf_.sent.size(), 3u) << "a lost header is asked for again";
  EXPECT_EQ(leaf_.Header(2).type, AggregationMessageType::kRepairRequest);
  Answer(e, 1, {});
  EXPECT_TRUE(e.Finish(other).ok());
  // An error result without data still completes the root.
  auto failed = *e.Start({.collective = CollectiveType::kReduce, .dtype = DataType::kInt32,
                          .op = ReduceOp::kSum, .root = 3, .send = in, .recv = out, .count = 4});
  e.Poll();
  Answer(e, 3, {}, AggregationStatus::kMismatch);
  ASSERT_TRUE(e.Done(failed));
  EXPECT_FALSE(e.Finish(failed).ok());
}

// Integrity (docs/security.md): with the job's key every request is tagged
// and a chunk carries P - 16 bytes of elements; a result with another key's
// tag, a flipped byte or no tag is dropped and counted (bad_tags), never
// written, and the real one then completes the operation; the repair path
// asks again for a result dropped that way.
TEST(GroupEngineIntegrity, RequestsAreTaggedAndOnlyTaggedResultsAreTaken) {
  proto::AggregationKey key;
  key.fill(0x42);
  proto::AggregationKey other = key;
  other[0] ^= 1;
  FakeClock clock;
  FakeLeaf leaf;
  GroupParams p;
  p.tree_id = 1;
  p.group_id = 9;
  p.epoch = 2;
  p.num_slots = 2;
  p.slot_bytes = 32;  // 16 bytes of elements with the tag: four int32 per chunk
  p.repair_after = absl::Milliseconds(10);
  p.op_timeout = absl::Seconds(5);
  p.integrity_key = key;
  GroupEngine e(p, &leaf, clock);
  std::vector<int32_t> data = {1, 2, 3, 4, 5};  // 2 chunks: 4 + 1
  auto op = e.Start({.dtype = DataType::kInt32, .op = ReduceOp::kSum, .send = data.data(),
                     .recv = data.data(), .count = data.size()});
  ASSERT_TRUE(op.ok());
  e.Poll();
  ASSERT_EQ(leaf.sent.size(), 2u);
  EXPECT_EQ(leaf.Header(0).count, 4u) << "(P - 16) / 4 elements per chunk";
  EXPECT_TRUE(leaf.Header(0).has_tag);
  EXPECT_TRUE(proto::VerifyAggregationTag(key, leaf.sent[0]));
  EXPECT_TRUE(proto::VerifyAggregationTag(key, leaf.sent[1]));

  // Results for both chunks, as a sender with `k` (none: untagged) makes them.
  auto result = [&](size_t i, std::vector<int32_t> values, const proto::AggregationKey* k) {
    AggregationHeader h = leaf.Header(i);
    h.type = AggregationMessageType::kResult;
    h.has_tag = k != nullptr;
    std::vector<uint8_t> m(proto::kAggregationHeaderSize + values.size() * 4 + 16);
    size_t n = *proto::EncodeAggregationMessage(
        h, {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4}, m);
    if (k != nullptr) n = *proto::AppendAggregationTag(*k, m, n);
    m.resize(n);
    return m;
  };
  auto deliver = [&](const std::vector<uint8_t>& m) {
    AggregationHeader h;
    std::span<const uint8_t> elements;
    ASSERT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
    e.OnMessage(h, elements, m);
  };
  deliver(result(0, {66, 66, 66, 66}, &other));
  deliver(result(0, {66, 66, 66, 66}, nullptr));
  std::vector<uint8_t> flipped = result(0, {10, 20, 30, 40}, &key);
  flipped[proto::kAggregationHeaderSize] ^= 1;
  deliver(flipped);
  deliver(result(1, {66}, &other));
  EXPECT_EQ(e.stats().bad_tags, 4u);
  EXPECT_EQ(e.stats().results_received, 0u);
  EXPECT_EQ(data, (std::vector<int32_t>{1, 2, 3, 4, 5})) << "a forged result was written";
  // Dropped as if lost: the repair deadline (the group's first results:
  // kFirstRepairAfter) asks again, tagged, for the oldest (a probe; the
  // next one when it is the oldest).
  clock.Advance(kFirstRepairAfter + absl::Milliseconds(1));
  e.Poll();
  ASSERT_EQ(leaf.sent.size(), 3u);
  EXPECT_EQ(leaf.Header(2).type, AggregationMessageType::kRepairRequest);
  EXPECT_TRUE(proto::VerifyAggregationTag(key, leaf.sent[2]));
  deliver(result(0, {10, 20, 30, 40}, &key));
  deliver(result(1, {50}, &key));
  ASSERT_TRUE(e.Done(*op));
  EXPECT_TRUE(e.Finish(*op).ok());
  EXPECT_EQ(data, (std::vector<int32_t>{10, 20, 30, 40, 50}));
  EXPECT_EQ(e.stats().bad_tags, 4u);
}

}  // namespace
}  // namespace netfold::host
