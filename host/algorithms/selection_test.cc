#include "host/algorithms/selection.h"

#include <cstdint>
#include <cstdlib>

#include "gtest/gtest.h"

namespace netfold::host::algorithms {
namespace {

Algorithm Pick(AlgorithmPolicy policy, bool fabric, size_t bytes, uint32_t p = 8) {
  auto s = SelectAlgorithm(
      {.policy = policy, .fabric_available = fabric, .bytes = bytes, .num_ranks = p});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->algorithm : Algorithm::kInNetwork;
}

TEST(SelectionTest, TreeThresholdGrowsWithTheStepsTheTreeSaves) {
  EXPECT_EQ(TreeMaxBytes(2), 0u);            // 2 steps either way
  EXPECT_EQ(TreeMaxBytes(3), 16u * 1024);    // 4 - 2
  EXPECT_EQ(TreeMaxBytes(4), 16u * 1024);    // 6 - 4
  EXPECT_EQ(TreeMaxBytes(8), 64u * 1024);    // 14 - 6
  EXPECT_EQ(TreeMaxBytes(16), 176u * 1024);  // 30 - 8
  EXPECT_EQ(TreeMaxBytes(1), SIZE_MAX);
  EXPECT_EQ(TreeMaxBytes(1000, {.tree_bytes_per_saved_step = SIZE_MAX / 2}), SIZE_MAX);
}

TEST(SelectionTest, AutoPrefersTheFabricThenGoesBySize) {
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, true, 1), Algorithm::kInNetwork);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, true, 1 << 30), Algorithm::kInNetwork);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 0), Algorithm::kTree);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 64 * 1024, 8), Algorithm::kTree);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 64 * 1024 + 1, 8), Algorithm::kRing);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 16 * 1024, 4), Algorithm::kTree);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 16 * 1024 + 1, 4), Algorithm::kRing);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 8, 2), Algorithm::kRing);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, size_t{1} << 40), Algorithm::kRing);
  EXPECT_EQ(Pick(AlgorithmPolicy::kAuto, false, 1 << 30, 1), Algorithm::kTree);
}

TEST(SelectionTest, BidirWhenItsThresholdIsSet) {
  const SelectionThresholds t{.tree_bytes_per_saved_step = 64, .bidir_min_bytes = 1 << 20};
  auto pick = [&](size_t bytes, uint32_t p) {
    return SelectAlgorithm({.bytes = bytes, .num_ranks = p}, t)->algorithm;
  };
  EXPECT_EQ(pick(512, 8), Algorithm::kTree);
  EXPECT_EQ(pick((1 << 20) - 1, 8), Algorithm::kRing);
  EXPECT_EQ(pick(1 << 20, 8), Algorithm::kBidirRing);
  EXPECT_EQ(pick(1 << 20, 2), Algorithm::kRing);  // two ranks: the ring uses both directions
}

TEST(SelectionTest, ConfigurationForcesAnAlgorithm) {
  for (bool fabric : {false, true}) {
    EXPECT_EQ(Pick(AlgorithmPolicy::kRing, fabric, 1), Algorithm::kRing);
    EXPECT_EQ(Pick(AlgorithmPolicy::kBidirRing, fabric, 1), Algorithm::kBidirRing);
    EXPECT_EQ(Pick(AlgorithmPolicy::kTree, fabric, 1 << 30), Algorithm::kTree);
    EXPECT_EQ(Pick(AlgorithmPolicy::kTreeScatter, fabric, 1), Algorithm::kTreeScatter);
  }
  EXPECT_EQ(Pick(AlgorithmPolicy::kInNetwork, true, 1 << 30), Algorithm::kInNetwork);
  auto s = SelectAlgorithm({.policy = AlgorithmPolicy::kInNetwork, .fabric_available = false});
  EXPECT_TRUE(absl::IsUnavailable(s.status())) << s.status();
}

TEST(SelectionTest, TreeOrderFollowsThePlannedTree) {
  const SelectionThresholds t;
  EXPECT_EQ(Pick(AlgorithmPolicy::kTreeOrder, true, 1 << 20), Algorithm::kInNetwork);
  auto small = *SelectAlgorithm({.policy = AlgorithmPolicy::kTreeOrder,
                                 .fabric_tree_known = true,
                                 .bytes = t.treeorder_tree_max_bytes,
                                 .num_ranks = 8});
  EXPECT_EQ(small.algorithm, Algorithm::kTree);
  EXPECT_TRUE(small.use_fabric_tree);
  auto large = *SelectAlgorithm({.policy = AlgorithmPolicy::kTreeOrder,
                                 .fabric_tree_known = true,
                                 .bytes = t.treeorder_tree_max_bytes + 1,
                                 .num_ranks = 8});
  EXPECT_EQ(large.algorithm, Algorithm::kTreeScatter);
  EXPECT_TRUE(large.use_fabric_tree);
  EXPECT_NE(large.reason.find("bit-identical"), std::string::npos) << large.reason;
  auto unknown = *SelectAlgorithm({.policy = AlgorithmPolicy::kTreeOrder, .bytes = 8});
  EXPECT_FALSE(unknown.use_fabric_tree);
  EXPECT_NE(unknown.reason.find("no planned tree"), std::string::npos) << unknown.reason;
}

TEST(SelectionTest, ParsesPolicies) {
  EXPECT_EQ(*ParseAlgorithmPolicy(""), AlgorithmPolicy::kAuto);
  EXPECT_EQ(*ParseAlgorithmPolicy("AUTO"), AlgorithmPolicy::kAuto);
  EXPECT_EQ(*ParseAlgorithmPolicy("innetwork"), AlgorithmPolicy::kInNetwork);
  EXPECT_EQ(*ParseAlgorithmPolicy("in-network"), AlgorithmPolicy::kInNetwork);
  EXPECT_EQ(*ParseAlgorithmPolicy("ring"), AlgorithmPolicy::kRing);
  EXPECT_EQ(*ParseAlgorithmPolicy("bidir"), AlgorithmPolicy::kBidirRing);
  EXPECT_EQ(*ParseAlgorithmPolicy("tree"), AlgorithmPolicy::kTree);
  EXPECT_EQ(*ParseAlgorithmPolicy("treescatter"), AlgorithmPolicy::kTreeScatter);
  EXPECT_EQ(*ParseAlgorithmPolicy("TreeOrder"), AlgorithmPolicy::kTreeOrder);
  auto bad = ParseAlgorithmPolicy("fastest");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("treeorder"), std::string::npos);
  for (AlgorithmPolicy p :
       {AlgorithmPolicy::kAuto, AlgorithmPolicy::kInNetwork, AlgorithmPolicy::kRing,
        AlgorithmPolicy::kBidirRing, AlgorithmPolicy::kTree, AlgorithmPolicy::kTreeScatter,
        AlgorithmPolicy::kTreeOrder}) {
    EXPECT_EQ(*ParseAlgorithmPolicy(AlgorithmPolicyName(p)), p);
  }
  for (Algorithm a : kHostAlgorithms) EXPECT_EQ(*ParseAlgorithm(AlgorithmName(a)), a);
  EXPECT_FALSE(ParseAlgorithm("mesh").ok());
}

TEST(SelectionTest, ReadsTheEnvironment) {
  setenv("NETFOLD_ALGORITHM", "bidir", 1);
  EXPECT_EQ(*AlgorithmPolicyFromEnvironment(), AlgorithmPolicy::kBidirRing);
  setenv("NETFOLD_ALGORITHM", "nonsense", 1);
  EXPECT_FALSE(AlgorithmPolicyFromEnvironment().ok());
  unsetenv("NETFOLD_ALGORITHM");
  EXPECT_EQ(*AlgorithmPolicyFromEnvironment(), AlgorithmPolicy::kAuto);
}

}  // namespace
}  // namespace netfold::host::algorithms
