// The daemons of a local fabric as processes: how LocalFabric starts one,
// and the process faults `netfold kill` and `netfold restart` inject into a
// fabric that `netfold up` left running (docs/faults.md, "Process faults
// from the command line").
//
// Beside fabric.pids (tools/daemon_pids.h) each daemon's command line is
// kept as NAME.argv: its arguments, each ended by a NUL, as
// /proc/PID/cmdline has them. So a daemon starts again as it was started:
// the manager on its port and over its journal, a switch on new ports,
// registering again with a new incarnation.
//
//   NETFOLD_ASSIGN_OR_RETURN(std::string said, SignalFabricDaemon(dir, "leaf0", SIGKILL));
//   NETFOLD_ASSIGN_OR_RETURN(said, RestartFabricDaemon(dir, "leaf0", absl::Seconds(30)));
//
// A name is "manager", a switch's name, or "switches" for the one process
// that runs every switch (netfold up --switch-processes one|auto). A switch
// that shares its process cannot be signalled alone: the error says so and
// what to do. Thread-compatible (no shared state).
#ifndef NETFOLD_TOOLS_FABRIC_DAEMONS_H_
#define NETFOLD_TOOLS_FABRIC_DAEMONS_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/daemon_pids.h"
#include "tools/state_dir.h"

namespace netfold::tools {

// The programs a fabric's daemons run, the only ones signalled by name.
const std::vector<std::string>& DaemonPrograms();

// fabric.pids of `dir`: NotFound ("no fabric runs from DIR") if it is
// missing or empty, FailedPrecondition if it is not as netfold writes it.
absl::StatusOr<std::vector<DaemonRecord>> ReadFabricRecords(const StateDir& dir);

// The lock up, down and restart hold while they change which daemons
// fabric.pids records (StateDir::TakeLock).
inline constexpr char kFabricLock[] = "fabric.lock";

// NAME.argv's text, and back: InvalidArgument for text that does not end
// with a NUL or whose first argument is not an absolute path.
std::string FormatArgv(const std::vector<std::string>& argv);
absl::StatusOr<std::vector<std::string>> ParseArgv(std::string_view text);

// Forks and execs `argv` in a session of its own, stdout and stderr to
// `log_fd`, stdin from /dev/null; the child inherits `claim_fd` (if >= 0:
// the fabric's multicast claim, tools/multicast_claim.h). Unless `detach`,
// the child gets SIGTERM when this process dies. Nothing after fork()
// allocates. The caller closes `log_fd`.
absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& argv, int log_fd, int claim_fd,
                                  bool detach);

// Waits for the file `name` in `dir` to hold a port (> 0) written by the
// daemon `pid`, this process's child; Unavailable with the start of its
// `log` if it exits first, DeadlineExceeded after `timeout`.
absl::StatusOr<int> WaitForPortFile(const StateDir& dir, const std::string& name, pid_t pid,
                                    absl::Duration timeout, const std::string& log);

// A signal by name for `netfold kill`: KILL, TERM, STOP or CONT, with or
// without "SIG", any case. InvalidArgument for anything else.
absl::StatusOr<int> ParseSignalName(std::string_view name);

// The daemons of the fabric in `state_dir`, for `netfold status`: a line
// each with its name, pid, whether it runs, is stopped or is gone, and the
// switches it runs. NotFound if no fabric runs from there.
absl::StatusOr<std::string> FormatFabricDaemons(const std::string& state_dir);

// Sends `signal` to the daemon `name` of the fabric in `state_dir`, once
// checked to be the process fabric.pids recorded (tools/daemon_pids.h); for
// SIGKILL and SIGTERM waits up to 5 s for it to exit (DeadlineExceeded if
// it still runs, e.g. TERM to a stopped daemon). Returns what was done, one
// line. NotFound for no fabric or no such daemon (naming the daemons),
// FailedPrecondition for a switch that shares its process, or a daemon not
// running.
absl::StatusOr<std::string> SignalFabricDaemon(const std::string& state_dir,
                                               const std::string& name, int signal);

// Starts the daemon `name` again with the command line it was started with,
// after it exited (FailedPrecondition while it runs), and records it in
// fabric.pids, holding fabric.lock (tools/state_dir.h) meanwhile. Its
// earlier log is kept as NAME.log.1. Then waits until it is ready, all
// within `timeout` (the wait for the lock too): the manager's port file, each switch's admin port file, and
// the manager (at manager.address, with the fabric's credential and CA)
// listing each restarted switch UP with the incarnation the switch itself
// reports, or, for the manager, every switch of the daemons that run.
// DeadlineExceeded names what was missing (the daemon then runs, recorded).
// The daemon takes the fabric's multicast prefix again if it is free; if a
// process holds it that is not one of the fabric's running daemons, the
// prefix went to another fabric: FailedPrecondition, nothing started.
absl::StatusOr<std::string> RestartFabricDaemon(const std::string& state_dir,
                                                const std::string& name,
                                                absl::Duration timeout);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_FABRIC_DAEMONS_H_
