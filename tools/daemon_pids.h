// The daemons of a detached local fabric as `fabric.pids` records them, and
// how `netfold down` stops them without signalling a process that is not
// one of them: a pid from a file is only a claim. Each line is
//
//   NAME PID START
//
// with START the process's start time (/proc/PID/stat field 22, clock ticks
// since boot), taken when it was spawned. Before a signal, the process must
// still have that start time (a pid reused by another process has another),
// belong to this user (real uid) and run one of the expected programs
// (/proc/PID/exe). With a pidfd (Linux >= 5.3) the signal goes to the
// process that was checked, even if it exits and its pid is reused
// meanwhile. (issue 23 item 10, docs/security.md)
//
//   NETFOLD_ASSIGN_OR_RETURN(std::vector<DaemonRecord> d, ParseDaemonRecords(text));
//   std::vector<std::string> notes;
//   StopDaemons(d, {"netfold-managerd", "netfold-switchd"}, absl::Seconds(5), &notes);
//
// Thread-safe (no shared state).
#ifndef NETFOLD_TOOLS_DAEMON_PIDS_H_
#define NETFOLD_TOOLS_DAEMON_PIDS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netfold::tools {

struct DaemonRecord {
  std::string name;         // "manager", or a switch's name
  pid_t pid = -1;
  uint64_t start_time = 0;  // /proc/PID/stat field 22
};

// The file's text, one line per record.
std::string FormatDaemonRecords(const std::vector<DaemonRecord>& records);
// InvalidArgument naming the line for anything but "NAME PID START" lines
// (a pid must be > 1).
absl::StatusOr<std::vector<DaemonRecord>> ParseDaemonRecords(std::string_view text);

// Field 22 of /proc/PID/stat. NotFound if there is no such process.
absl::StatusOr<uint64_t> ProcessStartTime(pid_t pid);

enum class DaemonState {
  kRunning,  // the recorded process, still alive
  kGone,     // exited (no process, or a zombie, with that pid and start time)
  kOther,    // the pid belongs to some other process: never signal it
};

// What `record.pid` is now. kRunning only if the start time, the real uid
// (getuid()) and the executable's file name (one of `programs`) all match;
// `why` (if not null) says what did not.
DaemonState CheckDaemon(const DaemonRecord& record, const std::vector<std::string>& programs,
                        std::string* why);

// True if the recorded process runs but is stopped (SIGSTOP, a debugger).
bool DaemonStopped(const DaemonRecord& record);

// SIGTERM, then SIGCONT, to `pid` (through `pidfd` if it is >= 0): a
// stopped process (SIGSTOP from `netfold kill --signal STOP`, a debugger)
// only handles its SIGTERM once it runs again, as systemd does when it
// stops a unit. A running one ignores the SIGCONT.
void Terminate(int pidfd, pid_t pid);

// SIGTERM (and SIGCONT, so that a stopped one handles it) to each record
// that CheckDaemon finds kRunning, then waits up to
// `grace` for them to exit and SIGKILLs those left. Records that are kOther
// are left alone and explained in `notes` ("pid 123 (leaf0) was not
// signalled: ..."), as are those that were already gone. Returns the number
// of processes signalled.
int StopDaemons(const std::vector<DaemonRecord>& records, const std::vector<std::string>& programs,
                absl::Duration grace, std::vector<std::string>* notes);

// Sends `signal` to `record`'s process if CheckDaemon finds it kRunning,
// through a pidfd opened before the check (as StopDaemons does);
// FailedPrecondition saying why not otherwise. With `wait` > 0 it then
// waits that long for the process to exit (after SIGKILL or SIGTERM; a
// SIGTERM is followed by SIGCONT, as StopDaemons does): DeadlineExceeded
// if it still runs.
absl::Status SignalDaemon(const DaemonRecord& record, const std::vector<std::string>& programs,
                          int signal, absl::Duration wait);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_DAEMON_PIDS_H_
