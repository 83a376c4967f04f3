// Tests of how a group is brought up on switches: the phases of a tree
// link (one batch each, a failed link skipping the later phases and undone),
// the confirmation of installs; and, through the manager, that a group
// inside one leaf needs no link and a failed install leaves nothing behind.
#include "manager/group_installer.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/manager_test_fixture.h"

namespace netfold::manager {
namespace {

// Answers every command at once: a new QP for CreateQp, OK otherwise, or
// the status set for the switch; records the batches it was given.
class ScriptedCommander : public SwitchCommander {
 public:
  std::vector<absl::StatusOr<control::CommandResult>> Execute(
      const std::vector<SwitchCommand>& commands, absl::Duration) override {
    batches.push_back(commands);
    std::vector<absl::StatusOr<control::CommandResult>> out;
    for (const SwitchCommand& c : commands) {
      auto failing = fail.find(c.switch_name);
      if (failing != fail.end()) {
        out.push_back(failing->second);
        continue;
      }
      control::CommandResult r;
      if (c.message.has_create_qp()) {
        r.mutable_qp()->set_qpn(next_qpn++);
        r.mutable_qp()->set_psn(1000 + r.qp().qpn());
      }
      out.push_back(r);
    }
    return out;
  }

  std::vector<std::vector<SwitchCommand>> batches;
  std::map<std::string, absl::Status> fail;
  uint32_t next_qpn = 0x100;
};

LinkEnds Ends(int child, const std::string& name) {
  LinkEnds e;
  e.child = child;
  e.parent = 0;
  e.child_name = name;
  e.parent_name = "root0";
  e.child_address = name + ":4791";
  e.parent_address = "root0:4791";
  return e;
}

TEST(GroupInstallerTest, ConnectsLinksPhaseByPhaseInOneBatchEach) {
  ScriptedCommander switches;
  GroupInstaller installer(&switches, absl::Seconds(1));
  std::vector<LinkAttempt> links = installer.ConnectLinks(3, {Ends(1, "leaf0"), Ends(2, "leaf1")});
  ASSERT_EQ(links.size(), 2u);
  ASSERT_EQ(switches.batches.size(), 3u);
  for (const auto& batch : switches.batches) ASSERT_EQ(batch.size(), 2u);
  // 1. The parent's QPs, toward each child, on tree 3.
  const SwitchCommand& p0 = switches.batches[0][0];
  EXPECT_EQ(p0.switch_name, "root0");
  EXPECT_EQ(p0.message.create_qp().peer().switch_peer().name(), "leaf0");
  EXPECT_EQ(p0.message.create_qp().peer().switch_peer().tree_id(), 3u);
  EXPECT_EQ(p0.message.create_qp().pkey(), kDefaultPkey);
  EXPECT_FALSE(p0.message.create_qp().has_remote());
  // 2. Each child's QP, toward the parent's.
  const SwitchCommand& c1 = switches.batches[1][1];
  EXPECT_EQ(c1.switch_name, "leaf1");
  EXPECT_EQ(c1.message.create_qp().peer().switch_peer().name(), "root0");
  EXPECT_EQ(c1.message.create_qp().remote().address(), "root0:4791");
  EXPECT_EQ(c1.message.create_qp().remote().qpn(), links[1].parent_qp.qpn());
  EXPECT_EQ(c1.message.create_qp().remote().psn(), links[1].parent_qp.psn());
  // 3. The parent's QPs connected toward the children's.
  const SwitchCommand& r1 = switches.batches[2][1];
  EXPECT_EQ(r1.switch_name, "root0");
  EXPECT_EQ(r1.message.connect_qp().qpn(), links[1].parent_qp.qpn());
  EXPECT_EQ(r1.message.connect_qp().remote().address(), "leaf1:4791");
  EXPECT_EQ(r1.message.connect_qp().remote().qpn(), links[1].child_qp.qpn());
  for (const LinkAttempt& l : links) {
    EXPECT_TRUE(l.status.ok()) << l.status;
    EXPECT_TRUE(l.parent_created && l.child_created);
    EXPECT_NE(l.parent_qp.qpn(), l.child_qp.qpn());
  }
  Outbox undo;
  GroupInstaller::Undo(links[0], &undo);
  ASSERT_EQ(undo.commands.size(), 2u);  // both ends
  EXPECT_EQ(undo.commands[0].message.destroy_qp().qpn(), links[0].parent_qp.qpn());
  EXPECT_EQ(undo.commands[1].switch_name, "leaf0");
}

TEST(GroupInstallerTest, ALinkThatFailsAPhaseSkipsTheRestAndIsUndone) {
  ScriptedCommander switches;
  switches.fail["leaf1"] = absl::UnavailableError("not connected");
  GroupInstaller installer(&switches, absl::Seconds(1));
  std::vector<LinkAttempt> links = installer.ConnectLinks(0, {Ends(1, "leaf0"), Ends(2, "leaf1")});
  ASSERT_EQ(switches.batches.size(), 3u);
  EXPECT_EQ(switches.batches[2].size(), 1u);  // leaf1's link stopped at phase 2
  EXPECT_TRUE(links[0].status.ok());
  EXPECT_EQ(links[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(links[1].status.message().find("switch leaf1: not connected"), std::string::npos);
  EXPECT_TRUE(links[1].parent_created);
  EXPECT_FALSE(links[1].child_created);
  Outbox undo;
  GroupInstaller::Undo(links[1], &undo);
  ASSERT_EQ(undo.commands.size(), 1u);  // the parent's QP only
  EXPECT_EQ(undo.commands[0].switch_name, "root0");
  EXPECT_EQ(undo.commands[0].message.destroy_qp().qpn(), links[1].parent_qp.qpn());
  // When every link fails, nothing more is sent.
  switches.batches.clear();
  switches.fail["root0"] = absl::DeadlineExceededError("no answer");
  links = installer.ConnectLinks(0, {Ends(1, "leaf0")});
  EXPECT_EQ(switches.batches.size(), 1u);
  EXPECT_EQ(links[0].status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(GroupInstallerTest, InstallNamesTheFirstSwitchThatDidNotConfirm) {
  ScriptedCommander switches;
  GroupInstaller installer(&switches, absl::Seconds(1));
  std::vector<SwitchCommand> installs = {{"leaf0", {}}, {"leaf1", {}}, {"leaf2", {}}};
  EXPECT_TRUE(installer.Install(9, installs).ok());
  switches.fail["leaf1"] = absl::InternalError("full");
  switches.fail["leaf2"] = absl::DeadlineExceededError("late");
  absl::Status s = installer.Install(9, installs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "group 9 was not confirmed: switch leaf1: full");
  std::vector<absl::Status> each = installer.InstallEach(installs);
  ASSERT_EQ(each.size(), 3u);
  EXPECT_TRUE(each[0].ok());
  EXPECT_EQ(each[2].code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ManagerTest, GroupInsideOneLeafNeverLeavesIt) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  absl::StatusOr<control::GroupInfo> g = Group(job, {2, 3});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->root_switch(), "leaf1");
  ASSERT_EQ(g->switches_size(), 1);
  std::optional<control::InstallGroup> ig = fabric_->Get("leaf1")->GetGroup(g->group_id());
  ASSERT_TRUE(ig.has_value());
  EXPECT_TRUE(ig->is_root());
  EXPECT_EQ(ig->parent_qpn(), 0u);
  EXPECT_FALSE(fabric_->Get("root0")->HasGroup(g->group_id()));
  EXPECT_EQ(fabric_->Get("root0")->num_qps(), 0u);  // no tree link was needed
}

TEST_F(ManagerTest, FailedInstallLeavesNothingBehind) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  fabric_->Get("leaf2")->set_fail_installs(true);
  absl::Status s = Group(job, {0, 4}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("switch leaf2: injected install failure"), std::string::npos) << s;
  for (FakeSwitch* sw : fabric_->All()) EXPECT_EQ(sw->num_groups(), 0u) << sw->name();
  EXPECT_EQ(am_->GetStatus().groups_size(), 0);
  ExpectLedgerMatchesSwitches();
  // A hung switch: the deadline answer, and again nothing left behind.
  fabric_->Get("leaf2")->set_fail_installs(false);
  fabric_->SetHung("leaf2", true);
  s = Group(job, {0, 4}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  fabric_->SetHung("leaf2", false);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 4});
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectLedgerMatchesSwitches();
}

}  // namespace
}  // namespace netfold::manager
