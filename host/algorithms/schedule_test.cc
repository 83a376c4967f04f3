// The schedules of every algorithm, checked without a network: for many
// (ranks, count, fragment, tree), all ranks' schedules are executed
// symbolically together (values are expressions like "((r1.r2).r0)"), which
// proves that they match pairwise, never deadlock, and leave every rank with
// every element reduced in exactly the association order docs/algorithms.md
// specifies. Byte counts are checked against the cost model.
#include "host/algorithms/schedule.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace netfold::host::algorithms {
namespace {

using Expr = std::string;

Expr Leaf(uint32_t r) { return absl::StrFormat("r%d", r); }
Expr FoldExprs(const std::vector<Expr>& in) {
  Expr acc = in[0];
  for (size_t i = 1; i < in.size(); ++i) acc = "(" + acc + "." + in[i] + ")";
  return acc;
}

// docs/algorithms.md: where part i of len in `parts` parts starts.
uint64_t Start(uint64_t len, uint64_t parts, uint64_t i) {
  return i * (len / parts) + std::min(i, len % parts);
}

// The documented association orders, element by element.
void RingExpected(uint32_t p, uint64_t base, uint64_t len, int dir, std::vector<Expr>* out) {
  for (uint32_t i = 0; i < p; ++i) {
    std::vector<Expr> order;
    for (uint32_t k = 1; k <= p; ++k) {
      order.push_back(Leaf(dir > 0 ? (i + k) % p : (i + 2 * p - k) % p));
    }
    const Expr e = FoldExprs(order);
    for (uint64_t x = base + Start(len, p, i); x < base + Start(len, p, i + 1); ++x) (*out)[x] = e;
  }
}

Expr TreeExpr(const TreeSpec& t, int node) {
  if (node < 0) return Leaf(static_cast<uint32_t>(-1 - node));
  std::vector<Expr> in;
  for (int c : t.children[node]) in.push_back(TreeExpr(t, c));
  return FoldExprs(in);
}

std::vector<Expr> Expected(Algorithm a, uint32_t p, uint64_t n, const TreeSpec& tree) {
  std::vector<Expr> out(n);
  if (p == 1) {
    for (auto& e : out) e = Leaf(0);
    return out;
  }
  switch (a) {
    case Algorithm::kRing:
      RingExpected(p, 0, n, +1, &out);
      break;
    case Algorithm::kBidirRing:
      if (p <= 2) {
        RingExpected(p, 0, n, +1, &out);
      } else {
        RingExpected(p, 0, n - n / 2, +1, &out);
        RingExpected(p, n - n / 2, n / 2, -1, &out);
      }
      break;
    default:
      for (auto& e : out) e = TreeExpr(tree, 0);
      break;
  }
  return out;
}

struct Message {
  uint64_t offset, count;
  std::vector<Expr> payload;
};

// Runs all ranks' schedules together with unbounded queues, each rank as
// the engine does: actions of a lane in order when their inputs are at the
// heads of the peer queues; a send snapshots its range as soon as its
// ready_after action ran; sends to a peer go out in order.
void RunSymbolic(const std::vector<Schedule>& s, std::vector<std::vector<Expr>>* buffers) {
  const uint32_t p = static_cast<uint32_t>(s.size());
  std::map<std::pair<uint32_t, uint32_t>, std::deque<Message>> wire;  // (from, to)
  struct State {
    std::vector<std::vector<uint32_t>> lanes;
    std::vector<size_t> cursor;
    std::vector<std::optional<Message>> built;
    std::vector<std::vector<uint32_t>> to_peer;
    std::vector<size_t> next;
  };
  std::vector<State> st(p);
  auto build = [&](uint32_t r, uint32_t i) {
    const ScheduleSend& send = s[r].sends[i];
    Message m{send.offset, send.count, {}};
    for (uint64_t x = 0; x < send.count; ++x) m.payload.push_back((*buffers)[r][send.offset + x]);
    st[r].built[i] = std::move(m);
  };
  for (uint32_t r = 0; r < p; ++r) {
    st[r].lanes.resize(s[r].num_lanes);
    for (uint32_t a = 0; a < s[r].actions.size(); ++a) {
      st[r].lanes[s[r].actions[a].lane].push_back(a);
    }
    st[r].cursor.assign(s[r].num_lanes, 0);
    st[r].built.resize(s[r].sends.size());
    st[r].to_peer.resize(p);
    st[r].next.assign(p, 0);
    for (uint32_t i = 0; i < s[r].sends.size(); ++i) {
      st[r].to_peer[s[r].sends[i].peer].push_back(i);
      if (s[r].sends[i].ready_after == -1) build(r, i);
    }
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t r = 0; r < p; ++r) {
      State& me = st[r];
      for (uint32_t lane = 0; lane < me.lanes.size(); ++lane) {
        while (me.cursor[lane] < me.lanes[lane].size()) {
          const uint32_t ai = me.lanes[lane][me.cursor[lane]];
          const ScheduleAction& a = s[r].actions[ai];
          bool ready = true;
          for (int32_t in : s[r].InputsOf(a)) {
            if (in != kOwnInput && wire[{static_cast<uint32_t>(in), r}].empty()) ready = false;
          }
          if (!ready) break;
          std::vector<std::vector<Expr>> in_values;
          for (int32_t in : s[r].InputsOf(a)) {
            if (in == kOwnInput) {
              in_values.emplace_back((*buffers)[r].begin() + a.offset,
                                     (*buffers)[r].begin() + a.offset + a.count);
              continue;
            }
            auto& q = wire[{static_cast<uint32_t>(in), r}];
            ASSERT_EQ(q.front().offset, a.offset) << "rank " << r << " from " << in;
            ASSERT_EQ(q.front().count, a.count) << "rank " << r << " from " << in;
            in_values.push_back(std::move(q.front().payload));
            q.pop_front();
          }
          for (uint64_t x = 0; x < a.count; ++x) {
            std::vector<Expr> operands;
            for (const auto& v : in_values) operands.push_back(v[x]);
            (*buffers)[r][a.offset + x] = FoldExprs(operands);
          }
          ++me.cursor[lane];
          for (uint32_t i = 0; i < s[r].sends.size(); ++i) {
            if (s[r].sends[i].ready_after == static_cast<int64_t>(ai)) build(r, i);
          }
          progress = true;
        }
      }
      for (uint32_t q = 0; q < p; ++q) {
        while (me.next[q] < me.to_peer[q].size() && me.built[me.to_peer[q][me.next[q]]]) {
          wire[{r, q}].push_back(std::move(*me.built[me.to_peer[q][me.next[q]]]));
          ++me.next[q];
          progress = true;
        }
      }
    }
  }
  for (uint32_t r = 0; r < p; ++r) {
    for (uint32_t lane = 0; lane < st[r].lanes.size(); ++lane) {
      ASSERT_EQ(st[r].cursor[lane], st[r].lanes[lane].size())
          << "rank " << r << " lane " << lane << " is stuck (deadlock)";
    }
    for (uint32_t q = 0; q < p; ++q) ASSERT_EQ(st[r].next[q], st[r].to_peer[q].size());
  }
  for (const auto& [pair, q] : wire) {
    ASSERT_TRUE(q.empty()) << q.size() << " messages from " << pair.first << " to "
                           << pair.second << " never consumed";
  }
}

// Structural rules the engine relies on.
void CheckRules(const Schedule& s) {
  std::map<int32_t, uint32_t> lane_of_peer;
  for (const ScheduleAction& a : s.actions) {
    std::vector<int32_t> seen;
    for (int32_t in : s.InputsOf(a)) {
      if (in == kOwnInput) continue;
      ASSERT_NE(static_cast<uint32_t>(in), s.rank);
      ASSERT_EQ(std::count(seen.begin(), seen.end(), in), 0) << "peer twice in one action";
      seen.push_back(in);
      auto [it, inserted] = lane_of_peer.emplace(in, a.lane);
      ASSERT_EQ(it->second, a.lane) << "peer " << in << " consumed by two lanes";
    }
    ASSERT_LE(a.offset + a.count, s.count);
  }
  for (const ScheduleSend& send : s.sends) {
    ASSERT_NE(send.peer, s.rank);
    ASSERT_LT(send.peer, s.num_ranks);
    ASSERT_LT(send.ready_after, static_cast<int64_t>(s.actions.size()));
    ASSERT_LE(send.offset + send.count, s.count);
  }
}

struct Case {
  Algorithm algorithm;
  uint32_t p;
  uint64_t n;
  uint64_t fragment;
  TreeSpec tree;
  std::string name;
};

void RunCase(const Case& c) {
  SCOPED_TRACE(absl::StrFormat("%s p=%d n=%d fragment=%d tree=%s", AlgorithmName(c.algorithm),
                               c.p, c.n, c.fragment, c.tree.ToString()));
  std::vector<Schedule> schedules;
  for (uint32_t r = 0; r < c.p; ++r) {
    auto s = BuildSchedule({.algorithm = c.algorithm,
                            .rank = r,
                            .num_ranks = c.p,
                            .count = c.n,
                            .fragment_elements = c.fragment,
                            .tree = &c.tree});
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NO_FATAL_FAILURE(CheckRules(*s));
    schedules.push_back(std::move(*s));
  }
  std::vector<std::vector<Expr>> buffers(c.p);
  for (uint32_t r = 0; r < c.p; ++r) buffers[r].assign(c.n, Leaf(r));
  ASSERT_NO_FATAL_FAILURE(RunSymbolic(schedules, &buffers));
  const std::vector<Expr> want = Expected(c.algorithm, c.p, c.n, c.tree);
  for (uint32_t r = 0; r < c.p; ++r) {
    for (uint64_t x = 0; x < c.n; ++x) {
      ASSERT_EQ(buffers[r][x], want[x]) << "rank " << r << " element " << x;
    }
  }
  // Conservation: everything sent is consumed.
  uint64_t sent = 0, received = 0;
  for (const Schedule& s : schedules) {
    sent += s.ElementsSent();
    received += s.ElementsReceived();
  }
  EXPECT_EQ(sent, received);
}

// Deliberately lopsided trees, like a fabric with uneven leaves: random
// fan-outs (1 to 4, so chains of switches too), ranks at random leaf
// positions, hosts and switches mixed under one switch.
int RandomSubtree(TreeSpec* t, std::mt19937_64& g, const std::vector<int>& ranks, size_t lo,
                  size_t hi, int depth) {
  if (hi - lo == 1 && (depth > 0 && g() % 2 == 0)) return -1 - ranks[lo];
  const int s = t->num_switches();
  t->children.emplace_back();
  const size_t k = 1 + g() % std::min<size_t>(4, hi - lo);
  // k non-empty chunks of [lo, hi).
  std::vector<size_t> cuts = {lo, hi};
  while (cuts.size() < k + 1) {
    const size_t c = lo + 1 + g() % (hi - lo - 1);
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int child = RandomSubtree(t, g, ranks, cuts[i], cuts[i + 1], depth + 1);
    t->children[s].push_back(child);
  }
  return s;
}

TreeSpec RandomTree(uint32_t p, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int> ranks(p);
  for (uint32_t r = 0; r < p; ++r) ranks[r] = static_cast<int>(r);
  std::shuffle(ranks.begin(), ranks.end(), g);
  TreeSpec t;
  RandomSubtree(&t, g, ranks, 0, p, 0);
  return t;
}

// tests/integration/in_process_fabric.cc's ThreeLevel: root -> 2 -> 4 leaves
// with 3, 1, 2, 4 ranks.
TreeSpec ThreeLevel() {
  TreeSpec t;
  t.children = {{1, 2}, {3, 4}, {5, 6}, {}, {}, {}, {}};
  const int per_leaf[4] = {3, 1, 2, 4};
  int rank = 0;
  for (int leaf = 0; leaf < 4; ++leaf) {
    for (int h = 0; h < per_leaf[leaf]; ++h) t.children[3 + leaf].push_back(-1 - rank++);
  }
  return t;
}

TEST(PartStartTest, SplitsNearEqually) {
  EXPECT_EQ(PartStart(10, 3, 0), 0u);
  EXPECT_EQ(PartStart(10, 3, 1), 4u);
  EXPECT_EQ(PartStart(10, 3, 2), 7u);
  EXPECT_EQ(PartStart(10, 3, 3), 10u);
  EXPECT_EQ(PartStart(2, 5, 5), 2u);
  EXPECT_EQ(PartStart(2, 5, 3), 2u);
}

TEST(TreeSpecTest, KAryShape) {
  EXPECT_EQ(TreeSpec::KAry(1, 2).ToString(), "s0[r0]");
  EXPECT_EQ(TreeSpec::KAry(2, 2).ToString(), "s0[r0 r1]");
  EXPECT_EQ(TreeSpec::KAry(6, 2).ToString(), "s0[r0 s1[r1 r3 r4] s2[r2 r5]]");
  EXPECT_EQ(TreeSpec::KAry(7, 3).ToString(), "s0[r0 s1[r1 r4 r5 r6] r2 r3]");
  EXPECT_EQ(TreeSpec::Flat(3).ToString(), "s0[r0 r1 r2]");
  for (uint32_t p = 1; p <= 40; ++p) {
    for (uint32_t k = 1; k <= 4; ++k) EXPECT_TRUE(TreeSpec::KAry(p, k).Validate(p).ok()) << p;
  }
}

TEST(TreeSpecTest, ValidateSaysWhatIsWrong) {
  auto msg = [](const TreeSpec& t, uint32_t p) { return std::string(t.Validate(p).message()); };
  EXPECT_EQ(msg(TreeSpec{}, 1), "tree has no switch");
  EXPECT_EQ(msg(TreeSpec{{{-1, -1}}}, 1), "rank 0 appears twice in the tree");
  EXPECT_EQ(msg(TreeSpec{{{-1}}}, 2), "rank 1 is not in the tree");
  EXPECT_EQ(msg(TreeSpec{{{-1, -3}}}, 2), "tree switch 0 lists rank 2, but the group has 2 ranks");
  EXPECT_EQ(msg(TreeSpec{{{1}, {}}}, 0), "tree switch 1 has no child");
  EXPECT_EQ(msg(TreeSpec{{{-1}, {2, -2}, {1}}}, 2), "2 tree switches are not below the root");
  EXPECT_EQ(msg(TreeSpec{{{-1, 0}}}, 1), "tree switch 0 lists the root as a child");
  EXPECT_EQ(msg(TreeSpec{{{-1, 5}}}, 1), "tree switch 0 lists switch 5, which does not exist");
  EXPECT_TRUE(ThreeLevel().Validate(10).ok());
}

TEST(BuildScheduleTest, RejectsBadParameters) {
  EXPECT_FALSE(BuildSchedule({.rank = 2, .num_ranks = 2, .fragment_elements = 1}).ok());
  EXPECT_FALSE(BuildSchedule({.num_ranks = 0, .fragment_elements = 1}).ok());
  EXPECT_FALSE(BuildSchedule({.num_ranks = 2, .fragment_elements = 0}).ok());
  EXPECT_FALSE(
      BuildSchedule({.algorithm = Algorithm::kInNetwork, .num_ranks = 2, .fragment_elements = 1})
          .ok());
  const TreeSpec bad{{{-1}}};
  EXPECT_FALSE(BuildSchedule({.algorithm = Algorithm::kTree, .num_ranks = 2, .count = 4,
                              .fragment_elements = 1, .tree = &bad})
                   .ok());
}

TEST(ScheduleTest, EveryAlgorithmAssociatesAsDocumented) {
  int cases = 0;
  for (uint32_t p = 1; p <= 16; ++p) {
    std::vector<uint64_t> sizes = {0, 1, p - 1u, p + 1u, 3u * p + 2u, 61};
    for (Algorithm a : kHostAlgorithms) {
      std::vector<TreeSpec> trees = {TreeSpec::KAry(p, 2)};
      if (IsTreeAlgorithm(a)) {
        trees.push_back(TreeSpec::KAry(p, 3));
        trees.push_back(TreeSpec::Flat(p));
        trees.push_back(RandomTree(p, p * 17 + 1));
        trees.push_back(RandomTree(p, p * 17 + 2));
        if (p == 10) trees.push_back(ThreeLevel());
      }
      for (const TreeSpec& tree : trees) {
        ASSERT_TRUE(tree.Validate(p).ok()) << tree.ToString() << ": " << tree.Validate(p);
        for (uint64_t n : sizes) {
          for (uint64_t fragment : {uint64_t{1}, uint64_t{4}, uint64_t{1000}}) {
            RunCase({a, p, n, fragment, tree, ""});
            ++cases;
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(ScheduleTest, RingSendsTwoSegmentsShortOfTwiceTheVector) {
  // Rank r sends every segment but r in the reduce-scatter and every segment
  // but r+1 in the all-gather: 2n - |seg r| - |seg r+1| elements, 2(p-1)n/p
  // when p divides n.
  for (uint32_t p = 2; p <= 16; ++p) {
    for (uint64_t n : {uint64_t{1}, uint64_t{p} + 3, uint64_t{1000}, uint64_t{p} * 64}) {
      uint64_t total = 0;
      for (uint32_t r = 0; r < p; ++r) {
        auto s = *BuildSchedule({.algorithm = Algorithm::kRing, .rank = r, .num_ranks = p,
                                 .count = n, .fragment_elements = 7});
        auto seg = [&](uint32_t i) { return Start(n, p, i + 1) - Start(n, p, i); };
        EXPECT_EQ(s.ElementsSent(), 2 * n - seg(r) - seg((r + 1) % p)) << p << " " << n;
        // It receives every segment but r-1 (its first send), then every one but r.
        EXPECT_EQ(s.ElementsReceived(), 2 * n - seg((r + p - 1) % p) - seg(r)) << p << " " << n;
        if (n % p == 0) {
          EXPECT_EQ(s.ElementsSent(), 2 * (p - 1) * n / p);
        }
        total += s.ElementsSent();
      }
      EXPECT_EQ(total, 2 * uint64_t{p - 1} * n);
    }
  }
}

TEST(ScheduleTest, BidirectionalRingUsesBothNeighbours) {
  const uint32_t p = 8;
  const uint64_t n = 8 * 100;
  for (uint32_t r = 0; r < p; ++r) {
    auto s = *BuildSchedule({.algorithm = Algorithm::kBidirRing, .rank = r, .num_ranks = p,
                             .count = n, .fragment_elements = 16});
    EXPECT_EQ(s.ElementsSent(), 2 * (p - 1) * n / p);
    uint64_t right = 0, left = 0;
    for (const ScheduleSend& send : s.sends) {
      (send.peer == (r + 1) % p ? right : left) += send.count;
    }
    EXPECT_EQ(right, left);  // each half around its own direction
    EXPECT_EQ(s.num_lanes, 2u);
    EXPECT_EQ(s.Peers(), (std::vector<uint32_t>{std::min((r + 1) % p, (r + p - 1) % p),
                                                std::max((r + 1) % p, (r + p - 1) % p)}));
  }
}

TEST(ScheduleTest, TreeScatterOnASymmetricTreeIsBandwidthOptimal) {
  // Two leaves of four: each rank sends (p-1)n/p in each phase.
  TreeSpec t{{{1, 2}, {-1, -2, -3, -4}, {-5, -6, -7, -8}}};
  const uint64_t n = 8 * 64;
  for (uint32_t r = 0; r < 8; ++r) {
    auto s = *BuildSchedule({.algorithm = Algorithm::kTreeScatter, .rank = r, .num_ranks = 8,
                             .count = n, .fragment_elements = 1 << 20, .tree = &t});
    EXPECT_EQ(s.ElementsSent(), 2 * 7 * n / 8) << r;
    EXPECT_EQ(s.ElementsReceived(), 2 * 7 * n / 8) << r;
  }
}

TEST(ScheduleTest, TreeSendsTheVectorUpOnceAndDownPerChild) {
  // k-ary tree of 7: rank 0 folds [r0, s1, s2] and sends down to 1 and 2;
  // rank 1 folds [r1, r3, r4], sends up once and down to 3 and 4; leaves
  // send up once.
  const uint64_t n = 100;
  const uint64_t want_sent[7] = {2 * n, 3 * n, 3 * n, n, n, n, n};
  for (uint32_t r = 0; r < 7; ++r) {
    auto s = *BuildSchedule({.algorithm = Algorithm::kTree, .rank = r, .num_ranks = 7,
                             .count = n, .fragment_elements = 10});
    EXPECT_EQ(s.ElementsSent(), want_sent[r]) << r;
  }
}

}  // namespace
}  // namespace netfold::host::algorithms
