#include "tools/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/errno_status.h"

extern char** environ;

namespace netfold::tools {
namespace {

// A file descriptor closed with its owner.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// posix_spawn's attribute and file-action objects, destroyed with their owner.
struct SpawnSetup {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnSetup() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

// Milliseconds until `deadline` for poll(), at least 0, at most `cap_ms`.
int PollMs(absl::Time deadline, int cap_ms) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now()) + 1;
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, cap_ms)));
}

// True once `pid` has ended; the child stays a zombie (WNOWAIT), so its pid
// and process group id cannot be reused before it is reaped.
bool Ended(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;  // the current directory: never implicitly
    const std::string candidate = absl::StrFormat("%s/%s", dir, name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const CommandOptions& options) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("no program to run");
  const std::string program = FindOnPath(argv[0]);
  if (program.empty()) {
    return absl::NotFoundError(absl::StrFormat("cannot find the program '%s' (PATH)", argv[0]));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  Fd err(options.stderr_path.empty()
             ? open("/dev/null", O_WRONLY | O_CLOEXEC)
             : open(options.stderr_path.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (err.get() < 0) {
    return ErrnoToStatus(errno, absl::StrFormat(
                                    "open %s", options.stderr_path.empty() ? "/dev/null"
                                                                           : options.stderr_path));
  }

  SpawnSetup setup;
  // Its own process group, so that a timeout reaches what it started; the
  // signals the CLI may block or ignore are back to their defaults.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setflags(&setup.attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  posix_spawnattr_setsigmask(&setup.attr, &none);
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, err.get(), STDERR_FILENO);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, program.c_str(), &setup.actions, &setup.attr, args.data(),
                             environ);
  if (rc != 0) {
    absl::Status s = ErrnoToStatus(rc, absl::StrFormat("run %s", program));
    return absl::NotFoundError(s.message());
  }
  write_end.Reset();
  err.Reset();
  fcntl(read_end.get(), F_SETFL, O_NONBLOCK);
  // A pidfd wakes poll() when the program ends, even while something it
  // started still holds the pipe; without one (old kernels) poll ticks.
  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));

  CommandResult result;
  const absl::Time deadline = absl::Now() + options.timeout;
  bool pipe_open = true;
  char buf[16384];
  auto drain = [&] {
    while (pipe_open) {
      const ssize_t n = read(read_end.get(), buf, sizeof(buf));
      if (n > 0) {
        const size_t room = options.max_output_bytes - std::min(options.max_output_bytes,
                                                                 result.output.size());
        result.output.append(buf, std::min(room, static_cast<size_t>(n)));
      } else if (n == 0) {
        pipe_open = false;
      } else if (errno != EINTR) {
        return;  // EAGAIN: nothing more for now
      }
    }
  };
  while (!Ended(pid)) {
    if (absl::Now() >= deadline) {
      result.timed_out = true;
      break;
    }
    pollfd fds[2] = {{read_end.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
    const int nfds = pidfd.get() >= 0 ? 2 : 1;
    if (!pipe_open) fds[0].fd = -1;
    const int cap_ms = pidfd.get() >= 0 ? 1000 : 20;
    if (poll(fds, nfds, PollMs(deadline, cap_ms)) > 0 && (fds[0].revents & (POLLIN | POLLHUP))) {
      drain();
    }
  }
  if (result.timed_out) {
    kill(-pid, SIGTERM);
    const absl::Time grace = absl::Now() + options.kill_grace;
    while (!Ended(pid) && absl::Now() < grace) {
      pollfd p = {pidfd.get(), POLLIN, 0};
      poll(&p, pidfd.get() >= 0 ? 1 : 0, PollMs(grace, pidfd.get() >= 0 ? 1000 : 20));
    }
  }
  // The leader is a zombie until reaped below, so -pid still names its group:
  // whatever it left behind goes with it when it timed out.
  if (result.timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  drain();  // what it wrote last (a straggler holding the pipe is not waited for)
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace netfold::tools
