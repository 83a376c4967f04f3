#include "proto/control/plane_name.h"

#include <gtest/gtest.h>

namespace netfold::control {
namespace {

TEST(PlaneSwitchName, PlaneZeroKeepsTheSwitchsName) {
  EXPECT_EQ(PlaneSwitchName("leaf0", 0), "leaf0");
  EXPECT_EQ(PlaneSwitchName("leaf0", 1), "leaf0@1");
  EXPECT_EQ(PlaneSwitchName("leaf0", 15), "leaf0@15");
}

TEST(PlaneSwitchName, SplitUndoesIt) {
  for (uint32_t plane = 0; plane < kMaxPlanes; ++plane) {
    auto split = SplitPlaneSwitchName(PlaneSwitchName("a.b-c", plane));
    ASSERT_TRUE(split.has_value()) << plane;
    EXPECT_EQ(split->first, "a.b-c");
    EXPECT_EQ(split->second, plane);
  }
}

TEST(PlaneSwitchName, MalformedSuffixesAreRefused) {
  for (const char* bad : {"a@", "@1", "a@0", "a@01", "a@x", "a@1x", "a@16", "a@123", "a@1@2"}) {
    EXPECT_FALSE(SplitPlaneSwitchName(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace netfold::control
