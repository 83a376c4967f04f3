#include "auth/fabric_credential.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "auth/secrets.h"
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

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path) {
  // O_NOFOLLOW: a link planted where the file should be is refused rather
  // than read (ELOOP), whoever owns what it points to.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ELOOP) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "credential file %s is a symbolic link: name the file itself", path));
    }
    if (e == ENOENT) {
      return absl::NotFoundError(absl::StrFormat("credential file %s does not exist", path));
    }
    return ErrnoToStatus(e, absl::StrFormat("credential file %s", path));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("credential file %s", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("credential file %s is not a regular file", path));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "credential file %s belongs to uid %d, not to this user (uid %d): whoever owns it can "
        "change the secret",
        path, st.st_uid, geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "credential file %s has mode %04o: it is readable or writable by group or others, who "
        "could then act as any switch or operator of the fabric; make it private "
        "(chmod 600 %s) and, since others may have read it, make a new secret",
        path, st.st_mode & 07777, path));
  }
  std::string text(kMaxCredentialBytes + 2, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrFormat("credential file %s", path));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  const std::string secret(absl::StripAsciiWhitespace(text));
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("credential file %s is empty", path));
  }
  if (secret.size() > kMaxCredentialBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "credential file %s holds more than %d bytes", path, kMaxCredentialBytes));
  }
  for (char c : secret) {
    if (c < '!' || c > '~') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "credential file %s holds a character that is not printable ASCII (or a space "
          "inside the secret)",
          path));
    }
  }
  return secret;
}

absl::StatusOr<std::string> CreateCredentialFile(const std::string& path) {
  const std::string secret = HexString(RandomBytes(kCredentialBytes));
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
  const std::string text = secret + "\n";
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
  return secret;
}

std::string DefaultCredentialFile() {
  if (const char* f = std::getenv(kCredentialFileEnv); f != nullptr && *f != '\0') return f;
  std::string dir;
  if (const char* d = std::getenv("NETFOLD_STATE_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else {
    dir = absl::StrFormat("/tmp/netfold-%d", getuid());
  }
  const std::string path = dir + "/" + kCredentialFileName;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return path;  // ReadCredentialFile judges it
  return "";
}

}  // namespace netfold::auth
