// The manager over a fabric of data planes (docs/manager.md, "Data planes"):
// ranks attach in each plane, a group uses the plane it asks for, and a
// plane's failures, re-attaches and the journal keep to that plane.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/manager_test_fixture.h"
#include "manager/testing/temp_dir.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

// root over leaf0 (h0, h1) and leaf1 (h2, h3), in two planes.
constexpr char kTwoPlanes[] =
    "name: planes\nplanes: 2\n"
    "defaults: {capacity: {trees: 8, groups: 16, slots: 256, slot_bytes: 4048, qps: 64}}\n"
    "switches:\n  - {name: root, tier: 1}\n  - {name: leaf0, tier: 0}\n"
    "  - {name: leaf1, tier: 0}\n"
    "links:\n  - [leaf0, root]\n  - [leaf1, root]\n"
    "hosts:\n  - {name: h0, switch: leaf0}\n  - {name: h1, switch: leaf0}\n"
    "  - {name: h2, switch: leaf1}\n  - {name: h3, switch: leaf1}\n";

const std::vector<std::string> kHosts = {"h0", "h1", "h2", "h3"};

class DataPlanesTest : public ManagerTest {
 protected:
  void StartPlanes(ManagerOptions options = NoHostTimeout()) {
    absl::StatusOr<Topology> topo = Topology::Parse(kTwoPlanes);
    ASSERT_TRUE(topo.ok()) << topo.status();
    StartOn(*std::move(topo), options);
    RegisterAll();
  }

  static ManagerOptions NoHostTimeout() {
    ManagerOptions options;
    options.host_timeout = absl::ZeroDuration();
    return options;
  }

  void HostHeartbeats(const control::CreateJobResponse& job, const std::vector<uint32_t>& ranks) {
    for (uint32_t r : ranks) {
      control::HostHeartbeatRequest hb;
      *hb.mutable_job() = Creds(job);
      hb.set_rank(r);
      ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
    }
  }

  // A job of the four hosts, every rank attached in both planes.
  control::CreateJobResponse JobInBothPlanes() {
    control::CreateJobResponse job = CreateJob(kHosts);
    AttachAll(job, 4);
    AttachAll(job, 4, 1);
    return job;
  }

  // A group of all four ranks in `plane`.
  absl::StatusOr<control::GroupInfo> GroupOfAll(const control::CreateJobResponse& job,
                                                const std::string& tag, uint32_t plane) {
    return Group(job, {0, 1, 2, 3}, tag, 0, 0, plane);
  }

  uint32_t UsedQps(const std::string& name) {
    const control::GetStatusResponse st = am_->GetStatus();
    const control::SwitchStatus* s = SwitchStatus(st, name);
    return s == nullptr ? 0 : s->used().qps();
  }

  static bool EndsWith(const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
  }
};

TEST_F(DataPlanesTest, RanksAttachInEachPlaneAndGroupsUseThePlaneTheyAskFor) {
  StartPlanes();
  control::CreateJobResponse job = CreateJob(kHosts);
  for (uint32_t r = 0; r < 4; ++r) {
    absl::StatusOr<control::AttachResponse> a = Attach(job, r);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->planes(), 2u);
    EXPECT_EQ(a->leaf_switch(), r < 2 ? "leaf0" : "leaf1");
  }
  // Plane 1 before any rank attached there: refused, saying why.
  absl::StatusOr<control::GroupInfo> early = Group(job, {0, 1, 2, 3}, "", 0, 0, /*plane=*/1);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("not attached in plane 1"), std::string::npos)
      << early.status();
  EXPECT_EQ(UsedQps("leaf0@1"), 0u);
  control::ExplainRequest ex;
  ex.mutable_group()->set_job_id(job.job_id());
  for (uint32_t r = 0; r < 4; ++r) ex.mutable_group()->add_ranks(r);
  ex.mutable_group()->set_plane(1);
  control::ExplainResponse why = am_->Explain(ex);
  EXPECT_FALSE(why.fits());
  EXPECT_NE(why.summary().find("not attached in plane 1"), std::string::npos) << why.summary();

  // In the other order than plane 0's, so that the leaves' QPNs for the
  // ranks differ between planes.
  std::vector<uint32_t> plane1_qpn(4);
  for (uint32_t r : {3u, 2u, 1u, 0u}) {
    absl::StatusOr<control::AttachResponse> a = Attach(job, r, 1);
    ASSERT_TRUE(a.ok()) << a.status();
    const std::string leaf = r < 2 ? "leaf0@1" : "leaf1@1";
    EXPECT_EQ(a->leaf_switch(), leaf);
    EXPECT_EQ(a->switch_endpoint().address(), fabric_->Get(leaf)->data_address());
    std::optional<FakeSwitch::Qp> qp = fabric_->Get(leaf)->GetQp(a->switch_endpoint().qpn());
    ASSERT_TRUE(qp.has_value());
    EXPECT_EQ(qp->remote.qpn(), 1100 + r);  // the rank's plane-1 QP
    plane1_qpn[r] = a->switch_endpoint().qpn();
  }
  EXPECT_EQ(UsedQps("leaf0@1"), 2u);  // reserved at the first attach there
  why = am_->Explain(ex);
  EXPECT_TRUE(why.fits()) << why.summary();
  EXPECT_NE(why.summary().find("root root@1"), std::string::npos) << why.summary();
  ex.mutable_group()->set_plane(2);
  EXPECT_FALSE(am_->Explain(ex).fits());

  absl::StatusOr<control::GroupInfo> g0 = GroupOfAll(job, "a", 0);
  absl::StatusOr<control::GroupInfo> g1 = GroupOfAll(job, "b", 1);
  ASSERT_TRUE(g0.ok()) << g0.status();
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ(g0->plane(), 0u);
  EXPECT_EQ(g0->root_switch(), "root");
  EXPECT_EQ(g1->plane(), 1u);
  EXPECT_EQ(g1->root_switch(), "root@1");
  EXPECT_EQ(g1->root_data_address(), fabric_->Get("root@1")->data_address());
  for (const std::string& sw : g1->switches()) EXPECT_TRUE(EndsWith(sw, "@1")) << sw;
  for (const control::GroupMember& m : g1->members()) {
    EXPECT_TRUE(EndsWith(m.leaf_switch(), "@1")) << m.leaf_switch();
  }
  // The plane-1 leaves fold the ranks' plane-1 QPs; plane 0's never see g1.
  std::optional<control::InstallGroup> at_leaf = fabric_->Get("leaf0@1")->GetGroup(g1->group_id());
  ASSERT_TRUE(at_leaf.has_value());
  ASSERT_EQ(at_leaf->children_size(), 2);
  EXPECT_EQ(at_leaf->children(0).qpn(), plane1_qpn[0]);
  EXPECT_EQ(at_leaf->children(1).qpn(), plane1_qpn[1]);
  EXPECT_FALSE(fabric_->Get("leaf0")->HasGroup(g1->group_id()));
  EXPECT_FALSE(fabric_->Get("leaf0@1")->HasGroup(g0->group_id()));
  ExpectLedgerMatchesSwitches();

  // A plane the fabric does not have.
  EXPECT_EQ(Attach(job, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Group(job, {0, 1}, "", 0, 0, 2).status().code(), absl::StatusCode::kInvalidArgument);

  // The job's end gives every plane's QPs back.
  ASSERT_TRUE(DestroyJob(job).ok());
  EXPECT_EQ(fabric_->Get("leaf0@1")->num_groups(), 0u);
  for (const char* leaf : {"leaf0", "leaf0@1", "leaf1@1"}) {
    EXPECT_EQ(fabric_->Get(leaf)->num_qps(), 1u) << leaf;  // its tree link alone
  }
  ExpectLedgerMatchesSwitches();
}

TEST_F(DataPlanesTest, APlanesDeadLeafTakesOnlyThatPlanesGroups) {
  StartPlanes();
  control::CreateJobResponse job = JobInBothPlanes();
  absl::StatusOr<control::GroupInfo> g0 = GroupOfAll(job, "a", 0);
  absl::StatusOr<control::GroupInfo> g1 = GroupOfAll(job, "b", 1);
  ASSERT_TRUE(g0.ok() && g1.ok());
  std::shared_ptr<EventStream> w0 = Watch(job, 0);

  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats({"leaf0@1"});
    am_->Tick();
  }
  EXPECT_EQ(SwitchStatus(am_->GetStatus(), "leaf0@1")->state(), control::SwitchStatus::DEAD);
  bool revoked_g1 = false, detached_in_1 = false;
  for (const JobEvent& e : Drain(*w0)) {
    EXPECT_NE(e.group_id(), g0->group_id()) << e.DebugString();
    if (e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == g1->group_id()) revoked_g1 = true;
    if (e.kind() == JobEvent::RANK_DETACHED) {
      EXPECT_EQ(e.plane(), 1u) << e.DebugString();
      EXPECT_EQ(e.ranks_size(), 2);
      detached_in_1 = true;
    }
  }
  EXPECT_TRUE(revoked_g1);
  EXPECT_TRUE(detached_in_1);
  // Plane 0 serves as before; plane 1 wants ranks 0 and 1 back first.
  EXPECT_TRUE(fabric_->Get("root")->HasGroup(g0->group_id()));
  EXPECT_TRUE(Group(job, {0, 2}, "c").ok());
  absl::StatusOr<control::GroupInfo> again = Group(job, {0, 2}, "d", 0, 0, 1);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
  EXPECT_TRUE(Group(job, {2, 3}, "e", 0, 0, 1).ok());  // leaf1@1 lives
}

TEST_F(DataPlanesTest, AttachingAgainInOnePlaneLeavesTheOthers) {
  StartPlanes();
  control::CreateJobResponse job = JobInBothPlanes();
  absl::StatusOr<control::GroupInfo> g0 = GroupOfAll(job, "a", 0);
  absl::StatusOr<control::GroupInfo> g1 = GroupOfAll(job, "b", 1);
  ASSERT_TRUE(g0.ok() && g1.ok());
  const uint32_t qps_before = UsedQps("leaf0@1");
  ASSERT_TRUE(Attach(job, 0, 1, /*attempt=*/1).ok());  // a new endpoint
  EXPECT_FALSE(fabric_->Get("leaf0@1")->HasGroup(g1->group_id()));
  EXPECT_TRUE(fabric_->Get("leaf0")->HasGroup(g0->group_id()));
  EXPECT_EQ(UsedQps("leaf0@1"), qps_before);  // the reservation is the rank's, not the QP's
  EXPECT_TRUE(GroupOfAll(job, "c", 1).ok());
  ExpectLedgerMatchesSwitches();
}

TEST_F(DataPlanesTest, PlaneAttachmentsAndGroupsSurviveAManagerRestart) {
  TempDir dir;
  state_dir_ = dir.path() + "/state";
  StartPlanes();
  control::CreateJobResponse job = JobInBothPlanes();
  absl::StatusOr<control::GroupInfo> g1 = GroupOfAll(job, "b", 1);
  ASSERT_TRUE(g1.ok()) << g1.status();
  const control::GetStatusResponse before = am_->GetStatus();
  int commands_before = 0;
  for (FakeSwitch* s : fabric_->All()) commands_before += s->commands_applied();

  StartManager();
  const control::GetStatusResponse after = am_->GetStatus();
  ASSERT_EQ(after.switches_size(), before.switches_size());
  for (int i = 0; i < after.switches_size(); ++i) {
    EXPECT_EQ(after.switches(i).used().DebugString(), before.switches(i).used().DebugString())
        << after.switches(i).name();
  }
  RegisterAll();
  int commands_after = 0;
  for (FakeSwitch* s : fabric_->All()) commands_after += s->commands_applied();
  EXPECT_EQ(commands_after, commands_before);  // nothing to re-install or remove
  EXPECT_TRUE(fabric_->Get("leaf0@1")->HasGroup(g1->group_id()));
  EXPECT_TRUE(Group(job, {1, 3}, "c", 0, 0, 1).ok());  // still attached in plane 1
  ExpectLedgerMatchesSwitches();
}

// The same endpoint again is a retry whose answer was lost: the same
// attachment, nothing revoked, nothing published.
TEST_F(DataPlanesTest, AttachingAgainFromTheSameEndpointIsARetry) {
  StartPlanes();
  control::CreateJobResponse job = JobInBothPlanes();
  absl::StatusOr<control::GroupInfo> g1 = GroupOfAll(job, "b", 1);
  ASSERT_TRUE(g1.ok());
  std::shared_ptr<EventStream> w = Watch(job, 0);
  for (uint32_t plane : {0u, 1u}) {
    absl::StatusOr<control::AttachResponse> first = Attach(job, 0, plane);
    absl::StatusOr<control::AttachResponse> again = Attach(job, 0, plane);
    ASSERT_TRUE(first.ok() && again.ok());
    EXPECT_EQ(again->switch_endpoint().DebugString(), first->switch_endpoint().DebugString());
  }
  EXPECT_TRUE(fabric_->Get("leaf0@1")->HasGroup(g1->group_id()));
  EXPECT_TRUE(Drain(*w).empty());
  ExpectLedgerMatchesSwitches();
}

// A host that falls silent is detached in every plane it is attached in
// (an event per plane), one attached in plane 1 alone included, and its
// groups of both planes are revoked.
TEST_F(DataPlanesTest, ASilentHostIsDetachedInEveryPlane) {
  ManagerOptions options;
  options.host_timeout = absl::Seconds(5);
  StartPlanes(options);
  control::CreateJobResponse job = CreateJob(kHosts);
  AttachAll(job, 3);
  AttachAll(job, 4, 1);  // rank 3 in plane 1 alone
  absl::StatusOr<control::GroupInfo> g0 = Group(job, {0, 2}, "a");
  absl::StatusOr<control::GroupInfo> g1 = Group(job, {1, 3}, "b", 0, 0, 1);
  ASSERT_TRUE(g0.ok() && g1.ok());
  std::shared_ptr<EventStream> w0 = Watch(job, 0);  // a member of g0
  std::shared_ptr<EventStream> w1 = Watch(job, 1);  // and of g1
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats();
    HostHeartbeats(job, {0, 1});  // ranks 2 and 3 went quiet
    am_->Tick();
  }
  std::map<uint32_t, std::set<uint32_t>> detached;  // plane -> ranks
  std::set<uint64_t> revoked;
  for (EventStream* w : {w0.get(), w1.get()}) {
    for (const JobEvent& e : Drain(*w)) {
      if (e.kind() == JobEvent::RANK_DETACHED) {
        detached[e.plane()].insert(e.ranks().begin(), e.ranks().end());
      }
      if (e.kind() == JobEvent::GROUP_REVOKED) revoked.insert(e.group_id());
    }
  }
  EXPECT_EQ(detached[0], (std::set<uint32_t>{2}));
  EXPECT_EQ(detached[1], (std::set<uint32_t>{2, 3}));
  EXPECT_EQ(revoked, (std::set<uint64_t>{g0->group_id(), g1->group_id()}));
  ExpectLedgerMatchesSwitches();
}

// A job whose ranks lost plane 0 (their leaf died) but are attached in
// plane 1 is not abandoned: plane 1 goes on serving it.
TEST_F(DataPlanesTest, AJobAttachedInAnotherPlaneIsNotAbandoned) {
  ManagerOptions options = NoHostTimeout();
  options.abandoned_job_timeout = absl::Seconds(3);
  StartPlanes(options);
  control::CreateJobResponse job = CreateJob({"h0", "h1"});  // both on leaf0
  AttachAll(job, 2);
  AttachAll(job, 2, 1);
  absl::StatusOr<control::GroupInfo> g1 = Group(job, {0, 1}, "b", 0, 0, 1);
  ASSERT_TRUE(g1.ok());
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats({"leaf0"});
    am_->Tick();
  }
  const control::GetStatusResponse st = am_->GetStatus();
  EXPECT_EQ(SwitchStatus(st, "leaf0")->state(), control::SwitchStatus::DEAD);
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).num_attached(), 2u);
  EXPECT_TRUE(fabric_->Get("leaf0@1")->HasGroup(g1->group_id()));
}

// A manager restarted over a topology with fewer planes forgets the
// attachments in the planes gone, and keeps the job.
TEST_F(DataPlanesTest, ARestartWithFewerPlanesKeepsTheJob) {
  TempDir dir;
  state_dir_ = dir.path() + "/state";
  StartPlanes();
  control::CreateJobResponse job = JobInBothPlanes();
  ASSERT_TRUE(GroupOfAll(job, "a", 0).ok());
  ASSERT_TRUE(GroupOfAll(job, "b", 1).ok());

  std::string one_plane = kTwoPlanes;
  one_plane.replace(one_plane.find("planes: 2"), 9, "planes: 1");
  absl::StatusOr<Topology> topo = Topology::Parse(one_plane);
  ASSERT_TRUE(topo.ok()) << topo.status();
  am_.reset();
  topo_ = std::make_unique<Topology>(*std::move(topo));
  fabric_ = std::make_unique<FakeFabric>(*topo_);
  StartManager();
  const control::GetStatusResponse st = am_->GetStatus();
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).num_attached(), 4u);
  EXPECT_EQ(st.groups_size(), 1);  // plane 1's group had no tree left
  EXPECT_EQ(Attach(job, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// Channels spend a job's groups one per plane per communicator: a job that
// leaves its quota of groups to the manager gets the default once per
// channel it takes (at most the fabric's planes), within the per-job limit;
// a job that names its quota gets that.
TEST_F(DataPlanesTest, AJobWithChannelsGetsTheDefaultGroupsOncePerChannel) {
  auto groups_for = [this](uint32_t channels, uint32_t asked) {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.add_ranks()->set_host("h0");
    req.mutable_quota()->set_max_groups(asked);
    req.set_channels(channels);
    absl::StatusOr<control::CreateJobResponse> resp = am_->CreateJob(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->quota().max_groups() : 0u;
  };
  ManagerOptions options = NoHostTimeout();
  options.limits.default_groups_per_job = 3;
  StartPlanes(options);
  EXPECT_EQ(groups_for(0, 0), 3u);
  EXPECT_EQ(groups_for(1, 0), 3u);
  EXPECT_EQ(groups_for(2, 0), 6u);
  EXPECT_EQ(groups_for(9, 0), 6u);  // two planes: two channels at most
  EXPECT_EQ(groups_for(2, 4), 4u);  // asked for
  EXPECT_EQ(groups_for(2, 1), 1u);

  options.limits.max_groups_per_job = 5;
  StartPlanes(options);
  EXPECT_EQ(groups_for(2, 0), 5u);  // the per-job limit, not a refusal
  EXPECT_EQ(groups_for(1, 0), 3u);
}

}  // namespace
}  // namespace netfold::manager
