// Tests of the per-peer token bucket, driven by a fake clock.
#include "manager/rate_limiter.h"

#include "gtest/gtest.h"

namespace netfold::manager {
namespace {

TEST(RateLimiter, BurstThenSteadyRate) {
  FakeClock clock;
  RateLimiter limiter(clock, /*per_second=*/10, /*burst=*/3);
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("b"));         // peers are independent
  clock.Advance(absl::Milliseconds(100));  // one token back
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
  clock.Advance(absl::Seconds(60));  // never more than the burst
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
}

TEST(RateLimiter, SaysWhenARefusedPeerHasATokenAgain) {
  FakeClock clock;
  RateLimiter limiter(clock, /*per_second=*/10, /*burst=*/1);
  absl::Duration after = absl::ZeroDuration();
  EXPECT_TRUE(limiter.Allow("a", &after));
  EXPECT_FALSE(limiter.Allow("a", &after));
  EXPECT_EQ(after, absl::Milliseconds(100));
  clock.Advance(absl::Milliseconds(60));
  EXPECT_FALSE(limiter.Allow("a", &after));
  EXPECT_LE(absl::AbsDuration(after - absl::Milliseconds(40)), absl::Microseconds(1));
}

TEST(RateLimiter, ZeroRateMeansUnlimited) {
  FakeClock clock;
  RateLimiter limiter(clock, 0, 1);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.Allow("a"));
}

TEST(RateLimiter, ForgetsIdlePeersWhenFull) {
  FakeClock clock;
  RateLimiter limiter(clock, 1, 1, /*max_peers=*/2);
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_TRUE(limiter.Allow("b"));
  EXPECT_FALSE(limiter.Allow("c"));  // both buckets busy: a flood is refused
  clock.Advance(absl::Seconds(2));   // a and b are idle (full) again
  EXPECT_TRUE(limiter.Allow("c"));
}

}  // namespace
}  // namespace netfold::manager
