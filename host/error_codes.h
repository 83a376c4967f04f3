// Mapping between absl::Status inside the library and the negative
// netfold_status_t codes of the C API (docs/error_handling.md).
//
//   return WithErrorCode(absl::InvalidArgumentError("ranks disagree"), NETFOLD_ERR_MISMATCH);
//   int rc = ToErrorCode(status);   // NETFOLD_ERR_MISMATCH
//
// A status may carry an explicit code (a payload); otherwise the canonical
// code decides. Thread-safe, pure functions.
#ifndef NETFOLD_HOST_ERROR_CODES_H_
#define NETFOLD_HOST_ERROR_CODES_H_

#include "absl/status/status.h"
#include "netfold/netfold.h"

namespace netfold::host {

// Attaches `code` to `status` (which must not be OK) and returns it.
absl::Status WithErrorCode(absl::Status status, netfold_status_t code);

// The C API code for `status`: NETFOLD_SUCCESS for OK, the attached code if
// any, else by canonical code: InvalidArgument/OutOfRange -> INVALID_ARGUMENT,
// Unimplemented -> NOT_SUPPORTED, ResourceExhausted -> NO_RESOURCES,
// Unavailable/NotFound -> UNAVAILABLE, DeadlineExceeded -> TIMEOUT,
// Aborted/FailedPrecondition/Cancelled -> ABORTED, PermissionDenied/
// Unauthenticated -> PERMISSION, DataLoss -> DATA_LOSS, others -> INTERNAL.
int ToErrorCode(const absl::Status& status);

// netfold_strerror's text for a code.
const char* ErrorCodeName(int code);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_ERROR_CODES_H_
