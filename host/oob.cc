#include "host/oob.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
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

std::string EncodeOutcome(const absl::Status& s, const std::string& payload) {
  std::string out(8, '\0');
  const int32_t code = static_cast<int32_t>(s.code());
  const int32_t netfold_code = ToErrorCode(s);
  std::memcpy(out.data(), &code, 4);
  std::memcpy(out.data() + 4, &netfold_code, 4);
  out += s.ok() ? payload : std::string(s.message());
  return out;
}

absl::StatusOr<std::string> DecodeOutcome(const std::string& in) {
  if (in.size() < 8) return absl::InternalError("malformed out-of-band outcome");
  int32_t code, netfold_code;
  std::memcpy(&code, in.data(), 4);
  std::memcpy(&netfold_code, in.data() + 4, 4);
  if (code == 0) return in.substr(8);
  return WithErrorCode(absl::Status(static_cast<absl::StatusCode>(code), in.substr(8)),
                       static_cast<netfold_status_t>(netfold_code));
}

absl::Status AgreeOnStatus(Oob& oob, const absl::Status& mine) {
  const int32_t code = mine.ok() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(oob.size()));
  const absl::Status told = oob.Allgather(&code, all.data(), sizeof(code));
  if (!mine.ok()) {
    if (told.ok()) return mine;
    // The rank's own reason first: the broken OOB is the second thing
    // that went wrong here, not the cause.
    absl::Status both(mine.code(), absl::StrFormat("%s (and telling the other ranks failed: %s)",
                                                   mine.message(), told.message()));
    mine.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) { both.SetPayload(url, payload); });
    return both;
  }
  NETFOLD_RETURN_IF_ERROR(told);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != 0) {
      return WithErrorCode(absl::UnavailableError(absl::StrFormat(
                               "rank %d of the group failed to join (see its log)", r)),
                           NETFOLD_ERR_UNAVAILABLE);
    }
  }
  return absl::OkStatus();
}

}  // namespace netfold::host
