// The knobs of the aggregation manager: timeouts, policy limits on what a
// job may ask for, and durability. `netfold-managerd` fills them from its
// config file and flags (manager_config.h); tests set the few they need.
//
//   ManagerOptions options;
//   options.switch_timeout = absl::Milliseconds(500);
//   options.limits.max_slots_per_group = 8;
//   AggregationManager am(topo, options, clock, &hub, journal.get());
//
// Plain values, copied into the manager at construction.
#ifndef NETFOLD_MANAGER_MANAGER_OPTIONS_H_
#define NETFOLD_MANAGER_MANAGER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace netfold::manager {

// Per-job policy limits and the defaults of an unspecified quota.
struct JobLimits {
  uint32_t max_jobs = 1024;
  uint32_t max_ranks_per_job = 4096;
  uint32_t max_groups_per_job = 256;
  uint32_t default_groups_per_job = 16;
  uint32_t max_slots_per_group = 256;
  // What a job gets when it asks for nothing: K and P that keep a 4096-byte
  // path busy (docs/performance.md; issue 22), lowered to what the
  // topology's switches hold (DefaultWindowFor). P is the largest payload a
  // multicast result carries in a 4096-byte RoCE MTU. K = 64 (252 KiB in
  // flight per rank): bcast and reduce are bound by the window on loopback
  // and measured 15-30 % faster than with 32 ("A deeper window"). 128 was
  // faster still at 8 ranks, but at 16 ranks on 2 cores the ranks' RC
  // timers fired while the switches waited for a CPU and resent up to 128
  // requests each, +30-38 % bytes and 2x the time ("A window of 128").
  uint32_t default_slots_per_group = 64;
  uint32_t max_slot_bytes = 65536;
  uint32_t default_slot_bytes = 4032;
};

struct ManagerOptions {
  absl::Duration heartbeat_interval = absl::Milliseconds(500);  // told to clients
  absl::Duration switch_timeout = absl::Seconds(2);             // missed heartbeats: dead
  absl::Duration host_timeout = absl::Seconds(5);               // 0: host processes never time out
  // A job none of whose ranks is attached for this long (its processes were
  // killed, or never came) is destroyed; 0: jobs live until DestroyJob.
  absl::Duration abandoned_job_timeout = absl::Seconds(60);
  absl::Duration command_timeout = absl::Seconds(3);    // per batch of switch commands
  absl::Duration link_retry_after = absl::Seconds(10);  // a failed link stays down this long
  bool replan_on_failure = true;
  // Every job gets an integrity key, whether it asked for one or not
  // (CreateJobRequest.integrity; docs/security.md). Costs every job a
  // keyed hash per message per hop.
  bool require_integrity = false;
  JobLimits limits;
  std::string multicast_prefix = "239.77";  // groups get <prefix>.x.y:4791
  int snapshot_every = 1000;                // journal records between snapshots
  size_t events_per_job = 256;              // buffered for WatchEvents replay
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_MANAGER_OPTIONS_H_
