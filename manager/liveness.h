// Liveness: who has gone quiet, judged against the manager's clock. A
// switch whose heartbeats stopped for `switch_timeout`, or whose stream
// broke, is due to be declared dead; so is one that held state before the
// manager restarted and has not registered again within its grace period.
// An attached rank silent for `host_timeout` is due to be detached (none
// during a restarted manager's grace for its ranks, recovery.h); a job
// with no attached rank for `abandoned_job_timeout` is due to be destroyed.
// A tree link taken down after a QP error is usable again once
// `link_retry_after` has passed.
//
//   LivenessSweep due = SweepLiveness(state, state.clock.Now());
//   for (int sw : due.deaths) ...        // fail what the switch held
//   for (int sw : due.reconciles) ...    // registered again: reconcile
//
// The sweep decides and does what needs no switch: it records why a switch
// is due to die, starts or clears the abandoned-job clocks, and lifts
// expired link downtimes. What follows from its answer is the manager's
// (AggregationManager::Tick). Needs the manager's state lock held.
//
// A sweep that comes more than half of switch_timeout after the one before
// finds the manager itself late (its process had no CPU, or the state lock
// was held: a journal write on a busy disk), and the heartbeats that came
// meanwhile may still wait, unread, behind that lock: it judges no switch
// or rank silent, once. The next sweep, a tick later, does.
#ifndef NETFOLD_MANAGER_LIVENESS_H_
#define NETFOLD_MANAGER_LIVENESS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "manager/fabric_state.h"

namespace netfold::manager {

struct LivenessSweep {
  std::vector<int> deaths;               // switches to declare dead (dead_reason set), ascending
  std::vector<int> reconciles;           // switches that registered and await reconciling
  std::vector<uint64_t> abandoned_jobs;  // to destroy
  // Attached ranks silent for longer than host_timeout, per job.
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> silent_ranks;
};

LivenessSweep SweepLiveness(FabricState& state, absl::Duration now);

// Records switch `sw`'s heartbeat `sequence`, which came at `now` after
// `lock_wait` for the state lock. Returns a warning to log if it came more
// than half of switch_timeout after the previous one (both sequence
// numbers: consecutive if the switch sent late; the lock wait if the
// manager was late), else "".
std::string RecordSwitchHeartbeat(FabricState& state, int sw, uint64_t sequence,
                                  absl::Duration now, absl::Duration lock_wait);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_LIVENESS_H_
