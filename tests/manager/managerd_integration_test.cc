// Integration tests of netfold-managerd: the real daemon as a subprocess on
// a loopback port of its own choosing, switches as fake-switchd processes
// (or in-process agents where the test inspects their memory), hosts as
// gRPC clients. Every process is killed when a test ends, pass or fail.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/fake_switch_agent.h"
#include "manager/testing/grpc_test_util.h"
#include "manager/testing/temp_dir.h"
#include "manager/topology.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/manager/subprocess.h"
#include "tools/status_text.h"

namespace netfold::manager {
namespace {

using control::JobEvent;

constexpr absl::Duration kHeartbeat = absl::Milliseconds(200);
constexpr absl::Duration kSwitchTimeout = absl::Milliseconds(1000);

std::string TopologyPath(const std::string& file) {
  return std::string(NETFOLD_TOPOLOGY_DIR) + "/" + file;
}

// Sends a heartbeat for every rank every interval, counting successes;
// failures (the manager restarting) are tolerated.
class HostHeartbeater {
 public:
  HostHeartbeater(std::shared_ptr<grpc::Channel> channel, control::JobCredentials creds,
                  uint32_t num_ranks)
      : stub_(control::HostControl::NewStub(channel)) {
    thread_ = std::thread([this, creds, num_ranks] {
      while (!stop_.load()) {
        for (uint32_t r = 0; r < num_ranks; ++r) {
          control::HostHeartbeatRequest req;
          *req.mutable_job() = creds;
          req.set_rank(r);
          control::HostHeartbeatResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
          if (stub_->Heartbeat(&ctx, req, &resp).ok()) {
            ok_.fetch_add(1);
            last_incarnation_.store(resp.manager_incarnation());
          }
        }
        absl::SleepFor(kHeartbeat);  // a period, not a synchronization
      }
    });
  }
  ~HostHeartbeater() {
    stop_.store(true);
    thread_.join();
  }
  int ok() const { return ok_.load(); }
  uint64_t last_incarnation() const { return last_incarnation_.load(); }

 private:
  std::unique_ptr<control::HostControl::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::atomic<uint64_t> last_incarnation_{0};
  std::thread thread_;
};

class ManagerdTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  void TearDown() override {
    agents_.clear();
    if (HasFailure()) {
      if (manager_ != nullptr)
        std::fprintf(stderr, "--- managerd log ---\n%s", manager_->Log().c_str());
      for (auto& [name, p] : switchd_) {
        std::fprintf(stderr, "--- fake-switchd %s log ---\n%s", name.c_str(), p->Log().c_str());
      }
    }
    switchd_.clear();  // SIGKILL + reap
    manager_.reset();
  }

  void WriteConfig(const std::string& extra = "") {
    config_path_ = dir_.path() + "/manager.yaml";
    std::ofstream out(config_path_);
    // The manager's behaviour, not its authentication (tests/security):
    // no credential, as a manager told so runs.
    out << "auth: none\n"
        << "log_level: info\n"
        << "heartbeat_interval_ms: " << absl::ToInt64Milliseconds(kHeartbeat) << "\n"
        << "switch_timeout_ms: " << absl::ToInt64Milliseconds(kSwitchTimeout) << "\n"
        << "host_timeout_ms: 3000\n"
        << "command_timeout_ms: 2000\n"
        << extra;
  }

  // Starts the daemon (port 0: the kernel picks; else that port again) and
  // waits for its port file.
  void StartManager(const std::string& topology, int port = 0) {
    if (config_path_.empty()) WriteConfig();
    topology_ = topology;
    const std::string port_file = dir_.path() + "/managerd.port";
    std::remove(port_file.c_str());
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
        {NETFOLD_MANAGERD, "--config", config_path_, "--topology", TopologyPath(topology),
         "--state_dir", dir_.path() + "/state", "--listen", absl::StrFormat("127.0.0.1:%d", port),
         "--port_file", port_file},
        dir_.path() + "/managerd.log");
    ASSERT_TRUE(p.ok()) << p.status();
    manager_ = *std::move(p);
    std::string text;
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::ifstream in(port_file);
          return static_cast<bool>(std::getline(in, text)) && !text.empty();
        },
        absl::Seconds(20)))
        << "netfold-managerd did not start:\n"
        << manager_->Log();
    port_ = std::stoi(text);
    address_ = absl::StrFormat("127.0.0.1:%d", port_);
    channel_ = FastReconnectChannel(address_);
    host_ = control::HostControl::NewStub(channel_);
    admin_ = control::Admin::NewStub(channel_);
  }

  void StartInProcessSwitches() {
    absl::StatusOr<Topology> t = Topology::LoadFile(TopologyPath(topology_));
    ASSERT_TRUE(t.ok());
    topo_ = std::make_unique<Topology>(*std::move(t));
    fabric_ = std::make_unique<FakeFabric>(*topo_);
    for (FakeSwitch* s : fabric_->All()) {
      agents_[s->name()] = std::make_unique<FakeSwitchAgent>(address_, s);
      agents_[s->name()]->Start();
    }
    ASSERT_TRUE(WaitAllUp()) << StatusText();
  }

  void StartSwitchProcesses() {
    absl::StatusOr<Topology> t = Topology::LoadFile(TopologyPath(topology_));
    ASSERT_TRUE(t.ok());
    topo_ = std::make_unique<Topology>(*std::move(t));
    for (int i = 0; i < topo_->num_switches(); ++i) {
      const std::string& name = topo_->switch_at(i).name;
      absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
          {NETFOLD_FAKE_SWITCHD, "--manager", address_, "--topology", TopologyPath(topology_),
           "--name", name, "--data_address", absl::StrFormat("127.0.0.1:%d", 21000 + i)},
          dir_.path() + "/switchd-" + name + ".log");
      ASSERT_TRUE(p.ok()) << p.status();
      switchd_[name] = *std::move(p);
    }
    ASSERT_TRUE(WaitAllUp()) << StatusText();
  }

  control::GetStatusResponse GetStatus() {
    control::GetStatusResponse st;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Status s = admin_->GetStatus(&ctx, control::GetStatusRequest(), &st);
    return s.ok() ? st : control::GetStatusResponse();
  }

  std::string StatusText() { return tools::FormatStatus(GetStatus()); }

  bool WaitAllUp(absl::Duration timeout = absl::Seconds(20)) {
    return WaitUntil(
        [&] {
          control::GetStatusResponse st = GetStatus();
          if (st.switches_size() == 0) return false;
          for (const auto& s : st.switches()) {
            if (s.state() != control::SwitchStatus::UP) return false;
          }
          return true;
        },
        timeout, absl::Milliseconds(50));
  }

  const control::SwitchStatus* Find(const control::GetStatusResponse& st, const std::string& name) {
    for (const auto& s : st.switches()) {
      if (s.name() == name) return &s;
    }
    return nullptr;
  }

  static grpc::ClientContext* Ctx(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return ctx;
  }

  control::CreateJobResponse CreateJob(const std::vector<std::string>& hosts) {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.set_name("it");
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

  void AttachAll(const control::CreateJobResponse& job, uint32_t n) {
    for (uint32_t r = 0; r < n; ++r) {
      control::AttachRequest req;
      *req.mutable_job() = Creds(job);
      req.set_rank(r);
      req.mutable_endpoint()->set_address(absl::StrFormat("127.0.0.1:%d", 30000 + r));
      req.mutable_endpoint()->set_qpn(0x40 + r);
      req.mutable_endpoint()->set_psn(r);
      control::AttachResponse resp;
      grpc::ClientContext ctx;
      grpc::Status s = host_->Attach(Ctx(&ctx), req, &resp);
      ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.error_message();
    }
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

  grpc::Status DestroyGroup(const control::CreateJobResponse& job, uint64_t id) {
    control::DestroyGroupRequest req;
    *req.mutable_job() = Creds(job);
    req.set_group_id(id);
    control::DestroyGroupResponse resp;
    grpc::ClientContext ctx;
    return host_->DestroyGroup(Ctx(&ctx), req, &resp);
  }

  grpc::Status DestroyJob(const control::CreateJobResponse& job) {
    control::DestroyJobRequest req;
    *req.mutable_job() = Creds(job);
    control::DestroyJobResponse resp;
    grpc::ClientContext ctx;
    return host_->DestroyJob(Ctx(&ctx), req, &resp);
  }

  control::WatchEventsRequest Watch(const control::CreateJobResponse& job, uint32_t rank) {
    control::WatchEventsRequest req;
    *req.mutable_job() = Creds(job);
    req.set_rank(rank);
    return req;
  }

  TempDir dir_;
  std::string config_path_;
  std::string topology_;
  std::unique_ptr<Subprocess> manager_;
  int port_ = 0;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<control::HostControl::Stub> host_;
  std::unique_ptr<control::Admin::Stub> admin_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<FakeFabric> fabric_;
  std::map<std::string, std::unique_ptr<FakeSwitchAgent>> agents_;
  std::map<std::string, std::unique_ptr<Subprocess>> switchd_;
};

const std::vector<std::string> kTwoLevelHosts = {"h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"};

TEST_F(ManagerdTest, JobsCreatedAndDestroyedInALoopLeakNothing) {
  StartManager("two_level.yaml");
  StartInProcessSwitches();
  for (int round = 0; round < 15; ++round) {
    control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
    AttachAll(job, 8);
    control::GroupInfo all, pair, odd;
    ASSERT_TRUE(CreateGroup(job, {0, 1, 2, 3, 4, 5, 6, 7}, &all).ok());
    ASSERT_TRUE(CreateGroup(job, {0, 1}, &pair).ok());
    ASSERT_TRUE(CreateGroup(job, {2, 5, 7}, &odd).ok());
    EXPECT_TRUE(fabric_->Get("root0")->HasGroup(all.group_id()));
    EXPECT_TRUE(fabric_->Get("leaf0")->HasGroup(pair.group_id()));
    ASSERT_TRUE(DestroyGroup(job, pair.group_id()).ok());
    ASSERT_TRUE(DestroyJob(job).ok());
  }
  // Nothing left on any switch but the four tree links' QP pairs.
  for (FakeSwitch* s : fabric_->All()) {
    control::ResourceUsage u = s->Usage();
    EXPECT_EQ(u.groups(), 0u) << s->name();
    EXPECT_EQ(u.slots(), 0u) << s->name();
    EXPECT_EQ(u.qps(), s->name() == "root0" ? 4u : 1u) << s->name();
  }
  // The manager's books agree, and so do the switches' own reports.
  EXPECT_TRUE(WaitUntil(
      [&] {
        control::GetStatusResponse st = GetStatus();
        for (const auto& s : st.switches()) {
          control::ResourceUsage held = fabric_->Get(s.name())->Usage();
          if (s.used().DebugString() != held.DebugString()) return false;
          if (s.reported().DebugString() != held.DebugString()) return false;
        }
        return st.jobs_size() == 0 && st.groups_size() == 0;
      },
      absl::Seconds(5)))
      << StatusText();
}

TEST_F(ManagerdTest, ManagerKilledAndRestartedMidJobJobsContinue) {
  StartManager("two_level.yaml");
  StartInProcessSwitches();
  control::CreateJobResponse job = CreateJob(kTwoLevelHosts);
  AttachAll(job, 8);
  control::GroupInfo wide, local;
  ASSERT_TRUE(CreateGroup(job, {0, 2, 4, 6}, &wide).ok());
  ASSERT_TRUE(CreateGroup(job, {4, 5}, &local).ok());
  HostHeartbeater heartbeats(channel_, Creds(job), 8);
  ASSERT_TRUE(WaitUntil([&] { return heartbeats.ok() >= 8; }, absl::Seconds(5)));
  const uint64_t first_incarnation = GetStatus().manager_incarnation();
  control::GetStatusResponse before = GetStatus();
  int commands_before = 0;
  for (FakeSwitch* s : fabric_->All()) commands_before += s->commands_applied();

  manager_->Signal(SIGKILL);
  ASSERT_TRUE(manager_->Wait(absl::Seconds(5)).has_value());
  StartManager("two_level.yaml", port_);  // same address: switches and hosts reconnect

  // Every switch registers again and is reconciled without a change.
  for (auto& [name, agent] : agents_) {
    EXPECT_TRUE(agent->WaitRegistered(absl::Seconds(20), 2)) << name;
  }
  ASSERT_TRUE(WaitAllUp()) << StatusText();
  control::GetStatusResponse after = GetStatus();
  EXPECT_NE(after.manager_incarnation(), first_incarnation);
  ASSERT_EQ(after.jobs_size(), 1);
  EXPECT_EQ(after.jobs(0).job_id(), job.job_id());
  EXPECT_EQ(after.jobs(0).num_attached(), 8u);
  ASSERT_EQ(after.groups_size(), 2);
  for (int i = 0; i < after.switches_size(); ++i) {
    // Reserved exactly as before: nothing was allocated twice.
    EXPECT_EQ(after.switches(i).used().DebugString(), before.switches(i).used().DebugString())
        << after.switches(i).name();
  }
  int commands_after = 0;
  for (FakeSwitch* s : fabric_->All()) commands_after += s->commands_applied();
  EXPECT_EQ(commands_after, commands_before);
  EXPECT_TRUE(fabric_->Get("root0")->HasGroup(wide.group_id()));
  EXPECT_TRUE(fabric_->Get("leaf2")->HasGroup(local.group_id()));

  // The job goes on: its key works, heartbeats reach the new manager,
  // watching works, groups come and go.
  EXPECT_TRUE(
      WaitUntil([&] { return heartbeats.last_incarnation() == after.manager_incarnation(); },
                absl::Seconds(10)));
  EventWatcher w(channel_, Watch(job, 0));
  ASSERT_TRUE(w.WaitStarted(absl::Seconds(5)));
  control::GroupInfo more;
  grpc::Status s = CreateGroup(job, {1, 3, 7}, &more);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(more.group_id(), local.group_id());
  EXPECT_TRUE(fabric_->Get("leaf3")->HasGroup(more.group_id()));
  ASSERT_TRUE(DestroyGroup(job, wide.group_id()).ok());
  // The manager does not wait for the switches' removals (they follow).
  EXPECT_TRUE(WaitUntil([&] { return !fabric_->Get("root0")->HasGroup(wide.group_id()); },
                        absl::Seconds(10)));
  EXPECT_TRUE(w.events().empty());  // nobody was revoked
  control::GetStatusResponse st = GetStatus();
  for (const auto& sw : st.switches()) {
    EXPECT_TRUE(WaitUntil(
        [&] { return fabric_->Get(sw.name())->Usage().groups() == sw.used().groups(); },
        absl::Seconds(10)))
        << sw.name();
    control::ResourceUsage held = fabric_->Get(sw.name())->Usage();
    EXPECT_EQ(sw.used().groups(), held.groups()) << sw.name();
    EXPECT_EQ(sw.used().slots(), held.slots()) << sw.name();
    EXPECT_EQ(sw.used().qps(), held.qps()) << sw.name();
  }
  ASSERT_TRUE(DestroyJob(job).ok());
}

TEST_F(ManagerdTest, KilledSwitchNotifiesAffectedProcessesOnly) {
  StartManager("two_level.yaml");
  StartSwitchProcesses();
  // Job A spans every leaf; job B lives on leaf0 and leaf1.
  control::CreateJobResponse a = CreateJob({"h0", "h2", "h4", "h6"});
  control::CreateJobResponse b = CreateJob({"h1", "h3"});
  AttachAll(a, 4);
  AttachAll(b, 2);
  control::GroupInfo a_wide, a_local, b_group;
  ASSERT_TRUE(CreateGroup(a, {0, 1, 2, 3}, &a_wide).ok());
  ASSERT_TRUE(CreateGroup(a, {0, 1}, &a_local).ok());
  ASSERT_TRUE(CreateGroup(b, {0, 1}, &b_group).ok());
  HostHeartbeater ha(channel_, Creds(a), 4);
  HostHeartbeater hb(channel_, Creds(b), 2);
  EventWatcher wa(channel_, Watch(a, 0));
  EventWatcher wb(channel_, Watch(b, 1));
  ASSERT_TRUE(wa.WaitStarted(absl::Seconds(5)));
  ASSERT_TRUE(wb.WaitStarted(absl::Seconds(5)));

  // leaf3's process dies.
  const absl::Time killed = absl::Now();
  switchd_["leaf3"]->Signal(SIGKILL);
  std::optional<JobEvent> ev = wa.WaitFor(
      [&](const JobEvent& e) {
        return e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == a_wide.group_id();
      },
      2 * kSwitchTimeout);
  ASSERT_TRUE(ev.has_value()) << StatusText();
  EXPECT_LE(absl::Now() - killed, 2 * kSwitchTimeout);
  EXPECT_NE(ev->reason().find("switch leaf3 is dead"), std::string::npos) << ev->reason();
  // Job B heard nothing and its group is intact.
  EXPECT_FALSE(
      wb.WaitFor([](const JobEvent&) { return true; }, absl::Milliseconds(500)).has_value());
  control::GetStatusResponse st = GetStatus();
  EXPECT_EQ(Find(st, "leaf3")->state(), control::SwitchStatus::DEAD);
  std::set<uint64_t> alive;
  for (const auto& g : st.groups()) alive.insert(g.group_id());
  EXPECT_EQ(alive, (std::set<uint64_t>{a_local.group_id(), b_group.group_id()}));
  EXPECT_EQ(Find(st, "leaf0")->used().groups(), 2u);

  // root0 hangs (stopped, its TCP connection still open): both remaining
  // groups cross it, so both jobs hear, within twice the timeout.
  const absl::Time stopped = absl::Now();
  switchd_["root0"]->Signal(SIGSTOP);
  std::optional<JobEvent> eb = wb.WaitFor(
      [&](const JobEvent& e) {
        return e.kind() == JobEvent::GROUP_REVOKED && e.group_id() == b_group.group_id();
      },
      2 * kSwitchTimeout + absl::Milliseconds(500));
  ASSERT_TRUE(eb.has_value()) << StatusText();
  EXPECT_LE(absl::Now() - stopped, 2 * kSwitchTimeout);
  EXPECT_NE(eb->reason().find("no heartbeat"), std::string::npos) << eb->reason();
  EXPECT_TRUE(wa.WaitFor(
                    [&](const JobEvent& e) {
                      return e.kind() == JobEvent::GROUP_REVOKED &&
                             e.group_id() == a_local.group_id();
                    },
                    absl::Seconds(2))
                  .has_value());
  // It wakes up, registers again and is usable.
  switchd_["root0"]->Signal(SIGCONT);
  EXPECT_TRUE(
      WaitUntil([&] { return Find(GetStatus(), "root0")->state() == control::SwitchStatus::UP; },
                absl::Seconds(10)))
      << StatusText();
  control::GroupInfo again;
  grpc::Status s = CreateGroup(b, {0, 1}, &again);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(again.root_switch(), "root0");
}

TEST_F(ManagerdTest, MalformedAndUnauthenticatedRequestsAreRefused) {
  WriteConfig("max_message_bytes: 4096\nrate_limit: {requests_per_second: 20, burst: 40}\n");
  StartManager("single_switch.yaml");
  StartInProcessSwitches();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});

  control::DestroyJobRequest no_key;
  no_key.mutable_job()->set_job_id(job.job_id());
  control::DestroyJobResponse dr;
  grpc::ClientContext c1;
  grpc::Status s = host_->DestroyJob(Ctx(&c1), no_key, &dr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(), "missing job key (JobCredentials.job_key)");

  control::AttachRequest forged;
  forged.mutable_job()->set_job_id(job.job_id());
  forged.mutable_job()->set_job_key(std::string(16, '\0'));
  forged.set_rank(0);
  forged.mutable_endpoint()->set_address("127.0.0.1:30000");
  forged.mutable_endpoint()->set_qpn(100);
  control::AttachResponse ar;
  grpc::ClientContext c2;
  s = host_->Attach(Ctx(&c2), forged, &ar);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("unknown job or wrong job key"), std::string::npos);

  control::AttachRequest bad = forged;
  *bad.mutable_job() = Creds(job);
  bad.mutable_endpoint()->set_address("127.0.0.1");
  grpc::ClientContext c3;
  s = host_->Attach(Ctx(&c3), bad, &ar);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("is not an IPv4 ip:port"), std::string::npos)
      << s.error_message();

  control::CreateJobRequest unknown_host;
  unknown_host.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  control::RankSpec* r = unknown_host.add_ranks();
  r->set_rank(0);
  r->set_host("h99");
  control::CreateJobResponse jr;
  grpc::ClientContext c4;
  s = host_->CreateJob(Ctx(&c4), unknown_host, &jr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("host 'h99' is not in topology 'single-switch'"),
            std::string::npos);

  control::CreateJobRequest huge = unknown_host;
  huge.set_name(std::string(8000, 'x'));
  grpc::ClientContext c5;
  s = host_->CreateJob(Ctx(&c5), huge, &jr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  s = RawUnaryCall(channel_, "/netfold.control.HostControl/Attach",
                   std::string("\x0a\xff\xff\xff\xff\x0f", 6), absl::Seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);

  FakeSwitch impostor("sw9", "127.0.0.1:1234", fabric_->Get("sw0")->Registration().capacity());
  FakeSwitchAgent agent(address_, &impostor);
  agent.Start();
  EXPECT_TRUE(WaitUntil([&] { return !agent.last_error().ok(); }, absl::Seconds(5)));
  EXPECT_EQ(agent.last_error().error_code(), grpc::StatusCode::NOT_FOUND);
  agent.Stop();

  // Explain says why a job would not fit.
  control::ExplainRequest ex;
  control::CreateJobRequest* big = ex.mutable_job();
  big->set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  for (uint32_t i = 0; i < 200; ++i) {
    control::RankSpec* rs = big->add_ranks();
    rs->set_rank(i);
    rs->set_host("h3");
  }
  control::ExplainResponse why;
  grpc::ClientContext c6;
  ASSERT_TRUE(admin_->Explain(Ctx(&c6), ex, &why).ok());
  EXPECT_FALSE(why.fits());
  EXPECT_NE(why.summary().find("switch sw0 has"), std::string::npos) << why.summary();

  // The job is intact after all of that.
  control::GetStatusResponse st = GetStatus();
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).job_id(), job.job_id());

  // Requests beyond the rate are refused, with the reason.
  int limited = 0;
  for (int i = 0; i < 100; ++i) {
    control::GetStatusResponse ignored;
    grpc::ClientContext ctx;
    grpc::Status gs = admin_->GetStatus(Ctx(&ctx), control::GetStatusRequest(), &ignored);
    if (gs.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++limited;
      EXPECT_NE(gs.error_message().find("rate limit"), std::string::npos);
    }
  }
  EXPECT_GT(limited, 20);
}

TEST_F(ManagerdTest, SigtermShutsDownCleanly) {
  StartManager("single_switch.yaml");
  StartInProcessSwitches();
  control::CreateJobResponse job = CreateJob({"h0"});
  EventWatcher w(channel_, Watch(job, 0));
  ASSERT_TRUE(w.WaitStarted(absl::Seconds(5)));
  manager_->Signal(SIGTERM);
  std::optional<int> status = manager_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << manager_->Log();
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 0) << manager_->Log();
  EXPECT_NE(w.WaitFinished(absl::Seconds(5)).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(manager_->Log().find("netfold-managerd stopped"), std::string::npos);
}

}  // namespace
}  // namespace netfold::manager
