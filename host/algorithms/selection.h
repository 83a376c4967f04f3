// Which allreduce algorithm an operation runs: in-network when the fabric
// can serve the group, otherwise a host algorithm chosen by size, or what
// the configuration forces (NETFOLD_ALGORITHM). docs/algorithms.md,
// "Selection", gives the thresholds and the measurement behind them.
//
//   NETFOLD_ASSIGN_OR_RETURN(AlgorithmPolicy policy, AlgorithmPolicyFromEnvironment());
//   NETFOLD_ASSIGN_OR_RETURN(Selection sel, SelectAlgorithm({
//       .policy = policy, .fabric_available = group_alive, .fabric_tree_known = true,
//       .bytes = count * DataTypeSize(dtype), .num_ranks = size}));
//   if (sel.algorithm == Algorithm::kInNetwork) ... GroupEngine ...
//   else engine->Start({.algorithm = sel.algorithm, ...,
//                       .tree = sel.use_fabric_tree ? &planned_tree : nullptr});
//
// Every rank must select with the same inputs (it does if they share the
// configuration and the fabric state the manager announced), or the ranks
// run different algorithms and the host engine reports InvalidArgument.
// Pure functions; thread-safe.
#ifndef NETFOLD_HOST_ALGORITHMS_SELECTION_H_
#define NETFOLD_HOST_ALGORITHMS_SELECTION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "host/algorithms/algorithm.h"

namespace netfold::host::algorithms {

// What the configuration asks for (NETFOLD_ALGORITHM).
enum class AlgorithmPolicy : uint8_t {
  kAuto,         // in-network if possible, else tree (small) / ring (large)
  kInNetwork,    // in-network only: an error when the fabric cannot serve the group
  kRing,         // always these host algorithms, even when the fabric could serve
  kBidirRing,
  kTree,
  kTreeScatter,
  kTreeOrder,    // reproducible: in-network, else the planned tree's order on the hosts
};

// "auto", "innetwork", "ring", "bidir", "tree", "treescatter", "treeorder".
std::string_view AlgorithmPolicyName(AlgorithmPolicy policy);
// The names above (any case; "" means auto) and the aliases ParseAlgorithm
// accepts; InvalidArgument lists the accepted names otherwise.
absl::StatusOr<AlgorithmPolicy> ParseAlgorithmPolicy(std::string_view text);
// ParseAlgorithmPolicy(getenv("NETFOLD_ALGORITHM")), auto when unset.
absl::StatusOr<AlgorithmPolicy> AlgorithmPolicyFromEnvironment();

// Size thresholds, from bench/algorithms (docs/performance.md, "host/algorithms").
struct SelectionThresholds {
  // auto: the tree while bytes <= this * (2(p-1) - 2 floor(log2 p)), the
  // number of sequential steps the (binary) tree saves over the ring: 16 KiB
  // at 4 ranks, 64 KiB at 8, 176 KiB at 16, never at 2 (both take two steps
  // and the ring sends half as much). Measured crossovers: between 4 and 64
  // KiB at 4 ranks, between 64 KiB and 1 MiB at 8.
  size_t tree_bytes_per_saved_step = 8 * 1024;
  // treeorder: the reduce + broadcast tree up to this, treescatter above
  // (both follow the planned tree, so the bits are the same).
  size_t treeorder_tree_max_bytes = 64 * 1024;
  // From this many bytes, with 3 or more ranks, the bidirectional ring
  // instead of the ring. Off by default (SIZE_MAX): its gain needs two free
  // link directions per neighbour (full-duplex NICs); on hosts where the
  // "links" are the same CPUs (loopback, shared cores) it measured no
  // consistent gain. Set it where bench/algorithms shows one.
  size_t bidir_min_bytes = SIZE_MAX;
};

// The largest vector the auto policy gives the tree for p ranks.
size_t TreeMaxBytes(uint32_t num_ranks, const SelectionThresholds& thresholds = {});

struct SelectionInput {
  AlgorithmPolicy policy = AlgorithmPolicy::kAuto;
  bool fabric_available = false;   // the group has live in-network resources
  bool fabric_tree_known = false;  // the tree the group was planned on is known (a TreeSpec)
  size_t bytes = 0;                // count * element size
  uint32_t num_ranks = 1;
};

struct Selection {
  Algorithm algorithm = Algorithm::kRing;
  // Pass the group's planned tree as AllreduceArgs::tree (tree-order mode).
  bool use_fabric_tree = false;
  std::string reason;  // one line for logs and `netfold status`
};

// The algorithm for one operation. Unavailable for the innetwork policy
// when the fabric cannot serve the group.
absl::StatusOr<Selection> SelectAlgorithm(const SelectionInput& input,
                                          const SelectionThresholds& thresholds = {});

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_SELECTION_H_
