// `netfold demo`: a local fabric on loopback (a manager, a two-level tree of
// three switches) and N host processes that run allreduce for every data
// type and op, a sweep of sizes from 4 B to 16 MiB, reduce, bcast and
// barrier through it, checking every result bitwise against a reference
// computed independently in each process, then stopping everything.
#ifndef NETFOLD_TOOLS_DEMO_H_
#define NETFOLD_TOOLS_DEMO_H_

#include <string>

namespace netfold::tools {

struct DemoOptions {
  int hosts = 8;
  bool faults = false;       // seeded faults on every link (hosts and switches)
  uint64_t seed = 1;         // fault and data seed
  bool quick = false;        // fewer sizes and iterations (tests, CI)
  std::string log_level = "warning";
  std::string self;          // this program, re-run as the host processes
};

// The launcher: returns the process exit code (0: every check passed).
int RunDemo(const DemoOptions& options);

// One host process of the demo (the hidden `netfold __demo-rank`); reads
// its rank and the rendezvous from the environment (NETFOLD_OOB_*).
int RunDemoRank();

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_DEMO_H_
