#include "manager/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace netfold::manager {
namespace {

constexpr char kSnapshotFile[] = "snapshot.pb";
constexpr char kJournalFile[] = "journal.log";
constexpr char kLockFile[] = "LOCK";
constexpr uint32_t kMaxRecordBytes = 64u << 20;

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, what);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadAll(const std::string& path, bool* exists) {
  *exists = false;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return ErrnoToStatus(errno, absl::StrFormat("open %s", path));
  }
  *exists = true;
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return ErrnoToStatus(e, absl::StrFormat("read %s", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", dir));
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoToStatus(e, absl::StrFormat("fsync %s", dir));
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint32_t Crc(const std::string& payload) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
}

template <typename Records, typename Id>
void Erase(Records* records, Id id) {
  for (int i = 0; i < records->size(); ++i) {
    if (id(records->Get(i))) {
      records->DeleteSubrange(i, 1);
      return;
    }
  }
}

}  // namespace

void ApplyJournalEntry(const state::JournalEntry& entry, state::Snapshot* snap) {
  switch (entry.entry_case()) {
    case state::JournalEntry::kPutJob: {
      const uint64_t id = entry.put_job().job_id();
      Erase(snap->mutable_jobs(), [&](const state::JobRecord& r) { return r.job_id() == id; });
      *snap->add_jobs() = entry.put_job();
      break;
    }
    case state::JournalEntry::kDeleteJob: {
      const uint64_t id = entry.delete_job();
      Erase(snap->mutable_jobs(), [&](const state::JobRecord& r) { return r.job_id() == id; });
      break;
    }
    case state::JournalEntry::kPutGroup: {
      const uint64_t id = entry.put_group().group_id();
      Erase(snap->mutable_groups(),
            [&](const state::GroupRecord& r) { return r.group_id() == id; });
      *snap->add_groups() = entry.put_group();
      break;
    }
    case state::JournalEntry::kDeleteGroup: {
      const uint64_t id = entry.delete_group();
      Erase(snap->mutable_groups(),
            [&](const state::GroupRecord& r) { return r.group_id() == id; });
      break;
    }
    case state::JournalEntry::kPutLink:
    case state::JournalEntry::kDeleteLink: {
      const state::LinkRecord& l = entry.entry_case() == state::JournalEntry::kPutLink
                                       ? entry.put_link()
                                       : entry.delete_link();
      Erase(snap->mutable_links(), [&](const state::LinkRecord& r) {
        return r.tree_root() == l.tree_root() && r.child() == l.child();
      });
      if (entry.entry_case() == state::JournalEntry::kPutLink) *snap->add_links() = l;
      break;
    }
    case state::JournalEntry::kCounters: {
      state::Counters* c = snap->mutable_counters();
      c->set_job_id_limit(std::max(c->job_id_limit(), entry.counters().job_id_limit()));
      c->set_group_id_limit(std::max(c->group_id_limit(), entry.counters().group_id_limit()));
      break;
    }
    case state::JournalEntry::ENTRY_NOT_SET:
      break;
  }
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                                       state::Snapshot* loaded) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrFormat("create state directory %s", dir));
  }
  std::unique_ptr<Journal> j(new Journal());
  j->dir_ = dir;
  const std::string lock_path = dir + "/" + kLockFile;
  j->lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (j->lock_fd_ < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", lock_path));
  if (flock(j->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrFormat("state directory %s is in use by another netfold-managerd", dir));
    }
    return ErrnoToStatus(errno, absl::StrFormat("lock %s", lock_path));
  }

  loaded->Clear();
  bool exists = false;
  NETFOLD_ASSIGN_OR_RETURN(std::string snap_bytes, ReadAll(dir + "/" + kSnapshotFile, &exists));
  if (exists && !loaded->ParseFromString(snap_bytes)) {
    return absl::DataLossError(
        absl::StrFormat("%s/%s is corrupt; refusing to start without it", dir, kSnapshotFile));
  }

  const std::string log_path = dir + "/" + kJournalFile;
  NETFOLD_ASSIGN_OR_RETURN(std::string log, ReadAll(log_path, &exists));
  size_t pos = 0;
  while (pos + 8 <= log.size()) {
    uint32_t len = GetU32(log.data() + pos);
    uint32_t crc = GetU32(log.data() + pos + 4);
    if (len > kMaxRecordBytes || pos + 8 + len > log.size()) break;
    std::string payload = log.substr(pos + 8, len);
    if (Crc(payload) != crc) break;
    state::JournalEntry entry;
    if (!entry.ParseFromString(payload)) break;
    ApplyJournalEntry(entry, loaded);
    ++j->records_replayed_;
    pos += 8 + len;
  }
  j->bytes_discarded_ = log.size() - pos;
  j->log_fd_ = open(log_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (j->log_fd_ < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", log_path));
  if (j->bytes_discarded_ > 0) {
    NETFOLD_LOG(kWarning) << "journal " << log_path << ": cut off " << j->bytes_discarded_
                          << " bytes of torn or corrupt tail after " << j->records_replayed_
                          << " records";
    if (ftruncate(j->log_fd_, static_cast<off_t>(pos)) != 0) {
      return ErrnoToStatus(errno, absl::StrFormat("truncate %s", log_path));
    }
  }
  if (lseek(j->log_fd_, static_cast<off_t>(pos), SEEK_SET) < 0) {
    return ErrnoToStatus(errno, absl::StrFormat("seek %s", log_path));
  }
  j->records_since_snapshot_ = j->records_replayed_;
  return j;
}

Journal::~Journal() {
  if (log_fd_ >= 0) close(log_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
}

absl::Status Journal::Append(const state::JournalEntry& entry) {
  std::string payload;
  if (!entry.SerializeToString(&payload)) return absl::InternalError("cannot serialize a record");
  std::string record;
  PutU32(&record, static_cast<uint32_t>(payload.size()));
  PutU32(&record, Crc(payload));
  record += payload;
  const std::string what = absl::StrFormat("append to %s/%s", dir_, kJournalFile);
  NETFOLD_RETURN_IF_ERROR(WriteAll(log_fd_, record.data(), record.size(), what));
  if (fdatasync(log_fd_) != 0) return ErrnoToStatus(errno, what);
  ++records_since_snapshot_;
  return absl::OkStatus();
}

absl::Status Journal::WriteSnapshot(const state::Snapshot& snapshot) {
  std::string bytes;
  if (!snapshot.SerializeToString(&bytes)) return absl::InternalError("cannot serialize snapshot");
  const std::string tmp = absl::StrFormat("%s/%s.tmp", dir_, kSnapshotFile);
  const std::string final_path = absl::StrFormat("%s/%s", dir_, kSnapshotFile);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", tmp));
  absl::Status s = WriteAll(fd, bytes.data(), bytes.size(), absl::StrFormat("write %s", tmp));
  if (s.ok() && fsync(fd) != 0) s = ErrnoToStatus(errno, absl::StrFormat("fsync %s", tmp));
  close(fd);
  NETFOLD_RETURN_IF_ERROR(s);
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("rename %s", tmp));
  }
  NETFOLD_RETURN_IF_ERROR(FsyncDir(dir_));
  const std::string log_path = absl::StrFormat("%s/%s", dir_, kJournalFile);
  if (ftruncate(log_fd_, 0) != 0)
    return ErrnoToStatus(errno, absl::StrFormat("truncate %s", log_path));
  if (lseek(log_fd_, 0, SEEK_SET) < 0)
    return ErrnoToStatus(errno, absl::StrFormat("seek %s", log_path));
  if (fsync(log_fd_) != 0) return ErrnoToStatus(errno, absl::StrFormat("fsync %s", log_path));
  records_since_snapshot_ = 0;
  return absl::OkStatus();
}

}  // namespace netfold::manager
