// Tests of 24-bit PSN arithmetic, especially across the wrap at 2^24.
#include "proto/psn.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace netfold::proto {
namespace {

TEST(Psn, AddWraps) {
  EXPECT_EQ(PsnAdd(0, 1), 1u);
  EXPECT_EQ(PsnAdd(0xFFFFFF, 1), 0u);
  EXPECT_EQ(PsnAdd(0xFFFFFE, 5), 3u);
  EXPECT_EQ(PsnAdd(0, -1), 0xFFFFFFu);
  EXPECT_EQ(PsnAdd(2, -5), 0xFFFFFDu);
  EXPECT_EQ(PsnAdd(0x123456, 0), 0x123456u);
  EXPECT_EQ(PsnAdd(0, 0x1000000), 0u);  // a full turn
  EXPECT_EQ(PsnAdd(0x7FFFFF, 0x7FFFFFFF), PsnAdd(0x7FFFFF, 0xFFFFFF));
  // High bits of an argument are ignored.
  EXPECT_EQ(PsnAdd(0xFF000001, 1), 2u);
}

TEST(Psn, DiffIsSignedDistanceModulo2To24) {
  EXPECT_EQ(PsnDiff(5, 3), 2);
  EXPECT_EQ(PsnDiff(3, 5), -2);
  EXPECT_EQ(PsnDiff(0, 0xFFFFFF), 1);    // 0 comes right after 0xFFFFFF
  EXPECT_EQ(PsnDiff(0xFFFFFF, 0), -1);
  EXPECT_EQ(PsnDiff(2, 0xFFFFFE), 4);
  EXPECT_EQ(PsnDiff(0x123456, 0x123456), 0);
  EXPECT_EQ(PsnDiff(0x7FFFFF, 0), 0x7FFFFF);     // the farthest "after"
  EXPECT_EQ(PsnDiff(0x800000, 0), -0x800000);    // half a turn counts as before
  EXPECT_EQ(PsnDiff(0, 0x800000), -0x800000);
  EXPECT_EQ(PsnDiff(0x800001, 0), -0x7FFFFF);
}

TEST(Psn, DiffInvertsAddAcrossTheWrap) {
  const uint32_t starts[] = {0, 1, 0x7FFFFF, 0x800000, 0xFFFFF0, 0xFFFFFF};
  const int32_t deltas[] = {0, 1, -1, 17, -17, 0x7FFFFF, -0x7FFFFF, -0x800000};
  for (uint32_t start : starts) {
    for (int32_t delta : deltas) {
      const uint32_t end = PsnAdd(start, delta);
      EXPECT_TRUE(IsValidPsn(end));
      EXPECT_EQ(PsnDiff(end, start), delta) << start << " + " << delta;
    }
  }
}

TEST(Psn, LessOrdersAWindowAcrossTheWrap) {
  EXPECT_TRUE(PsnLess(0xFFFFFF, 0));
  EXPECT_FALSE(PsnLess(0, 0xFFFFFF));
  EXPECT_TRUE(PsnLess(0xFFFFF0, 0x00000F));
  EXPECT_FALSE(PsnLess(7, 7));
  EXPECT_TRUE(PsnLessEq(7, 7));
  EXPECT_TRUE(PsnLessEq(0xFFFFFF, 0));
  EXPECT_FALSE(PsnLessEq(1, 0));
  // A sliding window of 1000 PSNs straddling the wrap is totally ordered.
  const uint32_t base = 0xFFFF00;
  for (int32_t i = 0; i < 1000; i += 37) {
    for (int32_t j = 0; j < 1000; j += 41) {
      EXPECT_EQ(PsnLess(PsnAdd(base, i), PsnAdd(base, j)), i < j) << i << " " << j;
    }
  }
  EXPECT_TRUE(IsValidPsn(0xFFFFFF));
  EXPECT_FALSE(IsValidPsn(0x1000000));
}

}  // namespace
}  // namespace netfold::proto
