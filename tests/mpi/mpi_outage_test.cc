// MpiInterposerOutage: the fabric broken under MPI jobs that use it
// (NETFOLD_MPI_ENABLE=try, and =1's error handler): every result stays
// right, no job hangs, and what the failover re-ran is counted
// (docs/mpi.md, "When the fabric fails mid-run").
#include <signal.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "tests/mpi/mpi_test_driver.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

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
// MPI_Comm_free (the root's own free resynced again, alone). "cross_next":
// they wait in the world's recovery for the root, which waits for them in
// the duplicate's; they answer its call to it from there (before they
// did, the job aborted at the deadline, and before that it hung).
TEST(MpiInterposerOutage, ARootBehindTheRanksThatReturnedCatchesUpAndTheJobEnds) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string next :
       {"blocking_next", "nonblocking_next", "free_next", "cross_next"}) {
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
    if (next == "cross_next") {
      EXPECT_EQ(Occurrences(r.output, "met a fabric failure there; joining its recovery"), 3)
          << r.output;
      EXPECT_NE(r.output.find("failover: recoveries joined while waiting in another 3\n"),
                std::string::npos)
          << r.output;
    }
  }
}

// Ranks 1 and 2 returned from a reduce on {0, 1, 2} whose root (rank 0) is
// late (rank 2's, an MPI_Ireduce, is still outstanding), then meet the dead
// switches in an allreduce on {1, 2, 3}, without rank 0, which rank 3 joins
// a second late. So both take rank 0's call in the allreduce's first
// exchange: rank 1 joins the reduce's recovery at once, rank 2 by
// completing its reduce. Checked against the interposer answering only
// with nothing outstanding: rank 2 skipped the call, the allreduce's first
// exchange completed when rank 3 came, and ranks 2 and 3 waited in its
// next exchange for rank 1, away in the reduce's, which waited for rank 2:
// the job aborted at the deadline.
TEST(MpiInterposerOutage, RanksAwayInARecoveryTheyJoinedDoNotBlockAnotherRecovery) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = RunKillingTheSwitchesAtPhaseOne(
      **fabric, 4, {"caller_outside"},
      {{"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "3000"},
       {"NETFOLD_MPI_RESYNC_TIMEOUT_S", "30"}, {"NETFOLD_LOG_LEVEL", "info"}},
      absl::Minutes(2));
  ExpectPassed(r, "caller_outside");
  EXPECT_EQ(r.output.find("did not join"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failover: recoveries joined while waiting in another "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("reduced again on MPI"), std::string::npos) << r.output;
}

// The same, the ranks ahead going on to wait for a message from the root,
// while the root waits for them in its recovery: no order completes both,
// and the interposer does not see point-to-point operations. The first
// rank to wait NETFOLD_MPI_RESYNC_TIMEOUT_S in a recovery aborts the job,
// saying why, rather than leave it hanging.
TEST(MpiInterposerOutage, ARecoveryTheOtherRanksCannotJoinAbortsTheJobAtItsDeadline) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const absl::Time start = absl::Now();
  MpiResult r = RunKillingTheSwitchesAtPhaseOne(
      **fabric, 4, {"root_late", "recv_next"},
      {{"NETFOLD_TIMEOUT_MS", "3000"}, {"NETFOLD_MPI_RESYNC_TIMEOUT_S", "5"}}, absl::Minutes(2));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("did not join the recovery from a fabric failure within 5 s"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[killed by the test"), std::string::npos) << r.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

// The deadline is for a recovery only: with no failure, the ranks wait in
// MPI_Comm_free (whose check of the communicator uses the same exchange)
// for a rank that comes 4 s after them, as MPI itself would.
TEST(MpiInterposerOutage, WithNoFailureALateRankIsWaitedForWithoutADeadline) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  MpiResult r = MpiRun(4, {"late_to_free", "4"}, **fabric,
                       {{"NETFOLD_MPI_RESYNC_TIMEOUT_S", "1"}, {"NETFOLD_MPI_ENABLE", "1"}},
                       absl::Minutes(2));
  ExpectPassed(r, "late_to_free");
  EXPECT_EQ(r.output.find("did not join"), std::string::npos) << r.output;
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

// The same cut, healed 6 s after it began: one communicator created 20 s
// after the cut is offloaded again (its leaf0 ranks attach again; the
// leaf's link up the tree, cut too, is usable again 10 s after it failed).
// Before, those ranks stayed detached and every later communicator ran on
// MPI ("group not created"). The world, which failed over in one of the
// two rounds after the cut, goes back to the fabric at its 12th call on
// MPI (NETFOLD_MPI_RETRY_AFTER=12), among the 30 allreduces at the end: at
// most two calls come before them (the second round's allreduce, the
// barrier before the new communicator). Before, a communicator that
// failed over stayed on MPI for good.
// `link_cut 2 20 30` with NETFOLD_MPI_RETRY_AFTER=12 after a fault the
// fabric recovered from: passed, and the job on the fabric again.
void ExpectTheFabricBack(const MpiResult& r) {
  ExpectPassed(r, "link_cut");
  // World and its three duplicates at the start, and the one after the fault.
  EXPECT_EQ(Occurrences(r.output, "offloaded to the fabric\n"), 5) << r.output;
  EXPECT_EQ(Occurrences(r.output, "MPI_COMM_WORLD (4 ranks): offloaded to the fabric again "
                                  "(after 12 calls on MPI)\n"),
            1)
      << r.output;
  EXPECT_NE(r.output.find("failover: tries of the fabric again 4, back on it 4\n"),
            std::string::npos)
      << r.output;
  // At every rank: the 12 before the fault, the new communicator's, and at
  // least the last 20 of the 30 at the end.
  EXPECT_GE(Offloaded(r.output, "allreduce "), 4 * (12 + 1 + 20)) << r.output;
}

TEST(MpiInterposerOutage, ACommunicatorCreatedAfterALeafCameBackIsOffloaded) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  auto fabric = FourHostFabric();
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  std::thread heal;
  MpiResult r = RunWithAFaultAtPhaseOne(
      **fabric, 4, {"link_cut", "2", "20", "30"},
      {{"NETFOLD_MPI_VERBOSE", "1"}, {"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "15000"},
       {"NETFOLD_MPI_RETRY_AFTER", "12"}},
      absl::Minutes(3), [&] {
        heal = std::thread([&] {
          absl::SleepFor(absl::Seconds(6));
          const absl::Status s = (*fabric)->SetLinkFault("leaf0", "none");
          EXPECT_TRUE(s.ok()) << s;
        });
        return (*fabric)->SetLinkFault("leaf0", "down=1");
      });
  if (heal.joinable()) heal.join();
  ExpectTheFabricBack(r);
}

// The same job with the switches killed and started again instead of a
// cut (what `netfold kill` and `netfold restart` do to a fabric of `netfold
// up`, docs/faults.md): the communicators fail over, the switches register
// as new incarnations, the ranks attach again for the communicator made
// after it, and the world, tried again after 12 calls on MPI, is back on
// the fabric.
TEST(MpiInterposerOutage, SwitchesKilledAndStartedAgainGiveTheJobTheFabricBack) {
  if (const std::string why = MissingForMpi(); !why.empty()) GTEST_SKIP() << why;
  // One process for the switches, on any machine: restarted as one.
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.switch_processes = tools::LocalFabricOptions::SwitchProcesses::kOne;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  // Killed and started again while the ranks wait between operations (on
  // this thread: a daemon of the harness dies with the thread that started
  // it, tools/local_fabric.h); their groups were revoked meanwhile.
  MpiResult r = RunWithAFaultAtPhaseOne(
      **fabric, 4, {"link_cut", "2", "20", "30"},
      {{"NETFOLD_MPI_VERBOSE", "1"}, {"NETFOLD_MPI_STATS", "1"}, {"NETFOLD_TIMEOUT_MS", "15000"},
       {"NETFOLD_MPI_RETRY_AFTER", "12"}},
      absl::Minutes(3), [&] {
        NETFOLD_RETURN_IF_ERROR((*fabric)->KillSwitches(SIGKILL));
        absl::SleepFor(absl::Seconds(1));
        return (*fabric)->Restart("switches");
      });
  ExpectTheFabricBack(r);
  EXPECT_NE(r.output.find("fallback: fabric error"), std::string::npos) << r.output;
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
    // And counted apart from the one recovered.
    EXPECT_GT(SecondsAfter(r.output, "fallback: on MPI after a fabric failure "), 0) << r.output;
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
        {{"NETFOLD_MPI_ENABLE", "1"}, {"NETFOLD_TIMEOUT_MS", "2000"},
         {"NETFOLD_MPI_MIN_COMM_SIZE", "2"}},
        absl::Minutes(3));
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

}  // namespace
}  // namespace netfold
