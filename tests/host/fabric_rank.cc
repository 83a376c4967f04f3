// One rank of the end-to-end host tests (tests/host/host_fabric_test.cc):
// joins the fabric through the public C API, runs a scenario, checks every
// result, prints one line "rank R: ok" or "rank R: FAIL <why>" and exits 0/1.
//
//   NETFOLD_OOB_ADDRESS/RANK/SIZE, NETFOLD_MANAGER, NETFOLD_HOST set by the test.
//   fabric_rank SCENARIO [ARG]
//
// Scenarios:
//   sweep        allreduce of every dtype x op (order-free inputs checked
//                against the reference), random fp32/fp64 sums checked
//                identical on every rank, reduce, bcast, barrier
//   release      reduces at non-roots return before their root starts
//                (released, host/group.h); a mismatch after the return
//                reaches the next call
//   groups       three groups over the same ranks alive at once, nonblocking
//                operations in flight on two of them at the same time; two
//                destroyed and a fourth made, from a kept one
//   large BYTES  one allreduce of BYTES (fp32 sum, in place)
//   many_groups N  N more groups over all ranks, alive at once, an
//                allreduce on each (checked); every one must be made
//   victim       start a long stream of allreduces; the test kills one rank;
//                the others must fail cleanly (exit 0 if they did, within
//                the deadline)
//   stream N [LAGGARD US]  N operations of 1 to 3 slots per block, mostly
//                allreduces, every fourth a reduce-scatter or an allgather
//                (order-free inputs, every result checked); prints "rank R:
//                stream ok=K errors=E wrong=W"; exit 0 if every operation
//                completed and W == 0. Rank LAGGARD, if given, sleeps US
//                microseconds before each operation: the others' chunks
//                wait that long for their results
//   inplace N COUNT   N in-place int32 allreduces of COUNT elements, every
//                element checked; prints "rank R: inplace ok=K errors=E wrong=W"
//   bcasts N COUNT    the same with bcasts from rank k mod size
//                ("rank R: bcasts ok=...")
//   digest N     N fp32 sums whose bits depend on the association order;
//                prints "rank R: digest=<FNV-1a of every result>"
//   until        checked operations (as stream) until $NETFOLD_TEST_RELEASE
//                exists (at most 10 minutes; the ranks agree every 20
//                operations), printing "streaming" after the first; then the
//                stream line; exit 0 if none failed
//   threads_until  two application threads, each running checked operations
//                (as stream) on a group of its own until
//                $NETFOLD_TEST_RELEASE exists; the ranks of a group agree
//                when to stop over the group itself (a max allreduce every
//                20 operations). Prints "thread T: streaming" after each
//                thread's first, then
//                "thread T: stream ok=..." for each; exit 0 if none failed
//   squeezed     a second group, created while the rank has
//                $NETFOLD_TEST_FDS_LEFT file descriptors to spare (if set:
//                one rank's, as a process at its RLIMIT_NOFILE), then the
//                sweep on it
//   hold         create the group, print "holding", wait for
//                $NETFOLD_TEST_RELEASE, run 10 operations
//   fork         an allreduce, then fork(): the child's calls on the
//                parent's context fail with UNAVAILABLE at once (its
//                threads are the parent's), and the parent goes on
//   behind ADDR [reduce|bcast|bcast0]  rank 0 takes the data address ADDR
//                (the test cut the switch's sends to it) and drops every
//                multicast: it fails over inside one allreduce whose result
//                the others already have (a reduce rooted at it that the
//                others completed; a bcast rooted at rank 1, or at rank 0
//                itself), while they are in netfold_group_destroy; every
//                rank (the root) must end with the exact result
//   progress     with NETFOLD_PROGRESS_THREAD=0: a 3 MiB allreduce moved by
//                netfold_progress alone (no test or wait until its counter
//                says it completed), its result checked; bad timeouts refused
//   outage N     a group kept first (made and destroyed); a stream that
//                stops at its first error (the test kills a switch), then
//                waits for $NETFOLD_TEST_PHASE2 to exist, joins the fabric
//                again (the kept group dropped, not given again) and runs
//                N more operations that must all succeed
//
// NETFOLD_TEST_HOLD_AT=K (stream, digest, inplace, bcasts, outage): after
// its K-th operation the rank prints "rank R: holding at K", waits for
// $NETFOLD_TEST_RELEASE to exist (at most 10 minutes), prints "rank R:
// resumed" and goes on: the test acts on the fabric at a point it knows to
// be inside the stream, not after a sleep that a fast or a loaded machine
// can make too short or too long.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "netfold/netfold.h"
#include "host/tcp_oob.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/reduce.h"
#include "tests/host/fabric_rank_checks.h"
#include "tests/host/fabric_rank_streams.h"
#include "tests/host/few_descriptors.h"

namespace {

using netfold::proto::DataType;
using netfold::proto::ReduceOp;
using netfold::fabric_rank::Check;
using netfold::fabric_rank::CheckedOperation;
using netfold::fabric_rank::CheckRc;
using netfold::fabric_rank::FewDescriptors;
using netfold::fabric_rank::FloatDigest;
using netfold::fabric_rank::g_failure;
using netfold::fabric_rank::g_rank;
using netfold::fabric_rank::g_size;
using netfold::fabric_rank::Input;
using netfold::fabric_rank::MaybeHold;
using netfold::fabric_rank::Reference;
using netfold::fabric_rank::Stream;
using netfold::fabric_rank::StreamOnAThreadUntilReleased;
using netfold::fabric_rank::StreamResult;
using netfold::fabric_rank::StreamUntilReleased;
using netfold::fabric_rank::Nonblocking;
using netfold::fabric_rank::Placed;
using netfold::fabric_rank::Progressed;
using netfold::fabric_rank::Released;
using netfold::fabric_rank::Sweep;

// Counter `name` of the context (netfold_get_counter), checked.
uint64_t Counter(netfold_context_t ctx, const char* name) {
  uint64_t value = 0;
  CheckRc(netfold_get_counter(ctx, name, &value), name);
  return value;
}

// How many times the "groups" scenario's data kept with g3 and g2 was
// released (netfold_group_keep_data), and whether the scenario checks
// what was kept (no rank's groups failed over).
int g_releases[2] = {0, 0};
bool g_kept_checked = false;
void* g_taken = nullptr;  // the data the fourth group got back
void CountRelease(void* data) { ++*static_cast<int*>(data); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: fabric_rank sweep|groups|many_groups N|large BYTES|victim|... "
                 "(the file's head)\n");
    return 2;
  }
  const std::string scenario = argv[1];
  auto oob = netfold::host::TcpOob::FromEnvironment();
  if (!oob.ok()) {
    std::printf("rank ?: FAIL %s\n", oob.status().ToString().c_str());
    return 1;
  }
  g_rank = (*oob)->rank();
  g_size = (*oob)->size();
  if (scenario == "behind" && argc > 2 && g_rank == 0) {
    setenv("NETFOLD_LOCAL_ADDRESS", argv[2], 1);
    setenv("NETFOLD_FAULTS", "mcast_drop=1", 1);
  }
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = g_rank;
  spec.world_size = g_size;
  spec.oob = (*oob)->callbacks();
  spec.job_name = "host-test";
  netfold_context_t ctx = nullptr;
  int rc = netfold_init(&spec, &ctx);
  if (rc != NETFOLD_SUCCESS) {
    std::printf("rank %d: FAIL init: %s: %s\n", g_rank, netfold_strerror(rc), netfold_last_error());
    return 1;
  }
  netfold_group_spec_t gs = NETFOLD_GROUP_SPEC_INITIALIZER;
  gs.rank = g_rank;
  gs.size = g_size;
  gs.oob = spec.oob;
  netfold_group_t g = nullptr;
  rc = netfold_group_create(ctx, &gs, &g);
  if (rc != NETFOLD_SUCCESS) {
    std::printf("rank %d: FAIL group: %s: %s\n", g_rank, netfold_strerror(rc), netfold_last_error());
    netfold_finalize(ctx);
    return 1;
  }
  if (scenario == "sweep") {
    Sweep(**oob, g);
  } else if (scenario == "placed") {
    Placed(g);
  } else if (scenario == "progress") {
    Progressed(ctx, g);
  } else if (scenario == "release") {
    Released(g);
  } else if (scenario == "groups") {
    // A second and a third group over all ranks, used at the same time.
    netfold_group_t g2 = nullptr, g3 = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &g2), "second group");
    CheckRc(netfold_group_create(ctx, &gs, &g3), "third group");
    if (g_failure.empty()) {
      Nonblocking(g);
      Nonblocking(g2);
      std::vector<int32_t> a(5000, 1), b(5000, 2);
      netfold_request_t ra = nullptr, rb = nullptr;
      CheckRc(netfold_allreduce_nb(g2, NETFOLD_IN_PLACE, a.data(), a.size(), NETFOLD_DTYPE_INT32,
                                   NETFOLD_OP_SUM, &ra), "g2");
      CheckRc(netfold_allreduce_nb(g3, NETFOLD_IN_PLACE, b.data(), b.size(), NETFOLD_DTYPE_INT32,
                                   NETFOLD_OP_MAX, &rb), "g3");
      CheckRc(netfold_request_wait(rb), "wait g3");
      CheckRc(netfold_request_wait(ra), "wait g2");
      netfold_request_free(ra);
      netfold_request_free(rb);
      Check(a[4999] == g_size && b[0] == 2, "concurrent groups' results");
    }
    // What a rank keeps with a group goes with it (netfold_group_keep_data).
    if (g3) CheckRc(netfold_group_keep_data(g3, &g_releases[0], CountRelease), "keep data g3");
    if (g2) CheckRc(netfold_group_keep_data(g2, &g_releases[1], CountRelease), "keep data g2");
    if (g3) CheckRc(netfold_group_destroy(g3), "destroy g3");
    if (g2) CheckRc(netfold_group_destroy(g2), "destroy g2");
    // Both were kept (nothing pending): a fourth group over the same ranks
    // gets one back without the manager (docs/host.md, "Kept groups"): the
    // first kept, g3's, with its data. g2's stays kept until finalize.
    netfold_group_t g4 = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &g4), "fourth group");
    void* back = g4 != nullptr ? netfold_group_take_data(g4) : nullptr;
    if (g4 != nullptr) Check(netfold_group_take_data(g4) == nullptr, "data is taken back once");
    const uint64_t requested = Counter(ctx, "groups_requested");
    const uint64_t reused = Counter(ctx, "groups_reused");
    // Unless the fabric failed under some rank's groups (a switch starved
    // of the CPU past the manager's heartbeat timeout on a loaded machine
    // does it: every group goes to the hosts, and none is kept).
    netfold_stats_t st;
    netfold_get_stats(ctx, &st);
    std::vector<uint64_t> failovers(static_cast<size_t>(g_size), 0);
    Check((*oob)->Allgather(&st.failovers, failovers.data(), sizeof(uint64_t)).ok(),
          "the members' failover counts");
    g_kept_checked =
        std::all_of(failovers.begin(), failovers.end(), [](uint64_t f) { return f == 0; });
    g_taken = back;
    if (g_kept_checked) {
      Check(back == &g_releases[0], "the fourth group has g3's data");
      Check(requested == 3 && reused == 1,
            absl::StrFormat("groups made by the manager %d, kept ones given again %d; 3 and 1 "
                            "expected",
                            requested, reused));
    } else if (g_rank == 0) {
      std::printf("groups: the fabric failed under the groups; what was kept not checked\n");
    }
    if (g4 != nullptr) {
      Nonblocking(g4);
      CheckRc(netfold_group_destroy(g4), "destroy g4");
    }
  } else if (scenario == "many_groups") {
    int n = 0;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &n);
    std::vector<netfold_group_t> more(static_cast<size_t>(std::clamp(n, 0, 256)), nullptr);
    for (size_t i = 0; i < more.size() && g_failure.empty(); ++i) {
      CheckRc(netfold_group_create(ctx, &gs, &more[i]),
              absl::StrFormat("group %d of %d", i + 2, n + 1));
      if (more[i] == nullptr) break;
      std::vector<int32_t> v(3000, g_rank + 1);
      CheckRc(netfold_allreduce(more[i], NETFOLD_IN_PLACE, v.data(), v.size(), NETFOLD_DTYPE_INT32,
                                NETFOLD_OP_SUM),
              "allreduce");
      Check(v[2999] == g_size * (g_size + 1) / 2, absl::StrFormat("group %d's sum", i + 2));
    }
    for (netfold_group_t m : more) {
      if (m != nullptr) CheckRc(netfold_group_destroy(m), "destroy");
    }
  } else if (scenario == "large") {
    size_t bytes = 64u << 20;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &bytes);
    std::vector<float> v(bytes / 4);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i + g_rank) % 7);
    CheckRc(netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), v.size(), NETFOLD_DTYPE_FP32,
                              NETFOLD_OP_SUM),
            "large allreduce");
    for (size_t i = 0; i < v.size() && g_failure.empty(); i += 4099) {
      float want = 0;
      for (int r = 0; r < g_size; ++r) want += static_cast<float>((i + r) % 7);
      Check(v[i] == want, absl::StrFormat("large allreduce element %d", i));
    }
  } else if (scenario == "behind") {
    std::vector<int64_t> v(300), in(300);
    for (size_t i = 0; i < v.size(); ++i) v[i] = in[i] = static_cast<int64_t>(i) * (g_rank + 1);
    // "behind ADDR reduce": a reduce rooted at rank 0, which the others
    // complete once their input has left. "bcast": rooted at rank 1, the
    // only rank that keeps the end of its result; "bcast0": at rank 0,
    // which then gives its buffer (host/resync.h, BcastRootKeeps).
    const std::string op = argc > 3 ? argv[3] : "allreduce";
    const bool reduce = op == "reduce";
    const int bcast_root = op == "bcast" ? 1 : 0;
    if (op == "bcast" || op == "bcast0") {
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = g_rank == bcast_root ? static_cast<int64_t>(i) * 7 + 1 : -1;
      }
      CheckRc(netfold_bcast(g, v.data(), v.size(), NETFOLD_DTYPE_INT64, bcast_root),
              "the bcast rank 0 misses");
      for (size_t i = 0; i < v.size() && g_failure.empty(); ++i) {
        Check(v[i] == static_cast<int64_t>(i) * 7 + 1, absl::StrFormat("element %d", i));
      }
    } else {
      CheckRc(reduce ? netfold_reduce(g, in.data(), v.data(), v.size(), NETFOLD_DTYPE_INT64,
                                      NETFOLD_OP_SUM, 0)
                     : netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), v.size(),
                                         NETFOLD_DTYPE_INT64, NETFOLD_OP_SUM),
              "the operation rank 0 misses");
      const int64_t ranks = g_size * (g_size + 1) / 2;
      for (size_t i = 0; i < v.size() && g_failure.empty() && (!reduce || g_rank == 0); ++i) {
        Check(v[i] == static_cast<int64_t>(i) * ranks, absl::StrFormat("element %d", i));
      }
    }
  } else if (scenario == "stream") {
    int n = 200;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &n);
    int laggard = -1, lag_us = 0;
    if (argc > 4) {
      Check(absl::SimpleAtoi(argv[3], &laggard) && absl::SimpleAtoi(argv[4], &lag_us),
            "stream N [LAGGARD US]: LAGGARD and US must be integers");
    }
    StreamResult r = Stream(g, n, /*stop_at_error=*/false, g_rank == laggard ? lag_us : 0);
    std::printf("rank %d: stream ok=%d errors=%d wrong=%d%s%s\n", g_rank, r.ok, r.errors, r.wrong,
                r.first_error.empty() ? "" : " first error: ", r.first_error.c_str());
    Check(r.wrong == 0, "wrong results");
    Check(r.ok + r.errors == n, "operations unaccounted for");
  } else if (scenario == "inplace" || scenario == "bcasts") {
    // In-place allreduces (bcasts from rank k mod size) of COUNT int32,
    // each checked element by element: a failover must not reduce what the
    // fabric already wrote over the input again, and must give the members
    // behind in a bcast every chunk they lack.
    const bool bcast = scenario == "bcasts";
    int n = 50, count = 1 << 20, wrong = 0, errors = 0;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &n);
    if (argc > 3) (void)absl::SimpleAtoi(argv[3], &count);
    std::vector<int32_t> v(static_cast<size_t>(count));
    const int32_t ranks = g_size * (g_size + 1) / 2;
    for (int k = 0; k < n; ++k) {
      const int root = k % g_size;
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = bcast && g_rank != root ? -1
                                       : (g_rank + 1) * (k + 1) + static_cast<int32_t>(i % 991);
      }
      const int rc = bcast ? netfold_bcast(g, v.data(), v.size(), NETFOLD_DTYPE_INT32, root)
                           : netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), v.size(),
                                               NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM);
      if (rc != NETFOLD_SUCCESS) {
        ++errors;
        MaybeHold(k + 1);
        continue;
      }
      for (size_t i = 0; i < v.size(); ++i) {
        const int32_t expected = bcast ? (root + 1) * (k + 1) + static_cast<int32_t>(i % 991)
                                       : ranks * (k + 1) + g_size * static_cast<int32_t>(i % 991);
        if (v[i] != expected) {
          ++wrong;
          break;
        }
      }
      MaybeHold(k + 1);
    }
    std::printf("rank %d: %s ok=%d errors=%d wrong=%d\n", g_rank, scenario.c_str(),
                n - errors - wrong, errors, wrong);
    Check(wrong == 0 && errors == 0, "operations failed or wrong");
  } else if (scenario == "digest") {
    int n = 1000;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &n);
    int errors = 0;
    const std::string d = FloatDigest(g, n, &errors);
    std::printf("rank %d: digest=%s errors=%d\n", g_rank, d.c_str(), errors);
  } else if (scenario == "planes_until") {
    // Two groups over every rank (on two data planes when the fabric has
    // them: docs/host.md), used in turn until the test releases them;
    // every operation must succeed whatever happens to either plane.
    netfold_group_t g2 = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &g2), "second group");
    StreamUntilReleased(**oob, {g, g2});
    if (g2) CheckRc(netfold_group_destroy(g2), "destroy g2");
    // A group created after a plane was lost: where a rank can no longer
    // attach, the group goes on a plane every member has, on the fabric
    // (no operation on the hosts while it streams).
    netfold_group_t g3 = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &g3), "a group after the plane's loss");
    if (g3 != nullptr) {
      netfold_stats_t before, after;
      netfold_get_stats(ctx, &before);
      const StreamResult r = Stream(g3, 100, /*stop_at_error=*/false);
      netfold_get_stats(ctx, &after);
      std::printf("rank %d: new group ok=%d errors=%d wrong=%d on the hosts=%llu%s%s\n", g_rank,
                  r.ok, r.errors, r.wrong,
                  static_cast<unsigned long long>(after.host_ops - before.host_ops),
                  r.first_error.empty() ? "" : " first error: ", r.first_error.c_str());
      Check(r.ok == 100, "the group created after the plane's loss");
      CheckRc(netfold_group_destroy(g3), "destroy g3");
    }
  } else if (scenario == "squeezed") {
    // The first group (above) attached this rank in every data plane.
    netfold_group_t g2 = nullptr;
    {
      std::optional<FewDescriptors> few;
      int spare = 0;
      if (const char* left = std::getenv("NETFOLD_TEST_FDS_LEFT");
          left != nullptr && absl::SimpleAtoi(left, &spare)) {
        few.emplace(spare);
      }
      CheckRc(netfold_group_create(ctx, &gs, &g2), "a group with few descriptors to spare");
    }
    if (g2 != nullptr) {
      Sweep(**oob, g2);
      CheckRc(netfold_group_destroy(g2), "destroy g2");
    }
  } else if (scenario == "threads_until") {
    netfold_group_t g2 = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &g2), "second group");
    if (g2 != nullptr) {
      StreamResult results[2];
      std::thread second(StreamOnAThreadUntilReleased, 1, g2, &results[1]);
      StreamOnAThreadUntilReleased(0, g, &results[0]);
      second.join();
      for (int t = 0; t < 2; ++t) {
        std::printf("rank %d: thread %d: stream ok=%d errors=%d wrong=%d%s%s\n", g_rank, t,
                    results[t].ok, results[t].errors, results[t].wrong,
                    results[t].first_error.empty() ? "" : " first error: ",
                    results[t].first_error.c_str());
        Check(results[t].ok > 0 && results[t].errors == 0 && results[t].wrong == 0,
              "a thread's operations failed or were wrong");
      }
      CheckRc(netfold_group_destroy(g2), "destroy g2");
    }
  } else if (scenario == "until") {
    // The test decides how long the job runs (e.g. across a manager's
    // absence): every operation must succeed, whatever happens meanwhile.
    StreamUntilReleased(**oob, {g});
  } else if (scenario == "hold") {
    // Holds the group until the test creates $NETFOLD_TEST_RELEASE.
    std::printf("rank %d: holding\n", g_rank);
    std::fflush(stdout);
    const char* flag = std::getenv("NETFOLD_TEST_RELEASE");
    for (int i = 0; flag != nullptr && i < 1200 && access(flag, F_OK) != 0; ++i) usleep(50000);
    StreamResult r = Stream(g, 10, false);
    std::printf("rank %d: stream ok=%d errors=%d wrong=%d\n", g_rank, r.ok, r.errors, r.wrong);
    Check(r.ok == 10, "operations failed while holding");
  } else if (scenario == "outage") {
    int n = 100;
    if (argc > 2) (void)absl::SimpleAtoi(argv[2], &n);
    // A group kept from before the outage (docs/host.md, "Kept groups"):
    // its fabric fails with the switch, so it is dropped, not given again.
    netfold_group_t spare = nullptr;
    CheckRc(netfold_group_create(ctx, &gs, &spare), "a spare group");
    if (spare != nullptr) CheckRc(netfold_group_destroy(spare), "keeping the spare group");
    Check(Counter(ctx, "groups_kept") == 1, "the spare group was not kept");
    StreamResult r1 = Stream(g, 100000, /*stop_at_error=*/true);
    std::printf("rank %d: phase1 ok=%d errors=%d wrong=%d first error: %s\n", g_rank, r1.ok,
                r1.errors, r1.wrong, r1.first_error.c_str());
    std::fflush(stdout);
    Check(r1.wrong == 0, "wrong results before the outage");
    Check(r1.errors == 1, "the outage was never reported");
    // Once the test restarted the switch: a new group in the same context
    // (its ranks attach again; the switch may still be registering, so a
    // few tries), then a new context as well.
    const char* flag = std::getenv("NETFOLD_TEST_PHASE2");
    for (int i = 0; flag != nullptr && i < 1200 && access(flag, F_OK) != 0; ++i) usleep(50000);
    (void)(*oob)->Barrier();
    netfold_group_destroy(g);  // may report an error: the group is gone
    g = nullptr;
    int tries = 0;
    for (rc = NETFOLD_ERR_UNAVAILABLE; rc != NETFOLD_SUCCESS && tries < 120; ++tries) {
      if (tries > 0) usleep(500000);
      rc = netfold_group_create(ctx, &gs, &g);
    }
    CheckRc(rc, "a group of the same context after the outage");
    const uint64_t kept = Counter(ctx, "groups_kept"), reused = Counter(ctx, "groups_reused");
    Check(kept == 0 && reused == 0,
          absl::StrFormat("after the outage, kept groups given again %d, kept now %d; none "
                          "expected",
                          reused, kept));
    for (int phase = 2; phase <= 3 && rc == NETFOLD_SUCCESS; ++phase) {
      StreamResult r2 = Stream(g, n, /*stop_at_error=*/false);
      std::printf("rank %d: phase%d ok=%d errors=%d wrong=%d%s %s\n", g_rank, phase, r2.ok,
                  r2.errors, r2.wrong,
                  phase == 2 ? absl::StrFormat(" (group created at try %d)", tries).c_str() : "",
                  r2.first_error.c_str());
      Check(r2.ok == n, "operations failed after the fabric came back");
      if (phase == 3) break;
      netfold_group_destroy(g);
      netfold_finalize(ctx);
      ctx = nullptr;
      g = nullptr;
      rc = netfold_init(&spec, &ctx);
      if (rc == NETFOLD_SUCCESS) rc = netfold_group_create(ctx, &gs, &g);
      CheckRc(rc, "joining again after the outage");
    }
    if (g == nullptr || ctx == nullptr) {
      std::printf("rank %d: FAIL %s\n", g_rank, g_failure.c_str());
      return 1;
    }
  } else if (scenario == "fork") {
    int32_t x = g_rank + 1, y = 0;
    CheckRc(netfold_allreduce(g, &x, &y, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM), "before fork");
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      const int on_group = netfold_allreduce(g, &x, &y, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM);
      const bool says_why = std::strstr(netfold_last_error(), "fork()") != nullptr;
      const int on_context = netfold_finalize(ctx);
      _exit(on_group == NETFOLD_ERR_UNAVAILABLE && says_why &&
                    on_context == NETFOLD_ERR_UNAVAILABLE
                ? 0
                : 1);
    }
    int status = 0;
    Check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          absl::StrFormat("the forked child's calls (status %d)", status));
    StreamResult r = Stream(g, 50, /*stop_at_error=*/false);
    Check(r.ok == 50 && r.wrong == 0, "the parent after the fork");
  } else if (scenario == "victim") {
    // Everyone streams allreduces; the test kills rank 1 after the first one.
    std::vector<float> v(1 << 20, 1.0f);
    rc = netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), 16, NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM);
    CheckRc(rc, "first allreduce");
    std::printf("rank %d: started\n", g_rank);
    std::fflush(stdout);
    const absl::Time start = absl::Now();
    int failures = 0;
    for (int k = 0; k < 200 && failures == 0; ++k) {
      rc = netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), v.size(), NETFOLD_DTYPE_FP32,
                             NETFOLD_OP_SUM);
      if (rc != NETFOLD_SUCCESS) ++failures;
    }
    const absl::Duration took = absl::Now() - start;
    Check(failures == 1, "the survivors were never told that a rank died");
    Check(took < absl::Seconds(30), absl::StrFormat("the failure took %s to surface",
                                                    absl::FormatDuration(took)));
    std::printf("rank %d: failed cleanly after %s: %s (%s)\n", g_rank, absl::FormatDuration(took).c_str(),
                netfold_strerror(rc), netfold_last_error());
    // The group is gone: destroying it must still return (not hang).
    netfold_group_destroy(g);
    g = nullptr;
    // No world barrier: a rank is dead. Leave without finalize's barrier.
    std::printf("rank %d: %s\n", g_rank, g_failure.empty() ? "ok" : ("FAIL " + g_failure).c_str());
    std::fflush(stdout);
    _exit(g_failure.empty() ? 0 : 1);
  } else {
    g_failure = "unknown scenario " + scenario;
  }
  CheckRc(netfold_group_destroy(g), "group destroy");
  netfold_caps_t caps;
  CheckRc(netfold_query_caps(ctx, &caps), "caps");
  netfold_stats_t stats;
  netfold_get_stats(ctx, &stats);
  uint64_t placed = 0, missed = 0;
  CheckRc(netfold_get_counter(ctx, "results_placed", &placed), "results_placed");
  CheckRc(netfold_get_counter(ctx, "results_place_missed", &missed), "results_place_missed");
  if (g_kept_checked) Check(g_releases[1] == 0, "g2's data released before finalize");
  CheckRc(netfold_finalize(ctx), "finalize");
  if (scenario == "groups") {
    // Each once, at its destroy or at finalize, but the one taken back.
    for (int i = 0; i < 2; ++i) {
      const int expected = g_taken == &g_releases[i] ? 0 : 1;
      Check(g_releases[i] == expected,
            absl::StrFormat("the data of %s released %d times, %d expected", i == 0 ? "g3" : "g2",
                            g_releases[i], expected));
    }
  }
  std::printf("rank %d: %s (ops %llu, repairs %llu, retransmissions %llu, host_ops=%llu, "
              "failovers=%llu, dropped=%llu, placed=%llu, missed=%llu, foreign=%llu, "
              "window=%u, max_groups=%u)\n",
              g_rank, g_failure.empty() ? "ok" : ("FAIL " + g_failure).c_str(),
              static_cast<unsigned long long>(stats.ops_completed),
              static_cast<unsigned long long>(stats.repairs_sent),
              static_cast<unsigned long long>(stats.retransmissions),
              static_cast<unsigned long long>(stats.host_ops),
              static_cast<unsigned long long>(stats.failovers),
              static_cast<unsigned long long>(stats.packets_dropped),
              static_cast<unsigned long long>(placed), static_cast<unsigned long long>(missed),
              static_cast<unsigned long long>(stats.foreign_packets_dropped), caps.num_slots,
              caps.max_groups);
  return g_failure.empty() ? 0 : 1;
}
