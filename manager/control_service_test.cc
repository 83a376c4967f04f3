// Tests of the gRPC services in one process: a ManagerServer on a loopback
// port picked by the kernel, fake switches speaking the real Connect
// protocol, host and admin calls through generated stubs.
#include "manager/control_service.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/fake_switch_agent.h"
#include "manager/testing/grpc_test_util.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

class ServiceTest : public testing::Test {
 protected:
  void Start(const std::string& file, ManagerOptions mo = FastOptions(),
             ServerOptions so = ServerOptions()) {
    absl::StatusOr<Topology> t = LoadExampleTopology(file);
    ASSERT_TRUE(t.ok()) << t.status();
    topo_ = std::make_unique<Topology>(*std::move(t));
    fabric_ = std::make_unique<FakeFabric>(*topo_);
    hub_ = std::make_unique<SwitchHub>();
    am_ = std::make_unique<AggregationManager>(*topo_, mo, RealClock(), hub_.get(), nullptr);
    ASSERT_TRUE(am_->Recover(state::Snapshot()).ok());
    so.listen_address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<ManagerServer>> server =
        ManagerServer::Start(am_.get(), hub_.get(), so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = absl::StrFormat("127.0.0.1:%d", server_->port());
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    host_ = control::HostControl::NewStub(channel_);
    admin_ = control::Admin::NewStub(channel_);
  }

  static ManagerOptions FastOptions() {
    ManagerOptions mo;
    mo.heartbeat_interval = absl::Milliseconds(100);
    mo.switch_timeout = absl::Milliseconds(500);
    mo.host_timeout = absl::ZeroDuration();
    mo.command_timeout = absl::Seconds(2);
    return mo;
  }

  void TearDown() override {
    agents_.clear();  // stops them
    if (server_ != nullptr) server_->Shutdown();
  }

  void StartAgents() {
    for (FakeSwitch* s : fabric_->All()) {
      agents_[s->name()] = std::make_unique<FakeSwitchAgent>(address_, s);
      agents_[s->name()]->Start();
    }
    ASSERT_TRUE(WaitUntil([&] { return AllUp(); }, absl::Seconds(10))) << Status();
  }

  bool AllUp() {
    control::GetStatusResponse st = am_->GetStatus();
    for (const auto& s : st.switches()) {
      if (s.state() != control::SwitchStatus::UP) return false;
    }
    return true;
  }

  // What the manager holds, for failure messages.
  std::string Status() { return am_->GetStatus().DebugString(); }

  static grpc::ClientContext* Ctx(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return ctx;
  }

  control::CreateJobResponse CreateJob(const std::vector<std::string>& hosts) {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    for (size_t i = 0; i < hosts.size(); ++i) {
      control::RankSpec* r = req.add_ranks();
      r->set_rank(static_cast<uint32_t>(i));
      r->set_host(hosts[i]);
    }
    control::CreateJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = host_->CreateJob(Ctx(&ctx), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  static control::JobCredentials Creds(const control::CreateJobResponse& job) {
    control::JobCredentials c;
    c.set_job_id(job.job_id());
    c.set_job_key(job.job_key());
    return c;
  }

  grpc::Status Attach(const control::CreateJobResponse& job, uint32_t rank,
                      control::AttachResponse* resp) {
    control::AttachRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    req.mutable_endpoint()->set_address(absl::StrFormat("127.0.0.1:%d", 30000 + rank));
    req.mutable_endpoint()->set_qpn(0x40 + rank);
    req.mutable_endpoint()->set_psn(rank * 1000);
    grpc::ClientContext ctx;
    return host_->Attach(Ctx(&ctx), req, resp);
  }

  grpc::Status CreateGroup(const control::CreateJobResponse& job,
                           const std::vector<uint32_t>& ranks, control::GroupInfo* info) {
    control::CreateGroupRequest req;
    *req.mutable_job() = Creds(job);
    for (uint32_t r : ranks) req.add_ranks(r);
    control::CreateGroupResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = host_->CreateGroup(Ctx(&ctx), req, &resp);
    *info = resp.group();
    return s;
  }

  // A job on h0 and h4, both ranks attached, and a group of the two.
  control::GroupInfo TwoRankGroup(control::CreateJobResponse* job) {
    *job = CreateJob({"h0", "h4"});
    control::AttachResponse a;
    EXPECT_TRUE(Attach(*job, 0, &a).ok());
    EXPECT_TRUE(Attach(*job, 1, &a).ok());
    control::GroupInfo g;
    grpc::Status s = CreateGroup(*job, {0, 1}, &g);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return g;
  }

  control::WatchEventsRequest WatchRequest(const control::CreateJobResponse& job, uint32_t rank) {
    control::WatchEventsRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    return req;
  }

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<FakeFabric> fabric_;
  std::unique_ptr<SwitchHub> hub_;
  std::unique_ptr<AggregationManager> am_;
  std::unique_ptr<ManagerServer> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<control::HostControl::Stub> host_;
  std::unique_ptr<control::Admin::Stub> admin_;
  std::map<std::string, std::unique_ptr<FakeSwitchAgent>> agents_;
};

TEST_F(ServiceTest, JobsGroupsAndAKilledSwitchOverGrpc) {
  Start("two_level.yaml");
  StartAgents();
  const std::vector<std::string> hosts = {"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"};
  control::CreateJobResponse job = CreateJob(hosts);
  ASSERT_EQ(job.job_key().size(), 16u);
  for (uint32_t r = 0; r < 8; ++r) {
    control::AttachResponse a;
    grpc::Status s = Attach(job, r, &a);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(a.switch_endpoint().address(), fabric_->Get(a.leaf_switch())->data_address());
    EXPECT_TRUE(fabric_->Get(a.leaf_switch())->HasQp(a.switch_endpoint().qpn()));
  }
  control::GroupInfo wide, safe;
  ASSERT_TRUE(CreateGroup(job, {0, 2, 4, 6}, &wide).ok());
  ASSERT_TRUE(CreateGroup(job, {0, 1, 2, 3}, &safe).ok());
  EXPECT_EQ(wide.root_switch(), "root0");
  for (const std::string name : {"root0", "leaf0", "leaf1", "leaf2", "leaf3"}) {
    EXPECT_TRUE(fabric_->Get(name)->HasGroup(wide.group_id())) << name;
  }

  EventWatcher w0(channel_, WatchRequest(job, 0));
  ASSERT_TRUE(w0.WaitStarted(absl::Seconds(5)));
  // The switch process dies: its stream breaks.
  const absl::Time killed = absl::Now();
  agents_["leaf3"]->Kill();
  std::optional<JobEvent> ev = w0.WaitFor(
      [&](const JobEvent& e) {
        return e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == wide.group_id();
      },
      absl::Seconds(5));
  ASSERT_TRUE(ev.has_value()) << Status();
  EXPECT_LT(absl::Now() - killed, 2 * FastOptions().switch_timeout);
  EXPECT_NE(ev->reason().find("leaf3"), std::string::npos) << ev->reason();
  // Processes hear first; the survivors' copies go right after.
  EXPECT_TRUE(WaitUntil([&] { return !fabric_->Get("leaf0")->HasGroup(wide.group_id()); },
                        absl::Seconds(5)));
  EXPECT_TRUE(fabric_->Get("leaf0")->HasGroup(safe.group_id()));

  control::GetStatusResponse st;
  grpc::ClientContext ctx;
  ASSERT_TRUE(admin_->GetStatus(Ctx(&ctx), control::GetStatusRequest(), &st).ok());
  // The status shows leaf3 dead (tools/status_text_test.cc checks that
  // `netfold status` prints such a switch as "dead").
  const control::SwitchStatus* leaf3 = nullptr;
  for (const control::SwitchStatus& sw : st.switches()) {
    if (sw.name() == "leaf3") leaf3 = &sw;
  }
  ASSERT_NE(leaf3, nullptr);
  EXPECT_EQ(leaf3->state(), control::SwitchStatus::DEAD);
  EXPECT_EQ(st.groups_size(), 1);

  // The switch comes back (a new process: empty state) and is usable again.
  fabric_->Get("leaf3")->Restart();
  agents_["leaf3"] = std::make_unique<FakeSwitchAgent>(address_, fabric_->Get("leaf3"));
  agents_["leaf3"]->Start();
  ASSERT_TRUE(WaitUntil([&] { return AllUp(); }, absl::Seconds(10))) << Status();
  control::AttachResponse a;
  ASSERT_TRUE(Attach(job, 6, &a).ok());
  ASSERT_TRUE(Attach(job, 7, &a).ok());
  control::GroupInfo again;
  grpc::Status s = CreateGroup(job, {1, 7}, &again);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(fabric_->Get("leaf3")->HasGroup(again.group_id()));
}

// DestroyGroup answers without waiting for the switches to take the
// removals: they get them, in order before any later command.
TEST_F(ServiceTest, ADestroyedGroupsRemovalsAreNotWaitedFor) {
  Start("two_level.yaml");
  StartAgents();
  control::CreateJobResponse job;
  const control::GroupInfo g = TwoRankGroup(&job);
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> tree;  // the switches holding the group
  for (FakeSwitch* sw : fabric_->All()) {
    if (sw->HasGroup(g.group_id())) tree.push_back(sw->name());
  }
  ASSERT_EQ(tree.size(), 3u) << Status();  // two leaves and the root
  for (const std::string& name : tree) agents_[name]->HoldCommands(true);
  control::DestroyGroupRequest req;
  *req.mutable_job() = Creds(job);
  req.set_group_id(g.group_id());
  control::DestroyGroupResponse resp;
  grpc::ClientContext ctx;
  const absl::Time asked = absl::Now();
  grpc::Status s = host_->DestroyGroup(Ctx(&ctx), req, &resp);
  const absl::Duration took = absl::Now() - asked;
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Waiting would have taken the command timeout (the switches hold).
  EXPECT_LT(took, FastOptions().command_timeout / 2) << took;
  for (const std::string& name : tree) {
    EXPECT_TRUE(fabric_->Get(name)->HasGroup(g.group_id())) << name << ": held, yet removed";
  }
  // A new group on the same switches: its installs queue behind the
  // removals, and the manager waits for those.
  for (const std::string& name : tree) agents_[name]->HoldCommands(false);
  control::GroupInfo again;
  ASSERT_TRUE(CreateGroup(job, {0, 1}, &again).ok());
  for (const std::string& name : tree) {
    EXPECT_FALSE(fabric_->Get(name)->HasGroup(g.group_id())) << name;
    EXPECT_TRUE(fabric_->Get(name)->HasGroup(again.group_id())) << name;
  }
}

TEST_F(ServiceTest, HungSwitchIsDetectedWithinTwiceTheTimeout) {
  Start("two_level.yaml");
  StartAgents();
  control::CreateJobResponse job;
  TwoRankGroup(&job);
  ASSERT_FALSE(HasFailure());
  EventWatcher w(channel_, WatchRequest(job, 0));
  ASSERT_TRUE(w.WaitStarted(absl::Seconds(5)));
  const absl::Time paused = absl::Now();
  agents_["root0"]->PauseHeartbeats(true);  // alive on TCP, silent on heartbeats
  std::optional<JobEvent> ev = w.WaitFor(
      [](const JobEvent& e) { return e.kind() == JobEvent::GROUP_REVOKED; }, absl::Seconds(5));
  ASSERT_TRUE(ev.has_value()) << Status();
  const absl::Duration took = absl::Now() - paused;
  EXPECT_LT(took, 2 * FastOptions().switch_timeout) << took;
  // Never before its timeout: counted from the last heartbeat the switch
  // sent (a heartbeat that came late before the pause makes `took` short;
  // 10 ms for the wall clock against the manager's monotonic one).
  const absl::Duration silent = absl::Now() - agents_["root0"]->last_heartbeat_sent();
  EXPECT_GE(silent, FastOptions().switch_timeout - absl::Milliseconds(10))
      << silent << " since the last heartbeat";
  EXPECT_NE(ev->reason().find("no heartbeat"), std::string::npos) << ev->reason();
  // The manager closed its stream; once it heartbeats again it re-registers.
  agents_["root0"]->PauseHeartbeats(false);
  EXPECT_TRUE(agents_["root0"]->WaitRegistered(absl::Seconds(5), 2));
  EXPECT_TRUE(WaitUntil([&] { return AllUp(); }, absl::Seconds(10))) << Status();
}

TEST_F(ServiceTest, RefusesBadRequestsWithClearErrors) {
  ServerOptions so;
  so.max_message_bytes = 4096;
  Start("single_switch.yaml", FastOptions(), so);
  StartAgents();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});

  control::DestroyJobRequest no_key;
  no_key.mutable_job()->set_job_id(job.job_id());
  control::DestroyJobResponse dr;
  grpc::ClientContext c1;
  grpc::Status s = host_->DestroyJob(Ctx(&c1), no_key, &dr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("missing job key"), std::string::npos);

  control::DestroyJobRequest wrong;
  wrong.mutable_job()->set_job_id(job.job_id());
  wrong.mutable_job()->set_job_key(std::string(16, 'x'));
  grpc::ClientContext c2;
  s = host_->DestroyJob(Ctx(&c2), wrong, &dr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("wrong job key"), std::string::npos);

  control::CreateJobRequest dup;
  dup.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  for (int i = 0; i < 2; ++i) {
    control::RankSpec* r = dup.add_ranks();
    r->set_rank(0);
    r->set_host("h0");
  }
  control::CreateJobResponse jr;
  grpc::ClientContext c3;
  s = host_->CreateJob(Ctx(&c3), dup, &jr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("rank 0 is listed twice"), std::string::npos);

  control::CreateJobRequest huge;
  huge.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  huge.set_name(std::string(10000, 'n'));
  grpc::ClientContext c4;
  s = host_->CreateJob(Ctx(&c4), huge, &jr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  s = RawUnaryCall(channel_, "/netfold.control.HostControl/CreateJob",
                   std::string("\xff\xff\xff\xff\x0f garbage", 13), absl::Seconds(5));
  // Bytes that do not parse never reach the manager: gRPC refuses them.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL) << s.error_message();

  // The job is untouched by all of that.
  EXPECT_EQ(am_->GetStatus().jobs_size(), 1);
}

TEST_F(ServiceTest, RequestRateIsBoundedPerPeer) {
  ServerOptions so;
  so.requests_per_second = 5;
  so.burst = 5;
  Start("single_switch.yaml", FastOptions(), so);
  int refused = 0;
  std::string message;
  for (int i = 0; i < 20; ++i) {
    control::GetStatusResponse st;
    grpc::ClientContext ctx;
    grpc::Status s = admin_->GetStatus(Ctx(&ctx), control::GetStatusRequest(), &st);
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      message = s.error_message();
    }
  }
  EXPECT_GE(refused, 10);
  EXPECT_NE(message.find("rate limit: 127.0.0.1 exceeded 5 requests/s"), std::string::npos)
      << message;
}

TEST_F(ServiceTest, ConnectProtocolIsEnforced) {
  ServerOptions so;
  so.register_timeout = absl::Milliseconds(300);
  Start("two_level.yaml", FastOptions(), so);
  auto stub = control::SwitchControl::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    Ctx(&ctx);
    auto stream = stub->Connect(&ctx);
    control::SwitchMessage hb;
    hb.mutable_heartbeat()->set_sequence(1);
    stream->Write(hb);
    stream->WritesDone();
    control::ManagerMessage m;
    EXPECT_FALSE(stream->Read(&m));
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("must be RegisterSwitch"), std::string::npos);
  }
  {
    FakeSwitch impostor("leaf9", "127.0.0.1:1234",
                        fabric_->Get("leaf0")->Registration().capacity());
    FakeSwitchAgent agent(address_, &impostor);
    agent.Start();
    EXPECT_TRUE(WaitUntil([&] { return !agent.last_error().ok(); }, absl::Seconds(5)));
    EXPECT_EQ(agent.last_error().error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(agent.last_error().error_message().find("not in topology"), std::string::npos);
  }
  {
    // Silence after opening the stream: cancelled after register_timeout.
    grpc::ClientContext ctx;
    Ctx(&ctx);
    const absl::Time start = absl::Now();
    auto stream = stub->Connect(&ctx);
    control::ManagerMessage m;
    EXPECT_FALSE(stream->Read(&m));
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

TEST_F(ServiceTest, ShutdownEndsStreams) {
  Start("single_switch.yaml");
  StartAgents();
  control::CreateJobResponse job = CreateJob({"h0"});
  EventWatcher w(channel_, WatchRequest(job, 0));
  ASSERT_TRUE(w.WaitStarted(absl::Seconds(5)));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_NE(w.WaitFinished(absl::Seconds(5)).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(ServiceTest, SecondServerOnTheSamePortFailsToStart) {
  Start("single_switch.yaml");
  ServerOptions so;
  so.listen_address = address_;
  absl::StatusOr<std::unique_ptr<ManagerServer>> second =
      ManagerServer::Start(am_.get(), hub_.get(), so);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("cannot listen on " + address_), std::string::npos);
  // The first one still serves.
  control::GetStatusResponse st;
  grpc::ClientContext ctx;
  EXPECT_TRUE(admin_->GetStatus(Ctx(&ctx), control::GetStatusRequest(), &st).ok());
}

}  // namespace
}  // namespace netfold::manager
