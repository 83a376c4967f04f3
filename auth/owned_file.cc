#include "auth/owned_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"

namespace netfold::auth {
namespace {

// Closes a file descriptor on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadOwnedFile(const std::string& path, const OwnedFileRules& rules) {
  // O_NOFOLLOW: a link planted where the file should be is refused rather
  // than read (ELOOP), whoever owns what it points to. O_NONBLOCK: a FIFO
  // put there does not hang the open (it is refused below).
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ELOOP) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s %s is a symbolic link: name the file itself", rules.what, path));
    }
    if (e == ENOENT) {
      return absl::NotFoundError(absl::StrFormat("%s %s does not exist", rules.what, path));
    }
    return ErrnoToStatus(e, absl::StrFormat("%s %s", rules.what, path));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("%s %s", rules.what, path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s %s is not a regular file", rules.what, path));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s belongs to uid %d, not to this user (uid %d): whoever owns it can change it",
        rules.what, path, st.st_uid, geteuid()));
  }
  const mode_t mode = st.st_mode & 07777;
  if (rules.secret && (mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s has mode %04o: it is readable or writable by group or others, who could then %s; "
        "make it private (chmod 600 %s) and, since others may have read it, %s",
        rules.what, path, mode, rules.exposure, path, rules.renew));
  }
  if (!rules.secret && (mode & 022) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s has mode %04o: it is writable by group or others, who could then %s; "
        "chmod go-w %s and check its contents",
        rules.what, path, mode, rules.exposure, path));
  }
  std::string text(rules.max_bytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrFormat("%s %s", rules.what, path));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > rules.max_bytes) {
    return absl::OutOfRangeError(absl::StrFormat("%s %s holds more than %d bytes", rules.what,
                                                 path, rules.max_bytes));
  }
  text.resize(got);
  return text;
}

absl::Status WriteOwnedFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());  // a leftover (or a planted link) is never opened
  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) return ErrnoToStatus(errno, absl::StrFormat("cannot create %s", tmp));
  // The umask cannot widen 0600, but make the mode exact whatever it is.
  if (fchmod(fd.get(), 0600) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return ErrnoToStatus(e, absl::StrFormat("chmod %s", tmp));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      unlink(tmp.c_str());
      return ErrnoToStatus(e, absl::StrFormat("cannot write %s", tmp));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return ErrnoToStatus(e, absl::StrFormat("cannot write %s", path));
  }
  return absl::OkStatus();
}

}  // namespace netfold::auth
