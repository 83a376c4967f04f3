// Tests of the journal: replay, snapshots, the directory lock, damaged
// records skipped where a later record sets the same object again, failed
// appends rolled back. How the files are read (torn tails, damage found,
// format 1) is in journal_format_test.cc.
#include "manager/journal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/journal_test_util.h"
#include "manager/testing/temp_dir.h"

namespace netfold::manager {
namespace {

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

// ---------------------------------------------------------------------------
// Damage in the middle: skipped only where a later record sets the same
// object again.

TEST(Journal, DamagedRecordsReplacedLaterAreSkipped) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  std::vector<state::JournalEntry> entries = Jobs(1, 8);
  entries.push_back(PutJob(4, "job-4-again"));
  entries.push_back(DeleteJob(5));  // a damaged create, then its destroy
  Write(state_dir, entries);
  FlipIn(log, JobName(4));
  FlipIn(log, JobName(5));
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 2, 3, 4, 6, 7, 8}));
    for (const state::JobRecord& r : loaded.jobs()) {
      EXPECT_EQ(r.name(), r.job_id() == 4 ? "job-4-again" : JobName(r.job_id()));
    }
    EXPECT_EQ((*j)->damaged_records(), 2);
    EXPECT_EQ((*j)->records_replayed(), 8);
    ASSERT_EQ((*j)->saved_copies().size(), 1u);
    EXPECT_EQ(FilesStartingWith(state_dir, "journal.log.damaged-").size(), 1u);
  }
  // Written back whole: the next start finds nothing wrong.
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 2, 3, 4, 6, 7, 8}));
  EXPECT_EQ((*j)->damaged_records(), 0);
}

TEST(Journal, DamagedCountersAreSkippedOnlyUnderLaterCounters) {
  // Id limits only grow, so a later counters record covers an earlier one;
  // without one, the limit (and ids handed out under it) would be lost.
  for (bool later : {true, false}) {
    SCOPED_TRACE(later ? "later counters" : "no later counters");
    TempDir dir;
    const std::string state_dir = dir.path() + "/state";
    const std::string log = state_dir + "/journal.log";
    state::JournalEntry c64, c128;
    c64.mutable_counters()->set_job_id_limit(64);
    c128.mutable_counters()->set_job_id_limit(128);
    std::vector<state::JournalEntry> entries = {PutJob(1, JobName(1)), c64, PutJob(2, JobName(2))};
    if (later) entries.push_back(c128);
    Write(state_dir, entries);
    std::string bytes = ReadFile(log);
    const size_t counters = RecordOf(bytes, JobName(2));  // the record before it
    const size_t c64_at = bytes.rfind("NFR2", counters - 1);
    bytes[counters - 6] ^= 0x01;  // in the counters payload
    ASSERT_GT(counters - 6, c64_at + 28);
    WriteFile(log, bytes);
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    if (later) {
      ASSERT_TRUE(j.ok()) << j.status();
      EXPECT_EQ(loaded.counters().job_id_limit(), 128u);
    } else {
      EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(j.status().message().find("counters"), std::string::npos) << j.status();
    }
  }
}

TEST(Journal, SkipDamagedStartsFromEveryIntactRecord) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  state::JournalEntry c;
  c.mutable_counters()->set_job_id_limit(64);
  std::vector<state::JournalEntry> entries = {c};
  for (const state::JournalEntry& e : Jobs(1, 32)) entries.push_back(e);
  Write(state_dir, entries);
  FlipIn(log, JobName(4));
  const std::string damaged = ReadFile(log);
  {
    JournalOptions options;
    options.skip_damaged = true;
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, options, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    std::vector<uint64_t> expected = Range(1, 32);
    expected.erase(expected.begin() + 3);
    EXPECT_EQ(JobIds(loaded), expected);
    EXPECT_EQ((*j)->damaged_records(), 1);
    // The lost record is a job's: the id limits are what they were.
    EXPECT_EQ(loaded.counters().job_id_limit(), 64u);
    ASSERT_EQ((*j)->saved_copies().size(), 1u);
    EXPECT_EQ(ReadFile((*j)->saved_copies()[0]), damaged);
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(loaded.jobs_size(), 31);
}

TEST(Journal, DamagedSnapshotRecordReplacedByTheJournalIsSkipped) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok());
    state::Snapshot snap;
    snap.set_topology_name("two-level");
    snap.mutable_counters()->set_job_id_limit(64);
    for (uint64_t i = 1; i <= 8; ++i) *snap.add_jobs() = PutJob(i, JobName(i)).put_job();
    ASSERT_TRUE((*j)->WriteSnapshot(snap).ok());
    ASSERT_TRUE((*j)->Append(DeleteJob(5)).ok());
  }
  FlipIn(state_dir + "/snapshot.pb", JobName(5));
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 2, 3, 4, 6, 7, 8}));
  EXPECT_EQ(loaded.topology_name(), "two-level");
  EXPECT_EQ(loaded.counters().job_id_limit(), 64u);
  EXPECT_EQ((*j)->damaged_records(), 1);
  EXPECT_EQ(FilesStartingWith(state_dir, "snapshot.pb.damaged-").size(), 1u);
}

// ---------------------------------------------------------------------------
// Appends that fail: rolled back, or the journal refuses to go on.

struct FailingDisk {
  bool full = false;  // 7 more bytes fit, then ENOSPC
  size_t space = 0;
  int sync_failures = 0;  // the next fdatasyncs that fail with EIO
  bool truncate_fails = false;
  void Fill() {
    full = true;
    space = 7;
  }
  JournalOptions Options() {
    JournalOptions o;
    o.pwrite = [this](int fd, const void* data, size_t size, off_t offset) -> ssize_t {
      if (!full) return pwrite(fd, data, size, offset);
      if (space == 0) {
        errno = ENOSPC;
        return -1;
      }
      ssize_t n = pwrite(fd, data, std::min(size, space), offset);
      if (n > 0) space -= static_cast<size_t>(n);
      return n;
    };
    o.fdatasync = [this](int fd) {
      if (sync_failures == 0) return fdatasync(fd);
      --sync_failures;
      errno = EIO;
      return -1;
    };
    o.ftruncate = [this](int fd, off_t size) {
      if (!truncate_fails) return ftruncate(fd, size);
      errno = EIO;
      return -1;
    };
    return o;
  }
};

TEST(Journal, FailedAppendIsRolledBack) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  FailingDisk disk;
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, disk.Options(), &loaded);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->Append(PutJob(1, JobName(1))).ok());
    const auto good = ReadFile(log);
    disk.Fill();
    EXPECT_FALSE((*j)->Append(PutJob(2, JobName(2))).ok());
    EXPECT_EQ(ReadFile(log), good);
    disk.full = false;
    disk.sync_failures = 1;  // written, but not known to be on disk
    EXPECT_FALSE((*j)->Append(PutJob(3, JobName(3))).ok());
    EXPECT_EQ(ReadFile(log), good);
    EXPECT_TRUE((*j)->broken().ok());
    ASSERT_TRUE((*j)->Append(PutJob(4, JobName(4))).ok());
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ((*j)->bytes_discarded(), 0u);
}

TEST(JournalSecurity, FailedRollbackRefusesEveryAppend) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  FailingDisk disk;
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, disk.Options(), &loaded);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->Append(PutJob(1, JobName(1))).ok());
    disk.Fill();
    disk.truncate_fails = true;
    absl::Status failed = (*j)->Append(PutJob(2, JobName(2)));
    EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition) << failed;
    EXPECT_FALSE((*j)->broken().ok());
    disk.full = false;  // space is back, the half record is still there
    absl::Status refused = (*j)->Append(PutJob(3, JobName(3)));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.message().find("refuses appends"), std::string::npos) << refused;
    // The manager stops here (say it is restarted).
  }
  {
    // The half record is a torn tail: dropped (and kept aside); what was
    // acknowledged is all there.
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1}));
    EXPECT_EQ((*j)->bytes_discarded(), 7u);
    EXPECT_EQ((*j)->saved_copies().size(), 1u);
  }
}

TEST(Journal, SnapshotMakesARefusingJournalUsableAgain) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  FailingDisk disk;
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, disk.Options(), &loaded);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->Append(PutJob(1, JobName(1))).ok());
    disk.Fill();
    disk.truncate_fails = true;
    EXPECT_FALSE((*j)->Append(PutJob(2, JobName(2))).ok());
    disk.full = false;
    // The snapshot cannot empty the journal yet: it still refuses.
    state::Snapshot snap;
    *snap.add_jobs() = PutJob(1, JobName(1)).put_job();
    EXPECT_FALSE((*j)->WriteSnapshot(snap).ok());
    EXPECT_FALSE((*j)->Append(PutJob(3, JobName(3))).ok());
    disk.truncate_fails = false;
    ASSERT_TRUE((*j)->WriteSnapshot(snap).ok());
    EXPECT_TRUE((*j)->broken().ok());
    ASSERT_TRUE((*j)->Append(PutJob(3, JobName(3))).ok());
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ((*j)->bytes_discarded(), 0u);
}

// ---------------------------------------------------------------------------
// Security suite (docs/security.md, "The journal: what the manager
// acknowledged survives"): one of the three ways acknowledged state was lost
// on a real fabric (issue 23), a full disk; the other two, damaged files, are
// in journal_format_test.cc. It uses only Open/Append, so it ran, and
// failed, on the journal before the fix.

// A full disk in the middle of an append, simulated with RLIMIT_FSIZE: the
// kernel writes up to the limit and then refuses with EFBIG, leaving half a
// record, as ENOSPC does. The journal must roll the half record back before
// it writes the next one.
TEST(JournalSecurity, FailedAppendOnAFullDiskIsRolledBack) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE((*j)->Append(PutJob(i, JobName(i))).ok());

    // The disk fills up 10 bytes into the next record.
    struct rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit full = saved;
    full.rlim_cur = std::filesystem::file_size(log) + 10;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &full), 0);
    absl::Status failed = (*j)->Append(PutJob(6, JobName(6)));
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    EXPECT_FALSE(failed.ok());

    // Space is back: 20 more jobs are acknowledged.
    for (uint64_t i = 7; i <= 26; ++i) {
      ASSERT_TRUE((*j)->Append(PutJob(i, JobName(i))).ok()) << "job " << i;
    }
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(loaded.jobs_size(), 25);  // 1..5 and 7..26; 6 was refused
  for (const state::JobRecord& r : loaded.jobs()) {
    EXPECT_NE(r.job_id(), 6u);
    EXPECT_EQ(r.name(), JobName(r.job_id()));
  }
  EXPECT_EQ((*j)->bytes_discarded(), 0u);
}
}  // namespace
}  // namespace netfold::manager
