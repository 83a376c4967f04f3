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
  // multicast result carries in a 4096-byte RoCE MTU. K = 128 (504 KiB in
  // flight per rank): measured against 64 side by side (`netfold bench
  // --slots 128`, 8 and 16 ranks, 64 KiB-64 MiB) it took 0.5-0.8x the time
  // of a bcast, 0.3-0.75x of a reduce at 8 ranks and 0.77-0.98x of an
  // allreduce from 256 KiB up; small reduces at 16 ranks lose 10-20 %
  // ("K = 128 by default", docs/performance.md). It was held back while 16
  // ranks on 2 cores made the ranks' RC timers resend whole windows
  // ("A window of 128"); spurious timeouts and repairs no longer do.
  uint32_t default_slots_per_group = 128;
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
