// libnetfold end to end: real netfold-managerd and netfold-switchd
// processes on loopback (tools/local_fabric.h) and rank processes
// (fabric_rank) using the public C API. Results are checked inside the
// ranks (bitwise against a reference, identical on every rank).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "host/tcp_oob.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

std::string Here() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

struct RankResult {
  int exit_code = -1;
  std::string output;
};

// A launch of `n` fabric_rank processes on hosts h<first>.. of the fabric.
class Launch {
 public:
  Launch(const std::string& manager, int n, int first_host, std::vector<std::string> args,
         std::map<std::string, std::string> env = {}) {
    auto server = host::TcpOobServer::Start(n, "127.0.0.1:0", absl::Seconds(120));
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    const std::string exe = Here() + "/fabric_rank";
    for (int r = 0; r < n; ++r) {
      int fds[2];
      EXPECT_EQ(pipe(fds), 0);
      pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        setenv("NETFOLD_MANAGER", manager.c_str(), 1);
        setenv("NETFOLD_OOB_ADDRESS", server_->address().c_str(), 1);
        setenv("NETFOLD_OOB_RANK", std::to_string(r).c_str(), 1);
        setenv("NETFOLD_OOB_SIZE", std::to_string(n).c_str(), 1);
        setenv("NETFOLD_HOST", absl::StrFormat("h%d", first_host + r).c_str(), 1);
        setenv("NETFOLD_TIMEOUT_MS", "20000", 0);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        std::vector<char*> argv = {const_cast<char*>(exe.c_str())};
        for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(exe.c_str(), argv.data());
        _exit(127);
      }
      close(fds[1]);
      fcntl(fds[0], F_SETFL, O_NONBLOCK);
      pids_.push_back(pid);
      out_fds_.push_back(fds[0]);
    }
    results_.resize(n);
  }

  ~Launch() {
    for (pid_t p : pids_) {
      if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
    }
    for (int fd : out_fds_) close(fd);
  }

  void Drain() {
    char buf[4096];
    for (size_t r = 0; r < out_fds_.size(); ++r) {
      ssize_t n;
      while ((n = read(out_fds_[r], buf, sizeof(buf))) > 0) results_[r].output.append(buf, n);
    }
  }

  // Waits until rank r printed `text`.
  bool WaitForOutput(int r, const std::string& text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      Drain();
      if (results_[r].output.find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  void Kill(int r) {
    kill(pids_[r], SIGKILL);
    waitpid(pids_[r], nullptr, 0);
    pids_[r] = -1;
    results_[r].exit_code = -9;
  }

  // Waits for every rank (deadline), returning their results.
  std::vector<RankResult> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] <= 0) continue;
      int status = 0;
      while (waitpid(pids_[r], &status, WNOHANG) == 0) {
        Drain();
        if (absl::Now() > deadline) {
          kill(pids_[r], SIGKILL);
          waitpid(pids_[r], &status, 0);
          results_[r].output += "\n[killed by the test: deadline]";
          break;
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
      pids_[r] = -1;
      results_[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    Drain();
    return results_;
  }

 private:
  std::unique_ptr<host::TcpOobServer> server_;
  std::vector<pid_t> pids_;
  std::vector<int> out_fds_;
  std::vector<RankResult> results_;
};

std::unique_ptr<tools::LocalFabric> StartFabric(int hosts, const std::string& faults = "") {
  tools::LocalFabricOptions o;
  o.hosts = hosts;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  if (!faults.empty()) o.link_faults = "default/both/" + faults;
  auto fabric = tools::LocalFabric::Start(o);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  return fabric.ok() ? std::move(*fabric) : nullptr;
}

void ExpectAllOk(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    EXPECT_NE(results[r].output.find(absl::StrFormat("rank %d: ok", r)), std::string::npos)
        << results[r].output;
  }
}

TEST(HostFabric, SweepOnTwoRanks) {
  auto fabric = StartFabric(2);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 2, 0, {"sweep"});
  ExpectAllOk(ranks.Wait(absl::Minutes(3)));
}

TEST(HostFabric, SweepOnFiveRanksAcrossTwoLeaves) {
  auto fabric = StartFabric(5);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 5, 0, {"sweep"});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

TEST(HostFabric, SixteenRanksWithConcurrentGroups) {
  auto fabric = StartFabric(16);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 16, 0, {"groups"});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

TEST(HostFabric, SweepUnderSeededFaultsOnEveryLink) {
  const std::string faults = "drop=0.02,dup=0.01,reorder=0.02:200us,corrupt=0.002,seed=5";
  auto fabric = StartFabric(4, faults);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 4, 0, {"sweep"}, {{"NETFOLD_FAULTS", faults}});
  ExpectAllOk(ranks.Wait(absl::Minutes(4)));
}

TEST(HostFabric, TwoJobsAtOnce) {
  auto fabric = StartFabric(8);
  ASSERT_NE(fabric, nullptr);
  Launch a(fabric->manager_address(), 4, 0, {"groups"});
  Launch b(fabric->manager_address(), 4, 4, {"sweep"});
  ExpectAllOk(a.Wait(absl::Minutes(4)));
  ExpectAllOk(b.Wait(absl::Minutes(4)));
}

TEST(HostFabric, SixtyFourMebibyteVector) {
  auto fabric = StartFabric(3);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 3, 0, {"large", std::to_string(64u << 20)});
  ExpectAllOk(ranks.Wait(absl::Minutes(5)));
}

TEST(HostFabric, AKilledRankMakesTheOthersFailCleanlyWithinTheDeadline) {
  auto fabric = StartFabric(4);
  ASSERT_NE(fabric, nullptr);
  Launch ranks(fabric->manager_address(), 4, 0, {"victim"}, {{"NETFOLD_TIMEOUT_MS", "4000"}});
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

}  // namespace
}  // namespace netfold
