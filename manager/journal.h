// Durable state of the aggregation manager: a snapshot plus an append-only
// journal of records in a state directory (docs/manager.md, "Durability").
//
//   state::Snapshot state;
//   absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open("/var/lib/netfold", &state);
//   ... rebuild from `state` ...
//   NETFOLD_RETURN_IF_ERROR((*j)->Append(entry));   // on disk when it returns OK
//   if ((*j)->records_since_snapshot() > 1000) (*j)->WriteSnapshot(full_state);
//
// Files: `snapshot.pb`, `journal.log`, `LOCK` (flock'd while open, so two
// managers cannot share a directory). Both state files are sequences of
// self-delimiting records, each with its own checksums (format 2):
//
//   "NFR2"  u64 number  u16 kind  u16 key_len  u32 payload_len  key  u32 CRC-32(all before)
//   payload  u32 CRC-32(payload)
//
// little-endian; records are numbered from 1 in each file. `kind` and `key` say
// which object the record is about (a job or group id, a link's tree root
// and child), so a record whose payload is damaged still says what it
// changed. The payload is a state::JournalEntry; a snapshot is a first
// record holding a state::Snapshot without its objects (topology name, id
// counters), one put record per object, and a last record that closes it.
//
// Guarantees:
//  - Append returns OK only once the record is fdatasync'd. A failed append
//    is rolled back (the file truncated to its last whole record and synced)
//    before anything else is written; if the rollback fails too, every
//    later Append fails (FailedPrecondition) until WriteSnapshot succeeds.
//    The directory is fsync'd when a file is created or renamed.
//  - Open never truncates what was acknowledged. A damaged record (checksum
//    mismatch, unreadable header, record numbers that jump) is skipped only
//    when a later intact record replaces the same object (records are
//    whole-object upserts and deletes; id counters only grow), which leaves
//    exactly the state a clean replay gives. Otherwise Open refuses
//    (DataLoss) with the file, offset, record and object, and changes
//    nothing on disk, unless JournalOptions::skip_damaged says to start from
//    the intact records anyway. The only thing dropped without asking is a
//    torn tail: a last record cut short (or zero-filled) by a crash in the
//    middle of an append, which was therefore never acknowledged.
//  - When Open skipped or dropped anything, or read the files of an older
//    netfold, it first copies the files aside (`journal.log.damaged-<UTC
//    time>`, `snapshot.pb.format1-<UTC time>`, ...), then writes what it
//    loaded as a new snapshot and empties the journal.
//
// Format 1 (before issue 23: [u32 length][u32 CRC-32][payload] journal
// records, a bare state::Snapshot) is still read, once, and rewritten as
// format 2; its snapshot had no checksum and cannot be checked.
//
// Not thread-safe: the manager calls it under its lock.
#ifndef NETFOLD_MANAGER_JOURNAL_H_
#define NETFOLD_MANAGER_JOURNAL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/manager_state.pb.h"

namespace netfold::manager {

// Ids reserved per counters record (StateRecords): a counters record raises
// one limit by at most this much over the record before it. Open raises the
// limits by this much for every lost record it skips under skip_damaged, so
// that no id it may have reserved is handed out twice.
inline constexpr uint64_t kIdBlock = 64;

// Applies one record to a snapshot (upsert or delete by id).
void ApplyJournalEntry(const state::JournalEntry& entry, state::Snapshot* snapshot);

struct JournalOptions {
  // Start from every intact record even if a damaged one cannot be skipped
  // safely (netfold-managerd --state_skip_damaged): the damaged records'
  // changes are lost. The files are copied aside first.
  bool skip_damaged = false;
  // The calls that change journal.log; empty means the system call. Tests
  // set them to fail the way a full or failing disk does.
  std::function<ssize_t(int fd, const void* data, size_t size, off_t offset)> pwrite;
  std::function<int(int fd)> fdatasync;
  std::function<int(int fd, off_t size)> ftruncate;
};

class Journal {
 public:
  // Opens (creating if needed) `dir`, takes its lock, and loads the state
  // into `*loaded`. FailedPrecondition if another process holds the lock;
  // DataLoss if a file is damaged in a way that cannot be skipped safely
  // (the message names the file, offset and record, and what to do).
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       state::Snapshot* loaded);
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       const JournalOptions& options,
                                                       state::Snapshot* loaded);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one record and fdatasyncs it: durable when it returns OK. On an
  // error nothing of the record is left in the file (or, if that could not
  // be made so, the journal refuses every append until WriteSnapshot).
  absl::Status Append(const state::JournalEntry& entry);
  // Replaces the snapshot with `snapshot` and empties the journal. Also
  // what makes a journal that refuses appends usable again.
  absl::Status WriteSnapshot(const state::Snapshot& snapshot);

  int records_since_snapshot() const { return records_since_snapshot_; }
  // Why Append refuses (OK while it does not): a failed append that could
  // not be rolled back.
  const absl::Status& broken() const { return broken_; }
  // Appends that returned an error since Open, refused ones included.
  uint64_t failed_appends() const { return failed_appends_; }

  // What Open found. Records of journal.log replayed; bytes of torn tail
  // dropped; damaged records skipped (in either file); the copies it kept.
  int records_replayed() const { return records_replayed_; }
  uint64_t bytes_discarded() const { return bytes_discarded_; }
  int damaged_records() const { return damaged_records_; }
  const std::vector<std::string>& saved_copies() const { return saved_copies_; }
  const std::string& dir() const { return dir_; }

 private:
  Journal() = default;
  ssize_t PWrite(const void* data, size_t size, off_t offset);
  int DataSync();
  int Truncate(off_t size);
  absl::Status WriteRecord(const std::string& record);
  absl::Status AppendRecord(const state::JournalEntry& entry);
  absl::Status EmptyLog();

  std::string dir_;
  JournalOptions options_;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  uint64_t end_ = 0;       // bytes of whole records in journal.log
  uint64_t next_seq_ = 1;  // the next record's number
  absl::Status broken_;
  int records_since_snapshot_ = 0;
  uint64_t failed_appends_ = 0;
  int records_replayed_ = 0;
  uint64_t bytes_discarded_ = 0;
  int damaged_records_ = 0;
  std::vector<std::string> saved_copies_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_JOURNAL_H_
