#include "base/first_touch_cost.h"

#include "gtest/gtest.h"

namespace netfold {
namespace {

TEST(FirstTouchCost, RejectsPagesBelowOne) {
  EXPECT_EQ(MeasureFirstTouchCost(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureFirstTouchCost(-3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FirstTouchCost, TimesEveryPassOverThePages) {
  const absl::StatusOr<FirstTouchCost> c = MeasureFirstTouchCost(64);
  ASSERT_TRUE(c.ok()) << c.status();
  // Each pass moved 64 x 4000 bytes through the pipe: some time per page,
  // and less than a second (every call is non-blocking).
  for (double us : {c->read_first_us, c->read_again_us, c->write_first_us, c->write_again_us}) {
    EXPECT_GT(us, 0.0);
    EXPECT_LT(us, 1e6);
  }
}

}  // namespace
}  // namespace netfold
