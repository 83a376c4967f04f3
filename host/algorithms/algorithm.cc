#include "host/algorithms/algorithm.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace netfold::host::algorithms {

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kInNetwork:
      return "innetwork";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kBidirRing:
      return "bidir";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kTreeScatter:
      return "treescatter";
  }
  return "invalid";
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "innetwork" || lower == "in-network" || lower == "in_network") {
    return Algorithm::kInNetwork;
  }
  if (lower == "ring") return Algorithm::kRing;
  if (lower == "bidir" || lower == "bidirectional" || lower == "bidir_ring" ||
      lower == "bidir-ring") {
    return Algorithm::kBidirRing;
  }
  if (lower == "tree") return Algorithm::kTree;
  if (lower == "treescatter" || lower == "tree_scatter" || lower == "tree-scatter") {
    return Algorithm::kTreeScatter;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown allreduce algorithm \"%s\" (accepted: innetwork, ring, bidir, tree, treescatter)",
      name));
}

bool IsHostAlgorithm(Algorithm algorithm) {
  for (Algorithm a : kHostAlgorithms) {
    if (a == algorithm) return true;
  }
  return false;
}

bool IsTreeAlgorithm(Algorithm algorithm) {
  return algorithm == Algorithm::kTree || algorithm == Algorithm::kTreeScatter;
}

}  // namespace netfold::host::algorithms
