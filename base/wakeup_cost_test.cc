#include "base/wakeup_cost.h"

#include <pthread.h>
#include <sched.h>

#include "gtest/gtest.h"

namespace netfold {
namespace {

TEST(WakeupCost, RejectsRoundsBelowOne) {
  EXPECT_EQ(MeasureWakeupCost(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureWakeupCost(-5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WakeupCost, MeasuresEveryRowTheMachineHas) {
  absl::StatusOr<WakeupCost> c = MeasureWakeupCost(200);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT(c->syscall_us, 0);
  EXPECT_GT(c->same_cpu_us, 0);
  EXPECT_GT(c->same_cpu_wall_us, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  if (CPU_COUNT(&set) >= 2) {
    ASSERT_TRUE(c->other_cpu_us.has_value());
    EXPECT_GT(*c->other_cpu_us, 0);
    EXPECT_GT(c->other_cpu_wall_us.value_or(0), 0);
  } else {
    EXPECT_FALSE(c->other_cpu_us.has_value());
  }
}

TEST(WakeupCost, OneUsableCpuHasNoAcrossCpusRow) {
  cpu_set_t saved, one;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &saved)) first = c;
  }
  ASSERT_GE(first, 0);
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  absl::StatusOr<WakeupCost> c = MeasureWakeupCost(50);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved), 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->other_cpu_us.has_value());
  EXPECT_GT(c->same_cpu_us, 0);
}

}  // namespace
}  // namespace netfold
