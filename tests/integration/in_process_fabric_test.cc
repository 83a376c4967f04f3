// Switch data planes and host group engines over the real transport (RC
// and UD multicast on an in-memory network), 1- to 3-level trees with up to
// 16 hosts, with and without seeded faults on every link. Every result is
// compared bit for bit with a reference computed independently, in tree
// order, with reduce/'s scalar reference.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "reduce/reduce.h"
#include "tests/integration/in_process_fabric.h"
#include "tests/integration/random_elements.h"

namespace netfold::testing {
namespace {

using proto::CollectiveType;
using proto::DataType;
using proto::DeliveryMode;
using proto::ReduceOp;
using Bytes = std::vector<uint8_t>;

constexpr char kFaults[] = "drop=0.05,dup=0.02,reorder=0.05:200us,corrupt=0.01";

// The reference result at switch `node`: children folded in order, child
// switches reduced the same way first.
Bytes Reference(const TreeShape& shape, int node, DataType type, ReduceOp op, size_t count,
                const std::vector<Bytes>& inputs) {
  if (node < 0) return inputs[-1 - node];
  std::vector<Bytes> parts;
  for (int c : shape.children[node]) parts.push_back(Reference(shape, c, type, op, count, inputs));
  std::vector<const void*> ptrs;
  for (const Bytes& p : parts) ptrs.push_back(p.data());
  Bytes out(count * proto::DataTypeSize(type));
  EXPECT_TRUE(reduce::FoldScalarReference(type, op, out.data(), ptrs, count).ok());
  return out;
}

struct Case {
  int shape;
  bool faults;
};

TreeShape ShapeFor(int i) {
  switch (i) {
    case 0: return TreeShape::OneLevel(8);
    case 1: return TreeShape::TwoLevel(2, 4);
    case 2: return TreeShape::ThreeLevel();
    default: return TreeShape::TwoLevel(4, 4);
  }
}

class FabricTest : public ::testing::TestWithParam<Case> {};

TEST_P(FabricTest, EveryTypeAndOpMatchesTheTreeOrderReferenceOnEveryRank) {
  const TreeShape shape = ShapeFor(GetParam().shape);
  FabricOptions options;
  options.faults = GetParam().faults ? kFaults : "none";
  options.seed = 10 + GetParam().shape;
  InProcessFabric fabric(shape, options);
  fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 512});
  const int n = shape.num_hosts();
  std::mt19937_64 rng(GetParam().shape * 7 + 1);

  struct Pending {
    DataType type;
    ReduceOp op;
    size_t count;
    std::vector<Bytes> inputs, outputs;
    std::vector<host::OpId> ids;
  };
  std::vector<Pending> pending;
  pending.reserve(200);
  for (DataType t : proto::kAllDataTypes) {
    for (ReduceOp o : proto::kAllReduceOps) {
      if (!proto::IsOpAllowed(t, o)) continue;
      Pending p;
      p.type = t;
      p.op = o;
      // 1 to 3 chunks of 512 bytes, tails included.
      p.count = 1 + rng() % (3 * 512 / proto::DataTypeSize(t));
      for (int r = 0; r < n; ++r) {
        p.inputs.push_back(RandomElements(t, p.count, rng));
        p.outputs.emplace_back(p.count * proto::DataTypeSize(t), 0xee);
      }
      pending.push_back(std::move(p));
    }
  }
  // All operations are started at once: they stream through the K slots.
  for (Pending& p : pending) {
    std::vector<host::CollectiveArgs> args;
    for (int r = 0; r < n; ++r) {
      args.push_back({.collective = CollectiveType::kAllreduce, .dtype = p.type, .op = p.op,
                      .send = p.inputs[r].data(), .recv = p.outputs[r].data(), .count = p.count});
    }
    p.ids = fabric.StartOnEveryRank(1, args);
  }
  // Results may complete out of order: wait for every one.
  for (Pending& p : pending) ASSERT_TRUE(fabric.RunUntilDone(1, p.ids));
  for (Pending& p : pending) {
    const Bytes expected = Reference(shape, 0, p.type, p.op, p.count, p.inputs);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(fabric.engine(1, r).Done(p.ids[r]));
      absl::Status s = fabric.engine(1, r).Finish(p.ids[r]);
      ASSERT_TRUE(s.ok()) << s << " " << proto::DataTypeName(p.type);
      ASSERT_EQ(p.outputs[r], expected) << proto::DataTypeName(p.type) << " "
                                        << proto::ReduceOpName(p.op) << " rank " << r;
    }
  }
  for (int s = 0; s < shape.num_switches(); ++s) {
    EXPECT_EQ(fabric.switch_plane(s).num_busy_slots(), 0u) << "switch " << s;
  }
  if (GetParam().faults) {
    uint64_t lost = 0;
    for (int r = 0; r < n; ++r) {
      lost += fabric.host_port(r).receive_stage().counters().dropped_random;
    }
    EXPECT_GT(lost, 0u) << "the faults did happen";
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, FabricTest,
                         ::testing::Values(Case{0, false}, Case{1, false}, Case{2, false},
                                           Case{3, false}, Case{0, true}, Case{1, true},
                                           Case{2, true}, Case{3, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrFormat("shape%d_%s", info.param.shape,
                                                  info.param.faults ? "faults" : "clean");
                         });

// Determinism (issue 22): the fabric folds each element in tree order, so
// how a vector is cut (P), how many chunks are in flight (K) and how the
// arrivals interleave must not change a bit of the result. Floating point,
// where order matters, with values of mixed magnitude.
TEST(Fabric, ResultsAreBitwiseTheSameWhateverTheChunkingAndWindow) {
  const TreeShape shape = TreeShape::TwoLevel(2, 4);
  FabricOptions options;
  options.faults = "reorder=0.2:100us";
  options.seed = 5;
  InProcessFabric fabric(shape, options);
  const std::vector<GroupOptions> groups = {
      {.num_slots = 1, .slot_bytes = 64}, {.num_slots = 4, .slot_bytes = 528},
      {.num_slots = 32, .slot_bytes = 4032}, {.num_slots = 64, .slot_bytes = 1024}};
  for (size_t g = 0; g < groups.size(); ++g) fabric.CreateGroup(g + 1, groups[g]);
  const int n = shape.num_hosts();
  std::mt19937_64 rng(99);
  for (DataType t : {DataType::kFp32, DataType::kFp64, DataType::kFp16, DataType::kBf16}) {
    const size_t count = 3 * 4032 / proto::DataTypeSize(t) + 7;
    std::vector<Bytes> inputs;
    for (int r = 0; r < n; ++r) {
      Bytes in = RandomElements(t, count, rng);
      if (t == DataType::kFp32) {  // magnitudes 1e-6 .. 1e6: order shows in the sum
        auto* f = reinterpret_cast<float*>(in.data());
        for (size_t i = 0; i < count; ++i) f[i] *= std::pow(10.0f, static_cast<int>(rng() % 13) - 6);
      }
      inputs.push_back(std::move(in));
    }
    const Bytes expected = Reference(shape, 0, t, ReduceOp::kSum, count, inputs);
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<Bytes> outputs(n, Bytes(count * proto::DataTypeSize(t), 0xee));
      std::vector<host::CollectiveArgs> args;
      for (int r = 0; r < n; ++r) {
        args.push_back({.collective = CollectiveType::kAllreduce, .dtype = t,
                        .op = ReduceOp::kSum, .send = inputs[r].data(),
                        .recv = outputs[r].data(), .count = count});
      }
      std::vector<host::OpId> ids = fabric.StartOnEveryRank(g + 1, args);
      ASSERT_TRUE(fabric.RunUntilDone(g + 1, ids));
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(fabric.engine(g + 1, r).Finish(ids[r]).ok());
        ASSERT_EQ(outputs[r], expected) << proto::DataTypeName(t) << " K=" << groups[g].num_slots
                                        << " P=" << groups[g].slot_bytes << " rank " << r;
      }
    }
  }
}

TEST(Fabric, HundredThousandOperationsStreamUnderFaults) {
  const TreeShape shape = TreeShape::TwoLevel(2, 4);
  FabricOptions options;
  options.faults = "drop=0.02,dup=0.01,reorder=0.02:100us";
  options.seed = 99;
  InProcessFabric fabric(shape, options);
  fabric.CreateGroup(1, {.num_slots = 16, .slot_bytes = 64});
  constexpr int kOps = 100000;
  std::vector<std::vector<int64_t>> in(8, std::vector<int64_t>(kOps)), out(8, std::vector<int64_t>(kOps));
  std::mt19937_64 rng(4);
  for (auto& v : in) {
    for (auto& x : v) x = static_cast<int64_t>(rng());
  }
  std::vector<std::vector<host::OpId>> ids(kOps);
  // One element per operation: every operation is one chunk, one slot.
  int started = 0, finished = 0;
  while (finished < kOps) {
    while (started < kOps && started - finished < 64) {
      std::vector<host::CollectiveArgs> args;
      for (int r = 0; r < 8; ++r) {
        args.push_back({.dtype = DataType::kInt64, .op = ReduceOp::kSum,
                        .send = &in[r][started], .recv = &out[r][started], .count = 1});
      }
      ids[started] = fabric.StartOnEveryRank(1, args);
      ++started;
    }
    fabric.Step();
    while (finished < started) {
      bool done = true;
      for (int r = 0; r < 8 && done; ++r) done = fabric.engine(1, r).Done(ids[finished][r]);
      if (!done) break;
      for (int r = 0; r < 8; ++r) ASSERT_TRUE(fabric.engine(1, r).Finish(ids[finished][r]).ok());
      ++finished;
    }
  }
  for (int i = 0; i < kOps; ++i) {
    int64_t sum = 0;  // wrapping sum: integer sums are exact in any order
    for (int r = 0; r < 8; ++r) sum = static_cast<int64_t>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(in[r][i]));
    for (int r = 0; r < 8; ++r) ASSERT_EQ(out[r][i], sum) << "op " << i << " rank " << r;
  }
  EXPECT_EQ(fabric.switch_plane(0).num_busy_slots(), 0u);
}

// Multicast (a reduce's data to every rank, or to its root alone with
// root_data) and rc_tree delivery, under faults.
TEST(Fabric, ReduceBcastAndBarrierWithEveryDelivery) {
  for (int variant = 0; variant < 3; ++variant) {
    const DeliveryMode mode = variant == 1 ? DeliveryMode::kRcTree : DeliveryMode::kMulticast;
    SCOPED_TRACE(variant);
    const TreeShape shape = TreeShape::ThreeLevel();
    FabricOptions options;
    options.faults = kFaults;
    InProcessFabric fabric(shape, options);
    fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 256, .delivery = mode,
                           .reduce_data = variant == 2 ? host::ReduceData::kRoot
                                                       : host::ReduceData::kAll});
    const int n = shape.num_hosts();
    std::mt19937_64 rng(3);
    for (uint32_t root : {0u, 4u, 9u}) {
      const size_t count = 300;  // 3 chunks of 256 bytes
      std::vector<Bytes> in, out;
      for (int r = 0; r < n; ++r) {
        in.push_back(RandomElements(DataType::kFp64, count / 2, rng));
        out.emplace_back(count / 2 * 8, 0);
      }
      std::vector<host::CollectiveArgs> reduce_args, bcast_args, barrier_args;
      std::vector<Bytes> bcast_buf(n, Bytes(count, 0));
      for (uint8_t& b : bcast_buf[root]) b = static_cast<uint8_t>(rng());
      const Bytes bcast_expected = bcast_buf[root];
      for (int r = 0; r < n; ++r) {
        reduce_args.push_back({.collective = CollectiveType::kReduce, .dtype = DataType::kFp64,
                               .op = ReduceOp::kSum, .root = root, .send = in[r].data(),
                               .recv = out[r].data(), .count = count / 2});
        bcast_args.push_back({.collective = CollectiveType::kBcast, .dtype = DataType::kUint8,
                              .root = root, .send = bcast_buf[r].data(),
                              .recv = bcast_buf[r].data(), .count = count});
        barrier_args.push_back({.collective = CollectiveType::kBarrier});
      }
      auto reduce_ids = fabric.StartOnEveryRank(1, reduce_args);
      auto bcast_ids = fabric.StartOnEveryRank(1, bcast_args);
      auto barrier_ids = fabric.StartOnEveryRank(1, barrier_args);
      // Results may come in any order (RC down the tree vs. multicast).
      ASSERT_TRUE(fabric.RunUntilDone(1, reduce_ids));
      ASSERT_TRUE(fabric.RunUntilDone(1, bcast_ids));
      ASSERT_TRUE(fabric.RunUntilDone(1, barrier_ids));
      const Bytes expected = Reference(shape, 0, DataType::kFp64, ReduceOp::kSum, count / 2, in);
      for (int r = 0; r < n; ++r) {
        absl::Status s = fabric.engine(1, r).Finish(reduce_ids[r]);
        ASSERT_TRUE(s.ok()) << s << " rank " << r << " root " << root;
        s = fabric.engine(1, r).Finish(bcast_ids[r]);
        ASSERT_TRUE(s.ok()) << s << " rank " << r << " root " << root;
        s = fabric.engine(1, r).Finish(barrier_ids[r]);
        ASSERT_TRUE(s.ok()) << s << " rank " << r << " root " << root;
        if (static_cast<uint32_t>(r) == root) {
          EXPECT_EQ(out[r], expected) << "reduce at the root";
        } else {
          EXPECT_EQ(out[r], Bytes(count / 2 * 8, 0)) << "reduce leaves non-roots alone";
        }
        EXPECT_EQ(bcast_buf[r], bcast_expected) << "bcast rank " << r;
      }
    }
  }
}

// NETFOLD_REDUCE_DATA=auto, the default: reduces within the window (whole
// by multicast) and longer ones (root_data) started back to back in one
// group each give the root the tree-order reference bits and leave the
// other ranks' buffers alone, under faults and without; without faults the
// root's leaf relays exactly the long reduce's chunks (none with `all`).
TEST(Fabric, ShortAndLongReducesInOneGroupTakeTheirOwnDelivery) {
  struct Setting {
    const char* faults;
    host::ReduceData reduce_data;
    uint64_t relays;  // by the root's leaf per root, without faults
  };
  // fp32, 64 per chunk: 3 chunks (within K = 4), 11 chunks, 1 chunk.
  const std::vector<size_t> counts = {190, 700, 5};
  for (const Setting& setting : {Setting{kFaults, host::ReduceData::kAuto, 0},
                                 Setting{"none", host::ReduceData::kAuto, 11},
                                 Setting{"none", host::ReduceData::kAll, 0}}) {
    const bool faults = std::string(setting.faults) != "none";
    SCOPED_TRACE(absl::StrFormat("faults %d, reduce_data %d", faults,
                                 static_cast<int>(setting.reduce_data)));
    const TreeShape shape = TreeShape::TwoLevel(2, 4);
    FabricOptions options;
    options.faults = setting.faults;
    options.seed = 5;
    InProcessFabric fabric(shape, options);
    fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 256, .reduce_data = setting.reduce_data});
    const int n = shape.num_hosts();
    std::mt19937_64 rng(23);
    // Results the root's leaf relayed down over RC: the long reduce's
    // chunks by root_data, and, under faults, answers to repairs.
    auto relayed = [&](uint32_t root) {
      uint64_t total = 0;
      fabric.switch_plane(1 + static_cast<int>(root) / 4)
          .ForEachNode([&](const sw::GroupSpec&, const sw::AggregationNode& node) {
            total += node.counters().results_relayed.load();
          });
      return total;
    };
    for (uint32_t root : {0u, 6u}) {
      const uint64_t relayed_before = relayed(root);
      std::vector<std::vector<Bytes>> in(counts.size()), out(counts.size());
      std::vector<std::vector<uint64_t>> ids;
      for (size_t k = 0; k < counts.size(); ++k) {
        std::vector<host::CollectiveArgs> args;
        for (int r = 0; r < n; ++r) {
          in[k].push_back(RandomElements(DataType::kFp32, counts[k], rng));
          out[k].emplace_back(counts[k] * 4, 0);
        }
        for (int r = 0; r < n; ++r) {
          args.push_back({.collective = CollectiveType::kReduce, .dtype = DataType::kFp32,
                          .op = ReduceOp::kSum, .root = root, .send = in[k][r].data(),
                          .recv = out[k][r].data(), .count = counts[k]});
        }
        ids.push_back(fabric.StartOnEveryRank(1, args));
      }
      for (size_t k = 0; k < counts.size(); ++k) {
        ASSERT_TRUE(fabric.RunUntilDone(1, ids[k])) << "reduce " << k << " root " << root;
        const Bytes expected =
            Reference(shape, 0, DataType::kFp32, ReduceOp::kSum, counts[k], in[k]);
        for (int r = 0; r < n; ++r) {
          absl::Status st = fabric.engine(1, r).Finish(ids[k][r]);
          ASSERT_TRUE(st.ok()) << st << " reduce " << k << " rank " << r << " root " << root;
          if (static_cast<uint32_t>(r) == root) {
            EXPECT_EQ(out[k][r], expected) << "reduce " << k << " at root " << root;
          } else {
            EXPECT_EQ(out[k][r], Bytes(counts[k] * 4, 0)) << "reduce " << k << " rank " << r;
          }
        }
      }
      if (!faults) {
        EXPECT_EQ(relayed(root) - relayed_before, setting.relays) << "root " << root;
      }
    }
  }
}

// The integrity tag end to end: one group without tags and one with the
// job's key, under loss, duplication, reordering and corruption, with
// multicast (results repaired over RC; a reduce by root_data too) and
// rc_tree delivery (reduce goes to_root there): allreduce and reduce give
// the tree-order reference bits in each, and no tagged message is ever
// refused (bad_tags 0) - the tag
// changes the wire and the chunking (P - 16 bytes of elements), not one
// result bit.
TEST(Fabric, TheIntegrityTagGivesTheSameBitsOnEveryDeliveryUnderFaults) {
  proto::AggregationKey key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(0xa0 + i);
  for (int variant = 0; variant < 3; ++variant) {
    const DeliveryMode mode = variant == 1 ? DeliveryMode::kRcTree : DeliveryMode::kMulticast;
    const host::ReduceData reduce_data =
        variant == 2 ? host::ReduceData::kRoot : host::ReduceData::kAll;
    SCOPED_TRACE(variant);
    const TreeShape shape = TreeShape::TwoLevel(2, 4);
    FabricOptions options;
    options.faults = kFaults;
    options.seed = 11;
    InProcessFabric fabric(shape, options);
    fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 256, .delivery = mode,
                           .reduce_data = reduce_data});
    fabric.CreateGroup(2, {.num_slots = 4, .slot_bytes = 256, .delivery = mode,
                           .reduce_data = reduce_data, .integrity_key = key});
    const int n = shape.num_hosts();
    std::mt19937_64 rng(17);
    const size_t count = 301;  // fp32: 5 chunks of 64, or 6 of 60 with the tag
    std::vector<Bytes> in;
    for (int r = 0; r < n; ++r) {
      Bytes v = RandomElements(DataType::kFp32, count, rng);
      auto* f = reinterpret_cast<float*>(v.data());
      for (size_t i = 0; i < count; ++i) f[i] *= std::pow(10.0f, static_cast<int>(rng() % 13) - 6);
      in.push_back(std::move(v));
    }
    const Bytes expected = Reference(shape, 0, DataType::kFp32, ReduceOp::kSum, count, in);
    for (CollectiveType c : {CollectiveType::kAllreduce, CollectiveType::kReduce}) {
      for (uint32_t g : {1u, 2u}) {
        std::vector<Bytes> out(n, Bytes(count * 4, 0));
        std::vector<host::CollectiveArgs> args;
        for (int r = 0; r < n; ++r) {
          args.push_back({.collective = c, .dtype = DataType::kFp32, .op = ReduceOp::kSum,
                          .root = 5, .send = in[r].data(), .recv = out[r].data(),
                          .count = count});
        }
        std::vector<host::OpId> ids = fabric.StartOnEveryRank(g, args);
        ASSERT_TRUE(fabric.RunUntilDone(g, ids));
        for (int r = 0; r < n; ++r) {
          absl::Status s = fabric.engine(g, r).Finish(ids[r]);
          ASSERT_TRUE(s.ok()) << s << " group " << g << " rank " << r;
          if (c == CollectiveType::kAllreduce || r == 5) {
            EXPECT_EQ(out[r], expected) << "group " << g << " rank " << r;
          }
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(fabric.engine(2, r).stats().bad_tags, 0u) << "rank " << r;
      EXPECT_GT(fabric.engine(2, r).stats().chunks_posted,
                fabric.engine(1, r).stats().chunks_posted) << "the tag takes room in a chunk";
    }
  }
}

// Allgather is a bcast per block and reduce-scatter a reduce per block,
// each block rooted at its rank: blocks of every size (empty ones too),
// under faults, with both deliveries. A rank's reduce-scatter block is
// bitwise the same block of the allreduce (the tree-order reference).
// Blocks of up to 3 elements take the small-vector path (one allreduce of
// the whole vector, GroupEngine::LayOutBlocks), blocks of up to 200 a chunk
// stream per block.
TEST(Fabric, AllgatherAndReduceScatterAreExactInBlocksOfEverySize) {
  for (const auto& [mode, max_block] :
       {std::pair{DeliveryMode::kMulticast, 200}, std::pair{DeliveryMode::kRcTree, 200},
        std::pair{DeliveryMode::kMulticast, 3}, std::pair{DeliveryMode::kRcTree, 3}}) {
    SCOPED_TRACE(absl::StrFormat("%s, blocks up to %d elements",
                                 mode == DeliveryMode::kMulticast ? "multicast" : "rc",
                                 max_block));
    const TreeShape shape = TreeShape::ThreeLevel();
    FabricOptions options;
    options.faults = kFaults;
    InProcessFabric fabric(shape, options);
    fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 256, .delivery = mode});
    const int n = shape.num_hosts();
    std::mt19937_64 rng(11);
    std::vector<size_t> blocks(n);
    for (int r = 0; r < n; ++r) blocks[r] = r % 4 == 1 ? 0 : rng() % (max_block + 1);
    size_t total = 0;
    std::vector<size_t> first(n);
    for (int r = 0; r < n; ++r) {
      first[r] = total;
      total += blocks[r];
    }
    std::vector<Bytes> in, scattered, mine, gathered;
    for (int r = 0; r < n; ++r) {
      in.push_back(RandomElements(DataType::kFp32, total, rng));
      scattered.emplace_back(blocks[r] * 4, 0);
      mine.push_back(RandomElements(DataType::kFp32, blocks[r], rng));
      gathered.emplace_back(total * 4, 0);
    }
    std::vector<host::CollectiveArgs> rs_args, ag_args;
    for (int r = 0; r < n; ++r) {
      rs_args.push_back({.collective = CollectiveType::kReduce, .dtype = DataType::kFp32,
                         .op = ReduceOp::kSum, .send = in[r].data(),
                         .recv = scattered[r].data(), .count = total, .blocks = blocks});
      ag_args.push_back({.collective = CollectiveType::kBcast, .dtype = DataType::kFp32,
                         .send = mine[r].data(), .recv = gathered[r].data(), .count = total,
                         .blocks = blocks});
    }
    auto rs_ids = fabric.StartOnEveryRank(1, rs_args);
    auto ag_ids = fabric.StartOnEveryRank(1, ag_args);
    ASSERT_TRUE(fabric.RunUntilDone(1, rs_ids));
    ASSERT_TRUE(fabric.RunUntilDone(1, ag_ids));
    const Bytes reduced = Reference(shape, 0, DataType::kFp32, ReduceOp::kSum, total, in);
    Bytes concatenated;
    for (const Bytes& b : mine) concatenated.insert(concatenated.end(), b.begin(), b.end());
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(absl::StrFormat("rank %d", r));
      absl::Status s = fabric.engine(1, r).Finish(rs_ids[r]);
      ASSERT_TRUE(s.ok()) << s;
      s = fabric.engine(1, r).Finish(ag_ids[r]);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(scattered[r], Bytes(reduced.begin() + first[r] * 4,
                                    reduced.begin() + (first[r] + blocks[r]) * 4));
      EXPECT_EQ(gathered[r], concatenated);
    }
  }
}

TEST(Fabric, RanksThatDisagreeAllGetTheError) {
  InProcessFabric fabric(TreeShape::TwoLevel(2, 3));
  fabric.CreateGroup(1, {});
  std::vector<Bytes> in(6, Bytes(64, 1)), out(6, Bytes(64, 0));
  std::vector<host::CollectiveArgs> args;
  for (int r = 0; r < 6; ++r) {
    args.push_back({.dtype = DataType::kInt32, .op = r == 4 ? ReduceOp::kMax : ReduceOp::kSum,
                    .send = in[r].data(), .recv = out[r].data(), .count = 16});
  }
  auto ids = fabric.StartOnEveryRank(1, args);
  ASSERT_TRUE(fabric.RunUntilDone(1, ids));
  for (int r = 0; r < 6; ++r) {
    absl::Status s = fabric.engine(1, r).Finish(ids[r]);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("disagree"), std::string_view::npos);
  }
  // The group is still usable afterwards.
  for (auto& a : args) a.op = ReduceOp::kSum;
  ids = fabric.StartOnEveryRank(1, args);
  ASSERT_TRUE(fabric.RunUntilDone(1, ids));
  for (int r = 0; r < 6; ++r) EXPECT_TRUE(fabric.engine(1, r).Finish(ids[r]).ok());
  int32_t v;
  std::memcpy(&v, out[0].data(), 4);
  EXPECT_EQ(v, 6 * 0x01010101);
}

TEST(Fabric, ForeignAndMalformedMessagesAreCountedAndHarmless) {
  InProcessFabric fabric(TreeShape::OneLevel(3));
  fabric.CreateGroup(1, {});
  proto::AggregationHeader h;
  h.type = proto::AggregationMessageType::kRequest;
  h.dtype = DataType::kInt32;
  h.op = ReduceOp::kSum;
  h.tree_id = 1;
  h.group_id = 42;  // not installed
  h.epoch = 1;
  Bytes msg(proto::kAggregationHeaderSize);
  ASSERT_TRUE(proto::EncodeAggregationMessage(h, {}, msg).ok());
  ASSERT_TRUE(fabric.SendRaw(0, msg).ok());
  Bytes junk(10, 0xff);
  ASSERT_TRUE(fabric.SendRaw(1, junk).ok());
  Bytes bad_version = msg;
  bad_version[0] = 9;
  ASSERT_TRUE(fabric.SendRaw(2, bad_version).ok());
  for (int i = 0; i < 100; ++i) fabric.Step();
  const sw::SwitchCounters& c = fabric.switch_plane(0).counters();
  EXPECT_EQ(c.drops[static_cast<size_t>(sw::SwitchDropReason::kUnknownGroup)], 1u);
  EXPECT_EQ(c.parse_drops[static_cast<size_t>(proto::AggregationParseResult::kTruncated)], 1u);
  EXPECT_EQ(c.parse_drops[static_cast<size_t>(proto::AggregationParseResult::kBadVersion)], 1u);
  // And the group still works.
  std::vector<Bytes> in(3, Bytes(4, 2)), out(3, Bytes(4, 0));
  std::vector<host::CollectiveArgs> args;
  for (int r = 0; r < 3; ++r) {
    args.push_back({.dtype = DataType::kUint8, .op = ReduceOp::kSum, .send = in[r].data(),
                    .recv = out[r].data(), .count = 4});
  }
  auto ids = fabric.StartOnEveryRank(1, args);
  ASSERT_TRUE(fabric.RunUntilDone(1, ids));
  EXPECT_EQ(out[2], Bytes(4, 6));
}

TEST(Fabric, RemovingAGroupFreesItsSlotsAndAbortsItsOperations) {
  InProcessFabric fabric(TreeShape::TwoLevel(2, 2));
  fabric.CreateGroup(1, {.num_slots = 4});
  fabric.CreateGroup(2, {.num_slots = 4});
  EXPECT_EQ(fabric.switch_plane(0).num_slots_used(), 8u);
  // Only ranks 0..2 start: the operation cannot complete.
  std::vector<Bytes> in(4, Bytes(8, 1)), out(4, Bytes(8, 0));
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(fabric.engine(1, r)
                    .Start({.dtype = DataType::kInt64, .op = ReduceOp::kSum,
                            .send = in[r].data(), .recv = out[r].data(), .count = 1})
                    .ok());
  }
  for (int i = 0; i < 200; ++i) fabric.Step();
  EXPECT_GT(fabric.switch_plane(0).num_busy_slots() + fabric.switch_plane(1).num_busy_slots(), 0u);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(fabric.switch_plane(s).RemoveGroup(1, 1).ok());
  for (int i = 0; i < 200; ++i) fabric.Step();
  // Ranks with an operation in flight learnt it was aborted.
  EXPECT_EQ(fabric.engine(1, 0).failure().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(fabric.switch_plane(0).num_slots_used(), 4u);
  EXPECT_EQ(fabric.switch_plane(0).num_busy_slots(), 0u);
  EXPECT_EQ(fabric.switch_plane(0).RemoveGroup(1, 1).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace netfold::testing
