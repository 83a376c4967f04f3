// Issue 23, item 2: forged data over RC. A process on a rank's machine (its
// IP address, another UDP port) knows everything the switch's admin API
// used to show: the switch QP's number, the job's P_Key and the PSN the QP
// expects next. It sends a contribution of its own at that PSN before the
// rank does. The switch must drop it (wrong_source) and the operation's
// result must stay exact on every rank.
//
// An in-process fabric (tests/integration/in_process_fabric.h): switches and
// host engines over the real transport on an in-memory network.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "proto/roce_packet.h"
#include "tests/integration/in_process_fabric.h"

namespace netfold::testing {
namespace {

constexpr size_t kCount = 64;

// Starts an int32 sum of kCount elements on every rank (rank r contributes
// r + 1 + k everywhere) and steps until every rank has its result.
std::vector<std::vector<int32_t>> AllreduceOnEveryRank(InProcessFabric& fabric, int k) {
  const int n = fabric.num_hosts();
  std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(kCount, -1));
  std::vector<host::CollectiveArgs> args(n);
  for (int r = 0; r < n; ++r) {
    in[r].assign(kCount, r + 1 + k);
    args[r].collective = proto::CollectiveType::kAllreduce;
    args[r].dtype = proto::DataType::kInt32;
    args[r].op = proto::ReduceOp::kSum;
    args[r].count = kCount;
    args[r].send = in[r].data();
    args[r].recv = out[r].data();
  }
  auto ops = fabric.StartOnEveryRank(1, args);
  EXPECT_TRUE(fabric.RunUntilDone(1, ops, 200000));
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(fabric.engine(1, r).Finish(ops[r]).ok()) << "rank " << r;
  }
  return out;
}

TEST(ForgedRcData, AContributionFromAnotherPortOfTheRanksAddressIsDropped) {
  InProcessFabric fabric(TreeShape::OneLevel(4));
  fabric.CreateGroup(1, {.num_slots = 4, .slot_bytes = 512});
  (void)AllreduceOnEveryRank(fabric, 0);
  // Let every ACK arrive: rank 0's QP has nothing outstanding.
  transport::RcQueuePair& victim = fabric.host_qp(0);
  for (int i = 0; i < 10000 && victim.num_outstanding() > 0; ++i) fabric.Step();
  ASSERT_EQ(victim.num_outstanding(), 0u);

  // What the forger knows: the switch QP, the P_Key, the expected PSN, the
  // group and the next operation's sequence number.
  const transport::RcQpAttributes& a = victim.attributes();
  const uint32_t expected_psn =
      (a.sq_psn + static_cast<uint32_t>(victim.counters().packets_sent.load())) & 0xffffff;
  const transport::Ipv4Endpoint leaf = a.remote;
  const transport::Ipv4Endpoint forger_address{fabric.host_endpoint(0).local().ip, 40000};
  auto forger = fabric.network().CreatePort({.local = forger_address});
  ASSERT_TRUE(forger.ok()) << forger.status();

  proto::AggregationHeader h;
  h.type = proto::AggregationMessageType::kRequest;
  h.collective = proto::CollectiveType::kAllreduce;
  h.dtype = proto::DataType::kInt32;
  h.op = proto::ReduceOp::kSum;
  h.delivery = proto::DeliveryMode::kMulticast;
  h.has_data = true;
  h.tree_id = fabric.engine(1, 0).params().tree_id;
  h.group_id = 1;
  h.epoch = fabric.engine(1, 0).params().epoch;
  h.count = kCount;
  h.seq = fabric.engine(1, 0).next_seq();
  const std::vector<int32_t> evil(kCount, 1000000);
  std::vector<uint8_t> message(proto::kAggregationHeaderSize + kCount * sizeof(int32_t));
  ASSERT_TRUE(proto::EncodeAggregationMessage(
                  h, {reinterpret_cast<const uint8_t*>(evil.data()), kCount * sizeof(int32_t)},
                  message)
                  .ok());
  proto::RocePacketSpec spec;
  spec.bth.opcode = proto::BthOpcode::kRcSendOnly;
  spec.bth.pkey = a.pkey;
  spec.bth.dest_qp = a.remote_qpn;
  spec.bth.psn = expected_psn;
  spec.bth.ack_req = true;
  transport::PacketBuffer* p = (*forger)->pool().Alloc();
  ASSERT_NE(p, nullptr);
  const proto::IcrcAddresses addrs{forger_address.ip, leaf.ip, forger_address.port, leaf.port};
  auto len = proto::BuildRocePacket(spec, message, addrs, {p->data(), p->capacity()});
  ASSERT_TRUE(len.ok()) << len.status();
  p->set_len(static_cast<uint32_t>(*len));
  p->dst = leaf;
  ASSERT_EQ((*forger)->SendBurst({&p, 1}), 1u);
  for (int i = 0; i < 10; ++i) fabric.Step();

  const auto out = AllreduceOnEveryRank(fabric, 1);
  const int32_t want = 1 + 2 + 3 + 4 + 4 * 1;
  for (int r = 0; r < fabric.num_hosts(); ++r) {
    EXPECT_EQ(out[r], std::vector<int32_t>(kCount, want)) << "rank " << r;
  }
  transport::RcQueuePair* switch_qp = fabric.switch_plane(0).endpoint().FindRcQp(a.remote_qpn);
  ASSERT_NE(switch_qp, nullptr);
  EXPECT_EQ(switch_qp->counters().drops.Get(transport::QpDropReason::kWrongSource), 1u);
  EXPECT_EQ(switch_qp->state(), transport::QpState::kRts);
}

}  // namespace
}  // namespace netfold::testing
