#include "host/link/verbs_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::host {

absl::Status StatusFromCompletion(ibv_wc_status status, uint32_t vendor_err,
                                  std::string_view what) {
  if (status == IBV_WC_SUCCESS) return absl::OkStatus();
  const std::string detail = absl::StrFormat("%s: %s (status %d, vendor error 0x%x)", what,
                                             ibv_wc_status_str(status), static_cast<int>(status),
                                             vendor_err);
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
      return absl::UnavailableError(absl::StrFormat(
                               "the leaf switch stopped acknowledging: %s", detail));
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return absl::UnavailableError(absl::StrFormat(
                               "the leaf switch stayed not ready to receive: %s", detail));
    case IBV_WC_WR_FLUSH_ERR:
      return absl::UnavailableError(absl::StrFormat(
                               "flushed, the connection had already failed: %s", detail));
    case IBV_WC_LOC_LEN_ERR:
      return absl::DataLossError(absl::StrFormat(
                               "a message longer than the receive buffer: %s", detail));
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
    case IBV_WC_INV_EECN_ERR:
    case IBV_WC_INV_EEC_STATE_ERR:
      return absl::InternalError(absl::StrFormat(
                               "the leaf switch refused the request (check path MTU, PSNs and "
                               "P_Key against docs/verbs.md): %s",
                               detail));
    default:
      return absl::InternalError(absl::StrFormat("local verbs error: %s", detail));
  }
}

absl::Status StatusFromErrno(int err, std::string_view what) {
  const std::string message = absl::StrFormat("%s: %s (errno %d)", what, std::strerror(err), err);
  switch (err) {
    case ENOMEM:
    case ENOSPC:
      return absl::ResourceExhaustedError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case ENODEV:
    case ENOENT:
    case ENXIO:
      return absl::NotFoundError(message);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(message);
    case EAGAIN:
    case EBUSY:
      return absl::UnavailableError(message);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status StatusFromAsyncEvent(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_CQ_ERR:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_WQ_FATAL:
      return absl::UnavailableError(absl::StrFormat(
                               "the RDMA device reported %s", ibv_event_type_str(type)));
    default:
      return absl::OkStatus();
  }
}

}  // namespace netfold::host
