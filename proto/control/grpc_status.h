// Statuses between gRPC and absl. Both use the canonical codes 0-16 with
// the same numbers; a code outside that range (a peer's newer code, a
// proto's int field) becomes Unknown rather than an undefined enum value.
//
//   if (grpc::Status s = stub->GetCounters(&c, req, &resp); !s.ok()) {
//     return control::FromGrpc(s, "switch leaf0: GetCounters");
//   }
//   return control::ToGrpc(status);  // in a service method
//
// Header-only: whoever includes it links gRPC already (netfold_control_proto_dep).
#ifndef NETFOLD_PROTO_CONTROL_GRPC_STATUS_H_
#define NETFOLD_PROTO_CONTROL_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace netfold::control {

// The absl code of canonical code number `code`; Unknown outside 0-16.
inline absl::StatusCode CanonicalCode(int code) {
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kUnknown;
  }
  return static_cast<absl::StatusCode>(code);
}

// `s` as an absl status with the same code; its message after "`context`: "
// when `context` is not empty. OK for OK.
inline absl::Status FromGrpc(const grpc::Status& s, std::string_view context = {}) {
  if (s.ok()) return absl::OkStatus();
  const absl::StatusCode code = CanonicalCode(static_cast<int>(s.error_code()));
  if (context.empty()) return absl::Status(code, s.error_message());
  return absl::Status(code, absl::StrFormat("%s: %s", context, s.error_message()));
}

// `s` as a gRPC status with the same code and message (absl's code() is
// already canonical: Unknown for anything else). OK for OK.
inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace netfold::control

#endif  // NETFOLD_PROTO_CONTROL_GRPC_STATUS_H_
