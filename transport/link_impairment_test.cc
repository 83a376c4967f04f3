#include "transport/link_impairment.h"

#include <cstring>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"

namespace netfold::transport {
namespace {

class LinkImpairmentTest : public ::testing::Test {
 protected:
  PacketPool pool_{{.num_buffers = 4096, .buffer_size = 256}};
  FakeClock clock_{absl::Seconds(1)};

  // Packets carrying their index in the first 4 bytes.
  std::vector<PacketBuffer*> Make(uint32_t n, uint32_t len = 64) {
    std::vector<PacketBuffer*> v;
    for (uint32_t i = 0; i < n; ++i) {
      PacketBuffer* p = pool_.Alloc();
      EXPECT_NE(p, nullptr);
      std::memset(p->data(), 0xab, len);
      std::memcpy(p->data(), &i, 4);
      p->set_len(len);
      v.push_back(p);
    }
    return v;
  }
  static uint32_t Index(const PacketBuffer* p) {
    uint32_t i;
    std::memcpy(&i, p->data(), 4);
    return i;
  }
  void FreeAll(std::vector<PacketBuffer*>& v) {
    PacketPool::FreeBurst(v);
    v.clear();
  }
  void TearDown() override { EXPECT_EQ(pool_.num_in_use(), 0u) << "leaked packet buffers"; }
};

TEST(ImpairmentParse, AcceptsEveryKeyAndRoundTrips) {
  auto c = ParseImpairment(
      "seed=42, drop=0.1, mcast_drop=0.05, burst=0.01:0.25:0.9, dup=0.05, corrupt=0.01, reorder=0.2:300us, "
      "delay=2ms, jitter=100us, rate=100mbit, queue=5ms, down=0");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seed, 42u);
  EXPECT_DOUBLE_EQ(c->drop, 0.1);
  EXPECT_DOUBLE_EQ(c->multicast_drop, 0.05);
  EXPECT_DOUBLE_EQ(c->burst_enter, 0.01);
  EXPECT_DOUBLE_EQ(c->burst_exit, 0.25);
  EXPECT_DOUBLE_EQ(c->burst_drop, 0.9);
  EXPECT_DOUBLE_EQ(c->duplicate, 0.05);
  EXPECT_DOUBLE_EQ(c->corrupt, 0.01);
  EXPECT_DOUBLE_EQ(c->reorder, 0.2);
  EXPECT_EQ(c->reorder_delay, absl::Microseconds(300));
  EXPECT_EQ(c->delay, absl::Milliseconds(2));
  EXPECT_EQ(c->jitter, absl::Microseconds(100));
  EXPECT_EQ(c->rate_bps, 100000000u);
  EXPECT_EQ(c->rate_queue, absl::Milliseconds(5));
  EXPECT_FALSE(c->link_down);
  auto again = ParseImpairment(c->ToString());
  ASSERT_TRUE(again.ok()) << c->ToString();
  EXPECT_EQ(again->ToString(), c->ToString());
  EXPECT_TRUE(ParseImpairment("")->IsIdentity());
  EXPECT_TRUE(ParseImpairment("none")->IsIdentity());
  EXPECT_EQ(ParseImpairment("none")->ToString(), "none");
  EXPECT_TRUE(ParseImpairment("down=1")->link_down);
  EXPECT_EQ(ParseImpairment("rate=1gbit")->rate_bps, 1000000000u);
  EXPECT_EQ(ParseImpairment("delay=1s")->delay, absl::Seconds(1));
}

TEST(ImpairmentParse, RejectsJunkWithTheItemNamed) {
  for (const char* bad : {"drop", "drop=2", "drop=-0.1", "drop=x", "foo=1", "burst=0.1",
                          "burst=0.1:0.2:0.3:0.4", "delay=5", "delay=5parsecs", "rate=fast",
                          "down=yes", "seed=-1", "reorder=0.1:1:2", "jitter=-1ms"}) {
    auto c = ParseImpairment(bad);
    EXPECT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseImpairment("drop=0.1,foo=1").status().message().find("foo"),
            std::string_view::npos);
}

TEST_F(LinkImpairmentTest, IdentityPassesEverythingInOrder) {
  LinkImpairment stage({}, clock_);
  auto in = Make(100);
  std::vector<PacketBuffer*> out;
  stage.Process(in, &out);
  ASSERT_EQ(out.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(Index(out[i]), i);
  FreeAll(out);
}

// The indices that survive a stage configured with `config`.
std::vector<uint32_t> Survivors(PacketPool& pool, FakeClock& clock, const ImpairmentConfig& config,
                                uint32_t n) {
  LinkImpairment stage(config, clock);
  std::vector<uint32_t> got;
  std::vector<PacketBuffer*> out;
  for (uint32_t i = 0; i < n; ++i) {
    PacketBuffer* p = pool.Alloc();
    std::memcpy(p->data(), &i, 4);
    p->set_len(16);
    stage.Process({&p, 1}, &out);
    for (PacketBuffer* q : out) {
      uint32_t idx;
      std::memcpy(&idx, q->data(), 4);
      got.push_back(idx);
    }
    PacketPool::FreeBurst(out);
    out.clear();
  }
  return got;
}

TEST_F(LinkImpairmentTest, RandomLossHasTheConfiguredRateAndIsReproducible) {
  ImpairmentConfig c;
  c.drop = 0.1;
  c.seed = 7;
  const uint32_t n = 20000;
  auto a = Survivors(pool_, clock_, c, n);
  auto b = Survivors(pool_, clock_, c, n);
  EXPECT_EQ(a, b) << "the same seed must give the same faults";
  const double loss = 1.0 - static_cast<double>(a.size()) / n;
  // Binomial(20000, 0.1): sd = 0.0021; 5 sd either way.
  EXPECT_NEAR(loss, 0.1, 0.011);
  c.seed = 8;
  EXPECT_NE(Survivors(pool_, clock_, c, n), a) << "another seed, other faults";
}

TEST_F(LinkImpairmentTest, MulticastLossSparesUnicast) {
  LinkImpairment stage(*ParseImpairment("mcast_drop=1"), clock_);
  auto in = Make(10);
  for (uint32_t i = 0; i < 10; ++i) in[i]->dst = i % 2 ? Ipv4Endpoint{0xe0000001, 1} : Ipv4Endpoint{1, 1};
  std::vector<PacketBuffer*> out;
  stage.Process(in, &out);
  ASSERT_EQ(out.size(), 5u);
  for (PacketBuffer* p : out) EXPECT_FALSE(p->dst.IsMulticast());
  EXPECT_EQ(stage.counters().dropped_multicast, 5u);
  EXPECT_EQ(ParseImpairment("mcast_drop=0.25")->ToString(), "seed=1,mcast_drop=0.25");
  FreeAll(out);
}

TEST_F(LinkImpairmentTest, BurstLossComesInRuns) {
  ImpairmentConfig c;
  c.burst_enter = 0.01;
  c.burst_exit = 0.2;  // mean burst length 5
  c.burst_drop = 1.0;
  const uint32_t n = 50000;
  auto got = Survivors(pool_, clock_, c, n);
  std::vector<bool> lost(n, true);
  for (uint32_t i : got) lost[i] = false;
  uint32_t runs = 0, lost_total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (lost[i]) {
      ++lost_total;
      if (i == 0 || !lost[i - 1]) ++runs;
    }
  }
  ASSERT_GT(runs, 50u);
  const double mean_run = static_cast<double>(lost_total) / runs;
  EXPECT_NEAR(mean_run, 5.0, 1.0);
  // Stationary loss: enter/(enter+exit) = 0.0476.
  EXPECT_NEAR(static_cast<double>(lost_total) / n, 0.0476, 0.012);
}

TEST_F(LinkImpairmentTest, DuplicateCopiesAndCorruptFlipsBits) {
  ImpairmentConfig c;
  c.duplicate = 1.0;
  LinkImpairment dup(c, clock_);
  auto in = Make(10);
  // Segment i of a received GSO batch: its ICRC holds with identification i.
  for (uint32_t i = 0; i < 10; ++i) in[i]->ip_id = static_cast<uint16_t>(i + 1);
  std::vector<PacketBuffer*> out;
  dup.Process(in, &out);
  ASSERT_EQ(out.size(), 20u);
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(Index(out[2 * i]), i);
    EXPECT_EQ(Index(out[2 * i + 1]), i);
    EXPECT_EQ(out[2 * i + 1]->ip_id, i + 1) << "the duplicate lost its identification";
    EXPECT_EQ(0, std::memcmp(out[2 * i]->data(), out[2 * i + 1]->data(), 64));
  }
  EXPECT_EQ(dup.counters().duplicated, 10u);
  FreeAll(out);

  ImpairmentConfig k;
  k.corrupt = 1.0;
  LinkImpairment corrupt(k, clock_);
  in = Make(50);
  corrupt.Process(in, &out);
  ASSERT_EQ(out.size(), 50u);
  for (uint32_t j = 0; j < out.size(); ++j) {
    // Order is kept, so out[j] started as packet j: index j then 0xab bytes.
    uint8_t original[64];
    std::memset(original, 0xab, 64);
    std::memcpy(original, &j, 4);
    int flipped = 0;
    for (uint32_t b = 0; b < 64; ++b) flipped += __builtin_popcount(out[j]->data()[b] ^ original[b]);
    EXPECT_EQ(out[j]->len(), 64u);
    EXPECT_GE(flipped, 1);
    EXPECT_LE(flipped, 3);
  }
  EXPECT_EQ(corrupt.counters().corrupted, 50u);
  FreeAll(out);
}

// A receive queue's pool (returns_from_any_thread) is allocated from on
// the queue's thread alone: a duplicate of its packet is a buffer of its
// own, and freeing it leaves the pool as it was.
TEST_F(LinkImpairmentTest, ADuplicateOfAReceiveQueuesPacketTakesNothingFromItsPool) {
  PacketPool queue_pool({.num_buffers = 4, .buffer_size = 128, .returns_from_any_thread = true});
  ImpairmentConfig c;
  c.duplicate = 1.0;
  LinkImpairment dup(c, clock_);
  PacketBuffer* p = queue_pool.Alloc();
  std::memset(p->data(), 0x5c, 100);
  p->set_len(100);
  p->src = {0x7f000001, 7};
  p->ip_id = 3;
  std::vector<PacketBuffer*> out;
  dup.Process({&p, 1}, &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(queue_pool.num_free(), 3u) << "the copy came from the queue's pool";
  EXPECT_EQ(out[1]->pool(), nullptr);
  EXPECT_EQ(out[1]->len(), 100u);
  EXPECT_EQ(out[1]->src, p->src);
  EXPECT_EQ(out[1]->ip_id, 3u);
  EXPECT_EQ(0, std::memcmp(out[0]->data(), out[1]->data(), 100));
  FreeAll(out);
  queue_pool.Reclaim();
  EXPECT_EQ(queue_pool.num_free(), 4u);
}

// A view shares its bytes with a buffer that someone may send again (an RC
// send queue's frame): corruption flips bits of a copy, never of those.
TEST_F(LinkImpairmentTest, CorruptionOfAViewLeavesTheBufferItShowsIntact) {
  PacketPool views({.num_buffers = 2, .buffer_size = 256, .num_views = 2});
  PacketBuffer* frames = PacketPool::NewHeapBuffer(128);
  std::memset(frames->data(), 0x5a, 128);
  frames->set_len(128);
  ImpairmentConfig k;
  k.corrupt = 1.0;
  LinkImpairment corrupt(k, clock_);
  std::vector<PacketBuffer*> in = {views.AllocView(frames, 0, 64), views.AllocView(frames, 64, 64)};
  std::vector<PacketBuffer*> out;
  corrupt.Process(in, &out);
  ASSERT_EQ(out.size(), 2u);
  for (const PacketBuffer* p : out) {
    EXPECT_FALSE(p->is_view());
    EXPECT_EQ(p->len(), 64u);
    int flipped = 0;
    for (uint32_t b = 0; b < 64; ++b) flipped += __builtin_popcount(p->data()[b] ^ 0x5a);
    EXPECT_GE(flipped, 1);
  }
  for (uint32_t b = 0; b < 128; ++b) ASSERT_EQ(frames->data()[b], 0x5a) << "byte " << b;
  EXPECT_EQ(frames->num_views(), 0u) << "the views were given back";
  PacketPool::FreeBurst(out);
  // No buffer for the copy: the packet is lost, as a corrupted one would be.
  PacketPool none({.num_buffers = 0, .buffer_size = 256, .num_views = 1});
  in = {none.AllocView(frames, 0, 64)};
  out.clear();
  corrupt.Process(in, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(frames->num_views(), 0u);
  PacketPool::Free(frames);
}

TEST_F(LinkImpairmentTest, DelayHoldsUntilDueAndKeepsOrder) {
  ImpairmentConfig c;
  c.delay = absl::Milliseconds(5);
  LinkImpairment stage(c, clock_);
  auto in = Make(10);
  std::vector<PacketBuffer*> out;
  stage.Process(in, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(stage.num_held(), 10u);
  ASSERT_TRUE(stage.NextDueNs().has_value());
  EXPECT_EQ(*stage.NextDueNs(), clock_.NowNanos() + 5000000);
  clock_.Advance(absl::Milliseconds(4));
  stage.Release(&out);
  EXPECT_TRUE(out.empty());
  clock_.Advance(absl::Milliseconds(1));
  stage.Release(&out);
  ASSERT_EQ(out.size(), 10u);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(Index(out[i]), i);
  FreeAll(out);
}

TEST_F(LinkImpairmentTest, ReorderLetsLaterPacketsOvertake) {
  ImpairmentConfig c;
  c.reorder = 0.3;
  c.reorder_delay = absl::Microseconds(100);
  LinkImpairment stage(c, clock_);
  std::vector<uint32_t> order;
  std::vector<PacketBuffer*> out;
  for (int step = 0; step < 200; ++step) {
    auto in = Make(1);
    std::memcpy(in[0]->data(), &step, 4);
    stage.Process(in, &out);
    clock_.Advance(absl::Microseconds(10));
    for (PacketBuffer* p : out) order.push_back(Index(p));
    FreeAll(out);
  }
  clock_.Advance(absl::Milliseconds(1));
  stage.Release(&out);
  for (PacketBuffer* p : out) order.push_back(Index(p));
  FreeAll(out);
  ASSERT_EQ(order.size(), 200u);  // nothing lost
  int inversions = 0;
  for (size_t i = 1; i < order.size(); ++i) inversions += order[i] < order[i - 1];
  EXPECT_GT(inversions, 10);
  EXPECT_GT(stage.counters().reordered, 30u);
}

TEST_F(LinkImpairmentTest, RateLimitPacesAndTailDrops) {
  ImpairmentConfig c;
  c.rate_bps = 8000000;  // 1 byte per microsecond: a 100-byte packet takes 100 us
  c.rate_queue = absl::Microseconds(1000);
  LinkImpairment stage(c, clock_);
  auto in = Make(20, 100);
  std::vector<PacketBuffer*> out;
  stage.Process(in, &out);
  // Packets are due at 100, 200, ... us; only those starting within 1 ms of
  // backlog are queued: starts at 0..1000 us -> 11 packets, 9 dropped.
  EXPECT_EQ(stage.counters().dropped_rate, 9u);
  EXPECT_TRUE(out.empty());
  clock_.Advance(absl::Microseconds(350));
  stage.Release(&out);
  EXPECT_EQ(out.size(), 3u);
  clock_.Advance(absl::Seconds(1));
  stage.Release(&out);
  EXPECT_EQ(out.size(), 11u);
  FreeAll(out);
}

TEST_F(LinkImpairmentTest, LinkDownAtRunTimeDropsEverythingThenRecovers) {
  LinkImpairment stage({}, clock_);
  std::vector<PacketBuffer*> out;
  auto in = Make(5);
  stage.Process(in, &out);
  EXPECT_EQ(out.size(), 5u);
  FreeAll(out);
  stage.SetConfig(*ParseImpairment("down=1"));
  in = Make(5);
  stage.Process(in, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(stage.counters().dropped_down, 5u);
  stage.SetConfig({});
  in = Make(5);
  stage.Process(in, &out);
  EXPECT_EQ(out.size(), 5u);
  FreeAll(out);
}

TEST_F(LinkImpairmentTest, DestructionFreesHeldPackets) {
  {
    ImpairmentConfig c;
    c.delay = absl::Seconds(10);
    LinkImpairment stage(c, clock_);
    auto in = Make(7);
    std::vector<PacketBuffer*> out;
    stage.Process(in, &out);
    EXPECT_EQ(stage.num_held(), 7u);
  }
  EXPECT_EQ(pool_.num_in_use(), 0u);
}

}  // namespace
}  // namespace netfold::transport
