// libnetfold_mpi.so under mpirun with 2, 4 and 8 ranks against a local
// fabric of real daemons: every predefined datatype x op (results checked in
// the MPI program against an independent reference and compared with
// PMPI_), in place, dup/split communicators, counted fallbacks, and the
// fabric killed in the middle of a run (NETFOLD_MPI_ENABLE=try).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;

std::string Here() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  return fs::path(buf).parent_path().string();
}

std::string Interposer() {
  return fs::weakly_canonical(fs::path(Here()) / ".." / ".." / "host" / "mpi" / "libnetfold_mpi.so")
      .string();
}

struct MpiResult {
  int exit_code = -1;
  std::string output;
};

// What the ranks are pointed at: a fabric (its manager and credential
// file), or just an address (nothing, or nothing that answers, there).
struct Target {
  Target(const tools::LocalFabric& fabric)  // NOLINT: implicit on purpose
      : manager(fabric.manager_address()),
        credential_file(fabric.credential_file()),
        tls_ca_file(fabric.tls_ca_file()) {}
  Target(std::string address) : manager(std::move(address)) {}  // NOLINT
  Target(const char* address) : manager(address) {}             // NOLINT
  std::string manager;
  std::string credential_file;
  std::string tls_ca_file;
};

// Runs `mpirun -np N ... mpi_collectives ARGS`, output (stdout+stderr)
// captured; ARGS that start with an absolute path run that program instead.
MpiResult MpiRun(int np, const std::vector<std::string>& args, const Target& target,
           std::map<std::string, std::string> env = {}, absl::Duration timeout = absl::Minutes(5),
           const std::string& when_printed = "", std::function<void()> action = nullptr) {
  const std::string& manager = target.manager;
  env.emplace("NETFOLD_MANAGER", manager);
  if (!target.credential_file.empty()) {
    env.emplace("NETFOLD_CREDENTIAL_FILE", target.credential_file);
    env.emplace("NETFOLD_TLS_CA", target.tls_ca_file);
  }
  env.emplace("LD_PRELOAD", Interposer());
  std::string cmd = absl::StrFormat("mpirun --allow-run-as-root --oversubscribe -np %d", np);
  for (const auto& [k, v] : env) cmd += absl::StrFormat(" -x %s=%s", k, v);
  if (args.empty() || args[0].empty() || args[0][0] != '/') cmd += " " + Here() + "/mpi_collectives";
  for (const auto& a : args) cmd += " " + a;
  cmd += " 2>&1";
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  MpiResult run;
  const absl::Time deadline = absl::Now() + timeout;
  bool acted = false;
  int status = 0;
  while (true) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) run.output.append(buf, n);
    if (!acted && action && run.output.find(when_printed) != std::string::npos) {
      action();
      acted = true;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (absl::Now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      run.output += "\n[killed by the test: deadline]";
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) run.output.append(buf, n);
  close(fds[0]);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

bool HaveMpirun() { return system("command -v mpirun >/dev/null 2>&1") == 0; }

// Why an MPI test cannot run here, or "" if it can: every test skips with it.
std::string MissingForMpi() {
  if (!HaveMpirun()) return "mpirun is not installed (deploy/install-deps.sh installs Open MPI)";
  if (!fs::exists(Interposer())) return "libnetfold_mpi.so was not built (no MPI development files)";
  return "";
}

class MpiInterposer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!MissingForMpi().empty()) return;
    tools::LocalFabricOptions o;
    o.hosts = 8;
    auto fabric = tools::LocalFabric::Start(o);
    if (fabric.ok()) {
      fabric_ = fabric->release();
    } else {
      start_error_ = std::string(fabric.status().message());
    }
  }
  static void TearDownTestSuite() {
    delete fabric_;
    fabric_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_NE(fabric_, nullptr) << "could not start the fabric: " << start_error_;
  }
  static const tools::LocalFabric& manager() { return *fabric_; }

  static tools::LocalFabric* fabric_;
  static std::string start_error_;
};
tools::LocalFabric* MpiInterposer::fabric_ = nullptr;
std::string MpiInterposer::start_error_;

// A fabric of its own (4 hosts) for a test that stops or kills it.
// `planes`: data planes (docs/host.md); 0 for the default, one.
absl::StatusOr<std::unique_ptr<tools::LocalFabric>> FourHostFabric(int planes = 0) {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.planes = planes;
  return tools::LocalFabric::Start(o);
}

void ExpectPassed(const MpiResult& r, const std::string& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpi_collectives " + scenario + ":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << r.output;
}

TEST_F(MpiInterposer, EveryTypeAndOpOnTwoRanksUpToOneMebiElements) {
  MpiResult r = MpiRun(2, {"sweep", "big"}, manager(), {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"}});
  ExpectPassed(r, "sweep");
  EXPECT_NE(r.output.find("offloaded allreduce"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << "nothing fell back:\n" << r.output;
}

TEST_F(MpiInterposer, EveryTypeAndOpOnFourRanks) {
  ExpectPassed(MpiRun(4, {"sweep"}, manager(), {{"NETFOLD_MPI_ENABLE", "1"}}), "sweep");
}

// Several ranks per host (NETFOLD_TEST_RANKS_PER_HOST=N makes rank r host
// h<r/N>, as N ranks of one testbed host namespace are): the node hierarchy
// carries every blocking collective, results exact, and only a host's
// leader uses the link, V up and V down (checked inside the program).
TEST_F(MpiInterposer, NodeHierarchyWithTwoAndFourRanksPerHost) {
  for (int per_host : {2, 4}) {
    SCOPED_TRACE(per_host);
    MpiResult r = MpiRun(2 * per_host, {"hierarchy"}, manager(),
                         {{"NETFOLD_MPI_ENABLE", "1"}, {"NETFOLD_MPI_STATS", "1"},
                          {"NETFOLD_MPI_VERBOSE", "1"},
                          {"NETFOLD_TEST_RANKS_PER_HOST", std::to_string(per_host)}},
                         absl::Minutes(10));
    ExpectPassed(r, "hierarchy");
    for (const char* kind : {"allreduce", "reduce ", "bcast ", "barrier", "allgather",
                             "reduce_scatter"}) {
      EXPECT_NE(r.output.find(std::string("node hierarchy ") + kind), std::string::npos)
          << kind << "\n" << r.output;
    }
    EXPECT_NE(r.output.find("MPI_COMM_WORLD (" + std::to_string(2 * per_host) +
                            " ranks): node hierarchy (" + std::to_string(2 * per_host) +
                            " ranks on 2 hosts"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("rank 1 (not a leader): 0.000 V"), std::string::npos) << r.output;
  }
  // NETFOLD_MPI_HIERARCHY=flat: every rank on the fabric itself.
  MpiResult flat = MpiRun(4, {"comms"}, manager(),
                          {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_HIERARCHY", "flat"},
                           {"NETFOLD_TEST_RANKS_PER_HOST", "2"}});
  ExpectPassed(flat, "comms");
  EXPECT_EQ(flat.output.find("node hierarchy"), std::string::npos) << flat.output;
}

TEST_F(MpiInterposer, EveryTypeAndOpOnEightRanks) {
  ExpectPassed(MpiRun(8, {"sweep"}, manager(), {{"NETFOLD_MPI_ENABLE", "1"}},
                      absl::Minutes(10)),
               "sweep");
}

TEST_F(MpiInterposer, DupAndSplitCommunicators) {
  MpiResult r = MpiRun(4, {"comms"}, manager(), {{"NETFOLD_MPI_STATS", "1"}});
  ExpectPassed(r, "comms");
  // Split mod 3 of 4 ranks leaves single-rank communicators: counted.
  EXPECT_NE(r.output.find("fallback: communicator too small"), std::string::npos) << r.output;
  // A reduce-scatter and an allgather on each of 3 communicators, 3 rounds,
  // 4 ranks, but 2 ranks alone in theirs: 30 of 36 on the fabric.
  EXPECT_NE(r.output.find("offloaded allgather  30"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offloaded reduce_scatter 30"), std::string::npos) << r.output;
}

TEST_F(MpiInterposer, FallbacksAreCountedAndStillCorrect) {
  MpiResult r = MpiRun(4, {"fallback"}, manager(), {{"NETFOLD_MPI_STATS", "1"}});
  ExpectPassed(r, "fallback");
  for (const char* reason : {"fallback: user-defined op", "fallback: unsupported datatype",
                             "fallback: communicator too small",
                             "fallback: nonblocking bcast of a non-contiguous datatype",
                             "fallback: allgather of a non-contiguous datatype",
                             "fallback: allgatherv with gaps or blocks out of rank order"}) {
    EXPECT_NE(r.output.find(reason), std::string::npos) << reason << "\n" << r.output;
  }
}

TEST_F(MpiInterposer, NoFabricMeansFallbackUnderTryAndAnErrorUnderOne) {
  // Nothing listens on port 1: try runs everything on MPI itself.
  MpiResult r = MpiRun(2, {"comms"}, "127.0.0.1:1", {{"NETFOLD_TIMEOUT_MS", "1000"}});
  ExpectPassed(r, "comms");
  MpiResult strict = MpiRun(2, {"comms"}, "127.0.0.1:1",
                      {{"NETFOLD_TIMEOUT_MS", "1000"}, {"NETFOLD_MPI_ENABLE", "1"}});
  EXPECT_NE(strict.exit_code, 0) << strict.output;
  EXPECT_NE(strict.output.find("cannot use the fabric"), std::string::npos) << strict.output;
}

// How many times `needle` occurs in `text`.
int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// NETFOLD_MPI_VERBOSE=1: each communicator's rank 0 says at its first
// collective whether it is offloaded and why not, once; per-call fallbacks
// once per (communicator, reason); a refused group with the manager's reason.
TEST_F(MpiInterposer, VerboseSaysEachDecisionOnceFromRankZero) {
  // The job's quota is 16 groups (the manager's default): MPI_COMM_WORLD
  // and 15 duplicates get one, the last 5 duplicates are refused.
  MpiResult r = MpiRun(2, {"verbose", "20"}, manager(), {{"NETFOLD_MPI_VERBOSE", "1"}});
  ExpectPassed(r, "verbose");
  EXPECT_EQ(Occurrences(r.output,
                        "netfold-mpi: communicator MPI_COMM_WORLD (2 ranks): offloaded to the fabric\n"),
            1)
      << r.output;
  EXPECT_EQ(Occurrences(r.output,
                        "netfold-mpi: communicator MPI_COMM_WORLD (2 ranks): allreduce runs on MPI "
                        "itself: unsupported datatype (MPI_LONG_DOUBLE)\n"),
            1)
      << r.output;
  // Each rank is rank 0 of its own single-rank communicator.
  EXPECT_EQ(Occurrences(r.output, "(1 rank): not offloaded: communicator too small "
                                  "(NETFOLD_MPI_MIN_COMM_SIZE=2)\n"),
            2)
      << r.output;
  EXPECT_EQ(Occurrences(r.output, "(2 ranks): offloaded to the fabric\n"), 16) << r.output;
  EXPECT_EQ(Occurrences(r.output, "(2 ranks): not offloaded: group not created ("),
            5)
      << r.output;
  EXPECT_EQ(Occurrences(r.output, "of 16 groups (its quota)"), 5) << r.output;

  MpiResult quiet = MpiRun(2, {"verbose", "2"}, manager());
  ExpectPassed(quiet, "verbose");
  EXPECT_EQ(quiet.output.find("netfold-mpi: communicator"), std::string::npos) << quiet.output;
}

// Opt-in polling (switches' --poll_us, ranks' NETFOLD_POLL_US) changes how
// the daemons and the ranks wait, not what they compute: every result of
// the sweep is checked, and nothing may fall back to Open MPI.
TEST(MpiInterposerPolling, EveryTypeAndOpOnFourPollingRanks) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.switch_poll_us = 200;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = MpiRun(4, {"sweep"}, **fabric,
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"},
                        {"NETFOLD_POLL_US", "200"}});
  ExpectPassed(r, "sweep");
  EXPECT_NE(r.output.find("offloaded allreduce"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << "nothing fell back:\n" << r.output;
}

// The number after `key` in `output` (seconds), or -1 if `key` is not there.
double SecondsAfter(const std::string& output, const std::string& key) {
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(output.c_str() + at + key.size(), nullptr);
}

// mpi_collectives `args` on `np` ranks of `fabric`, which `fault` breaks
// once "phase 1 done" is printed; then NETFOLD_TEST_OUTAGE_FILE exists, for
// ranks that wait until the fabric is broken.
MpiResult RunWithAFaultAtPhaseOne(tools::LocalFabric& fabric, int np,
                                  const std::vector<std::string>& args,
                                  std::map<std::string, std::string> env, absl::Duration timeout,
                                  const std::function<absl::Status()>& fault) {
  const std::string flag =
      (fs::temp_directory_path() / absl::StrFormat("netfold-outage-%d", getpid())).string();
  std::remove(flag.c_str());
  env["NETFOLD_TEST_OUTAGE_FILE"] = flag;
  MpiResult r = MpiRun(np, args, fabric, std::move(env), timeout, "phase 1 done", [&] {
    const absl::Status s = fault();
    EXPECT_TRUE(s.ok()) << s;
    std::FILE* f = std::fopen(flag.c_str(), "w");
    if (f) std::fclose(f);
  });
  std::remove(flag.c_str());
  return r;
}

// The same, the fault killing every switch.
MpiResult RunKillingTheSwitchesAtPhaseOne(tools::LocalFabric& fabric, int np,
                                          const std::vector<std::string>& args,
                                          std::map<std::string, std::string> env,
                                          absl::Duration timeout) {
  return RunWithAFaultAtPhaseOne(fabric, np, args, std::move(env), timeout,
                                 [&] { return fabric.KillSwitches(SIGKILL); });
}

TEST(MpiInterposerOutage, KilledSwitchesDoNotHangTheJobAndResultsStayRight) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  // NETFOLD_LOG_LEVEL=error: no rank says it re-runs on MPI (an info line).
  MpiResult r = RunKillingTheSwitchesAtPhaseOne(
      **fabric, 4, {"outage"},
      {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "3000"}, {"NETFOLD_LOG_LEVEL", "error"}},
      absl::Minutes(5));
  ExpectPassed(r, "outage");
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("re-running on MPI"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("on libnetfold's host algorithms"), std::string::npos) << r.output;
}

// The same with NETFOLD_ALGORITHM=auto: the groups fail over to
// libnetfold's host algorithms, not to MPI, and the stats say how many of
// the calls counted as offloaded ran there.
TEST(MpiInterposerOutage, UnderAutoTheCallsOnTheHostAlgorithmsAreCounted) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = RunKillingTheSwitchesAtPhaseOne(
      **fabric, 4, {"outage"},
      {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "3000"}, {"NETFOLD_ALGORITHM", "auto"}},
      absl::Minutes(5));
  ExpectPassed(r, "outage");
  const double on_hosts = SecondsAfter(r.output, "of these, on libnetfold's host algorithms ");
  EXPECT_GT(on_hosts, 0) << r.output;
}

// mpi_collectives `scenario` (1 Mi ints, 30 operations) on 4 ranks of a
// private 4-host fabric (of `channels` data planes, each group spread over
// them: docs/host.md, "Channels") which `fault` breaks once phase 1 is
// done (default: every switch killed); checked to have passed.
MpiResult RunBreakingTheFabric(
    const std::string& scenario, int channels = 1,
    const std::function<absl::Status(tools::LocalFabric&)>& fault =
        [](tools::LocalFabric& f) { return f.KillSwitches(SIGKILL); }) {
  auto fabric = FourHostFabric(channels > 1 ? channels : 0);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  if (!fabric.ok()) return {};
  MpiResult r = RunWithAFaultAtPhaseOne(
      **fabric, 4, {scenario, "1048576", "30"},
      {{"NETFOLD_MPI_STATS", "1"},
       {"NETFOLD_TIMEOUT_MS", "3000"},
       {"NETFOLD_CHANNELS", std::to_string(channels)}},
      absl::Minutes(5), [&] { return fault(**fabric); });
  ExpectPassed(r, scenario);
  return r;
}

// The interposer's failover completed an allreduce from what the fabric
// had delivered of it.
void ExpectCompletedFromWhatTheFabricWrote(const MpiResult& r) {
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failover: bytes the fabric had delivered"), std::string::npos)
      << r.output;
}

// The switches killed while 4 MiB in-place allreduces run back to back:
// the one the fabric fails in the middle is completed from the chunks the
// fabric had written and the inputs it had not (no copy of the input is
// kept), and every result is right.
TEST(MpiInterposerOutage, AnInPlaceAllreduceCutShortIsCompletedFromWhatTheFabricWrote) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  for (int channels : {1, 2}) {
    // Two channels: what each wrote is merged into one window the
    // interposer reads (netfold_request_written), the channels kept
    // within N x K chunks of one another.
    SCOPED_TRACE(absl::StrFormat("%d channel(s)", channels));
    ExpectCompletedFromWhatTheFabricWrote(RunBreakingTheFabric("outage_inplace", channels));
  }
}

// Two channels, and plane 1's leaf1 cut off (both ways) mid-run rather
// than every switch killed: the channel in plane 0 runs on until the chunk
// gate holds it (host/channels.h), within N x K chunks of the first chunk
// plane 1 left without a result, then the group fails over once the cut
// plane's links give up. The interposer completes the allreduce cut short
// from what both channels wrote (one window of N x K chunks:
// netfold_request_written), every element checked.
TEST(MpiInterposerOutage, AnInPlaceAllreduceWithOnePlaneCutIsCompletedFromWhatBothChannelsWrote) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  ExpectCompletedFromWhatTheFabricWrote(
      RunBreakingTheFabric("outage_inplace", /*channels=*/2, [](tools::LocalFabric& f) {
        return f.SetLinkFault("leaf1@1", "down=1");
      }));
}

// The same with 4 MiB reduces to a moving root, every result exact. The
// ranks other than the root return once their input has left and keep only
// its end (KeptInput, host/resync.h). Where the switches die decides the
// path: mostly every rank is in the same reduce, which is run again whole;
// a root behind ranks that returned gets the kept end reduced again
// (host/resync_test.cc and host_fabric_test.cc force that case).
TEST(MpiInterposerOutage, AReduceCutShortIsRunAgainAndEveryResultIsExact) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  const MpiResult r = RunBreakingTheFabric("outage_reduce");
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
}

// The root of a reduce starts it only after the switches died, while the
// other ranks had returned from it (their input had left) and gone on to
// the next: it is behind them, gets the reduce completed from what they
// kept, and every collective after it (on MPI) and finalize find the ranks
// in step. Until the ranks counted their collectives on MPI after a
// failover, finalize aborted the job here ("behind but in no operation").
// Until 2026-12-07 the job hung when the ranks ahead met the failure in an
// MPI_Iallreduce (they re-ran it on MPI while the root recovered it) or in
// MPI_Comm_free (the root's own free resynced again, alone).
TEST(MpiInterposerOutage, ARootBehindTheRanksThatReturnedCatchesUpAndTheJobEnds) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string next : {"blocking_next", "nonblocking_next", "free_next"}) {
    SCOPED_TRACE(next);
    auto fabric = FourHostFabric();
    ASSERT_TRUE(fabric.ok()) << fabric.status();
    // NETFOLD_LOG_LEVEL=info: each rank says which operation it re-runs on MPI.
    MpiResult r = RunKillingTheSwitchesAtPhaseOne(
        **fabric, 4, {"root_late", next},
        {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "3000"}, {"NETFOLD_LOG_LEVEL", "info"}},
        absl::Minutes(2));
    ExpectPassed(r, "root_late");
    EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("failed on the fabric ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("re-running on MPI"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("cannot recover"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("reduced again on MPI"), std::string::npos) << r.output;
  }
}

// The same, the ranks ahead going on to an allreduce on the world, which
// waits for the root, while the root waits for them in its recovery: no
// order completes both. The first rank to wait NETFOLD_MPI_RESYNC_TIMEOUT_S
// in a recovery aborts the job, saying why, rather than leave it hanging.
TEST(MpiInterposerOutage, ARecoveryTheOtherRanksCannotJoinAbortsTheJobAtItsDeadline) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const absl::Time start = absl::Now();
  MpiResult r = RunKillingTheSwitchesAtPhaseOne(
      **fabric, 4, {"root_late", "cross_next"},
      {{"NETFOLD_TIMEOUT_MS", "3000"}, {"NETFOLD_MPI_RESYNC_TIMEOUT_S", "5"}}, absl::Minutes(2));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("did not join the recovery from a fabric failure within 5 s"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[killed by the test"), std::string::npos) << r.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

// One leaf's links cut (both ways, for good) under four communicators in
// use: its ranks' links fail after their retry budget (about 3 s) and they
// tell the manager in a heartbeat, which detaches them and revokes the
// groups, so the other leaf's ranks leave the fabric at once in every
// communicator. Before, nothing reported the cut (the leaf had nothing in
// flight to fail), and those ranks waited out NETFOLD_TIMEOUT_MS in each
// communicator in turn: 4 x 15 s here, 4 x 30 s by default.
TEST(MpiInterposerOutage, ALeafCutOffCostsTheLinkBudgetNotADeadlinePerCommunicator) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = RunWithAFaultAtPhaseOne(
      **fabric, 4, {"link_cut", "5"}, {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "15000"}},
      absl::Minutes(3), [&] { return (*fabric)->SetLinkFault("leaf0", "down=1"); });
  ExpectPassed(r, "link_cut");
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
  const double slowest = SecondsAfter(r.output, "slowest round after the cut took ");
  EXPECT_GE(slowest, 0) << r.output;
  EXPECT_LT(slowest, 10.0) << r.output;
}

// The same cut, healed 6 s after it began: the communicators in use stay
// on their fallback, and one created 20 s after the cut is offloaded
// again (its leaf0 ranks attach again; the leaf's link up the tree, cut
// too, is usable again 10 s after it failed). Before, those ranks stayed
// detached and every later communicator ran on MPI ("group not created").
TEST(MpiInterposerOutage, ACommunicatorCreatedAfterALeafCameBackIsOffloaded) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  std::thread heal;
  MpiResult r = RunWithAFaultAtPhaseOne(
      **fabric, 4, {"link_cut", "2", "20"},
      {{"NETFOLD_MPI_VERBOSE", "1"}, {"NETFOLD_TIMEOUT_MS", "15000"}}, absl::Minutes(3), [&] {
        heal = std::thread([&] {
          absl::SleepFor(absl::Seconds(6));
          const absl::Status s = (*fabric)->SetLinkFault("leaf0", "none");
          EXPECT_TRUE(s.ok()) << s;
        });
        return (*fabric)->SetLinkFault("leaf0", "down=1");
      });
  if (heal.joinable()) heal.join();
  ExpectPassed(r, "link_cut");
  // World and its three duplicates at the start, and the one after the cut.
  size_t offloaded = 0;
  for (size_t at = r.output.find("offloaded to the fabric"); at != std::string::npos;
       at = r.output.find("offloaded to the fabric", at + 1)) {
    ++offloaded;
  }
  EXPECT_EQ(offloaded, 5u) << r.output;
}

// Nonblocking allreduces, each waited for, when the switches die: the first
// fails on the fabric and is re-run on MPI ("reduced again"); no rank had
// started another, so every later one runs on MPI at once, with or without
// a blocking collective among them. With two ranks per host the blocking
// one goes through the node hierarchy. Until 2026-12-07, every nonblocking
// operation before a blocking collective was recovered one by one, and on a
// communicator with only nonblocking ones, every one for good.
TEST(MpiInterposerOutage, NonblockingCallsAfterAFailureRunOnMpiAtOnce) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  // (ranks per host, nonblocking operations before the blocking one, and
  // whether there is one); with none before, every rank meets the failure
  // in the blocking allreduce itself.
  for (auto [per_host, before, blocking] :
       {std::tuple{1, 5, true}, {2, 5, true}, {1, 0, true}, {1, 5, false}}) {
    SCOPED_TRACE(absl::StrFormat("%d/host, %d before, blocking %d", per_host, before, blocking));
    auto fabric = FourHostFabric();
    ASSERT_TRUE(fabric.ok()) << fabric.status();
    MpiResult r = RunKillingTheSwitchesAtPhaseOne(
        **fabric, 4,
        {"nb_outage", std::to_string(before), "20", blocking ? "blocking" : "nonblocking_only"},
        {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "3000"},
         {"NETFOLD_TEST_RANKS_PER_HOST", std::to_string(per_host)}},
        absl::Minutes(3));
    ExpectPassed(r, "nb_outage");
    // 4000 bytes per operation and rank, 4 ranks: the first operation after
    // the failure, none of those after it (and the blocking allreduce's 4
    // bytes, which the hosts' leaders meet the failure in on their own).
    const double again = SecondsAfter(r.output, "reduced again on MPI ");
    EXPECT_GT(again, 0) << r.output;
    EXPECT_LE(again, (4000 + 4) * 4) << r.output;
  }
}

// NETFOLD_MPI_ENABLE=1 and a fabric that dies: the failed collective goes
// through the communicator's error handler, as an error inside MPI would.
// The default handler aborts the job (a program that does not check return
// codes must not go on with a buffer nothing wrote); MPI_ERRORS_RETURN
// gets MPI_ERR_OTHER back.
TEST(MpiInterposerOutage, UnderEnableOneAFabricFailureGoesThroughTheErrorHandler) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string handler : {"return", "fatal"}) {
    SCOPED_TRACE(handler);
    tools::LocalFabricOptions o;
    o.hosts = 2;
    auto fabric = tools::LocalFabric::Start(o);
    ASSERT_TRUE(fabric.ok()) << fabric.status();
    MpiResult r = RunKillingTheSwitchesAtPhaseOne(
        **fabric, 2, {"strict", handler},
        {{"NETFOLD_MPI_ENABLE", "1"}, {"NETFOLD_TIMEOUT_MS", "2000"}}, absl::Minutes(3));
    EXPECT_NE(r.output.find("allreduce failed on the fabric"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[killed by the test"), std::string::npos) << r.output;
    if (handler == "return") {
      ExpectPassed(r, "strict");
      EXPECT_NE(r.output.find("allreduce returned error class"), std::string::npos) << r.output;
    } else {
      EXPECT_NE(r.exit_code, 0) << r.output;
      EXPECT_EQ(r.output.find("instead of aborting"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("mpi_collectives strict:"), std::string::npos)
          << "the job ran to its end:\n" << r.output;
    }
  }
}

// --- The host keeps behaving like a NIC while the application computes -------

// "offloaded KIND  N" as printed by NETFOLD_MPI_STATS=1 at MPI_Finalize.
int64_t Offloaded(const std::string& output, const std::string& kind) {
  const std::string key = "offloaded " + kind;
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(output.c_str() + at + key.size(), nullptr, 10);
}

// MPI_THREAD_MULTIPLE keeps the fabric: two threads per rank run
// collectives at once, each on its own communicator, every one offloaded
// and checked.
TEST_F(MpiInterposer, ThreadMultipleOffloadsConcurrentCommunicators) {
  MpiResult r = MpiRun(4, {"threads", "100"}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"}});
  ExpectPassed(r, "threads");
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("THREAD_MULTIPLE"), std::string::npos) << r.output;
  EXPECT_EQ(Offloaded(r.output, "allreduce"), 4 * (201 + 40)) << r.output;
  EXPECT_EQ(Offloaded(r.output, "bcast"), 4 * 200) << r.output;
}

// An mpi4py program, unmodified (mpi4py asks for MPI_THREAD_MULTIPLE).
TEST_F(MpiInterposer, AnUnmodifiedMpi4pyProgramIsOffloaded) {
  const char* script = std::getenv("NETFOLD_TEST_MPI4PY");
  if (script == nullptr) GTEST_SKIP() << "NETFOLD_TEST_MPI4PY is not set (run through meson)";
  if (std::system("/usr/bin/python3 -c 'import mpi4py.MPI, numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Debian's /usr/bin/python3 lacks mpi4py or numpy (python3-mpi4py, python3-numpy)";
  }
  MpiResult r = MpiRun(4, {"/usr/bin/python3", script}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Occurrences(r.output, "mpi4py ok, 150 checked"), 4) << r.output;
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << r.output;
  EXPECT_EQ(Offloaded(r.output, "allreduce"), 4 * 50) << r.output;
  EXPECT_EQ(Offloaded(r.output, "bcast"), 4 * 50) << r.output;
  EXPECT_EQ(Offloaded(r.output, "reduce"), 4 * 50) << r.output;
}

// Nonblocking collectives run on the fabric, several outstanding at once on
// two communicators, completed by every MPI_Wait/Test form, each checked.
TEST_F(MpiInterposer, NonblockingCollectivesAreOffloadedAndCompleteInAnyWaitForm) {
  MpiResult r = MpiRun(4, {"nonblocking", "40"}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"}});
  ExpectPassed(r, "nonblocking");
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << r.output;
  // Per rank: 2 MPI_Iallreduce a round, and every fifth round (8 of 40) one
  // more MPI_Iallreduce and one MPI_Allreduce.
  EXPECT_EQ(Offloaded(r.output, "allreduce"), 4 * (2 * 40 + 2 * 8)) << r.output;
  EXPECT_EQ(Offloaded(r.output, "bcast"), 4 * 40) << r.output;
  EXPECT_EQ(Offloaded(r.output, "reduce"), 4 * 40) << r.output;
  EXPECT_EQ(Offloaded(r.output, "barrier"), 4 * 40) << r.output;
}

// Jobs that compute for a minute after every kind of collective (a reduce
// last), then run 1000 more: every
// one is offloaded and exact, at 2, 4 and 8 ranks, the 4- and 8-rank jobs
// computing on the CPU so that the machine (2 cores here) is loaded while
// the library's progress threads keep the links answered. The same job
// with NETFOLD_PROGRESS_THREAD=0, results over RC (NETFOLD_DELIVERY=rc: the
// switch waits for the ranks' ACKs) and a 20 s pause loses its fabric: the
// test can tell. All four jobs run at once, on one fabric.
TEST(MpiComputePhase, EveryCollectiveStaysOnTheFabricAfterAMinuteOfCompute) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  tools::LocalFabricOptions o;
  o.hosts = 8;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const tools::LocalFabric& manager = **fabric;
  struct Job {
    int np;
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    MpiResult result;
  };
  const std::map<std::string, std::string> strict = {{"NETFOLD_MPI_STATS", "1"},
                                                     {"NETFOLD_MPI_ENABLE", "1"}};
  std::vector<Job> jobs = {
      {2, {"pause", "60", "1000", "sleep"}, strict, {}},
      {4, {"pause", "60", "1000", "busy"}, strict, {}},
      {8, {"pause", "60", "1000", "busy"}, strict, {}},
      {2, {"pause", "20", "50", "sleep"}, {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_PROGRESS_THREAD", "0"}, {"NETFOLD_DELIVERY", "rc"}}, {}},
  };
  std::vector<std::thread> threads;
  for (Job& job : jobs) {
    threads.emplace_back([&job, &manager] {
      job.result = MpiRun(job.np, job.args, manager, job.env, absl::Minutes(6));
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t j = 0; j < 3; ++j) {
    const Job& job = jobs[j];
    SCOPED_TRACE(absl::StrFormat("%d ranks, %s", job.np, job.args[3]));
    ExpectPassed(job.result, "pause");
    EXPECT_EQ(job.result.output.find("fallback:"), std::string::npos) << job.result.output;
    // 5 before the pause and 1000 after, a fifth of each kind (bcast: two
    // fifths, MPI_INT and MPI_CHAR), on every rank.
    EXPECT_EQ(Offloaded(job.result.output, "allreduce"), 201 * job.np) << job.result.output;
    EXPECT_EQ(Offloaded(job.result.output, "reduce"), 201 * job.np) << job.result.output;
    EXPECT_EQ(Offloaded(job.result.output, "bcast"), 402 * job.np) << job.result.output;
    EXPECT_EQ(Offloaded(job.result.output, "barrier"), 201 * job.np) << job.result.output;
  }
  const MpiResult& without = jobs[3].result;
  ExpectPassed(without, "pause");  // MPI itself took over: still right
  EXPECT_NE(without.output.find("fallback: fabric error"), std::string::npos)
      << "without the progress thread the pause should have cost the fabric:\n" << without.output;
}

bool SomethingListensOn(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return connected;
}

// No manager: MPI_Init's fabric attempt ends within a second (the
// interposer's line says how long it tried: MPI's own start-up, measured
// in another job, varies by more than that on a loaded machine), rank 0
// says so in one line, and the job runs on MPI itself.
TEST(MpiStartup, NoManagerIsToldInOneLineWithinASecond) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  // A manager that was killed leaves a port nobody listens on.
  tools::LocalFabricOptions o;
  o.hosts = 2;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const std::string killed = (*fabric)->manager_address();
  ASSERT_TRUE((*fabric)->Kill("manager", SIGKILL).ok());
  std::vector<std::string> managers = {"127.0.0.1:1", "no-such-host.invalid:47910", killed};
  // NETFOLD_MANAGER unset: the default address, if nothing listens there.
  if (!SomethingListensOn(47910)) managers.push_back("");
  for (const std::string& manager : managers) {
    SCOPED_TRACE(manager.empty() ? "(unset)" : manager);
    MpiResult r = MpiRun(2, {"comms"}, manager, {});
    ExpectPassed(r, "comms");
    // Refused and unresolvable fail at once; the killed manager's port
    // refuses too. The 1 s connect timeout is the bound for a host that
    // does not answer; the ranks then agree on the outcome.
    const double tried = SecondsAfter(r.output, "MPI_Init tried it for ");
    ASSERT_GE(tried, 0) << r.output;
    EXPECT_LT(tried, 1.0) << r.output;
    const std::string line = "netfold-mpi: the fabric is not used";
    const size_t first = r.output.find(line);
    EXPECT_NE(first, std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(line, first + 1), std::string::npos) << "one line, not one per rank:\n"
                                                                  << r.output;
    EXPECT_NE(r.output.find("no netfold manager answers at " +
                            (manager.empty() ? std::string("127.0.0.1:47910") : manager)),
              std::string::npos)
        << r.output;
  }
}

// The whole fabric stopped while the job computes (netfold down): the job
// recovers on MPI itself and MPI_Finalize does not wait for the manager.
TEST(MpiStartup, FinalizeDoesNotWaitForAStoppedFabric) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = MpiRun(4, {"pause", "5", "100", "sleep"}, **fabric,
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "5000"}},
                       absl::Minutes(3), "compute phase", [&] { EXPECT_TRUE((*fabric)->Stop().ok()); });
  ExpectPassed(r, "pause");
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
  const double finalize = SecondsAfter(r.output, "MPI_Finalize took ");
  EXPECT_GE(finalize, 0) << r.output;
  EXPECT_LT(finalize, 1.0) << r.output;
}

// The same, then new communicators: each falls back to MPI at once, not
// after waiting NETFOLD_TIMEOUT_MS for a manager that is gone (a client
// waits for a connection to one that stopped answering
// kUnreachablePatience, 5 s, from when it stopped; the job slept 12 s
// since), and says so. Before, each took the whole 5 s here, 30 s by
// default.
TEST(MpiStartup, NewCommunicatorsAfterTheFabricStoppedDoNotWaitForTheManager) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = MpiRun(4, {"new_comms", "12", "4"}, **fabric,
                       {{"NETFOLD_MPI_STATS", "1"},
                        {"NETFOLD_MPI_VERBOSE", "1"},
                        {"NETFOLD_TIMEOUT_MS", "5000"}},
                       absl::Minutes(3), "compute phase", [&] { EXPECT_TRUE((*fabric)->Stop().ok()); });
  ExpectPassed(r, "new_comms");
  EXPECT_NE(r.output.find("fallback: group not created"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(no manager answers at "), std::string::npos) << r.output;
  const double slowest = SecondsAfter(r.output, "slowest new communicator took ");
  EXPECT_GE(slowest, 0) << r.output;
  EXPECT_LT(slowest, 2.5) << r.output;
}

}  // namespace
}  // namespace netfold
