// The state directory of a local fabric (`netfold up`, `down`, `status`):
// a directory that only its user can change, and the files in it opened
// without following symlinks. The default, /tmp/netfold-<uid>, has a name
// anyone can guess and sits in a directory anyone can write, so another
// user may have made it first, or planted a symlink there or in it
// (issue 23 item 10, docs/security.md "Local tooling and the state
// directory").
//
//   absl::StatusOr<StateDir> dir = StateDir::Open("/tmp/netfold-1000", /*create=*/true);
//   if (!dir.ok()) return dir.status();       // names the path and the owner
//   NETFOLD_RETURN_IF_ERROR(dir->WriteFile("manager.address", "127.0.0.1:4000\n"));
//   absl::StatusOr<std::string> text = dir->ReadFile("fabric.pids");
//
// Open refuses, with FailedPrecondition naming the path:
// - a directory owned by another user (and says which);
// - a directory that is a symlink, or a path that goes through a symlink
//   owned by anyone but root or this user;
// - a directory that others (group or world) may write.
// It creates a missing directory (and missing parents) 0700. Files are
// opened relative to the directory's descriptor with O_NOFOLLOW; WriteFile
// creates a new file with O_EXCL and renames it into place, so a planted
// symlink is replaced, never written through.
//
// Not thread-safe for writes to the same name; distinct names are fine.
#ifndef NETFOLD_TOOLS_STATE_DIR_H_
#define NETFOLD_TOOLS_STATE_DIR_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netfold::tools {

class StateDir {
 public:
  // An exclusive flock(2) on a file of the directory, released when this
  // is destroyed. Movable.
  class Lock {
   public:
    explicit Lock(int fd) : fd_(fd) {}
    Lock(Lock&& other) noexcept;
    Lock& operator=(Lock&& other) noexcept;
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    ~Lock();

   private:
    int fd_ = -1;
  };

  // See above. `create`: make the directory (0700) when it is missing;
  // otherwise a missing directory is NotFound.
  static absl::StatusOr<StateDir> Open(const std::string& path, bool create);

  StateDir(StateDir&& other) noexcept;
  StateDir& operator=(StateDir&& other) noexcept;
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;
  ~StateDir();

  const std::string& path() const { return path_; }
  // path()/name.
  std::string PathOf(std::string_view name) const;

  // Replaces `name` with `text` (mode 0600): written to a new file
  // (O_EXCL | O_NOFOLLOW) and renamed over `name`.
  absl::Status WriteFile(std::string_view name, std::string_view text) const;
  // The contents of `name`; NotFound if it is missing, an error if it is a
  // symlink or not a regular file. At most `max_bytes` are read.
  absl::StatusOr<std::string> ReadFile(std::string_view name, size_t max_bytes = 1 << 20) const;
  // A new empty file `name` (a previous one is removed first), open for
  // writing with O_CLOEXEC; the caller closes it. For daemons' logs.
  absl::StatusOr<int> CreateFile(std::string_view name) const;
  // Renames `from` to `to` (replacing it) if `from` exists; a symlink is
  // renamed, not followed. OK if `from` is missing.
  absl::Status Rename(std::string_view from, std::string_view to) const;
  // Takes the lock on `name` (created 0600 if missing, never through a
  // symlink), waiting up to `timeout` for another process to release it:
  // DeadlineExceeded then. The commands that change which daemons a fabric
  // runs hold "fabric.lock" while they do.
  absl::StatusOr<Lock> TakeLock(std::string_view name, absl::Duration timeout) const;
  // Removes `name` if it exists (a symlink is removed, not followed).
  void Remove(std::string_view name) const;
  bool Exists(std::string_view name) const;

 private:
  StateDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_STATE_DIR_H_
