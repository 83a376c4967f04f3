#include "host/algorithms/schedule.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace netfold::host::algorithms {

uint64_t PartStart(uint64_t len, uint64_t parts, uint64_t i) {
  if (parts == 0) return 0;
  return i * (len / parts) + std::min(i, len % parts);
}

uint64_t Schedule::ElementsSent() const {
  uint64_t n = 0;
  for (const ScheduleSend& s : sends) n += s.count;
  return n;
}

uint64_t Schedule::ElementsReceived() const {
  uint64_t n = 0;
  for (const ScheduleAction& a : actions) {
    for (int32_t in : InputsOf(a)) n += in == kOwnInput ? 0 : a.count;
  }
  return n;
}

std::vector<uint32_t> Schedule::Peers() const {
  std::vector<uint32_t> peers;
  for (const ScheduleSend& s : sends) peers.push_back(s.peer);
  for (int32_t in : inputs) {
    if (in != kOwnInput) peers.push_back(static_cast<uint32_t>(in));
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

namespace {

struct Range {
  uint64_t lo = 0;
  uint64_t len = 0;
};

Range Part(Range r, uint64_t parts, uint64_t i) {
  const uint64_t a = PartStart(r.len, parts, i);
  return {r.lo + a, PartStart(r.len, parts, i + 1) - a};
}

// Appends sends and actions in program order and derives each send's
// ready_after: the last action before it (in program order) that wrote an
// element it carries.
class Builder {
 public:
  Builder(Schedule* s, uint64_t n, uint64_t fragment) : s_(s), n_(n), fragment_(fragment) {
    writer_[0] = -1;
  }

  // Calls fn(Range) for each fragment of r (none for an empty range).
  template <class F>
  void ForEachFragment(Range r, F fn) const {
    for (uint64_t off = 0; off < r.len; off += fragment_) {
      fn(Range{r.lo + off, std::min(fragment_, r.len - off)});
    }
  }

  void Send(uint32_t peer, Range r) {
    int64_t ready = last_action_;  // an empty message (barrier) follows everything before it
    if (r.len > 0) ready = LastWriter(r);
    s_->sends.push_back({.peer = peer, .offset = r.lo, .count = r.len, .ready_after = ready});
  }

  // inputs: kOwnInput or peer ranks, in fold order. [kOwnInput] alone is a no-op.
  void Act(uint32_t lane, Range r, const std::vector<int32_t>& inputs) {
    if (inputs.size() == 1 && inputs[0] == kOwnInput) return;
    const int64_t index = static_cast<int64_t>(s_->actions.size());
    s_->actions.push_back({.offset = r.lo,
                           .count = r.len,
                           .lane = lane,
                           .first_input = static_cast<uint32_t>(s_->inputs.size()),
                           .num_inputs = static_cast<uint32_t>(inputs.size())});
    s_->inputs.insert(s_->inputs.end(), inputs.begin(), inputs.end());
    s_->num_lanes = std::max(s_->num_lanes, lane + 1);
    Assign(r, index);
    last_action_ = index;
  }

 private:
  void Split(uint64_t x) {
    if (x >= n_) return;
    auto it = writer_.upper_bound(x);
    --it;
    if (it->first != x) writer_.emplace_hint(std::next(it), x, it->second);
  }
  void Assign(Range r, int64_t w) {
    if (r.len == 0) return;
    Split(r.lo);
    Split(r.lo + r.len);
    writer_.erase(writer_.lower_bound(r.lo), writer_.lower_bound(r.lo + r.len));
    writer_[r.lo] = w;
  }
  int64_t LastWriter(Range r) const {
    auto it = writer_.upper_bound(r.lo);
    --it;
    int64_t w = -1;
    for (; it != writer_.end() && it->first < r.lo + r.len; ++it) w = std::max(w, it->second);
    return w;
  }

  Schedule* s_;
  uint64_t n_;
  uint64_t fragment_;
  std::map<uint64_t, int64_t> writer_;  // piecewise: element -> last writing action
  int64_t last_action_ = -1;
};

uint32_t Mod(int64_t x, uint32_t p) {
  const int64_t m = x % static_cast<int64_t>(p);
  return static_cast<uint32_t>(m < 0 ? m + p : m);
}

// Ring reduce-scatter + all-gather of [base.lo, base.lo + base.len) in
// direction dir (+1: rank r sends to r+1; -1: to r-1). Segment i of the range
// ends fully reduced at rank i.
void BuildRing(Builder& b, uint32_t r, uint32_t p, Range base, int dir, uint32_t lane) {
  if (p < 2 || base.len == 0) return;
  auto seg = [&](int64_t i) { return Part(base, p, Mod(i, p)); };
  const uint32_t right = Mod(int64_t{r} + dir, p);
  const int32_t left = static_cast<int32_t>(Mod(int64_t{r} - dir, p));
  const int64_t rr = r;
  // Reduce-scatter. Step k sends segment r - dir(k+1) and folds segment
  // r - dir(k+2) arriving from the left as (received op own); the fold of
  // step k is what step k+1 sends, and the last one (segment r) is what
  // the all-gather sends first.
  b.ForEachFragment(seg(rr - dir), [&](Range f) { b.Send(right, f); });
  for (uint32_t k = 0; k + 1 < p; ++k) {
    b.ForEachFragment(seg(rr - dir * (int64_t{k} + 2)), [&](Range f) {
      b.Act(lane, f, {left, kOwnInput});
      b.Send(right, f);
    });
  }
  // All-gather. Step k copies segment r - dir(k+1) from the left and passes
  // it on, except in the last step.
  for (uint32_t k = 0; k + 1 < p; ++k) {
    b.ForEachFragment(seg(rr - dir * (int64_t{k} + 1)), [&](Range f) {
      b.Act(lane, f, {left});
      if (k + 2 < p) b.Send(right, f);
    });
  }
}

// Derived facts about a validated TreeSpec.
struct TreeLayout {
  const TreeSpec* spec = nullptr;
  std::vector<int> switch_parent;         // -1 for the root
  std::vector<uint32_t> leftmost;         // per switch: the first rank below it
  std::vector<int> host_parent;           // per rank: its switch
  std::vector<std::vector<int>> host_path;  // per rank: switches from the root down to its parent

  explicit TreeLayout(const TreeSpec& t, uint32_t p) : spec(&t) {
    const int ns = t.num_switches();
    switch_parent.assign(ns, -1);
    host_parent.assign(p, -1);
    for (int s = 0; s < ns; ++s) {
      for (int c : t.children[s]) {
        if (c >= 0) {
          switch_parent[c] = s;
        } else {
          host_parent[-1 - c] = s;
        }
      }
    }
    leftmost.assign(ns, 0);
    for (int s = 0; s < ns; ++s) {
      int node = s;
      while (node >= 0) node = t.children[node][0];
      leftmost[s] = static_cast<uint32_t>(-1 - node);
    }
    host_path.resize(p);
    for (uint32_t r = 0; r < p; ++r) {
      for (int s = host_parent[r]; s >= 0; s = switch_parent[s]) host_path[r].push_back(s);
      std::reverse(host_path[r].begin(), host_path[r].end());
    }
  }

  // The rank that stands for `node` (a switch, or -1 - rank) in the reduce +
  // broadcast tree: its leftmost rank.
  uint32_t Emulator(int node) const {
    return node < 0 ? static_cast<uint32_t>(-1 - node) : leftmost[node];
  }
  // The switches rank h emulates, bottom-up: its parent if h is the parent's
  // first child, then that switch's parent if it is a first child, and so on.
  std::vector<int> Chain(uint32_t h) const {
    std::vector<int> chain;
    int prev = -1 - static_cast<int>(h);
    for (int s = host_parent[h]; s >= 0 && spec->children[s][0] == prev; s = switch_parent[s]) {
      chain.push_back(s);
      prev = s;
    }
    return chain;
  }
  // Index of `node` in its parent switch's children.
  static size_t IndexIn(const std::vector<int>& children, int node) {
    return static_cast<size_t>(std::find(children.begin(), children.end(), node) -
                               children.begin());
  }
};

// Reduce up the tree, broadcast down; every switch is played by its leftmost
// rank, which folds its children in order into its own buffer (its first
// child's value is already there), so the association is the tree's.
void BuildTree(Builder& b, const TreeLayout& L, uint32_t h, uint64_t n) {
  const TreeSpec& t = *L.spec;
  const std::vector<int> chain = L.Chain(h);
  const int top = chain.empty() ? -1 - static_cast<int>(h) : chain.back();
  const int parent = top < 0 ? L.host_parent[h] : L.switch_parent[top];
  const bool root = parent < 0;
  const int32_t up = root ? 0 : static_cast<int32_t>(L.Emulator(parent));
  std::vector<Range> fragments;
  if (n == 0) {
    fragments.push_back({0, 0});  // a barrier: one empty message per edge
  } else {
    b.ForEachFragment({0, n}, [&](Range f) { fragments.push_back(f); });
  }
  for (Range f : fragments) {
    for (int s : chain) {
      std::vector<int32_t> inputs;
      for (size_t i = 0; i < t.children[s].size(); ++i) {
        inputs.push_back(i == 0 ? kOwnInput
                                : static_cast<int32_t>(L.Emulator(t.children[s][i])));
      }
      b.Act(0, f, inputs);
    }
    if (!root) b.Send(static_cast<uint32_t>(up), f);
  }
  for (Range f : fragments) {
    if (!root) b.Act(0, f, {up});
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      for (size_t i = 1; i < t.children[*it].size(); ++i) {
        b.Send(L.Emulator(t.children[*it][i]), f);
      }
    }
  }
}

struct Piece {
  uint32_t host = 0;
  Range range;
};

// How the ranks below `node` split r among themselves: each switch cuts its
// range into as many near-equal parts as it has children, in child order.
void Descend(const TreeSpec& t, int node, Range r, std::vector<Piece>* out) {
  if (node < 0) {
    out->push_back({static_cast<uint32_t>(-1 - node), r});
    return;
  }
  const auto& ch = t.children[node];
  for (size_t j = 0; j < ch.size(); ++j) Descend(t, ch[j], Part(r, ch.size(), j), out);
}

// The blocks of level `upto` on a path: [0, n) cut by the degree of each
// switch path[0..upto), recursively.
void Blocks(const TreeSpec& t, const std::vector<int>& path, size_t level, size_t upto, Range r,
            std::vector<Range>* out) {
  if (level == upto) {
    out->push_back(r);
    return;
  }
  const size_t d = t.children[path[level]].size();
  for (size_t j = 0; j < d; ++j) Blocks(t, path, level + 1, upto, Part(r, d, j), out);
}

struct Cell {
  Range range;
  std::vector<uint32_t> owners;  // per child of the switch: the rank holding the cell
};

// The common refinement of how each child of `node` splits r.
std::vector<Cell> Cells(const TreeSpec& t, int node, Range r) {
  const auto& ch = t.children[node];
  std::vector<std::vector<Piece>> pieces(ch.size());
  std::vector<uint64_t> cuts = {r.lo, r.lo + r.len};
  for (size_t a = 0; a < ch.size(); ++a) {
    Descend(t, ch[a], r, &pieces[a]);
    for (const Piece& piece : pieces[a]) cuts.push_back(piece.range.lo);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Cell> cells;
  std::vector<size_t> at(ch.size(), 0);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const uint64_t lo = cuts[i];
    Cell cell{.range = {lo, cuts[i + 1] - lo}};
    for (size_t a = 0; a < ch.size(); ++a) {
      while (pieces[a][at[a]].range.lo + pieces[a][at[a]].range.len <= lo) ++at[a];
      cell.owners.push_back(pieces[a][at[a]].host);
    }
    cells.push_back(std::move(cell));
  }
  return cells;
}

// Reduce-scatter then all-gather over the tree (docs/algorithms.md,
// "treescatter"): level by level from the leaves, the ranks below each
// child of a switch send the child's partial of every cell to the cell's
// owner, which folds the children in order; then the same exchanges in
// reverse, top-down, copying final values.
void BuildTreeScatter(Builder& b, const TreeLayout& L, uint32_t h, uint64_t n) {
  const TreeSpec& t = *L.spec;
  const std::vector<int>& path = L.host_path[h];
  struct Level {
    size_t a = 0;  // index of h's branch among the switch's children
    std::vector<std::pair<size_t, std::vector<Cell>>> parts;  // (child j, cells of part j)
  };
  std::vector<Level> levels(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const int node = path[i];
    const auto& ch = t.children[node];
    const int below = i + 1 < path.size() ? path[i + 1] : -1 - static_cast<int>(h);
    levels[i].a = TreeLayout::IndexIn(ch, below);
    if (ch.size() < 2) continue;
    std::vector<Range> blocks;
    Blocks(t, path, 0, i, {0, n}, &blocks);
    for (Range block : blocks) {
      for (size_t j = 0; j < ch.size(); ++j) {
        Range part = Part(block, ch.size(), j);
        if (part.len == 0) continue;
        levels[i].parts.emplace_back(j, Cells(t, node, part));
      }
    }
  }
  // Reduce-scatter, bottom-up.
  for (size_t i = path.size(); i-- > 0;) {
    const Level& level = levels[i];
    for (const auto& [j, cells] : level.parts) {
      for (const Cell& cell : cells) {
        if (cell.owners[level.a] != h) continue;
        if (j == level.a) {
          std::vector<int32_t> inputs;
          for (size_t x = 0; x < cell.owners.size(); ++x) {
            inputs.push_back(x == level.a ? kOwnInput : static_cast<int32_t>(cell.owners[x]));
          }
          b.ForEachFragment(cell.range, [&](Range f) { b.Act(0, f, inputs); });
        } else {
          const uint32_t to = cell.owners[j];
          b.ForEachFragment(cell.range, [&](Range f) { b.Send(to, f); });
        }
      }
    }
  }
  // All-gather, top-down.
  for (size_t i = 0; i < path.size(); ++i) {
    const Level& level = levels[i];
    for (const auto& [j, cells] : level.parts) {
      for (const Cell& cell : cells) {
        if (cell.owners[level.a] != h) continue;
        if (j == level.a) {
          b.ForEachFragment(cell.range, [&](Range f) {
            for (size_t x = 0; x < cell.owners.size(); ++x) {
              if (x != level.a) b.Send(cell.owners[x], f);
            }
          });
        } else {
          const int32_t from = static_cast<int32_t>(cell.owners[j]);
          b.ForEachFragment(cell.range, [&](Range f) { b.Act(0, f, {from}); });
        }
      }
    }
  }
}

}  // namespace

absl::StatusOr<Schedule> BuildSchedule(const ScheduleParams& params) {
  if (params.num_ranks == 0) return absl::InvalidArgumentError("a schedule needs ranks");
  if (params.rank >= params.num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d out of range (%d ranks)", params.rank, params.num_ranks));
  }
  if (params.fragment_elements == 0) {
    return absl::InvalidArgumentError("fragment size must be at least one element");
  }
  if (!IsHostAlgorithm(params.algorithm)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not a host-side algorithm", AlgorithmName(params.algorithm)));
  }
  Schedule s;
  s.algorithm = params.algorithm;
  s.rank = params.rank;
  s.num_ranks = params.num_ranks;
  s.count = params.count;
  const uint32_t p = params.num_ranks;
  TreeSpec kary;
  const TreeSpec* tree = params.tree;
  if (tree == nullptr || (!IsTreeAlgorithm(params.algorithm) && params.count > 0)) {
    kary = TreeSpec::KAry(p, std::max<uint32_t>(params.tree_degree, 1));
    tree = &kary;
  }
  NETFOLD_RETURN_IF_ERROR(tree->Validate(p));
  if (p == 1) return s;
  Builder b(&s, params.count, params.fragment_elements);
  const TreeLayout layout(*tree, p);
  if (params.count == 0) {
    BuildTree(b, layout, params.rank, 0);
    return s;
  }
  const Range all{0, params.count};
  switch (params.algorithm) {
    case Algorithm::kRing:
      BuildRing(b, params.rank, p, all, +1, 0);
      break;
    case Algorithm::kBidirRing:
      if (p <= 2) {
        // Two ranks: the ring already uses both directions of the one link.
        BuildRing(b, params.rank, p, all, +1, 0);
      } else {
        const uint64_t first = params.count - params.count / 2;
        BuildRing(b, params.rank, p, {0, first}, +1, 0);
        BuildRing(b, params.rank, p, {first, params.count / 2}, -1, 1);
      }
      break;
    case Algorithm::kTree:
      BuildTree(b, layout, params.rank, params.count);
      break;
    case Algorithm::kTreeScatter:
      BuildTreeScatter(b, layout, params.rank, params.count);
      break;
    case Algorithm::kInNetwork:
      break;
  }
  return s;
}

}  // namespace netfold::host::algorithms
