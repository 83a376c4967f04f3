// What each failure changes in the books, without a manager: a switch that
// died, a QP error, a switch that came back and is reconciled.
#include "manager/failures.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/test_books.h"

namespace netfold::manager {
namespace {

// Two_level.yaml with job 1 (rank 0 on leaf0, rank 1 on leaf1) and its
// group 5 over both (TestBooks::AddJobWithGroup).
class FailuresTest : public testing::Test {
 protected:
  void SetUp() override { const absl::Status added = books_.AddJobWithGroup();
    ASSERT_TRUE(added.ok()) << added; }

  const Rank& rank(uint32_t r) { return books_.state.jobs.at(1).ranks.at(r); }
  // The commands of `out` for `sw`, by kind.
  static int Count(const Outbox& out, const std::string& sw,
                   control::ManagerMessage::MsgCase kind) {
    int n = 0;
    for (const SwitchCommand& c : out.commands) {
      n += c.switch_name == sw && c.message.msg_case() == kind ? 1 : 0;
    }
    return n;
  }

  TestBooks books_{"two_level.yaml"};
  const int leaf0_ = books_.SwitchIndex("leaf0");
  const int leaf1_ = books_.SwitchIndex("leaf1");
  const int root0_ = books_.SwitchIndex("root0");
};

TEST_F(FailuresTest, ADeadLeafDetachesItsRanksDropsItsLinkAndLosesItsGroups) {
  FabricState& st = books_.state;
  st.switches[leaf1_].dead_reason = "no heartbeat for 3000ms";
  st.switches[leaf1_].death_pending = true;
  Fallout f = SwitchDied(st, leaf1_);
  EXPECT_EQ(f.reason, "switch leaf1 is dead: no heartbeat for 3000ms");
  EXPECT_EQ(st.switches[leaf1_].state, SwitchState::kDead);
  EXPECT_FALSE(st.switches[leaf1_].death_pending);
  EXPECT_FALSE(rank(1).attached);
  EXPECT_TRUE(rank(0).attached) << "leaf0's rank keeps its attachment";
  EXPECT_FALSE(st.links.count({0, leaf1_}));
  EXPECT_TRUE(st.links.count({0, leaf0_}));
  EXPECT_FALSE(st.alloc.LinkDown(0, leaf1_)) << "a dead switch's link may come back with it";
  ASSERT_FALSE(f.lost_groups.empty());
  for (uint64_t g : f.lost_groups) EXPECT_EQ(g, 5u);
  // Nothing is sent to the dead switch; its link's other end lets go.
  EXPECT_EQ(Count(f.out, "leaf1", control::ManagerMessage::kDestroyQp), 0);
  EXPECT_EQ(Count(f.out, "root0", control::ManagerMessage::kDestroyQp), 1);
}

TEST_F(FailuresTest, AQpErrorOnARanksQpDetachesThatRankAlone) {
  FabricState& st = books_.state;
  std::optional<Fallout> f = QpFailed(st, leaf1_, 0x101, "retry exceeded");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->reason, "QP 257 on switch leaf1 failed: retry exceeded");
  EXPECT_EQ(f->lost_groups, (std::vector<uint64_t>{5}));
  EXPECT_FALSE(rank(1).attached);
  EXPECT_TRUE(rank(0).attached);
  EXPECT_TRUE(st.links.count({0, leaf1_})) << "the link is not the QP that failed";
  ASSERT_EQ(f->out.commands.size(), 1u);
  EXPECT_EQ(f->out.commands[0].switch_name, "leaf1");
  EXPECT_EQ(f->out.commands[0].message.destroy_qp().qpn(), 0x101u);
}

TEST_F(FailuresTest, AQpErrorOnALinkDropsItAndKeepsItDown) {
  FabricState& st = books_.state;
  std::optional<Fallout> f = QpFailed(st, root0_, 0x200 + leaf1_, "remote access error");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->lost_groups, (std::vector<uint64_t>{5}));
  EXPECT_FALSE(st.links.count({0, leaf1_}));
  EXPECT_TRUE(st.alloc.LinkDown(0, leaf1_));
  EXPECT_TRUE(rank(0).attached);
  EXPECT_TRUE(rank(1).attached);
  // The same QP number on another switch, or one nobody holds, is nothing.
  EXPECT_FALSE(QpFailed(st, leaf0_, 0x101, "stale").has_value());
  EXPECT_FALSE(QpFailed(st, leaf1_, 0x999, "stale").has_value());
  EXPECT_TRUE(rank(1).attached);
  EXPECT_EQ(st.groups.count(5), 1u);
}

TEST_F(FailuresTest, AReturningSwitchGetsItsLostGroupsBackAndLosesWhatNobodyKnows) {
  FabricState& st = books_.state;
  EXPECT_FALSE(PlanReconcile(st, leaf1_).has_value()) << "only a switch that is reconciling";
  Switch& s = st.switches[leaf1_];
  st.SetSwitchState(leaf1_, SwitchState::kReconciling, "");
  // It kept its QPs (the rank's, the link's) and one nobody knows; it lost
  // group 5 and kept one of an older manager's.
  s.reported_qpns = {0x101, static_cast<uint32_t>(0x300 + leaf1_), 0x777};
  s.reported_groups = {{9, 1}};
  std::optional<Reconciliation> plan = PlanReconcile(st, leaf1_);
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->fallout.lost_groups.empty());
  EXPECT_EQ(plan->install_groups, (std::vector<uint64_t>{5}));
  ASSERT_EQ(plan->installs.size(), 1u);
  EXPECT_EQ(plan->installs[0].switch_name, "leaf1");
  ASSERT_EQ(plan->fallout.out.commands.size(), 2u);
  EXPECT_EQ(plan->fallout.out.commands[0].message.destroy_qp().qpn(), 0x777u);
  EXPECT_EQ(plan->fallout.out.commands[1].message.remove_group().group_id(), 9u);
  EXPECT_TRUE(rank(1).attached);

  // Dying before the end keeps it from coming up.
  s.death_pending = true;
  EndReconcile(st, leaf1_);
  EXPECT_EQ(s.state, SwitchState::kReconciling);
  s.death_pending = false;
  EndReconcile(st, leaf1_);
  EXPECT_EQ(s.state, SwitchState::kUp);
  EXPECT_TRUE(s.reported_qpns.empty());
  EXPECT_TRUE(s.reported_groups.empty());
}

TEST_F(FailuresTest, AReturningSwitchThatLostARanksQpLosesTheRankAndItsGroup) {
  FabricState& st = books_.state;
  Switch& s = st.switches[leaf1_];
  st.SetSwitchState(leaf1_, SwitchState::kReconciling, "");
  s.reported_qpns = {static_cast<uint32_t>(0x300 + leaf1_)};  // the link's, not the rank's
  std::optional<Reconciliation> plan = PlanReconcile(st, leaf1_);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->fallout.lost_groups, (std::vector<uint64_t>{5}));
  EXPECT_EQ(plan->fallout.reason, "switch leaf1 came back without it (restarted?)");
  EXPECT_TRUE(plan->installs.empty()) << "a lost group is re-planned, not installed again";
  EXPECT_FALSE(rank(1).attached);
  EXPECT_TRUE(st.links.count({0, leaf1_}));
  EXPECT_EQ(Count(plan->fallout.out, "leaf1", control::ManagerMessage::kDestroyQp), 0)
      << "the QP it lost is not destroyed again";
}

TEST_F(FailuresTest, ADeadRootLosesTheGroupButNoRank) {
  FabricState& st = books_.state;
  Fallout f = SwitchDied(st, root0_);
  EXPECT_EQ(st.switches[root0_].state, SwitchState::kDead);
  EXPECT_TRUE(rank(0).attached);
  EXPECT_TRUE(rank(1).attached);
  EXPECT_TRUE(st.links.empty()) << "both of its links drop";
  ASSERT_FALSE(f.lost_groups.empty());
  for (uint64_t g : f.lost_groups) EXPECT_EQ(g, 5u);
  // The leaves let go of their ends; the dead root is told nothing.
  EXPECT_EQ(Count(f.out, "leaf0", control::ManagerMessage::kDestroyQp), 1);
  EXPECT_EQ(Count(f.out, "leaf1", control::ManagerMessage::kDestroyQp), 1);
  EXPECT_EQ(Count(f.out, "root0", control::ManagerMessage::kDestroyQp), 0);
}

TEST_F(FailuresTest, AReturningSwitchWithAnOldEpochOrALostLinkIsSetRight) {
  FabricState& st = books_.state;
  Switch& s = st.switches[root0_];
  st.SetSwitchState(root0_, SwitchState::kReconciling, "");
  const uint32_t epoch = st.groups.at(5).epoch;
  // It kept leaf0's link QP, lost leaf1's, and holds group 5 at an older epoch.
  s.reported_qpns = {static_cast<uint32_t>(0x200 + leaf0_)};
  s.reported_groups = {{5, epoch - 1}};
  std::optional<Reconciliation> plan = PlanReconcile(st, root0_);
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(st.links.count({0, leaf1_}));
  EXPECT_FALSE(st.alloc.LinkDown(0, leaf1_))
      << "lost with a restart, not failed: it may be used again";
  EXPECT_TRUE(st.links.count({0, leaf0_}));
  EXPECT_EQ(plan->fallout.lost_groups, (std::vector<uint64_t>{5}));
  EXPECT_TRUE(plan->installs.empty()) << "a lost group is re-planned";
  // The old epoch goes (the group is re-planned under a new one).
  EXPECT_EQ(Count(plan->fallout.out, "root0", control::ManagerMessage::kRemoveGroup), 1);

  // A group still being installed is not installed again from here: its
  // installation is under way.
  books_.state.groups.at(5).state = GroupState::kInstalling;
  Switch& leaf = st.switches[leaf0_];
  st.SetSwitchState(leaf0_, SwitchState::kReconciling, "");
  leaf.reported_qpns = {0x100, static_cast<uint32_t>(0x300 + leaf0_)};
  plan = PlanReconcile(st, leaf0_);
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->installs.empty());
  EXPECT_TRUE(plan->fallout.lost_groups.empty());
}

}  // namespace
}  // namespace netfold::manager
