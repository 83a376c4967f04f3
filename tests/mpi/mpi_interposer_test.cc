// libnetfold_mpi.so under mpirun with 2, 4 and 8 ranks against a local
// fabric of real daemons: every predefined datatype x op (results checked in
// the MPI program against an independent reference and compared with
// PMPI_), in place, dup/split communicators, counted fallbacks, nonblocking
// and threaded programs, compute phases and start-up. The fabric broken
// mid-run: mpi_outage_test.cc; the driver: mpi_test_driver.h.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/mpi/mpi_test_driver.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

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


// Two-rank communicators stay on MPI unless NETFOLD_MPI_MIN_COMM_SIZE=2
// (VerboseSaysEachDecisionOnceFromRankZero checks the default).
TEST_F(MpiInterposer, EveryTypeAndOpOnTwoRanksUpToOneMebiElements) {
  MpiResult r = MpiRun(2, {"sweep", "big"}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_ENABLE", "1"},
                        {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}});
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
// Two hosts: their leaders' communicator has two ranks, on the fabric with
// NETFOLD_MPI_MIN_COMM_SIZE=2.
TEST_F(MpiInterposer, NodeHierarchyWithTwoAndFourRanksPerHost) {
  for (int per_host : {2, 4}) {
    SCOPED_TRACE(per_host);
    MpiResult r = MpiRun(2 * per_host, {"hierarchy"}, manager(),
                         {{"NETFOLD_MPI_ENABLE", "1"}, {"NETFOLD_MPI_STATS", "1"},
                          {"NETFOLD_MPI_VERBOSE", "1"}, {"NETFOLD_MPI_MIN_COMM_SIZE", "2"},
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
                           {"NETFOLD_TEST_RANKS_PER_HOST", "2"},
                           {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}});
  ExpectPassed(flat, "comms");
  EXPECT_EQ(flat.output.find("node hierarchy"), std::string::npos) << flat.output;
}

TEST_F(MpiInterposer, EveryTypeAndOpOnEightRanks) {
  ExpectPassed(MpiRun(8, {"sweep"}, manager(), {{"NETFOLD_MPI_ENABLE", "1"}},
                      absl::Minutes(10)),
               "sweep");
}

// Split communicators of two ranks on the fabric (NETFOLD_MPI_MIN_COMM_SIZE=2).
TEST_F(MpiInterposer, DupAndSplitCommunicators) {
  MpiResult r = MpiRun(4, {"comms"}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}});
  ExpectPassed(r, "comms");
  // Split mod 3 of 4 ranks leaves single-rank communicators: counted.
  EXPECT_NE(r.output.find("fallback: communicator too small"), std::string::npos) << r.output;
  // A reduce-scatter and an allgather on each of 3 communicators, 3 rounds,
  // 4 ranks, but 2 ranks alone in theirs: 30 of 36 on the fabric.
  EXPECT_NE(r.output.find("offloaded allgather  30"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offloaded reduce_scatter 30"), std::string::npos) << r.output;
}

// A freed communicator's group is given to the next one of the same ranks,
// and dropped to make room in a job out of groups (docs/host.md, "Kept
// groups"). Counted over the four ranks: made by the manager, the world's
// and the first duplicate's at every rank, {0, 1}'s at two and {0, 1, 2}'s
// at three: 13; given again, the second and the last duplicates': 8; kept
// at the end, the duplicates' at four and {0, 1, 2}'s at three: 7; the
// same under NETFOLD_ALGORITHM=auto. A private duplicate for each group
// made, none for a group given again (its own comes with it). With
// NETFOLD_KEEP_GROUPS=0 the job keeps none.
TEST_F(MpiInterposer, FreedCommunicatorsGroupsAreKeptForTheNextOfTheSameRanks) {
  const std::map<std::string, std::string> env = {{"NETFOLD_MPI_STATS", "1"},
                                                  {"NETFOLD_MPI_MIN_COMM_SIZE", "2"},
                                                  {"NETFOLD_MAX_GROUPS", "3"}};
  // The scenario with `knob` set to `value` (none if empty), every check
  // passed, and the groups line of NETFOLD_MPI_STATS ending in `counts`.
  auto run = [&](const std::string& knob, const std::string& value, const std::string& counts) {
    std::map<std::string, std::string> with = env;
    if (!knob.empty()) with[knob] = value;
    MpiResult r = MpiRun(4, {"kept_groups"}, manager(), with);
    ExpectPassed(r, "kept_groups");
    EXPECT_NE(r.output.find("groups (one per member): made by the manager " + counts),
              std::string::npos)
        << knob << "=" << value << "\n" << r.output;
    return r;
  };
  const std::string kept = "13, kept ones given again 8, kept now 7; private duplicates of "
                           "communicators made 13";
  MpiResult r = run("", "", kept);
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << "nothing fell back:\n" << r.output;
  // The same with libnetfold's host fallback standing by (a barrier of the
  // group on the fabric before the members agree to keep it).
  run("NETFOLD_ALGORITHM", "auto", kept);
  // The world's and three duplicates' at four, {0, 1}'s at two, {0, 1, 2}'s
  // at three.
  run("NETFOLD_KEEP_GROUPS", "0",
      "21, kept ones given again 0, kept now 0; private duplicates of communicators made 21");
}

// Two threads per rank make, use and free communicators of the same ranks
// at once, so both offer kept groups at the same time, in opposite orders
// on even and odd ranks: every result right, every group made or given
// again (one per thread, round and rank), none lost. A group lost on a
// mismatch (neither kept nor released at the manager) would leave the job
// out of groups at eight, and the communicators on MPI.
TEST_F(MpiInterposer, ThreadsMakingCommunicatorsOfTheSameRanksAtOnceShareNoKeptGroup) {
  constexpr int kRounds = 30;
  MpiResult r = MpiRun(4, {"kept_threads", std::to_string(kRounds)}, manager(),
                       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_MAX_GROUPS", "8"}});
  ExpectPassed(r, "kept_threads");
  EXPECT_EQ(r.output.find("fallback:"), std::string::npos) << "nothing fell back:\n" << r.output;
  const std::string line = "groups (one per member): made by the manager ";
  const size_t at = r.output.find(line);
  ASSERT_NE(at, std::string::npos) << r.output;
  int made = -1, reused = -1;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at + line.size(), "%d, kept ones given again %d",
                        &made, &reused),
            2)
      << r.output;
  EXPECT_EQ(made + reused, (2 * kRounds + 6) * 4) << r.output;
  EXPECT_GT(reused, 0) << r.output;
  // Offers differed at least once: with none, the manager would have made
  // the two threads' first groups and four of the six at the end, 24 (72
  // to 176 in 20 runs beside two busy loops; one differing offer in the
  // 15 rounds where they are made to differ suffices).
  EXPECT_GT(made, 24) << "no offers differed:\n" << r.output;
  // A group given again brings the private duplicate its communicator had.
  EXPECT_NE(r.output.find("private duplicates of communicators made " + std::to_string(made)),
            std::string::npos)
      << r.output;
  std::printf("made by the manager %d, given again %d\n", made, reused);
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


// NETFOLD_MPI_VERBOSE=1: each communicator's rank 0 says at its first
// collective whether it is offloaded and why not, once; per-call fallbacks
// once per (communicator, reason); a refused group with the manager's reason.
TEST_F(MpiInterposer, VerboseSaysEachDecisionOnceFromRankZero) {
  // The job's quota is 16 groups (the manager's default): MPI_COMM_WORLD
  // and 15 duplicates get one, the last 5 duplicates are refused.
  MpiResult r = MpiRun(2, {"verbose", "20"}, manager(),
                       {{"NETFOLD_MPI_VERBOSE", "1"}, {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}});
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

  // By default a communicator needs three ranks: with two, in-network
  // aggregation moves no fewer bytes than MPI's own exchange.
  MpiResult two = MpiRun(2, {"verbose", "2"}, manager(), {{"NETFOLD_MPI_VERBOSE", "1"}});
  ExpectPassed(two, "verbose");
  EXPECT_EQ(Occurrences(two.output, "MPI_COMM_WORLD (2 ranks): not offloaded: communicator "
                                    "too small (NETFOLD_MPI_MIN_COMM_SIZE=3)\n"),
            1)
      << two.output;
  EXPECT_EQ(two.output.find("offloaded to the fabric"), std::string::npos) << two.output;
  // Said once at MPI_Init, verbose or not.
  for (const MpiResult* run : {&two, &quiet}) {
    EXPECT_EQ(Occurrences(run->output, "netfold-mpi: MPI_COMM_WORLD has 2 ranks, fewer than "
                                       "NETFOLD_MPI_MIN_COMM_SIZE=3: every collective runs on "
                                       "MPI itself"),
              1)
        << run->output;
  }
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


// --- The host keeps behaving like a NIC while the application computes -------

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
  std::map<std::string, std::string> strict_on_two = strict;
  strict_on_two["NETFOLD_MPI_MIN_COMM_SIZE"] = "2";
  std::vector<Job> jobs = {
      {2, {"pause", "60", "1000", "sleep"}, strict_on_two, {}},
      {4, {"pause", "60", "1000", "busy"}, strict, {}},
      {8, {"pause", "60", "1000", "busy"}, strict, {}},
      {2, {"pause", "20", "50", "sleep"},
       {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_PROGRESS_THREAD", "0"}, {"NETFOLD_DELIVERY", "rc"},
        {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}},
       {}},
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
