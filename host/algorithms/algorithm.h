// The allreduce algorithms of netfold and their names: in-network (the
// fabric, host/group_engine.h) and the host-side ones built in this folder
// (docs/algorithms.md).
//
//   absl::StatusOr<Algorithm> a = ParseAlgorithm("bidir");   // kBidirRing
//   std::string_view name = AlgorithmName(Algorithm::kTree); // "tree"
//
// The numeric values travel in the host algorithms' message header and never
// change. Pure, thread-safe functions.
#ifndef NETFOLD_HOST_ALGORITHMS_ALGORITHM_H_
#define NETFOLD_HOST_ALGORITHMS_ALGORITHM_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace netfold::host::algorithms {

enum class Algorithm : uint8_t {
  kInNetwork = 0,    // the fabric's aggregation tree (not run by this folder)
  kRing = 1,         // reduce-scatter + all-gather around one ring
  kBidirRing = 2,    // half the vector clockwise, half counter-clockwise
  kTree = 3,         // reduce up a tree, broadcast down
  kTreeScatter = 4,  // reduce-scatter + all-gather over a (possibly asymmetric) tree
};

// The host-side algorithms AllreduceEngine runs.
inline constexpr std::array<Algorithm, 4> kHostAlgorithms = {
    Algorithm::kRing, Algorithm::kBidirRing, Algorithm::kTree, Algorithm::kTreeScatter};

// "innetwork", "ring", "bidir", "tree", "treescatter"; "invalid" otherwise.
std::string_view AlgorithmName(Algorithm algorithm);

// The names above, any case, plus "in-network", "bidirectional", "bidir_ring",
// "tree_scatter". InvalidArgument lists the accepted names for anything else.
absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// True for the algorithms of kHostAlgorithms.
bool IsHostAlgorithm(Algorithm algorithm);
// True for the algorithms that follow a TreeSpec (kTree, kTreeScatter).
bool IsTreeAlgorithm(Algorithm algorithm);

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_ALGORITHM_H_
