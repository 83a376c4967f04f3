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
// Non-decreasing and thread-safe. A read takes no lock: it loads two
// shared values and writes one at most once per `kNoteEveryNs` of its
// source (a read came at least that often, so a pause is measured to
// within it); only the read that finds a pause takes the mutex. The data
// path reads it per packet, where a mutex per read was 3-5 % of a rank's
// CPU (docs/performance.md, "The awake clock without its mutex"). A
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

  // A read notes its time when the last note is at least this old.
  static constexpr int64_t kNoteEveryNs = 1'000'000;

  // Leaves out the gap before `t` if it is a pause (true); under mu_.
  bool NoteGap(int64_t t) const;

  const Clock& source_;
  const AwakeClockOptions options_;
  mutable std::mutex mu_;  // serialises finding pauses
  // The source's time at a recent read: no read has come more than
  // kNoteEveryNs after it. Only increases.
  mutable std::atomic<int64_t> last_read_ns_;
  // Left out so far. Only increases, and only under mu_, before
  // last_read_ns_ moves past the pause: a read that sees the new
  // last_read_ns_ sees it too.
  mutable std::atomic<int64_t> paused_ns_{0};
  mutable std::atomic<uint64_t> pauses_{0};
  mutable std::atomic<bool> stopping_{false};
  mutable std::atomic<bool> need_watcher_{false};  // forked: start one at the next read
  mutable std::thread watcher_;
};

}  // namespace netfold

#endif  // NETFOLD_BASE_AWAKE_CLOCK_H_
