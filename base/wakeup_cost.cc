#include "base/wakeup_cost.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace netfold {
namespace {

double CpuMicros() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

double WallMicros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Waits for a token on `fd` (at most a second) and takes it.
bool Take(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 1000) != 1) return false;
  uint64_t v = 0;
  return read(fd, &v, sizeof(v)) == static_cast<ssize_t>(sizeof(v));
}

bool Give(int fd) {
  const uint64_t one = 1;
  return write(fd, &one, sizeof(one)) == static_cast<ssize_t>(sizeof(one));
}

struct PassCost {
  double cpu_us = 0;
  double wall_us = 0;
};

// The calling thread keeps its affinity: the passes run on a thread of
// their own pinned to `cpu_a`, the other to `cpu_b`.
absl::StatusOr<PassCost> PingPong(int cpu_a, int cpu_b, int rounds) {
  const int to_b = eventfd(0, EFD_CLOEXEC);
  const int to_a = eventfd(0, EFD_CLOEXEC);
  if (to_b < 0 || to_a < 0) {
    if (to_b >= 0) close(to_b);
    if (to_a >= 0) close(to_a);
    return absl::ResourceExhaustedError("wake-up cost: no eventfd");
  }
  std::atomic<bool> a_ok{true}, b_ok{true}, pinned{true};
  const double cpu0 = CpuMicros(), wall0 = WallMicros();
  std::thread b([&] {
    if (!Pin(cpu_b)) pinned = b_ok = false;
    for (int i = 0; i < rounds && b_ok; ++i) {
      if (!Take(to_b) || !Give(to_a)) b_ok = false;
    }
  });
  std::thread a([&] {
    if (!Pin(cpu_a)) pinned = a_ok = false;
    for (int i = 0; i < rounds && a_ok; ++i) {
      if (!Give(to_b) || !Take(to_a)) a_ok = false;
    }
  });
  a.join();
  b.join();
  const double cpu = CpuMicros() - cpu0, wall = WallMicros() - wall0;
  close(to_b);
  close(to_a);
  if (!pinned) {
    return absl::FailedPreconditionError(
        absl::StrFormat("wake-up cost: a thread could not be pinned to CPU %d or %d", cpu_a, cpu_b));
  }
  if (!a_ok || !b_ok) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "wake-up cost: a token waited over a second (CPUs %d and %d)", cpu_a, cpu_b));
  }
  return PassCost{cpu / (2.0 * rounds), wall / (2.0 * rounds)};
}

}  // namespace

absl::StatusOr<WakeupCost> MeasureWakeupCost(int rounds) {
  if (rounds < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("wake-up cost: %d rounds", rounds));
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) return absl::FailedPreconditionError("wake-up cost: no CPU to run on");

  WakeupCost cost;
  const int calls = rounds * 10;
  const double cpu0 = CpuMicros();
  for (int i = 0; i < calls; ++i) syscall(SYS_getppid);
  cost.syscall_us = (CpuMicros() - cpu0) / calls;

  absl::StatusOr<PassCost> same = PingPong(cpus[0], cpus[0], rounds);
  if (!same.ok()) return same.status();
  cost.same_cpu_us = same->cpu_us;
  cost.same_cpu_wall_us = same->wall_us;
  if (cpus.size() >= 2) {
    absl::StatusOr<PassCost> other = PingPong(cpus[0], cpus[1], rounds);
    if (!other.ok()) return other.status();
    cost.other_cpu_us = other->cpu_us;
    cost.other_cpu_wall_us = other->wall_us;
  }
  return cost;
}

}  // namespace netfold
