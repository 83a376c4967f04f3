#include "host/algorithms/selection.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace netfold::host::algorithms {

std::string_view AlgorithmPolicyName(AlgorithmPolicy policy) {
  switch (policy) {
    case AlgorithmPolicy::kAuto:
      return "auto";
    case AlgorithmPolicy::kInNetwork:
      return "innetwork";
    case AlgorithmPolicy::kRing:
      return "ring";
    case AlgorithmPolicy::kBidirRing:
      return "bidir";
    case AlgorithmPolicy::kTree:
      return "tree";
    case AlgorithmPolicy::kTreeScatter:
      return "treescatter";
    case AlgorithmPolicy::kTreeOrder:
      return "treeorder";
  }
  return "invalid";
}

absl::StatusOr<AlgorithmPolicy> ParseAlgorithmPolicy(std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  if (lower.empty() || lower == "auto") return AlgorithmPolicy::kAuto;
  if (lower == "treeorder" || lower == "tree_order" || lower == "tree-order" ||
      lower == "reproducible") {
    return AlgorithmPolicy::kTreeOrder;
  }
  absl::StatusOr<Algorithm> a = ParseAlgorithm(lower);
  if (!a.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NETFOLD_ALGORITHM=\"%s\" is not an allreduce policy (accepted: auto, innetwork, ring, "
        "bidir, tree, treescatter, treeorder)",
        text));
  }
  switch (*a) {
    case Algorithm::kInNetwork:
      return AlgorithmPolicy::kInNetwork;
    case Algorithm::kRing:
      return AlgorithmPolicy::kRing;
    case Algorithm::kBidirRing:
      return AlgorithmPolicy::kBidirRing;
    case Algorithm::kTree:
      return AlgorithmPolicy::kTree;
    case Algorithm::kTreeScatter:
      return AlgorithmPolicy::kTreeScatter;
  }
  return AlgorithmPolicy::kAuto;
}

absl::StatusOr<AlgorithmPolicy> AlgorithmPolicyFromEnvironment() {
  const char* v = std::getenv("NETFOLD_ALGORITHM");
  return ParseAlgorithmPolicy(v == nullptr ? "" : v);
}

size_t TreeMaxBytes(uint32_t num_ranks, const SelectionThresholds& t) {
  if (num_ranks <= 1) return SIZE_MAX;
  uint64_t log2p = 0;
  while ((uint64_t{2} << log2p) <= num_ranks) ++log2p;
  const uint64_t saved = 2 * (uint64_t{num_ranks} - 1) - 2 * log2p;
  if (saved != 0 && t.tree_bytes_per_saved_step > SIZE_MAX / saved) return SIZE_MAX;
  return static_cast<size_t>(saved * t.tree_bytes_per_saved_step);
}

absl::StatusOr<Selection> SelectAlgorithm(const SelectionInput& in,
                                          const SelectionThresholds& t) {
  Selection s;
  auto host_by_size = [&](const char* why) {
    const size_t tree_max = TreeMaxBytes(in.num_ranks, t);
    if (in.num_ranks <= 1 || in.bytes <= tree_max) {
      s.algorithm = Algorithm::kTree;
      s.reason = absl::StrFormat("%s; %d bytes <= %d for %d ranks: tree", why, in.bytes,
                                 tree_max, in.num_ranks);
    } else if (in.num_ranks >= 3 && in.bytes >= t.bidir_min_bytes) {
      s.algorithm = Algorithm::kBidirRing;
      s.reason = absl::StrFormat("%s; %d bytes >= %d: bidirectional ring", why, in.bytes,
                                 t.bidir_min_bytes);
    } else {
      s.algorithm = Algorithm::kRing;
      s.reason = absl::StrFormat("%s; %d bytes: ring", why, in.bytes);
    }
  };
  switch (in.policy) {
    case AlgorithmPolicy::kAuto:
      if (in.fabric_available) {
        s.algorithm = Algorithm::kInNetwork;
        s.reason = "auto: the fabric serves the group";
      } else {
        host_by_size("auto: no fabric for the group");
      }
      return s;
    case AlgorithmPolicy::kInNetwork:
      if (!in.fabric_available) {
        return absl::UnavailableError(
            "NETFOLD_ALGORITHM=innetwork, but the fabric cannot serve this group (no resources, "
            "a failed tree or a switch gone)");
      }
      s.algorithm = Algorithm::kInNetwork;
      s.reason = "forced: innetwork";
      return s;
    case AlgorithmPolicy::kRing:
      s.algorithm = Algorithm::kRing;
      s.reason = "forced: ring";
      return s;
    case AlgorithmPolicy::kBidirRing:
      s.algorithm = Algorithm::kBidirRing;
      s.reason = "forced: bidir";
      return s;
    case AlgorithmPolicy::kTree:
      s.algorithm = Algorithm::kTree;
      s.reason = "forced: tree";
      return s;
    case AlgorithmPolicy::kTreeScatter:
      s.algorithm = Algorithm::kTreeScatter;
      s.reason = "forced: treescatter";
      return s;
    case AlgorithmPolicy::kTreeOrder:
      if (in.fabric_available) {
        s.algorithm = Algorithm::kInNetwork;
        s.reason = "treeorder: the fabric serves the group";
        return s;
      }
      s.use_fabric_tree = in.fabric_tree_known;
      s.algorithm =
          in.bytes <= t.treeorder_tree_max_bytes ? Algorithm::kTree : Algorithm::kTreeScatter;
      s.reason = absl::StrFormat(
          "treeorder: no fabric; %s over %s (%d bytes)",
          s.algorithm == Algorithm::kTree ? "tree" : "treescatter",
          in.fabric_tree_known ? "the planned tree, bit-identical to in-network"
                               : "the k-ary tree (no planned tree known)",
          in.bytes);
      return s;
  }
  return absl::InvalidArgumentError("unknown algorithm policy");
}

}  // namespace netfold::host::algorithms
