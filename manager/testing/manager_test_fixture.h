// Test fixture for the aggregation manager's unit tests: a manager over an
// example topology, an in-process fabric of fake switches, a fake clock,
// and helpers that speak for switches and processes (register, heartbeat,
// create and attach jobs, make groups, watch events), plus a check that the
// manager's books match what the switches hold.
//
//   TEST_F(ManagerTest, Something) {
//     Start("two_level.yaml");
//     RegisterAll();
//     control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
//     AttachAll(job, 8);
//     absl::StatusOr<control::GroupInfo> g = Group(job, {0, 7});
//     ExpectLedgerMatchesSwitches();
//   }
//
// Set `state_dir_` before Start to journal; StartManager() restarts the
// manager over the same fabric and state directory. Single-threaded, as
// the tests are.
#ifndef NETFOLD_MANAGER_TESTING_MANAGER_TEST_FIXTURE_H_
#define NETFOLD_MANAGER_TESTING_MANAGER_TEST_FIXTURE_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "manager/aggregation_manager.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {

class ManagerTest : public testing::Test {
 protected:
  void Start(const std::string& file, ManagerOptions options = {}) {
    absl::StatusOr<Topology> t = LoadExampleTopology(file);
    ASSERT_TRUE(t.ok()) << t.status();
    StartOn(*std::move(t), options);
  }
  void StartOn(Topology topology, ManagerOptions options = {}) {
    topo_ = std::make_unique<Topology>(std::move(topology));
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

  // The rank's endpoint: 10.0.0.(rank+1):4791, QPN 100 + rank + 1000 x plane,
  // PSN rank + 100 x attempt (another attempt: a new endpoint, which
  // replaces the attachment; the same one again is a retry).
  absl::StatusOr<control::AttachResponse> Attach(const control::CreateJobResponse& job,
                                                 uint32_t rank, uint32_t plane = 0,
                                                 uint32_t attempt = 0) {
    control::AttachRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    req.set_plane(plane);
    req.mutable_endpoint()->set_address(absl::StrFormat("10.0.0.%d:4791", rank + 1));
    req.mutable_endpoint()->set_qpn(100 + rank + 1000 * plane);
    req.mutable_endpoint()->set_psn(rank + 100 * attempt);
    return am_->Attach(req);
  }

  void AttachAll(const control::CreateJobResponse& job, uint32_t n, uint32_t plane = 0) {
    for (uint32_t r = 0; r < n; ++r) ASSERT_TRUE(Attach(job, r, plane).ok()) << "rank " << r;
  }

  absl::StatusOr<control::GroupInfo> Group(const control::CreateJobResponse& job,
                                           const std::vector<uint32_t>& ranks,
                                           const std::string& tag = "", uint32_t k = 0,
                                           uint32_t p = 0, uint32_t plane = 0) {
    control::CreateGroupRequest req;
    *req.mutable_job() = Creds(job);
    for (uint32_t r : ranks) req.add_ranks(r);
    req.set_tag(tag);
    req.set_num_slots(k);
    req.set_slot_bytes(p);
    req.set_plane(plane);
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
    std::optional<control::JobEvent> hello = (*s)->Next(absl::ZeroDuration());
    EXPECT_TRUE(hello.has_value() && hello->kind() == control::JobEvent::WATCH_STARTED);
    return *s;
  }

  static std::vector<control::JobEvent> Drain(EventStream& s) {
    std::vector<control::JobEvent> out;
    while (std::optional<control::JobEvent> e = s.Next(absl::ZeroDuration())) out.push_back(*e);
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

inline const std::vector<std::string> kTwoLevelHosts = {"h0", "h1", "h2", "h3",
                                                        "h4", "h5", "h6", "h7"};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_MANAGER_TEST_FIXTURE_H_
