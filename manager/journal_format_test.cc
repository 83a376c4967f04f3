// Tests of the state files' format (manager/journal_format.h) as Open reads
// it: torn tails told from damaged records, damage found and located by the
// records around it, snapshots checked record by record, format 1 journals.
// What Open then recovers, and appends, are in journal_test.cc.
#include "manager/journal.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "manager/testing/journal_test_util.h"
#include "manager/testing/temp_dir.h"

namespace netfold::manager {
namespace {

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
// Damage found: a damaged header, a missing record.

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
// acknowledged survives"): two of the three ways acknowledged state was lost
// on a real fabric (issue 23), damaged files; the third, a full disk, is in
// journal_test.cc. These use only Open/Append/WriteSnapshot, so they ran,
// and failed, on the journal before the fix.

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
