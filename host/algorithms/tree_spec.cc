#include "host/algorithms/tree_spec.h"

#include "absl/strings/str_format.h"

namespace netfold::host::algorithms {

TreeSpec TreeSpec::KAry(uint32_t num_ranks, uint32_t degree) {
  TreeSpec t;
  if (num_ranks == 0) return t;
  if (degree == 0) degree = 1;
  // Ranks with heap children are a prefix 0..m-1; switch s stands for rank s.
  auto has_children = [&](uint64_t r) { return r * degree + 1 < num_ranks; };
  uint32_t m = 0;
  while (m < num_ranks && has_children(m)) ++m;
  if (m == 0) m = 1;  // a single rank: one switch over it
  t.children.resize(m);
  for (uint32_t s = 0; s < m; ++s) {
    t.children[s].push_back(-1 - static_cast<int>(s));
    for (uint64_t c = uint64_t{s} * degree + 1; c <= uint64_t{s} * degree + degree; ++c) {
      if (c >= num_ranks) break;
      t.children[s].push_back(c < m ? static_cast<int>(c) : -1 - static_cast<int>(c));
    }
  }
  return t;
}

TreeSpec TreeSpec::Flat(uint32_t num_ranks) {
  TreeSpec t;
  t.children.resize(1);
  for (uint32_t r = 0; r < num_ranks; ++r) t.children[0].push_back(-1 - static_cast<int>(r));
  return t;
}

absl::Status TreeSpec::Validate(uint32_t num_ranks) const {
  const int num_sw = num_switches();
  if (num_sw == 0) return absl::InvalidArgumentError("tree has no switch");
  std::vector<int> switch_parent(num_sw, -1);
  std::vector<int> rank_seen(num_ranks, 0);
  for (int s = 0; s < num_sw; ++s) {
    if (children[s].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("tree switch %d has no child", s));
    }
    for (int c : children[s]) {
      if (c >= 0) {
        if (c >= num_sw) {
          return absl::InvalidArgumentError(
              absl::StrFormat("tree switch %d lists switch %d, which does not exist", s, c));
        }
        if (c == 0) {
          return absl::InvalidArgumentError(
              absl::StrFormat("tree switch %d lists the root as a child", s));
        }
        if (switch_parent[c] != -1) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "tree switch %d has two parents (%d and %d)", c, switch_parent[c], s));
        }
        switch_parent[c] = s;
      } else {
        const int64_t r = -1 - static_cast<int64_t>(c);
        if (r >= num_ranks) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "tree switch %d lists rank %d, but the group has %d ranks", s, r, num_ranks));
        }
        if (rank_seen[r]++) {
          return absl::InvalidArgumentError(
              absl::StrFormat("rank %d appears twice in the tree", r));
        }
      }
    }
  }
  for (uint32_t r = 0; r < num_ranks; ++r) {
    if (!rank_seen[r]) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is not in the tree", r));
    }
  }
  // Every switch must hang off the root (no detached cycles).
  std::vector<int> stack = {0};
  std::vector<bool> reached(num_sw, false);
  reached[0] = true;
  int num_reached = 1;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int c : children[s]) {
      if (c >= 0 && !reached[c]) {
        reached[c] = true;
        ++num_reached;
        stack.push_back(c);
      }
    }
  }
  if (num_reached != num_sw) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d tree switches are not below the root", num_sw - num_reached));
  }
  return absl::OkStatus();
}

uint32_t TreeSpec::num_hosts() const {
  uint32_t n = 0;
  for (const auto& c : children) {
    for (int x : c) n += x < 0;
  }
  return n;
}

namespace {

void Append(const TreeSpec& t, int node, int depth, std::string* out) {
  if (node < 0) {
    absl::StrAppendFormat(out, "r%d", -1 - node);
    return;
  }
  absl::StrAppendFormat(out, "s%d", node);
  if (node >= t.num_switches() || depth > t.num_switches()) {
    out->append("?");
    return;
  }
  out->append("[");
  for (size_t i = 0; i < t.children[node].size(); ++i) {
    if (i) out->append(" ");
    Append(t, t.children[node][i], depth + 1, out);
  }
  out->append("]");
}

}  // namespace

std::string TreeSpec::ToString() const {
  if (children.empty()) return "(empty)";
  std::string out;
  Append(*this, 0, 0, &out);
  return out;
}

}  // namespace netfold::host::algorithms
