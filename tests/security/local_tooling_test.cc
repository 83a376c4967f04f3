// Issue 23 items 9 and 10: the `netfold` command line on a machine shared
// with other users (docs/security.md, "Local tooling and the state
// directory"). Each test runs the real CLI and failed before its fix.
// - 9: `netfold bench --out 'x;touch pwned;#'` ran the touch: commands went
//   through `sh -c`. Now every command is an argument vector.
// - 10: `netfold up` used a state directory another user made or planted a
//   symlink for; `netfold down` signalled whatever pids fabric.pids named;
//   a second `netfold up` removed the running fabric's fabric.pids.
// - Two fabrics on one machine took the multicast prefix 239.(1 + pid %
//   250) and shared groups one time in 250 (always, for two fabrics of one
//   process). Now the prefix is claimed machine-wide while the fabric runs.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/manager/subprocess.h"
#include "tools/multicast_claim.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uid_t kNobody = 65534;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliRun {
  int exit_code = -1;  // -1: killed, or did not finish
  std::string output;  // stdout and stderr
};

class LocalTooling : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "netfold-security-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
  }

  void TearDown() override {
    // Whatever a failing test (or the code before its fix) left running.
    for (const std::string& dir : fabric_dirs_) Netfold({"down", "--state-dir", dir});
    for (pid_t pid : daemon_pids_) {
      char exe[4096];
      const ssize_t n =
          readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof(exe) - 1);
      if (n > 0 && std::string(exe, n).find("/netfold-") != std::string::npos) kill(pid, SIGKILL);
    }
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  // Runs the CLI with `args`, waits for it (a deadline; killed after it).
  CliRun Netfold(const std::vector<std::string>& args, absl::Duration timeout = absl::Minutes(2)) {
    std::vector<std::string> argv = {NETFOLD_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = tmp_ + "/cli" + std::to_string(runs_++) + ".log";
    absl::StatusOr<std::unique_ptr<manager::Subprocess>> p = manager::Subprocess::Start(argv, log);
    CliRun r;
    if (!p.ok()) return r;
    std::optional<int> status = (*p)->Wait(timeout);
    if (status.has_value() && WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
    r.output = (*p)->Log();
    return r;  // the Subprocess kills what has not finished
  }

  // A fabric started from `dir` (to be stopped whatever happens).
  void WillStop(const std::string& dir) { fabric_dirs_.push_back(dir); }

  void RememberDaemons(const std::string& pids_text) {
    for (absl::string_view line : absl::StrSplit(pids_text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      int pid = 0;
      if (f.size() >= 2 && absl::SimpleAtoi(f[1], &pid) && pid > 1) daemon_pids_.push_back(pid);
    }
  }

  static bool IsEmptyDir(const std::string& dir) {
    return fs::is_directory(dir) && fs::is_empty(dir);
  }

  std::string tmp_;
  int runs_ = 0;
  std::vector<std::string> fabric_dirs_;
  std::vector<pid_t> daemon_pids_;
};

// Item 9.
TEST_F(LocalTooling, BenchRunsItsCommandsWithoutAShell) {
  if (!fs::exists(NETFOLD_COLLECTIVE_BENCH) || !fs::exists(NETFOLD_MPI_INTERPOSER)) {
    GTEST_SKIP() << "needs the MPI build (-Dmpi=enabled): " << NETFOLD_COLLECTIVE_BENCH;
  }
  // An mpirun of our own, first on PATH: it records its arguments and
  // reports one measurement, so no MPI program runs.
  ASSERT_TRUE(fs::create_directory(tmp_ + "/bin"));
  const std::string args_file = tmp_ + "/mpirun.args";
  {
    std::ofstream script(tmp_ + "/bin/mpirun");
    script << "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '" << args_file << "'\n"
           << "echo 0,10,1.0,1.0,1.0,-1\n";
  }
  ASSERT_EQ(chmod((tmp_ + "/bin/mpirun").c_str(), 0755), 0);
  const std::string old_path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved_tmpdir = old_tmpdir != nullptr ? old_tmpdir : "";
  setenv("PATH", (tmp_ + "/bin:" + old_path).c_str(), 1);
  setenv("TMPDIR", tmp_.c_str(), 1);  // the bench's fabric, under tmp_
  const std::string out = tmp_ + "/out;touch " + tmp_ + "/pwned;#";
  const CliRun r = Netfold({"bench", "barrier", "--ranks", "2", "--seconds", "0.01", "--out", out});
  setenv("PATH", old_path.c_str(), 1);
  if (old_tmpdir != nullptr) {
    setenv("TMPDIR", saved_tmpdir.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }

  EXPECT_FALSE(fs::exists(tmp_ + "/pwned")) << "--out was run as a command:\n" << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // mpirun got the directory's log and its arguments intact, one each.
  EXPECT_TRUE(fs::exists(out + "/mpirun.log")) << r.output;
  EXPECT_TRUE(fs::exists(out + "/results.csv")) << r.output;
  const std::string args = Slurp(args_file);
  EXPECT_THAT(args, HasSubstr("\n-np\n2\n")) << args;
  EXPECT_THAT(args, HasSubstr("\n" + std::string(NETFOLD_COLLECTIVE_BENCH) + "\nbarrier\n0\n0.010\n"))
      << args;
}

// Item 10: a directory planted by another user, or one others can write.
TEST_F(LocalTooling, UpRefusesAStateDirThatIsASymlink) {
  const std::string victim = tmp_ + "/victim", link = tmp_ + "/netfold-1000";
  ASSERT_TRUE(fs::create_directory(victim));
  ASSERT_EQ(chmod(victim.c_str(), 0700), 0);
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  WillStop(victim);
  const CliRun r = Netfold({"up", "--hosts", "2", "--state-dir", link});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(link));
  EXPECT_THAT(r.output, HasSubstr("symlink"));
  EXPECT_TRUE(IsEmptyDir(victim)) << "netfold up wrote through the symlink";
}

TEST_F(LocalTooling, UpRefusesAStateDirOfAnotherUser) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to make a directory owned by another user";
  const std::string theirs = tmp_ + "/theirs";
  ASSERT_TRUE(fs::create_directory(theirs));
  ASSERT_EQ(chmod(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  WillStop(theirs);
  const CliRun r = Netfold({"up", "--hosts", "2", "--state-dir", theirs});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(theirs));
  EXPECT_THAT(r.output, HasSubstr("owned by"));
  EXPECT_THAT(r.output, HasSubstr("uid 65534"));
  EXPECT_TRUE(IsEmptyDir(theirs));
}

TEST_F(LocalTooling, UpRefusesAStateDirOthersCanWrite) {
  const std::string open = tmp_ + "/open";
  ASSERT_TRUE(fs::create_directory(open));
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  WillStop(open);
  const CliRun r = Netfold({"up", "--hosts", "2", "--state-dir", open});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(open));
  EXPECT_THAT(r.output, HasSubstr("lets other users write"));
  EXPECT_TRUE(IsEmptyDir(open));
}

// Item 10: fabric.pids is a claim, not a licence to kill.
TEST_F(LocalTooling, DownSignalsNothingButTheDaemonsItStarted) {
  const std::string dir = tmp_ + "/state";
  ASSERT_TRUE(fs::create_directory(dir));
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  absl::StatusOr<std::unique_ptr<manager::Subprocess>> bystander =
      manager::Subprocess::Start({"/bin/sleep", "600"}, tmp_ + "/sleep.log");
  ASSERT_TRUE(bystander.ok()) << bystander.status();
  const std::string pid = std::to_string((*bystander)->pid());

  // A file as an older netfold wrote it (no start time): nothing is
  // signalled on its word.
  std::ofstream(dir + "/fabric.pids") << "manager " << pid << "\n";
  CliRun r = Netfold({"down", "--state-dir", dir});
  EXPECT_TRUE((*bystander)->running()) << "netfold down signalled pid " << pid << ":\n"
                                       << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fabric.pids"));

  // With the right start time, but not a netfold daemon: left alone, said so.
  std::string stat = Slurp("/proc/" + pid + "/stat");
  std::vector<std::string> fields = absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  ASSERT_GT(fields.size(), 19u);
  std::ofstream(dir + "/fabric.pids") << "manager " << pid << " " << fields[19] << "\n";
  r = Netfold({"down", "--state-dir", dir});
  EXPECT_TRUE((*bystander)->running()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("pid " + pid + " (manager) was not signalled"));
}

// Item 10, usability: a second `up` refuses and leaves the running fabric
// stoppable.
TEST_F(LocalTooling, ASecondUpLeavesTheRunningFabricAlone) {
  const std::string dir = tmp_ + "/fabric";
  WillStop(dir);
  CliRun r = Netfold({"up", "--hosts", "2", "--state-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string pids = Slurp(dir + "/fabric.pids");
  RememberDaemons(pids);
  ASSERT_FALSE(pids.empty());
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  r = Netfold({"up", "--hosts", "2", "--state-dir", dir});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("a fabric is already running"));
  EXPECT_THAT(r.output, HasSubstr("netfold down first"));
  EXPECT_EQ(Slurp(dir + "/fabric.pids"), pids) << "the second up changed the running fabric's pids";

  r = Netfold({"down", "--state-dir", dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("stopped"));
  EXPECT_THAT(r.output, Not(HasSubstr("not signalled")));
  EXPECT_FALSE(fs::exists(dir + "/fabric.pids"));
}

// The daemons hold the fabric's multicast prefix after `netfold up` has
// exited, and let go of it when they stop: no other fabric on this machine
// can take it meanwhile.
TEST_F(LocalTooling, AFabricsMulticastPrefixStaysClaimedUntilItIsDown) {
  const std::string dir = tmp_ + "/fabric";
  WillStop(dir);
  CliRun r = Netfold({"up", "--hosts", "2", "--state-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RememberDaemons(Slurp(dir + "/fabric.pids"));
  const std::string config = Slurp(dir + "/manager.yaml");
  const size_t at = config.find("multicast_prefix:");
  ASSERT_NE(at, std::string::npos) << config;
  int octet = 0;
  ASSERT_EQ(std::sscanf(config.c_str() + at, "multicast_prefix: \"239.%d\"", &octet), 1) << config;

  {
    absl::StatusOr<tools::MulticastClaim> other = tools::MulticastClaim::Take(octet);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_NE(other->octet(), octet) << "another fabric could take 239." << octet
                                     << " while this one runs";
  }

  r = Netfold({"down", "--state-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<tools::MulticastClaim> after = tools::MulticastClaim::Take(octet);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->octet(), octet) << "the stopped fabric still holds its prefix";
}

}  // namespace
}  // namespace netfold
