// Rebuilding the manager's books from its durable state at start (the
// snapshot with the journal replayed onto it, journal.h): jobs, tree links
// and ready groups come back with their resources reserved again, exactly
// once; what no longer fits the topology (an unknown host or switch, a
// link that is not in the tree any more, a group that does not fit) is
// dropped with a warning and a delete record. Switches start UNKNOWN: those
// that hold recovered state get max(switch_timeout, 2 x heartbeat_interval)
// + 1 s to register again before they are written off (their agents and
// channels retry a lost manager every 500 ms at most, each); attached
// ranks get host_timeout + 1 s to heartbeat again before they are detached
// (their hosts retry a lost manager every 500 ms at most). Both graces count again
// from the moment the manager serves (RestartReregistrationGrace).
//
//   state::Snapshot loaded;
//   NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<Journal> journal, Journal::Open(dir, &loaded));
//   FabricState state(topo, options, clock, journal.get(), incarnation);
//   NETFOLD_RETURN_IF_ERROR(RecoverFabricState(loaded, &state));
//
// Once, on empty books, before serving; writes the drops and a fresh
// snapshot. The caller holds the manager's locks (AggregationManager::Recover).
#ifndef NETFOLD_MANAGER_RECOVERY_H_
#define NETFOLD_MANAGER_RECOVERY_H_

#include "absl/status/status.h"
#include "manager/fabric_state.h"
#include "manager/manager_state.pb.h"

namespace netfold::manager {

// Unavailable if the drops or the snapshot cannot be written.
absl::Status RecoverFabricState(const state::Snapshot& snapshot, FabricState* state);

// Starts the grace of every switch still waiting to re-register, and the
// ranks' grace, over from now. The grace is the switches' time to reach the manager, so it counts
// from when the manager accepts them: one that took longer to open its port
// than the grace (gRPC's start on a loaded machine, seen at 1.6 s against
// 2 s) would otherwise write them all off at its first tick. The caller
// holds the books' lock (AggregationManager::Serving).
void RestartReregistrationGrace(FabricState* state);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_RECOVERY_H_
