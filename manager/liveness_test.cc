// Tests of liveness: which switches, ranks and jobs the sweep finds overdue
// and when; and, through the manager, a silent host detached with its
// groups revoked and an abandoned job destroyed.
#include "manager/liveness.h"

#include <string>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "manager/testing/manager_test_fixture.h"
#include "manager/testing/test_books.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

class SweepTest : public testing::Test {
 protected:
  static ManagerOptions Options() {
    ManagerOptions options;
    options.switch_timeout = absl::Seconds(2);
    options.host_timeout = absl::Seconds(5);
    options.abandoned_job_timeout = absl::Seconds(30);
    return options;
  }

  int Sw(const std::string& name) const { return books_.SwitchIndex(name); }

  // A job with one rank, attached or not, last heard from now.
  void AddJob(uint64_t id, bool attached) {
    Job& job = books_.state.jobs[id];
    job.id = id;
    job.ranks[0].leaf = Sw("leaf0");
    job.ranks[0].attached = attached;
    job.ranks[0].last_seen = clock_.Now();
  }

  TestBooks books_{"two_level.yaml", Options()};
  FakeClock& clock_ = books_.clock;
};

TEST_F(SweepTest, SwitchesThatFellSilentBrokeTheirStreamOrNeverCameBack) {
  FabricState& st = books_.state;
  for (const char* name : {"root0", "leaf0", "leaf1"}) {
    st.SetSwitchState(Sw(name), SwitchState::kUp, "");
    st.switches[Sw(name)].last_heartbeat = clock_.Now();
  }
  st.SetSwitchState(Sw("leaf2"), SwitchState::kReconciling, "");
  st.switches[Sw("leaf2")].last_heartbeat = clock_.Now();
  st.switches[Sw("leaf3")].grace_until = clock_.Now() + absl::Seconds(4);  // held state
  clock_.Advance(absl::Seconds(1));
  st.switches[Sw("leaf0")].last_heartbeat = clock_.Now();
  st.switches[Sw("leaf1")].death_pending = true;
  LivenessSweep due = SweepLiveness(st, clock_.Now());
  EXPECT_EQ(due.deaths, (std::vector<int>{Sw("leaf1")}));
  EXPECT_EQ(due.reconciles, (std::vector<int>{Sw("leaf2")}));

  for (int i = 0; i < 5; ++i) {  // root0 and leaf2 silent for 3.5 s, the manager on time
    clock_.Advance(absl::Milliseconds(500));
    st.switches[Sw("leaf0")].last_heartbeat = clock_.Now();
    due = SweepLiveness(st, clock_.Now());
  }
  EXPECT_EQ(due.deaths, (std::vector<int>{Sw("root0"), Sw("leaf1"), Sw("leaf2")}));
  EXPECT_EQ(st.switches[Sw("root0")].dead_reason, "no heartbeat for 3500ms (timeout 2000ms)");
  EXPECT_TRUE(due.reconciles.empty());

  clock_.Advance(absl::Seconds(1));  // leaf3's grace is over
  due = SweepLiveness(st, clock_.Now());
  EXPECT_EQ(st.switches[Sw("leaf3")].dead_reason,
            "did not re-register after the manager restarted");
  EXPECT_EQ(due.deaths.back(), Sw("leaf3"));
}

TEST_F(SweepTest, AHeartbeatAfterHalfTheTimeoutSaysWhichSideWasLate) {
  FabricState& st = books_.state;
  const int leaf0 = Sw("leaf0");
  EXPECT_EQ(RecordSwitchHeartbeat(st, leaf0, 7, clock_.Now(), absl::ZeroDuration()), "");
  clock_.Advance(absl::Milliseconds(1000));  // half of 2 s: not yet
  EXPECT_EQ(RecordSwitchHeartbeat(st, leaf0, 8, clock_.Now(), absl::ZeroDuration()), "");
  clock_.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(RecordSwitchHeartbeat(st, leaf0, 9, clock_.Now(), absl::Milliseconds(1200)),
            "switch leaf0: heartbeat 9 came 1.5s after heartbeat 8 (timeout 2s; the state lock "
            "took 1.2s)");
  EXPECT_EQ(st.switches[leaf0].last_heartbeat, clock_.Now());
  EXPECT_EQ(st.switches[leaf0].last_heartbeat_sequence, 9u);
}

// A sweep long after the one before finds the manager itself late (no CPU,
// or its state lock held by a journal write on a busy disk): the
// heartbeats that came meanwhile may wait unread behind the lock, so it
// judges no switch or rank silent. Once: the next sweep does, late or not.
TEST_F(SweepTest, AManagerLateItselfJudgesNoOneSilentOnce) {
  FabricState& st = books_.state;
  const int leaf0 = Sw("leaf0"), leaf1 = Sw("leaf1");
  for (int sw : {leaf0, leaf1}) {
    st.SetSwitchState(sw, SwitchState::kUp, "");
    st.switches[sw].last_heartbeat = clock_.Now();
  }
  AddJob(1, /*attached=*/true);
  EXPECT_TRUE(SweepLiveness(st, clock_.Now()).deaths.empty());
  clock_.Advance(absl::Seconds(6));  // past both timeouts, the manager asleep
  LivenessSweep due = SweepLiveness(st, clock_.Now());
  EXPECT_TRUE(due.deaths.empty());
  EXPECT_TRUE(due.silent_ranks.empty());
  // leaf0's heartbeat, which waited for the lock, is read now; leaf1 sent none.
  RecordSwitchHeartbeat(st, leaf0, 2, clock_.Now(), absl::Seconds(6));
  clock_.Advance(absl::Milliseconds(100));
  due = SweepLiveness(st, clock_.Now());
  EXPECT_EQ(due.deaths, (std::vector<int>{leaf1}));
  EXPECT_EQ(due.silent_ranks.size(), 1u);
  // Held back once only: a manager late at every sweep still finds the silent.
  st.switches[leaf1].last_heartbeat = clock_.Now();
  clock_.Advance(absl::Seconds(3));
  EXPECT_TRUE(SweepLiveness(st, clock_.Now()).deaths.empty());
  clock_.Advance(absl::Seconds(3));
  EXPECT_EQ(SweepLiveness(st, clock_.Now()).deaths, (std::vector<int>{leaf0, leaf1}));
}

TEST_F(SweepTest, SilentRanksAndAbandonedJobs) {
  FabricState& st = books_.state;
  AddJob(1, /*attached=*/true);
  AddJob(2, /*attached=*/false);
  LivenessSweep due = SweepLiveness(st, clock_.Now());  // job 2's clock starts
  EXPECT_TRUE(due.silent_ranks.empty());
  EXPECT_TRUE(due.abandoned_jobs.empty());
  ASSERT_TRUE(st.jobs[2].unattached_since.has_value());
  EXPECT_FALSE(st.jobs[1].unattached_since.has_value());

  for (int i = 0; i < 12; ++i) {  // 6 s, the manager sweeping every 500 ms
    clock_.Advance(absl::Milliseconds(500));
    due = SweepLiveness(st, clock_.Now());
  }
  ASSERT_EQ(due.silent_ranks.size(), 1u);
  EXPECT_EQ(due.silent_ranks[0].first, 1u);
  EXPECT_EQ(due.silent_ranks[0].second, (std::vector<uint32_t>{0}));

  clock_.Advance(absl::Seconds(25));  // 31 s without an attached rank
  due = SweepLiveness(st, clock_.Now());
  EXPECT_EQ(due.abandoned_jobs, (std::vector<uint64_t>{2}));
  // A rank that attaches stops the clock.
  st.jobs[2].ranks[0].attached = true;
  SweepLiveness(st, clock_.Now());
  EXPECT_FALSE(st.jobs[2].unattached_since.has_value());
}

TEST_F(SweepTest, ALinkIsUsableAgainOnceItsDowntimeIsOver) {
  FabricState& st = books_.state;
  const int leaf1 = Sw("leaf1");
  st.alloc.SetLinkDown(0, leaf1, true, "QP error");
  st.links_down_until[{0, leaf1}] = clock_.Now() + absl::Seconds(10);
  SweepLiveness(st, clock_.Now() + absl::Seconds(9));
  EXPECT_TRUE(st.alloc.LinkDown(0, leaf1));
  SweepLiveness(st, clock_.Now() + absl::Seconds(10));
  EXPECT_FALSE(st.alloc.LinkDown(0, leaf1));
  EXPECT_TRUE(st.links_down_until.empty());
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

}  // namespace
}  // namespace netfold::manager
