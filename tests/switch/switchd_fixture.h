// The fixture of the netfold-switchd integration tests: real
// netfold-managerd and netfold-switchd processes on loopback
// (deploy/topologies/switchd_test.yaml: root0 over leaf0 and leaf1, two
// hosts each), hosts in the test process (HostControl over gRPC, a
// RoceEndpoint over a real UdpPort and host::GroupEngine for the data path),
// results compared bit for bit with reduce::FoldScalarReference in the
// tree's order. Every daemon is killed and reaped when a test ends, pass or
// fail; every port is picked by the kernel (port 0 + port files); every
// wait has a deadline.
#ifndef NETFOLD_TESTS_SWITCH_SWITCHD_FIXTURE_H_
#define NETFOLD_TESTS_SWITCH_SWITCHD_FIXTURE_H_

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
#include "absl/strings/str_join.h"
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

using manager::EventWatcher;
using manager::Subprocess;
using manager::TempDir;
using manager::WaitUntil;
using proto::DataType;
using proto::ReduceOp;
using Bytes = std::vector<uint8_t>;

inline constexpr absl::Duration kOpDeadline = absl::Seconds(20);
inline const std::vector<std::string> kLeaves = {"leaf0", "leaf1"};  // topology order
inline const std::vector<std::string> kSwitches = {"root0", "leaf0", "leaf1"};
inline const std::vector<std::string> kHosts = {"h0", "h1", "h2", "h3"};

inline grpc::ClientContext* Ctx(grpc::ClientContext* ctx, absl::Duration timeout = absl::Seconds(10)) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

// Reads the first line of a port file once it exists (written atomically).
inline std::optional<int> WaitPortFile(const std::string& path, Subprocess* p, absl::Duration timeout) {
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
inline const std::vector<OpCase> kCases = {
    {DataType::kFp32, ReduceOp::kSum, 700},   {DataType::kFp64, ReduceOp::kSum, 300},
    {DataType::kInt32, ReduceOp::kMax, 257},  {DataType::kInt8, ReduceOp::kBxor, 3000},
    {DataType::kFp16, ReduceOp::kSum, 1500},  {DataType::kBf16, ReduceOp::kProd, 64},
    {DataType::kUint64, ReduceOp::kMin, 100}, {DataType::kFloatInt, ReduceOp::kMinloc, 200},
    {DataType::kInt64, ReduceOp::kSum, 0},
};

// Runs every case as an allreduce on `ranks` of group `g` and compares each
// rank's result with the tree-order reference.
inline void RunAllreduces(const std::vector<TestHost*>& hosts, const control::GroupInfo& g,
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
  // `topology`: a file of its own instead of switchd_test.yaml.
  void StartManager(int port = 0, std::string topology = "") {
    if (topology.empty()) topology = std::string(NETFOLD_TOPOLOGY_DIR) + "/switchd_test.yaml";
    const std::string config = dir_.path() + "/manager.yaml";
    {
      std::ofstream out(config);
      out << "log_level: info\nheartbeat_interval_ms: 200\nswitch_timeout_ms: 1000\n"
          << "host_timeout_ms: 0\ncommand_timeout_ms: 3000\nreplan_on_failure: false\n";
    }
    const std::string port_file = dir_.path() + "/managerd.port";
    std::remove(port_file.c_str());
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
        {NETFOLD_MANAGERD, "--config", config, "--topology", topology, "--listen",
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
    StartSwitchdProcess(name, {name}, std::move(args));
  }

  // Starts one netfold-switchd (`process`, the key of switchd_) that runs
  // the switches `names` (args give --name), and waits for every one's data
  // and admin ports.
  void StartSwitchdProcess(const std::string& process, const std::vector<std::string>& names,
                           std::vector<std::string> args) {
    const std::string one = names.size() == 1 ? names[0] : "{name}";
    std::vector<std::string> argv = {NETFOLD_SWITCHD, "--data_port_file",
                                     dir_.path() + "/" + one + ".data.port", "--admin_port_file",
                                     dir_.path() + "/" + one + ".admin.port", "--log_level", "info",
                                     "--credential_file", credential_file_,
                                     "--tls_dir", dir_.path()};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Start(argv, dir_.path() + "/switchd-" + process + ".log");
    ASSERT_TRUE(p.ok()) << p.status();
    switchd_[process] = *std::move(p);
    for (const std::string& name : names) {
      Subprocess* sp = switchd_[process].get();
      std::optional<int> data =
          WaitPortFile(dir_.path() + "/" + name + ".data.port", sp, absl::Seconds(20));
      std::optional<int> admin =
          WaitPortFile(dir_.path() + "/" + name + ".admin.port", sp, absl::Seconds(20));
      ASSERT_TRUE(data.has_value() && admin.has_value())
          << "netfold-switchd " << name << " did not start:\n" << sp->Log();
      data_port_[name] = *data;
      process_of_[name] = process;
      switch_admin_[name] = control::SwitchAdmin::NewStub(
          auth::CreateChannel(absl::StrFormat("127.0.0.1:%d", *admin), client_auth_));
    }
  }

  // The switches of the topology, a process each or (one_process) all in
  // one, registered with the manager and UP.
  void StartManagedSwitches(const std::vector<std::string>& extra_flags = {},
                            bool one_process = false) {
    std::vector<std::vector<std::string>> processes;
    if (one_process) {
      processes.push_back(kSwitches);
    } else {
      for (const std::string& name : kSwitches) processes.push_back({name});
    }
    for (const std::vector<std::string>& names : processes) {
      std::vector<std::string> args = {"--name", absl::StrJoin(names, ","), "--data_address",
                                       "127.0.0.1:0", "--manager", manager_address_};
      args.insert(args.end(), extra_flags.begin(), extra_flags.end());
      StartSwitchdProcess(names.size() == 1 ? names[0] : "switches", names, args);
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

  // Ranks 0..2 start an allreduce of 16 int32 (`in`, into `out`) on `g`,
  // which rank 3 never joins, until root0 holds a busy slot for it.
  void StartAnOperationRank3NeverJoins(const control::GroupInfo& g, const Bytes& in, Bytes* out) {
    std::vector<TestHost*> three = Members({0, 1, 2});
    for (TestHost* h : three) {
      ASSERT_TRUE(h->engine(g.group_id())
                      .Start({.dtype = DataType::kInt32, .send = in.data(), .recv = out->data(),
                              .count = 16})
                      .ok());
    }
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (TestHost* h : three) h->Poll();
          return ListGroups("root0").busy_slots() > 0;
        },
        absl::Seconds(5), absl::Milliseconds(5)));
  }

  // No group and no slot left on any running switch.
  // The manager answers DestroyGroup before the switches have taken the
  // removals it sent them (they are not waited for): each switch is given
  // up to 10 s to show none.
  void ExpectNoSlotsAnywhere() {
    for (const auto& [name, process] : process_of_) {
      if (!switchd_.at(process)->running()) continue;
      control::ListGroupsResponse g = ListGroups(name);
      for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
           (g.groups_size() > 0 || g.usage().slots() > 0) && absl::Now() < deadline;) {
        absl::SleepFor(absl::Milliseconds(10));
        g = ListGroups(name);
      }
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
  std::map<std::string, std::string> process_of_;  // switch -> its key in switchd_
  std::map<std::string, std::unique_ptr<control::SwitchAdmin::Stub>> switch_admin_;
  control::JobCredentials creds_;
  std::vector<std::unique_ptr<TestHost>> hosts_;
};

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_SWITCH_SWITCHD_FIXTURE_H_
