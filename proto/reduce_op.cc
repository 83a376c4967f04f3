#include "proto/reduce_op.h"

#include <cctype>
#include <string>

#include "absl/strings/str_format.h"

namespace netfold::proto {
namespace {

constexpr std::string_view kOpNames[] = {
    "invalid", "sum", "prod", "min", "max", "band", "bor",
    "bxor",    "land", "lor", "lxor", "minloc", "maxloc",
};

}  // namespace

bool IsValidReduceOp(uint8_t code) {
  return code >= static_cast<uint8_t>(ReduceOp::kSum) &&
         code <= static_cast<uint8_t>(ReduceOp::kMaxloc);
}

std::string_view ReduceOpName(ReduceOp op) {
  uint8_t code = static_cast<uint8_t>(op);
  return IsValidReduceOp(code) ? kOpNames[code] : kOpNames[0];
}

absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name) {
  std::string lower;
  for (char c : name) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  std::string_view bare = lower;
  if (bare.starts_with("mpi_")) bare.remove_prefix(4);
  for (ReduceOp op : kAllReduceOps) {
    if (ReduceOpName(op) == bare) return op;
  }
  std::string accepted;
  for (ReduceOp op : kAllReduceOps) accepted += (accepted.empty() ? "" : ", ") + std::string(ReduceOpName(op));
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown reduction op '%s' (accepted: %s)", name, accepted));
}

absl::Status CheckOpAllowed(DataType type, ReduceOp op) {
  if (!IsValidDataType(static_cast<uint8_t>(type))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid data type code %d", static_cast<int>(type)));
  }
  if (!IsValidReduceOp(static_cast<uint8_t>(op))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid reduction op code %d", static_cast<int>(op)));
  }
  bool ok = false;
  std::string_view accepts;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      ok = IsIntegerType(type) || IsFloatingType(type);
      accepts = "integer and floating-point types";
      break;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
    case ReduceOp::kLand:
    case ReduceOp::kLor:
    case ReduceOp::kLxor:
      ok = IsIntegerType(type);
      accepts = "integer types";
      break;
    case ReduceOp::kMinloc:
    case ReduceOp::kMaxloc:
      ok = IsPairType(type);
      accepts = "the pair types float_int, double_int, long_int, 2int, short_int";
      break;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("reduction op %s is not defined on %s (MPI allows it on %s)",
                      ReduceOpName(op), DataTypeName(type), accepts));
}

}  // namespace netfold::proto
