#include "tools/state_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"

namespace netfold::tools {
namespace {

// "alice (uid 1000)", or "uid 1000" when the user has no name.
std::string Owner(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return absl::StrFormat("%s (uid %d)", found->pw_name, uid);
  }
  return absl::StrFormat("uid %d", uid);
}

absl::Status Refuse(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrFormat("state directory %s: %s; refusing to use it (docs/security.md, "
                      "\"Local tooling and the state directory\")",
                      path, why));
}

// A symlink another user could have planted: anything but root's or ours.
bool TrustedOwner(uid_t uid) { return uid == 0 || uid == getuid(); }

std::string LinkTarget(int dir_fd, const std::string& name) {
  char buf[4096];
  const ssize_t n = readlinkat(dir_fd, name.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
}

bool ValidName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

}  // namespace

absl::StatusOr<StateDir> StateDir::Open(const std::string& given, bool create) {
  if (given.empty()) return absl::InvalidArgumentError("the state directory path is empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = fs::path(given);
  if (path.is_relative()) path = fs::current_path(ec) / path;
  if (ec) return absl::UnavailableError(absl::StrFormat("getcwd: %s", ec.message()));
  path = path.lexically_normal();
  std::vector<std::string> parts;
  for (const fs::path& p : path.relative_path()) {
    if (!p.empty() && p != ".") parts.push_back(p.string());
  }
  const std::string shown = path.string();
  if (parts.empty()) return Refuse(shown, "the root directory cannot be a state directory");

  // Down from "/", one component at a time, so that every symlink on the
  // way is seen (and judged by its owner) rather than followed blindly.
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoToStatus(errno, "open /");
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& part = parts[i];
    walked += "/" + part;
    struct stat st;
    if (create && fstatat(dir, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
      mkdirat(dir, part.c_str(), 0700);  // a missing parent, as `mkdir -p` would
    }
    if (fstatat(dir, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      const int e = errno;
      close(dir);
      return ErrnoToStatus(e, absl::StrFormat("state directory %s: %s", shown, walked));
    }
    if (S_ISLNK(st.st_mode) && !TrustedOwner(st.st_uid)) {
      const std::string target = LinkTarget(dir, part);
      close(dir);
      return Refuse(shown, absl::StrFormat("it is reached through the symlink %s -> %s owned by %s",
                                           walked, target, Owner(st.st_uid)));
    }
    const int next = openat(dir, part.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int e = errno;
    close(dir);
    if (next < 0) return ErrnoToStatus(e, absl::StrFormat("state directory %s: %s", shown, walked));
    dir = next;
  }
  const std::string& last = parts.back();
  if (create && mkdirat(dir, last.c_str(), 0700) != 0 && errno != EEXIST) {
    const int e = errno;
    close(dir);
    return ErrnoToStatus(e, absl::StrFormat("create the state directory %s", shown));
  }
  struct stat st;
  if (fstatat(dir, last.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;
    close(dir);
    if (e == ENOENT) return absl::NotFoundError(absl::StrFormat("no directory %s", shown));
    return ErrnoToStatus(e, absl::StrFormat("state directory %s", shown));
  }
  if (S_ISLNK(st.st_mode)) {
    const std::string target = LinkTarget(dir, last);
    close(dir);
    return Refuse(shown, absl::StrFormat("it is a symlink (to %s) owned by %s", target,
                                         Owner(st.st_uid)));
  }
  const int fd = openat(dir, last.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int e = errno;
  close(dir);
  if (fd < 0) return ErrnoToStatus(e, absl::StrFormat("open the state directory %s", shown));
  StateDir result(shown, fd);
  // The checks on what was opened, not on a name that may have changed since.
  if (fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrFormat("stat %s", shown));
  if (st.st_uid != getuid()) {
    return Refuse(shown, absl::StrFormat("it is owned by %s, not by you (%s)", Owner(st.st_uid),
                                         Owner(getuid())));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refuse(shown, absl::StrFormat("its mode %04o lets other users write in it (chmod 700 %s)",
                                         st.st_mode & 07777, shown));
  }
  return result;
}

StateDir::StateDir(StateDir&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

StateDir& StateDir::operator=(StateDir&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

StateDir::~StateDir() {
  if (fd_ >= 0) close(fd_);
}

std::string StateDir::PathOf(std::string_view name) const {
  return absl::StrFormat("%s/%s", path_, name);
}

absl::Status StateDir::WriteFile(std::string_view name, std::string_view text) const {
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrFormat("bad name '%s'", name));
  const std::string tmp = absl::StrFormat(".%s.new.%d", name, getpid());
  unlinkat(fd_, tmp.c_str(), 0);
  const int fd = openat(fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("create %s", PathOf(tmp)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlinkat(fd_, tmp.c_str(), 0);
      return ErrnoToStatus(e, absl::StrFormat("write %s", PathOf(tmp)));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (renameat(fd_, tmp.c_str(), fd_, std::string(name).c_str()) != 0) {
    const int e = errno;
    unlinkat(fd_, tmp.c_str(), 0);
    return ErrnoToStatus(e, absl::StrFormat("rename %s to %s", PathOf(tmp), PathOf(name)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> StateDir::ReadFile(std::string_view name, size_t max_bytes) const {
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrFormat("bad name '%s'", name));
  const int fd =
      openat(fd_, std::string(name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s is a symlink; refusing to follow it", PathOf(name)));
    }
    return ErrnoToStatus(e, absl::StrFormat("open %s", PathOf(name)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is not a regular file", PathOf(name)));
  }
  std::string text;
  char buf[4096];
  while (text.size() < max_bytes) {
    const ssize_t n = read(fd, buf, std::min(sizeof(buf), max_bytes - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

absl::StatusOr<int> StateDir::CreateFile(std::string_view name) const {
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrFormat("bad name '%s'", name));
  const std::string n(name);
  unlinkat(fd_, n.c_str(), 0);
  const int fd = openat(fd_, n.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("create %s", PathOf(name)));
  return fd;
}

StateDir::Lock::Lock(Lock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

StateDir::Lock& StateDir::Lock::operator=(Lock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

StateDir::Lock::~Lock() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<StateDir::Lock> StateDir::TakeLock(std::string_view name,
                                                  absl::Duration timeout) const {
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrFormat("bad name '%s'", name));
  const int fd = openat(fd_, std::string(name).c_str(),
                        O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", PathOf(name)));
  Lock lock(fd);
  const absl::Time deadline = absl::Now() + timeout;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return ErrnoToStatus(errno, absl::StrFormat("flock %s", PathOf(name)));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s is held by another netfold command on this fabric after %s; try again",
          PathOf(name), absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return lock;
}

absl::Status StateDir::Rename(std::string_view from, std::string_view to) const {
  if (!ValidName(from) || !ValidName(to)) {
    return absl::InvalidArgumentError(absl::StrFormat("bad name '%s' or '%s'", from, to));
  }
  if (renameat(fd_, std::string(from).c_str(), fd_, std::string(to).c_str()) != 0) {
    const int e = errno;
    if (e != ENOENT) return ErrnoToStatus(e, absl::StrFormat("rename %s", PathOf(from)));
  }
  return absl::OkStatus();
}

void StateDir::Remove(std::string_view name) const {
  if (ValidName(name)) unlinkat(fd_, std::string(name).c_str(), 0);
}

bool StateDir::Exists(std::string_view name) const {
  struct stat st;
  return ValidName(name) &&
         fstatat(fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

}  // namespace netfold::tools
