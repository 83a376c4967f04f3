// What a failure changes in the books (fabric_state.h): a switch declared
// dead, a QP error a switch reported, a switch that came back
// (reconciled against what it says it still has). Decided under the
// manager's state lock, without talking to a switch; the manager then
// sends the commands (best effort: cleanup that cannot be undone) and
// re-plans or revokes the groups lost (AggregationManager::FailGroups).
//
//   Fallout f;
//   { absl::MutexLock lock(&mu_); f = SwitchDied(state_, sw); }
//   SendBestEffort(f.out, "clean up after a dead switch");
//   FailGroups(f.lost_groups, f.reason);
//
// Thread-safety: none; under the lock that guards the books.
#ifndef NETFOLD_MANAGER_FAILURES_H_
#define NETFOLD_MANAGER_FAILURES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "manager/fabric_state.h"
#include "manager/switch_commander.h"

namespace netfold::manager {

struct Fallout {
  std::string reason;  // why the groups were lost, as their members are told
  Outbox out;          // commands to send, best effort
  // Groups that lost a switch, link or member (may repeat; FailGroups
  // sorts them).
  std::vector<uint64_t> lost_groups;
};

// Switch `sw` is dead (liveness): it goes DEAD, its links drop, the ranks
// attached to it (in its data plane; their other planes keep theirs)
// detach, and every group whose tree runs through it is lost.
Fallout SwitchDied(FabricState& state, int sw);

// Switch `sw` reported QP `qpn` in error: the rank attached on it detaches
// (its QP destroyed), or the link on it drops and stays down; nullopt when
// neither has that QP (a QP already gone: nothing to do).
std::optional<Fallout> QpFailed(FabricState& state, int sw, uint32_t qpn, std::string_view why);

// What reconciling a switch calls for: the fallout, and the groups to
// install on it again.
struct Reconciliation {
  Fallout fallout;
  std::vector<SwitchCommand> installs;   // groups to install on it again
  std::vector<uint64_t> install_groups;  // their ids, in the same order
};

// A switch that re-registered (RECONCILING) against what it reported
// having: ranks and links whose QPs it lost detach and drop, QPs and
// groups the books do not know are removed, and ready groups it lost are
// to be installed again. nullopt when the switch is not reconciling.
std::optional<Reconciliation> PlanReconcile(FabricState& state, int sw);

// After the reconciliation's commands: the switch is UP, unless it died
// or left RECONCILING meanwhile.
void EndReconcile(FabricState& state, int sw);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_FAILURES_H_
