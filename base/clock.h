// A monotonic clock that tests can fake.
//
//   Clock& clock = RealClock();          // production
//   FakeClock fake;  fake.Advance(absl::Milliseconds(5));   // tests
//   Deadline d(clock, absl::Seconds(1));
//   while (!d.Expired()) { ... }
//
// Code that waits or times out takes a Clock& so that a test can drive time
// by hand instead of sleeping. Time values are absl::Duration since an
// arbitrary epoch (the clock's start), never wall time.
#ifndef NETFOLD_BASE_CLOCK_H_
#define NETFOLD_BASE_CLOCK_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace netfold {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time since this clock's epoch. Never decreases. Thread-safe.
  virtual absl::Duration Now() const = 0;
  int64_t NowNanos() const { return absl::ToInt64Nanoseconds(Now()); }
};

// CLOCK_MONOTONIC. The returned object lives forever. Thread-safe.
Clock& RealClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Duration start = absl::ZeroDuration())
      : nanos_(absl::ToInt64Nanoseconds(start)) {}
  absl::Duration Now() const override {
    return absl::Nanoseconds(nanos_.load(std::memory_order_acquire));
  }
  // Moves time forward by `d` (negative durations are ignored: monotonic).
  void Advance(absl::Duration d);

 private:
  std::atomic<int64_t> nanos_;
};

// A clock for one thread's hot path: it reads `inner` once every
// `calls_per_reading` calls, and at the first call after Refresh(); the
// calls in between get that reading again. A reading is so at most that
// many calls, or one Refresh, old: for measurements that need no more
// (a switch's latency histogram), where reading the real clock once per
// message was a few per cent of the work (docs/performance.md). Monotonic
// if `inner` is. One thread only, unlike other clocks.
class CoarseClock : public Clock {
 public:
  CoarseClock(const Clock& inner, int calls_per_reading)
      : inner_(inner), calls_per_reading_(std::max(calls_per_reading, 1)) {}
  absl::Duration Now() const override {
    if (calls_left_ <= 0) {
      reading_ = inner_.Now();
      calls_left_ = calls_per_reading_;
    }
    --calls_left_;
    return reading_;
  }
  // The next Now() reads `inner`.
  void Refresh() { calls_left_ = 0; }

 private:
  const Clock& inner_;
  const int calls_per_reading_;
  mutable int calls_left_ = 0;
  mutable absl::Duration reading_;
};

// A point in time on a given clock after which a wait gives up.
class Deadline {
 public:
  Deadline(const Clock& clock, absl::Duration timeout)
      : clock_(&clock), at_(clock.Now() + timeout) {}
  bool Expired() const { return clock_->Now() >= at_; }
  // Time left, never negative.
  absl::Duration Remaining() const {
    absl::Duration left = at_ - clock_->Now();
    return left < absl::ZeroDuration() ? absl::ZeroDuration() : left;
  }
  absl::Duration at() const { return at_; }

 private:
  const Clock* clock_;
  absl::Duration at_;
};

}  // namespace netfold

#endif  // NETFOLD_BASE_CLOCK_H_
