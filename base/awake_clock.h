// A monotonic clock that leaves out the time its process could not run.
//
//   const Clock& clock = ProcessAwakeClock();   // what failure detectors use
//   Deadline d(clock, op_timeout);              // a pause does not use it up
//
// A timeout that says "the peer was silent for T" is only true if this
// process was there to hear it. When the whole machine stops (a VM paused
// or starved by its hypervisor, a suspended laptop whose monotonic clock
// still ran, every process SIGSTOPped), CLOCK_MONOTONIC jumps on resume,
// and every deadline that runs on it expires at once: each process then
// blames its peers for a silence nobody could have broken. This clock
// advances with CLOCK_MONOTONIC except across such gaps.
//
// How a gap is seen: every read of the clock notes when it happened, and a
// watcher thread reads it every `watch_period`. A gap of more than
// `pause_threshold` between two reads, by any thread, means that no thread
// of the process ran (the watcher would have read it): the gap, less the
// watcher's own period, is left out (`paused()`). The watcher also logs
// each pause, once. A shorter stall counts as time, as load is.
//
// Non-decreasing and thread-safe; a read takes an uncontended mutex. A
// process forked without exec gets its own watcher at its first read (the
// parent's is not copied into it).
#ifndef NETFOLD_BASE_AWAKE_CLOCK_H_
#define NETFOLD_BASE_AWAKE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "base/clock.h"

namespace netfold {

struct AwakeClockOptions {
  absl::Duration watch_period = absl::Milliseconds(100);
  absl::Duration pause_threshold = absl::Milliseconds(500);  // > watch_period
};

// The process's awake clock: CLOCK_MONOTONIC, watched by a thread from its
// first use. Lives forever.
Clock& ProcessAwakeClock();

class AwakeClock : public Clock {
 public:
  // Runs from `source` (not owned, outlives this). Without `watch`, only
  // the callers' own reads see gaps (a test drives them by hand).
  AwakeClock(const Clock& source, AwakeClockOptions options, bool watch);
  ~AwakeClock() override;
  AwakeClock(const AwakeClock&) = delete;
  AwakeClock& operator=(const AwakeClock&) = delete;

  absl::Duration Now() const override;
  // Time left out so far, and in how many pauses.
  absl::Duration paused() const;
  uint64_t pauses() const;

 private:
  friend Clock& ProcessAwakeClock();
  void StartWatcher() const;
  void Watch() const;
  static void BeforeFork();
  static void AfterForkInParent();
  static void AfterForkInChild();

  const Clock& source_;
  const AwakeClockOptions options_;
  mutable std::mutex mu_;
  mutable int64_t last_read_ns_;      // the source's time at the latest read
  mutable int64_t paused_ns_ = 0;     // left out so far
  mutable uint64_t pauses_ = 0;
  mutable int64_t last_returned_ns_;  // keeps Now() non-decreasing
  mutable std::atomic<bool> stopping_{false};
  mutable std::atomic<bool> need_watcher_{false};  // forked: start one at the next read
  mutable std::thread watcher_;
};

}  // namespace netfold

#endif  // NETFOLD_BASE_AWAKE_CLOCK_H_
