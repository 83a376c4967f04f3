// The shape of a reduction tree for the host-side tree algorithms: switches
// with ordered children, ranks as leaves. The same description as the
// fabric's (tests/integration/in_process_fabric.h TreeShape, the manager's
// group plan), so that a host algorithm run over the tree a group was planned
// on associates exactly as the aggregation nodes do: every switch folds its
// children in list order, recursively (docs/algorithms.md, "Tree order").
//
//   TreeSpec t{.children = {{1, 2}, {-1, -2, -3}, {-4}}};  // root; leaves hold ranks 0-2 and 3
//   NETFOLD_RETURN_IF_ERROR(t.Validate(/*num_ranks=*/4));
//   TreeSpec k = TreeSpec::KAry(/*num_ranks=*/10, /*degree=*/2);
//
// A plain value type; thread-compatible.
#ifndef NETFOLD_HOST_ALGORITHMS_TREE_SPEC_H_
#define NETFOLD_HOST_ALGORITHMS_TREE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace netfold::host::algorithms {

struct TreeSpec {
  // children[s] lists switch s's children in reduction order: another switch
  // (its index, >= 0) or a rank r, written -1 - r. Switch 0 is the root.
  std::vector<std::vector<int>> children;

  // A heap-shaped tree over the ranks themselves, for the tree algorithms
  // when no fabric tree is given: switch r (for each rank r that has heap
  // children) folds [rank r, subtree of rank degree*r+1, ..., of degree*r+degree]
  // in that order, so rank r's own value comes first at its node. degree >= 1;
  // num_ranks >= 1.
  static TreeSpec KAry(uint32_t num_ranks, uint32_t degree);
  // One switch with every rank as a child, in rank order.
  static TreeSpec Flat(uint32_t num_ranks);

  // OK if this is a tree rooted at switch 0 whose leaves are exactly the
  // ranks 0..num_ranks-1, each once, and every switch has a child;
  // InvalidArgument saying what is wrong otherwise.
  absl::Status Validate(uint32_t num_ranks) const;

  // Number of rank leaves.
  uint32_t num_hosts() const;
  int num_switches() const { return static_cast<int>(children.size()); }
  // "s0[s1[r0 r1 r2] s2[r3]]".
  std::string ToString() const;
};

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_TREE_SPEC_H_
