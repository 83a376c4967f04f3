// DataPlaneThread: two switches (a leaf and its root) on one thread over
// real UDP ports on loopback, hosts in the test thread. The thread's idle
// wait is long (30 s), so anything that depended on it instead of a packet,
// a QP timer or a Post would time out here.
#include "switch/data_plane_thread.h"

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;
using transport::QpState;

constexpr uint16_t kPkey = 0x8001;
constexpr absl::Duration kIdle = absl::Seconds(30);
constexpr absl::Duration kDeadline = absl::Seconds(5);

std::unique_ptr<transport::Port> Loopback() {
  auto port = transport::UdpPort::Create({.local = {0x7f000001, 0}});
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? std::move(*port) : nullptr;
}

// Runs `fn` on the data-plane thread; false if it did not run within kDeadline.
bool OnThread(SwitchDataPlane& dp, std::function<void(SwitchDataPlane&)> fn) {
  return dp.PostAndWait(std::move(fn), kDeadline);
}

class DataPlaneThreadTest : public ::testing::Test {
 protected:
  struct Host {
    std::unique_ptr<transport::RoceEndpoint> ep;
    transport::RcQueuePair* rc = nullptr;
  };

  // A switch whose port can take link faults (as netfold-switchd's does).
  std::unique_ptr<SwitchDataPlane> Plane(const std::string& name, bool in_process_links = false,
                                         transport::ImpairedPort** port = nullptr) {
    SwitchConfig c;
    c.name = name;
    c.psn_seed = 7;
    c.in_process_links = in_process_links;
    auto impaired = std::make_unique<transport::ImpairedPort>(Loopback(), RealClock());
    if (port != nullptr) *port = impaired.get();
    return std::make_unique<SwitchDataPlane>(std::move(impaired), RealClock(), c);
  }

  // A host whose RC QP is connected to a new QP of `leaf`. Its ACK timeout
  // is long: only the switch's own ACK timer can complete its sends in time.
  void AddHost(SwitchDataPlane& leaf) {
    auto h = std::make_unique<Host>();
    h->ep = std::make_unique<transport::RoceEndpoint>(Loopback(), RealClock());
    h->rc = *h->ep->CreateRcQp();
    transport::RcQpAttributes attrs;
    attrs.pkey = kPkey;
    attrs.timeout = absl::Seconds(20);
    ASSERT_TRUE(h->rc->Modify(QpState::kInit, attrs).ok());
    absl::StatusOr<QpCreated> qp;
    const Ipv4Endpoint local = h->ep->local();
    const uint32_t qpn = h->rc->qpn();
    ASSERT_TRUE(OnThread(leaf, [&](SwitchDataPlane& dp) {
      qp = dp.CreateQp({.job_id = 1, .pkey = kPkey, .remote = local, .remote_qpn = qpn,
                        .remote_psn = 100, .peer = "host"});
    }));
    ASSERT_TRUE(qp.ok()) << qp.status();
    attrs.remote = leaf.local();
    attrs.remote_qpn = qp->qpn;
    attrs.rq_psn = qp->psn;
    attrs.sq_psn = 100;
    ASSERT_TRUE(h->rc->Modify(QpState::kRtr, attrs).ok());
    ASSERT_TRUE(h->rc->Modify(QpState::kRts, attrs).ok());
    host_qpns_.push_back(qp->qpn);
    hosts_.push_back(std::move(h));
  }

  // A request of 4 int32 (all `value`) for operation `seq`.
  void Request(Host& h, uint64_t seq, uint8_t value) {
    proto::AggregationHeader hdr;
    hdr.tree_id = 1;
    hdr.group_id = 5;
    hdr.epoch = 1;
    hdr.dtype = proto::DataType::kInt32;
    hdr.op = proto::ReduceOp::kSum;
    hdr.delivery = proto::DeliveryMode::kRcTree;
    hdr.count = 4;
    hdr.has_data = true;
    hdr.seq = seq;
    std::vector<uint8_t> elements(16, 0);
    for (int i = 0; i < 4; ++i) elements[i * 4] = value;
    std::vector<uint8_t> msg(proto::kAggregationHeaderSize + 16);
    ASSERT_TRUE(proto::EncodeAggregationMessage(hdr, elements, msg).ok());
    ASSERT_TRUE(h.rc->PostSend(msg, seq).ok());
  }

  // The tree link: a QP of `leaf` toward `root` (up) and one of `root`
  // toward the leaf (down), connected both ways. With `down_names`, the
  // root's QP names that QP of the leaf instead of `up` (up still names
  // down). What runs on the thread writes only what it owns (a command
  // that outlives a timed-out wait writes nothing of the test's).
  struct TreeLink {
    QpCreated up, down;
  };
  void LinkLeafToRoot(SwitchDataPlane& leaf, SwitchDataPlane& root, TreeLink* link,
                      std::optional<QpCreated> down_names = std::nullopt) {
    auto up = std::make_shared<absl::StatusOr<QpCreated>>();
    ASSERT_TRUE(OnThread(leaf, [up](SwitchDataPlane& dp) { *up = dp.CreateQp({.peer = "root"}); }));
    ASSERT_TRUE(up->ok()) << up->status();
    const QpCreated named = down_names.value_or(**up);
    const Ipv4Endpoint leaf_address = leaf.local(), root_address = root.local();
    auto down = std::make_shared<absl::StatusOr<QpCreated>>();
    ASSERT_TRUE(OnThread(root, [down, named, leaf_address](SwitchDataPlane& dp) {
      *down = dp.CreateQp({.remote = leaf_address, .remote_qpn = named.qpn,
                           .remote_psn = named.psn, .peer = "leaf"});
    }));
    ASSERT_TRUE(down->ok()) << down->status();
    auto s = std::make_shared<absl::Status>();
    ASSERT_TRUE(OnThread(leaf, [s, u = **up, d = **down, root_address](SwitchDataPlane& dp) {
      *s = dp.ConnectQp(u.qpn, root_address, d.qpn, d.psn);
    }));
    ASSERT_TRUE(s->ok()) << *s;
    *link = {**up, **down};
  }

  // Installs group 5 (tree 1, epoch 1, 4 slots of 256 bytes) on `dp`.
  void InstallGroup(SwitchDataPlane& dp, std::vector<GroupChildSpec> children,
                    std::optional<uint32_t> parent_qpn) {
    GroupSpec g{.job_id = 1, .tree_id = 1, .group_id = 5, .epoch = 1, .pkey = kPkey,
                .num_slots = 4, .slot_bytes = 256};
    g.children = std::move(children);
    g.parent_qpn = parent_qpn;
    auto s = std::make_shared<absl::Status>();
    ASSERT_TRUE(OnThread(dp, [s, g](SwitchDataPlane& p) { *s = p.InstallGroup(g); }));
    ASSERT_TRUE(s->ok()) << *s;
  }

  // Waits for host `h`'s result of operation `seq` (4 int32 whose low
  // bytes are all `value`), checks and pops it.
  void ExpectResult(Host& h, uint64_t seq, uint8_t value) {
    transport::RecvMessage m;
    ASSERT_TRUE(RunHosts([&] { return h.rc->PeekRecv(&m); })) << "no result";
    absl::StatusOr<proto::AggregationHeader> hdr = proto::DecodeAggregationMessage(m.data);
    ASSERT_TRUE(hdr.ok()) << hdr.status();
    EXPECT_EQ(hdr->type, proto::AggregationMessageType::kResult);
    EXPECT_EQ(hdr->seq, seq);
    ASSERT_EQ(m.data.size(), proto::kAggregationHeaderSize + 16);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(m.data[proto::kAggregationHeaderSize + i * 4], value);
    h.rc->PopRecv();
  }

  // Progresses every host until `done` or kDeadline.
  bool RunHosts(const std::function<bool()>& done) {
    const absl::Time end = absl::Now() + kDeadline;
    while (!done()) {
      if (absl::Now() > end) return false;
      for (auto& h : hosts_) h->ep->Progress(absl::Milliseconds(1));
    }
    return true;
  }

  std::vector<std::unique_ptr<Host>> hosts_;
  std::vector<uint32_t> host_qpns_;
};

// Leaf and root on one thread: a request that causes nothing is
// acknowledged by the leaf's ACK timer (not after the 30 s idle wait), and
// the result climbs to the root and comes back down through both. With
// in-process links (the parameter) the tree link carries every message in
// memory until a link fault is set on the leaf's port, then over RC, and
// the results are the same.
class DataPlaneThreadLinks : public DataPlaneThreadTest,
                             public ::testing::WithParamInterface<bool> {};

TEST_P(DataPlaneThreadLinks, TwoSwitchesOnOneThreadAggregateAndKeepTheirTimers) {
  const bool in_process = GetParam();
  transport::ImpairedPort* leaf_port = nullptr;
  std::unique_ptr<SwitchDataPlane> leaf = Plane("leaf", in_process, &leaf_port);
  std::unique_ptr<SwitchDataPlane> root = Plane("root", in_process);
  DataPlaneThread thread({.idle_wait = kIdle, .name = "leaf+root"});
  ASSERT_TRUE(thread.Add(leaf.get(), [] {}).ok());
  ASSERT_TRUE(thread.Add(root.get(), [] {}).ok());
  EXPECT_EQ(thread.num_planes(), 2u);

  TreeLink link;
  ASSERT_NO_FATAL_FAILURE(LinkLeafToRoot(*leaf, *root, &link));
  AddHost(*leaf);
  AddHost(*leaf);
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(
      InstallGroup(*leaf, {{host_qpns_[0], {0}}, {host_qpns_[1], {1}}}, link.up.qpn));
  ASSERT_NO_FATAL_FAILURE(InstallGroup(*root, {{link.down.qpn, {0, 1}}}, std::nullopt));

  for (uint64_t seq = 0; seq < 16; ++seq) {
    SCOPED_TRACE(seq);
    if (seq == 8) {
      // In memory so far; a link fault (even none) puts the link on RC.
      EXPECT_EQ(leaf->counters().in_process_messages, in_process ? 8u : 0u);
      EXPECT_EQ(root->counters().in_process_messages, in_process ? 8u : 0u);
      leaf_port->SetAllImpairment(transport::LinkDirection::kBoth, transport::ImpairmentConfig{});
    }
    Request(*hosts_[0], seq, 2);
    const absl::Time sent = absl::Now();
    transport::SendCompletion sc;
    ASSERT_TRUE(RunHosts([&] { return hosts_[0]->rc->PollSendCompletion(&sc); }))
        << "the leaf did not acknowledge a request that completes nothing";
    EXPECT_TRUE(sc.status.ok()) << sc.status;
    EXPECT_LT(absl::Now() - sent, absl::Seconds(2));
    Request(*hosts_[1], seq, 3);
    for (auto& h : hosts_) ASSERT_NO_FATAL_FAILURE(ExpectResult(*h, seq, 5));
  }
  EXPECT_EQ(leaf->counters().in_process_messages, in_process ? 8u : 0u);
  EXPECT_EQ(root->counters().in_process_messages, in_process ? 8u : 0u);
  EXPECT_EQ(leaf->counters().messages_sent, 16u + 2 * 16u) << "up, and down to both hosts";
  EXPECT_EQ(leaf->counters().messages_to_switches, 16u) << "up";
  EXPECT_EQ(root->counters().messages_to_switches, 16u) << "down to the leaf";
  ASSERT_TRUE(OnThread(*leaf, [](SwitchDataPlane& dp) { (void)dp.RemoveGroup(1, 5); }));
  ASSERT_TRUE(OnThread(*root, [](SwitchDataPlane& dp) { (void)dp.RemoveGroup(1, 5); }));
  thread.Remove(leaf.get());
  thread.Remove(root.get());
}

INSTANTIATE_TEST_SUITE_P(InProcess, DataPlaneThreadLinks, ::testing::Bool());

// Two leaves and a root on one thread, linked in memory: a leaf's partial
// result that reaches the root before the one it is folded after waits in
// the buffer it was handed over in (kept, not copied), and every result is
// still the sum in tree order.
TEST_F(DataPlaneThreadTest, AnEarlyPartialFromALeafInProcessWaitsInItsBuffer) {
  std::unique_ptr<SwitchDataPlane> leaf0 = Plane("leaf0", true);
  std::unique_ptr<SwitchDataPlane> leaf1 = Plane("leaf1", true);
  std::unique_ptr<SwitchDataPlane> root = Plane("root", true);
  DataPlaneThread thread({.idle_wait = kIdle, .name = "leaves+root"});
  for (SwitchDataPlane* dp : {leaf0.get(), leaf1.get(), root.get()}) {
    ASSERT_TRUE(thread.Add(dp, [] {}).ok());
  }
  TreeLink link0, link1;
  ASSERT_NO_FATAL_FAILURE(LinkLeafToRoot(*leaf0, *root, &link0));
  ASSERT_NO_FATAL_FAILURE(LinkLeafToRoot(*leaf1, *root, &link1));
  AddHost(*leaf0);
  AddHost(*leaf1);
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(InstallGroup(*leaf0, {{host_qpns_[0], {0}}}, link0.up.qpn));
  ASSERT_NO_FATAL_FAILURE(InstallGroup(*leaf1, {{host_qpns_[1], {1}}}, link1.up.qpn));
  ASSERT_NO_FATAL_FAILURE(InstallGroup(
      *root, {{link0.down.qpn, {0}}, {link1.down.qpn, {1}}}, std::nullopt));
  // What crosses the in-process links lands in inbox buffers made when the
  // group was installed: K (4) per neighbour in this process, each room for
  // a header and P (256) bytes; the operations below return them.
  auto spare = [](SwitchDataPlane& dp) {
    auto n = std::make_shared<size_t>(0);
    EXPECT_TRUE(OnThread(dp, [n](SwitchDataPlane& p) {
      *n = p.num_spare_inbox_buffers(proto::kAggregationHeaderSize + 256);
    }));
    return *n;
  };
  EXPECT_EQ(spare(*root), 8u) << "two leaves";
  EXPECT_EQ(spare(*leaf0), 4u) << "the root";
  auto node_counters = [&](uint64_t* waited, uint64_t* copied) {
    auto w = std::make_shared<std::pair<uint64_t, uint64_t>>();
    ASSERT_TRUE(OnThread(*root, [w](SwitchDataPlane& dp) {
      dp.ForEachNode([&](const GroupSpec&, const AggregationNode& node) {
        w->first += node.counters().contributions_buffered.load();
        w->second += node.counters().contributions_copied.load();
      });
    }));
    *waited = w->first;
    *copied = w->second;
  };
  for (uint64_t seq = 0; seq < 8; ++seq) {
    SCOPED_TRACE(seq);
    // Rank 1's partial first: the root folds child 0 first, so it waits.
    Request(*hosts_[1], seq, 3);
    uint64_t waited = 0, copied = 0;
    const absl::Time end = absl::Now() + kDeadline;
    while (waited < seq + 1 && absl::Now() < end) {
      for (auto& h : hosts_) h->ep->Progress(absl::Milliseconds(1));
      ASSERT_NO_FATAL_FAILURE(node_counters(&waited, &copied));
    }
    ASSERT_EQ(waited, seq + 1) << "rank 1's partial never reached the root";
    EXPECT_EQ(copied, 0u);
    Request(*hosts_[0], seq, 2);
    for (auto& h : hosts_) ASSERT_NO_FATAL_FAILURE(ExpectResult(*h, seq, 5));
  }
  EXPECT_EQ(root->counters().in_process_messages, 16u) << "the results went down in memory";
  EXPECT_EQ(spare(*root), 8u) << "the reserved buffers were used and came back, no more made";
  EXPECT_EQ(spare(*leaf1), 4u);
  for (SwitchDataPlane* dp : {leaf0.get(), leaf1.get(), root.get()}) {
    ASSERT_TRUE(OnThread(*dp, [](SwitchDataPlane& p) { (void)p.RemoveGroup(1, 5); }));
    thread.Remove(dp);
  }
}

// An in-process link is used only toward a QP connected back to it: a
// leaf whose parent QP names a root QP that is connected to another QP
// sends over RC (the root's QP then refuses it, as RC would).
TEST_F(DataPlaneThreadTest, AnInProcessLinkNeedsThePeersQpConnectedBack) {
  std::unique_ptr<SwitchDataPlane> leaf = Plane("leaf", true), root = Plane("root", true);
  DataPlaneThread thread({.idle_wait = kIdle, .name = "leaf+root"});
  ASSERT_TRUE(thread.Add(leaf.get(), [] {}).ok());
  ASSERT_TRUE(thread.Add(root.get(), [] {}).ok());
  auto other = std::make_shared<absl::StatusOr<QpCreated>>();
  ASSERT_TRUE(
      OnThread(*leaf, [other](SwitchDataPlane& dp) { *other = dp.CreateQp({.peer = "unused"}); }));
  ASSERT_TRUE(other->ok()) << other->status();
  TreeLink link;
  ASSERT_NO_FATAL_FAILURE(LinkLeafToRoot(*leaf, *root, &link, **other));
  AddHost(*leaf);
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(InstallGroup(*leaf, {{host_qpns_[0], {0}}}, link.up.qpn));
  Request(*hosts_[0], 0, 2);
  const absl::Time end = absl::Now() + kDeadline;
  while (leaf->counters().messages_sent == 0 && absl::Now() < end) {
    hosts_[0]->ep->Progress(absl::Milliseconds(1));
  }
  EXPECT_EQ(leaf->counters().messages_sent, 1u) << "the request went up";
  EXPECT_EQ(leaf->counters().in_process_messages, 0u) << "not in memory";
  EXPECT_EQ(root->counters().messages_received, 0u);
  ASSERT_TRUE(OnThread(*leaf, [](SwitchDataPlane& dp) { (void)dp.RemoveGroup(1, 5); }));
  thread.Remove(leaf.get());
  thread.Remove(root.get());
}

// An in-process link whose peer QP goes away falls back to RC for good:
// nothing crosses the port toward the gone QP to time out otherwise. Over
// RC it does time out, and the leaf reports its QP failed.
TEST_F(DataPlaneThreadTest, AnInProcessLinkWhosePeerQpIsGoneFallsBackToRcAndFails) {
  std::unique_ptr<SwitchDataPlane> leaf = Plane("leaf", true), root = Plane("root", true);
  // What the thread's commands write outlives the thread (joined first).
  absl::Status s;
  std::vector<QpFailure> failures;
  uint64_t in_memory = 0;
  DataPlaneThread thread({.idle_wait = kIdle, .name = "leaf+root"});
  ASSERT_TRUE(thread.Add(leaf.get(), [] {}).ok());
  ASSERT_TRUE(thread.Add(root.get(), [] {}).ok());
  TreeLink link;
  ASSERT_NO_FATAL_FAILURE(LinkLeafToRoot(*leaf, *root, &link));
  AddHost(*leaf);
  ASSERT_FALSE(HasFailure());
  ASSERT_NO_FATAL_FAILURE(InstallGroup(*leaf, {{host_qpns_[0], {0}}}, link.up.qpn));
  // Read between two passes: a Send counts the message, then hands it over.
  auto handed_over = [&] {
    EXPECT_TRUE(OnThread(*leaf, [&](SwitchDataPlane& dp) {
      in_memory = dp.counters().in_process_messages.load();
    }));
    return in_memory;
  };
  auto sent_up = [&](uint64_t n) {
    const absl::Time end = absl::Now() + kDeadline;
    while (leaf->counters().messages_sent < n && absl::Now() < end) {
      hosts_[0]->ep->Progress(absl::Milliseconds(1));
    }
    return leaf->counters().messages_sent.load();
  };
  Request(*hosts_[0], 0, 2);
  ASSERT_EQ(sent_up(1), 1u);
  EXPECT_EQ(handed_over(), 1u) << "connected both ways: in memory";
  // The root's QP goes (no group of the root uses it).
  ASSERT_TRUE(OnThread(*root, [&](SwitchDataPlane& dp) { s = dp.DestroyQp(link.down.qpn); }));
  ASSERT_TRUE(s.ok()) << s;
  Request(*hosts_[0], 1, 3);
  ASSERT_EQ(sent_up(2), 2u);
  EXPECT_EQ(handed_over(), 1u) << "the second request went over RC";
  // No QP answers at the root's address: the leaf's QP runs out of retries
  // (4 ms, doubling, 7 retries: under a second).
  const absl::Time end = absl::Now() + kDeadline;
  while (failures.empty() && absl::Now() < end) {
    ASSERT_TRUE(OnThread(*leaf, [&](SwitchDataPlane& dp) { failures = dp.TakeQpFailures(); }));
    if (failures.empty()) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].qpn, link.up.qpn);
  EXPECT_EQ(failures[0].peer, "root");
  EXPECT_TRUE(absl::IsDeadlineExceeded(failures[0].reason)) << failures[0].reason;
  ASSERT_TRUE(OnThread(*leaf, [](SwitchDataPlane& dp) { (void)dp.RemoveGroup(1, 5); }));
  thread.Remove(leaf.get());
  thread.Remove(root.get());
}

// A removed plane is no longer run (its posted commands wait), the other
// goes on; the thread ends with the last plane and starts with the next.
TEST_F(DataPlaneThreadTest, ARemovedPlaneIsNoLongerRun) {
  std::unique_ptr<SwitchDataPlane> a = Plane("a"), b = Plane("b");
  DataPlaneThread thread({.idle_wait = kIdle});
  std::atomic<int> passes_a{0};
  ASSERT_TRUE(thread.Add(a.get(), [&] { ++passes_a; }).ok());
  ASSERT_TRUE(thread.Add(b.get(), [] {}).ok());
  thread.Remove(a.get());
  EXPECT_EQ(thread.num_planes(), 1u);
  const int passes = passes_a.load();
  std::atomic<bool> ran{false};
  a->Post([&](SwitchDataPlane&) { ran = true; });
  EXPECT_TRUE(OnThread(*b, [](SwitchDataPlane&) {}));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(passes_a.load(), passes);
  thread.Remove(b.get());
  EXPECT_EQ(thread.num_planes(), 0u);
  ASSERT_TRUE(thread.Add(a.get(), [] {}).ok());
  EXPECT_TRUE(OnThread(*a, [](SwitchDataPlane&) {}));
  EXPECT_TRUE(ran.load());  // the command posted while it was out
  thread.Remove(a.get());
}

// After a sleep, a pass reads only the ports poll found readable: here the
// port of the plane that is sent commands (each wakes it), never the other
// one's, which would find nothing each time (rx_empty_reads).
TEST_F(DataPlaneThreadTest, APassAfterASleepReadsOnlyTheReadablePorts) {
  transport::ImpairedPort* quiet_port = nullptr;
  std::unique_ptr<SwitchDataPlane> busy = Plane("busy");
  std::unique_ptr<SwitchDataPlane> quiet = Plane("quiet", false, &quiet_port);
  DataPlaneThread thread({.idle_wait = kIdle, .name = "busy+quiet"});
  ASSERT_TRUE(thread.Add(busy.get(), [] {}).ok());
  ASSERT_TRUE(thread.Add(quiet.get(), [] {}).ok());
  ASSERT_TRUE(OnThread(*quiet, [](SwitchDataPlane&) {}));  // the thread runs both
  const uint64_t quiet_before = quiet_port->counters().rx_empty_reads;
  constexpr int kCommands = 40;
  for (int i = 0; i < kCommands; ++i) ASSERT_TRUE(OnThread(*busy, [](SwitchDataPlane&) {}));
  EXPECT_LE(quiet_port->counters().rx_empty_reads - quiet_before, 4u)
      << "the quiet plane's port was read in passes where poll found it quiet";
  thread.Remove(busy.get());
  thread.Remove(quiet.get());
}

// A port that cannot be waited on from outside (in-memory, DPDK) runs
// alone: a second plane beside it is refused, and it keeps running.
TEST_F(DataPlaneThreadTest, APortWithoutAWaitFdDoesNotShareTheThread) {
  transport::MemoryNetwork net;
  auto memory = std::make_unique<SwitchDataPlane>(
      *net.CreatePort({.local = {0x0a000001, 4791}}), RealClock(), SwitchConfig{.name = "mem"});
  std::unique_ptr<SwitchDataPlane> udp = Plane("udp");
  DataPlaneThread thread({.idle_wait = absl::Milliseconds(1)});
  ASSERT_TRUE(thread.Add(memory.get(), [] {}).ok());
  const absl::Status s = thread.Add(udp.get(), [] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("mem cannot share"), std::string::npos) << s;
  EXPECT_EQ(thread.num_planes(), 1u);
  EXPECT_TRUE(OnThread(*memory, [](SwitchDataPlane&) {}));
  thread.Remove(memory.get());
}

}  // namespace
}  // namespace netfold::sw
