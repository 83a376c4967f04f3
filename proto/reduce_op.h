// Reduction operations carried in aggregation messages, their wire codes and
// names, and which (data type, op) pairs are allowed.
//
//   absl::StatusOr<ReduceOp> op = ParseReduceOp("max");
//   if (absl::Status s = CheckOpAllowed(DataType::kFp32, ReduceOp::kBand); !s.ok()) ...
//
// Semantics are MPI's (see docs/reduction.md). Pure, thread-safe functions.
#ifndef NETFOLD_PROTO_REDUCE_OP_H_
#define NETFOLD_PROTO_REDUCE_OP_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/data_type.h"

namespace netfold::proto {

enum class ReduceOp : uint8_t {
  kSum = 1,
  kProd = 2,
  kMin = 3,
  kMax = 4,
  kBand = 5,
  kBor = 6,
  kBxor = 7,
  kLand = 8,
  kLor = 9,
  kLxor = 10,
  kMinloc = 11,
  kMaxloc = 12,
};

inline constexpr std::array<ReduceOp, 12> kAllReduceOps = {
    ReduceOp::kSum,  ReduceOp::kProd, ReduceOp::kMin,  ReduceOp::kMax,
    ReduceOp::kBand, ReduceOp::kBor,  ReduceOp::kBxor, ReduceOp::kLand,
    ReduceOp::kLor,  ReduceOp::kLxor, ReduceOp::kMinloc, ReduceOp::kMaxloc,
};

bool IsValidReduceOp(uint8_t code);

// "sum", "prod", ..., "maxloc"; "invalid" for a value that is not an op.
std::string_view ReduceOpName(ReduceOp op);

// Accepts the names above and MPI's ("MPI_SUM", "mpi_maxloc"), any case.
absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name);

// MPI's rules (MPI 4.0, section 6.9.2):
//   sum, prod, min, max      integer and floating types
//   band, bor, bxor          integer types
//   land, lor, lxor          integer types (C integers as logicals)
//   minloc, maxloc           pair types only
// Returns OK, or InvalidArgument naming the pair and what the op accepts.
absl::Status CheckOpAllowed(DataType type, ReduceOp op);
inline bool IsOpAllowed(DataType type, ReduceOp op) { return CheckOpAllowed(type, op).ok(); }

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_REDUCE_OP_H_
