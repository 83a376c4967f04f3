#include "manager/liveness.h"

#include "absl/strings/str_format.h"

namespace netfold::manager {
namespace {

// `manager_late`: no switch is judged silent (SweepLiveness).
void SweepSwitches(FabricState& state, absl::Duration now, bool manager_late,
                   LivenessSweep* due) {
  const absl::Duration timeout = state.options.switch_timeout;
  for (int sw = 0; sw < state.topo.num_switches(); ++sw) {
    Switch& s = state.switches[sw];
    if (s.death_pending) {
      due->deaths.push_back(sw);
    } else if (!manager_late && state.Reachable(sw) && now - s.last_heartbeat > timeout) {
      s.dead_reason = absl::StrFormat("no heartbeat for %dms (timeout %dms)",
                                      absl::ToInt64Milliseconds(now - s.last_heartbeat),
                                      absl::ToInt64Milliseconds(timeout));
      due->deaths.push_back(sw);
    } else if (s.state == SwitchState::kUnknown && s.grace_until > absl::ZeroDuration() &&
               now > s.grace_until) {
      s.dead_reason = "did not re-register after the manager restarted";
      due->deaths.push_back(sw);
    } else if (s.state == SwitchState::kReconciling) {
      due->reconciles.push_back(sw);
    }
  }
}

void LiftLinkDowntimes(FabricState& state, absl::Duration now) {
  for (auto it = state.links_down_until.begin(); it != state.links_down_until.end();) {
    if (it->second <= now) {
      state.alloc.SetLinkDown(it->first.first, it->first.second, false, "");
      it = state.links_down_until.erase(it);
    } else {
      ++it;
    }
  }
}

// A job none of whose ranks is attached (they all died, or never came)
// holds its QP quota and P_Key until someone destroys it: after
// abandoned_job_timeout the manager does.
void SweepJobs(FabricState& state, absl::Duration now, LivenessSweep* due) {
  const absl::Duration timeout = state.options.abandoned_job_timeout;
  if (timeout <= absl::ZeroDuration()) return;
  for (auto& [jid, job] : state.jobs) {
    bool any_attached = false;
    for (const auto& [r, rank] : job.ranks) any_attached = any_attached || rank.AttachedAnywhere();
    if (any_attached) {
      job.unattached_since.reset();
    } else if (!job.unattached_since) {
      job.unattached_since = now;
    } else if (now - *job.unattached_since > timeout) {
      due->abandoned_jobs.push_back(jid);
    }
  }
}

void SweepRanks(const FabricState& state, absl::Duration now, LivenessSweep* due) {
  const absl::Duration timeout = state.options.host_timeout;
  if (timeout <= absl::ZeroDuration() || now <= state.ranks_grace_until) return;
  for (const auto& [jid, job] : state.jobs) {
    std::vector<uint32_t> ranks;
    for (const auto& [r, rank] : job.ranks) {
      if (rank.AttachedAnywhere() && now - rank.last_seen > timeout) ranks.push_back(r);
    }
    if (!ranks.empty()) due->silent_ranks.emplace_back(jid, std::move(ranks));
  }
}

}  // namespace

std::string RecordSwitchHeartbeat(FabricState& state, int sw, uint64_t sequence,
                                  absl::Duration now, absl::Duration lock_wait) {
  Switch& s = state.switches[sw];
  std::string late;
  if (s.last_heartbeat != absl::InfiniteDuration() &&
      now - s.last_heartbeat > state.options.switch_timeout / 2) {
    late = absl::StrFormat(
        "switch %s: heartbeat %d came %s after heartbeat %d (timeout %s; the state lock took %s)",
        state.SwitchName(sw), sequence,
        absl::FormatDuration(absl::Trunc(now - s.last_heartbeat, absl::Milliseconds(1))),
        s.last_heartbeat_sequence, absl::FormatDuration(state.options.switch_timeout),
        absl::FormatDuration(absl::Trunc(lock_wait, absl::Milliseconds(1))));
  }
  s.last_heartbeat = now;
  s.last_heartbeat_sequence = sequence;
  return late;
}

LivenessSweep SweepLiveness(FabricState& state, absl::Duration now) {
  LivenessSweep due;
  const bool manager_late = state.last_sweep != absl::InfiniteDuration() &&
                            now - state.last_sweep > state.options.switch_timeout / 2 &&
                            !state.last_sweep_held_back;
  state.last_sweep = now;
  state.last_sweep_held_back = manager_late;
  SweepSwitches(state, now, manager_late, &due);
  LiftLinkDowntimes(state, now);
  SweepJobs(state, now, &due);
  // An abandoned job has no attached rank, so none of its ranks is silent.
  if (!manager_late) SweepRanks(state, now, &due);
  return due;
}

}  // namespace netfold::manager
