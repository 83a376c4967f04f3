// Human-readable rendering of the manager's state, as `netfold status`
// prints it: the state directory's journal (with a warning when it was
// damaged at start or refuses appends), switches (state, heartbeat age,
// used/capacity and free resources), trees, jobs and groups; and of one
// switch's counters, as `netfold status --switch NAME` prints them.
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
// SwitchAdmin.GetCounters of the switch at `admin`: port, messages,
// resources, then a line per peer, QP and group (the detail view), and the
// backend's counters; zero counts are left out.
std::string FormatSwitchCounters(const control::GetCountersResponse& counters,
                                 const std::string& admin);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_STATUS_TEXT_H_
