// Issue 23, items 3 and 5: the control plane of a `netfold up` fabric asks
// every caller for the fabric credential. A stranger on the machine can no
// longer register as a switch (which revoked a running job's group), stop a
// job with a switch's SetLinkFault, read every job's P_Key from the
// manager's GetStatus, or find the secret in a daemon's command line; and a
// credential file others can read is refused with a clear message
// (docs/security.md, "The control plane: who may call").
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/host/rank_launcher.h"
#include "tests/manager/subprocess.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;
using testing::Launch;

constexpr char kWrong[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<tools::LocalFabric> StartFabric() {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  auto fabric = tools::LocalFabric::Start(o);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  return fabric.ok() ? *std::move(fabric) : nullptr;
}

grpc::Status GetStatus(const tools::LocalFabric& fabric, const std::string& credential,
                       control::GetStatusResponse* out) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(fabric.manager_address(),
                                                          {credential, fabric.client_auth().tls_ca_pem}));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  return stub->GetStatus(&c, control::GetStatusRequest(), out);
}

control::GetStatusResponse Status(const tools::LocalFabric& fabric) {
  control::GetStatusResponse st;
  grpc::Status s = GetStatus(fabric, fabric.credential(), &st);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return st;
}

// A registration as switch `name` of the demo topology (as `netfold up`
// declares it), presenting `credential` ("" = none); the stream's status.
grpc::Status RegisterAs(const tools::LocalFabric& fabric, const std::string& name,
                        const std::string& credential) {
  auto stub =
      control::SwitchControl::NewStub(auth::CreateChannel(
          fabric.manager_address(), {credential, fabric.client_auth().tls_ca_pem}));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto stream = stub->Connect(&c);
  control::SwitchMessage msg;
  control::RegisterSwitch* reg = msg.mutable_register_();
  reg->set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  reg->set_name(name);
  reg->set_data_address("127.0.0.1:9");
  reg->set_incarnation(0x5eed);
  control::SwitchCapacity* cap = reg->mutable_capacity();
  cap->set_max_trees(16);
  cap->set_max_groups(64);
  cap->set_num_slots(1024);
  cap->set_slot_bytes(4048);
  cap->set_max_qps(256);
  stream->Write(msg);
  control::ManagerMessage answer;
  if (stream->Read(&answer) && answer.has_welcome()) {
    // Welcomed: the impostor holds the switch's session. Say nothing more
    // (what a fake switch that reports no state does) and leave.
    c.TryCancel();
    (void)stream->Finish();
    return grpc::Status::OK;
  }
  return stream->Finish();
}

grpc::Status SetLinkFault(const tools::LocalFabric& fabric, const std::string& admin,
                          const std::string& credential, const std::string& peer,
                          const std::string& impairment) {
  auto stub = control::SwitchAdmin::NewStub(
      auth::CreateChannel(admin, {credential, fabric.client_auth().tls_ca_pem}));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  control::SetLinkFaultRequest req;
  req.set_peer(peer);
  req.set_impairment(impairment);
  control::SetLinkFaultResponse resp;
  return stub->SetLinkFault(&c, req, &resp);
}

// A job streaming checked allreduces through the fabric (never the hosts),
// until released.
class RunningJob {
 public:
  explicit RunningJob(const tools::LocalFabric& fabric)
      : ranks_(fabric, 4, 0, {"until"},
               {{"NETFOLD_TEST_RELEASE", release_.path}, {"NETFOLD_ALGORITHM", "innetwork"},
                {"NETFOLD_TIMEOUT_MS", "20000"}}) {}
  bool Streaming() {
    const int r = ranks_.WaitForEveryOutput("streaming", absl::Seconds(60));
    if (r >= 0) ADD_FAILURE() << "rank " << r << " did not start:\n" << ranks_.output(r);
    return r < 0;
  }
  // Every operation of every rank exact, none handed to the hosts.
  void ExpectAllExact() {
    release_.Raise();
    testing::ExpectStreamExact(ranks_.Wait(absl::Minutes(2)), /*no_failover=*/true);
  }

 private:
  testing::ReleaseFlag release_;
  Launch ranks_;
};

TEST(ControlPlaneAuth, ARegistrationWithoutTheCredentialIsRefusedAndTheGroupIsUntouched) {
  auto fabric = StartFabric();
  ASSERT_NE(fabric, nullptr);
  RunningJob job(*fabric);
  ASSERT_TRUE(job.Streaming());
  const control::GetStatusResponse before = Status(*fabric);
  ASSERT_EQ(before.groups_size(), 1);

  // leaf1 carries ranks 2 and 3: a welcomed impostor reporting no QPs made
  // the manager detach them and revoke the group.
  grpc::Status none = RegisterAs(*fabric, "leaf1", "");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.error_message();
  EXPECT_NE(none.error_message().find("NETFOLD_CREDENTIAL_FILE"), std::string::npos)
      << none.error_message();
  grpc::Status wrong = RegisterAs(*fabric, "leaf1", kWrong);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED) << wrong.error_message();

  const control::GetStatusResponse after = Status(*fabric);
  ASSERT_EQ(after.groups_size(), 1) << "the job's group was revoked";
  EXPECT_EQ(after.groups(0).group_id(), before.groups(0).group_id());
  EXPECT_EQ(after.groups(0).epoch(), before.groups(0).epoch());
  ASSERT_EQ(after.jobs_size(), 1);
  EXPECT_EQ(after.jobs(0).num_attached(), 4u);
  for (const control::SwitchStatus& sw : after.switches()) {
    EXPECT_EQ(sw.state(), control::SwitchStatus::UP) << sw.name();
    EXPECT_NE(sw.incarnation(), 0x5eedu) << sw.name() << " is the impostor's";
  }
  job.ExpectAllExact();
}

TEST(ControlPlaneAuth, SwitchAdminCallsWithoutTheCredentialAreRefusedAndTheJobRuns) {
  auto fabric = StartFabric();
  ASSERT_NE(fabric, nullptr);
  RunningJob job(*fabric);
  ASSERT_TRUE(job.Streaming());
  const std::vector<std::string> admins = fabric->switch_admin_addresses();
  for (size_t i = 0; i < admins.size(); ++i) {
    SCOPED_TRACE(fabric->switch_names()[i]);
    // A link down from anyone stopped the job.
    grpc::Status s = SetLinkFault(*fabric, admins[i], "", "all", "down=1");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    s = SetLinkFault(*fabric, admins[i], kWrong, "all", "down=1");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    // Nor can a stranger grow the peer table, one address per call.
    s = SetLinkFault(*fabric, admins[i], "", "127.0.0.1:1", "drop=0.5");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    // Nor read the QPNs and PSN counters.
    auto stub = control::SwitchAdmin::NewStub(auth::CreateChannel(admins[i], {"", fabric->client_auth().tls_ca_pem}));
    grpc::ClientContext c;
    c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    control::GetCountersResponse counters;
    s = stub->GetCounters(&c, control::GetCountersRequest(), &counters);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  // The manager's Admin service lists every job's P_Key: the fabric's only.
  control::GetStatusResponse st;
  grpc::Status s = GetStatus(*fabric, "", &st);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(st.jobs_size(), 0);
  // The operator's own calls still work: a harmless fault, then none.
  s = SetLinkFault(*fabric, admins[0], fabric->credential(), "default", "none");
  EXPECT_TRUE(s.ok()) << s.error_message();
  job.ExpectAllExact();
}

TEST(ControlPlaneAuth, TheSecretIsNeverOnADaemonsCommandLine) {
  auto fabric = StartFabric();
  ASSERT_NE(fabric, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(fabric->credential_file().c_str(), &st), 0) << fabric->credential_file();
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  const std::string secret = fabric->credential();
  ASSERT_GE(secret.size(), 32u);
  // The daemons `netfold up` starts, as it records them.
  const std::string pids = ReadAll(fabric->state_dir() + "/fabric.pids");
  int checked = 0;
  for (absl::string_view line : absl::StrSplit(pids, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    ASSERT_GE(f.size(), 2u) << line;  // NAME PID [START_TIME]
    const std::string cmdline = ReadAll("/proc/" + f[1] + "/cmdline");
    ASSERT_FALSE(cmdline.empty()) << f[0] << " (pid " << f[1] << ") is not running";
    EXPECT_EQ(cmdline.find(secret), std::string::npos) << f[0] << "'s command line";
    EXPECT_NE(cmdline.find("--credential_file"), std::string::npos) << f[0] << " has no credential";
    EXPECT_EQ(ReadAll("/proc/" + f[1] + "/environ").find(secret), std::string::npos)
        << f[0] << "'s environment";
    ++checked;
  }
  // The manager and the three switches: in one process or in three.
  EXPECT_EQ(checked, fabric->one_switch_process() ? 2 : 4);
  // And the daemons do ask for it.
  control::GetStatusResponse status;
  EXPECT_EQ(GetStatus(*fabric, "", &status).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(GetStatus(*fabric, secret, &status).ok());
}

TEST(ControlPlaneAuth, ACredentialFileOthersCanReadIsRefusedWithAClearMessage) {
  std::string dir = (fs::temp_directory_path() / "netfold-auth-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  const std::string file = dir + "/credential";
  std::ofstream(file) << "0123456789abcdef0123456789abcdef\n";
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  const std::string topology = dir + "/topology.yaml";
  std::ofstream(topology) << "name: t\nswitches:\n  - {name: leaf0, tier: 0}\nhosts:\n"
                             "  - {name: h0, switch: leaf0}\n";
  absl::StatusOr<std::string> managerd = tools::LocalFabric::FindDaemon("netfold-managerd");
  absl::StatusOr<std::string> switchd = tools::LocalFabric::FindDaemon("netfold-switchd");
  ASSERT_TRUE(managerd.ok() && switchd.ok()) << managerd.status() << switchd.status();
  const std::vector<std::vector<std::string>> daemons = {
      {*managerd, "--topology", topology, "--listen", "127.0.0.1:0", "--credential_file", file},
      {*switchd, "--name", "leaf0", "--data_address", "127.0.0.1:0", "--manager", "127.0.0.1:1",
       "--credential_file", file},
  };
  for (const auto& argv : daemons) {
    SCOPED_TRACE(argv[0]);
    absl::StatusOr<std::unique_ptr<manager::Subprocess>> p =
        manager::Subprocess::Start(argv, dir + "/daemon.log");
    ASSERT_TRUE(p.ok()) << p.status();
    std::optional<int> status = (*p)->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.has_value()) << "it started with a credential everyone can read:\n"
                                    << (*p)->Log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << *status << "\n" << (*p)->Log();
    EXPECT_NE((*p)->Log().find("mode 0644"), std::string::npos) << (*p)->Log();
    EXPECT_NE((*p)->Log().find("chmod 600 " + file), std::string::npos) << (*p)->Log();
  }
}

}  // namespace
}  // namespace netfold
