// Tests of the journal: replay, torn tails, snapshots, the directory lock.
#include "manager/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "manager/testing/temp_dir.h"

namespace netfold::manager {
namespace {

state::JournalEntry PutJob(uint64_t id, const std::string& name) {
  state::JournalEntry e;
  e.mutable_put_job()->set_job_id(id);
  e.mutable_put_job()->set_name(name);
  return e;
}

state::JournalEntry DeleteJob(uint64_t id) {
  state::JournalEntry e;
  e.set_delete_job(id);
  return e;
}

TEST(Journal, ReplaysRecordsInOrder) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string state_dir = dir.path() + "/state";
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(loaded.jobs_size(), 0);
    ASSERT_TRUE((*j)->Append(PutJob(1, "a")).ok());
    ASSERT_TRUE((*j)->Append(PutJob(2, "b")).ok());
    ASSERT_TRUE((*j)->Append(PutJob(1, "a2")).ok());  // upsert
    ASSERT_TRUE((*j)->Append(DeleteJob(2)).ok());
    state::JournalEntry c;
    c.mutable_counters()->set_job_id_limit(64);
    ASSERT_TRUE((*j)->Append(c).ok());
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->records_replayed(), 5);
  ASSERT_EQ(loaded.jobs_size(), 1);
  EXPECT_EQ(loaded.jobs(0).name(), "a2");
  EXPECT_EQ(loaded.counters().job_id_limit(), 64u);
}

TEST(Journal, CutsATornTail) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->Append(PutJob(1, "a")).ok());
    ASSERT_TRUE((*j)->Append(PutJob(2, "b")).ok());
  }
  // A crash in the middle of the third append: half a record.
  const std::string log = state_dir + "/journal.log";
  const auto good_size = std::filesystem::file_size(log);
  {
    std::ofstream out(log, std::ios::app | std::ios::binary);
    out.write("\x40\x00\x00\x00\x12\x34", 6);
  }
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok());
    EXPECT_EQ(loaded.jobs_size(), 2);
    EXPECT_EQ((*j)->bytes_discarded(), 6u);
    EXPECT_EQ(std::filesystem::file_size(log), good_size);
    // Appending after the cut works and is replayed next time.
    ASSERT_TRUE((*j)->Append(PutJob(3, "c")).ok());
  }
  // A flipped byte in the last record: the CRC catches it.
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\xff');
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(loaded.jobs_size(), 2);
  EXPECT_EQ((*j)->records_replayed(), 2);
}

TEST(Journal, SnapshotCompactsAndReplayStaysIdempotent) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  state::Snapshot loaded;
  {
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok());
    for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE((*j)->Append(PutJob(i, "x")).ok());
    EXPECT_EQ((*j)->records_since_snapshot(), 10);
    state::Snapshot snap;
    for (uint64_t i = 1; i <= 10; ++i) *snap.add_jobs() = PutJob(i, "x").put_job();
    ASSERT_TRUE((*j)->WriteSnapshot(snap).ok());
    EXPECT_EQ((*j)->records_since_snapshot(), 0);
    EXPECT_EQ(std::filesystem::file_size(state_dir + "/journal.log"), 0u);
    ASSERT_TRUE((*j)->Append(DeleteJob(4)).ok());
  }
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(loaded.jobs_size(), 9);
  // Replaying a record already in the snapshot changes nothing.
  ApplyJournalEntry(PutJob(5, "x"), &loaded);
  ApplyJournalEntry(DeleteJob(4), &loaded);
  EXPECT_EQ(loaded.jobs_size(), 9);
}

TEST(Journal, OneManagerPerDirectory) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  state::Snapshot loaded;
  auto first = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(first.ok());
  auto second = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  first->reset();
  EXPECT_TRUE(Journal::Open(state_dir, &loaded).ok());
}

TEST(Journal, CorruptSnapshotIsDataLoss) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  std::filesystem::create_directories(state_dir);
  {
    std::ofstream out(state_dir + "/snapshot.pb", std::ios::binary);
    out << "\xff\xff\xff\xff not a snapshot";
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss);
}

TEST(Journal, LinksAreKeyedByTreeAndChild) {
  state::Snapshot snap;
  state::JournalEntry put;
  put.mutable_put_link()->set_tree_root("spine0");
  put.mutable_put_link()->set_child("leaf0");
  put.mutable_put_link()->set_parent_qpn(7);
  ApplyJournalEntry(put, &snap);
  put.mutable_put_link()->set_parent_qpn(8);
  ApplyJournalEntry(put, &snap);
  ASSERT_EQ(snap.links_size(), 1);
  EXPECT_EQ(snap.links(0).parent_qpn(), 8u);
  state::JournalEntry del;
  del.mutable_delete_link()->set_tree_root("spine0");
  del.mutable_delete_link()->set_child("leaf0");
  ApplyJournalEntry(del, &snap);
  EXPECT_EQ(snap.links_size(), 0);
}

}  // namespace
}  // namespace netfold::manager
