#include "manager/switch_commander.h"

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "proto/control/grpc_status.h"

namespace netfold::manager {

absl::Status CommandStatus(const std::string& switch_name,
                           const absl::StatusOr<control::CommandResult>& result) {
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrFormat("switch %s: %s", switch_name, result.status().message()));
  }
  if (result->code() == 0) return absl::OkStatus();
  return absl::Status(control::CanonicalCode(result->code()),
                      absl::StrFormat("switch %s: %s", switch_name, result->message()));
}

void SendBestEffort(SwitchCommander& commander, const Outbox& out, absl::Duration timeout,
                    std::string_view what) {
  if (out.commands.empty()) return;
  auto results = commander.Execute(out.commands, timeout);
  for (size_t i = 0; i < results.size(); ++i) {
    absl::Status s = CommandStatus(out.commands[i].switch_name, results[i]);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      NETFOLD_LOG(kWarning) << what << ": " << s.message();
    }
  }
}

}  // namespace netfold::manager
