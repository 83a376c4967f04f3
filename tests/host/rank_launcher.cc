#include "tests/host/rank_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace netfold::testing {

std::string TestBinaryDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

Launch::Launch(const std::string& manager, int n, int first_host, std::vector<std::string> args,
               std::map<std::string, std::string> env) {
  auto server = host::TcpOobServer::Start(n, "127.0.0.1:0", absl::Seconds(180));
  EXPECT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  // fabric_rank is built into tests/host/; tests elsewhere find it there.
  std::string exe = TestBinaryDir() + "/fabric_rank";
  if (access(exe.c_str(), X_OK) != 0) exe = TestBinaryDir() + "/../host/fabric_rank";
  for (int r = 0; r < n; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);  // the library's log lines too
      close(fds[0]);
      setenv("NETFOLD_MANAGER", manager.c_str(), 1);
      setenv("NETFOLD_OOB_ADDRESS", server_->address().c_str(), 1);
      setenv("NETFOLD_OOB_RANK", std::to_string(r).c_str(), 1);
      setenv("NETFOLD_OOB_SIZE", std::to_string(n).c_str(), 1);
      setenv("NETFOLD_HOST", absl::StrFormat("h%d", first_host + r).c_str(), 1);
      setenv("NETFOLD_TIMEOUT_MS", "20000", 0);
      // Ranks of a test always have a manager: 10 s to reach it (the 1 s
      // default is for jobs that fall back without one), as many ranks
      // start at once on a machine that other tests load.
      setenv("NETFOLD_CONNECT_TIMEOUT_MS", "10000", 0);
      const std::string own = "@" + std::to_string(r);
      for (const auto& [k, v] : env) {
        const size_t at = k.find('@');
        if (at == std::string::npos) {
          setenv(k.c_str(), v.c_str(), 1);
        } else if (k.substr(at) == own) {
          setenv(k.substr(0, at).c_str(), v.c_str(), 1);
        }
      }
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
  results_.resize(static_cast<size_t>(n));
}

Launch::~Launch() {
  for (pid_t p : pids_) {
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  for (int fd : out_fds_) close(fd);
}

void Launch::Drain() {
  char buf[4096];
  for (size_t r = 0; r < out_fds_.size(); ++r) {
    ssize_t n;
    while ((n = read(out_fds_[r], buf, sizeof(buf))) > 0) results_[r].output.append(buf, n);
  }
}

bool Launch::WaitForOutput(int r, const std::string& text, absl::Duration timeout) {
  return WaitForOneOf(r, {text}, timeout);
}

bool Launch::WaitForOneOf(int r, const std::vector<std::string>& texts,
                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    Drain();
    for (const std::string& text : texts) {
      if (results_[r].output.find(text) != std::string::npos) return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

int Launch::WaitForEveryOutput(const std::string& text, absl::Duration timeout,
                               const std::vector<int>& ranks) {
  std::vector<int> which = ranks;
  if (which.empty()) {
    for (int r = 0; r < static_cast<int>(results_.size()); ++r) which.push_back(r);
  }
  for (int r : which) {
    if (!WaitForOutput(r, text, timeout)) return r;
  }
  return -1;
}

void Launch::Signal(int r, int signal) {
  if (pids_[r] <= 0) return;
  kill(pids_[r], signal);
  if (signal == SIGKILL) {
    waitpid(pids_[r], nullptr, 0);
    pids_[r] = -1;
    results_[r].exit_code = -9;
  }
}

std::vector<RankResult> Launch::Wait(absl::Duration timeout) {
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

void ExpectStreamExact(const std::vector<RankResult>& results, bool no_failover) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    EXPECT_NE(results[r].output.find("errors=0 wrong=0"), std::string::npos)
        << "rank " << r << ":\n" << results[r].output;
    if (no_failover) {
      EXPECT_NE(results[r].output.find("failovers=0"), std::string::npos)
          << "rank " << r << " handed the job to the hosts:\n" << results[r].output;
    }
  }
}

std::string AgreedDigest(const std::vector<RankResult>& results) {
  std::string digest;
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].output;
    const size_t at = results[r].output.find("digest=");
    if (at == std::string::npos || results[r].output.size() < at + 7 + 16) {
      ADD_FAILURE() << "rank " << r << " printed no digest:\n" << results[r].output;
      return "";
    }
    const std::string d = results[r].output.substr(at + 7, 16);
    if (digest.empty()) digest = d;
    EXPECT_EQ(d, digest) << "ranks disagree on the bits";
  }
  return digest;
}

std::vector<transport::Ipv4Endpoint> FirstMulticastGroups(const tools::LocalFabric& fabric,
                                                          uint32_t n) {
  const uint32_t prefix = 0xef000000u | (static_cast<uint32_t>(fabric.multicast_octet()) << 16);
  std::vector<transport::Ipv4Endpoint> groups;
  for (uint32_t i = 1; i <= n; ++i) groups.push_back({prefix | i, 4791});
  return groups;
}

}  // namespace netfold::testing
