// Test helper: a child process that is always reaped. Its output goes to a
// log file; the destructor SIGKILLs it if it still runs, and the child gets
// SIGKILL if the test process dies first (PR_SET_PDEATHSIG), so a failing
// or crashing test never leaves daemons behind.
//
//   absl::StatusOr<std::unique_ptr<Subprocess>> p =
//       Subprocess::Start({"/path/netfold-managerd", "--topology", t}, dir + "/managerd.log");
//   (*p)->Signal(SIGTERM);
//   std::optional<int> status = (*p)->Wait(absl::Seconds(5));   // raw wait status
#ifndef NETFOLD_TESTS_MANAGER_SUBPROCESS_H_
#define NETFOLD_TESTS_MANAGER_SUBPROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace netfold::manager {

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& args,
                                                           const std::string& log_path) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrFormat("fork: errno %d", errno));
    if (pid == 0) {
      // Only async-signal-safe calls until exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    return std::unique_ptr<Subprocess>(new Subprocess(pid, log_path));
  }

  ~Subprocess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
    }
  }

  pid_t pid() const { return pid_; }
  bool running() { return !Wait(absl::ZeroDuration()).has_value(); }
  void Signal(int sig) {
    if (!exited_) kill(pid_, sig);
  }

  // The raw wait status once the child exited; nullopt if it is still
  // running after `timeout`.
  std::optional<int> Wait(absl::Duration timeout) {
    if (exited_) return status_;
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = status;
        return status_;
      }
      if (absl::Now() >= deadline) return std::nullopt;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  std::string Log() const {
    std::ifstream in(log_path_);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

 private:
  Subprocess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}

  const pid_t pid_;
  const std::string log_path_;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace netfold::manager

#endif  // NETFOLD_TESTS_MANAGER_SUBPROCESS_H_
