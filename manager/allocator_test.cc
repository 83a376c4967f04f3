// Tests of the allocator on the example topologies: spreading across trees,
// exhaustion with the right explanation, all-or-nothing, release.
#include "manager/allocator.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

class AllocatorTest : public testing::Test {
 protected:
  void Load(const std::string& file) {
    absl::StatusOr<Topology> t = LoadExampleTopology(file);
    ASSERT_TRUE(t.ok()) << t.status();
    topo_ = std::make_unique<Topology>(*std::move(t));
    alloc_ = std::make_unique<Allocator>(*topo_, PlanTrees(*topo_));
    for (int s = 0; s < topo_->num_switches(); ++s) alloc_->SetSwitchUsable(s, true, "");
  }

  GroupRequest Request(const std::vector<std::string>& hosts, uint32_t k, uint32_t p) {
    GroupRequest r;
    for (size_t i = 0; i < hosts.size(); ++i) {
      r.members.emplace_back(static_cast<uint32_t>(i),
                             topo_->host_at(topo_->FindHost(hosts[i])).switch_index);
    }
    r.num_slots = k;
    r.slot_bytes = p;
    return r;
  }

  const Usage& Used(const std::string& sw) { return alloc_->used(topo_->FindSwitch(sw)); }

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<Allocator> alloc_;
};

TEST_F(AllocatorTest, SingleSwitchReservesAndReleases) {
  Load("single_switch.yaml");
  std::vector<Shortfall> why;
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h1", "h2"}, 8, 1024), &why);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(why.empty());
  EXPECT_TRUE(p->new_links.empty());
  ASSERT_TRUE(alloc_->Reserve(*p).ok());
  EXPECT_EQ(Used("sw0"), (Usage{1, 8, 0}));
  alloc_->Release(*p);
  EXPECT_EQ(Used("sw0"), (Usage{0, 0, 0}));
  EXPECT_EQ(alloc_->tree_load(0), 0u);
}

TEST_F(AllocatorTest, TwoLevelReservesEveryNodeAndLinksOnce) {
  Load("two_level.yaml");
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h2", "h7"}, 4, 512), nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->new_links.size(), 3u);  // leaf0, leaf1, leaf3 up to root0
  ASSERT_TRUE(alloc_->Reserve(*p).ok());
  EXPECT_EQ(Used("root0"), (Usage{1, 4, 3}));
  EXPECT_EQ(Used("leaf0"), (Usage{1, 4, 1}));
  EXPECT_EQ(Used("leaf2"), (Usage{0, 0, 0}));
  // A second group over the same links needs no new link QPs.
  absl::StatusOr<Placement> q = alloc_->PlanGroup(Request({"h1", "h3"}, 4, 512), nullptr);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->new_links.empty());
  ASSERT_TRUE(alloc_->Reserve(*q).ok());
  EXPECT_EQ(Used("root0"), (Usage{2, 8, 3}));
  alloc_->Release(*p);
  alloc_->Release(*q);
  // Groups and slots are back; tree links stay connected.
  EXPECT_EQ(Used("root0"), (Usage{0, 0, 3}));
  EXPECT_EQ(Used("leaf1"), (Usage{0, 0, 1}));
  EXPECT_TRUE(alloc_->LinkReserved(0, topo_->FindSwitch("leaf1")));
  alloc_->ReleaseLink(0, topo_->FindSwitch("leaf1"));
  EXPECT_EQ(Used("leaf1"), (Usage{0, 0, 0}));
  EXPECT_EQ(Used("root0"), (Usage{0, 0, 2}));
}

TEST_F(AllocatorTest, TwoLevelExhaustionNamesNodeResourceAndFree) {
  Load("two_level.yaml");
  // leaf2 has 256 slots: three groups of 80 fit, the fourth does not.
  std::vector<Placement> held;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h4", "h5"}, 80, 256), nullptr);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(alloc_->Reserve(*p).ok());
    held.push_back(*p);
  }
  std::vector<Shortfall> why;
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h4", "h5"}, 80, 256), &why);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].switch_name, "leaf2");
  EXPECT_EQ(why[0].resource, "slots");
  EXPECT_EQ(why[0].needed, 80u);
  EXPECT_EQ(why[0].free, 16u);
  EXPECT_EQ(why[0].capacity, 256u);
  EXPECT_NE(p.status().message().find("switch leaf2 has 16 of 256 slots free, needs 80"),
            std::string::npos)
      << p.status();
  // A group that spans the root also fails at leaf2, not earlier at root0.
  absl::StatusOr<Placement> wide = alloc_->PlanGroup(Request({"h0", "h4"}, 80, 256), &why);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(why[0].switch_name, "leaf2");
  // Release on destroy frees exactly what was held.
  for (const Placement& h : held) alloc_->Release(h);
  EXPECT_EQ(Used("leaf2"), (Usage{0, 0, 0}));
  EXPECT_TRUE(alloc_->PlanGroup(Request({"h4", "h5"}, 80, 256), nullptr).ok());
}

TEST_F(AllocatorTest, GroupEntriesAndPayloadAreChecked) {
  Load("single_switch.yaml");
  std::vector<Shortfall> why;
  absl::StatusOr<Placement> big = alloc_->PlanGroup(Request({"h0", "h1"}, 1, 8192), &why);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(why[0].resource, "slot_bytes");
  EXPECT_EQ(why[0].capacity, 4048u);
  EXPECT_NE(big.status().message().find("at most 4048 bytes per slot"), std::string::npos);
  // 64 group entries on sw0.
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0"}, 1, 64), nullptr);
    ASSERT_TRUE(p.ok()) << i;
    ASSERT_TRUE(alloc_->Reserve(*p).ok());
  }
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0"}, 1, 64), &why);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(why[0].resource, "groups");
  EXPECT_EQ(why[0].free, 0u);
  EXPECT_NE(p.status().message().find("0 of 64 group entries free"), std::string::npos);
}

TEST_F(AllocatorTest, FatTreeSpreadsGroupsAcrossTrees) {
  Load("fat_tree.yaml");
  std::set<uint32_t> trees;
  std::vector<Placement> held;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h8", "h15"}, 2, 1024), nullptr);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(alloc_->Reserve(*p).ok());
    trees.insert(p->tree_id());
    held.push_back(*p);
  }
  EXPECT_EQ(trees.size(), 4u);  // one group per core
  for (uint32_t t = 0; t < 4; ++t) EXPECT_EQ(alloc_->tree_load(t), 1u);
  // Cross-pod groups reach the core; their roots are the four cores.
  std::set<std::string> roots;
  for (const Placement& h : held) roots.insert(topo_->switch_at(h.subtree.root()).name);
  EXPECT_EQ(roots, (std::set<std::string>{"core00", "core01", "core10", "core11"}));
  // A fifth goes to the least loaded again (tree 0 on a tie).
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h8"}, 2, 1024), nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->tree_id(), 0u);
  for (const Placement& h : held) alloc_->Release(h);
  for (int s = 0; s < topo_->num_switches(); ++s) {
    EXPECT_EQ(alloc_->used(s).groups, 0u);
    EXPECT_EQ(alloc_->used(s).slots, 0u);
  }
}

TEST_F(AllocatorTest, FatTreeAvoidsDeadSwitchesAndDownLinksAndExplainsEachTree) {
  Load("fat_tree.yaml");
  // A pod-0 group lives under agg00 (trees 0, 1) or agg01 (trees 2, 3).
  alloc_->SetSwitchUsable(topo_->FindSwitch("agg00"), false, "dead: missed heartbeats");
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h2"}, 2, 1024), nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(topo_->switch_at(p->subtree.root()).name, "agg01");
  alloc_->SetLinkDown(2, topo_->FindSwitch("edge01"), true, "QP error: retries exhausted");
  alloc_->SetLinkDown(3, topo_->FindSwitch("edge00"), true, "QP error: retries exhausted");
  std::vector<Shortfall> why;
  p = alloc_->PlanGroup(Request({"h0", "h2"}, 2, 1024), &why);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(why.size(), 4u);
  EXPECT_EQ(why[0].tree_id, 0);
  EXPECT_EQ(why[0].resource, "switch");
  EXPECT_EQ(why[0].switch_name, "agg00");
  EXPECT_EQ(why[2].resource, "link");
  EXPECT_EQ(why[2].switch_name, "edge01");
  EXPECT_NE(p.status().message().find("tree 2: link edge01 -> agg01 is down"), std::string::npos)
      << p.status();
  EXPECT_NE(p.status().message().find("tree 0: switch agg00 is unusable: dead"), std::string::npos);
  // A group inside one edge switch does not care.
  EXPECT_TRUE(alloc_->PlanGroup(Request({"h0", "h1"}, 2, 1024), nullptr).ok());
  // Re-planning away from tree 1 prefers any other tree that fits.
  alloc_->SetSwitchUsable(topo_->FindSwitch("agg00"), true, "");
  absl::StatusOr<Placement> r = alloc_->PlanGroup(Request({"h0", "h2"}, 2, 1024), nullptr, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tree_id(), 1u);
}

TEST_F(AllocatorTest, ReservationIsAllOrNothing) {
  Load("two_level.yaml");
  // Fill root0's QPs so that a new link cannot be connected.
  int root = topo_->FindSwitch("root0");
  ASSERT_TRUE(alloc_->ReserveQps({{root, 127}}, nullptr).ok());
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h2"}, 4, 64), nullptr);
  std::vector<Shortfall> why;
  p = alloc_->PlanGroup(Request({"h0", "h2"}, 4, 64), &why);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(why[0].switch_name, "root0");
  EXPECT_EQ(why[0].resource, "qps");
  EXPECT_EQ(why[0].needed, 2u);
  EXPECT_EQ(why[0].free, 1u);
  EXPECT_EQ(Used("leaf0"), (Usage{0, 0, 0}));
  EXPECT_EQ(Used("leaf1"), (Usage{0, 0, 0}));
  // Host QPs: all or nothing across switches.
  int leaf0 = topo_->FindSwitch("leaf0");
  absl::Status s = alloc_->ReserveQps({{leaf0, 2}, {root, 2}}, &why);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Used("leaf0").qps, 0u);
  alloc_->ReleaseQps({{root, 127}});
  EXPECT_EQ(Used("root0").qps, 0u);
}

TEST_F(AllocatorTest, UnregisteredSwitchesAreUnusable) {
  Load("single_switch.yaml");
  alloc_->SetSwitchUsable(0, false, "not registered");
  std::vector<Shortfall> why;
  absl::StatusOr<Placement> p = alloc_->PlanGroup(Request({"h0", "h1"}, 1, 64), &why);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(why[0].resource, "switch");
  EXPECT_NE(p.status().message().find("sw0 is unusable: not registered"), std::string::npos);
}

}  // namespace
}  // namespace netfold::manager
