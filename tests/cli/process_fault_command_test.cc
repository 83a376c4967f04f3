// `netfold kill` and `netfold restart` on a fabric `netfold up` left
// running (tools/fabric_daemons.h, docs/faults.md): a switch killed by name
// and started again registers with the manager as a new incarnation and is
// recorded in fabric.pids; the manager comes back on its port; a name that
// cannot be signalled alone is refused with the reason. Each test brings up
// a fabric of its own in a fresh state directory and takes it down however
// the test ends.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "auth/fabric_credential.h"
#include "auth/grpc_credential.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/cli/run_cli.h"
#include "tools/daemon_pids.h"
#include "tools/multicast_claim.h"
#include "tools/state_dir.h"

namespace netfold {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CliResult RunNetfold(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {NETFOLD_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCli(argv, absl::Seconds(60), "process_fault_command_test");
}

// A fabric of `netfold up --hosts 2 UP_FLAGS` in a new state directory,
// taken down (and the directory removed) at the end of the test.
class ProcessFaultCommand : public ::testing::Test {
 protected:
  void Up(const std::vector<std::string>& flags) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "process_fault_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl + "/fabric";
    std::vector<std::string> args = {"up", "--hosts", "2", "--state-dir", dir_};
    args.insert(args.end(), flags.begin(), flags.end());
    CliResult up = RunNetfold(args);
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    RunNetfold({"down", "--state-dir", dir_});
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path(), ec);
  }
  CliResult Run(std::vector<std::string> args) {
    args.push_back("--state-dir");
    args.push_back(dir_);
    return RunNetfold(args);
  }
  // fabric.pids's record of `name`.
  tools::DaemonRecord Record(const std::string& name) {
    absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
    if (!dir.ok()) return {};
    auto records = tools::ParseDaemonRecords(dir->ReadFile("fabric.pids").value_or(""));
    for (const tools::DaemonRecord& r : records.value_or(std::vector<tools::DaemonRecord>{})) {
      if (r.name == name) return r;
    }
    return {};
  }
  bool Running(const tools::DaemonRecord& r) {
    return r.pid > 1 && tools::CheckDaemon(r, {"netfold-managerd", "netfold-switchd"},
                                           nullptr) == tools::DaemonState::kRunning;
  }
  // `netfold status`'s line for switch `name` in the manager's table (not
  // in the daemons' list above it).
  std::string StatusLine(const std::string& name) {
    CliResult status = Run({"status"});
    for (absl::string_view line : absl::StrSplit(status.out, '\n')) {
      std::vector<absl::string_view> words =
          absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
      if (words.size() > 2 && words[0] == name && words[1] != "pid") return std::string(line);
    }
    return "(no line for " + name + ")\n" + status.out + status.err;
  }
  // The incarnation the manager lists for switch `name` (0 if none).
  uint64_t Incarnation(const std::string& name) {
    absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
    if (!dir.ok()) return 0;
    auth::ClientAuth client;
    client.credential = auth::ReadCredentialFile(dir->PathOf("credential")).value_or("");
    client.tls_ca_pem = dir->ReadFile("ca.pem").value_or("");
    const std::string manager(
        absl::StripAsciiWhitespace(dir->ReadFile("manager.address").value_or("")));
    auto stub = control::Admin::NewStub(auth::CreateChannel(manager, client));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    control::GetStatusResponse status;
    if (!stub->GetStatus(&c, control::GetStatusRequest(), &status).ok()) return 0;
    for (const control::SwitchStatus& sw : status.switches()) {
      if (sw.name() == name) return sw.incarnation();
    }
    return 0;
  }
  std::string dir_;
};

TEST_F(ProcessFaultCommand, ASwitchKilledByNameStartsAgainAndRegisters) {
  Up({"--switch-processes", "each"});
  const tools::DaemonRecord before = Record("leaf0");
  ASSERT_TRUE(Running(before));
  const uint64_t incarnation = Incarnation("leaf0");
  ASSERT_NE(incarnation, 0u);

  // Still running: nothing to restart.
  CliResult early = Run({"restart", "leaf0"});
  EXPECT_NE(early.exit_code, 0);
  EXPECT_THAT(early.err, HasSubstr("is running"));

  CliResult killed = Run({"kill", "leaf0"});
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  EXPECT_THAT(killed.out, HasSubstr("SIGKILL"));
  EXPECT_FALSE(Running(before)) << "kill returns once the process has exited";
  // `netfold status` lists the daemons as they are, before the manager's view.
  ASSERT_EQ(Run({"kill", "root", "--signal", "STOP"}).exit_code, 0);
  const std::string daemons = Run({"status"}).out;
  EXPECT_THAT(daemons, HasSubstr(absl::StrFormat("leaf0   pid %-8d gone", before.pid)));
  EXPECT_THAT(daemons, HasSubstr(absl::StrFormat("root    pid %-8d stopped", Record("root").pid)));
  EXPECT_THAT(daemons, HasSubstr("manager pid "));
  ASSERT_EQ(Run({"kill", "root", "--signal", "CONT"}).exit_code, 0);

  {
    // Another netfold command changing the fabric: restart waits its turn,
    // within its timeout.
    absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
    ASSERT_TRUE(dir.ok());
    absl::StatusOr<tools::StateDir::Lock> lock = dir->TakeLock("fabric.lock", absl::Seconds(5));
    ASSERT_TRUE(lock.ok()) << lock.status();
    CliResult busy = Run({"restart", "leaf0", "--timeout", "0.5"});
    EXPECT_EQ(busy.exit_code, 2);
    EXPECT_THAT(busy.err, HasSubstr("held by another netfold command"));
    EXPECT_FALSE(Running(Record("leaf0")));
  }
  CliResult restarted = Run({"restart", "leaf0", "--timeout", "30"});
  ASSERT_EQ(restarted.exit_code, 0) << restarted.err;
  const tools::DaemonRecord after = Record("leaf0");
  EXPECT_NE(after.pid, before.pid);
  EXPECT_TRUE(Running(after)) << "fabric.pids records the new process";
  // Back at the manager when restart returns: the new process registered
  // (the manager may not have noticed the old one's death yet).
  EXPECT_THAT(StatusLine("leaf0"), HasSubstr(" up "));
  const uint64_t again = Incarnation("leaf0");
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, incarnation);
  absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->Exists("leaf0.log.1")) << "the first run's log is kept";
  // The other daemons were left alone.
  EXPECT_TRUE(Running(Record("root")));
  EXPECT_TRUE(Running(Record("manager")));
  // And `down` stops the restarted one with the others.
  ASSERT_EQ(Run({"down"}).exit_code, 0);
  EXPECT_FALSE(Running(after));
}

TEST_F(ProcessFaultCommand, TheManagerPausesResumesAndComesBackOnItsAddress) {
  Up({"--switch-processes", "one"});
  const tools::DaemonRecord before = Record("manager");
  absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
  ASSERT_TRUE(dir.ok());
  const std::string address = dir->ReadFile("manager.address").value_or("none");

  ASSERT_EQ(Run({"kill", "manager", "--signal", "STOP"}).exit_code, 0);
  ASSERT_EQ(Run({"kill", "manager", "--signal", "cont"}).exit_code, 0);
  EXPECT_TRUE(Running(before));

  // TERM ends it as KILL does, stopped or not (a SIGCONT follows the
  // SIGTERM, which a stopped process would otherwise keep pending, and
  // `kill` would wait 5 s and fail); then there is nothing left to signal.
  ASSERT_EQ(Run({"kill", "manager", "--signal", "STOP"}).exit_code, 0);
  CliResult terminated = Run({"kill", "manager", "--signal", "TERM"});
  ASSERT_EQ(terminated.exit_code, 0) << terminated.err;
  EXPECT_FALSE(Running(before));
  // With the manager down, status still lists the daemons, then fails.
  CliResult status = Run({"status"});
  EXPECT_EQ(status.exit_code, 2);
  EXPECT_THAT(status.out, HasSubstr(absl::StrFormat("manager  pid %-8d gone", before.pid)));
  EXPECT_THAT(status.out, HasSubstr("running  leaf0, leaf1, root")) << status.out;
  CliResult again = Run({"kill", "manager"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.err, HasSubstr("was not signalled"));
  CliResult restarted = Run({"restart", "manager"});
  ASSERT_EQ(restarted.exit_code, 0) << restarted.err;
  EXPECT_TRUE(Running(Record("manager")));
  EXPECT_EQ(dir->ReadFile("manager.address").value_or(""), address);
  // Every switch registered with it again.
  for (const char* sw : {"root", "leaf0", "leaf1"}) EXPECT_THAT(StatusLine(sw), HasSubstr(" up "));
  // `down` stops a stopped daemon in order too, not with SIGKILL once its
  // grace ran out.
  const tools::DaemonRecord switches = Record("switches");
  ASSERT_EQ(Run({"kill", "switches", "--signal", "STOP"}).exit_code, 0);
  CliResult down = Run({"down"});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  EXPECT_THAT(down.out + down.err, Not(HasSubstr("killed")));
  EXPECT_FALSE(Running(switches));
}

TEST_F(ProcessFaultCommand, NamesThatCannotBeSignalledAloneAreRefusedWithTheReason) {
  Up({"--switch-processes", "one"});
  CliResult shared = Run({"kill", "leaf0"});
  EXPECT_EQ(shared.exit_code, 2);
  EXPECT_THAT(shared.err, HasSubstr("netfold kill switches"));
  EXPECT_THAT(shared.err, HasSubstr("--switch-processes each"));
  EXPECT_TRUE(Running(Record("switches"))) << "a refused kill signals nothing";

  CliResult unknown = Run({"kill", "leaf9"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("its daemons are manager, switches"));

  CliResult bad_signal = Run({"kill", "manager", "--signal", "HUP"});
  EXPECT_EQ(bad_signal.exit_code, 2);
  EXPECT_THAT(bad_signal.err, HasSubstr("KILL, TERM, STOP or CONT"));
  EXPECT_TRUE(Running(Record("manager")));

  CliResult nowhere = RunNetfold({"kill", "manager", "--state-dir", dir_ + "-none"});
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_THAT(nowhere.err, HasSubstr("no fabric runs from"));

  // The one process of the switches, killed and started again as one.
  ASSERT_EQ(Run({"kill", "switches"}).exit_code, 0);
  CliResult restarted = Run({"restart", "switches"});
  ASSERT_EQ(restarted.exit_code, 0) << restarted.err;
  for (const char* sw : {"root", "leaf0", "leaf1"}) EXPECT_THAT(StatusLine(sw), HasSubstr(" up "));

  // A command line on record that is not a daemon's, or not one at all, is
  // refused and nothing runs.
  for (const char* timeout : {"0", "3601", "nan", "soon"}) {
    CliResult bad = Run({"restart", "manager", "--timeout", timeout});
    EXPECT_EQ(bad.exit_code, 2) << timeout;
    EXPECT_THAT(bad.err, HasSubstr("--timeout")) << timeout;
  }
  ASSERT_EQ(Run({"kill", "manager"}).exit_code, 0);
  absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
  ASSERT_TRUE(dir.ok());
  const std::string argv = dir->ReadFile("manager.argv").value_or("");
  ASSERT_FALSE(argv.empty());
  const std::vector<std::pair<std::string, std::string>> bad_files = {
      {std::string("/bin/sh\0-c\0true\0", 16), "is not a netfold daemon"},
      {"netfold-managerd --config=x", "not a command line"},
      {std::string("managerd\0", 9), "does not start with a program's path"},
  };
  for (const auto& [text, why] : bad_files) {
    ASSERT_TRUE(dir->WriteFile("manager.argv", text).ok());
    CliResult bad = Run({"restart", "manager"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr(why));
    EXPECT_FALSE(Running(Record("manager")));
  }
  dir->Remove("manager.argv");
  CliResult missing = Run({"restart", "manager"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("older netfold"));
  ASSERT_TRUE(dir->WriteFile("manager.argv", argv).ok());
  // The switches restarted above hold no claim on the fabric's multicast
  // prefix of their own, so with the manager down a fabric beside this
  // test may have taken it: then the refusal, as in the test below.
  CliResult manager = Run({"restart", "manager"});
  if (manager.exit_code != 0) {
    EXPECT_THAT(manager.err, HasSubstr("another fabric took it"));
  }
}

// The fabric's multicast prefix (tools/multicast_claim.h) is held by its
// daemons' descriptors. A manager restarted while the switches run holds
// none; once the switches die too, nothing of the fabric holds it, and
// another fabric may take it. The switches must then not be started on it.
TEST_F(ProcessFaultCommand, AFabricWhoseMulticastPrefixWentToAnotherIsNotStartedOnIt) {
  Up({"--switch-processes", "one"});
  absl::StatusOr<tools::StateDir> dir = tools::StateDir::Open(dir_, /*create=*/false);
  ASSERT_TRUE(dir.ok());
  const std::string config = dir->ReadFile("manager.yaml").value_or("");
  const std::string key = "multicast_prefix: \"239.";
  const size_t at = config.find(key);
  ASSERT_NE(at, std::string::npos) << config;
  const int octet = std::atoi(config.c_str() + at + key.size());
  ASSERT_EQ(Run({"kill", "manager"}).exit_code, 0);
  CliResult manager = Run({"restart", "manager"});
  ASSERT_EQ(manager.exit_code, 0) << manager.err << " (the switches hold the prefix)";
  ASSERT_EQ(Run({"kill", "switches"}).exit_code, 0);
  {
    // Another fabric takes it (or a test beside this one did already, and
    // may let it go again before the restart: then it is free and taken).
    absl::StatusOr<tools::MulticastClaim> other = tools::MulticastClaim::TakeExactly(octet);
    ASSERT_TRUE(other.ok() || absl::IsAlreadyExists(other.status())) << other.status();
    CliResult refused = Run({"restart", "switches"});
    if (other.ok() || refused.exit_code != 0) {
      EXPECT_EQ(refused.exit_code, 2);
      EXPECT_THAT(refused.err, HasSubstr("another fabric took it"));
      EXPECT_FALSE(Running(Record("switches"))) << "nothing was started";
    } else {
      ASSERT_EQ(Run({"kill", "switches"}).exit_code, 0);  // as the refusal leaves it
    }
  }
  // Let go: the switches take it back, unless a fabric beside this test
  // took it meanwhile (then refused again, as above).
  CliResult switches = Run({"restart", "switches"});
  if (switches.exit_code == 0) {
    EXPECT_FALSE(tools::MulticastClaim::TakeExactly(octet).ok()) << "the fabric holds it";
  } else {
    EXPECT_THAT(switches.err, HasSubstr("another fabric took it"));
  }
}

}  // namespace
}  // namespace netfold
