// netfold-switchd as real processes on loopback: with netfold-managerd
// (deploy/topologies/switchd_test.yaml: root0 over leaf0 and leaf1, two
// hosts each) and in static mode without it. The "hosts" live in the test
// process: HostControl over gRPC for jobs and groups, a RoceEndpoint over a
// real UdpPort and host::GroupEngine for the data path. Every result is
// compared bit for bit with reduce::FoldScalarReference applied in the
// tree's order. Every daemon is killed and reaped when a test ends, pass or
// fail; every port is picked by the kernel (port 0 + port files); every
// wait has a deadline.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "auth/fabric_credential.h"
#include "auth/grpc_credential.h"
#include "auth/owned_file.h"
#include "auth/tls_certificates.h"
#include "gtest/gtest.h"
#include "tests/switch/tree_reference.h"
#include "manager/testing/grpc_test_util.h"
#include "manager/testing/temp_dir.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "reduce/reduce.h"
#include "tests/integration/random_elements.h"
#include "tests/manager/subprocess.h"
#include "tests/switch/switchd_test_host.h"

namespace netfold::testing {
namespace {

using manager::EventWatcher;
using manager::Subprocess;
using manager::TempDir;
using manager::WaitUntil;
using proto::DataType;
using proto::ReduceOp;
using Bytes = std::vector<uint8_t>;

constexpr absl::Duration kOpDeadline = absl::Seconds(20);
const std::vector<std::string> kLeaves = {"leaf0", "leaf1"};  // topology order
const std::vector<std::string> kSwitches = {"root0", "leaf0", "leaf1"};
const std::vector<std::string> kHosts = {"h0", "h1", "h2", "h3"};

grpc::ClientContext* Ctx(grpc::ClientContext* ctx, absl::Duration timeout = absl::Seconds(10)) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

// Reads the first line of a port file once it exists (written atomically).
std::optional<int> WaitPortFile(const std::string& path, Subprocess* p, absl::Duration timeout) {
  std::string text;
  const bool ok = WaitUntil(
      [&] {
        std::ifstream in(path);
        return (static_cast<bool>(std::getline(in, text)) && !text.empty()) || !p->running();
      },
      timeout);
  if (!ok || text.empty()) return std::nullopt;
  return std::stoi(text);
}

struct OpCase {
  DataType type;
  ReduceOp op;
  size_t count;
};

// Several dtypes and ops, counts spanning one to several slots of 1 KiB.
const std::vector<OpCase> kCases = {
    {DataType::kFp32, ReduceOp::kSum, 700},   {DataType::kFp64, ReduceOp::kSum, 300},
    {DataType::kInt32, ReduceOp::kMax, 257},  {DataType::kInt8, ReduceOp::kBxor, 3000},
    {DataType::kFp16, ReduceOp::kSum, 1500},  {DataType::kBf16, ReduceOp::kProd, 64},
    {DataType::kUint64, ReduceOp::kMin, 100}, {DataType::kFloatInt, ReduceOp::kMinloc, 200},
    {DataType::kInt64, ReduceOp::kSum, 0},
};

// Runs every case as an allreduce on `ranks` of group `g` and compares each
// rank's result with the tree-order reference.
void RunAllreduces(const std::vector<TestHost*>& hosts, const control::GroupInfo& g,
                   const std::vector<OpCase>& cases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const OpCase& c : cases) {
    SCOPED_TRACE(absl::StrFormat("%s %s x%d on group %d", proto::DataTypeName(c.type),
                                 proto::ReduceOpName(c.op), c.count, g.group_id()));
    std::map<uint32_t, Bytes> inputs;
    std::map<uint32_t, Bytes> outputs;
    std::map<uint32_t, host::OpId> ids;
    for (TestHost* h : hosts) {
      inputs[h->rank()] = RandomElements(c.type, c.count, rng);
      outputs[h->rank()] = Bytes(c.count * proto::DataTypeSize(c.type), 0xee);
    }
    for (TestHost* h : hosts) {
      absl::StatusOr<host::OpId> id = h->engine(g.group_id())
                                          .Start({.collective = proto::CollectiveType::kAllreduce,
                                                  .dtype = c.type,
                                                  .op = c.op,
                                                  .send = inputs[h->rank()].data(),
                                                  .recv = outputs[h->rank()].data(),
                                                  .count = c.count});
      ASSERT_TRUE(id.ok()) << id.status();
      ids[h->rank()] = *id;
    }
    ASSERT_TRUE(RunHosts(
        hosts,
        [&] {
          for (TestHost* h : hosts) {
            if (!h->engine(g.group_id()).Done(ids[h->rank()])) return false;
          }
          return true;
        },
        kOpDeadline))
        << "the allreduce did not complete within " << kOpDeadline;
    const Bytes expected = ::netfold::testing::TreeReference(g, kLeaves, c.type, c.op, c.count, inputs);
    for (TestHost* h : hosts) {
      absl::Status s = h->engine(g.group_id()).Finish(ids[h->rank()]);
      ASSERT_TRUE(s.ok()) << "rank " << h->rank() << ": " << s;
      ASSERT_EQ(outputs[h->rank()], expected) << "rank " << h->rank();
    }
  }
}

// ---------------------------------------------------------------------------

class SwitchdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    // The fabric credential, as netfold up makes it: daemons get the file.
    credential_file_ = dir_.path() + "/credential";
    absl::StatusOr<std::string> credential = auth::CreateCredentialFile(credential_file_);
    ASSERT_TRUE(credential.ok()) << credential.status();
    credential_ = *credential;
    // And the TLS files, as netfold certs makes them: every daemon serves
    // and calls with TLS.
    absl::StatusOr<auth::FabricCertificates> certs = auth::MakeFabricCertificates({});
    ASSERT_TRUE(certs.ok()) << certs.status();
    ASSERT_TRUE(auth::WriteOwnedFile(dir_.path() + "/ca.pem", certs->ca_pem).ok());
    ASSERT_TRUE(auth::WriteOwnedFile(dir_.path() + "/server.pem", certs->cert_pem).ok());
    ASSERT_TRUE(auth::WriteOwnedFile(dir_.path() + "/server.key", certs->key_pem).ok());
    client_auth_ = {.credential = credential_, .tls_ca_pem = certs->ca_pem};
  }

  void TearDown() override {
    if (HasFailure()) {
      if (manager_ != nullptr) std::fprintf(stderr, "--- managerd log ---\n%s", manager_->Log().c_str());
      for (auto& [name, p] : switchd_) {
        std::fprintf(stderr, "--- switchd %s log ---\n%s", name.c_str(), p->Log().c_str());
      }
    }
    hosts_.clear();
    switchd_.clear();  // SIGKILL + reap whatever still runs
    manager_.reset();
  }

  // Starts netfold-managerd with its journal in the test directory, on a
  // port of the kernel's choice (or `port` again, after a restart).
  void StartManager(int port = 0) {
    const std::string config = dir_.path() + "/manager.yaml";
    {
      std::ofstream out(config);
      out << "log_level: info\nheartbeat_interval_ms: 200\nswitch_timeout_ms: 1000\n"
          << "host_timeout_ms: 0\ncommand_timeout_ms: 3000\nreplan_on_failure: false\n";
    }
    const std::string port_file = dir_.path() + "/managerd.port";
    std::remove(port_file.c_str());
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
        {NETFOLD_MANAGERD, "--config", config, "--topology",
         std::string(NETFOLD_TOPOLOGY_DIR) + "/switchd_test.yaml", "--listen",
         absl::StrFormat("127.0.0.1:%d", port), "--state_dir", dir_.path() + "/state",
         "--port_file", port_file, "--credential_file", credential_file_, "--tls_dir",
         dir_.path()},
        dir_.path() + "/managerd.log");
    ASSERT_TRUE(p.ok()) << p.status();
    manager_ = *std::move(p);
    std::optional<int> bound = WaitPortFile(port_file, manager_.get(), absl::Seconds(20));
    ASSERT_TRUE(bound.has_value()) << "netfold-managerd did not start:\n" << manager_->Log();
    manager_port_ = *bound;
    manager_address_ = absl::StrFormat("127.0.0.1:%d", *bound);
    channel_ = manager::FastReconnectChannel(manager_address_, client_auth_);
    host_ = control::HostControl::NewStub(channel_);
    admin_ = control::Admin::NewStub(channel_);
  }

  // Starts netfold-switchd with `args` (plus port files) and waits for its
  // data and admin ports.
  void StartSwitchd(const std::string& name, std::vector<std::string> args) {
    const std::string data_file = dir_.path() + "/" + name + ".data.port";
    const std::string admin_file = dir_.path() + "/" + name + ".admin.port";
    std::vector<std::string> argv = {NETFOLD_SWITCHD, "--data_port_file", data_file,
                                     "--admin_port_file", admin_file, "--log_level", "info",
                                     "--credential_file", credential_file_,
                                     "--tls_dir", dir_.path()};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Start(argv, dir_.path() + "/switchd-" + name + ".log");
    ASSERT_TRUE(p.ok()) << p.status();
    switchd_[name] = *std::move(p);
    std::optional<int> data = WaitPortFile(data_file, switchd_[name].get(), absl::Seconds(20));
    std::optional<int> admin = WaitPortFile(admin_file, switchd_[name].get(), absl::Seconds(20));
    ASSERT_TRUE(data.has_value() && admin.has_value())
        << "netfold-switchd " << name << " did not start:\n" << switchd_[name]->Log();
    data_port_[name] = *data;
    switch_admin_[name] = control::SwitchAdmin::NewStub(
        auth::CreateChannel(absl::StrFormat("127.0.0.1:%d", *admin), client_auth_));
  }

  void StartManagedSwitches(const std::vector<std::string>& extra_flags = {}) {
    for (const std::string& name : kSwitches) {
      std::vector<std::string> args = {"--name", name, "--data_address", "127.0.0.1:0",
                                       "--manager", manager_address_};
      args.insert(args.end(), extra_flags.begin(), extra_flags.end());
      StartSwitchd(name, args);
    }
    ASSERT_TRUE(WaitAllUp()) << "switches did not all come up";
  }

  control::GetStatusResponse Status() {
    control::GetStatusResponse st;
    grpc::ClientContext ctx;
    grpc::Status s = admin_->GetStatus(Ctx(&ctx, absl::Seconds(5)), control::GetStatusRequest(), &st);
    return s.ok() ? st : control::GetStatusResponse();
  }

  std::optional<control::SwitchStatus::State> SwitchState(const std::string& name) {
    const control::GetStatusResponse st = Status();
    for (const auto& s : st.switches()) {
      if (s.name() == name) return s.state();
    }
    return std::nullopt;
  }

  bool WaitAllUp() {
    return WaitUntil(
        [&] {
          control::GetStatusResponse st = Status();
          if (st.switches_size() != static_cast<int>(kSwitches.size())) return false;
          for (const auto& s : st.switches()) {
            if (s.state() != control::SwitchStatus::UP) return false;
          }
          return true;
        },
        absl::Seconds(20), absl::Milliseconds(50));
  }

  control::ListGroupsResponse ListGroups(const std::string& name) {
    control::ListGroupsResponse resp;
    grpc::ClientContext ctx;
    control::ListGroupsRequest req;
    req.set_detail(true);
    grpc::Status s = switch_admin_.at(name)->ListGroups(Ctx(&ctx, absl::Seconds(5)), req, &resp);
    EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
    return resp;
  }

  control::GetCountersResponse Counters(const std::string& name) {
    control::GetCountersResponse resp;
    grpc::ClientContext ctx;
    control::GetCountersRequest req;
    req.set_detail(true);
    grpc::Status s = switch_admin_.at(name)->GetCounters(Ctx(&ctx, absl::Seconds(5)), req, &resp);
    EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
    return resp;
  }

  grpc::Status SetLinkFault(const std::string& name, const std::string& peer,
                            const std::string& impairment, control::SetLinkFaultResponse* resp) {
    control::SetLinkFaultRequest req;
    req.set_peer(peer);
    req.set_direction(control::LINK_DIRECTION_BOTH);
    req.set_impairment(impairment);
    grpc::ClientContext ctx;
    return switch_admin_.at(name)->SetLinkFault(Ctx(&ctx, absl::Seconds(5)), req, resp);
  }

  // A job over the four hosts, every rank attached with its own TestHost.
  control::CreateJobResponse StartJob() {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.set_name("switchd-it");
    for (size_t i = 0; i < kHosts.size(); ++i) {
      control::RankSpec* r = req.add_ranks();
      r->set_rank(static_cast<uint32_t>(i));
      r->set_host(kHosts[i]);
    }
    req.mutable_quota()->set_max_groups(8);
    req.mutable_quota()->set_num_slots(4);
    req.mutable_quota()->set_slot_bytes(1024);
    control::CreateJobResponse job;
    grpc::ClientContext ctx;
    grpc::Status s = host_->CreateJob(Ctx(&ctx), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    creds_.set_job_id(job.job_id());
    creds_.set_job_key(job.job_key());
    for (uint32_t r = 0; r < kHosts.size(); ++r) {
      absl::StatusOr<std::unique_ptr<TestHost>> h = TestHost::Create(r);
      EXPECT_TRUE(h.ok()) << h.status();
      if (!h.ok()) return job;
      EXPECT_TRUE((*h)->Init(job.pkey(), job.qkey()).ok());
      control::AttachRequest attach;
      *attach.mutable_job() = creds_;
      attach.set_rank(r);
      *attach.mutable_endpoint() = (*h)->LocalEndpoint();
      control::AttachResponse resp;
      grpc::ClientContext actx;
      grpc::Status as = host_->Attach(Ctx(&actx), attach, &resp);
      EXPECT_TRUE(as.ok()) << "rank " << r << ": " << as.error_message();
      EXPECT_EQ(resp.leaf_switch(), r < 2 ? "leaf0" : "leaf1");
      absl::Status cs = (*h)->Connect(resp.switch_endpoint());
      EXPECT_TRUE(cs.ok()) << cs;
      hosts_.push_back(*std::move(h));
    }
    return job;
  }

  // Creates a group over `ranks` and starts an engine on each member.
  control::GroupInfo CreateGroup(const std::vector<uint32_t>& ranks,
                                 control::DeliveryMode delivery = control::DELIVERY_MULTICAST) {
    control::CreateGroupRequest req;
    *req.mutable_job() = creds_;
    for (uint32_t r : ranks) req.add_ranks(r);
    req.set_delivery(delivery);
    control::CreateGroupResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = host_->CreateGroup(Ctx(&ctx), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (uint32_t r : ranks) {
      absl::Status js = hosts_[r]->JoinGroup(resp.group());
      EXPECT_TRUE(js.ok()) << js;
    }
    return resp.group();
  }

  grpc::Status DestroyGroup(uint64_t group_id) {
    control::DestroyGroupRequest req;
    *req.mutable_job() = creds_;
    req.set_group_id(group_id);
    control::DestroyGroupResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = host_->DestroyGroup(Ctx(&ctx), req, &resp);
    for (auto& h : hosts_) h->LeaveGroup(group_id);
    return s;
  }

  std::vector<TestHost*> Members(const std::vector<uint32_t>& ranks) {
    std::vector<TestHost*> out;
    for (uint32_t r : ranks) out.push_back(hosts_[r].get());
    return out;
  }

  // No group and no slot left on any running switch.
  void ExpectNoSlotsAnywhere() {
    for (const auto& [name, p] : switchd_) {
      if (!p->running()) continue;
      control::ListGroupsResponse g = ListGroups(name);
      EXPECT_EQ(g.groups_size(), 0) << name;
      EXPECT_EQ(g.usage().groups(), 0u) << name;
      EXPECT_EQ(g.usage().slots(), 0u) << name;
      EXPECT_EQ(g.busy_slots(), 0u) << name;
    }
  }

  TempDir dir_;
  std::string credential_file_;
  std::string credential_;
  auth::ClientAuth client_auth_;
  std::unique_ptr<Subprocess> manager_;
  int manager_port_ = 0;
  std::string manager_address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<control::HostControl::Stub> host_;
  std::unique_ptr<control::Admin::Stub> admin_;
  std::map<std::string, std::unique_ptr<Subprocess>> switchd_;
  std::map<std::string, int> data_port_;
  std::map<std::string, std::unique_ptr<control::SwitchAdmin::Stub>> switch_admin_;
  control::JobCredentials creds_;
  std::vector<std::unique_ptr<TestHost>> hosts_;
};

TEST_F(SwitchdTest, AllreduceThroughTheManagedFabricMatchesTheTreeOrderBitForBit) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());

  // Every rank: a group through root0, multicast delivery.
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  ASSERT_EQ(g.root_switch(), "root0");
  ASSERT_EQ(g.switches_size(), 3);
  // The root holds the group, with the leaves' ranks under each child.
  control::ListGroupsResponse root = ListGroups("root0");
  ASSERT_EQ(root.groups_size(), 1);
  ASSERT_EQ(root.groups(0).children_size(), 2);
  EXPECT_EQ(root.groups(0).children(1).ranks_size(), 2);
  EXPECT_EQ(root.groups(0).children(1).ranks(0), 2u);
  EXPECT_TRUE(root.groups(0).is_root());
  EXPECT_EQ(root.usage().slots(), g.num_slots());
  RunAllreduces(Members(all), g, kCases, 1);
  if (HasFailure()) return;

  // A group on one leaf (it never leaves leaf0) and one with RC delivery
  // down the tree, at the same time as the first.
  const std::vector<uint32_t> pair = {0, 1};
  control::GroupInfo local = CreateGroup(pair);
  EXPECT_EQ(local.root_switch(), "leaf0");
  const std::vector<uint32_t> cross = {1, 2};
  control::GroupInfo rc = CreateGroup(cross, control::DELIVERY_RC_DOWN);
  EXPECT_EQ(rc.root_switch(), "root0");
  RunAllreduces(Members(pair), local, {kCases[0], kCases[2]}, 2);
  RunAllreduces(Members(cross), rc, {kCases[1], kCases[3], kCases[7]}, 3);
  RunAllreduces(Members(all), g, {kCases[4]}, 4);
  if (HasFailure()) return;

  // The counters saw it: requests and completions at the root, QPs, peers.
  control::GetCountersResponse c = Counters("root0");
  EXPECT_EQ(c.name(), "root0");
  ASSERT_GE(c.groups_size(), 2);
  EXPECT_GT(c.groups(0).operations_completed(), 0u);
  uint64_t latency_samples = 0;
  for (uint64_t b : c.groups(0).latency_us_log2()) latency_samples += b;
  EXPECT_EQ(latency_samples, c.groups(0).operations_completed());
  EXPECT_EQ(c.qps_size(), 2);  // one per leaf link
  EXPECT_GE(c.peers_size(), 2);

  // Destroyed groups leave no slot on any switch.
  for (uint64_t id : {g.group_id(), local.group_id(), rc.group_id()}) {
    ASSERT_TRUE(DestroyGroup(id).ok());
  }
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, LossyLinksStillGiveExactResults) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);

  // Loss, duplication and reordering on every link of leaf0 and on root0's
  // links (both directions), set at run time.
  control::SetLinkFaultResponse resp;
  grpc::Status s = SetLinkFault("leaf0", "all", "drop=0.05,dup=0.02,reorder=0.05:200us,seed=11", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GE(resp.links_size(), 1);
  EXPECT_EQ(resp.links(resp.links_size() - 1).peer(), "default");
  EXPECT_NE(resp.links(0).send().find("drop=0.05"), std::string::npos) << resp.links(0).send();
  // 5 %, not more: the leaf0 - root0 link is impaired at both ends, four
  // stages per round trip, and RC gives up after eight lost transmissions
  // in a row (docs/faults.md: at 10 % that is 5e-4 per lost packet).
  s = SetLinkFault("root0", "all", "drop=0.05,seed=12", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // A bad impairment is refused with the parser's reason.
  s = SetLinkFault("root0", "all", "drop=1.5", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  RunAllreduces(Members(all), g, kCases, 7);
  RunAllreduces(Members(all), g, kCases, 17);
  if (HasFailure()) return;

  // The impairment stages dropped packets (a few hundred packets at 5 %:
  // none dropped is a 1e-7 event), and every one was repaired.
  uint64_t dropped = 0;
  for (const std::string& name : {std::string("leaf0"), std::string("root0")}) {
    const control::GetCountersResponse c = Counters(name);
    for (const control::PeerCounters& p : c.peers()) {
      for (const auto& d : p.send_stage().drops()) dropped += d.count();
      for (const auto& d : p.receive_stage().drops()) dropped += d.count();
    }
  }
  EXPECT_GT(dropped, 0u);
  // Faults off: a link of one peer can be set alone.
  ASSERT_TRUE(SetLinkFault("leaf0", "all", "none", &resp).ok());
  ASSERT_TRUE(SetLinkFault("root0", "all", "none", &resp).ok());
  ASSERT_TRUE(SetLinkFault("leaf1", absl::StrFormat("127.0.0.1:%d", data_port_["root0"]), "dup=0.5,seed=3",
                           &resp).ok());
  ASSERT_EQ(resp.links_size(), 1);
  RunAllreduces(Members(all), g, {kCases[0]}, 8);
  ASSERT_TRUE(DestroyGroup(g.group_id()).ok());
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, KilledSwitchdIsRevokedByTheManager) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  control::WatchEventsRequest watch;
  *watch.mutable_job() = creds_;
  watch.set_rank(0);
  EventWatcher watcher(channel_, watch);
  ASSERT_TRUE(watcher.WaitStarted(absl::Seconds(5)));
  RunAllreduces(Members(all), g, {kCases[0]}, 5);

  switchd_.at("leaf1")->Signal(SIGKILL);
  ASSERT_TRUE(switchd_.at("leaf1")->Wait(absl::Seconds(5)).has_value());
  std::optional<control::JobEvent> e = watcher.WaitFor(
      [&](const control::JobEvent& ev) {
        return ev.kind() == control::JobEvent::GROUP_REVOKED && ev.group_id() == g.group_id();
      },
      absl::Seconds(5));
  ASSERT_TRUE(e.has_value()) << "no GROUP_REVOKED after leaf1 died";
  EXPECT_EQ(SwitchState("leaf1"), control::SwitchStatus::DEAD);
  // The survivors were told to remove the group: nothing left on them.
  EXPECT_TRUE(WaitUntil(
      [&] { return ListGroups("root0").usage().slots() == 0 && ListGroups("leaf0").usage().slots() == 0; },
      absl::Seconds(5)));
  // The engines of the survivors hear of it (abort) or time out: nothing hangs.
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, SigtermRemovesEveryGroupAndExitsZero) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[2]}, 6);
  // An operation stuck in root0 (rank 3 never posts): slots are busy.
  Bytes in(64, 1), out(64);
  std::vector<TestHost*> three = Members({0, 1, 2});
  for (TestHost* h : three) {
    ASSERT_TRUE(h->engine(g.group_id())
                    .Start({.dtype = DataType::kInt32, .send = in.data(), .recv = out.data(), .count = 16})
                    .ok());
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (TestHost* h : three) h->Poll();
        return ListGroups("root0").busy_slots() > 0;
      },
      absl::Seconds(5), absl::Milliseconds(5)));

  // root0 holds the busy slots; leaf0 may or may not still hold the group
  // (the manager revokes it once root0 is gone): both exit 0 with no slot left.
  for (const std::string& name : {std::string("root0"), std::string("leaf0")}) {
    switchd_.at(name)->Signal(SIGTERM);
    std::optional<int> status = switchd_.at(name)->Wait(absl::Seconds(10));
    ASSERT_TRUE(status.has_value()) << name << " did not exit after SIGTERM";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << name << " status " << *status;
    const std::string log = switchd_.at(name)->Log();
    if (name == "root0") {
      EXPECT_NE(log.find("1 groups removed"), std::string::npos) << log;
    }
    EXPECT_NE(log.find("0 slots left"), std::string::npos) << log;
  }
  EXPECT_TRUE(WaitUntil([&] { return SwitchState("root0") == control::SwitchStatus::DEAD; },
                        absl::Seconds(5)));
}

TEST_F(SwitchdTest, QpErrorOnATreeLinkIsReportedAndRevokesItsGroups) {
  StartManager();
  // Short RC timeouts: a dead link fails its QPs within ~30 ms.
  StartManagedSwitches({"--ack_timeout_ms", "1", "--retry_count", "3"});
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[2]}, 10);
  control::WatchEventsRequest watch;
  *watch.mutable_job() = creds_;
  watch.set_rank(3);
  EventWatcher watcher(channel_, watch);
  ASSERT_TRUE(watcher.WaitStarted(absl::Seconds(5)));

  // leaf1's link to root0 goes down (both directions); the next operation's
  // partial result from leaf1 is never acknowledged.
  control::SetLinkFaultResponse resp;
  ASSERT_TRUE(
      SetLinkFault("leaf1", absl::StrFormat("127.0.0.1:%d", data_port_["root0"]), "down=1", &resp)
          .ok());
  Bytes in(256, 1), out(256);
  std::map<uint32_t, host::OpId> ids;
  for (TestHost* h : Members(all)) {
    absl::StatusOr<host::OpId> id = h->engine(g.group_id())
                                        .Start({.dtype = DataType::kInt32, .send = in.data(),
                                                .recv = out.data(), .count = 64});
    ASSERT_TRUE(id.ok()) << id.status();
    ids[h->rank()] = *id;
  }
  std::optional<control::JobEvent> revoked;
  ASSERT_TRUE(RunHosts(
      Members(all),
      [&] {
        revoked = watcher.WaitFor(
            [&](const control::JobEvent& e) {
              return e.kind() == control::JobEvent::GROUP_REVOKED && e.group_id() == g.group_id();
            },
            absl::ZeroDuration());
        return revoked.has_value();
      },
      absl::Seconds(10)))
      << "no GROUP_REVOKED after leaf1's link QP failed";
  // leaf1 reported the failure; the manager dropped the link (both QPs) and
  // removed the group from every switch; the stuck operation ends with an
  // error on every rank, nothing hangs.
  EXPECT_NE(switchd_.at("leaf1")->Log().find("reported QP"), std::string::npos)
      << switchd_.at("leaf1")->Log();
  // root0 keeps only its link to leaf0.
  EXPECT_TRUE(WaitUntil([&] { return Counters("root0").qps_size() == 1; }, absl::Seconds(5)));
  ASSERT_TRUE(RunHosts(
      Members(all),
      [&] {
        for (TestHost* h : Members(all)) {
          if (!h->engine(g.group_id()).Done(ids[h->rank()])) return false;
        }
        return true;
      },
      absl::Seconds(25)));
  for (TestHost* h : Members(all)) {
    EXPECT_FALSE(h->engine(g.group_id()).Finish(ids[h->rank()]).ok()) << "rank " << h->rank();
  }
  ExpectNoSlotsAnywhere();
}

TEST_F(SwitchdTest, SwitchesReRegisterAfterAManagerRestartAndKeepServing) {
  StartManager();
  StartManagedSwitches();
  StartJob();
  ASSERT_FALSE(HasFailure());
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  control::GroupInfo g = CreateGroup(all);
  RunAllreduces(Members(all), g, {kCases[0]}, 11);

  // The manager dies; the data plane does not need it.
  manager_->Signal(SIGKILL);
  ASSERT_TRUE(manager_->Wait(absl::Seconds(5)).has_value());
  RunAllreduces(Members(all), g, {kCases[2]}, 12);
  // Long enough for the switches' reconnect attempts to back off to their
  // cap (the manager writes off a switch that does not re-register within
  // 2 s of its restart).
  absl::SleepFor(absl::Milliseconds(1500));
  // It comes back on the same port with its journal: every switch
  // reconnects (with backoff), reports the group and its QPs, and is
  // reconciled without losing anything.
  StartManager(manager_port_);
  ASSERT_TRUE(WaitAllUp()) << "switches did not re-register";
  for (const std::string& name : kSwitches) {
    // The journal brings the switches back as UP at once; a switch's own
    // re-registration (it reports its group) follows within its backoff.
    EXPECT_TRUE(WaitUntil(
        [&] { return switchd_.at(name)->Log().find("(1 groups") != std::string::npos; },
        absl::Seconds(10)))
        << name << ":\n" << switchd_.at(name)->Log();
    EXPECT_EQ(ListGroups(name).groups_size(), 1) << name;
  }
  RunAllreduces(Members(all), g, {kCases[1], kCases[7]}, 13);
  ASSERT_TRUE(DestroyGroup(g.group_id()).ok());
  ExpectNoSlotsAnywhere();
}

// ---------------------------------------------------------------------------
// Static mode: no manager; QPs and the group from the YAML file.

TEST_F(SwitchdTest, StaticModeServesAGroupWithoutAManager) {
  constexpr uint32_t kPkey = 0x8005;
  // A group address and Q_Key of this run only: another run of this test on
  // the same machine must not feed our hosts its results.
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()) * 1000003u +
                      static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  const uint32_t kQkey = static_cast<uint32_t>(rng() & 0x7fffffff);
  const std::string group_address =
      absl::StrFormat("239.78.%d.%d:4791", rng() % 256, 1 + rng() % 254);
  for (uint32_t r = 0; r < 3; ++r) {
    absl::StatusOr<std::unique_ptr<TestHost>> h = TestHost::Create(r);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE((*h)->Init(kPkey, kQkey, /*qpn=*/0x200 + r).ok());
    hosts_.push_back(*std::move(h));
  }
  const std::string config = dir_.path() + "/static.yaml";
  {
    std::ofstream out(config);
    out << "name: static0\ndata_address: 127.0.0.1:0\nadmin_address: 127.0.0.1:0\n"
        << "static:\n  jobs: [{id: 3, quota: {groups: 2, slots: 16, qps: 4}}]\n  qps:\n";
    for (uint32_t r = 0; r < 3; ++r) {
      out << absl::StrFormat(
          "    - {qpn: 0x%x, psn: %d, job: 3, pkey: 0x%x, peer: \"rank %d\", remote: {address: %s, "
          "qpn: 0x%x, psn: %d}}\n",
          0x1000 + r, 500 + r, kPkey, r, hosts_[r]->address().ToString(), hosts_[r]->qpn(),
          hosts_[r]->psn());
    }
    out << absl::StrFormat(
        "  groups:\n    - {tree: 0, group: 7, epoch: 1, job: 3, pkey: 0x8005, qkey: 0x%x, "
        "num_slots: 4, slot_bytes: 512, multicast: %s, children: [{qpn: 0x1000, ranks: [0]}, "
        "{qpn: 0x1001, ranks: [1]}, {qpn: 0x1002, ranks: [2]}]}\n",
        kQkey, group_address);
  }
  StartSwitchd("static0", {"--config", config});
  ASSERT_FALSE(HasFailure());
  control::GroupInfo g;
  g.set_group_id(7);
  g.set_tree_id(0);
  g.set_epoch(1);
  g.set_num_slots(4);
  g.set_slot_bytes(512);
  g.set_delivery(control::DELIVERY_MULTICAST);
  g.set_multicast_address(group_address);
  for (uint32_t r = 0; r < 3; ++r) {
    control::Endpoint sw;
    sw.set_address(absl::StrFormat("127.0.0.1:%d", data_port_["static0"]));
    sw.set_qpn(0x1000 + r);
    sw.set_psn(500 + r);
    ASSERT_TRUE(hosts_[r]->Connect(sw).ok());
    ASSERT_TRUE(hosts_[r]->JoinGroup(g).ok());
    control::GroupMember* m = g.add_members();
    m->set_rank(r);
    m->set_leaf_switch("leaf0");
    m->set_child_index(r);
  }
  control::ListGroupsResponse groups = ListGroups("static0");
  ASSERT_EQ(groups.groups_size(), 1);
  EXPECT_EQ(groups.groups(0).group_id(), 7u);
  EXPECT_EQ(groups.groups(0).children(2).peer(), "rank 2");
  RunAllreduces(Members({0, 1, 2}), g, {kCases[0], kCases[2], kCases[5], kCases[8]}, 9);
  if (HasFailure()) return;

  switchd_.at("static0")->Signal(SIGTERM);
  std::optional<int> status = switchd_.at("static0")->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_NE(switchd_.at("static0")->Log().find("1 groups removed, 3 QPs destroyed, 0 slots left"),
            std::string::npos)
      << switchd_.at("static0")->Log();
}

TEST_F(SwitchdTest, RefusedRegistrationIsLoggedAndRetried) {
  StartManager();
  // leaf0 offers 1024-byte slots; the topology declares 4048. At debug
  // level every retry is in the log; the error is said once (then once a
  // minute), not at every retry.
  StartSwitchd("leaf0", {"--name", "leaf0", "--data_address", "127.0.0.1:0", "--manager",
                         manager_address_, "--slot_bytes", "1024", "--log_level", "debug"});
  ASSERT_FALSE(HasFailure());
  auto refusals = [&] {
    const std::string log = switchd_.at("leaf0")->Log();
    size_t n = 0;
    for (size_t at = log.find("offers slot_bytes=1024"); at != std::string::npos;
         at = log.find("offers slot_bytes=1024", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_TRUE(WaitUntil([&] { return refusals() >= 3; }, absl::Seconds(10)))
      << switchd_.at("leaf0")->Log();
  const std::string log = switchd_.at("leaf0")->Log();
  size_t errors = 0;
  for (size_t at = log.find("the manager refused the registration"); at != std::string::npos;
       at = log.find("the manager refused the registration", at + 1)) {
    ++errors;
  }
  EXPECT_EQ(errors, 1u) << log;
  EXPECT_NE(SwitchState("leaf0"), control::SwitchStatus::UP);
  EXPECT_TRUE(switchd_.at("leaf0")->running());
}

TEST_F(SwitchdTest, BadConfigExitsTwoWithTheReason) {
  const std::string config = dir_.path() + "/bad.yaml";
  {
    std::ofstream out(config);
    out << "name: x\ncapacity: {slot_bytes: 4096}\n";
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({NETFOLD_SWITCHD, "--config", config}, dir_.path() + "/bad.log");
  ASSERT_TRUE(p.ok());
  std::optional<int> status = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status;
  EXPECT_NE((*p)->Log().find("at most 4048"), std::string::npos) << (*p)->Log();
}

}  // namespace
}  // namespace netfold::testing
