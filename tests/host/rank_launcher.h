// Launches fabric_rank processes (tests/host/fabric_rank.cc) for end-to-end
// and fault tests: a TCP rendezvous, one process per rank with its host
// name and environment, output captured, every process killed at the end.
//
//   Launch ranks(*fabric, 4, /*first_host=*/0, {"stream", "100"});
//   auto results = ranks.Wait(absl::Minutes(2));
#ifndef NETFOLD_TESTS_HOST_RANK_LAUNCHER_H_
#define NETFOLD_TESTS_HOST_RANK_LAUNCHER_H_

#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "host/tcp_oob.h"
#include "tools/local_fabric.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::testing {

struct RankResult {
  int exit_code = -1;
  std::string output;
};

// The file whose existence ends an "until" job (fabric_rank's scenario,
// NETFOLD_TEST_RELEASE): absent at first, removed however the test ends.
struct ReleaseFlag {
  std::string path = (std::filesystem::temp_directory_path() /
                      absl::StrFormat("netfold-release-%d-%p", getpid(), this))
                         .string();
  ReleaseFlag() { std::remove(path.c_str()); }
  ~ReleaseFlag() { std::remove(path.c_str()); }
  ReleaseFlag(const ReleaseFlag&) = delete;
  ReleaseFlag& operator=(const ReleaseFlag&) = delete;
  void Raise() const { std::ofstream(path) << "stop\n"; }
};

// Every rank of a stream (fabric_rank's stream and until scenarios)
// exited 0 with every operation exact ("errors=0 wrong=0"); with
// `no_failover`, none handed to the hosts ("failovers=0"). gtest failures.
void ExpectStreamExact(const std::vector<RankResult>& results, bool no_failover);
// The digest every rank of fabric_rank's digest scenario printed ("rank R:
// digest=XXXX"); gtest failures if a rank failed, printed none or
// disagrees; "" then.
std::string AgreedDigest(const std::vector<RankResult>& results);

class Launch {
 public:
  // `env` is every rank's environment, but for names of the form "NAME@r":
  // NAME for rank r alone.
  Launch(const std::string& manager, int n, int first_host, std::vector<std::string> args,
         std::map<std::string, std::string> env = {});
  // Ranks of `fabric`: its manager, and its credential file in
  // NETFOLD_CREDENTIAL_FILE unless `env` names another.
  Launch(const tools::LocalFabric& fabric, int n, int first_host, std::vector<std::string> args,
         std::map<std::string, std::string> env = {})
      : Launch(fabric.manager_address(), n, first_host, std::move(args),
               WithCredential(fabric, std::move(env))) {}
  ~Launch();
  // Reads what the ranks printed so far.
  void Drain();
  // Waits until rank r printed `text`.
  bool WaitForOutput(int r, const std::string& text, absl::Duration timeout);
  // Waits until rank r printed one of `texts`.
  bool WaitForOneOf(int r, const std::vector<std::string>& texts, absl::Duration timeout);
  // Waits until each of `ranks` (all if empty) printed `text`, up to
  // `timeout` for each; the first that did not, or -1.
  int WaitForEveryOutput(const std::string& text, absl::Duration timeout,
                         const std::vector<int>& ranks = {});
  // Sends `signal` to rank r (SIGKILL also reaps it).
  void Signal(int r, int signal);
  void Kill(int r) { Signal(r, 9); }
  // Waits for every rank (deadline), returning their results.
  std::vector<RankResult> Wait(absl::Duration timeout);
  const std::string& output(int r) const { return results_[r].output; }

 private:
  static std::map<std::string, std::string> WithCredential(
      const tools::LocalFabric& fabric, std::map<std::string, std::string> env) {
    env.emplace("NETFOLD_CREDENTIAL_FILE", fabric.credential_file());
    // The fabric's CA, whatever the test's own environment says ("" with
    // plaintext: none).
    env.emplace("NETFOLD_TLS_CA", fabric.tls_ca_file());
    return env;
  }

  std::unique_ptr<host::TcpOobServer> server_;
  std::vector<pid_t> pids_;
  std::vector<int> out_fds_;
  std::vector<RankResult> results_;
};

// The directory of the running test binary (fabric_rank sits next to it).
std::string TestBinaryDir();

// The multicast addresses of the first `n` groups `fabric`'s manager hands
// out: indexes from 1 under the prefix 239.N the fabric claimed
// (239.N.0.1, 239.N.0.2, ...: manager/fabric_state.h), port 4791.
std::vector<transport::Ipv4Endpoint> FirstMulticastGroups(const tools::LocalFabric& fabric,
                                                          uint32_t n);

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_HOST_RANK_LAUNCHER_H_
