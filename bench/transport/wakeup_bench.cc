// What waking a sleeping thread costs on this machine (docs/performance.md,
// "The progress thread sleeps through back-to-back calls"). A fabric of
// processes that sleep between packets pays it for every burst that finds
// its receiver asleep; on some VMs it is ten times a context switch, and it
// is what sets such a fabric apart from MPI libraries whose ranks spin.
//
//   wakeup_bench [--rounds N] [--quick]
//
// Prints, per row, microseconds of CPU (both threads, user + system) and of
// wall time per wake-up:
//   system call     a getppid, for scale
//   same CPU        two threads pinned to one CPU pass a token over two
//                   eventfds: each pass wakes the other (a context switch)
//   other CPU       the same with the threads on two CPUs: the woken one's
//                   CPU idles (halts) between passes, so each pass wakes a
//                   CPU as well as a thread
// The last row is skipped on a machine with one CPU. Every read waits at
// most a second: a lost token ends the benchmark with an error, not a hang.
// The measurement is base/wakeup_cost.h's, which `netfold bench` also
// prints in its header.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/wakeup_cost.h"

int main(int argc, char** argv) {
  int rounds = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      rounds = 2000;
    } else {
      std::fprintf(stderr, "usage: wakeup_bench [--rounds N] [--quick]\n");
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "wakeup_bench: --rounds at least 1\n");
    return 2;
  }
  std::printf("wakeup_bench: %d passes each way\n", rounds);
  const absl::StatusOr<netfold::WakeupCost> c = netfold::MeasureWakeupCost(rounds);
  if (!c.ok()) {
    std::fprintf(stderr, "wakeup_bench: %s\n", c.status().ToString().c_str());
    return 1;
  }
  std::printf("system call: %.2f us CPU\n", c->syscall_us);
  std::printf("wake-up, same CPU: %.2f us CPU, %.2f us wall\n", c->same_cpu_us, c->same_cpu_wall_us);
  if (!c->other_cpu_us) {
    std::printf("wake-up, other CPU: skipped (one CPU usable)\n");
    return 0;
  }
  std::printf("wake-up, other CPU: %.2f us CPU, %.2f us wall (%.1fx the same CPU's CPU)\n",
              *c->other_cpu_us, c->other_cpu_wall_us.value_or(0), *c->other_cpu_us / c->same_cpu_us);
  return 0;
}
