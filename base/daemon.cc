#include "base/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/errno_status.h"

namespace netfold {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &b, 1);
}

}  // namespace

absl::Status InstallTerminationHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, nullptr) != 0 || sigaction(SIGINT, &sa, nullptr) != 0) {
    return ErrnoToStatus(errno, "sigaction");
  }
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

int WaitForTerminationSignal() {
  unsigned char b = 0;
  while (true) {
    const ssize_t n = read(g_signal_pipe[0], &b, 1);
    if (n == 1) return b;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", tmp));
  const std::string text = absl::StrFormat("%d\n", port);
  const ssize_t n = write(fd, text.data(), text.size());
  const int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoToStatus(e, absl::StrFormat("write %s", tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("rename %s", tmp));
  }
  return absl::OkStatus();
}

bool ConfigureMutexDeadlockChecks() {
  const char* want = std::getenv("NETFOLD_MUTEX_DEADLOCK_CHECKS");
  if (want != nullptr && std::string_view(want) == "1") return true;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return false;
}

}  // namespace netfold
