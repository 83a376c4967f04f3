#include "tools/daemon_pids.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace netfold::tools {
namespace {

// The text of a small /proc file, or "" when it cannot be read.
std::string ReadProc(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The state letter (field 3) and the start time (field 22) of a process;
// false when it does not exist. The command name (field 2) may hold spaces
// and parentheses, so the fields are counted from the last ')'.
bool ReadStat(pid_t pid, char* state, uint64_t* start_time, uint64_t* flags = nullptr) {
  const std::string stat = ReadProc(absl::StrFormat("/proc/%d/stat", pid));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  // f[0] is field 3, f[6] field 9 (the kernel's PF_* flags), f[19] field 22.
  if (f.size() < 20 || f[0].empty() || !absl::SimpleAtoi(f[19], start_time)) return false;
  if (flags != nullptr && !absl::SimpleAtoi(f[6], flags)) return false;
  *state = f[0][0];
  return true;
}

// A process the kernel is tearing down (PF_EXITING) has no readable
// /proc/PID/exe before it becomes a zombie.
constexpr uint64_t kPfExiting = 0x4;

// After an unreadable executable: true if the process has exited or is
// exiting since it was checked.
bool ExitedSince(const DaemonRecord& record) {
  char state = 0;
  uint64_t start = 0;
  uint64_t flags = 0;
  if (!ReadStat(record.pid, &state, &start, &flags) || start != record.start_time) return true;
  return state == 'Z' || state == 'X' || (flags & kPfExiting) != 0;
}

// The real uid of a process (the first number of "Uid:" in its status).
bool RealUid(pid_t pid, uid_t* uid) {
  const std::string status = ReadProc(absl::StrFormat("/proc/%d/status", pid));
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    std::vector<absl::string_view> ids = absl::StrSplit(line, absl::ByAnyChar(" \t"),
                                                        absl::SkipEmpty());
    return !ids.empty() && absl::SimpleAtoi(ids[0], uid);
  }
  return false;
}

// The file name of a process's executable ("netfold-switchd"), without the
// " (deleted)" of a binary rebuilt since it started; "" if unreadable.
std::string ExeName(pid_t pid) {
  char buf[4096];
  const ssize_t n = readlink(absl::StrFormat("/proc/%d/exe", pid).c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  absl::string_view exe(buf, static_cast<size_t>(n));
  absl::ConsumeSuffix(&exe, " (deleted)");
  const size_t slash = exe.rfind('/');
  return std::string(slash == absl::string_view::npos ? exe : exe.substr(slash + 1));
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// Sends `signal` through the pidfd when there is one (it names the process
// that was checked, whatever happened to its pid since), else by pid.
void Signal(int pidfd, pid_t pid, int signal) {
  if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) == 0) return;
  if (pidfd < 0) kill(pid, signal);
}

// Waits at most 100 ms, and not past `deadline`, for the process to exit.
// A child of this process is left a zombie for its parent's own wait
// (CheckDaemon takes a zombie for gone).
void AwaitExit(int pidfd, absl::Time deadline) {
  if (pidfd >= 0) {
    // Readable when the process exits.
    pollfd p = {pidfd, POLLIN, 0};
    const int64_t ms =
        std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()) + 1, 0, 100);
    poll(&p, 1, static_cast<int>(ms));
  } else {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

void Terminate(int pidfd, pid_t pid) {
  Signal(pidfd, pid, SIGTERM);
  Signal(pidfd, pid, SIGCONT);
}

std::string FormatDaemonRecords(const std::vector<DaemonRecord>& records) {
  std::string text;
  for (const DaemonRecord& r : records) {
    text += absl::StrFormat("%s %d %d\n", r.name, r.pid, r.start_time);
  }
  return text;
}

absl::StatusOr<std::vector<DaemonRecord>> ParseDaemonRecords(std::string_view text) {
  std::vector<DaemonRecord> records;
  int line_number = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    DaemonRecord r;
    int pid = 0;
    if (f.size() != 3 || f[0].empty() || !absl::SimpleAtoi(f[1], &pid) || pid <= 1 ||
        !absl::SimpleAtoi(f[2], &r.start_time)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "line %d: '%s' is not 'NAME PID START_TIME'", line_number, line.substr(0, 80)));
    }
    r.name = std::string(f[0]);
    r.pid = pid;
    records.push_back(std::move(r));
  }
  return records;
}

absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) {
    return absl::NotFoundError(absl::StrFormat("no process %d", pid));
  }
  return start;
}

DaemonState CheckDaemon(const DaemonRecord& record, const std::vector<std::string>& programs,
                        std::string* why) {
  std::string unused;
  if (why == nullptr) why = &unused;
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(record.pid, &state, &start)) {
    *why = "it has exited";
    return DaemonState::kGone;
  }
  if (start != record.start_time) {
    *why = absl::StrFormat(
        "the pid now belongs to another process (started at tick %d, not %d: the pid was reused)",
        start, record.start_time);
    return DaemonState::kOther;
  }
  if (state == 'Z' || state == 'X') {
    *why = "it has exited";
    return DaemonState::kGone;
  }
  uid_t uid = 0;
  if (!RealUid(record.pid, &uid) || uid != getuid()) {
    *why = absl::StrFormat("it belongs to uid %d, not to you (uid %d)", uid, getuid());
    return DaemonState::kOther;
  }
  const std::string exe = ExeName(record.pid);
  if (exe.empty() && ExitedSince(record)) {
    *why = "it has exited";
    return DaemonState::kGone;
  }
  if (std::find(programs.begin(), programs.end(), exe) == programs.end()) {
    *why = absl::StrFormat("it runs '%s', not a netfold daemon", exe.empty() ? "?" : exe);
    return DaemonState::kOther;
  }
  return DaemonState::kRunning;
}

bool DaemonStopped(const DaemonRecord& record) {
  char state = 0;
  uint64_t start = 0;
  return ReadStat(record.pid, &state, &start) && start == record.start_time &&
         (state == 'T' || state == 't');
}

int StopDaemons(const std::vector<DaemonRecord>& records, const std::vector<std::string>& programs,
                absl::Duration grace, std::vector<std::string>* notes) {
  struct Target {
    const DaemonRecord* record;
    int pidfd;
  };
  std::vector<Target> targets;
  for (const DaemonRecord& r : records) {
    // The pidfd first, the check second: if the check passes, the pidfd was
    // opened on the process that passed it.
    const int pidfd = PidfdOpen(r.pid);
    std::string why;
    const DaemonState state = CheckDaemon(r, programs, &why);
    if (state != DaemonState::kRunning) {
      if (pidfd >= 0) close(pidfd);
      if (notes != nullptr) {
        notes->push_back(absl::StrFormat("pid %d (%s) was not signalled: %s", r.pid, r.name, why));
      }
      continue;
    }
    Terminate(pidfd, r.pid);
    targets.push_back({&r, pidfd});
  }
  const absl::Time deadline = absl::Now() + grace;
  for (const Target& t : targets) {
    while (CheckDaemon(*t.record, programs, nullptr) == DaemonState::kRunning) {
      if (absl::Now() >= deadline) {
        Signal(t.pidfd, t.record->pid, SIGKILL);
        if (notes != nullptr) {
          notes->push_back(absl::StrFormat("%s (pid %d) did not stop on SIGTERM within %s; killed",
                                           t.record->name, t.record->pid,
                                           absl::FormatDuration(grace)));
        }
        break;
      }
      AwaitExit(t.pidfd, deadline);
    }
    if (t.pidfd >= 0) close(t.pidfd);
  }
  return static_cast<int>(targets.size());
}

absl::Status SignalDaemon(const DaemonRecord& record, const std::vector<std::string>& programs,
                          int signal, absl::Duration wait) {
  const int pidfd = PidfdOpen(record.pid);
  std::string why;
  if (CheckDaemon(record, programs, &why) != DaemonState::kRunning) {
    if (pidfd >= 0) close(pidfd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s (pid %d) was not signalled: %s", record.name, record.pid, why));
  }
  if (signal == SIGTERM) {
    Terminate(pidfd, record.pid);
  } else {
    Signal(pidfd, record.pid, signal);
  }
  const absl::Time deadline = absl::Now() + wait;
  bool running = wait > absl::ZeroDuration();
  while (running && absl::Now() < deadline) {
    AwaitExit(pidfd, deadline);
    running = CheckDaemon(record, programs, nullptr) == DaemonState::kRunning;
  }
  if (pidfd >= 0) close(pidfd);
  if (running) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s (pid %d) still runs %s after the signal", record.name, record.pid,
        absl::FormatDuration(wait)));
  }
  return absl::OkStatus();
}

}  // namespace netfold::tools
