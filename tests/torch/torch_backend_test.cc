// The torch.distributed backend "netfold" (host/torch/, docs/pytorch.md) end
// to end: jobs of Debian's /usr/bin/python3 under torchrun (c10d TCPStore
// rendezvous) and under mpirun (env:// rendezvous) against a local fabric
// of real daemons, which the suite starts and always stops (LocalFabric).
//
// - torch_collectives.py on 2 and 4 ranks (torchrun) and 8 (mpirun): every
//   collective x every type and op, in place, subgroups, asynchronous
//   Works, errors; exact against expected values, and against gloo.
// - examples/ddp_train.py, DistributedDataParallel on synthetic data: the
//   loss of every step on netfold and on gloo. Bitwise on 2 ranks (a sum
//   of two is the same in either order); on 4 ranks within 1e-5 relative
//   (gloo's ring and the fabric's tree add four gradients in different
//   orders, docs/pytorch.md).
//
// Skips with the reason when netfold_torch was not built (meson passes
// NETFOLD_TORCH_MISSING) or when mpirun is missing (the mpirun tests).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tools/local_fabric.h"
#include "tools/run_command.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;

std::string EnvOr(const char* name, const std::string& otherwise = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : otherwise;
}

// Why these tests cannot run here ("" if they can).
std::string WhyNot() {
  if (const std::string why = EnvOr("NETFOLD_TORCH_MISSING"); !why.empty()) {
    return "netfold_torch was not built: " + why;
  }
  if (EnvOr("NETFOLD_TORCH_MODULE_DIR").empty()) {
    return "NETFOLD_TORCH_MODULE_DIR is not set (run the test through meson)";
  }
  return "";
}

// A TCP port nobody listens on now, for env:// rendezvous under mpirun.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return 29500;
  }
  close(fd);
  return ntohs(a.sin_port);
}

int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

struct Job {
  tools::CommandResult result;
  std::string stderr_text;
  std::string output() const { return result.output + "\n--- stderr ---\n" + stderr_text; }
};

class TorchBackend : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!WhyNot().empty()) return;
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
    delete fabric_;  // stops the daemons
    fabric_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = WhyNot(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_NE(fabric_, nullptr) << "could not start the fabric: " << start_error_;
    work_dir_ = fs::temp_directory_path() / absl::StrFormat("netfold-torch-test-%d", getpid());
    fs::create_directories(work_dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!work_dir_.empty()) fs::remove_all(work_dir_, ignored);
  }

  // What every rank needs in its environment.
  std::vector<std::string> RankEnvironment() const {
    return {"NETFOLD_MANAGER=" + fabric_->manager_address(),
            "NETFOLD_CREDENTIAL_FILE=" + fabric_->credential_file(),
            "NETFOLD_TLS_CA=" + fabric_->tls_ca_file(),
            "PYTHONPATH=" + EnvOr("NETFOLD_TORCH_MODULE_DIR"), "OMP_NUM_THREADS=1",
            "PYTHONFAULTHANDLER=1"};
  }

  Job Run(const std::vector<std::string>& argv, absl::Duration timeout) {
    const std::string err = (work_dir_ / absl::StrFormat("stderr-%d", runs_++)).string();
    tools::CommandOptions o;
    o.timeout = timeout;
    o.stderr_path = err;
    Job job;
    absl::StatusOr<tools::CommandResult> r = tools::RunCommand(argv, o);
    if (!r.ok()) {
      job.stderr_text = std::string(r.status().message());
      return job;
    }
    job.result = *r;
    std::ifstream in(err);
    std::stringstream text;
    text << in.rdbuf();
    job.stderr_text = text.str();
    return job;
  }

  // `/usr/bin/python3 -m torch.distributed.run` (torchrun) with `ranks`
  // processes on this machine. (--redirects 1 --tee 1: torch 1.13's
  // torchrun cannot parse its default "0" under Python 3.11.)
  Job Torchrun(int ranks, const std::string& script, const std::vector<std::string>& args,
               absl::Duration timeout = absl::Minutes(5)) {
    std::vector<std::string> argv = {"env"};
    for (const std::string& e : RankEnvironment()) argv.push_back(e);
    const fs::path logs = work_dir_ / absl::StrFormat("torchrun-%d", runs_);
    for (const std::string& a :
         {std::string("/usr/bin/python3"), std::string("-m"), std::string("torch.distributed.run"),
          std::string("--standalone"), std::string("--nproc_per_node"), std::to_string(ranks),
          std::string("--redirects"), std::string("1"), std::string("--tee"), std::string("1"),
          std::string("--log_dir"), logs.string(), script}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, timeout);
  }

  // `mpirun -np ranks /usr/bin/python3 script`, torch's env:// rendezvous
  // on a free port of this machine.
  Job Mpirun(int ranks, const std::string& script, const std::vector<std::string>& args,
             absl::Duration timeout = absl::Minutes(8)) {
    std::vector<std::string> argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                                     std::to_string(ranks)};
    std::vector<std::string> env = RankEnvironment();
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(FreePort()));
    for (const std::string& e : env) {
      argv.push_back("-x");
      argv.push_back(e);
    }
    argv.push_back("/usr/bin/python3");
    argv.push_back(script);
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, timeout);
  }

  static tools::LocalFabric* fabric_;
  static std::string start_error_;
  fs::path work_dir_;
  int runs_ = 0;
};
tools::LocalFabric* TorchBackend::fabric_ = nullptr;
std::string TorchBackend::start_error_;

std::string Collectives() { return EnvOr("NETFOLD_TORCH_COLLECTIVES"); }
std::string DdpExample() { return EnvOr("NETFOLD_TORCH_DDP_EXAMPLE"); }

void ExpectCollectivesPassed(const Job& job, int ranks) {
  EXPECT_TRUE(job.result.Succeeded()) << job.output();
  EXPECT_EQ(Occurrences(job.result.output, "torch_collectives ok,"), ranks) << job.output();
  EXPECT_EQ(job.result.output.find("FAIL"), std::string::npos) << job.output();
}

TEST_F(TorchBackend, EveryCollectiveTypeAndOpOnTwoRanksUnderTorchrun) {
  ExpectCollectivesPassed(Torchrun(2, Collectives(), {}), 2);
}

TEST_F(TorchBackend, EveryCollectiveTypeAndOpOnFourRanksUnderTorchrun) {
  ExpectCollectivesPassed(Torchrun(4, Collectives(), {}), 4);
}

TEST_F(TorchBackend, EveryCollectiveOnEightRanksUnderMpirunWithEnvRendezvous) {
  if (tools::FindOnPath("mpirun").empty()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  ExpectCollectivesPassed(Mpirun(8, Collectives(), {}), 8);
}

// What ddp_train.py printed: rank 0's loss of each step (the float's bits,
// float.hex()), and each rank's parameter digest.
struct Training {
  std::vector<std::string> loss_hex;
  std::vector<double> loss;
  std::map<int, std::string> params;  // rank -> digest
  int host_ops = 0;
};

Training Parse(const std::string& output) {
  Training t;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    // torchrun prefixes "[default0]:".
    if (const size_t colon = line.find("]:"); line.substr(0, 1) == "[" && colon != line.npos) {
      line.remove_prefix(colon + 2);
    }
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (w.size() == 5 && w[0] == "step" && w[2] == "loss") {
      EXPECT_EQ(std::stoul(w[1]), t.loss.size()) << output;
      t.loss.push_back(std::stod(w[3]));
      t.loss_hex.push_back(w[4]);
    } else if (w.size() == 4 && w[0] == "rank" && w[2] == "params") {
      t.params[std::stoi(w[1])] = w[3];
    } else if (w.size() == 7 && w[0] == "rank" && w[2] == "netfold") {
      t.host_ops += std::stoi(w[6]);
    }
  }
  return t;
}

constexpr int kSteps = 30;

// The same parameters on every rank (DDP's promise), and the number of
// steps asked for.
void ExpectTrained(const Job& job, const Training& t, int ranks) {
  EXPECT_TRUE(job.result.Succeeded()) << job.output();
  EXPECT_EQ(t.loss.size(), static_cast<size_t>(kSteps)) << job.output();
  ASSERT_EQ(t.params.size(), static_cast<size_t>(ranks)) << job.output();
  for (const auto& [rank, digest] : t.params) {
    EXPECT_EQ(digest, t.params.begin()->second) << "rank " << rank << "\n" << job.output();
  }
}

TEST_F(TorchBackend, DdpLossOfEveryStepIsGloosBitwiseOnTwoRanks) {
  const std::vector<std::string> args = {"--steps", std::to_string(kSteps)};
  std::vector<std::string> netfold_args = args, gloo_args = args;
  gloo_args.insert(gloo_args.end(), {"--backend", "gloo"});
  const Job netfold = Torchrun(2, DdpExample(), netfold_args);
  const Job gloo = Torchrun(2, DdpExample(), gloo_args);
  const Training on_netfold = Parse(netfold.result.output);
  const Training on_gloo = Parse(gloo.result.output);
  ExpectTrained(netfold, on_netfold, 2);
  ExpectTrained(gloo, on_gloo, 2);
  EXPECT_EQ(on_netfold.loss_hex, on_gloo.loss_hex) << netfold.output() << gloo.output();
  EXPECT_EQ(on_netfold.params, on_gloo.params);
  EXPECT_EQ(on_netfold.host_ops, 0) << "every collective ran on the fabric\n" << netfold.output();
}

TEST_F(TorchBackend, DdpLossOfEveryStepIsGloosWithinRoundingOnFourRanksUnderMpirun) {
  if (tools::FindOnPath("mpirun").empty()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  const std::vector<std::string> args = {"--steps", std::to_string(kSteps)};
  std::vector<std::string> gloo_args = args;
  gloo_args.insert(gloo_args.end(), {"--backend", "gloo"});
  const Job netfold = Mpirun(4, DdpExample(), args);
  const Job gloo = Mpirun(4, DdpExample(), gloo_args);
  const Training on_netfold = Parse(netfold.result.output);
  const Training on_gloo = Parse(gloo.result.output);
  ExpectTrained(netfold, on_netfold, 4);
  ExpectTrained(gloo, on_gloo, 4);
  ASSERT_EQ(on_netfold.loss.size(), on_gloo.loss.size());
  // The first step's loss comes before any gradient was reduced.
  EXPECT_EQ(on_netfold.loss_hex.at(0), on_gloo.loss_hex.at(0));
  for (size_t i = 0; i < on_netfold.loss.size(); ++i) {
    EXPECT_NEAR(on_netfold.loss[i], on_gloo.loss[i], 1e-5 * std::fabs(on_gloo.loss[i]))
        << "step " << i;
  }
  EXPECT_EQ(on_netfold.host_ops, 0) << netfold.output();
}

}  // namespace
}  // namespace netfold
