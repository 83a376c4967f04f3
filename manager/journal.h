// Durable state of the aggregation manager: a snapshot plus an append-only
// journal of records in a state directory.
//
//   state::Snapshot state;
//   absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open("/var/lib/netfold", &state);
//   ... rebuild from `state` ...
//   NETFOLD_RETURN_IF_ERROR((*j)->Append(entry));        // durable when it returns
//   if ((*j)->records_since_snapshot() > 1000) (*j)->WriteSnapshot(full_state);
//
// Files: `snapshot.pb` (a state::Snapshot), `journal.log` (records), `LOCK`
// (flock'd while open, so two managers cannot share a directory). A record
// is [u32 length][u32 CRC-32 of the payload][payload], little-endian. Open
// replays the journal onto the snapshot; a torn or corrupt tail (a crash in
// the middle of an append) is cut off with a warning. WriteSnapshot writes
// `snapshot.pb.tmp`, fsyncs, renames it over `snapshot.pb`, fsyncs the
// directory, then empties the journal: a crash at any point leaves either
// the old snapshot and its journal, or the new snapshot and a journal whose
// records are already in it (replaying them again is harmless).
//
// Not thread-safe: the manager calls it under its lock.
#ifndef NETFOLD_MANAGER_JOURNAL_H_
#define NETFOLD_MANAGER_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/manager_state.pb.h"

namespace netfold::manager {

// Applies one record to a snapshot (upsert or delete by id).
void ApplyJournalEntry(const state::JournalEntry& entry, state::Snapshot* snapshot);

class Journal {
 public:
  // Opens (creating if needed) `dir`, takes its lock, and loads the state
  // into `*loaded`. FailedPrecondition if another process holds the lock;
  // DataLoss if the snapshot itself is unreadable.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       state::Snapshot* loaded);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends one record and fdatasyncs it.
  absl::Status Append(const state::JournalEntry& entry);
  // Replaces the snapshot with `snapshot` and empties the journal.
  absl::Status WriteSnapshot(const state::Snapshot& snapshot);

  int records_since_snapshot() const { return records_since_snapshot_; }
  // Records replayed by Open, and bytes of torn tail it cut off.
  int records_replayed() const { return records_replayed_; }
  uint64_t bytes_discarded() const { return bytes_discarded_; }
  const std::string& dir() const { return dir_; }

 private:
  Journal() = default;

  std::string dir_;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  int records_since_snapshot_ = 0;
  int records_replayed_ = 0;
  uint64_t bytes_discarded_ = 0;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_JOURNAL_H_
