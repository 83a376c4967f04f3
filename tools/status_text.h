// Human-readable rendering of the manager's state, as `netfold status`
// prints it: the state directory's journal (with a warning when it was
// damaged at start or refuses appends), switches (state, heartbeat age,
// used/capacity and free resources), trees, jobs and groups.
//
//   control::GetStatusResponse st;  // from Admin.GetStatus
//   std::cout << FormatStatus(st);
//
// Pure function; thread-safe.
#ifndef NETFOLD_TOOLS_STATUS_TEXT_H_
#define NETFOLD_TOOLS_STATUS_TEXT_H_

#include <string>

#include "proto/control/netfold_control.pb.h"

namespace netfold::tools {

std::string FormatStatus(const control::GetStatusResponse& status);
std::string SwitchStateName(control::SwitchStatus::State state);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_STATUS_TEXT_H_
