// What every netfold daemon's main() needs: SIGTERM/SIGINT turned into a
// value main() waits for, and the bound port written to a file for whoever
// started the daemon with port 0.
//
//   if (absl::Status s = InstallTerminationHandlers(); !s.ok()) return Fail(s);
//   ... start serving ...
//   NETFOLD_RETURN_IF_ERROR(WritePortFile("/run/x.port", server->port()));
//   const int sig = WaitForTerminationSignal();   // SIGTERM or SIGINT
//
// The handlers write the signal number into a pipe (a handler, not
// sigwait: gRPC may start threads before main, and any thread may take the
// signal); SIGPIPE is ignored. Install once per process.
#ifndef NETFOLD_BASE_DAEMON_H_
#define NETFOLD_BASE_DAEMON_H_

#include <string>

#include "absl/status/status.h"

namespace netfold {

absl::Status InstallTerminationHandlers();
// Blocks until SIGTERM or SIGINT; returns the signal number (-1 if the pipe
// failed).
int WaitForTerminationSignal();
// Writes "PORT\n" to `path` atomically (a temporary file, then rename).
absl::Status WritePortFile(const std::string& path, int port);

// Turns off Abseil's lock-order checking for the process, unless the
// environment has NETFOLD_MUTEX_DEADLOCK_CHECKS=1 (meson's default test
// setup sets it for every test).
// Debian builds Abseil without NDEBUG, so every absl::Mutex lock, gRPC's
// included, records itself in a process-wide lock-order graph under a
// global lock and aborts on a cycle: a debugging aid that costs each lock
// about three times its own price (docs/architecture.md, "Build decisions").
// Returns whether the checks stay on. Call first thing in main().
bool ConfigureMutexDeadlockChecks();

}  // namespace netfold

#endif  // NETFOLD_BASE_DAEMON_H_
