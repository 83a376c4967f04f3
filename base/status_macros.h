// Early-return helpers for absl::Status / absl::StatusOr, which Abseil
// 20220623 does not ship.
//
//   absl::Status Configure() {
//     NETFOLD_RETURN_IF_ERROR(OpenSocket());
//     NETFOLD_ASSIGN_OR_RETURN(int fd, Bind(addr));
//     ...
//   }
//
// Both macros evaluate their argument exactly once.
#ifndef NETFOLD_BASE_STATUS_MACROS_H_
#define NETFOLD_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define NETFOLD_STATUS_CONCAT_INNER_(a, b) a##b
#define NETFOLD_STATUS_CONCAT_(a, b) NETFOLD_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
// `expr` is an absl::Status or an absl::StatusOr<T>.
#define NETFOLD_RETURN_IF_ERROR(expr)                                      \
  do {                                                                     \
    if (auto netfold_status_ = ::netfold::internal::AsStatus((expr));      \
        !netfold_status_.ok()) {                                           \
      return netfold_status_;                                              \
    }                                                                      \
  } while (false)

// Declares/assigns `lhs` from the value of the StatusOr `rexpr`, or returns
// its status from the enclosing function.
#define NETFOLD_ASSIGN_OR_RETURN(lhs, rexpr)                               \
  NETFOLD_ASSIGN_OR_RETURN_IMPL_(                                          \
      NETFOLD_STATUS_CONCAT_(netfold_statusor_, __LINE__), lhs, rexpr)

#define NETFOLD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr)                    \
  auto tmp = (rexpr);                                                      \
  if (!tmp.ok()) return std::move(tmp).status();                           \
  lhs = std::move(tmp).value()

namespace netfold::internal {

inline absl::Status AsStatus(absl::Status s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace netfold::internal

#endif  // NETFOLD_BASE_STATUS_MACROS_H_
