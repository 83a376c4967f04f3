// Running another program from the netfold CLI (mpirun, python3 for the
// plots) as an argument vector, never through a shell: a path or a user's
// option that holds `;`, `$(...)` or quotes reaches the program as one
// argument and is never interpreted (issue 23 item 9, docs/security.md).
//
//   CommandOptions o;
//   o.timeout = absl::Minutes(2);
//   o.stderr_path = out_dir + "/mpirun.log";     // appended to
//   absl::StatusOr<CommandResult> r = RunCommand({"mpirun", "-np", "4", bench}, o);
//   if (r.ok() && r->Succeeded()) Parse(r->output);
//
// The program is found on PATH when argv[0] has no '/'. It runs in a
// process group of its own with stdin from /dev/null; at the deadline the
// whole group (mpirun and the ranks it started) gets SIGTERM, then SIGKILL
// after `kill_grace`. RunCommand returns only once the program is reaped.
//
// Thread-safe (posix_spawn, no shared state); callable from a process with
// threads (gRPC's).
#ifndef NETFOLD_TOOLS_RUN_COMMAND_H_
#define NETFOLD_TOOLS_RUN_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netfold::tools {

struct CommandOptions {
  absl::Duration timeout = absl::Minutes(1);
  absl::Duration kill_grace = absl::Seconds(5);  // SIGTERM -> SIGKILL
  // Where the program's stderr goes, appended (opened O_NOFOLLOW: a symlink
  // there is refused); "" = /dev/null.
  std::string stderr_path;
  // At most this much of stdout is kept; the rest is read and dropped so the
  // program never blocks on a full pipe.
  size_t max_output_bytes = 64 << 20;
};

struct CommandResult {
  int exit_code = -1;     // the exit status, or -1 if a signal ended it
  int term_signal = 0;    // the signal that ended it, 0 if it exited
  bool timed_out = false; // killed at the deadline
  std::string output;     // its stdout
  bool Succeeded() const { return exit_code == 0 && !timed_out; }
};

// Runs argv[0] with argv (see above). NotFound if the program cannot be
// found or executed, InvalidArgument for an empty argv, other errors if the
// pipe or the stderr file cannot be opened. A program that runs and fails
// is an OK status with its exit code.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const CommandOptions& options);

// The program `name` on PATH (the first executable), or "" if none.
std::string FindOnPath(const std::string& name);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_RUN_COMMAND_H_
