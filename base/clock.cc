#include "base/clock.h"

#include <time.h>

namespace netfold {
namespace {

class MonotonicClock : public Clock {
 public:
  absl::Duration Now() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
  }
};

}  // namespace

Clock& RealClock() {
  static MonotonicClock* clock = new MonotonicClock();
  return *clock;
}

void FakeClock::Advance(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return;
  nanos_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
}

}  // namespace netfold
