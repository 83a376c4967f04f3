#include "host/oob.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "host/error_codes.h"

namespace netfold::host {

absl::Status Oob::BcastString(std::string* s, int root) {
  uint64_t len = s->size();
  NETFOLD_RETURN_IF_ERROR(Bcast(&len, sizeof(len), root));
  if (len > (64u << 20)) {
    return WithErrorCode(absl::InternalError("out-of-band message too long"), NETFOLD_ERR_OOB);
  }
  s->resize(len);
  if (len == 0) return absl::OkStatus();
  return Bcast(s->data(), len, root);
}

absl::Status CallbackOob::Check(const netfold_oob_t& cb) {
  if (cb.allgather == nullptr || cb.bcast == nullptr || cb.barrier == nullptr) {
    return absl::InvalidArgumentError(
        "the out-of-band callbacks allgather, bcast and barrier must all be set");
  }
  return absl::OkStatus();
}

absl::Status CallbackOob::Allgather(const void* send, void* recv, size_t bytes) {
  const int rc = cb_.allgather(cb_.ctx, send, recv, bytes);
  if (rc != 0) {
    return WithErrorCode(absl::UnavailableError(absl::StrFormat(
                             "the out-of-band allgather callback failed (%d)", rc)),
                         NETFOLD_ERR_OOB);
  }
  return absl::OkStatus();
}

absl::Status CallbackOob::Bcast(void* buf, size_t bytes, int root) {
  const int rc = cb_.bcast(cb_.ctx, buf, bytes, root);
  if (rc != 0) {
    return WithErrorCode(absl::UnavailableError(absl::StrFormat(
                             "the out-of-band bcast callback failed (%d)", rc)),
                         NETFOLD_ERR_OOB);
  }
  return absl::OkStatus();
}

absl::Status CallbackOob::Barrier() {
  const int rc = cb_.barrier(cb_.ctx);
  if (rc != 0) {
    return WithErrorCode(absl::UnavailableError(absl::StrFormat(
                             "the out-of-band barrier callback failed (%d)", rc)),
                         NETFOLD_ERR_OOB);
  }
  return absl::OkStatus();
}

}  // namespace netfold::host
