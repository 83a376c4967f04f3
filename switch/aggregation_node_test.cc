// Aggregation nodes wired into 1-, 2- and 3-level trees with simulated hosts
// and no transport: per-link FIFO delivery in a seeded random interleaving,
// multicast loss repaired over RC. Every result must equal the reference
// computed independently in tree order (scalar reference fold, same
// association as the tree), bit for bit, on every rank. One node fed
// messages by hand (validation, drops, repairs, aborts) is in
// aggregation_node_validation_test.cc.
#include "switch/aggregation_node.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "reduce/reduce.h"

namespace netfold::sw {
namespace {

using proto::AggregationHeader;
using proto::AggregationMessageType;
using proto::AggregationStatus;
using proto::CollectiveType;
using proto::DataType;
using proto::DeliveryMode;
using proto::ReduceOp;

using Bytes = std::vector<uint8_t>;

// A tree shape: each switch lists its children, which are switches (>= 0,
// an index into the list) or hosts (-1 - rank).
struct Shape {
  std::vector<std::vector<int>> children;  // [0] is the root
};

Shape OneLevel(int hosts) {
  Shape s;
  s.children.resize(1);
  for (int r = 0; r < hosts; ++r) s.children[0].push_back(-1 - r);
  return s;
}

// Root with `fanout` switches, each with `per_leaf` hosts.
Shape TwoLevel(int fanout, int per_leaf) {
  Shape s;
  s.children.resize(1 + fanout);
  int rank = 0;
  for (int i = 0; i < fanout; ++i) {
    s.children[0].push_back(1 + i);
    for (int h = 0; h < per_leaf; ++h) s.children[1 + i].push_back(-1 - rank++);
  }
  return s;
}

// Root -> 2 -> 2 leaves each; hosts spread unevenly (asymmetric on purpose).
Shape ThreeLevel() {
  Shape s;
  s.children = {{1, 2}, {3, 4}, {5, 6}, {}, {}, {}, {}};
  const int per_leaf[4] = {3, 1, 2, 4};
  int rank = 0;
  for (int leaf = 0; leaf < 4; ++leaf) {
    for (int h = 0; h < per_leaf[leaf]; ++h) s.children[3 + leaf].push_back(-1 - rank++);
  }
  return s;
}

int NumHosts(const Shape& s) {
  int n = 0;
  for (const auto& c : s.children) {
    for (int x : c) n += x < 0;
  }
  return n;
}

class Fabric;

// A node's outputs go into the fabric's link queues.
class LinkOutput : public NodeOutput {
 public:
  LinkOutput(Fabric* fabric, int node) : fabric_(fabric), node_(node) {}
  void SendToParent(std::span<const uint8_t> message) override;
  void SendToChild(size_t child, std::span<const uint8_t> message) override;
  void Multicast(std::span<const uint8_t> message) override;

 private:
  Fabric* fabric_;
  int node_;
};

struct Operation {
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = DataType::kInt32;
  ReduceOp op = ReduceOp::kSum;
  DeliveryMode delivery = DeliveryMode::kMulticast;
  uint32_t count = 0;
  uint32_t root = 0;
  std::vector<Bytes> inputs;  // per rank
};

class Fabric {
 public:
  // A FIFO link: messages to a node from child `child` (or from its parent
  // when child == -1), or to a host.
  struct Link {
    int to_node = -1;   // >= 0: a node
    int child = -1;     // at to_node: the child index, or -1 from the parent
    int to_host = -1;   // >= 0: a host rank (from its leaf)
    std::deque<Bytes> queue;
  };

  Fabric(const Shape& shape, uint32_t k, uint32_t p, uint64_t seed, double multicast_loss)
      : shape_(shape), k_(k), p_(p), rng_(seed), multicast_loss_(multicast_loss) {
    const int n = static_cast<int>(shape.children.size());
    parent_.assign(n, {-1, -1});
    host_leaf_.assign(NumHosts(shape), {-1, -1});
    for (int s = 0; s < n; ++s) {
      for (size_t c = 0; c < shape.children[s].size(); ++c) {
        const int x = shape.children[s][c];
        if (x >= 0) parent_[x] = {s, static_cast<int>(c)};
        else host_leaf_[-1 - x] = {s, static_cast<int>(c)};
      }
    }
    for (int s = 0; s < n; ++s) {
      outputs_.push_back(std::make_unique<LinkOutput>(this, s));
      AggregationNodeConfig config;
      config.tree_id = 3;
      config.group_id = 77;
      config.epoch = 5;
      config.num_slots = k;
      config.slot_bytes = p;
      config.has_parent = parent_[s].first >= 0;
      for (int x : shape.children[s]) config.children.push_back({Ranks(x)});
      auto node = AggregationNode::Create(config, outputs_.back().get(), clock_);
      EXPECT_TRUE(node.ok()) << node.status();
      nodes_.push_back(std::move(*node));
    }
    hosts_.resize(host_leaf_.size());
  }

  std::vector<uint32_t> Ranks(int x) const {
    if (x < 0) return {static_cast<uint32_t>(-1 - x)};
    std::vector<uint32_t> out;
    for (int c : shape_.children[x]) {
      auto sub = Ranks(c);
      out.insert(out.end(), sub.begin(), sub.end());
    }
    return out;
  }

  Link& LinkTo(int node, int child) {
    for (Link& l : links_) {
      if (l.to_node == node && l.child == child) return l;
    }
    links_.push_back({node, child, -1, {}});
    return links_.back();
  }
  Link& LinkToHost(int rank) {
    for (Link& l : links_) {
      if (l.to_host == rank) return l;
    }
    links_.push_back({-1, -1, rank, {}});
    return links_.back();
  }

  void FromNodeToParent(int node, std::span<const uint8_t> m) {
    LinkTo(parent_[node].first, parent_[node].second).queue.emplace_back(m.begin(), m.end());
  }
  void FromNodeToChild(int node, size_t child, std::span<const uint8_t> m) {
    const int x = shape_.children[node][child];
    if (x >= 0) LinkTo(x, -1).queue.emplace_back(m.begin(), m.end());
    else LinkToHost(-1 - x).queue.emplace_back(m.begin(), m.end());
  }
  void Multicast(std::span<const uint8_t> m) {
    std::uniform_real_distribution<double> u(0, 1);
    ++multicasts_;
    for (size_t r = 0; r < hosts_.size(); ++r) {
      if (u(rng_) < multicast_loss_) {
        ++multicast_lost_;
        continue;
      }
      Receive(static_cast<int>(r), m);
    }
  }

  // --- Hosts ------------------------------------------------------------
  struct Host {
    std::map<uint64_t, Bytes> results;  // seq -> message (header + data)
    uint64_t next_seq = 0;
    uint64_t low = 0;  // lowest seq not yet received
  };

  void Receive(int rank, std::span<const uint8_t> m) {
    AggregationHeader h;
    std::span<const uint8_t> elements;
    ASSERT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
    if (h.type == AggregationMessageType::kAbort) {
      aborts_.push_back({rank, h});
      return;
    }
    ASSERT_EQ(h.type, AggregationMessageType::kResult);
    if (h.delivery == DeliveryMode::kRootData && !h.has_data && h.status == AggregationStatus::kOk &&
        static_cast<uint32_t>(rank) == h.root_rank) {
      ++root_headers_;  // the root waits for its data (as host/group_engine.cc does)
      return;
    }
    Host& host = hosts_[rank];
    if (host.results.contains(h.seq)) {
      ++duplicate_results_;  // multicast and a repair both arrived: fine
      return;
    }
    host.results[h.seq] = Bytes(m.begin(), m.end());
  }

  void Post(int rank, const AggregationHeader& h, std::span<const uint8_t> data) {
    Bytes m(proto::kAggregationHeaderSize + data.size());
    auto n = proto::EncodeAggregationMessage(h, data, m);
    ASSERT_TRUE(n.ok()) << n.status();
    LinkTo(host_leaf_[rank].first, host_leaf_[rank].second).queue.push_back(std::move(m));
  }

  AggregationHeader RequestHeader(const Operation& op, uint64_t seq, int rank) const {
    AggregationHeader h;
    h.type = AggregationMessageType::kRequest;
    h.collective = op.collective;
    h.dtype = op.dtype;
    h.op = op.op;
    h.delivery = op.delivery;
    h.tree_id = 3;
    h.group_id = 77;
    h.epoch = 5;
    h.root_rank = op.root;
    h.count = op.count;
    h.seq = seq;
    h.has_data = op.count > 0 && (op.collective == CollectiveType::kAllreduce ||
                                  op.collective == CollectiveType::kReduce ||
                                  (op.collective == CollectiveType::kBcast &&
                                   static_cast<uint32_t>(rank) == op.root));
    if (op.collective == CollectiveType::kBarrier) {
      h.dtype = proto::kNoDataType;
      h.op = proto::kNoReduceOp;
    }
    if (op.collective == CollectiveType::kBcast) h.op = proto::kNoReduceOp;
    return h;
  }

  // Delivers one message from a random non-empty link; false if none.
  bool DeliverOne() {
    std::vector<Link*> busy;
    for (Link& l : links_) {
      if (!l.queue.empty()) busy.push_back(&l);
    }
    if (busy.empty()) return false;
    Link& l = *busy[std::uniform_int_distribution<size_t>(0, busy.size() - 1)(rng_)];
    Bytes m = std::move(l.queue.front());
    l.queue.pop_front();
    if (l.to_host >= 0) {
      Receive(l.to_host, m);
      return true;
    }
    AggregationHeader h;
    std::span<const uint8_t> elements;
    EXPECT_EQ(proto::ParseAggregationMessage(m, &h, &elements), proto::AggregationParseResult::kOk);
    if (l.child < 0) {
      nodes_[l.to_node]->OnParentMessage(h, elements);
    } else {
      nodes_[l.to_node]->OnChildMessage(static_cast<size_t>(l.child), h, elements);
    }
    return true;
  }

  void DeliverAll() {
    while (DeliverOne()) {
    }
  }

  // Runs `ops` through the fabric with every host keeping up to K in flight,
  // repairing lost multicast results. Returns false if it got stuck.
  bool Run(const std::vector<Operation>& ops) {
    const size_t hosts = hosts_.size();
    for (Host& h : hosts_) {
      h.results.clear();
      h.next_seq = 0;
      h.low = 0;
    }
    size_t stuck_rounds = 0, repair_rounds = 0;
    while (true) {
      bool all_done = true;
      for (size_t r = 0; r < hosts; ++r) {
        Host& host = hosts_[r];
        // The window is [low, low + K).
        while (host.results.contains(host.low)) ++host.low;
        while (host.next_seq < ops.size() && host.next_seq < host.low + k_) {
          const Operation& op = ops[host.next_seq];
          AggregationHeader h = RequestHeader(op, host.next_seq, static_cast<int>(r));
          std::span<const uint8_t> data;
          if (h.has_data) data = op.inputs[r];
          // A bcast rank without the data: one request for the run of
          // alike operations after it (as host/group_engine.cc does), once
          // the window has room for the whole run.
          size_t run = 1;
          if (op.collective == CollectiveType::kBcast && !h.has_data) {
            while (run < max_run_ && host.next_seq + run < ops.size() &&
                   RequestHeader(ops[host.next_seq + run], host.next_seq + run,
                                 static_cast<int>(r)) ==
                       [&] {
                         AggregationHeader alike = h;
                         alike.seq = host.next_seq + run;
                         return alike;
                       }()) {
              ++run;
            }
            if (host.next_seq + run > host.low + k_) break;
            h.repeat = static_cast<uint32_t>(run - 1);
          }
          Post(static_cast<int>(r), h, data);
          ++requests_posted_;
          host.next_seq += run;
        }
        if (host.results.size() < ops.size()) all_done = false;
      }
      if (all_done) return true;
      const bool moved = DeliverOne();
      if (moved) {
        stuck_rounds = 0;
        continue;
      }
      // Nothing in flight: hosts ask again for what they missed (a bounded
      // number of times: a fabric that never answers must not spin here).
      if (++stuck_rounds > 3 || ++repair_rounds > 10000) return false;
      for (size_t r = 0; r < hosts; ++r) {
        Host& host = hosts_[r];
        for (uint64_t s = host.low; s < host.next_seq; ++s) {
          if (host.results.contains(s)) continue;
          AggregationHeader h = RequestHeader(ops[s], s, static_cast<int>(r));
          h.type = AggregationMessageType::kRepairRequest;
          h.has_data = false;
          Post(static_cast<int>(r), h, {});
          ++repairs_;
        }
      }
    }
  }

  // The reference result of `op` at switch `node`: its children folded in
  // order with the scalar reference, child switches first reduced the same way.
  Bytes Reference(const Operation& op, int node) const {
    const size_t bytes = op.count * proto::DataTypeSize(op.dtype);
    std::vector<Bytes> parts;
    for (int x : shape_.children[node]) {
      parts.push_back(x < 0 ? op.inputs[-1 - x] : Reference(op, x));
    }
    std::vector<const void*> ptrs;
    for (const Bytes& b : parts) ptrs.push_back(b.data());
    Bytes out(bytes);
    EXPECT_TRUE(reduce::FoldScalarReference(op.dtype, op.op, out.data(), ptrs, op.count).ok());
    return out;
  }

  FakeClock clock_;
  Shape shape_;
  uint32_t k_, p_;
  std::mt19937_64 rng_;
  double multicast_loss_;
  std::vector<std::pair<int, int>> parent_;     // node -> (parent, child index)
  std::vector<std::pair<int, int>> host_leaf_;  // rank -> (leaf, child index)
  std::vector<std::unique_ptr<LinkOutput>> outputs_;
  std::vector<std::unique_ptr<AggregationNode>> nodes_;
  std::deque<Link> links_;
  std::vector<Host> hosts_;
  std::vector<std::pair<int, AggregationHeader>> aborts_;
  uint64_t multicasts_ = 0, multicast_lost_ = 0, repairs_ = 0, duplicate_results_ = 0;
  size_t max_run_ = 1;  // the most operations one bcast request stands for
  uint64_t requests_posted_ = 0;
  uint64_t root_headers_ = 0;  // root_data headers a root received (and ignored)
};

void LinkOutput::SendToParent(std::span<const uint8_t> m) { fabric_->FromNodeToParent(node_, m); }
void LinkOutput::SendToChild(size_t child, std::span<const uint8_t> m) {
  fabric_->FromNodeToChild(node_, child, m);
}
void LinkOutput::Multicast(std::span<const uint8_t> m) { fabric_->Multicast(m); }

// Random inputs, with the edge values of the type mixed in.
Bytes RandomElements(DataType type, uint32_t count, std::mt19937_64& rng) {
  const size_t size = proto::DataTypeSize(type);
  Bytes b(count * size);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  auto put = [&](uint32_t i, const void* v, size_t n) {
    if (i < count) std::memcpy(b.data() + i * size, v, n);
  };
  switch (type) {
    case DataType::kFp32: {
      const float specials[] = {0.0f, -0.0f, 1e-45f, -3.4e38f, 1.5f};
      for (uint32_t i = 0; i < count; ++i) {
        float v = std::uniform_real_distribution<float>(-1000, 1000)(rng);
        if (rng() % 16 == 0) v = specials[rng() % 5];
        put(i, &v, 4);
      }
      break;
    }
    case DataType::kFp64: {
      for (uint32_t i = 0; i < count; ++i) {
        double v = std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
        if (rng() % 16 == 0) v = -0.0;
        put(i, &v, 8);
      }
      break;
    }
    case DataType::kFp16:
    case DataType::kBf16:
      for (uint32_t i = 0; i < count; ++i) {
        const float f = std::uniform_real_distribution<float>(-8, 8)(rng);
        const uint16_t v =
            type == DataType::kFp16 ? reduce::FloatToFp16(f) : reduce::FloatToBf16(f);
        put(i, &v, 2);
      }
      break;
    case DataType::kFloatInt:
      for (uint32_t i = 0; i < count; ++i) {
        const float v = static_cast<float>(rng() % 7);  // ties on purpose
        const int32_t idx = static_cast<int32_t>(rng() % 100);
        put(i, &v, 4);
        if (i < count) std::memcpy(b.data() + i * size + 4, &idx, 4);
      }
      break;
    default:
      break;  // random bits are fine for integers and the other pair types
  }
  if (proto::IsPairType(type) && type != DataType::kFloatInt) {
    // Keep the values small so that MINLOC/MAXLOC ties happen.
    for (uint32_t i = 0; i < count; ++i) b[i * size] %= 4;
  }
  return b;
}

void ExpectResults(Fabric& f, const std::vector<Operation>& ops) {
  for (size_t s = 0; s < ops.size(); ++s) {
    const Operation& op = ops[s];
    Bytes expected;
    if (op.collective == CollectiveType::kAllreduce || op.collective == CollectiveType::kReduce) {
      expected = op.count > 0 ? f.Reference(op, 0) : Bytes{};
    } else if (op.collective == CollectiveType::kBcast) {
      expected = op.inputs[op.root];
    }
    for (size_t r = 0; r < f.hosts_.size(); ++r) {
      auto it = f.hosts_[r].results.find(s);
      ASSERT_NE(it, f.hosts_[r].results.end()) << "rank " << r << " seq " << s;
      AggregationHeader h;
      std::span<const uint8_t> data;
      ASSERT_EQ(proto::ParseAggregationMessage(it->second, &h, &data),
                proto::AggregationParseResult::kOk);
      ASSERT_EQ(h.status, AggregationStatus::kOk)
          << proto::AggregationStatusName(h.status) << " rank " << r << " seq " << s;
      const bool to_root =
          op.delivery == DeliveryMode::kToRoot || op.delivery == DeliveryMode::kRootData;
      const bool wants_data = !to_root || static_cast<uint32_t>(r) == op.root;
      // (A root_data result a rank asked for again comes with the data.)
      const bool may_have_data = wants_data || op.delivery == DeliveryMode::kRootData;
      if (op.collective == CollectiveType::kBarrier || !may_have_data || op.count == 0 ||
          (!wants_data && !h.has_data)) {
        EXPECT_FALSE(h.has_data) << "rank " << r << " seq " << s;
        continue;
      }
      ASSERT_TRUE(h.has_data) << "rank " << r << " seq " << s;
      ASSERT_EQ(Bytes(data.begin(), data.end()), expected)
          << proto::DataTypeName(op.dtype) << " " << proto::ReduceOpName(op.op) << " rank " << r
          << " seq " << s;
    }
  }
}

struct TreeCase {
  const char* name;
  Shape shape;
};

class AggregationNodeTrees : public ::testing::TestWithParam<int> {
 protected:
  static Shape ShapeFor(int i) {
    switch (i) {
      case 0: return OneLevel(5);
      case 1: return TwoLevel(2, 4);
      case 2: return ThreeLevel();
      default: return TwoLevel(4, 4);  // 16 hosts
    }
  }
};

TEST_P(AggregationNodeTrees, EveryTypeAndOpMatchesTheTreeOrderReference) {
  const Shape shape = ShapeFor(GetParam());
  const int hosts = NumHosts(shape);
  std::mt19937_64 rng(1000 + GetParam());
  std::vector<Operation> ops;
  const DeliveryMode modes[] = {DeliveryMode::kMulticast, DeliveryMode::kRcTree};
  for (DataType t : proto::kAllDataTypes) {
    for (ReduceOp o : proto::kAllReduceOps) {
      if (!proto::IsOpAllowed(t, o)) continue;
      Operation op;
      op.dtype = t;
      op.op = o;
      op.delivery = modes[ops.size() % 2];
      const uint32_t max_count = 1024 / proto::DataTypeSize(t);
      op.count = 1 + static_cast<uint32_t>(rng() % max_count);
      for (int r = 0; r < hosts; ++r) op.inputs.push_back(RandomElements(t, op.count, rng));
      ops.push_back(std::move(op));
    }
  }
  ASSERT_EQ(ops.size(), 8u * 10 + 4u * 4 + 5u * 2);
  Fabric fabric(shape, /*k=*/4, /*p=*/1024, /*seed=*/GetParam(), /*multicast_loss=*/0.1);
  ASSERT_TRUE(fabric.Run(ops));
  ExpectResults(fabric, ops);
  EXPECT_GT(fabric.multicast_lost_, 0u);
  EXPECT_GT(fabric.repairs_, 0u);
  for (const auto& node : fabric.nodes_) {
    EXPECT_EQ(node->num_busy_slots(), 0u) << "a slot leaked";
    EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 0u);
  }
}

TEST_P(AggregationNodeTrees, ReduceBcastBarrierAndToRootDelivery) {
  const Shape shape = ShapeFor(GetParam());
  const int hosts = NumHosts(shape);
  std::mt19937_64 rng(77 + GetParam());
  std::vector<Operation> ops;
  for (int i = 0; i < 40; ++i) {
    Operation op;
    op.root = static_cast<uint32_t>(rng() % hosts);
    switch (i % 4) {
      case 0:
        op.collective = CollectiveType::kReduce;
        op.dtype = DataType::kFp64;
        op.op = ReduceOp::kSum;
        op.delivery = DeliveryMode::kToRoot;
        break;
      case 1:
        op.collective = CollectiveType::kBcast;
        op.dtype = DataType::kUint8;
        op.delivery = i % 8 == 1 ? DeliveryMode::kMulticast : DeliveryMode::kRcTree;
        break;
      case 2:
        op.collective = CollectiveType::kBarrier;
        op.dtype = proto::kNoDataType;
        op.delivery = DeliveryMode::kMulticast;
        op.root = 0;
        break;
      case 3:
        op.collective = CollectiveType::kReduce;
        op.dtype = DataType::kDoubleInt;
        op.op = ReduceOp::kMaxloc;
        op.delivery = i % 8 == 3 ? DeliveryMode::kMulticast : DeliveryMode::kRootData;
        break;
    }
    if (op.collective != CollectiveType::kBarrier) {
      op.count = 1 + static_cast<uint32_t>(rng() % 60);
      for (int r = 0; r < hosts; ++r) op.inputs.push_back(RandomElements(op.dtype, op.count, rng));
    }
    ops.push_back(std::move(op));
  }
  Fabric fabric(shape, 3, 1024, GetParam() + 50, 0.05);
  ASSERT_TRUE(fabric.Run(ops));
  ExpectResults(fabric, ops);
  // root_data: the roots saw the multicast header and waited for the data;
  // the switches away from the root freed their slots without a result.
  EXPECT_GT(fabric.root_headers_, 0u);
  for (const auto& node : fabric.nodes_) {
    EXPECT_EQ(node->num_busy_slots(), 0u) << "a slot leaked";
    EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 0u);
  }
}

// Bcast ranks without the data stand for runs of operations in one
// request (`repeat`), and a switch whose children all did sends the run
// up as one: the same results, bit for bit, in fewer messages, under
// loss, with runs broken by other collectives, roots and counts.
TEST_P(AggregationNodeTrees, BcastRunsGiveTheSameResultsInFewerRequests) {
  const Shape shape = ShapeFor(GetParam());
  const int hosts = NumHosts(shape);
  std::mt19937_64 rng(300 + GetParam());
  std::vector<Operation> ops;
  while (ops.size() < 120) {
    Operation op;
    op.collective = CollectiveType::kBcast;
    op.dtype = DataType::kInt32;
    op.op = proto::kNoReduceOp;
    op.root = static_cast<uint32_t>(rng() % hosts);
    op.delivery = rng() % 3 == 0 ? DeliveryMode::kRcTree : DeliveryMode::kMulticast;
    op.count = 1 + static_cast<uint32_t>(rng() % 200);
    const size_t alike = 1 + rng() % 12;  // a vector cut into chunks, then its last one
    for (size_t i = 0; i < alike; ++i) {
      Operation chunk = op;
      for (int r = 0; r < hosts; ++r) chunk.inputs.push_back(RandomElements(op.dtype, op.count, rng));
      ops.push_back(std::move(chunk));
    }
    if (rng() % 4 == 0) {
      Operation sum;
      sum.count = 3;
      for (int r = 0; r < hosts; ++r) sum.inputs.push_back(RandomElements(sum.dtype, 3, rng));
      ops.push_back(std::move(sum));
    }
  }
  std::vector<uint64_t> posted, at_root;
  for (size_t max_run : {size_t{1}, size_t{4}}) {
    SCOPED_TRACE(max_run);
    Fabric fabric(shape, /*k=*/8, /*p=*/1024, /*seed=*/GetParam() + 7, /*multicast_loss=*/0.05);
    fabric.max_run_ = max_run;
    ASSERT_TRUE(fabric.Run(ops));
    ExpectResults(fabric, ops);
    for (const auto& node : fabric.nodes_) {
      EXPECT_EQ(node->num_busy_slots(), 0u) << "a slot leaked";
      EXPECT_EQ(node->counters().Drops(NodeDropReason::kOutsideWindow), 0u);
    }
    posted.push_back(fabric.requests_posted_);
    at_root.push_back(fabric.nodes_[0]->counters().requests_received);
  }
  EXPECT_LT(posted[1] * 2, posted[0]) << "hosts: " << posted[0] << " then " << posted[1];
  // At the root, the child with the bcast root still sends each operation.
  EXPECT_LT(at_root[1] * 5, at_root[0] * 4) << "root: " << at_root[0] << " then " << at_root[1];
}

INSTANTIATE_TEST_SUITE_P(Shapes, AggregationNodeTrees, ::testing::Values(0, 1, 2, 3));

TEST(AggregationNode, HundredThousandOperationsStreamThroughTheSlots) {
  const Shape shape = TwoLevel(2, 4);
  std::mt19937_64 rng(5);
  std::vector<Operation> ops(100000);
  for (auto& op : ops) {
    op.dtype = DataType::kInt64;
    op.op = ReduceOp::kSum;
    op.count = 2;
    for (int r = 0; r < 8; ++r) op.inputs.push_back(RandomElements(op.dtype, op.count, rng));
  }
  Fabric fabric(shape, 8, 64, 17, 0.02);
  ASSERT_TRUE(fabric.Run(ops));
  ExpectResults(fabric, ops);
  EXPECT_EQ(fabric.nodes_[0]->counters().operations_completed, 100000u);
  EXPECT_EQ(fabric.nodes_[0]->counters().results_distributed, 100000u);
  for (const auto& node : fabric.nodes_) EXPECT_EQ(node->num_busy_slots(), 0u);
}

TEST(AggregationNode, FloatSumIsIndependentOfArrivalOrder) {
  // The same inputs through differently seeded interleavings give the same bits.
  std::mt19937_64 rng(9);
  std::vector<Operation> ops(20);
  for (auto& op : ops) {
    op.dtype = DataType::kFp32;
    op.op = ReduceOp::kSum;
    op.count = 200;
    for (int r = 0; r < 10; ++r) op.inputs.push_back(RandomElements(op.dtype, op.count, rng));
  }
  std::vector<Bytes> first;
  for (uint64_t seed : {1, 2, 3}) {
    Fabric fabric(ThreeLevel(), 4, 1024, seed, 0.0);
    ASSERT_TRUE(fabric.Run(ops));
    ExpectResults(fabric, ops);
    std::vector<Bytes> got;
    for (size_t s = 0; s < ops.size(); ++s) got.push_back(fabric.hosts_[0].results[s]);
    if (first.empty()) first = got;
    EXPECT_EQ(got, first) << "seed " << seed;
  }
}

}  // namespace
}  // namespace netfold::sw
