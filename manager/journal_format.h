// The state files' on-disk format, for Journal (manager/journal.h): format
// 2 records (a fixed header with its own CRC-32, the key, the payload, each
// checksummed), the snapshot as such records between a first and a last one,
// reading a file back into items (intact, damaged, lost; a journal's torn
// tail), format 1 journals read once, and durable file replacement.
//
//   StateFile f{.path = dir + "/journal.log"};  // bytes read with ReadAll
//   ParseJournal(&f);
//   for (const Item& i : f.items) if (i.state != Item::kIntact) LOG << Where(i);
//
// Thread safety: pure functions and plain structs.
#ifndef NETFOLD_MANAGER_JOURNAL_FORMAT_H_
#define NETFOLD_MANAGER_JOURNAL_FORMAT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/manager_state.pb.h"

namespace netfold::manager::journal_format {

constexpr size_t kFixedBytes = 24;  // a record's fixed header, with its checksum
constexpr size_t kMinRecordBytes = kFixedBytes + 4 + 4;
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxPayloadBytes = 64u << 20;
// Kinds: JournalEntry's oneof field numbers, and the snapshot's own two.
constexpr int kSnapshotBegin = 100;
constexpr int kSnapshotEnd = 101;

// The object a record sets: its kind and an id (or link) key.
struct Key {
  int kind = 0;
  std::string key;
};

Key KeyOf(const state::JournalEntry& e);

// One format 2 record.
std::string EncodeRecord(uint64_t seq, int kind, const std::string& key,
                         const std::string& payload);
// A whole snapshot: a first record, one per object, a last record.
std::string EncodeSnapshot(const state::Snapshot& s);

// "put_job", ... for messages.
const char* KindName(int kind);
// What a record of `kind` and `key` replaces: a later record of the same
// family sets the same object again.
std::string Family(int kind, const std::string& key);

// One record (or a stretch of unreadable bytes) of a state file.
struct Item {
  enum State {
    kIntact,
    kDamaged,  // its fixed header is intact: kind (and perhaps key) known
    kLost,     // not even that: an unknown object, `count` records (0 = unknown)
  };
  State state = kIntact;
  const std::string* path = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t seq = 0;
  uint64_t count = 1;
  int kind = 0;
  bool key_known = true;
  std::string key;
  std::string why;
  state::JournalEntry entry;  // kIntact records with a JournalEntry
  state::Snapshot head;       // kIntact snapshot header and end
};

// One state file as read.
struct StateFile {
  std::string path;
  bool exists = false;
  std::string bytes;
  int format = 2;
  std::vector<Item> items;
  uint64_t end = 0;   // where its whole records end
  uint64_t torn = 0;  // bytes of torn tail after `end` (journal only)
  uint64_t next_seq = 1;

  bool damaged() const {
    return std::any_of(items.begin(), items.end(),
                       [](const Item& i) { return i.state != Item::kIntact; });
  }
  Item& Add(Item::State state, uint64_t offset, uint64_t length, std::string why) {
    Item& i = items.emplace_back();
    i.state = state;
    i.path = &path;
    i.offset = offset;
    i.length = length;
    i.why = std::move(why);
    return i;
  }
};

// Read `f->bytes` (a journal: format 1 or 2; a snapshot) into `f->items`.
void ParseJournal(StateFile* f);
void ParseSnapshot(StateFile* f);
// "path: record N at offset O (B bytes, what): why", for messages.
std::string Where(const Item& i);
// The snapshot header's topology name and id limits into `snap`.
void ApplyHead(const state::Snapshot& head, state::Snapshot* snap);

// Removes the first element of a repeated field for which `id` is true.
template <typename Records, typename Id>
void Erase(Records* records, Id id) {
  for (int i = 0; i < records->size(); ++i) {
    if (id(records->Get(i))) {
      records->DeleteSubrange(i, 1);
      return;
    }
  }
}

// Files. `*exists` false (and "") if `path` is not there.
absl::StatusOr<std::string> ReadAll(const std::string& path, bool* exists);
absl::Status FsyncDir(const std::string& dir);
// Writes `bytes` to `path` through `path`.tmp: written, fsync'd, renamed,
// the directory fsync'd. A failure leaves `path` as it was and no .tmp.
absl::Status ReplaceFile(const std::string& dir, const std::string& path,
                         const std::string& bytes);
// Keeps `bytes` (what `path` held) as `path`.<reason>-<UTC time>; returns
// the copy's path.
absl::StatusOr<std::string> SaveCopy(const std::string& dir, const std::string& path,
                                     const std::string& bytes, const std::string& reason);

}  // namespace netfold::manager::journal_format

#endif  // NETFOLD_MANAGER_JOURNAL_FORMAT_H_
