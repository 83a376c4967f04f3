// Aggregation trees over a topology, and the trimmed subtree of a group.
//
//   std::vector<Tree> trees = PlanTrees(topo);         // one per top switch
//   absl::StatusOr<Subtree> sub = TrimSubtree(topo, trees[1], members);
//   // sub->nodes[0] is the group root: the lowest switch covering every member
//
// A tree is rooted at a switch with no up-link (a spine or core switch, or a
// lone leaf) and spans every switch reachable downward from it, each switch
// taking as parent the first switch (lowest index) of the tier above that
// reached it. A switch joins at most `capacity.trees` trees; past that it is
// left out of later trees (and its hosts cannot use them).
//
// A group's subtree ends at the lowest common ancestor of its members' leaf
// switches, so a group whose members all hang off one leaf is that leaf
// alone. Children of a subtree node are ordered: host ranks first (ascending
// rank), then child switches (ascending switch index) -- the fixed reduction
// order of docs/manager.md.
//
// Pure functions over immutable data; thread-safe.
#ifndef NETFOLD_MANAGER_TREE_PLANNER_H_
#define NETFOLD_MANAGER_TREE_PLANNER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "manager/topology.h"

namespace netfold::manager {

// At most this many trees are planned (ids 0..kMaxTrees-1): the aggregation
// header carries tree_id in 16 bits. Roots beyond it are left without a tree.
inline constexpr uint32_t kMaxTrees = 1u << 16;

struct Tree {
  uint32_t id = 0;
  int root = -1;
  // Indexed by switch index. parent is -1 at the root and for switches not
  // in the tree; depth is -1 for switches not in the tree.
  std::vector<int> parent;
  std::vector<int> depth;
  std::vector<std::vector<int>> children;  // ascending switch index
  std::vector<int> switches;               // the tree's switches, root first (BFS)

  bool Contains(int switch_index) const {
    return switch_index >= 0 && switch_index < static_cast<int>(depth.size()) &&
           depth[switch_index] >= 0;
  }
};

// Plans the trees of `topo`, ids 0, 1, ... in the order of their roots'
// indices. Every topology yields at least one tree.
std::vector<Tree> PlanTrees(const Topology& topo);

struct SubtreeNode {
  int switch_index = -1;
  int parent = -1;                   // switch index; -1 at the group root
  std::vector<uint32_t> host_ranks;  // members attached to this switch
  std::vector<int> child_switches;   // child switches in the subtree
  // Position of each child in the reduction order: host ranks, then switches.
  uint32_t num_children() const {
    return static_cast<uint32_t>(host_ranks.size() + child_switches.size());
  }
};

struct Subtree {
  uint32_t tree_id = 0;
  std::vector<SubtreeNode> nodes;  // the group root first, then BFS order
  int root() const { return nodes.empty() ? -1 : nodes.front().switch_index; }
  // The node of `switch_index`, or nullptr.
  const SubtreeNode* Find(int switch_index) const;
};

// A member of a group: its rank and the index of its leaf switch.
using MemberLeaf = std::pair<uint32_t, int>;

// The trimmed subtree of `tree` covering `members` (non-empty, distinct
// ranks). FailedPrecondition if a member's leaf is not in the tree.
absl::StatusOr<Subtree> TrimSubtree(const Topology& topo, const Tree& tree,
                                    const std::vector<MemberLeaf>& members);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TREE_PLANNER_H_
