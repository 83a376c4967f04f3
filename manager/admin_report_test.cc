// Tests of Admin.GetStatus and Admin.Explain: the status of fresh books,
// what the journal found at start and how its appends fare, explanations of
// malformed requests, and (through the manager) that an exhausted switch is
// explained the same way whether a request is refused or asked about.
#include "manager/admin_report.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/journal_test_util.h"
#include "manager/testing/manager_test_fixture.h"
#include "manager/testing/temp_dir.h"
#include "manager/testing/test_books.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

TEST(AdminReportTest, StatusOfFreshBooksAndOfAConnectedLink) {
  TestBooks books("two_level.yaml");
  FabricState& state = books.state;
  control::GetStatusResponse st = StatusReport(state, 42);
  EXPECT_EQ(st.manager_incarnation(), 42u);
  EXPECT_EQ(st.topology_name(), "two-level");
  ASSERT_EQ(st.switches_size(), books.topo.num_switches());
  for (const control::SwitchStatus& s : st.switches()) {
    EXPECT_EQ(s.state(), control::SwitchStatus::UNKNOWN) << s.name();
    EXPECT_EQ(s.last_heartbeat_ms_ago(), -1) << s.name();
  }
  ASSERT_EQ(st.trees_size(), 1);
  ASSERT_EQ(st.trees(0).edges_size(), 4);
  EXPECT_FALSE(st.trees(0).edges(0).connected());

  // A heartbeat 1.5 s ago and a connected link show.
  const int leaf0 = books.SwitchIndex("leaf0");
  state.SetSwitchState(leaf0, SwitchState::kUp, "");
  state.switches[leaf0].last_heartbeat = books.clock.Now();
  books.clock.Advance(absl::Milliseconds(1500));
  state.OpenLink(0, leaf0);
  state.LinkConnected(0, leaf0, control::QpCreated(), control::QpCreated());
  st = StatusReport(state, 42);
  EXPECT_EQ(st.switches(leaf0).state(), control::SwitchStatus::UP);
  EXPECT_EQ(st.switches(leaf0).last_heartbeat_ms_ago(), 1500);
  int connected = 0;
  for (const control::TreeEdge& e : st.trees(0).edges()) connected += e.connected() ? 1 : 0;
  EXPECT_EQ(connected, 1);
  EXPECT_TRUE(st.jobs().empty());
  EXPECT_TRUE(st.groups().empty());
}

TEST(AdminReportTest, StatusSaysWhetherStateIsJournaled) {
  TestBooks books("single_switch.yaml");
  control::GetStatusResponse st = StatusReport(books.state, 1);
  ASSERT_TRUE(st.has_state());
  EXPECT_FALSE(st.state().journaled());
  EXPECT_TRUE(st.state().state_dir().empty());
}

// A damaged record (replaced later, so skipped safely) and a torn tail show
// in the status, with the copies Open kept aside.
TEST(AdminReportTest, StatusShowsWhatTheJournalFoundAtStart) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  std::vector<state::JournalEntry> entries = Jobs(1, 3);
  entries.push_back(PutJob(2, "job-2-again"));
  Write(state_dir, entries);
  FlipIn(state_dir + "/journal.log", JobName(2));
  WriteFile(state_dir + "/journal.log",
            ReadFile(state_dir + "/journal.log") + std::string("NFR2\x05\x00", 6));
  state::Snapshot loaded;
  absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(journal.ok()) << journal.status();
  TestBooks books("single_switch.yaml", ManagerOptions(), journal->get());
  const control::StateStatus st = StatusReport(books.state, 1).state();
  EXPECT_TRUE(st.journaled());
  EXPECT_EQ(st.state_dir(), state_dir);
  EXPECT_EQ(st.records_replayed(), 3u);
  EXPECT_EQ(st.damaged_records_skipped(), 1u);
  EXPECT_EQ(st.torn_bytes_dropped(), 6u);
  ASSERT_EQ(st.saved_copies_size(), 1);
  EXPECT_NE(st.saved_copies(0).find("journal.log.damaged-"), std::string::npos);
  EXPECT_EQ(st.failed_appends(), 0u);
  EXPECT_FALSE(st.appends_refused());
}

// An append that fails is counted; one that cannot be rolled back makes the
// journal refuse appends, with the reason, until a snapshot succeeds.
TEST(AdminReportTest, StatusShowsFailedAndRefusedAppends) {
  TempDir dir;
  bool disk_fails = false;
  const JournalOptions options = FailingDiskOptions(&disk_fails);
  state::Snapshot loaded;
  absl::StatusOr<std::unique_ptr<Journal>> journal =
      Journal::Open(dir.path() + "/state", options, &loaded);
  ASSERT_TRUE(journal.ok()) << journal.status();
  TestBooks books("single_switch.yaml", ManagerOptions(), journal->get());
  FabricState& state = books.state;
  ASSERT_TRUE(state.records.Append(PutJob(1, JobName(1))).ok());
  disk_fails = true;
  EXPECT_FALSE(state.records.Append(PutJob(2, JobName(2))).ok());
  EXPECT_FALSE(state.records.Append(PutJob(3, JobName(3))).ok());  // refused
  control::StateStatus st = StatusReport(state, 1).state();
  EXPECT_EQ(st.failed_appends(), 2u);
  EXPECT_TRUE(st.appends_refused());
  EXPECT_NE(st.refused_reason().find("truncate"), std::string::npos) << st.refused_reason();

  disk_fails = false;
  ASSERT_TRUE(state.records.WriteSnapshot(state::Snapshot()).ok());
  st = StatusReport(state, 1).state();
  EXPECT_EQ(st.failed_appends(), 2u);  // since start, not since the snapshot
  EXPECT_FALSE(st.appends_refused());
  EXPECT_TRUE(st.refused_reason().empty());
}

TEST(AdminReportTest, MalformedRequestsAreExplainedAsSuch) {
  TestBooks books("single_switch.yaml");
  const FabricState& state = books.state;
  control::ExplainResponse why = ExplainReport(state, control::ExplainRequest());
  EXPECT_FALSE(why.fits());
  EXPECT_EQ(why.tree_id(), -1);
  ASSERT_EQ(why.shortfalls_size(), 1);
  EXPECT_EQ(why.shortfalls(0).resource(), "request");
  EXPECT_NE(why.summary().find("names neither a job nor a group"), std::string::npos);
  control::ExplainRequest group;
  group.mutable_group()->set_job_id(5);
  why = ExplainReport(state, group);
  EXPECT_FALSE(why.fits());
  EXPECT_NE(why.summary().find("no job 5"), std::string::npos) << why.summary();
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

}  // namespace
}  // namespace netfold::manager
