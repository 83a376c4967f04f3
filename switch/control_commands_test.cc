// The switch side of the control protocol (docs/control_plane.md, "Commands
// and the switch contract") over a real SwitchDataPlane, and the admin
// API's answers (counters, groups, link faults) built from it.
#include "switch/control_commands.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/roce_packet.h"
#include "switch/switch_admin_service.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;
using transport::QpState;

constexpr Ipv4Endpoint kSwitch{0x0a000001, 4791};
constexpr uint32_t kPkey = 0x8001;

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = net_.CreatePort({.local = kSwitch});
    ASSERT_TRUE(inner.ok());
    auto port = std::make_unique<transport::ImpairedPort>(std::move(*inner), clock_);
    port_ = port.get();
    SwitchConfig config;
    config.name = "leaf0";
    config.max_slot_bytes = 1024;
    dp_ = std::make_unique<SwitchDataPlane>(std::move(port), clock_, config);
  }

  control::CommandResult Run(const control::ManagerMessage& m) {
    return ExecuteCommand(*dp_, m, limits_);
  }

  // A host QP of job 1 toward rank `rank`, connected at once.
  uint32_t HostQp(uint32_t rank) {
    control::ManagerMessage m;
    m.set_command_id(++next_id_);
    control::CreateQp* c = m.mutable_create_qp();
    c->mutable_peer()->mutable_host()->set_job_id(1);
    c->mutable_peer()->mutable_host()->set_rank(rank);
    c->set_pkey(kPkey);
    c->mutable_remote()->set_address(absl::StrFormat("10.0.2.%d:4791", rank + 1));
    c->mutable_remote()->set_qpn(0x300 + rank);
    c->mutable_remote()->set_psn(rank);
    control::CommandResult r = Run(m);
    EXPECT_EQ(r.code(), 0) << r.message();
    EXPECT_EQ(r.command_id(), next_id_);
    return r.qp().qpn();
  }

  // A switch QP toward `name`, connected unless `connect` is false.
  uint32_t SwitchQp(const std::string& name, bool connect = true) {
    control::ManagerMessage m;
    m.mutable_create_qp()->mutable_peer()->mutable_switch_peer()->set_name(name);
    m.mutable_create_qp()->set_pkey(0xffff);
    control::CommandResult r = Run(m);
    EXPECT_EQ(r.code(), 0) << r.message();
    if (connect) {
      control::ManagerMessage c;
      c.mutable_connect_qp()->set_qpn(r.qp().qpn());
      c.mutable_connect_qp()->mutable_remote()->set_address("10.0.1.9:4791");
      c.mutable_connect_qp()->mutable_remote()->set_qpn(0x400);
      c.mutable_connect_qp()->mutable_remote()->set_psn(7);
      EXPECT_EQ(Run(c).code(), 0);
    }
    return r.qp().qpn();
  }

  control::ManagerMessage Install(uint64_t group, uint32_t epoch, uint32_t tree,
                                  const std::vector<uint32_t>& rank_qpns,
                                  std::optional<uint32_t> switch_child = std::nullopt) {
    control::ManagerMessage m;
    control::InstallGroup* ig = m.mutable_install_group();
    ig->set_tree_id(tree);
    ig->set_group_id(group);
    ig->set_epoch(epoch);
    ig->set_job_id(1);
    ig->set_pkey(kPkey);
    ig->set_qkey(0x1234);
    ig->set_num_slots(4);
    ig->set_slot_bytes(512);
    ig->set_delivery(control::DELIVERY_MULTICAST);
    ig->set_multicast_address("239.77.0.1:4791");
    ig->set_is_root(true);
    for (size_t r = 0; r < rank_qpns.size(); ++r) {
      control::GroupChild* c = ig->add_children();
      c->set_rank(static_cast<uint32_t>(r));
      c->set_qpn(rank_qpns[r]);
    }
    if (switch_child) {
      control::GroupChild* c = ig->add_children();
      c->set_switch_name("leaf1");
      c->set_qpn(*switch_child);
      c->add_subtree_ranks(5);
      c->add_subtree_ranks(4);
    }
    for (uint32_t r = 0; r < rank_qpns.size(); ++r) ig->add_member_ranks(r);
    return m;
  }

  static control::ManagerMessage Remove(uint64_t group, uint32_t epoch) {
    control::ManagerMessage m;
    m.mutable_remove_group()->set_group_id(group);
    m.mutable_remove_group()->set_epoch(epoch);
    return m;
  }

  FakeClock clock_{absl::Seconds(1)};
  transport::MemoryNetwork net_;
  transport::ImpairedPort* port_ = nullptr;
  std::unique_ptr<SwitchDataPlane> dp_;
  CommandLimits limits_;
  uint64_t next_id_ = 0;
};

TEST_F(CommandsTest, QpCommandsFollowTheContract) {
  const uint32_t host = HostQp(3);
  EXPECT_EQ(dp_->endpoint().FindRcQp(host)->state(), QpState::kRts);
  EXPECT_EQ(dp_->endpoint().FindRcQp(host)->attributes().pkey, kPkey);
  EXPECT_EQ(dp_->QpJobId(host), 1u);

  const uint32_t link = SwitchQp("root0", /*connect=*/false);
  EXPECT_EQ(dp_->endpoint().FindRcQp(link)->state(), QpState::kInit);
  EXPECT_EQ(dp_->QpJobId(link), 0u);
  control::ManagerMessage c;
  c.mutable_connect_qp()->set_qpn(link);
  c.mutable_connect_qp()->mutable_remote()->set_address("10.0.1.9:4791");
  c.mutable_connect_qp()->mutable_remote()->set_qpn(0x400);
  EXPECT_EQ(Run(c).code(), 0);
  EXPECT_EQ(Run(c).code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  c.mutable_connect_qp()->set_qpn(0x9999);
  EXPECT_EQ(Run(c).code(), static_cast<int>(absl::StatusCode::kNotFound));

  control::ManagerMessage bad;
  bad.mutable_create_qp()->set_pkey(kPkey);  // no peer
  EXPECT_EQ(Run(bad).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  bad.mutable_create_qp()->mutable_peer()->mutable_host()->set_job_id(1);
  bad.mutable_create_qp()->mutable_remote()->set_address("not-an-address");
  bad.mutable_create_qp()->mutable_remote()->set_qpn(5);
  EXPECT_EQ(Run(bad).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(dp_->num_qps(), 2u);

  control::ManagerMessage d;
  d.set_command_id(77);
  d.mutable_destroy_qp()->set_qpn(host);
  control::CommandResult r = Run(d);
  EXPECT_EQ(r.code(), 0);
  EXPECT_EQ(r.command_id(), 77u);
  EXPECT_EQ(Run(d).code(), static_cast<int>(absl::StatusCode::kNotFound));

  control::ManagerMessage unknown;
  unknown.set_command_id(5);
  EXPECT_EQ(Run(unknown).code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
}

TEST_F(CommandsTest, InstallGroupFollowsTheContract) {
  const uint32_t q0 = HostQp(0);
  const uint32_t q1 = HostQp(1);
  const uint32_t down = SwitchQp("leaf1");
  const uint32_t unconnected = SwitchQp("leaf2", /*connect=*/false);
  auto code = [&](const control::ManagerMessage& m) { return Run(m).code(); };
  const int kInvalid = static_cast<int>(absl::StatusCode::kInvalidArgument);
  const int kPrecondition = static_cast<int>(absl::StatusCode::kFailedPrecondition);

  // Widths of the aggregation header.
  control::CommandResult r = Run(Install(1ull << 32, 1, 0, {q0, q1}));
  EXPECT_EQ(r.code(), kInvalid);
  EXPECT_NE(r.message().find("32-bit group_id"), std::string::npos) << r.message();
  r = Run(Install(1, 1, 1u << 16, {q0, q1}));
  EXPECT_EQ(r.code(), kInvalid);
  EXPECT_NE(r.message().find("16-bit tree_id"), std::string::npos) << r.message();
  // QPs that are missing or not connected.
  EXPECT_EQ(code(Install(1, 1, 0, {q0, 0x9999})), kPrecondition);
  EXPECT_EQ(code(Install(1, 1, 0, {q0, unconnected})), kPrecondition);
  control::ManagerMessage no_parent = Install(1, 1, 0, {q0, q1});
  no_parent.mutable_install_group()->set_is_root(false);
  no_parent.mutable_install_group()->set_parent_qpn(unconnected);
  EXPECT_EQ(code(no_parent), kPrecondition);
  // Slots above capacity, a switch child without its ranks, a bad group address.
  control::ManagerMessage big = Install(1, 1, 0, {q0, q1});
  big.mutable_install_group()->set_slot_bytes(2048);
  EXPECT_EQ(code(big), kInvalid);
  control::ManagerMessage bare = Install(1, 1, 0, {q0}, down);
  bare.mutable_install_group()->mutable_children(1)->clear_subtree_ranks();
  r = Run(bare);
  EXPECT_EQ(r.code(), kInvalid);
  EXPECT_NE(r.message().find("subtree_ranks"), std::string::npos) << r.message();
  control::ManagerMessage unicast = Install(1, 1, 0, {q0, q1});
  unicast.mutable_install_group()->set_multicast_address("10.1.1.1:4791");
  EXPECT_EQ(code(unicast), kInvalid);
  EXPECT_EQ(dp_->num_groups(), 0u);

  // Installed, with the switch child's ranks sorted; again: a no-op.
  ASSERT_EQ(code(Install(1, 5, 0, {q0}, down)), 0);
  ASSERT_EQ(code(Install(1, 5, 0, {q0}, down)), 0);
  EXPECT_EQ(dp_->num_groups(), 1u);
  const GroupSpec* g = FindGroupById(*dp_, 1);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->children[1].ranks, (std::vector<uint32_t>{4, 5}));
  EXPECT_EQ(g->children[0].ranks, (std::vector<uint32_t>{0}));
  ASSERT_TRUE(g->multicast.has_value());
  // Older epoch refused; newer replaces, even on another tree.
  EXPECT_EQ(code(Install(1, 4, 0, {q0}, down)), kPrecondition);
  ASSERT_EQ(code(Install(1, 6, 2, {q0, q1})), 0);
  EXPECT_EQ(dp_->num_groups(), 1u);
  g = FindGroupById(*dp_, 1);
  EXPECT_EQ(g->tree_id, 2);
  EXPECT_EQ(g->epoch, 6u);
  EXPECT_EQ(dp_->num_slots_used(), 4u);

  // remove_group: another epoch leaves it, epoch 0 removes any, absent is OK.
  EXPECT_EQ(code(Remove(1, 5)), 0);
  EXPECT_EQ(dp_->num_groups(), 1u);
  EXPECT_EQ(code(Remove(1, 0)), 0);
  EXPECT_EQ(dp_->num_groups(), 0u);
  EXPECT_EQ(dp_->num_slots_used(), 0u);
  EXPECT_EQ(code(Remove(1, 0)), 0);
}

TEST_F(CommandsTest, TreesPerSwitchAreLimited) {
  limits_.max_trees = 1;
  const uint32_t q0 = HostQp(0);
  ASSERT_EQ(Run(Install(1, 1, 0, {q0})).code(), 0);
  ASSERT_EQ(Run(Install(2, 1, 0, {q0})).code(), 0);
  control::CommandResult r = Run(Install(3, 1, 1, {q0}));
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  // Moving the only group of tree 0 to tree 1 is fine once it is alone there.
  ASSERT_EQ(Run(Remove(2, 0)).code(), 0);
  EXPECT_EQ(Run(Install(1, 2, 1, {q0})).code(), 0);
}

TEST_F(CommandsTest, DestroyingAQpRemovesTheGroupsUsingIt) {
  const uint32_t q0 = HostQp(0);
  const uint32_t q1 = HostQp(1);
  ASSERT_EQ(Run(Install(1, 1, 0, {q0, q1})).code(), 0);
  ASSERT_EQ(Run(Install(2, 1, 0, {q0})).code(), 0);
  control::ManagerMessage d;
  d.mutable_destroy_qp()->set_qpn(q1);
  EXPECT_EQ(Run(d).code(), 0);
  EXPECT_EQ(FindGroupById(*dp_, 1), nullptr);
  EXPECT_NE(FindGroupById(*dp_, 2), nullptr);
  EXPECT_EQ(dp_->num_slots_used(), 4u);
}

TEST_F(CommandsTest, RegistrationReportsWhatIsHeld) {
  const uint32_t q0 = HostQp(0);
  const uint32_t link = SwitchQp("root0");
  control::ManagerMessage m = Install(9, 3, 4, {q0});
  m.mutable_install_group()->set_is_root(false);
  m.mutable_install_group()->set_parent_qpn(link);
  ASSERT_EQ(Run(m).code(), 0);
  control::RegisterSwitch reg;
  FillHeldState(*dp_, &reg);
  ASSERT_EQ(reg.installed_groups_size(), 1);
  EXPECT_EQ(reg.installed_groups(0).group_id(), 9u);
  EXPECT_EQ(reg.installed_groups(0).epoch(), 3u);
  EXPECT_EQ(reg.installed_groups(0).tree_id(), 4u);
  ASSERT_EQ(reg.qpns_size(), 2);
  EXPECT_EQ(reg.qpns(0), std::min(q0, link));
  control::ResourceUsage u = UsageOf(*dp_);
  EXPECT_EQ(u.groups(), 1u);
  EXPECT_EQ(u.slots(), 4u);
  EXPECT_EQ(u.qps(), 2u);
  control::SwitchCapacity cap = CapacityOf(dp_->config(), 12);
  EXPECT_EQ(cap.max_trees(), 12u);
  EXPECT_EQ(cap.slot_bytes(), 1024u);
}

TEST_F(CommandsTest, AdminAnswersDescribeTheSwitch) {
  const uint32_t q0 = HostQp(0);
  const uint32_t q1 = HostQp(1);
  ASSERT_EQ(Run(Install(1, 1, 0, {q0, q1})).code(), 0);

  control::ListGroupsResponse groups;
  FillGroups(*dp_, &groups);
  ASSERT_EQ(groups.groups_size(), 1);
  const control::SwitchGroup& g = groups.groups(0);
  EXPECT_EQ(g.group_id(), 1u);
  EXPECT_TRUE(g.is_root());
  EXPECT_EQ(g.multicast_address(), "239.77.0.1:4791");
  ASSERT_EQ(g.children_size(), 2);
  EXPECT_EQ(g.children(1).qpn(), q1);
  EXPECT_EQ(g.children(1).peer(), "job 1 rank 1");
  EXPECT_EQ(g.busy_slots(), 0u);
  EXPECT_EQ(groups.usage().slots(), 4u);

  // A link fault toward rank 0's address, then on every peer.
  control::SetLinkFaultRequest req;
  req.set_peer("10.0.2.1:4791");
  req.set_direction(control::LINK_DIRECTION_SEND);
  req.set_impairment("drop=0.25,seed=4");
  absl::StatusOr<control::SetLinkFaultResponse> lf = ApplyLinkFault(*port_, req);
  ASSERT_TRUE(lf.ok()) << lf.status();
  ASSERT_EQ(lf->links_size(), 1);
  EXPECT_EQ(lf->links(0).peer(), "10.0.2.1:4791");
  EXPECT_NE(lf->links(0).send().find("drop=0.25"), std::string::npos) << lf->links(0).send();
  EXPECT_EQ(lf->links(0).receive(), "none");
  req.set_peer("all");
  req.set_direction(control::LINK_DIRECTION_BOTH);
  req.set_impairment("none");
  lf = ApplyLinkFault(*port_, req);
  ASSERT_TRUE(lf.ok()) << lf.status();
  EXPECT_EQ(lf->links(lf->links_size() - 1).peer(), "default");
  for (const auto& l : lf->links()) EXPECT_EQ(l.send(), "none") << l.peer();
  req.set_impairment("drop=3");
  EXPECT_EQ(ApplyLinkFault(*port_, req).status().code(), absl::StatusCode::kInvalidArgument);
  req.set_impairment("");
  req.set_peer("somewhere");
  EXPECT_EQ(ApplyLinkFault(*port_, req).status().code(), absl::StatusCode::kInvalidArgument);

  control::GetCountersResponse counters;
  FillCounters(*dp_, port_, &counters);
  ASSERT_EQ(counters.qps_size(), 2);
  EXPECT_EQ(counters.qps(0).state(), "RTS");
  EXPECT_EQ(counters.qps(0).job_id(), 1u);
  EXPECT_FALSE(counters.qps(0).remote_address().empty());
  ASSERT_EQ(counters.groups_size(), 1);
  EXPECT_EQ(counters.groups(0).num_slots(), 4u);
  EXPECT_EQ(counters.groups(0).latency_us_log2_size(), 20);
  bool has_unknown_group = false;
  for (const auto& d : counters.drops()) has_unknown_group |= d.name() == "switch.unknown_group";
  EXPECT_TRUE(has_unknown_group);
  ASSERT_GE(counters.peers_size(), 1);
  bool named = false;
  for (const auto& p : counters.peers()) {
    if (p.peer() == "10.0.2.1:4791") named = p.name() == "job 1 rank 0";
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(counters.usage().groups(), 1u);
}

// Issue 23.2: the admin API is not authenticated. Without `detail` it
// answers aggregates only (no QPN, PSN counter, P_Key, peer or group list;
// the QPs' out_of_sequence and duplicate drops summed together); `detail`
// is refused unless the switch allows it.
TEST_F(CommandsTest, TheAdminServiceShowsAggregatesOnlyUnlessItsDetailIsAllowed) {
  const uint32_t q0 = HostQp(0);
  const uint32_t q1 = HostQp(1);
  ASSERT_EQ(Run(Install(1, 1, 0, {q0, q1})).code(), 0);
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) dp_->RunOnce(absl::Milliseconds(1));
  });
  // Both without a fabric credential (auth: none): detail then needs
  // admin_detail. (With a credential, every caller that passes its check
  // gets detail: tests/security/control_plane_auth_test.)
  SwitchAdminService closed(dp_.get(), port_, {.name = "leaf0"}, "");
  SwitchAdminService open(dp_.get(), port_, {.name = "leaf0", .allow_detail = true}, "");
  grpc::ServerContext ctx;

  control::GetCountersRequest plain, detail;
  detail.set_detail(true);
  control::GetCountersResponse c;
  grpc::Status s = closed.GetCounters(&ctx, &plain, &c);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(c.detailed());
  EXPECT_EQ(c.qps_size(), 0);
  EXPECT_EQ(c.groups_size(), 0);
  EXPECT_EQ(c.peers_size(), 0);
  EXPECT_EQ(c.usage().qps(), 2u);
  std::vector<std::string> names;
  for (const auto& d : c.drops()) names.push_back(d.name());
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("qp.psn_mismatch") && has("qp.wrong_source") && has("qp.unsupported_opcode"));
  EXPECT_FALSE(has("qp.out_of_sequence") || has("qp.duplicate"));
  control::GetCountersResponse refused;
  s = closed.GetCounters(&ctx, &detail, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("admin_detail"), std::string::npos) << s.error_message();

  control::ListGroupsRequest groups_plain, groups_detail;
  groups_detail.set_detail(true);
  control::ListGroupsResponse g;
  EXPECT_TRUE(closed.ListGroups(&ctx, &groups_plain, &g).ok());
  EXPECT_EQ(g.groups_size(), 0);
  EXPECT_EQ(g.usage().slots(), 4u);
  EXPECT_EQ(closed.ListGroups(&ctx, &groups_detail, &g).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  control::GetCountersResponse full;
  EXPECT_TRUE(open.GetCounters(&ctx, &detail, &full).ok());
  EXPECT_TRUE(full.detailed());
  EXPECT_EQ(full.qps_size(), 2);
  control::ListGroupsResponse full_groups;
  EXPECT_TRUE(open.ListGroups(&ctx, &groups_detail, &full_groups).ok());
  stop = true;
  loop.join();  // before any ASSERT: the loop reads the data plane
  ASSERT_EQ(full_groups.groups_size(), 1);
  EXPECT_EQ(full_groups.groups(0).pkey(), kPkey);
}

// A job's QPs go with the job, but what they counted does not: the drops
// summed without the detail, and every QP's totals with it, keep the
// counts of destroyed QPs, so they only grow.
TEST_F(CommandsTest, TheQpTotalsKeepWhatADestroyedQpCounted) {
  const uint32_t q0 = HostQp(0);  // expects PSN 0 from 10.0.2.1:4791
  auto rank0 = net_.CreatePort({.local = Ipv4Endpoint{0x0a000201, 4791}});
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  // Three sends ahead of the expected PSN: one NAK, three out_of_sequence.
  for (uint32_t psn = 5; psn < 8; ++psn) {
    proto::RocePacketSpec spec;
    spec.bth.opcode = proto::BthOpcode::kRcSendOnly;
    spec.bth.pkey = kPkey;
    spec.bth.dest_qp = q0;
    spec.bth.psn = psn;
    const std::vector<uint8_t> payload(64, 0x42);
    transport::PacketBuffer* p = (*rank0)->pool().Alloc();
    ASSERT_NE(p, nullptr);
    auto n = proto::BuildRocePacket(spec, payload,
                                    {(*rank0)->local().ip, kSwitch.ip, 4791, kSwitch.port},
                                    {p->data(), p->capacity()});
    ASSERT_TRUE(n.ok()) << n.status();
    p->set_len(static_cast<uint32_t>(*n));
    p->dst = kSwitch;
    ASSERT_EQ((*rank0)->SendBurst({&p, 1}), 1u);
  }
  dp_->RunOnce(absl::ZeroDuration());

  auto psn_mismatch = [&] {
    control::GetCountersResponse c;
    FillCounters(*dp_, port_, &c, /*detail=*/false);
    for (const auto& d : c.drops()) {
      if (d.name() == "qp.psn_mismatch") return d.count();
    }
    return uint64_t{0};
  };
  control::GetCountersResponse before;
  FillCounters(*dp_, port_, &before);
  ASSERT_EQ(before.qps_size(), 1);
  EXPECT_EQ(before.qps(0).naks_sent(), 1u);
  EXPECT_EQ(before.all_qps().naks_sent(), 1u);
  EXPECT_EQ(before.all_qps().acks_sent(), before.qps(0).acks_sent());
  EXPECT_EQ(psn_mismatch(), 3u);

  control::ManagerMessage d;
  d.mutable_destroy_qp()->set_qpn(q0);
  ASSERT_EQ(Run(d).code(), 0);
  control::GetCountersResponse after;
  FillCounters(*dp_, port_, &after);
  EXPECT_EQ(after.qps_size(), 0);
  EXPECT_EQ(after.all_qps().naks_sent(), 1u);
  ASSERT_EQ(after.all_qps().drops_size(), 1);
  EXPECT_EQ(after.all_qps().drops(0).name(), "out_of_sequence");
  EXPECT_EQ(after.all_qps().drops(0).count(), 3u);
  EXPECT_EQ(psn_mismatch(), 3u);
  // A new QP adds to them.
  HostQp(1);
  FillCounters(*dp_, port_, &after);
  EXPECT_EQ(after.all_qps().naks_sent(), 1u);
  EXPECT_EQ(psn_mismatch(), 3u);
}

}  // namespace
}  // namespace netfold::sw
