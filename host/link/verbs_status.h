// Error mapping of the verbs transport: work completions, errno values of
// verbs calls and asynchronous device events become absl::Status values
// whose canonical codes give the C API's error codes (host/error_codes.h,
// docs/error_handling.md), each with a message that says what happened in
// netfold's terms.
//
//   if (wc.status != IBV_WC_SUCCESS) fail(StatusFromCompletion(wc.status, wc.vendor_err, "request"));
//   if (ibv_modify_qp(...) != 0) return StatusFromErrno(errno, "moving the RC QP to RTR");
//
// Pure functions; thread-safe.
#ifndef NETFOLD_HOST_LINK_VERBS_STATUS_H_
#define NETFOLD_HOST_LINK_VERBS_STATUS_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace netfold::host {

// OK for IBV_WC_SUCCESS. Otherwise, with `what` naming the work request:
// - the switch stopped answering (RETRY_EXC_ERR, RNR_RETRY_EXC_ERR,
//   RESP_TIMEOUT_ERR): Unavailable (NETFOLD_ERR_UNAVAILABLE);
// - flushed because the QP had already failed (WR_FLUSH_ERR): Unavailable;
// - refused by the switch (REM_INV_REQ_ERR, REM_ACCESS_ERR, REM_OP_ERR,
//   REM_ABORT_ERR, INV_EECN_ERR, ...): Internal (NETFOLD_ERR_INTERNAL; a
//   protocol mismatch: MTU, PSN, P_Key);
// - a result longer than the receive buffer (LOC_LEN_ERR): DataLoss;
// - local protection/QP/memory errors: Internal.
absl::Status StatusFromCompletion(ibv_wc_status status, uint32_t vendor_err,
                                  std::string_view what);

// The status for a verbs or rdma_cm call that failed with `err` (errno):
// ENOMEM/ENOSPC -> ResourceExhausted, EINVAL -> InvalidArgument,
// ENODEV/ENOENT/ENXIO -> NotFound (no such device/port), EPERM/EACCES ->
// PermissionDenied, ETIMEDOUT -> DeadlineExceeded, EAGAIN/EBUSY ->
// Unavailable, ENOSYS/EOPNOTSUPP -> Unimplemented, others Internal.
absl::Status StatusFromErrno(int err, std::string_view what);

// What an asynchronous event (ibv_get_async_event) means for the link: OK
// for informational ones (PORT_ACTIVE, LID_CHANGE, GID_CHANGE, COMM_EST,
// SQ_DRAINED, ...), Unavailable for those after which the RC connection is
// gone (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, CQ_ERR, PORT_ERR,
// DEVICE_FATAL, ...).
absl::Status StatusFromAsyncEvent(ibv_event_type type);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_STATUS_H_
