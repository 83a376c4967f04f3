// The MPI tests' driver (mpi_interposer_test.cc, mpi_outage_test.cc): runs
// tests/mpi/mpi_collectives under mpirun with libnetfold_mpi.so preloaded,
// against a local fabric of real daemons, and reads what it printed.
//
//   auto fabric = FourHostFabric();
//   MpiResult r = MpiRun(4, {"sweep"}, **fabric, {{"NETFOLD_MPI_STATS", "1"}});
//   ExpectPassed(r, "sweep");
#ifndef NETFOLD_TESTS_MPI_MPI_TEST_DRIVER_H_
#define NETFOLD_TESTS_MPI_MPI_TEST_DRIVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/local_fabric.h"

namespace netfold {

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
// `action`, if given, runs once `when_printed` appears in the output.
MpiResult MpiRun(int np, const std::vector<std::string>& args, const Target& target,
                 std::map<std::string, std::string> env = {},
                 absl::Duration timeout = absl::Minutes(5), const std::string& when_printed = "",
                 std::function<void()> action = nullptr);

// Why an MPI test cannot run here, or "" if it can: every test skips with it.
std::string MissingForMpi();

// A fabric of its own (4 hosts) for a test that stops or kills it.
// `planes`: data planes (docs/host.md); 0 for the default, one.
absl::StatusOr<std::unique_ptr<tools::LocalFabric>> FourHostFabric(int planes = 0);

// mpi_collectives `scenario` ended, every check passed.
void ExpectPassed(const MpiResult& r, const std::string& scenario);

// How many times `needle` occurs in `text`.
int Occurrences(const std::string& text, const std::string& needle);

// The number after `key` in `output` (seconds), or -1 if `key` is not there.
double SecondsAfter(const std::string& output, const std::string& key);

// "offloaded KIND  N" as printed by NETFOLD_MPI_STATS=1 at MPI_Finalize: N,
// or -1.
int64_t Offloaded(const std::string& output, const std::string& kind);

// mpi_collectives `args` on `np` ranks of `fabric`, which `fault` breaks
// once "phase 1 done" is printed; then NETFOLD_TEST_OUTAGE_FILE exists, for
// ranks that wait until the fabric is broken.
MpiResult RunWithAFaultAtPhaseOne(tools::LocalFabric& fabric, int np,
                                  const std::vector<std::string>& args,
                                  std::map<std::string, std::string> env, absl::Duration timeout,
                                  const std::function<absl::Status()>& fault);

// The same, the fault killing every switch.
MpiResult RunKillingTheSwitchesAtPhaseOne(tools::LocalFabric& fabric, int np,
                                          const std::vector<std::string>& args,
                                          std::map<std::string, std::string> env,
                                          absl::Duration timeout);

}  // namespace netfold

#endif  // NETFOLD_TESTS_MPI_MPI_TEST_DRIVER_H_
