#include "base/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold {
namespace {

absl::StatusCode CodeForErrno(int e) {
  switch (e) {
    case EINVAL:
    case EDOM:
    case EBADF:
    case ENOTSOCK:
    case EFAULT:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    case ENOENT:
    case ENODEV:
    case ENXIO:
    case ESRCH:
      return absl::StatusCode::kNotFound;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ECONNREFUSED:
    case ECONNRESET:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
      return absl::StatusCode::kUnavailable;
    case ENOMEM:
    case ENOBUFS:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case ENOSYS:
    case EOPNOTSUPP:
    case EAFNOSUPPORT:
    case EPROTONOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    case ERANGE:
    case EOVERFLOW:
      return absl::StatusCode::kOutOfRange;
    case ECANCELED:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status ErrnoToStatus(int error_number, std::string_view what) {
  if (error_number == 0) return absl::OkStatus();
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not point into buf.
  const char* text = strerror_r(error_number, buf, sizeof(buf));
  return absl::Status(CodeForErrno(error_number),
                      absl::StrFormat("%s: %s (errno %d)", what, text, error_number));
}

}  // namespace netfold
