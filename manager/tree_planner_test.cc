// Tests of tree planning and subtree trimming on the example topologies.
#include "manager/tree_planner.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

// Members given as host names, ranks 0..n-1 in order.
std::vector<MemberLeaf> Members(const Topology& topo, const std::vector<std::string>& hosts) {
  std::vector<MemberLeaf> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    int h = topo.FindHost(hosts[i]);
    EXPECT_GE(h, 0) << hosts[i];
    out.emplace_back(static_cast<uint32_t>(i), h < 0 ? -1 : topo.host_at(h).switch_index);
  }
  return out;
}

std::vector<std::string> Names(const Topology& topo, const Subtree& sub) {
  std::vector<std::string> out;
  for (const SubtreeNode& n : sub.nodes) out.push_back(topo.switch_at(n.switch_index).name);
  return out;
}

TEST(TreePlanner, SingleSwitch) {
  absl::StatusOr<Topology> topo = LoadExampleTopology("single_switch.yaml");
  ASSERT_TRUE(topo.ok()) << topo.status();
  std::vector<Tree> trees = PlanTrees(*topo);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(trees[0].root, 0);
  absl::StatusOr<Subtree> sub =
      TrimSubtree(*topo, trees[0], Members(*topo, {"h0", "h1", "h2", "h3"}));
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_EQ(sub->nodes.size(), 1u);
  EXPECT_EQ(sub->nodes[0].parent, -1);
  EXPECT_EQ(sub->nodes[0].host_ranks, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(sub->nodes[0].child_switches.empty());
}

TEST(TreePlanner, TwoLevelTrimsToTheLowestCoveringSwitch) {
  absl::StatusOr<Topology> topo = LoadExampleTopology("two_level.yaml");
  ASSERT_TRUE(topo.ok()) << topo.status();
  std::vector<Tree> trees = PlanTrees(*topo);
  ASSERT_EQ(trees.size(), 1u);
  EXPECT_EQ(topo->switch_at(trees[0].root).name, "root0");
  EXPECT_EQ(trees[0].switches.size(), 5u);

  // Both hosts of leaf1: the group never leaves leaf1.
  absl::StatusOr<Subtree> local = TrimSubtree(*topo, trees[0], Members(*topo, {"h2", "h3"}));
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(Names(*topo, *local), (std::vector<std::string>{"leaf1"}));
  EXPECT_EQ(local->nodes[0].parent, -1);

  // Across leaves: root0 with exactly the leaves that have members.
  absl::StatusOr<Subtree> wide = TrimSubtree(*topo, trees[0], Members(*topo, {"h5", "h0", "h1"}));
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(Names(*topo, *wide), (std::vector<std::string>{"root0", "leaf0", "leaf2"}));
  const SubtreeNode& root = wide->nodes[0];
  EXPECT_TRUE(root.host_ranks.empty());
  EXPECT_EQ(root.child_switches.size(), 2u);
  const SubtreeNode* leaf0 = wide->Find(topo->FindSwitch("leaf0"));
  ASSERT_NE(leaf0, nullptr);
  EXPECT_EQ(leaf0->host_ranks, (std::vector<uint32_t>{1, 2}));  // h0 is rank 1, h1 rank 2
  EXPECT_EQ(leaf0->parent, topo->FindSwitch("root0"));
  EXPECT_EQ(wide->Find(topo->FindSwitch("leaf3")), nullptr);
}

// With planes, every plane has its own trees, plane 0's first (their ids
// unchanged), each over that plane's switches alone.
TEST(TreePlanner, EveryPlaneHasTreesOfItsOwn) {
  absl::StatusOr<Topology> topo = Topology::Parse(
      "name: t\nplanes: 2\ndefaults: {capacity: {trees: 4, groups: 4, slots: 16, "
      "slot_bytes: 256, qps: 8}}\nswitches:\n  - {name: root, tier: 1}\n"
      "  - {name: leaf0, tier: 0}\n  - {name: leaf1, tier: 0}\n"
      "links:\n  - [leaf0, root]\n  - [leaf1, root]\n"
      "hosts:\n  - {name: h0, switch: leaf0}\n  - {name: h1, switch: leaf1}\n");
  ASSERT_TRUE(topo.ok()) << topo.status();
  std::vector<Tree> trees = PlanTrees(*topo);
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_EQ(topo->switch_at(trees[0].root).name, "root");
  EXPECT_EQ(topo->switch_at(trees[1].root).name, "root@1");
  for (uint32_t plane = 0; plane < 2; ++plane) {
    EXPECT_EQ(trees[plane].switches.size(), 3u);
    for (int sw : trees[plane].switches) EXPECT_EQ(topo->switch_at(sw).plane, plane);
  }
  // Members at their plane-1 leaves: the plane-1 tree holds them, plane 0's does not.
  std::vector<MemberLeaf> members = {{0, topo->LeafIn(0, 1)}, {1, topo->LeafIn(1, 1)}};
  absl::StatusOr<Subtree> sub = TrimSubtree(*topo, trees[1], members);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(Names(*topo, *sub), (std::vector<std::string>{"root@1", "leaf0@1", "leaf1@1"}));
  EXPECT_FALSE(TrimSubtree(*topo, trees[0], members).ok());
}

TEST(TreePlanner, FatTreeHasOneTreePerCore) {
  absl::StatusOr<Topology> topo = LoadExampleTopology("fat_tree.yaml");
  ASSERT_TRUE(topo.ok()) << topo.status();
  std::vector<Tree> trees = PlanTrees(*topo);
  ASSERT_EQ(trees.size(), 4u);
  const char* roots[] = {"core00", "core01", "core10", "core11"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(trees[i].id, static_cast<uint32_t>(i));
    EXPECT_EQ(topo->switch_at(trees[i].root).name, roots[i]);
    // core + 4 aggregation switches + 8 edges.
    EXPECT_EQ(trees[i].switches.size(), 13u);
  }
  // Trees of core0x go through agg<p>0, trees of core1x through agg<p>1.
  int edge31 = topo->FindSwitch("edge31");
  EXPECT_EQ(topo->switch_at(trees[0].parent[edge31]).name, "agg30");
  EXPECT_EQ(topo->switch_at(trees[3].parent[edge31]).name, "agg31");
  EXPECT_FALSE(trees[0].Contains(topo->FindSwitch("agg31")));
}

TEST(TreePlanner, FatTreeTrimming) {
  absl::StatusOr<Topology> topo = LoadExampleTopology("fat_tree.yaml");
  ASSERT_TRUE(topo.ok());
  std::vector<Tree> trees = PlanTrees(*topo);
  // h0..h3 are pod 0 (edge00: h0 h1, edge01: h2 h3).
  absl::StatusOr<Subtree> pod = TrimSubtree(*topo, trees[2], Members(*topo, {"h0", "h3"}));
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(Names(*topo, *pod), (std::vector<std::string>{"agg01", "edge00", "edge01"}));
  absl::StatusOr<Subtree> edge = TrimSubtree(*topo, trees[1], Members(*topo, {"h1", "h0"}));
  ASSERT_TRUE(edge.ok());
  EXPECT_EQ(Names(*topo, *edge), (std::vector<std::string>{"edge00"}));
  absl::StatusOr<Subtree> cross = TrimSubtree(*topo, trees[1], Members(*topo, {"h0", "h15", "h4"}));
  ASSERT_TRUE(cross.ok());
  EXPECT_EQ(Names(*topo, *cross), (std::vector<std::string>{"core01", "agg00", "agg10", "agg30",
                                                            "edge00", "edge10", "edge31"}));
  // Every edge in the subtree has its parent in the subtree.
  for (const SubtreeNode& n : cross->nodes) {
    if (n.parent >= 0) {
      EXPECT_NE(cross->Find(n.parent), nullptr);
    }
  }
}

TEST(TreePlanner, TreeCapacityLimitsMembership) {
  TopologyDescription desc;
  desc.name = "limited";
  Capacity cap{4, 4, 16, 256, 8};
  Capacity one_tree = cap;
  one_tree.trees = 1;
  desc.switches = {{"s0", 1, cap}, {"s1", 1, cap}, {"l0", 0, one_tree}, {"l1", 0, cap}};
  desc.links = {{"l0", "s0"}, {"l0", "s1"}, {"l1", "s0"}, {"l1", "s1"}};
  desc.hosts = {{"h0", "l0"}, {"h1", "l1"}};
  absl::StatusOr<Topology> topo = Topology::Build(desc);
  ASSERT_TRUE(topo.ok()) << topo.status();
  std::vector<Tree> trees = PlanTrees(*topo);
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_TRUE(trees[0].Contains(2));
  EXPECT_FALSE(trees[1].Contains(2));  // l0 can be in one tree only
  EXPECT_TRUE(trees[1].Contains(3));
  absl::StatusOr<Subtree> sub = TrimSubtree(*topo, trees[1], {{0, 2}, {1, 3}});
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(sub.status().message().find("l0"), std::string::npos) << sub.status();
}

}  // namespace
}  // namespace netfold::manager
