// libnetfold end to end: real netfold-managerd and netfold-switchd
// processes on loopback (tools/local_fabric.h) and rank processes
// (fabric_rank) using the public C API. Results are checked inside the
// ranks (bitwise against a reference, identical on every rank).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "host/tcp_oob.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/host/rank_launcher.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

using testing::Launch;
using testing::RankResult;

// `slots` 0: the manager's own K and P.
std::unique_ptr<tools::LocalFabric> StartFabric(int hosts, const std::string& faults = "",
                                                 int receive_queues = 0, uint32_t slots = 8,
                                                 int planes = 0) {
  tools::LocalFabricOptions o;
  o.hosts = hosts;
  o.planes = planes;
  o.default_slot_bytes = slots > 0 ? 1024 : 0;
  o.default_slots = slots;
  o.switch_receive_queues = receive_queues;
  if (!faults.empty()) o.link_faults = "default/both/" + faults;
  auto fabric = tools::LocalFabric::Start(o);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  return fabric.ok() ? std::move(*fabric) : nullptr;
}

// The number of jobs the manager holds; -1 if it does not answer.
int NumJobs(const tools::LocalFabric& fabric) {
  auto stub = control::Admin::NewStub(
      auth::CreateChannel(fabric.manager_address(), fabric.client_auth()));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  control::GetStatusResponse status;
  if (!stub->GetStatus(&c, control::GetStatusRequest(), &status).ok()) return -1;
  return status.jobs_size();
}

void ExpectAllOk(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    EXPECT_NE(results[r].output.find(absl::StrFormat("rank %d: ok", r)), std::string::npos)
        << results[r].output;
  }
}

// ExpectAllOk, and every operation ran on the fabric (none on the hosts).
void ExpectAllOkOnTheFabric(const std::vector<RankResult>& results) {
  ExpectAllOk(results);
  for (const RankResult& r : results) {
    EXPECT_NE(r.output.find("host_ops=0,"), std::string::npos) << "not on the fabric:\n"
                                                               << r.output;
  }
}

// The members of a group decide together whether the fabric or the hosts
// serve it: ranks of one job with different NETFOLD_ALGORITHM values would
// part ways there (one asking the manager, another connecting host
// channels) and wait for each other until their deadlines. netfold_init
// refuses them at once, at every rank, naming both values.
TEST(HostFabric, RanksThatDisagreeOnTheAlgorithmAreRefusedAtInit) {
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 2, 0, {"sweep"}, {{"NETFOLD_ALGORITHM@1", "ring"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Minutes(1));
  ASSERT_EQ(results.size(), 2u);
  for (const RankResult& r : results) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("FAIL init: ranks disagree on the operation: NETFOLD_ALGORITHM "
                            "differs between ranks: rank 0 has auto, rank 1 ring"),
              std::string::npos)
        << r.output;
  }
  EXPECT_EQ(NumJobs(*fabric), 0);
}

TEST(HostFabric, SweepOnTwoRanks) {
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 2, 0, {"sweep"});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
}

// A reduce's non-roots return once their input has left, before the root
// starts (its input copied for the host fallback, or not when there is
// none), and a failure after that reaches their next call.
TEST(HostFabric, ANonRootsReduceReturnsOnceItsInputHasLeft) {
  auto fabric = StartFabric(3);
  ASSERT_NE(fabric, nullptr);
  for (const char* algorithm : {"auto", "innetwork"}) {
    SCOPED_TRACE(algorithm);
    Launch ranks(*fabric, 3, 0, {"release"}, {{"NETFOLD_ALGORITHM", algorithm}});
    ExpectAllOk(ranks.Wait(absl::Minutes(3)));
  }
}

// The same on lossy links, without a host fallback (no copy of the input
// in the group): a request lost after its non-root returned is sent again
// with the bytes it was posted with, not with what the caller wrote into
// its buffer since. It guards any link that reads requests in place
// (docs/performance.md: one that did until the release was tried, and
// this test failed without the release).
TEST(HostFabric, AReleasedReduceResendsWhatItSentNotWhatTheCallerWroteSince) {
  // 5 % at both ends of every switch link: a round trip between two
  // switches passes four stages, so a retransmission is lost or unacked
  // with p = 0.19, and a QP exhausts its seven retries with p^7 = 7e-6 per
  // lost packet. At 10 % (p = 0.34, 5e-4 per loss) about one run in ten
  // lost a switch link and its group (docs/faults.md).
  auto fabric = StartFabric(3, "drop=0.05,seed=5");
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 3, 0, {"release"}, {{"NETFOLD_ALGORITHM", "innetwork"}});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
}

// NETFOLD_REDUCE_DATA=root: a reduce's data reaches its root alone over
// RC, the header every rank by multicast. The sweep's reduces (every root,
// five ranks across two leaves, so the data is relayed down the tree) are
// exact, and so are released reduces on lossy links.
TEST(HostFabric, AReduceWithItsDataToTheRootAloneIsExact) {
  {
    auto fabric = StartFabric(5);
    ASSERT_NE(fabric, nullptr);
    Launch ranks(*fabric, 5, 0, {"sweep"}, {{"NETFOLD_REDUCE_DATA", "root"}});
    ExpectAllOkOnTheFabric(ranks.Wait(absl::Minutes(4)));
  }
  auto fabric = StartFabric(3, "drop=0.05,seed=7");
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 3, 0, {"release"},
               {{"NETFOLD_ALGORITHM", "innetwork"}, {"NETFOLD_REDUCE_DATA", "root"}});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
}

TEST(HostFabric, AForkedChildCannotUseTheContextAndTheParentGoesOn) {
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 2, 0, {"fork"});
  ExpectAllOk(ranks.Wait(absl::Minutes(2)));
}

TEST(HostFabric, SweepOnFiveRanksAcrossTwoLeaves) {
  auto fabric = StartFabric(5);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 5, 0, {"sweep"});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

// The same sweep on the host algorithms (NETFOLD_ALGORITHM): every dtype x
// op, reduce, bcast and barrier, on an odd number of ranks, none of it
// through the switches.
class HostAlgorithmSweep : public ::testing::TestWithParam<const char*> {};

TEST_P(HostAlgorithmSweep, SweepOnFiveRanks) {
  auto fabric = StartFabric(5);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 5, 0, {"sweep"}, {{"NETFOLD_ALGORITHM", GetParam()}});
  auto results = ranks.Wait(absl::Minutes(4));
  ExpectAllOk(results);
  for (const auto& r : results) {
    EXPECT_EQ(r.output.find("host_ops=0,"), std::string::npos) << "the fabric ran it:\n" << r.output;
    EXPECT_NE(r.output.find("host_ops="), std::string::npos) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, HostAlgorithmSweep,
                         ::testing::Values("ring", "bidir", "tree", "treescatter"));

// NETFOLD_PARTITION=default: the job takes P_Key 0xFFFF (what a RoCE NIC
// needs); the switches' host QPs and multicast results carry it.
TEST(HostFabric, DefaultPartitionJobRunsTheSweep) {
  auto fabric = StartFabric(3);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 3, 0, {"sweep"},
               {{"NETFOLD_PARTITION", "default"}, {"NETFOLD_LOG_LEVEL", "info"}});
  auto results = ranks.Wait(absl::Minutes(4));
  ExpectAllOk(results);
  for (const auto& r : results) {
    EXPECT_NE(r.output.find("P_Key 0xffff"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("host_ops=0,"), std::string::npos) << "not on the fabric:\n"
                                                              << r.output;
  }
}

// NETFOLD_INTEGRITY=1 (docs/security.md): every message carries the job's
// tag; the sweep (every dtype x op, reduce, bcast, barrier) is exact on
// five ranks across two leaves, with results over RC down the tree (the
// multicast path is spoofed_results_test's), and no result was refused.
TEST(HostFabric, IntegrityJobRunsTheSweepWithRcDelivery) {
  auto fabric = StartFabric(5);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 5, 0, {"sweep"},
               {{"NETFOLD_INTEGRITY", "1"}, {"NETFOLD_DELIVERY", "rc"},
                {"NETFOLD_LOG_LEVEL", "info"}});
  auto results = ranks.Wait(absl::Minutes(4));
  ExpectAllOk(results);
  for (const auto& r : results) {
    EXPECT_NE(r.output.find("integrity tag)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("foreign=0,"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("host_ops=0,"), std::string::npos) << "not on the fabric:\n"
                                                              << r.output;
  }
}

// A value of NETFOLD_INTEGRITY that is neither on nor off fails init with
// the variable's name, and no job is left behind.
TEST(HostFabric, AMalformedIntegrityValueFailsInitWithTheReason) {
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 2, 0, {"sweep"}, {{"NETFOLD_INTEGRITY", "maybe"}});
  for (const auto& r : ranks.Wait(absl::Minutes(1))) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("NETFOLD_INTEGRITY='maybe'"), std::string::npos) << r.output;
  }
  EXPECT_EQ(NumJobs(*fabric), 0);
}

// NETFOLD_TRANSPORT=verbs on a host without an RDMA device: every rank's
// init fails at once with the reason, and the job is released.
TEST(HostFabric, VerbsTransportWithoutADeviceFailsInitWithTheReason) {
  if (std::filesystem::exists("/sys/class/infiniband") &&
      !std::filesystem::is_empty("/sys/class/infiniband")) {
    GTEST_SKIP() << "this host has an RDMA device";
  }
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 2, 0, {"sweep"}, {{"NETFOLD_TRANSPORT", "verbs"}});
  auto results = ranks.Wait(absl::Minutes(1));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("FAIL init"), std::string::npos) << r.output;
  }
  EXPECT_NE(results[0].output.find("no RDMA device"), std::string::npos) << results[0].output;
  EXPECT_EQ(NumJobs(*fabric), 0) << "the failed job still holds its QPs";
}

TEST(HostFabric, SixteenRanksWithConcurrentGroups) {
  auto fabric = StartFabric(16);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 16, 0, {"groups"});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

TEST(HostFabric, SweepUnderSeededFaultsOnEveryLink) {
  const std::string faults = "drop=0.02,dup=0.01,reorder=0.02:200us,corrupt=0.002,seed=5";
  auto fabric = StartFabric(4, faults);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"sweep"}, {{"NETFOLD_FAULTS", faults}});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

TEST(HostFabric, TwoJobsAtOnce) {
  auto fabric = StartFabric(8);
  ASSERT_NE(fabric, nullptr);
  Launch a(*fabric, 4, 0, {"groups"});
  Launch b(*fabric, 4, 4, {"sweep"});
  ExpectAllOk(a.Wait(absl::Minutes(4)));
  ExpectAllOk(b.Wait(absl::Minutes(4)));
}

// Threads named `name` in the processes `pids`.
int ThreadsNamed(const std::vector<pid_t>& pids, const std::string& name) {
  int n = 0;
  for (pid_t pid : pids) {
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(
             absl::StrFormat("/proc/%d/task", pid), ec)) {
      std::ifstream comm(task.path() / "comm");
      std::string line;
      if (std::getline(comm, line) && line == name) ++n;
    }
  }
  return n;
}

// Switch `name`'s counters, QPs and groups included.
control::GetCountersResponse SwitchCounters(const tools::LocalFabric& fabric,
                                            const std::string& name) {
  absl::StatusOr<control::GetCountersResponse> counters = fabric.SwitchCounters(name);
  EXPECT_TRUE(counters.ok()) << counters.status();
  return counters.ok() ? *counters : control::GetCountersResponse();
}

// Each switch's name and the aggregation messages it received so far,
// through its port or, from a switch of the same process, in memory (a
// root over leaves of its process reads next to no packets).
std::vector<std::pair<std::string, uint64_t>> MessagesBySwitch(
    const tools::LocalFabric& fabric) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const std::string& name : fabric.switch_names()) {
    out.emplace_back(name, SwitchCounters(fabric, name).messages_received());
  }
  return out;
}

// A job of two planes whose groups ran on plane 0 alone: every switch of
// plane 0 carried its messages, plane 1's (named NAME@1) next to none.
void ExpectPlaneZeroAlone(const tools::LocalFabric& fabric) {
  for (const auto& [name, messages] : MessagesBySwitch(fabric)) {
    const bool plane1 = name.find('@') != std::string::npos;
    if (plane1) {
      EXPECT_LT(messages, 100u) << name;
    } else {
      EXPECT_GT(messages, 1000u) << name;
    }
  }
}

// What the QPs of the fabric's switches counted since the switches
// started, those destroyed with their jobs included (GetCounters' all_qps),
// summed over the switches: packets received in order, NAKs sent, and
// packets dropped as ahead of a QP's PSN.
struct QpTotals {
  uint64_t received = 0, naks = 0, ahead = 0;
};
QpTotals EveryQp(const tools::LocalFabric& fabric) {
  QpTotals t;
  for (const std::string& name : fabric.switch_names()) {
    const control::QpCounters all = SwitchCounters(fabric, name).all_qps();
    t.received += all.packets_received();
    t.naks += all.naks_sent();
    for (const control::NamedCount& d : all.drops()) {
      if (d.name() == "out_of_sequence") t.ahead += d.count();
    }
  }
  return t;
}

// Every packet a switch's port read came through one of its receive queues.
void ExpectEveryPacketThroughTheQueues(const tools::LocalFabric& fabric, int queues) {
  for (const std::string& name : fabric.switch_names()) {
    SCOPED_TRACE(name);
    const control::GetCountersResponse counters = SwitchCounters(fabric, name);
    uint64_t through_queues = 0;
    int queues_seen = 0;
    for (const control::NamedCount& b : counters.backend_counters()) {
      if (b.name().starts_with("rx_queue.") && b.name().ends_with(".packets")) {
        through_queues += b.count();
        ++queues_seen;
      }
    }
    EXPECT_EQ(queues_seen, queues);
    EXPECT_EQ(through_queues, counters.port().rx_packets());
  }
}

// Receive queues (docs/switch.md): every switch reads its port with two
// threads, every packet through them, and the fp32 sums, whose bits show
// the association order, are the same bits as with none; a 16 MiB vector
// crosses them exactly, each QP receiving in order (no NAK, nothing ahead
// of its PSN). The manager's window (K = 64 chunks of 4032 bytes), so that
// a rank has several GSO batches in flight at once, which a steering that
// split a sender's packets between queues would reorder (one that picks a
// queue at random gave ~440 NAKs per run).
TEST(HostFabric, ReceiveQueuesGiveTheSameBitsAsTheDataPlaneThreadAlone) {
  std::string digests[2];
  for (int queues : {0, 2}) {
    auto fabric = StartFabric(5, "", queues, /*slots=*/0);
    ASSERT_NE(fabric, nullptr);
    EXPECT_EQ(ThreadsNamed(fabric->switch_pids(), "netfold-rxq"),
              queues * static_cast<int>(fabric->switch_names().size()));
    Launch ranks(*fabric, 5, 0, {"digest", "300"});
    digests[queues > 0] = testing::AgreedDigest(ranks.Wait(absl::Minutes(3)));
    if (queues > 0) {
      const QpTotals before = EveryQp(*fabric);
      Launch large(*fabric, 5, 0, {"large", std::to_string(16u << 20)});
      ExpectAllOk(large.Wait(absl::Minutes(3)));
      const QpTotals after = EveryQp(*fabric);  // the job's QPs are gone, not their counts
      EXPECT_GT(after.received - before.received, 4096u) << "the job's QPs not counted";
      EXPECT_EQ(after.naks - before.naks, 0u);
      EXPECT_EQ(after.ahead - before.ahead, 0u);
      ExpectEveryPacketThroughTheQueues(*fabric, queues);
    }
  }
  EXPECT_FALSE(digests[0].empty());
  EXPECT_EQ(digests[1], digests[0]) << "receive queues changed the bits";
  // Faults on every link, duplicates among them: the data-plane thread
  // copies a duplicated packet a queue read (into a buffer of its own, not
  // the queue's pool).
  const std::string faults = "drop=0.02,dup=0.02,reorder=0.02:200us,corrupt=0.002,seed=9";
  auto fabric = StartFabric(4, faults, 2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"sweep"}, {{"NETFOLD_FAULTS", faults}});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

// netfold up's default on a machine with fewer CPUs than switches and
// hosts: the tree's switches in one process, on one data-plane thread,
// hand each other their messages in memory (docs/switch.md, "Several
// switches in one process"). From the eleventh to the twenty-third
// session the process gave each switch a thread of its own, and the
// messages between them crossed the kernel, with nothing failing: the
// counters are what shows it.
TEST(HostFabric, SwitchesOfOneProcessHandEachOtherTheirMessagesInMemory) {
  tools::LocalFabricOptions o;
  o.hosts = 4;  // two on each leaf
  o.switch_processes = tools::LocalFabricOptions::SwitchProcesses::kOne;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  ASSERT_EQ((*fabric)->switch_pids().size(), 1u);
  Launch ranks(**fabric, 4, 0, {"large", std::to_string(1u << 20)});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
  ASSERT_EQ((*fabric)->switch_names().size(), 3u);
  int leaves = 0;
  for (const std::string& name : (*fabric)->switch_names()) {
    if (!name.starts_with("leaf")) continue;  // the root multicasts its results
    ++leaves;
    SCOPED_TRACE(name);
    const control::GetCountersResponse counters = SwitchCounters(**fabric, name);
    // 1 MiB in chunks of at most 4 KiB: a partial result of each to the root.
    EXPECT_GE(counters.in_process_messages(), 256u) << "not handed over in memory";
    EXPECT_LE(counters.messages_sent() - counters.in_process_messages(), 8u)
        << "the partials crossed the kernel";
  }
  EXPECT_EQ(leaves, 2);
}

// A job holds as many groups as the manager grants it (docs/manager.md):
// here 25 at once, K = 128, with NETFOLD_MAX_GROUPS=64 as docs/mpi.md
// suggests for applications with many communicators. The switches held
// each job to 2048 slots of their own (16 such groups) until the
// twenty-fourth session, so the 17th was refused after the manager had
// granted it, and the interposer ran its communicator on MPI.
TEST(HostFabric, AJobHoldsAsManyGroupsAsTheManagerGrantsIt) {
  auto fabric = StartFabric(4, "", 0, /*slots=*/0);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"many_groups", "24"}, {{"NETFOLD_MAX_GROUPS", "64"}});
  ExpectAllOkOnTheFabric(ranks.Wait(absl::Minutes(3)));
  // The groups' orderly removal at the job's end drops nothing: a root's
  // abort that reaches a leaf whose node went first is not counted. (Once
  // the manager has let the job go, and a moment for the last aborts.)
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (NumJobs(*fabric) != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(NumJobs(*fabric), 0);
  absl::SleepFor(absl::Milliseconds(300));
  for (const std::string& name : fabric->switch_names()) {
    const control::GetCountersResponse counters = SwitchCounters(*fabric, name);
    for (const control::NamedCount& d : counters.drops()) {
      // Nor does the hosts' ACK of those aborts, which reaches a leaf that
      // destroyed the job's QPs (late_for_destroyed_qp, not a drop).
      if (d.name() == "switch.unknown_group" || d.name() == "endpoint.unknown_qp") {
        EXPECT_EQ(d.count(), 0u) << name << " " << d.name();
      }
    }
  }
}

TEST(HostFabric, SixtyFourMebibyteVector) {
  auto fabric = StartFabric(3);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 3, 0, {"large", std::to_string(64u << 20)});
  ExpectAllOk(ranks.Wait(absl::Minutes(5)));
}

// The count after `name` ("placed=", "missed=") in a rank's last line; -1
// if missing.
long CountAfter(const std::string& output, const std::string& name) {
  const size_t at = output.rfind(name);
  return at == std::string::npos ? -1
                                 : std::strtol(output.c_str() + at + name.size(), nullptr, 10);
}
long PlacedCount(const std::string& output) { return CountAfter(output, "placed="); }

// Multicast results go straight into the caller's buffer by default
// (docs/host.md): exact, the input untouched, on every rank; and the same
// bits with it turned off.
TEST(HostFabric, ResultsPlacedInTheCallersBufferAreExact) {
  auto fabric = StartFabric(4, "", 0, /*slots=*/0);
  ASSERT_NE(fabric, nullptr);
  {
    Launch ranks(*fabric, 4, 0, {"placed"});
    const std::vector<RankResult> results = ranks.Wait(absl::Minutes(3));
    ExpectAllOk(results);
    for (size_t r = 0; r < results.size(); ++r) {
      EXPECT_GT(PlacedCount(results[r].output), 0) << results[r].output;
    }
  }
  Launch ranks(*fabric, 4, 0, {"placed"}, {{"NETFOLD_PLACE_RESULTS", "0"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Minutes(3));
  ExpectAllOk(results);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(PlacedCount(results[r].output), 0) << results[r].output;
  }
}

// netfold_progress alone moves an operation longer than the window to its
// end (docs/host.md, "Progress and threads"), with no progress thread.
TEST(HostFabric, NetfoldProgressAloneMovesAnOperation) {
  auto fabric = StartFabric(4);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"progress"}, {{"NETFOLD_PROGRESS_THREAD", "0"}});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
}

TEST(HostFabric, AKilledRankMakesTheOthersFailCleanlyWithinTheDeadline) {
  auto fabric = StartFabric(4);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"victim"}, {{"NETFOLD_TIMEOUT_MS", "4000"}});
  ASSERT_TRUE(ranks.WaitForOutput(1, "started", absl::Seconds(60)));
  ranks.Kill(1);
  const absl::Time killed = absl::Now();
  auto results = ranks.Wait(absl::Seconds(60));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(30));
  for (int r : {0, 2, 3}) std::printf("%s", results[r].output.c_str());
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    EXPECT_NE(results[r].output.find("failed cleanly"), std::string::npos) << results[r].output;
  }
}

// A free UDP port on loopback ("127.0.0.1:P"), for a rank whose address a
// switch must know before the rank starts.
std::string FreeLoopbackAddress() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? absl::StrFormat("127.0.0.1:%d", ntohs(sa.sin_port)) : "";
}

// The members that already have an operation's result and are destroying
// the group take part in the failover of one that never got it: it gets
// the result from them (host/resync.h), nobody waits for an operation's
// deadline twice, and every rank ends with the exact result.
void RunWithRankZeroBehind(const std::string& operation) {
  const std::string behind = FreeLoopbackAddress();
  ASSERT_FALSE(behind.empty());
  tools::LocalFabricOptions o;
  o.hosts = 3;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  // The switches send nothing to rank 0 (no ACK, no result, no repair); it
  // drops the multicast results itself (fabric_rank's "behind").
  o.link_faults = behind + "/send/down=1";
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const absl::Time start = absl::Now();
  Launch ranks(**fabric, 3, 0, {"behind", behind, operation}, {{"NETFOLD_TIMEOUT_MS", "3000"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Seconds(90));
  ExpectAllOk(results);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_NE(results[r].output.find("failovers=1"), std::string::npos)
        << "rank " << r << " did not go to the hosts with the others:\n" << results[r].output;
  }
  // Rank 0's operation times out (3 s), then every rank fails over at once.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(HostFabric, AMemberBehindFailsOverWhileTheOthersDestroyTheGroup) {
  RunWithRankZeroBehind("allreduce");
}

// The same inside a reduce rooted at the member behind: the others
// completed it once their input had left and kept its end (KeptInput,
// host/resync.h), from which it is reduced again at the root.
TEST(HostFabric, ARootBehindInAReduceGetsItReducedAgainFromWhatTheOthersKept) {
  RunWithRankZeroBehind("reduce");
}

// Inside a bcast: only its root keeps the end of the result (host/resync.h,
// BcastRootKeeps). Rooted at rank 1, which is ahead, it gives rank 0 what
// it lacks; rooted at rank 0, the root itself is behind and the others,
// ahead, kept nothing: nobody lacks anything but the count.
TEST(HostFabric, AMemberBehindInABcastGetsItsResultFromTheRoot) {
  RunWithRankZeroBehind("bcast");
}

TEST(HostFabric, ABcastRootBehindFailsOverWithTheOthersThatKeptNothing) {
  RunWithRankZeroBehind("bcast0");
}

// Data planes (docs/host.md): on a fabric of two, a job's groups go to the
// planes in turn (the "groups" scenario's three groups over all ranks, two
// of them used at once: planes p, 1 - p, p from p = job id mod 2), every
// result exact; each plane's switches carried traffic. With
// NETFOLD_PLANES=1 plane 1 carries none.
TEST(HostFabric, GroupsTakeTheDataPlanesInTurn) {
  for (const char* planes : {"0", "1"}) {
    SCOPED_TRACE(std::string("NETFOLD_PLANES=") + planes);
    auto fabric = StartFabric(4, "", 0, 8, /*planes=*/2);
    ASSERT_NE(fabric, nullptr);
    Launch ranks(*fabric, 4, 0, {"groups"}, {{"NETFOLD_PLANES", planes}});
    ExpectAllOkOnTheFabric(ranks.Wait(absl::Minutes(3)));
    const auto received = MessagesBySwitch(*fabric);
    ASSERT_EQ(received.size(), 6u);  // root, leaf0, leaf1 in each plane
    for (const auto& [name, messages] : received) {
      const bool plane1 = name.find('@') != std::string::npos;
      if (plane1 && std::string(planes) == "1") {
        EXPECT_EQ(messages, 0u) << name;
      } else {
        EXPECT_GT(messages, 0u) << name;
      }
    }
  }
}

// Channels (docs/host.md): with NETFOLD_CHANNELS=2 on a fabric of two
// planes, one group's operations go to both planes chunk by chunk: the
// sweep exact on every type and length, both planes' switches carrying
// the one group, and fp32 sums bitwise those of one channel.
TEST(HostFabric, ChannelsSpreadOneGroupOverThePlanesAndKeepTheBits) {
  auto fabric = StartFabric(4, "", 0, 8, /*planes=*/2);
  ASSERT_NE(fabric, nullptr);
  std::string digests[2];
  for (const char* channels : {"1", "2"}) {
    SCOPED_TRACE(std::string("NETFOLD_CHANNELS=") + channels);
    Launch ranks(*fabric, 4, 0, {"digest", "200"}, {{"NETFOLD_CHANNELS", channels}});
    digests[std::string(channels) == "2"] = testing::AgreedDigest(ranks.Wait(absl::Minutes(3)));
  }
  EXPECT_FALSE(digests[0].empty());
  EXPECT_EQ(digests[1], digests[0]) << "two channels changed the bits";

  // A fresh fabric, so that each plane's messages are this job's.
  fabric = StartFabric(4, "", 0, 8, /*planes=*/2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"sweep"}, {{"NETFOLD_CHANNELS", "2"}});
  ExpectAllOkOnTheFabric(ranks.Wait(absl::Minutes(3)));
  const auto received = MessagesBySwitch(*fabric);
  ASSERT_EQ(received.size(), 6u);
  for (const auto& [name, messages] : received) EXPECT_GT(messages, 1000u) << name;
  // Results straight into the caller's buffer: each channel's socket is
  // offered the places of its own channel's chunks, so most land there.
  Launch placed(*fabric, 4, 0, {"placed"}, {{"NETFOLD_CHANNELS", "2"}});
  const std::vector<RankResult> placed_results = placed.Wait(absl::Minutes(3));
  ExpectAllOk(placed_results);
  for (const RankResult& r : placed_results) {
    // (Offered every channel's places, half of them missed.)
    EXPECT_GT(PlacedCount(r.output), 10 * CountAfter(r.output, "missed=")) << r.output;
  }
}

// The job takes the most channels any rank asks for (docs/host.md,
// "Channels"): one rank of four asking for two puts the group on both
// planes, and every rank's caps report the window of both channels, K x 2.
TEST(HostFabric, OneRankAskingForChannelsGivesTheJobThem) {
  auto fabric = StartFabric(4, "", 0, 8, /*planes=*/2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"sweep"}, {{"NETFOLD_CHANNELS@2", "2"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Minutes(3));
  ExpectAllOkOnTheFabric(results);
  for (const RankResult& r : results) EXPECT_EQ(CountAfter(r.output, "window="), 16) << r.output;
  const auto received = MessagesBySwitch(*fabric);
  ASSERT_EQ(received.size(), 6u);
  for (const auto& [name, messages] : received) EXPECT_GT(messages, 1000u) << name;
}

// A channel a member cannot join, here because that rank is out of file
// descriptors when the second channel's multicast socket is opened: every
// member leaves both channels, the group goes on plane 0 alone (the
// descriptor freed by leaving is enough there), rank 0 warns, the rank
// that failed says why, and every operation runs on the fabric, exact. A
// member that cannot join even there leaves the group to the hosts.
TEST(HostFabric, AChannelOneRankCannotJoinLeavesTheGroupOnPlaneZeroAlone) {
  auto fabric = StartFabric(4, "", 0, 8, /*planes=*/2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(*fabric, 4, 0, {"squeezed"},
               {{"NETFOLD_CHANNELS", "2"}, {"NETFOLD_TEST_FDS_LEFT@2", "1"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Minutes(3));
  ExpectAllOkOnTheFabric(results);
  EXPECT_NE(results[0].output.find("cannot take the group"), std::string::npos)
      << results[0].output;
  EXPECT_NE(results[0].output.find("trying plane 0 alone"), std::string::npos)
      << results[0].output;
  EXPECT_NE(results[2].output.find("cannot join group"), std::string::npos) << results[2].output;
  EXPECT_NE(results[2].output.find("Too many open files"), std::string::npos)
      << results[2].output;
  ExpectPlaneZeroAlone(*fabric);
  EXPECT_EQ(NumJobs(*fabric), 0);

  // With none to spare it cannot join on plane 0 either: the hosts serve
  // the group (NETFOLD_ALGORITHM=auto, the default), every result exact.
  Launch none(*fabric, 4, 0, {"squeezed"},
              {{"NETFOLD_CHANNELS", "2"}, {"NETFOLD_TEST_FDS_LEFT@2", "0"}});
  const std::vector<RankResult> on_hosts = none.Wait(absl::Minutes(3));
  ExpectAllOk(on_hosts);
  EXPECT_NE(on_hosts[0].output.find("host group of 4 ranks"), std::string::npos)
      << on_hosts[0].output;
  EXPECT_NE(on_hosts[2].output.find("Too many open files"), std::string::npos)
      << on_hosts[2].output;
  for (const RankResult& r : on_hosts) EXPECT_GT(CountAfter(r.output, "host_ops="), 0) << r.output;
  EXPECT_EQ(NumJobs(*fabric), 0);
}

// A channel the manager refuses (here the job's quota of one group, as it
// asked with NETFOLD_MAX_GROUPS) puts the group on plane 0, one channel,
// with a warning: the group it was granted on the other plane goes back,
// and every operation runs on the fabric, exact. A job that leaves its
// quota to the manager gets the default once per channel: here, on a
// manager whose default is one group, both channels.
TEST(HostFabric, AChannelTheManagerRefusesLeavesTheGroupOnPlaneZeroAlone) {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.planes = 2;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  o.default_groups = 1;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  Launch ranks(**fabric, 4, 0, {"sweep"},
               {{"NETFOLD_CHANNELS", "2"}, {"NETFOLD_MAX_GROUPS", "1"}});
  const std::vector<RankResult> results = ranks.Wait(absl::Minutes(3));
  ExpectAllOkOnTheFabric(results);
  EXPECT_NE(results[0].output.find("cannot take the group"), std::string::npos)
      << results[0].output;
  for (const RankResult& r : results) EXPECT_EQ(CountAfter(r.output, "max_groups="), 1) << r.output;
  ExpectPlaneZeroAlone(**fabric);
  EXPECT_EQ(NumJobs(**fabric), 0);

  // The manager's default, once per channel: both granted.
  const auto before = MessagesBySwitch(**fabric);
  Launch defaults(**fabric, 4, 0, {"sweep"}, {{"NETFOLD_CHANNELS", "2"}});
  const std::vector<RankResult> granted = defaults.Wait(absl::Minutes(3));
  ExpectAllOkOnTheFabric(granted);
  EXPECT_EQ(granted[0].output.find("cannot take the group"), std::string::npos)
      << granted[0].output;
  for (const RankResult& r : granted) EXPECT_EQ(CountAfter(r.output, "max_groups="), 2) << r.output;
  const auto after = MessagesBySwitch(**fabric);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_GT(after[i].second - before[i].second, 1000u) << after[i].first;
  }
  EXPECT_EQ(NumJobs(**fabric), 0);
}

}  // namespace
}  // namespace netfold
