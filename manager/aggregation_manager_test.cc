// Tests of the aggregation manager's lifecycle against an in-process fabric
// of fake switches and a fake clock: jobs and groups end to end, what
// switches are told, failures of switches and links with re-planning,
// reconciliation, and a create/destroy loop without leaks. The pieces it
// delegates to have their own tests beside them (admission, admin_report,
// event_hub, group_installer, liveness, recovery, state_records,
// fabric_state).
#include "manager/aggregation_manager.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/manager_test_fixture.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

// A job whose ranks use RoCE NICs asks for the default partition: its
// switch QPs and group state carry P_Key 0xFFFF, and two such jobs coexist
// (their Q_Keys differ) beside a job with a partition of its own.
TEST_F(ManagerTest, DefaultPartitionJobsUsePkeyFfffAndShareIt) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse a = CreateJob({"h0", "h1"}, {}, /*default_partition=*/true);
  control::CreateJobResponse b = CreateJob({"h2", "h3"}, {}, /*default_partition=*/true);
  control::CreateJobResponse own = CreateJob({"h4", "h5"});
  EXPECT_EQ(a.pkey(), 0xffffu);
  EXPECT_EQ(b.pkey(), 0xffffu);
  EXPECT_NE(a.qkey(), b.qkey());
  EXPECT_NE(own.pkey(), 0xffffu);
  EXPECT_NE(own.pkey() & 0x8000, 0u);

  AttachAll(a, 2);
  absl::StatusOr<control::AttachResponse> att = Attach(a, 1);
  ASSERT_TRUE(att.ok()) << att.status();
  EXPECT_EQ(att->pkey(), 0xffffu);
  std::optional<FakeSwitch::Qp> qp =
      fabric_->Get(att->leaf_switch())->GetQp(att->switch_endpoint().qpn());
  ASSERT_TRUE(qp.has_value());
  EXPECT_EQ(qp->pkey, 0xffffu);
  absl::StatusOr<control::GroupInfo> g = Group(a, {0, 1});
  ASSERT_TRUE(g.ok()) << g.status();
  std::optional<control::InstallGroup> leaf = fabric_->Get("leaf0")->GetGroup(g->group_id());
  ASSERT_TRUE(leaf.has_value());
  EXPECT_EQ(leaf->pkey(), 0xffffu);
  EXPECT_EQ(leaf->qkey(), a.qkey());

  // Destroying one default-partition job leaves the other's partition alone.
  control::DestroyJobRequest destroy;
  *destroy.mutable_job() = Creds(a);
  ASSERT_TRUE(am_->DestroyJob(destroy).ok());
  absl::StatusOr<control::AttachResponse> att_b = Attach(b, 0);
  ASSERT_TRUE(att_b.ok()) << att_b.status();
  EXPECT_EQ(att_b->pkey(), 0xffffu);
}

TEST_F(ManagerTest, JobAndGroupLifecycleOnTwoLevel) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  EXPECT_EQ(job.job_key().size(), 16u);
  EXPECT_NE(job.pkey() & 0x8000, 0u);
  EXPECT_EQ(job.qkey() & 0x80000000u, 0u);
  EXPECT_EQ(job.quota().num_slots(), 64u);  // defaults filled in (128: a quarter of 256 slots)
  EXPECT_EQ(job.quota().slot_bytes(), 4032u);

  AttachAll(job, 8);
  // Again from a new endpoint (a restarted data path): replaces the QP.
  absl::StatusOr<control::AttachResponse> a = Attach(job, 7, 0, /*attempt=*/1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->leaf_switch(), "leaf3");
  EXPECT_EQ(a->switch_endpoint().address(), fabric_->Get("leaf3")->data_address());
  std::optional<FakeSwitch::Qp> qp = fabric_->Get("leaf3")->GetQp(a->switch_endpoint().qpn());
  ASSERT_TRUE(qp.has_value());
  EXPECT_EQ(qp->remote.address(), "10.0.0.8:4791");
  EXPECT_EQ(qp->remote.qpn(), 107u);
  EXPECT_EQ(qp->peer.host().rank(), 7u);
  EXPECT_EQ(fabric_->Get("leaf3")->num_qps(), 2u);  // the old QP of rank 7 is gone

  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->root_switch(), "root0");
  EXPECT_EQ(g->epoch(), 1u);
  EXPECT_EQ(g->switches_size(), 5);
  EXPECT_EQ(g->members_size(), 8);
  EXPECT_EQ(g->members(3).leaf_switch(), "leaf1");
  EXPECT_EQ(g->members(3).child_index(), 1u);
  // Every node holds the group; the root's children are the four leaves in
  // order, the leaves' children the ranks.
  std::optional<control::InstallGroup> root = fabric_->Get("root0")->GetGroup(g->group_id());
  ASSERT_TRUE(root.has_value());
  EXPECT_TRUE(root->is_root());
  ASSERT_EQ(root->children_size(), 4);
  EXPECT_EQ(root->children(0).switch_name(), "leaf0");
  EXPECT_EQ(root->children(3).switch_name(), "leaf3");
  EXPECT_EQ(root->pkey(), job.pkey());
  EXPECT_EQ(root->qkey(), job.qkey());
  EXPECT_EQ(root->multicast_address(), g->multicast_address());
  // Each child names the member ranks below it (the node routes reduce
  // results and checks bcast roots with them).
  EXPECT_EQ(std::vector<uint32_t>(root->children(1).subtree_ranks().begin(),
                                  root->children(1).subtree_ranks().end()),
            (std::vector<uint32_t>{2, 3}));
  std::optional<control::InstallGroup> leaf1 = fabric_->Get("leaf1")->GetGroup(g->group_id());
  ASSERT_TRUE(leaf1.has_value());
  EXPECT_FALSE(leaf1->is_root());
  ASSERT_EQ(leaf1->children_size(), 2);
  EXPECT_EQ(leaf1->children(0).rank(), 2u);
  ASSERT_EQ(leaf1->children(0).subtree_ranks_size(), 1);
  EXPECT_EQ(leaf1->children(0).subtree_ranks(0), 2u);
  // The leaf's parent QP and the root's child QP are the two ends of one link.
  std::optional<FakeSwitch::Qp> up = fabric_->Get("leaf1")->GetQp(leaf1->parent_qpn());
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->remote.qpn(), root->children(1).qpn());
  EXPECT_EQ(up->remote.address(), fabric_->Get("root0")->data_address());
  std::optional<FakeSwitch::Qp> down = fabric_->Get("root0")->GetQp(root->children(1).qpn());
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->remote.qpn(), leaf1->parent_qpn());
  ExpectLedgerMatchesSwitches();

  ASSERT_TRUE(DestroyGroup(job, g->group_id()).ok());
  for (FakeSwitch* s : fabric_->All()) EXPECT_EQ(s->num_groups(), 0u) << s->name();
  EXPECT_EQ(DestroyGroup(job, g->group_id()).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(DestroyJob(job).ok());
  // Only the tree links' QPs remain: one per leaf, four on the root.
  EXPECT_EQ(fabric_->Get("root0")->num_qps(), 4u);
  EXPECT_EQ(fabric_->Get("leaf0")->num_qps(), 1u);
  control::GetStatusResponse st = am_->GetStatus();
  EXPECT_EQ(st.jobs_size(), 0);
  EXPECT_EQ(SwitchStatus(st, "leaf0")->used().qps(), 1u);
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, TagMakesCreateGroupIdempotent) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  absl::StatusOr<control::GroupInfo> a = Group(job, {0, 3, 5}, "comm-1");
  absl::StatusOr<control::GroupInfo> b = Group(job, {5, 0, 3}, "comm-1");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->group_id(), b->group_id());
  EXPECT_EQ(am_->GetStatus().groups_size(), 1);
  EXPECT_EQ(Group(job, {0, 3}, "comm-1").status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(ManagerTest, DeadSwitchRevokesOnlyAffectedGroups) {
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  Start("two_level.yaml", options);
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  control::CreateJobResponse other = CreateJob({"h0", "h2"});
  AttachAll(other, 2);
  absl::StatusOr<control::GroupInfo> wide = Group(job, {0, 2, 4, 6});
  absl::StatusOr<control::GroupInfo> local = Group(job, {4, 5});
  absl::StatusOr<control::GroupInfo> safe = Group(job, {0, 1, 2});
  absl::StatusOr<control::GroupInfo> other_g = Group(other, {0, 1});
  ASSERT_TRUE(wide.ok() && local.ok() && safe.ok() && other_g.ok());
  std::shared_ptr<EventStream> w0 = Watch(job, 0);
  std::shared_ptr<EventStream> w5 = Watch(job, 5);
  std::shared_ptr<EventStream> o0 = Watch(other, 0);

  // leaf2 stops sending heartbeats; everyone else keeps going.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats({"leaf2"});
    am_->Tick();
  }
  control::GetStatusResponse st = am_->GetStatus();
  EXPECT_EQ(SwitchStatus(st, "leaf2")->state(), control::SwitchStatus::DEAD);
  EXPECT_EQ(SwitchStatus(st, "leaf0")->state(), control::SwitchStatus::UP);

  // Rank 0 hears that the wide group (through leaf2) is gone; ranks 4, 5
  // were detached.
  std::vector<JobEvent> ev = Drain(*w0);
  bool revoked_wide = false, detached = false;
  for (const JobEvent& e : ev) {
    if (e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == wide->group_id()) {
      revoked_wide = true;
      EXPECT_NE(e.reason().find("switch leaf2 is dead"), std::string::npos) << e.reason();
    }
    if (e.kind() == JobEvent::RANK_DETACHED) {
      detached = true;
      EXPECT_EQ(e.ranks_size(), 2);
    }
    EXPECT_NE(e.group_id(), safe->group_id());
  }
  EXPECT_TRUE(revoked_wide);
  EXPECT_TRUE(detached);
  bool revoked_local = false;
  for (const JobEvent& e : Drain(*w5)) {
    revoked_local =
        revoked_local || (e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == local->group_id());
  }
  EXPECT_TRUE(revoked_local);
  EXPECT_TRUE(Drain(*o0).empty());  // the other job was not touched
  // Unaffected groups are still installed; the wide one is gone everywhere.
  EXPECT_TRUE(fabric_->Get("leaf0")->HasGroup(safe->group_id()));
  EXPECT_TRUE(fabric_->Get("root0")->HasGroup(safe->group_id()));
  EXPECT_TRUE(fabric_->Get("leaf1")->HasGroup(other_g->group_id()));
  EXPECT_FALSE(fabric_->Get("root0")->HasGroup(wide->group_id()));
  EXPECT_FALSE(fabric_->Get("leaf0")->HasGroup(wide->group_id()));
  // The leaf2 end of the link is gone from root0 too.
  EXPECT_EQ(fabric_->Get("root0")->num_qps(), 3u);
  st = am_->GetStatus();
  EXPECT_EQ(st.groups_size(), 2);
  // A group touching leaf2 now explains why it cannot be made.
  absl::Status s = Group(job, {0, 4}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);  // rank 4 is detached
  s = Attach(job, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("leaf2"), std::string::npos);
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, LostConnectionIsDetectedAtOnce) {
  Start("two_level.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 7});
  ASSERT_TRUE(g.ok());
  std::shared_ptr<EventStream> w = Watch(job, 0);
  fabric_->SetConnected("leaf3", false);
  am_->SwitchDisconnected("leaf3", sessions_["leaf3"]);
  am_->Tick();  // no time passed
  std::vector<JobEvent> ev = Drain(*w);
  ASSERT_FALSE(ev.empty());
  bool revoked = false;
  for (const JobEvent& e : ev) revoked = revoked || e.kind() == JobEvent::GROUP_REVOKED;
  EXPECT_TRUE(revoked);
  EXPECT_NE(ev.back().reason().find("lost its control connection"), std::string::npos);
  // A stale session's disconnect or heartbeat is ignored.
  am_->SwitchDisconnected("leaf0", 424242);
  am_->Tick();
  EXPECT_EQ(SwitchStatus(am_->GetStatus(), "leaf0")->state(), control::SwitchStatus::UP);
}

TEST_F(ManagerTest, DeadCoreIsReplannedOnAnotherTree) {
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  Start("fat_tree.yaml", options);
  RegisterAll();
  std::vector<std::string> hosts;
  for (int i = 0; i < 16; ++i) hosts.push_back(absl::StrFormat("h%d", i));
  control::CreateJobResponse job = CreateJob(hosts);
  AttachAll(job, 16);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 5, 9, 14});
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string old_root = g->root_switch();
  EXPECT_EQ(old_root.substr(0, 4), "core");
  std::shared_ptr<EventStream> w = Watch(job, 9);
  fabric_->SetConnected(old_root, false);
  am_->SwitchDisconnected(old_root, sessions_[old_root]);
  am_->Tick();
  std::vector<JobEvent> ev = Drain(*w);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind(), JobEvent::GROUP_REPLANNED);
  EXPECT_EQ(ev[0].group_id(), g->group_id());
  EXPECT_EQ(ev[0].group().epoch(), 2u);
  EXPECT_NE(ev[0].group().tree_id(), g->tree_id());
  EXPECT_NE(ev[0].group().root_switch(), old_root);
  EXPECT_EQ(ev[0].group().multicast_address(), g->multicast_address());
  std::optional<control::InstallGroup> ig =
      fabric_->Get(ev[0].group().root_switch())->GetGroup(g->group_id());
  ASSERT_TRUE(ig.has_value());
  EXPECT_EQ(ig->epoch(), 2u);
  // Live switches hold epoch 2 or nothing (the dead core cannot be told).
  for (FakeSwitch* s : fabric_->All()) {
    if (s->name() == old_root) continue;
    std::optional<control::InstallGroup> held = s->GetGroup(g->group_id());
    if (held.has_value()) {
      EXPECT_EQ(held->epoch(), 2u) << s->name();
    }
  }
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, LinkQpErrorReplansAndTheLinkComesBack) {
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  options.link_retry_after = absl::Seconds(10);
  Start("fat_tree.yaml", options);
  RegisterAll();
  // Pod 0: h0 (edge00), h2 (edge01); the group root is agg00 or agg01.
  control::CreateJobResponse job = CreateJob({"h0", "h2"});
  AttachAll(job, 2);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 1});
  ASSERT_TRUE(g.ok());
  std::optional<control::InstallGroup> edge = fabric_->Get("edge00")->GetGroup(g->group_id());
  ASSERT_TRUE(edge.has_value());
  std::shared_ptr<EventStream> w = Watch(job, 0);
  control::QpErrorReport report;
  report.set_qpn(edge->parent_qpn());
  report.set_reason("retries exhausted");
  am_->ReportQpError("edge00", sessions_["edge00"], report);
  am_->Tick();
  std::vector<JobEvent> ev = Drain(*w);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind(), JobEvent::GROUP_REPLANNED);
  EXPECT_NE(ev[0].group().tree_id(), g->tree_id());
  EXPECT_NE(ev[0].reason().find("retries exhausted"), std::string::npos);
  EXPECT_FALSE(fabric_->Get("edge00")->HasQp(edge->parent_qpn()));
  control::GetStatusResponse st = am_->GetStatus();
  int down = 0;
  for (const auto& t : st.trees()) {
    for (const auto& e : t.edges()) down += e.down() ? 1 : 0;
  }
  EXPECT_EQ(down, 1);
  clock_.Advance(absl::Seconds(11));
  Heartbeats();
  am_->Tick();
  st = am_->GetStatus();
  down = 0;
  for (const auto& t : st.trees()) {
    for (const auto& e : t.edges()) down += e.down() ? 1 : 0;
  }
  EXPECT_EQ(down, 0);
  ExpectLedgerMatchesSwitches();
}

// The two-level fabric with failures not re-planned and no host timeout,
// and a job of its 8 hosts, every rank attached (rank r with PSN r).
class ManagerFailuresTest : public ManagerTest {
 protected:
  control::CreateJobResponse JobOfEightWithoutReplanning() {
    ManagerOptions options;
    options.host_timeout = absl::ZeroDuration();
    options.replan_on_failure = false;
    Start("two_level.yaml", options);
    RegisterAll();
    control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
    AttachAll(job, 8);
    return job;
  }
};

// A rank whose link to its leaf broke says so in its heartbeat (a leaf cut
// off has nothing in flight to report the QP's error with): the manager
// detaches it and revokes its groups as for the leaf's own report, so
// that the job's other ranks hear of it at once.
TEST_F(ManagerFailuresTest, ARanksReportedLinkFailureDetachesItAndRevokesItsGroups) {
  control::CreateJobResponse job = JobOfEightWithoutReplanning();
  absl::StatusOr<control::AttachResponse> rank0 = Attach(job, 0);  // a retry: the same answer
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  absl::StatusOr<control::GroupInfo> with0 = Group(job, {0, 4});
  absl::StatusOr<control::GroupInfo> without0 = Group(job, {4, 5});
  ASSERT_TRUE(with0.ok() && without0.ok());
  std::shared_ptr<EventStream> w4 = Watch(job, 4);
  control::HostHeartbeatRequest hb;
  *hb.mutable_job() = Creds(job);
  hb.set_rank(0);
  control::LinkFailure* f = hb.add_link_failures();
  f->set_plane(0);
  f->set_reason("retry count (7) exceeded\nforged log line \xff");  // escaped, not kept as is
  ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
  am_->Tick();
  bool detached = false, revoked = false;
  for (const JobEvent& e : Drain(*w4)) {
    if (e.kind() == JobEvent::RANK_DETACHED) {
      detached = true;
      EXPECT_EQ(e.ranks_size(), 1);
      EXPECT_NE(e.reason().find("reports its link broken: retry count (7) exceeded\\n"),
                std::string::npos)
          << e.reason();
      EXPECT_EQ(e.reason().find('\n'), std::string::npos) << e.reason();
    }
    if (e.kind() == JobEvent::GROUP_REVOKED) {
      EXPECT_EQ(e.group_id(), with0->group_id());
      revoked = true;
    }
  }
  EXPECT_TRUE(detached);
  EXPECT_TRUE(revoked);
  EXPECT_FALSE(fabric_->Get(rank0->leaf_switch())->HasQp(rank0->switch_endpoint().qpn()));
  EXPECT_TRUE(fabric_->Get("leaf2")->HasGroup(without0->group_id()));
  // Told again (its heartbeat's answer lost): nothing more happens.
  ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
  am_->Tick();
  EXPECT_TRUE(Drain(*w4).empty());
  ExpectLedgerMatchesSwitches();
}

// A rank that attached again after its link failed (a new PSN): the
// detach names the attachment it ended (host_psns), and a report of the
// earlier attachment that comes late (its heartbeat's answer lost) leaves
// the new one alone; one of the new attachment detaches it.
TEST_F(ManagerFailuresTest, AReportOfAnEarlierAttachmentLeavesTheNewOneAlone) {
  control::CreateJobResponse job = JobOfEightWithoutReplanning();  // rank 1 with PSN 1
  std::shared_ptr<EventStream> w4 = Watch(job, 4);
  auto report = [&](uint32_t psn) {
    control::HostHeartbeatRequest hb;
    *hb.mutable_job() = Creds(job);
    hb.set_rank(1);
    control::LinkFailure* f = hb.add_link_failures();
    f->set_plane(0);
    f->set_psn(psn);
    f->set_reason("retry count (7) exceeded");
    ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
    am_->Tick();
  };
  auto detached_psns = [&]() {
    std::vector<uint32_t> psns;
    for (const JobEvent& e : Drain(*w4)) {
      if (e.kind() != JobEvent::RANK_DETACHED) continue;
      EXPECT_EQ(e.host_psns_size(), e.ranks_size());
      psns.insert(psns.end(), e.host_psns().begin(), e.host_psns().end());
    }
    return psns;
  };
  report(1);
  EXPECT_EQ(detached_psns(), std::vector<uint32_t>{1});
  absl::StatusOr<control::AttachResponse> again = Attach(job, 1, 0, /*attempt=*/1);  // PSN 101
  ASSERT_TRUE(again.ok()) << again.status();
  report(1);  // late
  EXPECT_TRUE(detached_psns().empty());
  EXPECT_TRUE(fabric_->Get(again->leaf_switch())->HasQp(again->switch_endpoint().qpn()));
  ASSERT_TRUE(Group(job, {1, 4}).ok());
  report(101);
  EXPECT_EQ(detached_psns(), std::vector<uint32_t>{101});
  EXPECT_FALSE(fabric_->Get(again->leaf_switch())->HasQp(again->switch_endpoint().qpn()));
  ExpectLedgerMatchesSwitches();
}

// A revoked group's multicast address is not given again while its
// processes may be joined there: DestroyGroup of the revoked group (which
// answers NOT_FOUND) gives it back.
TEST_F(ManagerFailuresTest, ARevokedGroupsAddressIsHeldUntilItsProcessesDestroyIt) {
  control::CreateJobResponse job = JobOfEightWithoutReplanning();
  absl::StatusOr<control::GroupInfo> doomed = Group(job, {0, 4});  // through leaf2
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  fabric_->SetConnected("leaf2", false);
  am_->SwitchDisconnected("leaf2", sessions_["leaf2"]);
  am_->Tick();
  absl::StatusOr<control::GroupInfo> next = Group(job, {0, 1});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->multicast_address(), doomed->multicast_address());
  control::DestroyGroupRequest destroy;
  *destroy.mutable_job() = Creds(job);
  destroy.set_group_id(doomed->group_id());
  EXPECT_EQ(am_->DestroyGroup(destroy).code(), absl::StatusCode::kNotFound);
  // Freed then, but given again only after the other addresses (they go in
  // turn by group id; fabric_state_test.cc tests both).
  absl::StatusOr<control::GroupInfo> after = Group(job, {0, 2});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->multicast_address(), doomed->multicast_address());
  EXPECT_NE(after->multicast_address(), next->multicast_address());
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, ReconcileRemovesStaleStateOnRegistration) {
  Start("single_switch.yaml");
  FakeSwitch* sw = fabric_->Get("sw0");
  sw->InjectGroup(77, 3);
  uint32_t stale_qp = sw->InjectQp();
  RegisterAll();
  EXPECT_FALSE(sw->HasGroup(77));
  EXPECT_FALSE(sw->HasQp(stale_qp));
  EXPECT_EQ(SwitchStatus(am_->GetStatus(), "sw0")->state(), control::SwitchStatus::UP);
}

TEST_F(ManagerTest, CreateDestroyLoopLeaksNothing) {
  Start("fat_tree.yaml");
  RegisterAll();
  std::vector<std::string> hosts;
  for (int i = 0; i < 16; ++i) hosts.push_back(absl::StrFormat("h%d", i));
  for (int round = 0; round < 10; ++round) {
    control::CreateJobResponse job = CreateJob(hosts);
    AttachAll(job, 16);
    std::vector<uint64_t> groups;
    for (int i = 0; i < 6; ++i) {
      std::vector<uint32_t> ranks;
      for (uint32_t r = static_cast<uint32_t>(i); r < 16; r += 3) ranks.push_back(r);
      absl::StatusOr<control::GroupInfo> g = Group(job, ranks);
      ASSERT_TRUE(g.ok()) << g.status();
      groups.push_back(g->group_id());
    }
    ExpectLedgerMatchesSwitches();
    ASSERT_TRUE(DestroyGroup(job, groups[0]).ok());
    ASSERT_TRUE(DestroyJob(job).ok());  // takes the other groups with it
  }
  control::GetStatusResponse st = am_->GetStatus();
  for (const auto& s : st.switches()) {
    control::ResourceUsage held = fabric_->Get(s.name())->Usage();
    EXPECT_EQ(held.groups(), 0u) << s.name();
    EXPECT_EQ(held.slots(), 0u) << s.name();
    EXPECT_EQ(s.used().groups(), 0u);
    EXPECT_EQ(s.used().slots(), 0u);
    // Only tree-link QPs remain, and the ledger counts exactly those.
    EXPECT_EQ(s.used().qps(), held.qps()) << s.name();
  }
}

}  // namespace
}  // namespace netfold::manager
