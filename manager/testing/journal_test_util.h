// Test helpers for the journal's tests (manager/journal_test.cc,
// manager/journal_format_test.cc): journal entries for numbered jobs, a
// state directory written through Journal, and the state files' bytes read,
// rewritten and damaged on purpose.
//
//   TempDir dir;
//   const std::string state_dir = dir.path() + "/state";
//   Write(state_dir, Jobs(1, 8));                      // jobs 1..8, appended
//   FlipIn(state_dir + "/journal.log", JobName(4));    // job 4's record damaged
//   ... Journal::Open(state_dir, &loaded) ...
//   EXPECT_EQ(JobIds(loaded), Range(1, 3));
//
// Test-only. Single-threaded, as the tests are.
#ifndef NETFOLD_MANAGER_TESTING_JOURNAL_TEST_UTIL_H_
#define NETFOLD_MANAGER_TESTING_JOURNAL_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/journal.h"

namespace netfold::manager {

inline state::JournalEntry PutJob(uint64_t id, const std::string& name) {
  state::JournalEntry e;
  e.mutable_put_job()->set_job_id(id);
  e.mutable_put_job()->set_name(name);
  return e;
}

inline state::JournalEntry DeleteJob(uint64_t id) {
  state::JournalEntry e;
  e.set_delete_job(id);
  return e;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A job name that appears once in a file, to find its record's bytes.
inline std::string JobName(uint64_t id) { return "job-name-" + std::to_string(1000 + id); }

// Opens `state_dir` and appends `entries`.
inline void Write(const std::string& state_dir, const std::vector<state::JournalEntry>& entries) {
  state::Snapshot loaded;
  auto j = Journal::Open(state_dir, &loaded);
  ASSERT_TRUE(j.ok()) << j.status();
  for (const state::JournalEntry& e : entries) ASSERT_TRUE((*j)->Append(e).ok());
}

inline std::vector<state::JournalEntry> Jobs(uint64_t first, uint64_t last) {
  std::vector<state::JournalEntry> out;
  for (uint64_t i = first; i <= last; ++i) out.push_back(PutJob(i, JobName(i)));
  return out;
}

inline std::vector<uint64_t> JobIds(const state::Snapshot& s) {
  std::vector<uint64_t> ids;
  for (const state::JobRecord& r : s.jobs()) ids.push_back(r.job_id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

inline std::vector<uint64_t> Range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> out;
  for (uint64_t i = first; i <= last; ++i) out.push_back(i);
  return out;
}

// Flips one bit in the record that holds `text` (its first occurrence).
inline void FlipIn(const std::string& path, const std::string& text, size_t at = 3) {
  std::string bytes = ReadFile(path);
  const size_t pos = bytes.find(text);
  ASSERT_NE(pos, std::string::npos) << text;
  bytes[pos + at] ^= 0x10;
  WriteFile(path, bytes);
}

// The offset of the record that holds `text`: the record header before it.
inline size_t RecordOf(const std::string& bytes, const std::string& text) {
  const size_t pos = bytes.find(text);
  return pos == std::string::npos ? pos : bytes.rfind("NFR2", pos);
}

// A disk that, while `*failing`, refuses every write (ENOSPC) and every
// truncation (EIO): an append fails and cannot be rolled back, so the
// journal refuses appends. `failing` must outlive the journal.
inline JournalOptions FailingDiskOptions(const bool* failing) {
  JournalOptions options;
  options.pwrite = [failing](int fd, const void* data, size_t size, off_t offset) -> ssize_t {
    if (!*failing) return pwrite(fd, data, size, offset);
    errno = ENOSPC;
    return -1;
  };
  options.ftruncate = [failing](int fd, off_t size) {
    if (!*failing) return ftruncate(fd, size);
    errno = EIO;
    return -1;
  };
  return options;
}

// The state directory's files whose names start with `prefix`.
inline std::vector<std::string> FilesStartingWith(const std::string& dir,
                                                  const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_JOURNAL_TEST_UTIL_H_
