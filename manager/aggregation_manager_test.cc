// Tests of the aggregation manager's logic against an in-process fabric of
// fake switches and a fake clock: job and group lifecycle, authentication,
// explanations, liveness and faults, journal recovery and reconciliation.
#include "manager/aggregation_manager.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/temp_dir.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

class ManagerTest : public testing::Test {
 protected:
  void Start(const std::string& file, ManagerOptions options = {}) {
    absl::StatusOr<Topology> t = LoadExampleTopology(file);
    ASSERT_TRUE(t.ok()) << t.status();
    topo_ = std::make_unique<Topology>(*std::move(t));
    fabric_ = std::make_unique<FakeFabric>(*topo_);
    options_ = options;
    StartManager();
  }

  // (Re)creates the manager over the same fabric, journaling to state_dir_
  // when set, and recovers what the journal holds.
  void StartManager() {
    am_.reset();
    journal_.reset();
    state::Snapshot loaded;
    if (!state_dir_.empty()) {
      auto j = Journal::Open(state_dir_, &loaded);
      ASSERT_TRUE(j.ok()) << j.status();
      journal_ = *std::move(j);
    }
    am_ = std::make_unique<AggregationManager>(*topo_, options_, clock_, fabric_.get(),
                                               journal_.get());
    ASSERT_TRUE(am_->Recover(loaded).ok());
    sessions_.clear();
  }

  void Register(const std::string& name) {
    uint64_t session = ++next_session_;
    absl::StatusOr<control::RegisterReply> r =
        am_->RegisterSwitch(fabric_->Get(name)->Registration(), session);
    ASSERT_TRUE(r.ok()) << r.status();
    sessions_[name] = session;
  }

  void RegisterAll() {
    for (FakeSwitch* s : fabric_->All()) Register(s->name());
    am_->Tick();  // reconciles
  }

  // Heartbeats from every registered switch except `skip`.
  void Heartbeats(const std::set<std::string>& skip = {}) {
    for (const auto& [name, session] : sessions_) {
      if (skip.count(name)) continue;
      control::SwitchHeartbeat hb;
      *hb.mutable_usage() = fabric_->Get(name)->Usage();
      am_->SwitchHeartbeat(name, session, hb);
    }
  }

  control::CreateJobResponse CreateJob(const std::vector<std::string>& hosts,
                                       control::JobQuota quota = {},
                                       bool default_partition = false) {
    control::CreateJobRequest req;
    req.set_default_partition(default_partition);
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.set_name("test");
    for (size_t i = 0; i < hosts.size(); ++i) {
      control::RankSpec* r = req.add_ranks();
      r->set_rank(static_cast<uint32_t>(i));
      r->set_host(hosts[i]);
    }
    *req.mutable_quota() = quota;
    absl::StatusOr<control::CreateJobResponse> resp = am_->CreateJob(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : control::CreateJobResponse();
  }

  static control::JobCredentials Creds(const control::CreateJobResponse& job) {
    control::JobCredentials c;
    c.set_job_id(job.job_id());
    c.set_job_key(job.job_key());
    return c;
  }

  absl::StatusOr<control::AttachResponse> Attach(const control::CreateJobResponse& job,
                                                 uint32_t rank) {
    control::AttachRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    req.mutable_endpoint()->set_address(absl::StrFormat("10.0.0.%d:4791", rank + 1));
    req.mutable_endpoint()->set_qpn(100 + rank);
    req.mutable_endpoint()->set_psn(rank);
    return am_->Attach(req);
  }

  void AttachAll(const control::CreateJobResponse& job, uint32_t n) {
    for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(Attach(job, r).ok()) << "rank " << r;
  }

  absl::StatusOr<control::GroupInfo> Group(const control::CreateJobResponse& job,
                                           const std::vector<uint32_t>& ranks,
                                           const std::string& tag = "", uint32_t k = 0) {
    control::CreateGroupRequest req;
    *req.mutable_job() = Creds(job);
    for (uint32_t r : ranks) req.add_ranks(r);
    req.set_tag(tag);
    req.set_num_slots(k);
    absl::StatusOr<control::CreateGroupResponse> resp = am_->CreateGroup(req);
    if (!resp.ok()) return resp.status();
    return resp->group();
  }

  absl::Status DestroyGroup(const control::CreateJobResponse& job, uint64_t id) {
    control::DestroyGroupRequest req;
    *req.mutable_job() = Creds(job);
    req.set_group_id(id);
    return am_->DestroyGroup(req);
  }

  absl::Status DestroyJob(const control::CreateJobResponse& job) {
    control::DestroyJobRequest req;
    *req.mutable_job() = Creds(job);
    return am_->DestroyJob(req);
  }

  std::shared_ptr<EventStream> Watch(const control::CreateJobResponse& job, uint32_t rank) {
    control::WatchEventsRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    absl::StatusOr<std::shared_ptr<EventStream>> s = am_->WatchEvents(req);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    std::optional<JobEvent> hello = (*s)->Next(absl::ZeroDuration());
    EXPECT_TRUE(hello.has_value() && hello->kind() == JobEvent::WATCH_STARTED);
    return *s;
  }

  static std::vector<JobEvent> Drain(EventStream& s) {
    std::vector<JobEvent> out;
    while (std::optional<JobEvent> e = s.Next(absl::ZeroDuration())) out.push_back(*e);
    return out;
  }

  const control::SwitchStatus* SwitchStatus(const control::GetStatusResponse& st,
                                            const std::string& name) {
    for (const auto& s : st.switches()) {
      if (s.name() == name) return &s;
    }
    return nullptr;
  }

  // What the manager reserved equals what the switches hold (groups,
  // slots), and it never reserved fewer QPs than a switch holds.
  void ExpectLedgerMatchesSwitches() {
    control::GetStatusResponse st = am_->GetStatus();
    for (const auto& s : st.switches()) {
      if (s.state() != control::SwitchStatus::UP) continue;
      control::ResourceUsage held = fabric_->Get(s.name())->Usage();
      EXPECT_EQ(s.used().groups(), held.groups()) << s.name();
      EXPECT_EQ(s.used().slots(), held.slots()) << s.name();
      EXPECT_GE(s.used().qps(), held.qps()) << s.name();
    }
  }

  FakeClock clock_{absl::Seconds(100)};
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<FakeFabric> fabric_;
  ManagerOptions options_;
  std::string state_dir_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<AggregationManager> am_;
  std::map<std::string, uint64_t> sessions_;
  uint64_t next_session_ = 0;
};

const std::vector<std::string> kTwoLevelHosts = {"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"};

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
  EXPECT_EQ(job.quota().num_slots(), 4u);  // defaults filled in

  AttachAll(job, 8);
  absl::StatusOr<control::AttachResponse> a = Attach(job, 7);  // again: replaces the QP
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

TEST_F(ManagerTest, GroupIdsStopAtTheAggregationHeaderWidth) {
  Start("single_switch.yaml");
  // A manager whose id counter is at the last 32-bit id (as if recovered
  // from a journal that got there).
  state::Snapshot snap;
  snap.mutable_counters()->set_group_id_limit(kMaxGroupId);
  am_ = std::make_unique<AggregationManager>(*topo_, options_, clock_, fabric_.get(), nullptr);
  ASSERT_TRUE(am_->Recover(snap).ok());
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1"}, [] {
    control::JobQuota q;
    q.set_max_groups(4);
    return q;
  }());
  AttachAll(job, 2);
  absl::StatusOr<control::GroupInfo> last = Group(job, {0, 1});
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->group_id(), kMaxGroupId);
  absl::StatusOr<control::GroupInfo> beyond = Group(job, {0, 1});
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(beyond.status().message().find("32 bits"), std::string::npos) << beyond.status();
  ExpectLedgerMatchesSwitches();  // the refused group reserved nothing
  for (const Tree& t : PlanTrees(*topo_)) EXPECT_LT(t.id, kMaxTrees);
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

TEST_F(ManagerTest, RefusesWrongOrMissingKey) {
  Start("single_switch.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});
  control::CreateJobResponse other = CreateJob({"h2"});
  control::CreateJobResponse forged = job;
  forged.set_job_key(other.job_key());  // someone else's key
  EXPECT_EQ(Attach(forged, 0).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Group(forged, {0}).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(DestroyJob(forged).code(), absl::StatusCode::kPermissionDenied);
  control::CreateJobResponse keyless = job;
  keyless.clear_job_key();
  absl::Status s = DestroyJob(keyless);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("missing job key"), std::string::npos);
  control::CreateJobResponse unknown = job;
  unknown.set_job_id(999);
  s = Attach(unknown, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("unknown job or wrong job key"), std::string::npos);
  control::HostHeartbeatRequest hb;
  *hb.mutable_job() = Creds(forged);
  EXPECT_EQ(am_->HostHeartbeat(hb).status().code(), absl::StatusCode::kPermissionDenied);
  control::WatchEventsRequest w;
  *w.mutable_job() = Creds(forged);
  EXPECT_EQ(am_->WatchEvents(w).status().code(), absl::StatusCode::kPermissionDenied);
  // The real key still works.
  EXPECT_TRUE(Attach(job, 0).ok());
  EXPECT_TRUE(DestroyJob(job).ok());
}

TEST_F(ManagerTest, RejectsMalformedRequests) {
  Start("two_level.yaml");
  RegisterAll();
  struct Case {
    std::vector<std::pair<uint32_t, std::string>> ranks;
    uint32_t version;
    absl::StatusCode code;
    std::string text;
  };
  const uint32_t v = control::PROTOCOL_VERSION_CURRENT;
  std::vector<Case> cases = {
      {{}, v, absl::StatusCode::kInvalidArgument, "at least one rank"},
      {{{0, "h0"}, {0, "h1"}}, v, absl::StatusCode::kInvalidArgument, "rank 0 is listed twice"},
      {{{0, "h0"}, {2, "h1"}}, v, absl::StatusCode::kInvalidArgument, "out of range"},
      {{{0, "nohost"}}, v, absl::StatusCode::kInvalidArgument, "host 'nohost' is not in topology"},
      {{{0, "h0"}}, 7, absl::StatusCode::kFailedPrecondition, "protocol version 7"},
  };
  for (const Case& c : cases) {
    control::CreateJobRequest req;
    req.set_protocol_version(c.version);
    for (const auto& [rank, host] : c.ranks) {
      control::RankSpec* r = req.add_ranks();
      r->set_rank(rank);
      r->set_host(host);
    }
    absl::StatusOr<control::CreateJobResponse> resp = am_->CreateJob(req);
    EXPECT_EQ(resp.status().code(), c.code) << c.text;
    EXPECT_NE(resp.status().message().find(c.text), std::string::npos) << resp.status();
  }
  control::CreateJobResponse job = CreateJob({"h0", "h2"});
  control::AttachRequest bad;
  *bad.mutable_job() = Creds(job);
  bad.set_rank(0);
  bad.mutable_endpoint()->set_address("not-an-address");
  bad.mutable_endpoint()->set_qpn(5);
  absl::Status s = am_->Attach(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not an IPv4 ip:port"), std::string::npos);
  bad.mutable_endpoint()->set_address("10.1.1.1:4791");
  bad.mutable_endpoint()->set_qpn(0);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.mutable_endpoint()->set_qpn(1u << 24);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_rank(5);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // Groups: unattached members, duplicates, unknown ranks.
  s = Group(job, {0, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not attached"), std::string::npos);
  AttachAll(job, 2);
  EXPECT_EQ(Group(job, {0, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Group(job, {0, 9}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Group(job, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ManagerTest, ExhaustionIsExplainedAndExplainAgrees) {
  Start("two_level.yaml");
  RegisterAll();
  control::JobQuota quota;
  quota.set_max_groups(64);
  quota.set_num_slots(64);
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts, quota);
  AttachAll(job, 8);
  // leaf2 (h4, h5 = ranks 4, 5) has 256 slots: four groups of 64.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Group(job, {4, 5}).ok());
  absl::Status s = Group(job, {4, 5}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("switch leaf2 has 0 of 256 slots free, needs 64"), std::string::npos)
      << s;
  // The same explanation on demand, with the structured fields.
  control::ExplainRequest ex;
  ex.mutable_group()->set_job_id(job.job_id());
  ex.mutable_group()->add_ranks(0);
  ex.mutable_group()->add_ranks(5);
  control::ExplainResponse why = am_->Explain(ex);
  EXPECT_FALSE(why.fits());
  ASSERT_EQ(why.shortfalls_size(), 1);
  EXPECT_EQ(why.shortfalls(0).switch_name(), "leaf2");
  EXPECT_EQ(why.shortfalls(0).resource(), "slots");
  EXPECT_EQ(why.shortfalls(0).needed(), 64u);
  EXPECT_EQ(why.shortfalls(0).free(), 0u);
  EXPECT_EQ(why.shortfalls(0).capacity(), 256u);
  EXPECT_NE(why.summary().find("leaf2 has 0 of 256 slots free"), std::string::npos);
  // Elsewhere it still fits.
  ex.mutable_group()->clear_ranks();
  ex.mutable_group()->add_ranks(0);
  ex.mutable_group()->add_ranks(7);
  why = am_->Explain(ex);
  EXPECT_TRUE(why.fits()) << why.summary();
  EXPECT_EQ(why.tree_id(), 0);
  // A job that cannot be admitted says why, too.
  control::ExplainRequest jex;
  control::CreateJobRequest* jr = jex.mutable_job();
  jr->set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  for (uint32_t r = 0; r < 200; ++r) {
    control::RankSpec* rs = jr->add_ranks();
    rs->set_rank(r);
    rs->set_host("h0");
  }
  why = am_->Explain(jex);
  EXPECT_FALSE(why.fits());
  ASSERT_GE(why.shortfalls_size(), 1);
  EXPECT_EQ(why.shortfalls(0).resource(), "qps");
  EXPECT_EQ(why.shortfalls(0).switch_name(), "leaf0");
  EXPECT_EQ(why.shortfalls(0).needed(), 200u);
  absl::StatusOr<control::CreateJobResponse> refused = am_->CreateJob(*jr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("switch leaf0 has"), std::string::npos);
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, JobQuotaAndPolicyLimits) {
  ManagerOptions options;
  options.limits.max_slots_per_group = 8;
  Start("single_switch.yaml", options);
  RegisterAll();
  control::JobQuota quota;
  quota.set_max_groups(2);
  quota.set_num_slots(4);
  control::CreateJobResponse job = CreateJob({"h0", "h1"}, quota);
  AttachAll(job, 2);
  ASSERT_TRUE(Group(job, {0}).ok());
  ASSERT_TRUE(Group(job, {1}).ok());
  absl::Status s = Group(job, {0, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("has 2 of 2 groups (its quota)"), std::string::npos) << s;
  control::CreateJobResponse job2 = CreateJob({"h2"}, quota);
  AttachAll(job2, 1);
  s = Group(job2, {0}, "", 5).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("K=5 slots exceeds job"), std::string::npos) << s;
  quota.set_num_slots(16);
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  req.add_ranks()->set_host("h3");
  *req.mutable_quota() = quota;
  s = am_->CreateJob(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("num_slots 16 exceeds the per-group limit of 8"), std::string::npos);
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

TEST_F(ManagerTest, SilentHostIsDetachedAndItsGroupsRevoked) {
  ManagerOptions options;
  options.host_timeout = absl::Seconds(5);
  Start("single_switch.yaml", options);
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1", "h2"});
  AttachAll(job, 3);
  absl::StatusOr<control::GroupInfo> g01 = Group(job, {0, 1});
  absl::StatusOr<control::GroupInfo> g12 = Group(job, {1, 2});
  ASSERT_TRUE(g01.ok() && g12.ok());
  std::shared_ptr<EventStream> w = Watch(job, 1);
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats();
    for (uint32_t r : {0u, 1u}) {  // rank 2 went quiet
      control::HostHeartbeatRequest hb;
      *hb.mutable_job() = Creds(job);
      hb.set_rank(r);
      ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
    }
    am_->Tick();
  }
  std::vector<JobEvent> ev = Drain(*w);
  bool detached = false, revoked = false;
  for (const JobEvent& e : ev) {
    if (e.kind() == JobEvent::RANK_DETACHED) {
      detached = true;
      ASSERT_EQ(e.ranks_size(), 1);
      EXPECT_EQ(e.ranks(0), 2u);
      EXPECT_NE(e.reason().find("stopped sending heartbeats"), std::string::npos);
    }
    if (e.kind() == JobEvent::GROUP_REVOKED) {
      revoked = true;
      EXPECT_EQ(e.group_id(), g12->group_id());
    }
  }
  EXPECT_TRUE(detached && revoked);
  EXPECT_TRUE(fabric_->Get("sw0")->HasGroup(g01->group_id()));
  EXPECT_FALSE(fabric_->Get("sw0")->HasGroup(g12->group_id()));
  EXPECT_EQ(fabric_->Get("sw0")->num_qps(), 2u);  // rank 2's QP was destroyed
}

TEST_F(ManagerTest, AJobWhoseRanksAllDiedIsDestroyedAfterTheAbandonedJobTimeout) {
  ManagerOptions options;
  options.host_timeout = absl::Seconds(5);
  options.abandoned_job_timeout = absl::Seconds(30);
  Start("single_switch.yaml", options);
  RegisterAll();
  control::CreateJobResponse dead = CreateJob({"h0", "h1"});
  control::CreateJobResponse alive = CreateJob({"h2"});
  AttachAll(dead, 2);
  AttachAll(alive, 1);
  ASSERT_TRUE(Group(dead, {0, 1}).ok());
  std::shared_ptr<EventStream> w = Watch(dead, 0);
  ASSERT_EQ(fabric_->Get("sw0")->num_qps(), 3u);
  // The dead job's processes were killed: only the other job's rank keeps
  // sending heartbeats. Detached after 5 s, destroyed 30 s later.
  bool destroyed = false;
  int seconds_to_destroy = 0;
  for (int i = 1; i <= 100 && !destroyed; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats();
    control::HostHeartbeatRequest hb;
    *hb.mutable_job() = Creds(alive);
    hb.set_rank(0);
    ASSERT_TRUE(am_->HostHeartbeat(hb).ok());
    am_->Tick();
    for (const JobEvent& e : Drain(*w)) {
      if (e.kind() == JobEvent::JOB_DESTROYED) {
        destroyed = true;
        seconds_to_destroy = i / 2;
        EXPECT_NE(e.reason().find("abandoned_job_timeout"), std::string::npos) << e.reason();
      }
    }
  }
  ASSERT_TRUE(destroyed);
  EXPECT_GE(seconds_to_destroy, 35);
  EXPECT_LE(seconds_to_destroy, 37);
  control::GetStatusResponse st = am_->GetStatus();
  ASSERT_EQ(st.jobs_size(), 1);  // the live job stays
  EXPECT_EQ(st.jobs(0).job_id(), alive.job_id());
  EXPECT_EQ(fabric_->Get("sw0")->num_qps(), 1u);
  EXPECT_EQ(SwitchStatus(st, "sw0")->used().qps(), 1u);  // the dead job's quota is back
  EXPECT_EQ(st.groups_size(), 0);
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

TEST_F(ManagerTest, RegistrationIsChecked) {
  ManagerOptions options;
  options.switch_secret = "s3cret";
  Start("two_level.yaml", options);
  control::RegisterSwitch reg = fabric_->Get("leaf0")->Registration("s3cret");
  EXPECT_TRUE(am_->RegisterSwitch(reg, 1).ok());
  control::RegisterSwitch r = reg;
  r.set_name("leaf9");
  EXPECT_EQ(am_->RegisterSwitch(r, 2).status().code(), absl::StatusCode::kNotFound);
  r = reg;
  r.set_secret("guess");
  EXPECT_EQ(am_->RegisterSwitch(r, 3).status().code(), absl::StatusCode::kPermissionDenied);
  r = reg;
  r.mutable_capacity()->set_num_slots(10);
  absl::Status s = am_->RegisterSwitch(r, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("offers slots=10 but topology 'two-level' declares 256"),
            std::string::npos);
  r = reg;
  r.set_data_address("localhost");
  EXPECT_EQ(am_->RegisterSwitch(r, 5).status().code(), absl::StatusCode::kInvalidArgument);
  r = reg;
  r.set_protocol_version(0);
  EXPECT_EQ(am_->RegisterSwitch(r, 6).status().code(), absl::StatusCode::kFailedPrecondition);
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

TEST_F(ManagerTest, RestartRecoversJobsWithoutDoubleAllocating) {
  TempDir dir;
  state_dir_ = dir.path() + "/state";
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  options.snapshot_every = 5;  // exercise snapshots and journal replay together
  Start("two_level.yaml", options);
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  absl::StatusOr<control::GroupInfo> g1 = Group(job, {0, 2, 4, 6});
  absl::StatusOr<control::GroupInfo> g2 = Group(job, {1, 3});
  absl::StatusOr<control::GroupInfo> g3 = Group(job, {6, 7});
  ASSERT_TRUE(g1.ok() && g2.ok() && g3.ok());
  ASSERT_TRUE(DestroyGroup(job, g3->group_id()).ok());
  control::GetStatusResponse before = am_->GetStatus();
  int commands_before = 0;
  for (FakeSwitch* s : fabric_->All()) commands_before += s->commands_applied();

  StartManager();  // the manager process restarts; switches keep their state
  control::GetStatusResponse after = am_->GetStatus();
  EXPECT_NE(after.manager_incarnation(), before.manager_incarnation());
  ASSERT_EQ(after.jobs_size(), 1);
  EXPECT_EQ(after.jobs(0).num_attached(), 8u);
  ASSERT_EQ(after.groups_size(), 2);
  for (int i = 0; i < after.switches_size(); ++i) {
    EXPECT_EQ(after.switches(i).state(), control::SwitchStatus::UNKNOWN);
    EXPECT_EQ(after.switches(i).used().DebugString(), before.switches(i).used().DebugString())
        << after.switches(i).name();
  }
  // The job key still works; switches re-register and are reconciled with
  // no change: every group is where it was.
  RegisterAll();
  int commands_after = 0;
  for (FakeSwitch* s : fabric_->All()) commands_after += s->commands_applied();
  EXPECT_EQ(commands_after, commands_before);
  EXPECT_TRUE(fabric_->Get("root0")->HasGroup(g1->group_id()));
  EXPECT_TRUE(fabric_->Get("leaf0")->HasGroup(g2->group_id()));
  ExpectLedgerMatchesSwitches();
  // New ids never collide with old ones, and destroying recovered state works.
  absl::StatusOr<control::GroupInfo> g4 = Group(job, {5, 7});
  ASSERT_TRUE(g4.ok()) << g4.status();
  EXPECT_GT(g4->group_id(), g3->group_id());
  EXPECT_NE(g4->multicast_address(), g1->multicast_address());
  EXPECT_NE(g4->multicast_address(), g2->multicast_address());
  ASSERT_TRUE(DestroyGroup(job, g1->group_id()).ok());
  EXPECT_FALSE(fabric_->Get("root0")->HasGroup(g1->group_id()));
  ExpectLedgerMatchesSwitches();

  // Once more, now with a switch that restarted meanwhile (lost its state).
  StartManager();
  fabric_->Get("leaf1")->Restart();
  std::shared_ptr<EventStream> w = Watch(job, 1);
  RegisterAll();
  std::vector<JobEvent> ev = Drain(*w);
  bool detached = false, revoked = false;
  for (const JobEvent& e : ev) {
    detached = detached || e.kind() == JobEvent::RANK_DETACHED;
    revoked = revoked || (e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == g2->group_id());
  }
  EXPECT_TRUE(detached);
  EXPECT_TRUE(revoked);
  EXPECT_FALSE(fabric_->Get("leaf0")->HasGroup(g2->group_id()));
  EXPECT_TRUE(fabric_->Get("leaf2")->HasGroup(g4->group_id()));
  ExpectLedgerMatchesSwitches();
  // leaf1's ranks attach again and work.
  ASSERT_TRUE(Attach(job, 2).ok());
  ASSERT_TRUE(Attach(job, 3).ok());
  ASSERT_TRUE(Group(job, {1, 2, 3}).ok());
  ExpectLedgerMatchesSwitches();
}

TEST_F(ManagerTest, SwitchThatNeverComesBackIsWrittenOff) {
  TempDir dir;
  state_dir_ = dir.path() + "/state";
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  Start("two_level.yaml", options);
  RegisterAll();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 6});
  absl::StatusOr<control::GroupInfo> keep = Group(job, {0, 1});
  ASSERT_TRUE(g.ok() && keep.ok());
  StartManager();
  for (const std::string name : {"root0", "leaf0", "leaf1", "leaf2"}) Register(name);
  am_->Tick();
  EXPECT_EQ(am_->GetStatus().groups_size(), 2);  // leaf3 still has its grace period
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Milliseconds(500));
    Heartbeats();
    am_->Tick();
  }
  control::GetStatusResponse st = am_->GetStatus();
  EXPECT_EQ(SwitchStatus(st, "leaf3")->state(), control::SwitchStatus::DEAD);
  ASSERT_EQ(st.groups_size(), 1);
  EXPECT_EQ(st.groups(0).group_id(), keep->group_id());
  EXPECT_FALSE(fabric_->Get("root0")->HasGroup(g->group_id()));
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

TEST_F(ManagerTest, WatchReplaysMissedEventsAndEndsWithTheJob) {
  Start("single_switch.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});
  AttachAll(job, 2);
  absl::StatusOr<control::GroupInfo> g = Group(job, {0, 1});
  ASSERT_TRUE(g.ok());
  std::shared_ptr<EventStream> first = Watch(job, 0);
  // Rank 0 re-attaches: its group is revoked (sequence 1 and 2).
  ASSERT_TRUE(Attach(job, 0).ok());
  std::vector<JobEvent> ev = Drain(*first);
  ASSERT_EQ(ev.size(), 2u);
  // A new stream for the same rank replaces the old one and can replay.
  control::WatchEventsRequest req;
  *req.mutable_job() = Creds(job);
  req.set_rank(0);
  req.set_after_sequence(ev[0].sequence());
  absl::StatusOr<std::shared_ptr<EventStream>> second = am_->WatchEvents(req);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(first->Finished());
  std::vector<JobEvent> replay = Drain(**second);
  ASSERT_EQ(replay.size(), 2u);  // WATCH_STARTED + the second event
  EXPECT_EQ(replay[1].sequence(), ev[1].sequence());
  ASSERT_TRUE(DestroyJob(job).ok());
  std::vector<JobEvent> last = Drain(**second);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].kind(), JobEvent::JOB_DESTROYED);
  EXPECT_TRUE((*second)->Finished());
}

}  // namespace
}  // namespace netfold::manager
