// `netfold bench`: the fabric against Open MPI in the same invocation, on the
// same machine: a local fabric of real daemons, then for each rank count the
// same MPI program (bench/mpi/collective_bench) three times — with
// libnetfold_mpi.so preloaded, and on Open MPI alone over shared memory and
// over TCP on loopback — and a table with the ratios, a CSV and PNG plots.
#ifndef NETFOLD_TOOLS_BENCH_H_
#define NETFOLD_TOOLS_BENCH_H_

#include <string>
#include <vector>

namespace netfold::tools {

struct BenchOptions {
  std::string op = "allreduce";          // allreduce | reduce | bcast | barrier
  std::vector<int> ranks = {2, 4, 8, 16};
  std::vector<long> sizes;               // bytes; empty: 4 B .. 64 MiB
  double seconds_per_size = 0.5;         // measurement budget per point
  std::string out_dir;                   // CSV and plots; empty: ./netfold-bench-<op>
  bool quick = false;
  // Opt-in polling for netfold's runs: the switches' --poll_us and the
  // ranks' NETFOLD_POLL_US; 0: both sleep in epoll (the defaults).
  int poll_us = 0;
  std::string self;                      // this program (to find siblings)
};

int RunBench(const BenchOptions& options);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_BENCH_H_
