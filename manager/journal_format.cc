// The state files' on-disk format (docs/manager.md, "Durability"): records
// with their own checksums, how a journal or a snapshot is read back whole,
// damaged or torn, and the file operations that make a write durable.
#include "manager/journal_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace netfold::manager::journal_format {

// Format 2 records (journal.h):
//   0  "NFR2"            4  u64 number       12 u16 kind       14 u16 key_len
//   16 u32 payload_len   20 u32 CRC-32 of bytes 0..19
//   24 key               .. u32 CRC-32 of the key
//   .. payload           .. u32 CRC-32 of the payload
// The fixed part has its own checksum, so the lengths are known to be right
// before they are used: a record that runs past the end of the file was
// really cut short, not made to look so by a damaged length.
constexpr char kMagic[4] = {'N', 'F', 'R', '2'};

// ---------------------------------------------------------------------------
// Bytes and files

void PutU16(std::string* out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint32_t GetU32(const char* p) { return static_cast<uint32_t>(GetLe(p, 4)); }

uint32_t Crc(const char* data, size_t size) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}
uint32_t Crc(const std::string& s) { return Crc(s.data(), s.size()); }

bool AllZero(const std::string& b, size_t from) {
  return std::all_of(b.begin() + static_cast<std::ptrdiff_t>(from), b.end(),
                     [](char c) { return c == 0; });
}

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

// Writes `bytes` to `path` through `path`.tmp: written, fsync'd, renamed,
// the directory fsync'd. A failure leaves `path` as it was and no .tmp.
absl::Status ReplaceFile(const std::string& dir, const std::string& path,
                         const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", tmp));
  absl::Status s = WriteAll(fd, bytes.data(), bytes.size(), absl::StrFormat("write %s", tmp));
  if (s.ok() && fsync(fd) != 0) s = ErrnoToStatus(errno, absl::StrFormat("fsync %s", tmp));
  close(fd);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoToStatus(errno, absl::StrFormat("rename %s to %s", tmp, path));
  }
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  return FsyncDir(dir);
}

// Keeps `bytes` (what `path` held) as `path`.<reason>-<UTC time>; returns
// the copy's path.
absl::StatusOr<std::string> SaveCopy(const std::string& dir, const std::string& path,
                                     const std::string& bytes, const std::string& reason) {
  const std::string stamp = absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  for (int i = 0; i < 1000; ++i) {
    const std::string copy =
        absl::StrCat(path, ".", reason, "-", stamp, i == 0 ? "" : absl::StrCat("-", i));
    int fd = open(copy.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("create %s", copy));
    absl::Status s = WriteAll(fd, bytes.data(), bytes.size(), absl::StrFormat("write %s", copy));
    if (s.ok() && fsync(fd) != 0) s = ErrnoToStatus(errno, absl::StrFormat("fsync %s", copy));
    close(fd);
    NETFOLD_RETURN_IF_ERROR(s);
    NETFOLD_RETURN_IF_ERROR(FsyncDir(dir));
    return copy;
  }
  return absl::AlreadyExistsError(absl::StrFormat("cannot name a copy of %s", path));
}

// ---------------------------------------------------------------------------
// Records


std::string IdKey(uint64_t id) {
  std::string k;
  PutU64(&k, id);
  return k;
}

Key KeyOf(const state::JournalEntry& e) {
  Key k{.kind = static_cast<int>(e.entry_case())};
  switch (e.entry_case()) {
    case state::JournalEntry::kPutJob:
      k.key = IdKey(e.put_job().job_id());
      break;
    case state::JournalEntry::kDeleteJob:
      k.key = IdKey(e.delete_job());
      break;
    case state::JournalEntry::kPutGroup:
      k.key = IdKey(e.put_group().group_id());
      break;
    case state::JournalEntry::kDeleteGroup:
      k.key = IdKey(e.delete_group());
      break;
    case state::JournalEntry::kPutLink:
      k.key = absl::StrCat(e.put_link().tree_root(), std::string(1, '\0'), e.put_link().child());
      break;
    case state::JournalEntry::kDeleteLink:
      k.key =
          absl::StrCat(e.delete_link().tree_root(), std::string(1, '\0'), e.delete_link().child());
      break;
    case state::JournalEntry::kCounters:
    case state::JournalEntry::ENTRY_NOT_SET:
      break;
  }
  return k;
}

std::string EncodeRecord(uint64_t seq, int kind, const std::string& key,
                         const std::string& payload) {
  std::string r;
  r.reserve(kMinRecordBytes + key.size() + payload.size());
  r.append(kMagic, sizeof(kMagic));
  PutU64(&r, seq);
  PutU16(&r, static_cast<uint16_t>(kind));
  PutU16(&r, static_cast<uint16_t>(key.size()));
  PutU32(&r, static_cast<uint32_t>(payload.size()));
  PutU32(&r, Crc(r.data(), r.size()));
  r += key;
  PutU32(&r, Crc(key));
  r += payload;
  PutU32(&r, Crc(payload));
  return r;
}

// The snapshot's first and last records: the snapshot without its objects
// (a new top-level field of state::Snapshot must be copied here).
state::Snapshot SnapshotHead(const state::Snapshot& s) {
  state::Snapshot head;
  head.set_topology_name(s.topology_name());
  *head.mutable_counters() = s.counters();
  return head;
}

std::string EncodeSnapshot(const state::Snapshot& s) {
  const std::string head = SnapshotHead(s).SerializeAsString();
  std::string out;
  uint64_t seq = 1;
  out += EncodeRecord(seq++, kSnapshotBegin, "", head);
  auto put = [&](const state::JournalEntry& e) {
    const Key k = KeyOf(e);
    out += EncodeRecord(seq++, k.kind, k.key, e.SerializeAsString());
  };
  for (const state::JobRecord& r : s.jobs()) {
    state::JournalEntry e;
    *e.mutable_put_job() = r;
    put(e);
  }
  for (const state::GroupRecord& r : s.groups()) {
    state::JournalEntry e;
    *e.mutable_put_group() = r;
    put(e);
  }
  for (const state::LinkRecord& r : s.links()) {
    state::JournalEntry e;
    *e.mutable_put_link() = r;
    put(e);
  }
  out += EncodeRecord(seq++, kSnapshotEnd, "", head);
  return out;
}

const char* KindName(int kind) {
  switch (kind) {
    case state::JournalEntry::kPutJob:
      return "put_job";
    case state::JournalEntry::kDeleteJob:
      return "delete_job";
    case state::JournalEntry::kPutGroup:
      return "put_group";
    case state::JournalEntry::kDeleteGroup:
      return "delete_group";
    case state::JournalEntry::kPutLink:
      return "put_link";
    case state::JournalEntry::kDeleteLink:
      return "delete_link";
    case state::JournalEntry::kCounters:
      return "counters";
    case kSnapshotBegin:
      return "snapshot header";
    case kSnapshotEnd:
      return "snapshot end";
    default:
      return "unknown kind";
  }
}

// What a record is about, for messages: "put_job of job 4".
std::string Describe(int kind, bool key_known, const std::string& key) {
  if (!key_known)
    return absl::StrFormat("%s (kind %d) of an object whose key is damaged", KindName(kind), kind);
  switch (kind) {
    case state::JournalEntry::kPutJob:
    case state::JournalEntry::kDeleteJob:
    case state::JournalEntry::kPutGroup:
    case state::JournalEntry::kDeleteGroup:
      return absl::StrFormat("%s of %s %d", KindName(kind), kind <= 2 ? "job" : "group",
                             key.size() == 8 ? GetLe(key.data(), 8) : 0);
    case state::JournalEntry::kPutLink:
    case state::JournalEntry::kDeleteLink: {
      const size_t nul = key.find('\0');
      return absl::StrFormat("%s of the link from %s in tree %s", KindName(kind),
                             nul == std::string::npos ? "?" : key.substr(nul + 1),
                             key.substr(0, nul));
    }
    case state::JournalEntry::kCounters:
      return "counters (the id limits)";
    case kSnapshotBegin:
      return "the snapshot's header (topology name, id limits)";
    case kSnapshotEnd:
      return "the snapshot's closing record";
    case state::JournalEntry::ENTRY_NOT_SET:
      return "an empty record";
    default:
      return absl::StrFormat("a record of kind %d, unknown to this version", kind);
  }
}

// The object a record sets: a later intact record with the same family
// replaces it. "" for records that set nothing; "?" for unknown kinds.
std::string Family(int kind, const std::string& key) {
  switch (kind) {
    case state::JournalEntry::kPutJob:
    case state::JournalEntry::kDeleteJob:
      return "j" + key;
    case state::JournalEntry::kPutGroup:
    case state::JournalEntry::kDeleteGroup:
      return "g" + key;
    case state::JournalEntry::kPutLink:
    case state::JournalEntry::kDeleteLink:
      return "l" + key;
    case state::JournalEntry::kCounters:
    case kSnapshotBegin:
      return "c";       // id limits only grow: a later one covers it
    case kSnapshotEnd:  // a copy of the header
    case state::JournalEntry::ENTRY_NOT_SET:
      return "";
    default:
      return "?";
  }
}



struct Header {
  uint64_t seq = 0;
  int kind = 0;
  uint32_t key_len = 0;
  uint32_t payload_len = 0;
  uint64_t total = 0;  // bytes of the whole record
};

// True if a format-2 record's fixed header, checksum included, is at `pos`.
bool ReadHeader(const std::string& b, size_t pos, Header* h) {
  if (b.size() - pos < kFixedBytes) return false;
  const char* p = b.data() + pos;
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return false;
  if (Crc(p, kFixedBytes - 4) != GetU32(p + kFixedBytes - 4)) return false;
  h->seq = GetLe(p + 4, 8);
  h->kind = static_cast<int>(GetLe(p + 12, 2));
  h->key_len = static_cast<uint32_t>(GetLe(p + 14, 2));
  h->payload_len = GetU32(p + 16);
  if (h->key_len > kMaxKeyBytes || h->payload_len > kMaxPayloadBytes) return false;
  h->total = kMinRecordBytes + h->key_len + h->payload_len;
  return true;
}

size_t FindHeader(const std::string& b, size_t from) {
  Header h;
  for (size_t p = b.find(kMagic, from, sizeof(kMagic)); p != std::string::npos;
       p = b.find(kMagic, p + 1, sizeof(kMagic))) {
    if (ReadHeader(b, p, &h)) return p;
  }
  return std::string::npos;
}

// Decodes an intact record's payload into `item`; false (and `why`) if it
// is not what its header says or not what `journal` or a snapshot holds.
bool Decode(const std::string& payload, bool journal, Item* item) {
  if (item->kind == kSnapshotBegin || item->kind == kSnapshotEnd) {
    if (journal) {
      item->why = "a snapshot record in the journal";
      return false;
    }
    if (!item->head.ParseFromString(payload) || !item->key.empty()) {
      item->why = "its payload does not decode";
      return false;
    }
    return true;
  }
  if (!item->entry.ParseFromString(payload)) {
    item->why = "its payload does not decode";
    return false;
  }
  const Key k = KeyOf(item->entry);
  if (k.kind != item->kind || k.key != item->key) {
    item->why = k.kind == state::JournalEntry::ENTRY_NOT_SET
                    ? "its kind is unknown to this version of netfold-managerd"
                    : "its payload does not match its header";
    return false;
  }
  if (!journal && k.kind != state::JournalEntry::kPutJob &&
      k.kind != state::JournalEntry::kPutGroup && k.kind != state::JournalEntry::kPutLink) {
    item->why = "a journal record in the snapshot";
    return false;
  }
  return true;
}

// Reads a format-2 file. In the journal, a last record cut short (or
// zero-filled) is a torn tail; anywhere else, and in a snapshot, anything
// that does not check out is damage. Damage never stops the reading: the
// next intact header is searched for.
void ParseFormat2(bool journal, StateFile* f) {
  const std::string& b = f->bytes;
  size_t pos = 0;
  uint64_t expect = 1;
  while (pos < b.size()) {
    const size_t avail = b.size() - pos;
    Header h;
    if (ReadHeader(b, pos, &h)) {
      if (h.seq != expect) {
        Item& gap =
            f->Add(Item::kLost, pos, 0,
                   h.seq > expect ? absl::StrFormat("records %d to %d are missing (record %d comes "
                                                    "next)",
                                                    expect, h.seq - 1, h.seq)
                                  : absl::StrFormat("record %d is out of order (record %d was "
                                                    "expected)",
                                                    h.seq, expect));
        gap.seq = expect;
        gap.count = h.seq > expect ? h.seq - expect : 0;
      }
      expect = h.seq + 1;
      if (h.total > avail) {
        if (journal) {  // cut short by a crash in the middle of its append
          f->torn = avail;
          break;
        }
        Item& cut = f->Add(
            Item::kLost, pos, avail,
            absl::StrFormat("the file ends %d bytes into this %d-byte record", avail, h.total));
        cut.seq = h.seq;
        cut.count = 0;
        pos = b.size();
        break;
      }
      const char* p = b.data() + pos;
      const std::string key(p + kFixedBytes, h.key_len);
      const bool key_ok = Crc(key) == GetU32(p + kFixedBytes + h.key_len);
      const std::string payload(p + kFixedBytes + h.key_len + 4, h.payload_len);
      const bool payload_ok = Crc(payload) == GetU32(p + h.total - 4);
      if (journal && pos + h.total == b.size() && (!key_ok || !payload_ok) &&
          AllZero(b, b.size() - 4)) {
        f->torn = avail;  // its end never reached the disk (zero-filled after a crash)
        break;
      }
      Item& item = f->Add(Item::kIntact, pos, h.total, "");
      item.seq = h.seq;
      item.kind = h.kind;
      item.key = key;
      item.key_known = key_ok;
      if (!key_ok) {
        item.state = Item::kDamaged;
        item.why = "the checksum of its key does not match";
      } else if (!payload_ok) {
        item.state = Item::kDamaged;
        item.why = "the checksum of its payload does not match";
      } else if (!Decode(payload, journal, &item)) {
        item.state = Item::kDamaged;
      }
      pos += h.total;
      continue;
    }
    if (avail < kFixedBytes && journal) {  // less than a header: never a whole record
      f->torn = avail;
      break;
    }
    const size_t next = FindHeader(b, pos + 1);
    if (next == std::string::npos) {
      if (journal && AllZero(b, pos)) {
        f->torn = avail;
        break;
      }
      Item& lost = f->Add(Item::kLost, pos, avail, "unreadable to the end of the file");
      lost.seq = expect;
      lost.count = 0;
      pos = b.size();
      break;
    }
    Header nh;
    ReadHeader(b, next, &nh);
    Item& lost = f->Add(Item::kLost, pos, next - pos,
                        absl::StrFormat("unreadable up to the next intact record (record %d at "
                                        "offset %d)",
                                        nh.seq, next));
    lost.seq = expect;
    lost.count = nh.seq > expect ? nh.seq - expect : 0;
    expect = nh.seq;
    pos = next;
  }
  f->end = pos;
  f->next_seq = expect;
}

// True if from `pos` on a format-1 journal ([u32 length][u32 CRC-32]
// [payload]) holds at least one whole record, and whole records up to the
// end of the file or a torn tail.
bool Format1ChainsToEnd(const std::string& b, size_t pos) {
  bool whole = false;
  while (pos < b.size()) {
    const size_t avail = b.size() - pos;
    if (avail < 8) return whole;
    const uint32_t len = GetU32(b.data() + pos);
    if (len > kMaxPayloadBytes) return false;
    if (8 + static_cast<size_t>(len) > avail) return whole;
    const std::string payload = b.substr(pos + 8, len);
    state::JournalEntry e;
    if (Crc(payload) != GetU32(b.data() + pos + 4) || !e.ParseFromString(payload)) return false;
    whole = true;
    pos += 8 + len;
  }
  return whole;
}

// Reads a format-1 journal. Its lengths are not checksummed: after a bad
// record, reading goes on from the first offset whose records check out to
// the end of the file.
void ParseFormat1Journal(StateFile* f) {
  f->format = 1;
  const std::string& b = f->bytes;
  size_t pos = 0;
  uint64_t n = 1;
  while (pos < b.size()) {
    const size_t avail = b.size() - pos;
    uint32_t len = avail >= 8 ? GetU32(b.data() + pos) : 0;
    if (avail < 8 || (len <= kMaxPayloadBytes && 8 + static_cast<size_t>(len) > avail)) {
      f->torn = avail;
      break;
    }
    state::JournalEntry e;
    std::string payload = len <= kMaxPayloadBytes ? b.substr(pos + 8, len) : std::string();
    if (len <= kMaxPayloadBytes && Crc(payload) == GetU32(b.data() + pos + 4) &&
        e.ParseFromString(payload)) {
      Item& item = f->Add(Item::kIntact, pos, 8 + len, "");
      const Key k = KeyOf(e);
      item.seq = n++;
      item.kind = k.kind;
      item.key = k.key;
      item.entry = std::move(e);
      pos += 8 + len;
      continue;
    }
    if (AllZero(b, pos)) {
      f->torn = avail;
      break;
    }
    size_t next = pos + 1;
    while (next < b.size() && !Format1ChainsToEnd(b, next)) ++next;
    std::string why = "a damaged record, and nothing after it can be read";
    if (next < b.size()) {
      why = len <= kMaxPayloadBytes && 8 + static_cast<size_t>(len) > next - pos
                ? "a record cut short and followed by whole ones: what a failed append left "
                  "before netfold-managerd rolled them back (that append was refused, not "
                  "acknowledged), or a damaged length"
                : "a damaged record";
    }
    Item& lost = f->Add(Item::kLost, pos, next - pos, why);
    lost.seq = n++;
    lost.count = 0;
    pos = next;
  }
  f->end = pos;
  f->next_seq = n;
}

// Reads snapshot.pb, of either format.
void ParseSnapshot(StateFile* f) {
  const std::string& b = f->bytes;
  if (!f->exists) return;
  const bool format2 =
      b.size() >= sizeof(kMagic) &&
      (std::memcmp(b.data(), kMagic, sizeof(kMagic)) == 0 || FindHeader(b, 0) != std::string::npos);
  if (!format2) {  // a bare state::Snapshot, without checksums
    f->format = 1;
    state::Snapshot s;
    if (!s.ParseFromString(b)) {
      Item& lost = f->Add(Item::kLost, 0, b.size(),
                          "it is neither a snapshot of this version nor of an older one");
      lost.count = 0;
      return;
    }
    Item& head = f->Add(Item::kIntact, 0, b.size(), "");
    head.kind = kSnapshotBegin;
    head.head = SnapshotHead(s);
    auto put = [&](state::JournalEntry e) {
      Item& item = f->Add(Item::kIntact, 0, b.size(), "");
      const Key k = KeyOf(e);
      item.kind = k.kind;
      item.key = k.key;
      item.entry = std::move(e);
    };
    for (const state::JobRecord& r : s.jobs()) {
      state::JournalEntry e;
      *e.mutable_put_job() = r;
      put(std::move(e));
    }
    for (const state::GroupRecord& r : s.groups()) {
      state::JournalEntry e;
      *e.mutable_put_group() = r;
      put(std::move(e));
    }
    for (const state::LinkRecord& r : s.links()) {
      state::JournalEntry e;
      *e.mutable_put_link() = r;
      put(std::move(e));
    }
    return;
  }
  ParseFormat2(/*journal=*/false, f);
  // A whole snapshot opens with its header and closes with its end record;
  // anything else means records are missing.
  if (!f->items.empty() && f->items.front().state != Item::kLost &&
      f->items.front().kind != kSnapshotBegin) {
    Item lost;
    lost.state = Item::kLost;
    lost.path = &f->path;
    lost.count = 0;
    lost.why = "the snapshot's header record is missing";
    f->items.insert(f->items.begin(), std::move(lost));
  }
  const bool closed = !f->items.empty() && f->items.back().state != Item::kLost &&
                      f->items.back().kind == kSnapshotEnd;
  if (!closed) {
    Item& lost = f->Add(Item::kLost, b.size(), 0,
                        "the snapshot ends without its closing record: records are missing");
    lost.seq = f->next_seq;
    lost.count = 0;
  }
  for (size_t i = 0; i + 1 < f->items.size(); ++i) {
    Item& item = f->items[i];
    if (item.state != Item::kLost && item.kind == kSnapshotEnd) {
      item.state = Item::kDamaged;
      item.why = "the snapshot's closing record is not its last";
    }
  }
}

// Reads journal.log, of either format.
void ParseJournal(StateFile* f) {
  const std::string& b = f->bytes;
  const bool format2 =
      b.empty() ||
      (b.size() >= sizeof(kMagic) && std::memcmp(b.data(), kMagic, sizeof(kMagic)) == 0) ||
      FindHeader(b, 0) != std::string::npos || AllZero(b, 0);
  if (format2) {
    ParseFormat2(/*journal=*/true, f);
  } else {
    ParseFormat1Journal(f);
  }
}

std::string Where(const Item& i) {
  if (i.state == Item::kLost) {
    std::string records = i.count == 0 ? "an unknown number of records"
                          : i.count == 1
                              ? absl::StrFormat("record %d", i.seq)
                              : absl::StrFormat("records %d to %d", i.seq, i.seq + i.count - 1);
    return absl::StrFormat("%s: %s at offset %d (%d bytes, objects unknown): %s", *i.path, records,
                           i.offset, i.length, i.why);
  }
  return absl::StrFormat("%s: record %d at offset %d (%d bytes, %s): %s", *i.path, i.seq, i.offset,
                         i.length, Describe(i.kind, i.key_known, i.key), i.why);
}

void ApplyHead(const state::Snapshot& head, state::Snapshot* snap) {
  if (!head.topology_name().empty()) snap->set_topology_name(head.topology_name());
  state::Counters* c = snap->mutable_counters();
  c->set_job_id_limit(std::max(c->job_id_limit(), head.counters().job_id_limit()));
  c->set_group_id_limit(std::max(c->group_id_limit(), head.counters().group_id_limit()));
}

}  // namespace netfold::manager::journal_format
