// What waking a sleeping thread costs on this machine: a context switch on
// one CPU, and, across two, whatever the woken thread's CPU takes to leave
// its idle state (on some VMs several times the switch itself). A fabric of
// processes that sleep between packets pays it per burst, so `netfold bench`
// prints it beside its ratios and bench/transport/wakeup_bench reports it
// (docs/performance.md, "The progress thread sleeps through back-to-back
// calls").
//
//   absl::StatusOr<WakeupCost> c = MeasureWakeupCost(2000);
//   printf("%.1f us across CPUs\n", c->other_cpu_us.value_or(-1));
#ifndef NETFOLD_BASE_WAKEUP_COST_H_
#define NETFOLD_BASE_WAKEUP_COST_H_

#include <optional>

#include "absl/status/statusor.h"

namespace netfold {

struct WakeupCost {
  double syscall_us = 0;                // CPU per system call (getppid), for scale
  double same_cpu_us = 0;               // CPU per wake-up, both threads on one CPU
  double same_cpu_wall_us = 0;          // wall time per wake-up, the same
  std::optional<double> other_cpu_us;   // CPU per wake-up across two CPUs (none: one CPU usable)
  std::optional<double> other_cpu_wall_us;
};

// Two threads pass a token over two eventfds `rounds` times each way, pinned
// to the first CPU this process may use, then to the first two. CPU is the
// process's user + system time (run it with nothing else of this process
// busy). Every wait is bounded (a second per token): a lost token is an
// error, not a hang. InvalidArgument for rounds < 1.
absl::StatusOr<WakeupCost> MeasureWakeupCost(int rounds);

}  // namespace netfold

#endif  // NETFOLD_BASE_WAKEUP_COST_H_
