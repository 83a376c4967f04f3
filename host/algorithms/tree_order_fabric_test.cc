// Tree-order mode against the fabric itself: the host algorithms run over
// the tree a group is planned on give bit for bit what the in-process
// fabric's aggregation nodes give, and a job whose switch dies fails over to
// them without a bit changing.
//
// It needs switch/ and host/ (the fabric harness of tests/integration), so
// it is an integration test of this folder, not part of its library.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/algorithms/testing/allreduce_reference.h"
#include "host/algorithms/testing/allreduce_test_util.h"
#include "host/algorithms/selection.h"
#include "tests/integration/in_process_fabric.h"

namespace netfold::host::algorithms {
namespace {

using ::netfold::testing::InProcessFabric;
using ::netfold::testing::TreeShape;

TreeSpec FromShape(const TreeShape& shape) { return TreeSpec{shape.children}; }

// One allreduce through the fabric; returns each rank's result.
std::vector<std::vector<uint8_t>> FabricAllreduce(const TreeShape& shape, DataType dtype,
                                                  ReduceOp op,
                                                  const std::vector<std::vector<uint8_t>>& in,
                                                  size_t count) {
  InProcessFabric fabric(shape);
  fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 1024});
  const size_t p = in.size();
  std::vector<std::vector<uint8_t>> out(p, std::vector<uint8_t>(in[0].size(), 0xEE));
  std::vector<host::CollectiveArgs> args(p);
  for (size_t r = 0; r < p; ++r) {
    args[r] = {.dtype = dtype, .op = op, .send = in[r].data(), .recv = out[r].data(),
               .count = count};
  }
  auto ops = fabric.StartOnEveryRank(1, args);
  EXPECT_TRUE(fabric.RunUntilDone(1, ops));
  for (size_t r = 0; r < p; ++r) {
    absl::Status s = fabric.engine(1, static_cast<uint32_t>(r)).Finish(ops[r]);
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
  }
  return out;
}

// The host algorithms over `tree`; returns each rank's result.
std::vector<std::vector<uint8_t>> HostAllreduce(Algorithm a, const TreeSpec& tree,
                                                DataType dtype, ReduceOp op,
                                                const std::vector<std::vector<uint8_t>>& in,
                                                size_t count) {
  const uint32_t p = static_cast<uint32_t>(in.size());
  LoopbackRanks ranks({.num_ranks = p, .engine = {.fragment_bytes = 512}});
  EXPECT_TRUE(ranks.status().ok());
  std::vector<std::vector<uint8_t>> out = in;  // in place
  std::vector<AllreduceArgs> args(p);
  for (uint32_t r = 0; r < p; ++r) {
    args[r] = {.algorithm = a, .dtype = dtype, .op = op, .send = out[r].data(),
               .recv = out[r].data(), .count = count, .tree = &tree};
  }
  auto ids = ranks.StartOnEveryRank(args);
  EXPECT_TRUE(ranks.RunUntilDone(ids));
  for (uint32_t r = 0; r < p; ++r) {
    absl::Status s = ranks.engine(r).Finish(ids[r]);
    EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s;
  }
  return out;
}

TEST(TreeOrderFabricTest, HostTreeOrderIsBitwiseTheInNetworkResult) {
  const std::vector<std::pair<std::string, TreeShape>> shapes = {
      {"one level of 5", TreeShape::OneLevel(5)},
      {"two levels of 3x3", TreeShape::TwoLevel(3, 3)},
      {"three levels, leaves of 3,1,2,4", TreeShape::ThreeLevel()}};
  const std::vector<std::pair<DataType, ReduceOp>> kinds = {
      {DataType::kFp32, ReduceOp::kSum},  {DataType::kFp16, ReduceOp::kSum},
      {DataType::kBf16, ReduceOp::kSum},  {DataType::kFp64, ReduceOp::kSum},
      {DataType::kFp32, ReduceOp::kProd}, {DataType::kDoubleInt, ReduceOp::kMaxloc}};
  for (const auto& [name, shape] : shapes) {
    const TreeSpec tree = FromShape(shape);
    for (const auto& [dtype, op] : kinds) {
      SCOPED_TRACE(absl::StrFormat("%s, %s %s", name, proto::DataTypeName(dtype),
                                   proto::ReduceOpName(op)));
      const uint32_t p = static_cast<uint32_t>(shape.num_hosts());
      const size_t count = 1000;  // several 1 KiB slots
      const auto in = MakeInputs(dtype, op, count, p, 99);
      const auto fabric = FabricAllreduce(shape, dtype, op, in, count);
      const auto want = ReferenceTreeOrder(tree, dtype, op, in, count);
      const size_t e = proto::DataTypeSize(dtype);
      for (uint32_t r = 0; r < p; ++r) {
        ASSERT_EQ(CompareBytes(fabric[r], want, e), "") << "fabric, rank " << r;
      }
      for (Algorithm a : {Algorithm::kTree, Algorithm::kTreeScatter}) {
        const auto host = HostAllreduce(a, tree, dtype, op, in, count);
        for (uint32_t r = 0; r < p; ++r) {
          EXPECT_EQ(CompareBytes(host[r], fabric[r], e), "")
              << AlgorithmName(a) << ", rank " << r;
        }
      }
      // A plain ring associates differently: the bits do differ for fp sums,
      // which is why tree-order mode exists.
      if (dtype == DataType::kFp32 && op == ReduceOp::kSum && p > 2) {
        const auto ring = HostAllreduce(Algorithm::kRing, tree, dtype, op, in, count);
        EXPECT_NE(CompareBytes(ring[0], fabric[0], e), "");
      }
    }
  }
}

// A leaf switch dies mid-operation: the in-network operation fails on every
// rank (DeadlineExceeded here; the manager's revocation in production), the
// selection falls back to the host, and the re-run from the preserved inputs
// gives exactly the bits the healthy fabric gives.
TEST(TreeOrderFabricTest, FailoverUnderAKilledSwitchKeepsTheBits) {
  const TreeShape shape = TreeShape::TwoLevel(2, 3);
  const TreeSpec tree = FromShape(shape);
  const uint32_t p = 6;
  const size_t count = 20000;  // 80 KB: above the tree threshold, so treescatter
  const DataType dtype = DataType::kFp32;
  const ReduceOp op = ReduceOp::kSum;
  const auto in = MakeInputs(dtype, op, count, p, 7);
  const auto healthy = FabricAllreduce(shape, dtype, op, in, count);

  InProcessFabric fabric(shape);
  fabric.CreateGroup(1, {.num_slots = 2, .slot_bytes = 1024, .op_timeout = absl::Milliseconds(50)});
  std::vector<std::vector<uint8_t>> out(p, std::vector<uint8_t>(in[0].size(), 0));
  std::vector<host::CollectiveArgs> args(p);
  for (uint32_t r = 0; r < p; ++r) {
    args[r] = {.dtype = dtype, .op = op, .send = in[r].data(), .recv = out[r].data(),
               .count = count};
  }
  auto ops = fabric.StartOnEveryRank(1, args);
  for (int i = 0; i < 3; ++i) fabric.Step();  // a few chunks in flight
  transport::ImpairmentConfig down;
  down.link_down = true;
  fabric.switch_port(2).SetSendImpairment(down);  // leaf switch of ranks 3-5
  fabric.switch_port(2).SetReceiveImpairment(down);
  ASSERT_TRUE(fabric.RunUntilDone(1, ops));
  for (uint32_t r = 0; r < p; ++r) {
    absl::Status s = fabric.engine(1, r).Finish(ops[r]);
    ASSERT_FALSE(s.ok()) << "rank " << r << " completed despite the dead switch";
  }
  // Every rank selects the same fallback: the planned tree's order.
  auto sel = SelectAlgorithm({.policy = AlgorithmPolicy::kTreeOrder,
                              .fabric_available = false,
                              .fabric_tree_known = true,
                              .bytes = count * proto::DataTypeSize(dtype),
                              .num_ranks = p});
  ASSERT_TRUE(sel.ok());
  ASSERT_TRUE(sel->use_fabric_tree);
  ASSERT_EQ(sel->algorithm, Algorithm::kTreeScatter) << sel->reason;
  // The inputs are intact (the fabric wrote only recv): re-run from them.
  const auto host = HostAllreduce(sel->algorithm, tree, dtype, op, in, count);
  for (uint32_t r = 0; r < p; ++r) {
    EXPECT_EQ(CompareBytes(host[r], healthy[r], proto::DataTypeSize(dtype)), "") << "rank " << r;
  }
}

}  // namespace
}  // namespace netfold::host::algorithms
