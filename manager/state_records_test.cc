// Tests of the durable form of the books: records name switches and trees,
// ids are reserved in journaled blocks, and without a journal every write
// succeeds.
#include "manager/state_records.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/journal_test_util.h"
#include "manager/testing/temp_dir.h"
#include "manager/testing/test_books.h"

namespace netfold::manager {
namespace {

class StateRecordsTest : public testing::Test {
 protected:
  TestBooks books_{"two_level.yaml"};  // for the topology and its trees
  const Topology* topo_ = &books_.topo;
  const std::vector<Tree>& trees_ = books_.state.alloc.trees();
};

TEST_F(StateRecordsTest, RecordsNameSwitchesAndTreesNotIndices) {
  StateRecords records(*topo_, trees_, /*journal=*/nullptr, /*snapshot_every=*/10);
  Link link;
  link.tree_id = 0;
  link.child = topo_->FindSwitch("leaf2");
  link.parent = topo_->FindSwitch("root0");
  link.parent_qpn = 0x101;
  link.child_qpn = 0x202;
  link.connected = true;
  state::LinkRecord rec = records.LinkRecord(link);
  EXPECT_EQ(rec.tree_root(), "root0");
  EXPECT_EQ(rec.child(), "leaf2");
  EXPECT_EQ(rec.parent(), "root0");
  EXPECT_EQ(rec.child_qpn(), 0x202u);

  Job job;
  job.id = 5;
  job.key = "k";
  job.ranks[1].rank = 1;
  job.ranks[1].host = "h3";
  job.ranks[1].attached = true;
  job.ranks[1].leaf_qpn = 0x300;
  std::map<uint64_t, Job> jobs = {{5, job}};
  Group installing;
  installing.id = 9;
  installing.state = GroupState::kInstalling;
  std::map<uint64_t, Group> groups = {{9, installing}};
  Link connecting = link;
  connecting.connected = false;
  std::map<LinkKey, Link> links = {{{0, link.child}, link}, {{0, 1}, connecting}};
  state::Snapshot snap = records.Snapshot(jobs, groups, links);
  EXPECT_EQ(snap.topology_name(), "two-level");
  ASSERT_EQ(snap.jobs_size(), 1);
  EXPECT_EQ(snap.jobs(0).ranks(0).host(), "h3");
  EXPECT_EQ(snap.jobs(0).ranks(0).leaf_qpn(), 0x300u);
  EXPECT_EQ(snap.groups_size(), 0);  // only ready groups
  EXPECT_EQ(snap.links_size(), 1);   // only connected links
  // Without a journal, writes succeed and write nothing.
  EXPECT_TRUE(records.PutJob(job).ok());
  EXPECT_TRUE(records.WriteSnapshot(snap).ok());
}

TEST_F(StateRecordsTest, IdsAreReservedInJournaledBlocks) {
  TempDir dir;
  state::Snapshot loaded;
  absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(dir.path(), &loaded);
  ASSERT_TRUE(journal.ok()) << journal.status();
  StateRecords records(*topo_, trees_, journal->get(), /*snapshot_every=*/1000);
  records.StartIdsAt(/*next_job_id=*/10, /*next_group_id=*/kMaxGroupId);
  EXPECT_EQ(*records.NextJobId(), 10u);
  EXPECT_EQ((*journal)->records_since_snapshot(), 1);  // a block of ids: 10..73
  for (uint64_t id = 11; id < 74; ++id) EXPECT_EQ(*records.NextJobId(), id);
  EXPECT_EQ((*journal)->records_since_snapshot(), 1);
  EXPECT_EQ(*records.NextJobId(), 74u);
  EXPECT_EQ((*journal)->records_since_snapshot(), 2);
  // The last group id the aggregation header can carry, and no further.
  EXPECT_EQ(*records.NextGroupId(), kMaxGroupId);
  EXPECT_EQ(records.NextGroupId().status().code(), absl::StatusCode::kResourceExhausted);

  journal->reset();
  ASSERT_TRUE(Journal::Open(dir.path(), &loaded).ok());
  EXPECT_EQ(loaded.counters().job_id_limit(), 138u);  // 74 + 64: no id is handed out twice
}

TEST_F(StateRecordsTest, AJournalThatRefusesAppendsIsMadeUsableByTheNextSnapshot) {
  // A full disk, and the failed append cannot be rolled back either: every
  // write is refused (Unavailable: the manager refuses the request) until a
  // snapshot of the books replaces the journal.
  TempDir dir;
  bool failing = false;
  const JournalOptions options = FailingDiskOptions(&failing);
  state::Snapshot loaded;
  absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(dir.path(), options, &loaded);
  ASSERT_TRUE(journal.ok()) << journal.status();
  StateRecords records(*topo_, trees_, journal->get(), /*snapshot_every=*/1000);
  Job job;
  job.id = 5;
  job.key = std::string(kJobKeyBytes, 'k');
  failing = true;
  EXPECT_EQ(records.PutJob(job).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE((*journal)->broken().ok());
  failing = false;
  EXPECT_EQ(records.PutJob(job).code(), absl::StatusCode::kUnavailable);
  records.MaybeSnapshot(/*jobs=*/{}, /*groups=*/{}, /*links=*/{});  // job 5 was refused
  EXPECT_TRUE((*journal)->broken().ok());
  EXPECT_TRUE(records.PutJob(job).ok());

  journal->reset();
  ASSERT_TRUE(Journal::Open(dir.path(), &loaded).ok());
  ASSERT_EQ(loaded.jobs_size(), 1);
  EXPECT_EQ(loaded.jobs(0).job_id(), 5u);
}

}  // namespace
}  // namespace netfold::manager
