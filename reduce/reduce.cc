#include "reduce/reduce.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "hwy/targets.h"
#include "reduce/kernel_table.h"

namespace netfold::reduce {

using proto::DataType;
using proto::ReduceOp;

struct KernelFactory {
  // (type, op) must have passed CheckOpAllowed.
  static absl::StatusOr<Kernel> Make(DataType type, ReduceOp op,
                                     const internal::KernelEntry& entry,
                                     std::string_view target) {
    if (entry.reduce == nullptr || entry.fold == nullptr) {
      return absl::InternalError(absl::StrFormat("target %s has no kernel for %s %s", target,
                                                 proto::ReduceOpName(op),
                                                 proto::DataTypeName(type)));
    }
    return Kernel(type, op, proto::DataTypeSize(type), entry.reduce, entry.fold, target);
  }
};

namespace {

constexpr std::string_view kReferenceTarget = "reference";

struct TargetTable {
  std::string_view name;
  internal::KernelTable table;
};

// One kernel table per compiled target the CPU supports, best first. Built
// once (thread-safe static initialization) and never freed: Kernels point
// into it for the life of the process.
const std::vector<std::unique_ptr<TargetTable>>& TargetTables() {
  static const auto* const tables = [] {
    auto* result = new std::vector<std::unique_ptr<TargetTable>>();
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      auto entry = std::make_unique<TargetTable>();
      entry->name = hwy::TargetName(target);
      if (internal::AddIntegerKernels(target, &entry->table) &&
          internal::AddFloatKernels(target, &entry->table) &&
          internal::AddPairKernels(target, &entry->table)) {
        result->push_back(std::move(entry));
      }
    }
    return result;
  }();
  return *tables;
}

const internal::KernelTable& ReferenceTable() {
  static const auto* const table = [] {
    auto* result = new internal::KernelTable();
    internal::FillReferenceKernels(result);
    return result;
  }();
  return *table;
}

// The table Reduce, Fold and GetKernel use. Falls back to the reference if
// no SIMD table could be built (never expected: the SCALAR/EMU128 target is
// always compiled and supported).
const internal::KernelTable& ActiveTable() {
  const auto& tables = TargetTables();
  return tables.empty() ? ReferenceTable() : tables.front()->table;
}

bool PartiallyOverlap(const void* a, const void* b, size_t bytes) {
  if (a == b || bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

// The checks of Reduce and Fold (see reduce.h), for `out` and `inputs`.
absl::Status CheckCall(DataType type, ReduceOp op, const void* out,
                       std::span<const void* const> inputs, size_t count, bool is_fold) {
  NETFOLD_RETURN_IF_ERROR(proto::CheckOpAllowed(type, op));
  if (is_fold && inputs.empty()) {
    return absl::InvalidArgumentError("Fold needs at least one input");
  }
  if (count == 0) return absl::OkStatus();
  const size_t size = proto::DataTypeSize(type);
  if (count > std::numeric_limits<size_t>::max() / size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d elements of %s overflow the address space", count, proto::DataTypeName(type)));
  }
  const size_t bytes = count * size;
  const char* out_name = is_fold ? "out" : "dst";
  if (out == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is null (count %d)", out_name, count));
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    const std::string in_name = is_fold ? absl::StrFormat("inputs[%d]", j) : std::string("src");
    if (inputs[j] == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("%s is null (count %d)", in_name, count));
    }
    if (PartiallyOverlap(out, inputs[j], bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s and %s overlap without being the same buffer (%d bytes each)", in_name, out_name,
          bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status RunReduce(const internal::KernelTable& table, DataType type, ReduceOp op,
                       void* dst, const void* src, size_t count) {
  const void* const inputs[] = {src};
  NETFOLD_RETURN_IF_ERROR(CheckCall(type, op, dst, inputs, count, /*is_fold=*/false));
  if (count != 0) table.at(type, op).reduce(dst, src, count);
  return absl::OkStatus();
}

absl::Status RunFold(const internal::KernelTable& table, DataType type, ReduceOp op, void* out,
                     std::span<const void* const> inputs, size_t count) {
  NETFOLD_RETURN_IF_ERROR(CheckCall(type, op, out, inputs, count, /*is_fold=*/true));
  if (count != 0) table.at(type, op).fold(out, inputs.data(), inputs.size(), count);
  return absl::OkStatus();
}

}  // namespace

absl::Status Reduce(DataType type, ReduceOp op, void* dst, const void* src, size_t count) {
  return RunReduce(ActiveTable(), type, op, dst, src, count);
}

absl::Status Fold(DataType type, ReduceOp op, void* out, std::span<const void* const> inputs,
                  size_t count) {
  return RunFold(ActiveTable(), type, op, out, inputs, count);
}

absl::Status ReduceScalarReference(DataType type, ReduceOp op, void* dst, const void* src,
                                   size_t count) {
  return RunReduce(ReferenceTable(), type, op, dst, src, count);
}

absl::Status FoldScalarReference(DataType type, ReduceOp op, void* out,
                                 std::span<const void* const> inputs, size_t count) {
  return RunFold(ReferenceTable(), type, op, out, inputs, count);
}

std::vector<std::string_view> AvailableTargets() {
  std::vector<std::string_view> names;
  for (const auto& table : TargetTables()) names.push_back(table->name);
  return names;
}

std::string_view ActiveTarget() {
  const auto& tables = TargetTables();
  return tables.empty() ? kReferenceTarget : tables.front()->name;
}

absl::StatusOr<Kernel> GetKernel(DataType type, ReduceOp op) {
  return GetKernelForTarget(type, op, ActiveTarget());
}

absl::StatusOr<Kernel> GetKernelForTarget(DataType type, ReduceOp op, std::string_view target) {
  NETFOLD_RETURN_IF_ERROR(proto::CheckOpAllowed(type, op));
  if (target == kReferenceTarget) {
    return KernelFactory::Make(type, op, ReferenceTable().at(type, op), kReferenceTarget);
  }
  std::string known;
  for (const auto& table : TargetTables()) {
    if (table->name == target) {
      return KernelFactory::Make(type, op, table->table.at(type, op), table->name);
    }
    known += absl::StrFormat("%s%s", known.empty() ? "" : ", ", table->name);
  }
  return absl::NotFoundError(absl::StrFormat(
      "no reduction target '%s' on this CPU (available: %s, %s)", target, known, kReferenceTarget));
}

}  // namespace netfold::reduce
