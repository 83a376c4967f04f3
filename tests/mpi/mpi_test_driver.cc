// The MPI tests' driver (mpi_test_driver.h).
#include "tests/mpi/mpi_test_driver.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;

std::string Here() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  return fs::path(buf).parent_path().string();
}

std::string Interposer() {
  return fs::weakly_canonical(fs::path(Here()) / ".." / ".." / "host" / "mpi" / "libnetfold_mpi.so")
      .string();
}

bool HaveMpirun() { return system("command -v mpirun >/dev/null 2>&1") == 0; }

}  // namespace

MpiResult MpiRun(int np, const std::vector<std::string>& args, const Target& target,
                 std::map<std::string, std::string> env, absl::Duration timeout,
                 const std::string& when_printed, std::function<void()> action) {
  const std::string& manager = target.manager;
  env.emplace("NETFOLD_MANAGER", manager);
  if (!target.credential_file.empty()) {
    env.emplace("NETFOLD_CREDENTIAL_FILE", target.credential_file);
    env.emplace("NETFOLD_TLS_CA", target.tls_ca_file);
  }
  env.emplace("LD_PRELOAD", Interposer());
  std::string cmd = absl::StrFormat("mpirun --allow-run-as-root --oversubscribe -np %d", np);
  for (const auto& [k, v] : env) cmd += absl::StrFormat(" -x %s=%s", k, v);
  if (args.empty() || args[0].empty() || args[0][0] != '/') cmd += " " + Here() + "/mpi_collectives";
  for (const auto& a : args) cmd += " " + a;
  cmd += " 2>&1";
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  MpiResult run;
  const absl::Time deadline = absl::Now() + timeout;
  bool acted = false;
  int status = 0;
  while (true) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) run.output.append(buf, n);
    if (!acted && action && run.output.find(when_printed) != std::string::npos) {
      action();
      acted = true;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (absl::Now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      run.output += "\n[killed by the test: deadline]";
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) run.output.append(buf, n);
  close(fds[0]);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

std::string MissingForMpi() {
  if (!HaveMpirun()) return "mpirun is not installed (deploy/install-deps.sh installs Open MPI)";
  if (!fs::exists(Interposer())) return "libnetfold_mpi.so was not built (no MPI development files)";
  return "";
}

absl::StatusOr<std::unique_ptr<tools::LocalFabric>> FourHostFabric(int planes) {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.planes = planes;
  return tools::LocalFabric::Start(o);
}

void ExpectPassed(const MpiResult& r, const std::string& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mpi_collectives " + scenario + ":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << r.output;
}

int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

double SecondsAfter(const std::string& output, const std::string& key) {
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::strtod(output.c_str() + at + key.size(), nullptr);
}

int64_t Offloaded(const std::string& output, const std::string& kind) {
  const std::string key = "offloaded " + kind;
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(output.c_str() + at + key.size(), nullptr, 10);
}

MpiResult RunWithAFaultAtPhaseOne(tools::LocalFabric& fabric, int np,
                                  const std::vector<std::string>& args,
                                  std::map<std::string, std::string> env, absl::Duration timeout,
                                  const std::function<absl::Status()>& fault) {
  const std::string flag =
      (fs::temp_directory_path() / absl::StrFormat("netfold-outage-%d", getpid())).string();
  std::remove(flag.c_str());
  env["NETFOLD_TEST_OUTAGE_FILE"] = flag;
  MpiResult r = MpiRun(np, args, fabric, std::move(env), timeout, "phase 1 done", [&] {
    const absl::Status s = fault();
    EXPECT_TRUE(s.ok()) << s;
    std::FILE* f = std::fopen(flag.c_str(), "w");
    if (f) std::fclose(f);
  });
  std::remove(flag.c_str());
  return r;
}

MpiResult RunKillingTheSwitchesAtPhaseOne(tools::LocalFabric& fabric, int np,
                                          const std::vector<std::string>& args,
                                          std::map<std::string, std::string> env,
                                          absl::Duration timeout) {
  return RunWithAFaultAtPhaseOne(fabric, np, args, std::move(env), timeout,
                                 [&] { return fabric.KillSwitches(SIGKILL); });
}

}  // namespace netfold
