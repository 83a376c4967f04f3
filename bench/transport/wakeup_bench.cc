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
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

double CpuMicros() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
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

// Blocks until `fd` has a token (at most a second), then takes it.
bool Take(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (poll(&p, 1, 1000) != 1) return false;
  uint64_t v = 0;
  return read(fd, &v, sizeof(v)) == sizeof(v);
}

bool Give(int fd) {
  const uint64_t one = 1;
  return write(fd, &one, sizeof(one)) == sizeof(one);
}

struct Row {
  bool ok = false;
  double cpu_us = 0;   // per wake-up
  double wall_us = 0;  // per wake-up
};

Row PingPong(int cpu_a, int cpu_b, int rounds) {
  const int to_b = eventfd(0, EFD_CLOEXEC), to_a = eventfd(0, EFD_CLOEXEC);
  Row row;
  if (to_b < 0 || to_a < 0) return row;
  std::atomic<bool> b_ok{true};
  const double cpu0 = CpuMicros(), wall0 = WallMicros();
  std::thread b([&] {
    if (!Pin(cpu_b)) b_ok = false;
    for (int i = 0; i < rounds && b_ok; ++i) {
      if (!Take(to_b) || !Give(to_a)) b_ok = false;
    }
  });
  bool a_ok = Pin(cpu_a);
  for (int i = 0; i < rounds && a_ok; ++i) {
    a_ok = Give(to_b) && Take(to_a);
  }
  b.join();
  const double cpu = CpuMicros() - cpu0, wall = WallMicros() - wall0;
  close(to_b);
  close(to_a);
  row.ok = a_ok && b_ok;
  row.cpu_us = cpu / (2.0 * rounds);
  row.wall_us = wall / (2.0 * rounds);
  return row;
}

}  // namespace

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
  // The CPUs this process may use: the rows pin to the first two of them.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    std::fprintf(stderr, "wakeup_bench: no CPU to run on\n");
    return 1;
  }
  std::printf("wakeup_bench: %d passes each way, %zu CPUs usable\n", rounds, cpus.size());

  const int calls = rounds * 10;
  const double cpu0 = CpuMicros(), wall0 = WallMicros();
  for (int i = 0; i < calls; ++i) syscall(SYS_getppid);
  std::printf("system call: %.2f us CPU, %.2f us wall\n", (CpuMicros() - cpu0) / calls,
              (WallMicros() - wall0) / calls);

  const Row same = PingPong(cpus[0], cpus[0], rounds);
  if (!same.ok) {
    std::fprintf(stderr, "wakeup_bench: a token was lost (same CPU)\n");
    return 1;
  }
  std::printf("wake-up, same CPU: %.2f us CPU, %.2f us wall\n", same.cpu_us, same.wall_us);
  if (cpus.size() < 2) {
    std::printf("wake-up, other CPU: skipped (one CPU usable)\n");
    return 0;
  }
  const Row other = PingPong(cpus[0], cpus[1], rounds);
  if (!other.ok) {
    std::fprintf(stderr, "wakeup_bench: a token was lost (other CPU)\n");
    return 1;
  }
  std::printf("wake-up, other CPU: %.2f us CPU, %.2f us wall (%.1fx the same CPU's CPU)\n",
              other.cpu_us, other.wall_us, other.cpu_us / same.cpu_us);
  return 0;
}
