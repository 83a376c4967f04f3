// The control API of SwitchDataPlane: QPs (automatic and fixed numbers,
// connect, destroy), group installation and its validation, quotas per job
// and per switch, epoch replacement, and removal freeing every slot.
#include "switch/switch_data_plane.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;
using transport::QpState;

constexpr Ipv4Endpoint kSwitch{0x0a000001, 4791};
constexpr uint16_t kPkey = 0x8001;
constexpr uint32_t kQkey = 0x5eed;

Ipv4Endpoint HostAddress(int i) { return {0x0a000100u + static_cast<uint32_t>(i), 4791}; }

class DataPlaneTest : public ::testing::Test {
 protected:
  struct Host {
    std::unique_ptr<transport::RoceEndpoint> ep;
    transport::RcQueuePair* rc = nullptr;
    uint32_t switch_qpn = 0;
  };

  void MakeSwitch(SwitchConfig config = {}, uint32_t packet_buffers = 1024) {
    config.name = "s0";
    config.psn_seed = 42;
    config.ack_timeout = absl::Milliseconds(1);
    auto port = net_.CreatePort({.local = kSwitch, .pool = {.num_buffers = packet_buffers}});
    ASSERT_TRUE(port.ok());
    port_ = port->get();
    dp_ = std::make_unique<SwitchDataPlane>(std::move(*port), clock_, config);
  }

  // A host whose RC QP is connected to a new switch QP of `job`, for job
  // rank `rank`.
  Host& AddHost(uint64_t job = 1, uint16_t pkey = kPkey, uint32_t rank = 0) {
    auto h = std::make_unique<Host>();
    const int i = static_cast<int>(hosts_.size());
    h->ep = std::make_unique<transport::RoceEndpoint>(
        *net_.CreatePort({.local = HostAddress(i)}), clock_);
    h->rc = *h->ep->CreateRcQp();
    transport::RcQpAttributes attrs;
    attrs.pkey = pkey;
    attrs.timeout = absl::Milliseconds(1);
    EXPECT_TRUE(h->rc->Modify(QpState::kInit, attrs).ok());
    const uint32_t host_psn = 100 + static_cast<uint32_t>(i);
    absl::StatusOr<QpCreated> qp =
        dp_->CreateQp({.job_id = job, .pkey = pkey, .remote = HostAddress(i),
                       .remote_qpn = h->rc->qpn(), .remote_psn = host_psn, .peer = "host",
                       .rank = rank});
    EXPECT_TRUE(qp.ok()) << qp.status();
    attrs.remote = kSwitch;
    attrs.remote_qpn = qp->qpn;
    attrs.rq_psn = qp->psn;
    attrs.sq_psn = host_psn;
    EXPECT_TRUE(h->rc->Modify(QpState::kRtr, attrs).ok());
    EXPECT_TRUE(h->rc->Modify(QpState::kRts, attrs).ok());
    h->switch_qpn = qp->qpn;
    hosts_.push_back(std::move(h));
    return *hosts_.back();
  }

  GroupSpec Spec(uint32_t group, const std::vector<uint32_t>& qpns, uint64_t job = 1,
                 uint32_t slots = 4) {
    GroupSpec g;
    g.job_id = job;
    g.tree_id = 3;
    g.group_id = group;
    g.epoch = 1;
    g.pkey = kPkey;
    g.qkey = kQkey;
    g.num_slots = slots;
    g.slot_bytes = 256;
    for (size_t i = 0; i < qpns.size(); ++i) {
      g.children.push_back({qpns[i], {static_cast<uint32_t>(i)}});
    }
    return g;
  }

  void Run(int steps) {
    for (int i = 0; i < steps; ++i) {
      dp_->RunOnce(absl::ZeroDuration());
      for (auto& h : hosts_) h->ep->Progress(absl::ZeroDuration());
      clock_.Advance(absl::Microseconds(50));
    }
  }

  // An allreduce request (4 int32) for `seq` of group `group` from host `h`.
  void Request(Host& h, uint32_t group, uint64_t seq, uint32_t epoch = 1) {
    proto::AggregationHeader hdr;
    hdr.tree_id = 3;
    hdr.group_id = group;
    hdr.epoch = epoch;
    hdr.dtype = proto::DataType::kInt32;
    hdr.op = proto::ReduceOp::kSum;
    hdr.count = 4;
    hdr.has_data = true;
    hdr.seq = seq;
    std::vector<uint8_t> elements(16, 1);
    std::vector<uint8_t> msg(proto::kAggregationHeaderSize + 16);
    ASSERT_TRUE(proto::EncodeAggregationMessage(hdr, elements, msg).ok());
    ASSERT_TRUE(h.rc->PostSend(msg, 0).ok());
  }

  // Aggregation messages host `h` received (headers only).
  std::vector<proto::AggregationHeader> Received(Host& h) {
    std::vector<proto::AggregationHeader> out;
    transport::RecvMessage m;
    while (h.rc->PeekRecv(&m)) {
      absl::StatusOr<proto::AggregationHeader> hdr = proto::DecodeAggregationMessage(m.data);
      EXPECT_TRUE(hdr.ok()) << hdr.status();
      if (hdr.ok()) out.push_back(*hdr);
      h.rc->PopRecv();
    }
    return out;
  }

  FakeClock clock_{absl::Seconds(1)};
  transport::MemoryNetwork net_;
  std::unique_ptr<SwitchDataPlane> dp_;
  transport::MemoryPort* port_ = nullptr;  // dp_'s
  std::vector<std::unique_ptr<Host>> hosts_;
};

TEST_F(DataPlaneTest, QpsAreCreatedInInitConnectedAndDestroyed) {
  MakeSwitch();
  absl::StatusOr<QpCreated> a = dp_->CreateQp({.peer = "child switch"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_LE(a->psn, 0xffffffu);
  EXPECT_EQ(dp_->endpoint().FindRcQp(a->qpn)->state(), QpState::kInit);
  ASSERT_TRUE(dp_->ConnectQp(a->qpn, HostAddress(9), 0x321, 5).ok());
  EXPECT_EQ(dp_->endpoint().FindRcQp(a->qpn)->state(), QpState::kRts);
  EXPECT_EQ(dp_->ConnectQp(0x777, HostAddress(9), 0x321, 5).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dp_->num_qps(), 1u);
  EXPECT_EQ(dp_->QpJobId(a->qpn), 0u);
  ASSERT_TRUE(dp_->DestroyQp(a->qpn).ok());
  EXPECT_EQ(dp_->DestroyQp(a->qpn).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dp_->num_qps(), 0u);
}

TEST_F(DataPlaneTest, FixedQpnAndPsnForStaticPeers) {
  MakeSwitch();
  absl::StatusOr<QpCreated> a = dp_->CreateQp({.job_id = 1, .pkey = kPkey, .qpn = 0x500, .psn = 77});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->qpn, 0x500u);
  EXPECT_EQ(a->psn, 77u);
  EXPECT_EQ(dp_->CreateQp({.qpn = 0x500}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(dp_->CreateQp({.qpn = 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dp_->CreateQp({.qpn = 0xffffff}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dp_->CreateQp({.psn = 0x1000000}).status().code(), absl::StatusCode::kInvalidArgument);
  // A refused request leaves nothing behind and does not count against quotas.
  EXPECT_EQ(dp_->num_qps(), 1u);
  // Automatic numbering skips a QPN taken by a fixed one.
  transport::RoceEndpoint& ep = dp_->endpoint();
  ASSERT_TRUE(ep.CreateRcQpWithQpn(0x101).ok());
  EXPECT_EQ(ep.CreateRcQpWithQpn(0x101).status().code(), absl::StatusCode::kAlreadyExists);
  std::vector<uint32_t> auto_qpns;
  for (int i = 0; i < 4; ++i) auto_qpns.push_back((*ep.CreateRcQp())->qpn());
  for (uint32_t q : auto_qpns) {
    EXPECT_NE(q, 0x101u);
    EXPECT_NE(q, 0x500u);
  }
}

TEST_F(DataPlaneTest, QpQuotasPerJobAndPerSwitch) {
  SwitchConfig config;
  config.max_qps = 4;
  config.default_quota.max_qps = 2;
  MakeSwitch(config);
  ASSERT_TRUE(dp_->CreateQp({.job_id = 7, .pkey = kPkey}).ok());
  ASSERT_TRUE(dp_->CreateQp({.job_id = 7, .pkey = kPkey}).ok());
  absl::StatusOr<QpCreated> over = dp_->CreateQp({.job_id = 7, .pkey = kPkey});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("quota"), std::string::npos) << over.status();
  // Another job has its own quota; a raised quota lets job 7 go on.
  dp_->SetJobQuota(7, {.max_qps = 3});
  ASSERT_TRUE(dp_->CreateQp({.job_id = 7, .pkey = kPkey}).ok());
  ASSERT_TRUE(dp_->CreateQp({.job_id = 8, .pkey = kPkey}).ok());
  // The switch is full now, whatever the quota.
  absl::StatusOr<QpCreated> full = dp_->CreateQp({.peer = "switch"});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("QPs are in use"), std::string::npos) << full.status();
}

TEST_F(DataPlaneTest, InstallGroupValidatesItsSpec) {
  MakeSwitch({.max_slot_bytes = 1024});
  Host& h0 = AddHost();
  Host& h1 = AddHost();
  Host& other = AddHost(/*job=*/2);
  auto code = [&](const GroupSpec& g) { return dp_->InstallGroup(g).code(); };

  EXPECT_EQ(code(Spec(1, {})), absl::StatusCode::kInvalidArgument);  // no children
  GroupSpec g = Spec(1, {h0.switch_qpn, h1.switch_qpn});
  g.slot_bytes = 100;  // not a multiple of 16
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  g.slot_bytes = 2048;  // above this switch's capacity
  EXPECT_EQ(code(g), absl::StatusCode::kResourceExhausted);
  g = Spec(1, {h0.switch_qpn, 0x7777});  // a QP that does not exist
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  g = Spec(1, {h0.switch_qpn, other.switch_qpn});  // another job's QP
  EXPECT_EQ(code(g), absl::StatusCode::kPermissionDenied);
  g = Spec(1, {h0.switch_qpn, h0.switch_qpn});  // a QP twice
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  g = Spec(1, {h0.switch_qpn, h1.switch_qpn});
  g.parent_qpn = h1.switch_qpn;  // parent and child at once
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  g = Spec(1, {h0.switch_qpn, h1.switch_qpn});
  g.multicast = Ipv4Endpoint{0x0a000009, 4791};  // not a multicast address
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  g.num_slots = 0;
  EXPECT_EQ(code(g), absl::StatusCode::kInvalidArgument);
  // None of that left anything behind.
  EXPECT_EQ(dp_->num_groups(), 0u);
  EXPECT_EQ(dp_->num_slots_used(), 0u);

  g = Spec(1, {h0.switch_qpn, h1.switch_qpn});
  g.multicast = Ipv4Endpoint{0xef010001, 4791};
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  EXPECT_EQ(dp_->num_groups(), 1u);
  EXPECT_EQ(dp_->num_slots_used(), 4u);
  // A QP in use by a group cannot be destroyed.
  EXPECT_EQ(dp_->DestroyQp(h0.switch_qpn).code(), absl::StatusCode::kFailedPrecondition);
}

// A group's receive memory is made resident when it is installed: K
// messages of header and P bytes (and their packets' headers) from each
// child across the port, added up over the groups installed.
TEST_F(DataPlaneTest, InstallGroupReservesReceiveMemoryForKMessagesPerChild) {
  MakeSwitch();
  const uint32_t a = AddHost().switch_qpn, b = AddHost().switch_qpn, c = AddHost().switch_qpn;
  EXPECT_EQ(port_->reserved_receive_bytes(), 0u);
  ASSERT_TRUE(dp_->InstallGroup(Spec(1, {a, b, c}, 1, 8)).ok());
  const size_t message = proto::kAggregationHeaderSize + 256;
  const size_t first = port_->reserved_receive_bytes();
  EXPECT_GE(first, 3 * 8 * message);
  EXPECT_LE(first, 3 * 8 * (message + 128)) << "a packet's headers are not a KiB";
  ASSERT_TRUE(dp_->InstallGroup(Spec(2, {a, b}, 1, 4)).ok());
  EXPECT_GE(port_->reserved_receive_bytes(), first + 2 * 4 * message) << "both groups' room";
  EXPECT_EQ(dp_->num_spare_inbox_buffers(0), 0u) << "no child is in this process";
}

TEST_F(DataPlaneTest, GroupAndSlotQuotasPerJobAndPerSwitch) {
  SwitchConfig config;
  config.max_groups = 3;
  config.max_slots = 16;
  config.default_quota = {.max_groups = 2, .max_slots = 12, .max_qps = 16};
  MakeSwitch(config);
  Host& a0 = AddHost(1);
  Host& a1 = AddHost(1);
  Host& b0 = AddHost(2);
  const std::vector<uint32_t> job1 = {a0.switch_qpn, a1.switch_qpn};
  ASSERT_TRUE(dp_->InstallGroup(Spec(1, job1, 1, 4)).ok());
  ASSERT_TRUE(dp_->InstallGroup(Spec(2, job1, 1, 4)).ok());
  // The job's third group: over its group quota.
  absl::Status s = dp_->InstallGroup(Spec(3, job1, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("quota of 2 groups"), std::string::npos) << s;
  // Slots: a raised group quota, but 8 + 8 > 12 slots.
  dp_->SetJobQuota(1, {.max_groups = 4, .max_slots = 12, .max_qps = 16});
  s = dp_->InstallGroup(Spec(3, job1, 1, 8));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("its quota is 12"), std::string::npos) << s;
  // Job 2 is within its own quota, but the switch runs out: 8 + 12 > 16.
  s = dp_->InstallGroup(Spec(4, {b0.switch_qpn}, 2, 12));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("out of capacity"), std::string::npos) << s;
  ASSERT_TRUE(dp_->InstallGroup(Spec(4, {b0.switch_qpn}, 2, 4)).ok());
  // Three groups: the switch's group capacity.
  s = dp_->InstallGroup(Spec(5, job1, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(dp_->num_slots_used(), 12u);
  // Removing a group gives its slots and its entry back.
  ASSERT_TRUE(dp_->RemoveGroup(3, 1).ok());
  EXPECT_EQ(dp_->num_slots_used(), 8u);
  ASSERT_TRUE(dp_->InstallGroup(Spec(5, job1, 1, 8)).ok());
  EXPECT_EQ(dp_->num_slots_used(), 16u);
}

TEST_F(DataPlaneTest, EpochsReplaceOlderOnesAndRefuseStaleOnes) {
  MakeSwitch();
  Host& h0 = AddHost();
  Host& h1 = AddHost();
  GroupSpec g = Spec(9, {h0.switch_qpn, h1.switch_qpn});
  g.epoch = 5;
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  ASSERT_TRUE(dp_->InstallGroup(g).ok());  // the same again: nothing changes
  EXPECT_EQ(dp_->num_groups(), 1u);
  EXPECT_EQ(dp_->num_slots_used(), 4u);
  // Host 0 starts an operation under epoch 5.
  Request(h0, 9, 0, 5);
  Run(20);
  EXPECT_EQ(dp_->num_busy_slots(), 1u);

  GroupSpec older = g;
  older.epoch = 4;
  EXPECT_EQ(dp_->InstallGroup(older).code(), absl::StatusCode::kFailedPrecondition);

  GroupSpec newer = g;
  newer.epoch = 6;
  newer.num_slots = 8;
  ASSERT_TRUE(dp_->InstallGroup(newer).ok());
  EXPECT_EQ(dp_->num_groups(), 1u);
  EXPECT_EQ(dp_->num_slots_used(), 8u);  // the old slots were released
  EXPECT_EQ(dp_->num_busy_slots(), 0u);  // the in-flight operation was aborted
  Run(20);
  std::vector<proto::AggregationHeader> got = Received(h0);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().type, proto::AggregationMessageType::kAbort);
  // A request of the old epoch now gets a stale_epoch abort.
  Request(h1, 9, 0, 5);
  Run(20);
  got = Received(h1);
  bool stale = false;
  for (const auto& hdr : got) stale = stale || hdr.status == proto::AggregationStatus::kStaleEpoch;
  EXPECT_TRUE(stale);
}

TEST_F(DataPlaneTest, RemoveGroupAbortsInFlightOperationsAndFreesEverySlot) {
  MakeSwitch();
  Host& h0 = AddHost();
  Host& h1 = AddHost();
  GroupSpec g = Spec(4, {h0.switch_qpn, h1.switch_qpn}, 1, 4);
  g.multicast = Ipv4Endpoint{0xef010004, 4791};
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  // Three operations in flight, each waiting for host 1.
  for (uint64_t s = 0; s < 3; ++s) Request(h0, 4, s);
  Run(30);
  EXPECT_EQ(dp_->num_busy_slots(), 3u);

  EXPECT_EQ(dp_->RemoveGroup(3, 4, /*epoch=*/2).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(dp_->RemoveGroup(1, 4).code(), absl::StatusCode::kNotFound);  // another tree
  ASSERT_TRUE(dp_->RemoveGroup(3, 4, 1).ok());
  EXPECT_EQ(dp_->num_groups(), 0u);
  EXPECT_EQ(dp_->num_slots_used(), 0u);
  EXPECT_EQ(dp_->num_busy_slots(), 0u);
  EXPECT_EQ(dp_->RemoveGroup(3, 4).code(), absl::StatusCode::kNotFound);
  Run(30);
  for (Host* h : {&h0, &h1}) {
    std::vector<proto::AggregationHeader> got = Received(*h);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back().type, proto::AggregationMessageType::kAbort);
    EXPECT_EQ(got.back().status, proto::AggregationStatus::kAborted);
  }
  // Its QPs are free to go now; later requests for the group are counted drops.
  Request(h1, 4, 0);
  Run(20);
  EXPECT_EQ(dp_->counters().drops[static_cast<size_t>(SwitchDropReason::kUnknownGroup)].load(), 1u);
  // And so is an abort from a host (only a parent switch's abort of a group
  // removed here first is not: HostFabric.AJobHoldsAsManyGroupsAsTheManagerGrantsIt).
  proto::AggregationHeader abort;
  abort.type = proto::AggregationMessageType::kAbort;
  abort.tree_id = 3;
  abort.group_id = 4;
  abort.epoch = 1;
  abort.collective = proto::CollectiveType::kBarrier;
  abort.status = proto::AggregationStatus::kAborted;
  std::vector<uint8_t> msg(proto::kAggregationHeaderSize);
  ASSERT_TRUE(proto::EncodeAggregationMessage(abort, {}, msg).ok());
  ASSERT_TRUE(h1.rc->PostSend(msg, 0).ok());
  Run(20);
  EXPECT_EQ(dp_->counters().drops[static_cast<size_t>(SwitchDropReason::kUnknownGroup)].load(), 2u);
  ASSERT_TRUE(dp_->DestroyQp(h0.switch_qpn).ok());
}

// A pass handles a job's QPs in rank order, the order a group folds its
// host children in: contributions that arrive together are folded as they
// are handled, none waits in the slot, though the QPs were created (and
// numbered) in the opposite order.
TEST_F(DataPlaneTest, APassHandlesHostQpsInRankOrderSoArrivalsAreFoldedInPlace) {
  MakeSwitch();
  std::vector<Host*> by_rank(4);
  for (uint32_t rank : {3u, 2u, 1u, 0u}) by_rank[rank] = &AddHost(1, kPkey, rank);
  ASSERT_GT(by_rank[0]->switch_qpn, by_rank[3]->switch_qpn);
  GroupSpec g = Spec(4, {by_rank[0]->switch_qpn, by_rank[1]->switch_qpn, by_rank[2]->switch_qpn,
                         by_rank[3]->switch_qpn});
  g.multicast = Ipv4Endpoint{0xef010004, 4791};
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  for (uint64_t s = 0; s < 4; ++s) {
    for (Host* h : by_rank) Request(*h, 4, s);
  }
  for (Host* h : by_rank) h->ep->Progress(absl::ZeroDuration());
  dp_->RunOnce(absl::ZeroDuration());
  uint64_t completed = 0, buffered = 0;
  dp_->ForEachNode([&](const GroupSpec&, const AggregationNode& node) {
    completed += node.counters().operations_completed.load();
    buffered += node.counters().contributions_buffered.load();
  });
  EXPECT_EQ(completed, 4u) << "every contribution arrived in the one pass";
  EXPECT_EQ(buffered, 0u);
}

// Contributions that come before their turn wait in the packet buffers
// they arrived in, at most a quarter of the port's pool at a time (16 of
// 64 here); the rest are copied into their slot. Once the first child's
// come, all of them are folded and every buffer goes back to the pool.
TEST_F(DataPlaneTest, EarlyContributionsWaitInTheirPacketBuffersWithinABudget) {
  MakeSwitch({}, 64);
  std::vector<Host*> by_rank(4);
  for (uint32_t rank : {0u, 1u, 2u, 3u}) by_rank[rank] = &AddHost(1, kPkey, rank);
  GroupSpec g = Spec(4, {by_rank[0]->switch_qpn, by_rank[1]->switch_qpn, by_rank[2]->switch_qpn,
                         by_rank[3]->switch_qpn});
  g.num_slots = 8;
  g.multicast = Ipv4Endpoint{0xef010004, 4791};
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  transport::PacketPool& pool = dp_->endpoint().port().pool();
  Run(5);
  const uint32_t idle = pool.num_in_use();
  auto counters = [&](uint64_t* completed, uint64_t* waited, uint64_t* copied) {
    *completed = *waited = *copied = 0;
    dp_->ForEachNode([&](const GroupSpec&, const AggregationNode& node) {
      *completed += node.counters().operations_completed.load();
      *waited += node.counters().contributions_buffered.load();
      *copied += node.counters().contributions_copied.load();
    });
  };
  for (uint64_t s = 0; s < 8; ++s) {
    for (size_t r = 1; r < 4; ++r) Request(*by_rank[r], 4, s);
  }
  for (int i = 0; i < 50 && dp_->num_busy_slots() < 8; ++i) Run(1);
  for (int i = 0; i < 5; ++i) dp_->RunOnce(absl::ZeroDuration());
  uint64_t completed, waited, copied;
  counters(&completed, &waited, &copied);
  EXPECT_EQ(completed, 0u);
  EXPECT_EQ(waited, 24u);
  EXPECT_EQ(copied, 8u) << "16 kept (a quarter of 64 buffers), the rest copied";
  EXPECT_EQ(pool.num_in_use(), idle + 16);
  for (uint64_t s = 0; s < 8; ++s) Request(*by_rank[0], 4, s);
  for (int i = 0; i < 50 && completed < 8; ++i) {
    Run(1);
    counters(&completed, &waited, &copied);
  }
  EXPECT_EQ(completed, 8u);
  EXPECT_EQ(dp_->num_busy_slots(), 0u);
  Run(5);
  EXPECT_EQ(pool.num_in_use(), idle);
}

// Integrity at the switch (docs/security.md): a group installed with the
// job's key takes a tagged request, drops an untagged one and one with
// another key's tag (aggregation.bad_tag: num_bad_tags), answers with a
// tagged result; the count outlives the group. A key on a slot that cannot
// hold a tag is refused.
TEST_F(DataPlaneTest, AGroupWithAKeyDropsAndCountsUntaggedRequests) {
  MakeSwitch();
  Host& h0 = AddHost();
  Host& h1 = AddHost();
  proto::AggregationKey key;
  key.fill(5);
  proto::AggregationKey other = key;
  other[3] ^= 1;
  GroupSpec g = Spec(6, {h0.switch_qpn, h1.switch_qpn});
  g.integrity_key = key;
  GroupSpec tiny = g;
  tiny.group_id = 7;
  tiny.slot_bytes = 16;
  EXPECT_EQ(dp_->InstallGroup(tiny).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(dp_->InstallGroup(g).ok());
  auto tagged = [&](Host& h, const proto::AggregationKey* k) {
    proto::AggregationHeader hdr;
    hdr.tree_id = 3;
    hdr.group_id = 6;
    hdr.epoch = 1;
    hdr.dtype = proto::DataType::kInt32;
    hdr.op = proto::ReduceOp::kSum;
    hdr.count = 4;
    hdr.has_data = true;
    hdr.has_tag = true;
    std::vector<uint8_t> elements(16, 1);
    std::vector<uint8_t> msg(proto::kAggregationHeaderSize + 16 + proto::kAggregationTagSize);
    ASSERT_TRUE(proto::EncodeAggregationMessage(hdr, elements, msg).ok());
    ASSERT_TRUE(proto::AppendAggregationTag(*k, msg, proto::kAggregationHeaderSize + 16).ok());
    ASSERT_TRUE(h.rc->PostSend(msg, 0).ok());
  };
  tagged(h0, &key);
  Request(h1, 6, 0);  // untagged
  tagged(h1, &other);
  Run(30);
  EXPECT_EQ(dp_->num_bad_tags(), 2u);
  EXPECT_EQ(dp_->num_busy_slots(), 1u) << "a dropped request completed the operation";
  tagged(h1, &key);
  Run(30);
  EXPECT_EQ(dp_->num_busy_slots(), 0u);
  ASSERT_TRUE(dp_->RemoveGroup(3, 6, 1).ok());
  EXPECT_EQ(dp_->num_bad_tags(), 2u) << "the count went with the group";
}

// An idle data plane on a socket sleeps long in receive (the daemon's
// kIdleWaitWoken); a command posted from another thread wakes it at once.
TEST(DataPlaneWake, APostedCommandEndsALongIdleWait) {
  auto port = transport::UdpPort::Create({.local = {0x7f000001, 0}, .pool = {.num_buffers = 64}});
  ASSERT_TRUE(port.ok()) << port.status();
  SwitchConfig config;
  config.name = "s0";
  SwitchDataPlane dp(std::move(*port), RealClock(), config);
  ASSERT_TRUE(dp.CanWake());
  std::atomic<bool> ran{false};
  std::thread loop([&] {
    // At most 30 passes of 10 s each: a wake that does not work fails the
    // deadline below long before this ends.
    for (int i = 0; i < 30 && !ran.load(); ++i) dp.RunOnce(absl::Seconds(10));
  });
  absl::SleepFor(absl::Milliseconds(20));  // let the loop reach its wait
  const absl::Time posted = absl::Now();
  dp.Post([&](SwitchDataPlane&) { ran.store(true); });
  while (!ran.load() && absl::Now() - posted < absl::Seconds(5)) absl::SleepFor(absl::Milliseconds(1));
  const absl::Duration took = absl::Now() - posted;
  EXPECT_TRUE(ran.load());
  EXPECT_LT(took, absl::Seconds(2)) << "the command waited for the idle wait to end";
  if (!ran.load()) {
    dp.Post([&](SwitchDataPlane&) { ran.store(true); });  // let the loop end
  }
  loop.join();
}

}  // namespace
}  // namespace netfold::sw
