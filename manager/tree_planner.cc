#include "manager/tree_planner.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_format.h"

namespace netfold::manager {

std::vector<Tree> PlanTrees(const Topology& topo) {
  const int n = topo.num_switches();
  std::vector<uint32_t> trees_used(n, 0);
  std::vector<Tree> trees;
  for (int root = 0; root < n; ++root) {
    if (!topo.switch_at(root).up.empty()) continue;
    if (trees.size() >= kMaxTrees) break;  // tree_id is 16 bits on the wire
    if (trees_used[root] >= topo.switch_at(root).capacity.trees) continue;
    Tree tree;
    tree.id = static_cast<uint32_t>(trees.size());
    tree.root = root;
    tree.parent.assign(n, -1);
    tree.depth.assign(n, -1);
    tree.children.assign(n, {});
    tree.depth[root] = 0;
    std::deque<int> queue = {root};
    while (!queue.empty()) {
      int u = queue.front();
      queue.pop_front();
      tree.switches.push_back(u);
      ++trees_used[u];
      for (int v : topo.switch_at(u).down) {
        if (tree.depth[v] >= 0) continue;
        if (trees_used[v] >= topo.switch_at(v).capacity.trees) continue;
        tree.depth[v] = tree.depth[u] + 1;
        tree.parent[v] = u;
        tree.children[u].push_back(v);
        queue.push_back(v);
      }
    }
    for (auto& c : tree.children) std::sort(c.begin(), c.end());
    trees.push_back(std::move(tree));
  }
  return trees;
}

const SubtreeNode* Subtree::Find(int switch_index) const {
  for (const SubtreeNode& node : nodes) {
    if (node.switch_index == switch_index) return &node;
  }
  return nullptr;
}

absl::StatusOr<Subtree> TrimSubtree(const Topology& topo, const Tree& tree,
                                    const std::vector<MemberLeaf>& members) {
  if (members.empty()) return absl::InvalidArgumentError("a group needs at least one member");
  const int n = topo.num_switches();
  // How many distinct member leaves sit at or below each switch.
  std::vector<int> covered(n, 0);
  std::vector<bool> is_leaf(n, false);
  int num_leaves = 0;
  for (const auto& [rank, leaf] : members) {
    if (!tree.Contains(leaf)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("switch %s (leaf of rank %d) is not in tree %d (root %s)",
                          leaf >= 0 && leaf < n ? topo.switch_at(leaf).name : "?", rank, tree.id,
                          topo.switch_at(tree.root).name));
    }
    if (is_leaf[leaf]) continue;
    is_leaf[leaf] = true;
    ++num_leaves;
    for (int s = leaf; s >= 0; s = tree.parent[s]) ++covered[s];
  }
  // The lowest common ancestor: the deepest switch covering every leaf.
  int lca = -1;
  for (int s = 0; s < n; ++s) {
    if (covered[s] == num_leaves && (lca < 0 || tree.depth[s] > tree.depth[lca])) lca = s;
  }
  Subtree sub;
  sub.tree_id = tree.id;
  std::deque<int> queue = {lca};
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    SubtreeNode node;
    node.switch_index = u;
    node.parent = u == lca ? -1 : tree.parent[u];
    for (const auto& [rank, leaf] : members) {
      if (leaf == u) node.host_ranks.push_back(rank);
    }
    std::sort(node.host_ranks.begin(), node.host_ranks.end());
    for (int c : tree.children[u]) {
      if (covered[c] > 0) {
        node.child_switches.push_back(c);
        queue.push_back(c);
      }
    }
    sub.nodes.push_back(std::move(node));
  }
  return sub;
}

}  // namespace netfold::manager
