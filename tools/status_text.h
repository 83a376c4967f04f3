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
#include <vector>

#include "absl/status/statusor.h"

#include "proto/control/netfold_control.pb.h"

namespace netfold::tools {

std::string FormatStatus(const control::GetStatusResponse& status);
std::string SwitchStateName(control::SwitchStatus::State state);
// SwitchAdmin.GetCounters of the switch at `admin`: port, messages,
// resources, then a line per peer, QP and group (the detail view), and the
// backend's counters; zero counts are left out.
std::string FormatSwitchCounters(const control::GetCountersResponse& counters,
                                 const std::string& admin);
// One line of what a switch carried, for a benchmark's end (`netfold
// bench`): aggregation messages in and out (how many of those out went to
// other switches, and how many of these in memory to switches of its
// process), packets at its port and the share the kernel handled in
// batches (UDP GSO and GRO), and every drop (its QPs' too, from a detailed
// answer).
std::string FormatSwitchTraffic(const control::GetCountersResponse& counters);
// What the counters of a fabric's switches say did not engage that should
// have: the in-memory links between switches of one process
// (`one_process`), and, where the window lets several packets go to one
// destination at once (`batches_expected`: more than one slot), the
// batching of a udp port that carried full-size packets. Empty when
// nothing is amiss.
std::vector<std::string> SwitchTrafficWarnings(
    const std::vector<control::GetCountersResponse>& switches, bool one_process,
    bool batches_expected);
// The switches' counters from GetCounters answers in protobuf's JSON, one
// object per line (`netfold-testbed counters all --json`); blank lines are
// skipped. InvalidArgument naming the line that is not such an answer.
absl::StatusOr<std::vector<control::GetCountersResponse>> ParseSwitchCountersLines(
    const std::string& text);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_STATUS_TEXT_H_
