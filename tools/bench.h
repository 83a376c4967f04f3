// `netfold bench`: the fabric against Open MPI in the same invocation, on the
// same machine: a local fabric of real daemons, then for each rank count the
// same MPI program (bench/mpi/collective_bench) three times — with
// libnetfold_mpi.so preloaded, and on Open MPI alone over shared memory and
// over TCP on loopback — and a table with the ratios, a CSV and PNG plots.
#ifndef NETFOLD_TOOLS_BENCH_H_
#define NETFOLD_TOOLS_BENCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netfold::tools {

struct BenchOptions {
  std::string op = "allreduce";          // CheckBenchOp
  std::vector<int> ranks = {2, 4, 8, 16};
  std::vector<long> sizes;               // bytes; empty: 4 B .. 64 MiB
  double seconds_per_size = 0.5;         // measurement budget per point
  // Every variant measured this many times, in alternating order (the
  // first variant first, then last, ...); the table gives medians and the
  // ratios' range over rounds. Loopback runs only.
  int rounds = 1;
  std::string out_dir;                   // CSV and plots; empty: ./netfold-bench-<op>
  bool quick = false;
  // Opt-in polling for netfold's runs: the switches' --poll_us and the
  // ranks' NETFOLD_POLL_US; 0: both sleep in epoll (the defaults).
  int poll_us = 0;
  // Windows to measure netfold with as well, next to the default in the
  // same run (NETFOLD_SLOTS=K for the ranks; variant "netfold K=<K>").
  std::vector<int> compare_slots;
  // Shaped links on the namespace testbed instead of loopback: one run per
  // rate ("250mbit", "1gbit"; tc's spelling), on `topology` (default
  // deploy/topologies/testbed_two_level.yaml), ranks: the first of `ranks`.
  std::vector<std::string> testbed_rates;
  std::string topology;
  std::string self;                      // this program (to find siblings)
};

// OK if `op` is a collective bench measures (allreduce, ..., iallreduce, ...).
absl::Status CheckBenchOp(const std::string& op);
// Every form CheckBenchOp accepts (for the shell's completion): the
// collectives, then their _in_place forms, then the same with an i in front.
std::vector<std::string> BenchOps();
int RunBench(const BenchOptions& options);
// `--testbed` (tools/bench_testbed.cc): needs root, mpirun and the checkout's
// deploy/testbed; a CSV with the link rate per row, a table and plots.
int RunTestbedBench(const BenchOptions& options);
// A link rate as tc spells it ("250mbit", "2.5gbit", "500kbit") in bit/s.
absl::StatusOr<double> ParseLinkRate(const std::string& rate);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_BENCH_H_
