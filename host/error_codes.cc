#include "host/error_codes.h"

#include <string>

#include "absl/strings/cord.h"

namespace netfold::host {
namespace {

constexpr char kPayloadUrl[] = "type.netfold/error_code";

}  // namespace

absl::Status WithErrorCode(absl::Status status, netfold_status_t code) {
  if (status.ok()) return status;
  status.SetPayload(kPayloadUrl, absl::Cord(std::to_string(static_cast<int>(code))));
  return status;
}

int ToErrorCode(const absl::Status& status) {
  if (status.ok()) return NETFOLD_SUCCESS;
  if (auto payload = status.GetPayload(kPayloadUrl)) {
    const std::string text(*payload);
    try {
      return std::stoi(text);
    } catch (...) {
      return NETFOLD_ERR_INTERNAL;
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return NETFOLD_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kUnimplemented:
      return NETFOLD_ERR_NOT_SUPPORTED;
    case absl::StatusCode::kResourceExhausted:
      return NETFOLD_ERR_NO_RESOURCES;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:
      return NETFOLD_ERR_UNAVAILABLE;
    case absl::StatusCode::kDeadlineExceeded:
      return NETFOLD_ERR_TIMEOUT;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kCancelled:
      return NETFOLD_ERR_ABORTED;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return NETFOLD_ERR_PERMISSION;
    case absl::StatusCode::kDataLoss:
      return NETFOLD_ERR_DATA_LOSS;
    default:
      return NETFOLD_ERR_INTERNAL;
  }
}

const char* ErrorCodeName(int code) {
  switch (code) {
    case NETFOLD_SUCCESS: return "success";
    case NETFOLD_ERR_INVALID_ARGUMENT: return "invalid argument";
    case NETFOLD_ERR_NOT_SUPPORTED: return "not supported";
    case NETFOLD_ERR_NO_RESOURCES: return "no resources in the fabric";
    case NETFOLD_ERR_UNAVAILABLE: return "fabric unavailable";
    case NETFOLD_ERR_TIMEOUT: return "timed out";
    case NETFOLD_ERR_MISMATCH: return "ranks disagree on the operation";
    case NETFOLD_ERR_ABORTED: return "group aborted";
    case NETFOLD_ERR_IN_PROGRESS: return "in progress";
    case NETFOLD_ERR_PERMISSION: return "permission denied";
    case NETFOLD_ERR_DATA_LOSS: return "data lost";
    case NETFOLD_ERR_OOB: return "out-of-band callback failed";
    case NETFOLD_ERR_INTERNAL: return "internal error";
    default: return "unknown error code";
  }
}

}  // namespace netfold::host
