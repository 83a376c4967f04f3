// Tests of the journal: replay, torn tails, snapshots, the directory lock.
#include "manager/journal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A job name that appears once in a file, to find its record's bytes.
std::string JobName(uint64_t id) { return "job-name-" + std::to_string(1000 + id); }

// Opens `state_dir` and appends `entries`.
void Write(const std::string& state_dir, const std::vector<state::JournalEntry>& entries) {
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  for (const state::JournalEntry& e : entries) ASSERT_TRUE((*j)->Append(e).ok());
}

std::vector<state::JournalEntry> Jobs(uint64_t first, uint64_t last) {
  std::vector<state::JournalEntry> out;
  for (uint64_t i = first; i <= last; ++i) out.push_back(PutJob(i, JobName(i)));
  return out;
}

std::vector<uint64_t> JobIds(const state::Snapshot& s) {
  std::vector<uint64_t> ids;
  for (const state::JobRecord& r : s.jobs()) ids.push_back(r.job_id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> out;
  for (uint64_t i = first; i <= last; ++i) out.push_back(i);
  return out;
}

// Flips one bit in the record that holds `text` (its first occurrence).
void FlipIn(const std::string& path, const std::string& text, size_t at = 3) {
  std::string bytes = ReadFile(path);
  const size_t pos = bytes.find(text);
  ASSERT_NE(pos, std::string::npos) << text;
  bytes[pos + at] ^= 0x10;
  WriteFile(path, bytes);
}

// The offset of the record that holds `text`: the record header before it.
size_t RecordOf(const std::string& bytes, const std::string& text) {
  const size_t pos = bytes.find(text);
  return pos == std::string::npos ? pos : bytes.rfind("NFR2", pos);
}

// A record of the journal before issue 23 (format 1).
std::string Format1(const state::JournalEntry& e) {
  const std::string payload = e.SerializeAsString();
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
  std::string r;
  for (uint32_t v : {static_cast<uint32_t>(payload.size()), crc}) {
    for (int i = 0; i < 4; ++i) r.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  return r + payload;
}

// The state directory's files whose names start with `prefix`.
std::vector<std::string> FilesStartingWith(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
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

// ---------------------------------------------------------------------------
// Torn tails: the only thing Open drops without asking, and never silently.

TEST(Journal, TornTailIsDroppedAndKeptAside) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 2));
  // A crash in the middle of the third append: the start of a header.
  const std::string torn = ReadFile(log) + std::string("NFR2\x03\x00", 6);
  WriteFile(log, torn);
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(JobIds(loaded), Range(1, 2));
    EXPECT_EQ((*j)->bytes_discarded(), 6u);
    EXPECT_EQ((*j)->damaged_records(), 0);
    ASSERT_EQ((*j)->saved_copies().size(), 1u);
    EXPECT_NE((*j)->saved_copies()[0].find("journal.log.damaged-"), std::string::npos);
    EXPECT_EQ(ReadFile((*j)->saved_copies()[0]), torn);
    // What was loaded is now the snapshot; the journal starts over.
    EXPECT_EQ(std::filesystem::file_size(log), 0u);
    ASSERT_TRUE((*j)->Append(PutJob(3, JobName(3))).ok());
  }
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), Range(1, 3));
  EXPECT_EQ((*j)->bytes_discarded(), 0u);
  EXPECT_TRUE((*j)->saved_copies().empty());
}

TEST(Journal, RecordCutShortIsATornTail) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 3));
  std::string bytes = ReadFile(log);
  const size_t third = RecordOf(bytes, JobName(3));
  bytes.resize(bytes.size() - 5);
  WriteFile(log, bytes);
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), Range(1, 2));
  EXPECT_EQ((*j)->bytes_discarded(), bytes.size() - third);
}

TEST(Journal, ZeroFilledLastRecordIsATornTail) {
  // What some file systems show after a crash: the file's new size reached
  // the disk, the data of its last block did not.
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 3));
  std::string bytes = ReadFile(log);
  const size_t third = RecordOf(bytes, JobName(3));
  std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(third) + 30, bytes.end(), '\0');
  WriteFile(log, bytes);
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), Range(1, 2));
  EXPECT_EQ((*j)->bytes_discarded(), bytes.size() - third);
}

TEST(Journal, DamagedLastRecordIsNotATornTail) {
  // Whole, with a wrong checksum: it may have been acknowledged.
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 3));
  FlipIn(log, JobName(3));
  const std::string bytes = ReadFile(log);
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << j.status();
  EXPECT_NE(j.status().message().find("put_job of job 3"), std::string::npos) << j.status();
  EXPECT_NE(j.status().message().find("--state_skip_damaged"), std::string::npos);
  EXPECT_EQ(ReadFile(log), bytes);
  EXPECT_TRUE(FilesStartingWith(state_dir, "journal.log.").empty());
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

TEST(Journal, DamagedHeaderIsFoundAndCounted) {
  // A damaged header hides which object the record was about, but the
  // records after it are found again by their own headers.
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  state::JournalEntry c;
  c.mutable_counters()->set_job_id_limit(64);
  std::vector<state::JournalEntry> entries = {c};
  for (const state::JournalEntry& e : Jobs(1, 32)) entries.push_back(e);
  Write(state_dir, entries);
  std::string bytes = ReadFile(log);
  const size_t fourth = RecordOf(bytes, JobName(4));
  bytes[fourth + 14] ^= 0x01;  // its key length
  WriteFile(log, bytes);

  state::Snapshot loaded;
  auto refused = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(refused.status().message().find(absl::StrFormat("record 5 at offset %d", fourth)),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("objects unknown"), std::string::npos);
  EXPECT_EQ(ReadFile(log), bytes);

  JournalOptions options;
  options.skip_damaged = true;
  auto j = Journal::Open(state_dir, options, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(loaded.jobs_size(), 31);
  EXPECT_EQ((*j)->damaged_records(), 1);
  // It might have been a counters record: no id under it is handed out again.
  EXPECT_EQ(loaded.counters().job_id_limit(), 64u + kIdBlock);
}

TEST(Journal, MissingRecordIsFound) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 8));
  std::string bytes = ReadFile(log);
  const size_t fourth = RecordOf(bytes, JobName(4));
  const size_t fifth = RecordOf(bytes, JobName(5));
  bytes.erase(fourth, fifth - fourth);
  WriteFile(log, bytes);
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(j.status().message().find("records 4 to 4 are missing"), std::string::npos)
      << j.status();
}

// ---------------------------------------------------------------------------
// Snapshots: checked record by record.

TEST(Journal, SnapshotCutShortIsRefused) {
  for (bool whole_records : {true, false}) {
    TempDir dir;
    const std::string state_dir = dir.path() + "/state";
    const std::string snapshot = state_dir + "/snapshot.pb";
    {
      state::Snapshot loaded;
      auto j = Journal::Open(state_dir, &loaded);
      ASSERT_TRUE(j.ok());
      state::Snapshot snap;
      for (uint64_t i = 1; i <= 8; ++i) *snap.add_jobs() = PutJob(i, JobName(i)).put_job();
      ASSERT_TRUE((*j)->WriteSnapshot(snap).ok());
    }
    std::string bytes = ReadFile(snapshot);
    // Without its last two records, or in the middle of one.
    bytes.resize(whole_records ? RecordOf(bytes, JobName(8)) : bytes.size() - 40);
    WriteFile(snapshot, bytes);
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << j.status();
    EXPECT_NE(j.status().message().find(snapshot), std::string::npos) << j.status();
  }
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
// Format 1 (before issue 23): read once, rewritten.

TEST(Journal, ReadsFormat1AndRewritesIt) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  std::filesystem::create_directories(state_dir);
  state::Snapshot old;
  old.set_topology_name("two-level");
  old.mutable_counters()->set_job_id_limit(64);
  *old.add_jobs() = PutJob(1, JobName(1)).put_job();
  *old.add_jobs() = PutJob(2, JobName(2)).put_job();
  WriteFile(state_dir + "/snapshot.pb", old.SerializeAsString());
  const std::string old_log = Format1(PutJob(3, JobName(3))) + Format1(DeleteJob(1));
  WriteFile(state_dir + "/journal.log", old_log);
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(loaded.topology_name(), "two-level");
    EXPECT_EQ(loaded.counters().job_id_limit(), 64u);
    EXPECT_EQ((*j)->records_replayed(), 2);
    EXPECT_EQ((*j)->saved_copies().size(), 2u);
  }
  EXPECT_EQ(FilesStartingWith(state_dir, "snapshot.pb.format1-").size(), 1u);
  ASSERT_EQ(FilesStartingWith(state_dir, "journal.log.format1-").size(), 1u);
  EXPECT_EQ(ReadFile(FilesStartingWith(state_dir, "journal.log.format1-")[0]), old_log);
  EXPECT_EQ(ReadFile(state_dir + "/snapshot.pb").substr(0, 4), "NFR2");
  EXPECT_EQ(std::filesystem::file_size(state_dir + "/journal.log"), 0u);
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE((*j)->saved_copies().empty());
}

TEST(Journal, Format1DamageIsNeverCutOff) {
  // What the old journal left after a full disk: half a record, then
  // acknowledged ones.
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  std::filesystem::create_directories(state_dir);
  std::string old_log;
  for (const state::JournalEntry& e : Jobs(1, 3)) old_log += Format1(e);
  old_log += Format1(PutJob(4, JobName(4))).substr(0, 12);
  for (const state::JournalEntry& e : Jobs(5, 8)) old_log += Format1(e);
  WriteFile(state_dir + "/journal.log", old_log);

  state::Snapshot loaded;
  auto refused = Journal::Open(state_dir, &loaded);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
  EXPECT_EQ(ReadFile(state_dir + "/journal.log"), old_log);

  JournalOptions options;
  options.skip_damaged = true;
  auto j = Journal::Open(state_dir, options, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1, 2, 3, 5, 6, 7, 8}));
}

TEST(Journal, Format1TornTailIsDropped) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  std::filesystem::create_directories(state_dir);
  WriteFile(state_dir + "/journal.log",
            Format1(PutJob(1, JobName(1))) + Format1(PutJob(2, JobName(2))).substr(0, 10));
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JobIds(loaded), (std::vector<uint64_t>{1}));
  EXPECT_EQ((*j)->bytes_discarded(), 10u);
}

// ---------------------------------------------------------------------------
// Security suite (docs/security.md, "The journal: what the manager
// acknowledged survives"): the three ways acknowledged state was lost on a
// real fabric (issue 23). These use only Open/Append/WriteSnapshot, so they
// ran, and failed, on the journal before the fix.

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

// One flipped bit in record 4 of 32: the 28 records after it were
// acknowledged and must not be dropped, and the journal must not be cut.
// Record 4 (job 4's only record) cannot be skipped without losing job 4, so
// the manager refuses to start, naming the file and the offset, and leaves
// every byte where it was.
TEST(JournalSecurity, DamagedRecordInTheMiddleIsNeverCutOff) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string log = state_dir + "/journal.log";
  Write(state_dir, Jobs(1, 32));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::string bytes = ReadFile(log);
  const size_t at = bytes.find(JobName(4));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] ^= 0x04;
  WriteFile(log, bytes);

  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_FALSE(j.ok()) << "started with " << loaded.jobs_size() << " of 32 jobs";
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << j.status();
  const std::string message(j.status().message());
  EXPECT_NE(message.find(log), std::string::npos) << message;
  EXPECT_NE(message.find("offset"), std::string::npos) << message;
  EXPECT_NE(message.find("job 4"), std::string::npos) << message;
  EXPECT_EQ(ReadFile(log), bytes);  // nothing cut, nothing rewritten
}

// Three zeroed bytes in a snapshot: it must be refused, not loaded with a
// job's name changed.
TEST(JournalSecurity, DamagedSnapshotIsNeverLoadedAltered) {
  TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string snapshot = state_dir + "/snapshot.pb";
  {
    state::Snapshot loaded;
    auto j = Journal::Open(state_dir, &loaded);
    ASSERT_TRUE(j.ok()) << j.status();
    state::Snapshot snap;
    for (uint64_t i = 1; i <= 8; ++i) *snap.add_jobs() = PutJob(i, JobName(i)).put_job();
    ASSERT_TRUE((*j)->WriteSnapshot(snap).ok());
  }
  std::string bytes = ReadFile(snapshot);
  const size_t at = bytes.find(JobName(5));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = bytes[at + 10] = bytes[at + 11] = '\0';
  WriteFile(snapshot, bytes);

  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_FALSE(j.ok()) << "loaded a damaged snapshot";
  EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss) << j.status();
  const std::string message(j.status().message());
  EXPECT_NE(message.find(snapshot), std::string::npos) << message;
  EXPECT_NE(message.find("offset"), std::string::npos) << message;
  EXPECT_EQ(ReadFile(snapshot), bytes);
}

}  // namespace
}  // namespace netfold::manager
