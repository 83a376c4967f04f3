// The switch side of the control protocol (docs/control_plane.md, "Commands
// and the switch contract"): manager commands applied to a SwitchDataPlane,
// with the result codes the contract names. manager/testing/fake_switch.h is
// the in-memory model of the same contract; this is the real thing.
//
//   // on the data-plane thread (inside SwitchDataPlane::Post):
//   control::CommandResult r = ExecuteCommand(dp, message, limits);
//   FillHeldState(dp, &registration);          // for (re-)registration
//
// What it adds to SwitchDataPlane:
// - group ids are the manager's: a group is found by id whatever its tree,
//   a newer epoch replaces it (even on another tree), an older one is
//   refused, the same one is a no-op;
// - widths: tree_id must fit 16 bits and group_id 32 bits (the aggregation
//   header's), or the install is refused with INVALID_ARGUMENT;
// - every child QP and the parent QP must exist and be connected
//   (FAILED_PRECONDITION), a switch child must list its subtree ranks, the
//   slot size must fit (INVALID_ARGUMENT), at most `max_trees` trees;
// - destroy_qp removes the groups still using the QP first (they cannot
//   work without it).
//
// Thread-safety: every function belongs to the data-plane thread.
#ifndef NETFOLD_SWITCH_CONTROL_COMMANDS_H_
#define NETFOLD_SWITCH_CONTROL_COMMANDS_H_

#include <cstdint>

#include "proto/control/netfold_control.pb.h"
#include "switch/switch_data_plane.h"

namespace netfold::sw {

struct CommandLimits {
  uint32_t max_trees = 64;  // distinct trees with a group on this switch
};

// Executes one command and returns its result (command_id copied). Never
// fails otherwise: every problem is a code and a message in the result.
control::CommandResult ExecuteCommand(SwitchDataPlane& dp, const control::ManagerMessage& message,
                                      const CommandLimits& limits);

// The state a registration reports: installed groups and every RC QP.
void FillHeldState(const SwitchDataPlane& dp, control::RegisterSwitch* reg);

// What the switch holds (groups, slots reserved, QPs).
control::ResourceUsage UsageOf(const SwitchDataPlane& dp);

// The capacity a switch with this data-plane config offers.
control::SwitchCapacity CapacityOf(const SwitchConfig& config, uint32_t max_trees);

// The installed group with this id (any tree), if any.
const GroupSpec* FindGroupById(const SwitchDataPlane& dp, uint64_t group_id);

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_CONTROL_COMMANDS_H_
