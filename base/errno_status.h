// Turning errno values from C interfaces (sockets, files) into absl::Status.
//
//   if (bind(fd, ...) != 0) return ErrnoToStatus(errno, "bind 127.0.0.1:4791");
//
// Thread-safe (uses strerror_r).
#ifndef NETFOLD_BASE_ERRNO_STATUS_H_
#define NETFOLD_BASE_ERRNO_STATUS_H_

#include <string_view>

#include "absl/status/status.h"

namespace netfold {

// Returns a Status whose canonical code matches `error_number` (EINVAL ->
// InvalidArgument, ETIMEDOUT/EAGAIN -> DeadlineExceeded/Unavailable, ENOENT ->
// NotFound, EACCES/EPERM -> PermissionDenied, ...) and whose message is
// "<what>: <strerror> (errno N)". `error_number` 0 yields OkStatus().
absl::Status ErrnoToStatus(int error_number, std::string_view what);

}  // namespace netfold

#endif  // NETFOLD_BASE_ERRNO_STATUS_H_
