// How the aggregation manager talks to switches: a batch of commands out,
// one result per command back, with a deadline (Execute); or commands out
// and nothing waited for (Post).
//
//   std::vector<SwitchCommand> cmds = {{"leaf0", msg0}, {"leaf1", msg1}};
//   std::vector<absl::StatusOr<control::CommandResult>> results =
//       commander->Execute(cmds, absl::Seconds(3));
//
// The gRPC implementation (SwitchHub, control_service.h) writes each
// command on the switch's Connect stream and waits for the matching
// CommandResult; tests use an in-process fabric of fake switches. The
// manager never calls Execute while holding its state lock: it collects
// commands in an Outbox and sends them after.
#ifndef NETFOLD_MANAGER_SWITCH_COMMANDER_H_
#define NETFOLD_MANAGER_SWITCH_COMMANDER_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

struct SwitchCommand {
  std::string switch_name;
  control::ManagerMessage message;  // command_id is assigned by the commander
};

class SwitchCommander {
 public:
  virtual ~SwitchCommander() = default;
  // Sends every command (concurrently across switches, in order per switch)
  // and waits until each has a result or `timeout` has passed. Returns one
  // entry per command, in order: the switch's CommandResult (whose `code`
  // may itself be an error), Unavailable if the switch is not connected or
  // its stream broke, DeadlineExceeded if it did not answer in time.
  // Thread-safe.
  virtual std::vector<absl::StatusOr<control::CommandResult>> Execute(
      const std::vector<SwitchCommand>& commands, absl::Duration timeout) = 0;

  // Sends every command, after those sent before it to the same switch,
  // and returns at once: no result is asked for (command_id 0) or waited
  // for. For cleanup nobody waits on, such as a destroyed group's removal:
  // the switch logs a refusal itself, and one that misses the command (not
  // connected, its stream broke) reports what it holds when it registers
  // again, and is reconciled. The default runs Execute, waiting up to
  // `timeout`, and drops the results (SwitchHub's does not wait). A later
  // Execute's commands to the same switch go after these as long as the
  // caller orders the two calls (the manager makes both under its op_mu_).
  // Thread-safe.
  virtual void Post(const std::vector<SwitchCommand>& commands, absl::Duration timeout) {
    (void)Execute(commands, timeout);
  }

  // Drops the switch's control connection, if any (it was declared dead:
  // whatever is left of it must register again and be reconciled).
  virtual void Disconnect(const std::string& switch_name) { (void)switch_name; }
};

// The status a command ended with: the transport error, or the switch's
// own code and message, prefixed with the switch name.
absl::Status CommandStatus(const std::string& switch_name,
                           const absl::StatusOr<control::CommandResult>& result);

// Commands to send later: the manager collects them while it holds its state
// lock and sends them once it has released it.
struct Outbox {
  std::vector<SwitchCommand> commands;
  void Add(const std::string& switch_name, control::ManagerMessage message) {
    commands.push_back({switch_name, std::move(message)});
  }
};

// Sends `out` and logs every failure but NotFound (removing what is already
// gone is success) as "`what`: ...": for cleanup that cannot be undone.
void SendBestEffort(SwitchCommander& commander, const Outbox& out, absl::Duration timeout,
                    std::string_view what);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_SWITCH_COMMANDER_H_
