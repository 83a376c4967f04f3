#include "manager/journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "manager/journal_format.h"

namespace netfold::manager {
namespace {

constexpr char kSnapshotFile[] = "snapshot.pb";
constexpr char kJournalFile[] = "journal.log";
constexpr char kLockFile[] = "LOCK";

using journal_format::ApplyHead;
using journal_format::EncodeRecord;
using journal_format::EncodeSnapshot;
using journal_format::Erase;
using journal_format::Family;
using journal_format::FsyncDir;
using journal_format::Item;
using journal_format::Key;
using journal_format::KeyOf;
using journal_format::KindName;
using journal_format::ParseJournal;
using journal_format::ParseSnapshot;
using journal_format::ReadAll;
using journal_format::ReplaceFile;
using journal_format::SaveCopy;
using journal_format::StateFile;
using journal_format::Where;
using journal_format::kMaxKeyBytes;
using journal_format::kMaxPayloadBytes;
using journal_format::kMinRecordBytes;
using journal_format::kSnapshotBegin;
using journal_format::kSnapshotEnd;

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
  return Open(dir, JournalOptions(), loaded);
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                                       const JournalOptions& options,
                                                       state::Snapshot* loaded) {
  if (mkdir(dir.c_str(), 0700) == 0) {
    std::string parent = std::filesystem::path(dir).parent_path().string();
    NETFOLD_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));
  } else if (errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrFormat("create state directory %s", dir));
  }
  std::unique_ptr<Journal> j(new Journal());
  j->dir_ = dir;
  j->options_ = options;
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

  StateFile snap{.path = dir + "/" + kSnapshotFile};
  NETFOLD_ASSIGN_OR_RETURN(snap.bytes, ReadAll(snap.path, &snap.exists));
  ParseSnapshot(&snap);
  StateFile log{.path = dir + "/" + kJournalFile};
  NETFOLD_ASSIGN_OR_RETURN(log.bytes, ReadAll(log.path, &log.exists));
  ParseJournal(&log);

  // Damage is skipped only where a later intact record sets the same object
  // again: the state is then exactly what a clean replay gives.
  std::vector<const Item*> all;
  for (const Item& i : snap.items) all.push_back(&i);
  for (const Item& i : log.items) all.push_back(&i);
  std::map<std::string, size_t> last_intact;
  for (size_t n = 0; n < all.size(); ++n) {
    const Item& i = *all[n];
    if (i.state != Item::kIntact) continue;
    last_intact[i.kind == kSnapshotEnd ? "c" : Family(i.kind, i.key)] = n;
  }
  std::vector<const Item*> unsafe;
  int damaged = 0;
  for (size_t n = 0; n < all.size(); ++n) {
    const Item& i = *all[n];
    if (i.state == Item::kIntact) continue;
    damaged += i.state == Item::kLost ? static_cast<int>(std::max<uint64_t>(1, i.count)) : 1;
    std::string verdict;
    if (i.state == Item::kDamaged && i.key_known) {
      const std::string family = Family(i.kind, i.key);
      auto it = last_intact.find(family);
      if (family.empty()) {
        verdict = "it sets nothing: skipped";
      } else if (family != "?" && it != last_intact.end() && it->second > n) {
        const Item& later = *all[it->second];
        verdict = absl::StrFormat("record %d of %s (offset %d) sets the same object again: skipped",
                                  later.seq, *later.path, later.offset);
      }
    }
    if (verdict.empty()) {
      unsafe.push_back(&i);
      verdict = "no later record replaces it";
    }
    NETFOLD_LOG(kError) << "damaged state: " << Where(i) << "; " << verdict;
  }
  if (!unsafe.empty() && !options.skip_damaged) {
    std::vector<std::string> where;
    for (size_t n = 0; n < unsafe.size() && n < 4; ++n) where.push_back(Where(*unsafe[n]));
    if (unsafe.size() > 4) where.push_back(absl::StrFormat("%d more (logged)", unsafe.size() - 4));
    return absl::DataLossError(absl::StrFormat(
        "the manager's state in %s is damaged, and skipping the damage could lose or change "
        "acknowledged state: %s. Nothing on disk was changed. Restore the state directory from a "
        "backup, or start netfold-managerd with --state_skip_damaged to load every intact record "
        "and drop the damaged ones (their changes are lost; the damaged files are first copied "
        "aside as <file>.damaged-<UTC time>)",
        dir, absl::StrJoin(where, "; ")));
  }

  loaded->Clear();
  for (const Item* i : all) {
    if (i->state != Item::kIntact) continue;
    if (i->kind == kSnapshotBegin || i->kind == kSnapshotEnd) {
      ApplyHead(i->head, loaded);
    } else {
      ApplyJournalEntry(i->entry, loaded);
    }
  }
  if (!unsafe.empty()) {
    // Lost id limits: raise them past anything the lost records reserved.
    uint64_t blocks = 0;
    for (const Item* i : unsafe) {
      if (i->state == Item::kLost) {
        blocks += i->count > 0 ? i->count : std::max<uint64_t>(1, i->length / kMinRecordBytes);
      } else if (const std::string family = Family(i->kind, i->key);
                 family == "c" || family == "?") {
        blocks += 1;  // its kind is known: only a counters record reserves ids
      }
    }
    state::Counters* c = loaded->mutable_counters();
    c->set_job_id_limit(c->job_id_limit() + blocks * kIdBlock);
    c->set_group_id_limit(c->group_id_limit() + blocks * kIdBlock);
    NETFOLD_LOG(kError) << "--state_skip_damaged: " << dir
                        << " loaded without the damaged records above that nothing replaces ("
                        << unsafe.size() << "); their changes are lost; id limits raised by "
                        << blocks * kIdBlock;
  }
  if (log.torn > 0) {
    NETFOLD_LOG(kWarning) << log.path << ": dropping a torn last record (" << log.torn
                          << " bytes at offset " << log.end
                          << "): an append cut short by a crash, never acknowledged";
  }
  j->damaged_records_ = damaged;
  j->bytes_discarded_ = log.torn;
  for (const Item& i : log.items) j->records_replayed_ += i.state == Item::kIntact ? 1 : 0;

  const bool log_created = !log.exists;
  j->log_fd_ = open(log.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (j->log_fd_ < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", log.path));
  if (log_created) NETFOLD_RETURN_IF_ERROR(FsyncDir(dir));
  j->end_ = log.end;
  j->next_seq_ = log.next_seq;
  j->records_since_snapshot_ = j->records_replayed_;

  // Anything skipped, dropped or in the old format: keep the files as they
  // were, then write what was loaded as a new snapshot (which empties the
  // journal), so that the state on disk is whole again.
  const bool snap_rewrite = snap.exists && (snap.damaged() || snap.format == 1);
  const bool log_rewrite = log.damaged() || log.torn > 0 || log.format == 1;
  if (snap_rewrite || log_rewrite) {
    for (const StateFile* f : {&snap, &log}) {
      if (f->bytes.empty() || !(f == &snap ? snap_rewrite : log_rewrite)) continue;
      const bool bad = f->damaged() || f->torn > 0;
      NETFOLD_ASSIGN_OR_RETURN(std::string copy,
                               SaveCopy(dir, f->path, f->bytes, bad ? "damaged" : "format1"));
      NETFOLD_LOG(kWarning) << f->path
                            << (!bad           ? " (format 1)"
                                : f->damaged() ? " (damaged)"
                                               : " (with a torn tail)")
                            << " kept as " << copy;
      j->saved_copies_.push_back(copy);
    }
    NETFOLD_RETURN_IF_ERROR(j->WriteSnapshot(*loaded));
    NETFOLD_LOG(kWarning) << dir << ": the loaded state was written as a new snapshot";
  }
  return j;
}

Journal::~Journal() {
  if (log_fd_ >= 0) close(log_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
}

ssize_t Journal::PWrite(const void* data, size_t size, off_t offset) {
  return options_.pwrite ? options_.pwrite(log_fd_, data, size, offset)
                         : pwrite(log_fd_, data, size, offset);
}
int Journal::DataSync() {
  return options_.fdatasync ? options_.fdatasync(log_fd_) : fdatasync(log_fd_);
}
int Journal::Truncate(off_t size) {
  return options_.ftruncate ? options_.ftruncate(log_fd_, size) : ftruncate(log_fd_, size);
}

absl::Status Journal::WriteRecord(const std::string& record) {
  const std::string path = absl::StrFormat("%s/%s", dir_, kJournalFile);
  const char* p = record.data();
  size_t left = record.size();
  off_t offset = static_cast<off_t>(end_);
  while (left > 0) {
    ssize_t n = PWrite(p, left, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return n == 0 ? absl::UnavailableError(absl::StrFormat("append to %s: no progress", path))
                    : ErrnoToStatus(errno, absl::StrFormat("append to %s", path));
    }
    p += n;
    left -= static_cast<size_t>(n);
    offset += n;
  }
  if (DataSync() != 0) return ErrnoToStatus(errno, absl::StrFormat("fdatasync %s", path));
  return absl::OkStatus();
}

absl::Status Journal::Append(const state::JournalEntry& entry) {
  absl::Status s = AppendRecord(entry);
  if (!s.ok()) ++failed_appends_;
  return s;
}

absl::Status Journal::AppendRecord(const state::JournalEntry& entry) {
  const std::string path = absl::StrFormat("%s/%s", dir_, kJournalFile);
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s refuses appends: an earlier failed append could not be rolled back (%s); the next "
        "successful snapshot or a restart makes it usable again",
        path, broken_.message()));
  }
  std::string payload;
  if (!entry.SerializeToString(&payload)) return absl::InternalError("cannot serialize a record");
  const Key k = KeyOf(entry);
  if (payload.size() > kMaxPayloadBytes || k.key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s record is too large for %s", KindName(k.kind), path));
  }
  const std::string record = EncodeRecord(next_seq_, k.kind, k.key, payload);
  absl::Status s = WriteRecord(record);
  if (!s.ok()) {
    // Nothing of the record may stay: the next append would land after it,
    // and the next start would find a damaged record in the middle.
    if (Truncate(static_cast<off_t>(end_)) != 0 || DataSync() != 0) {
      broken_ = ErrnoToStatus(errno, absl::StrFormat("truncate %s back to %d bytes", path, end_));
      NETFOLD_LOG(kError) << path << ": a failed append could not be rolled back ("
                          << broken_.message() << "): no more appends until a snapshot succeeds";
      return absl::FailedPreconditionError(
          absl::StrFormat("%s; then %s: the journal refuses appends until a snapshot succeeds",
                          s.message(), broken_.message()));
    }
    return s;
  }
  end_ += record.size();
  ++next_seq_;
  ++records_since_snapshot_;
  return absl::OkStatus();
}

absl::Status Journal::EmptyLog() {
  const std::string path = absl::StrFormat("%s/%s", dir_, kJournalFile);
  if (Truncate(0) != 0) return ErrnoToStatus(errno, absl::StrFormat("truncate %s", path));
  end_ = 0;
  next_seq_ = 1;
  if (DataSync() != 0) {
    // Whether the old records are gone on disk is unknown: new ones written
    // at offset 0 could end up in front of their remains.
    broken_ = ErrnoToStatus(errno, absl::StrFormat("fdatasync %s after emptying it", path));
    return broken_;
  }
  broken_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status Journal::WriteSnapshot(const state::Snapshot& snapshot) {
  NETFOLD_RETURN_IF_ERROR(
      ReplaceFile(dir_, absl::StrFormat("%s/%s", dir_, kSnapshotFile), EncodeSnapshot(snapshot)));
  NETFOLD_RETURN_IF_ERROR(EmptyLog());
  records_since_snapshot_ = 0;
  return absl::OkStatus();
}

}  // namespace netfold::manager
