#include "base/awake_clock.h"

#include <pthread.h>

#include <algorithm>
#include <new>

#include "absl/time/clock.h"
#include "base/log.h"

namespace netfold {
namespace {

int64_t Ns(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }

AwakeClock* g_process_clock = nullptr;  // the one the fork handlers look after

}  // namespace

AwakeClock::AwakeClock(const Clock& source, AwakeClockOptions options, bool watch)
    : source_(source),
      options_(options),
      last_read_ns_(source.NowNanos()),
      last_returned_ns_(last_read_ns_) {
  if (watch) StartWatcher();
}

AwakeClock::~AwakeClock() {
  stopping_.store(true, std::memory_order_relaxed);
  if (watcher_.joinable()) watcher_.join();
}

absl::Duration AwakeClock::Now() const {
  if (need_watcher_.load(std::memory_order_relaxed) &&
      need_watcher_.exchange(false, std::memory_order_acq_rel)) {
    {
      // The time since the fork was nobody's to watch: not a pause.
      std::lock_guard<std::mutex> lock(mu_);
      last_read_ns_ = std::max(last_read_ns_, source_.NowNanos());
    }
    StartWatcher();
  }
  const int64_t t = source_.NowNanos();
  std::lock_guard<std::mutex> lock(mu_);
  if (t > last_read_ns_) {
    const int64_t gap = t - last_read_ns_;
    if (gap > Ns(options_.pause_threshold)) {
      paused_ns_ += gap - Ns(options_.watch_period);
      ++pauses_;
    }
    last_read_ns_ = t;
  }
  last_returned_ns_ = std::max(last_returned_ns_, t - paused_ns_);
  return absl::Nanoseconds(last_returned_ns_);
}

absl::Duration AwakeClock::paused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::Nanoseconds(paused_ns_);
}

uint64_t AwakeClock::pauses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pauses_;
}

void AwakeClock::StartWatcher() const {
  watcher_ = std::thread([this] { Watch(); });
}

void AwakeClock::Watch() const {
  pthread_setname_np(pthread_self(), "netfold-clock");
  absl::Duration reported = paused();
  while (!stopping_.load(std::memory_order_relaxed)) {
    absl::SleepFor(options_.watch_period);
    (void)Now();
    const absl::Duration total = paused();
    if (total > reported) {
      NETFOLD_LOG(kWarning) << "this process could not run for "
                            << absl::Trunc(total - reported, absl::Milliseconds(1))
                            << " (its machine was paused or starved): timeouts leave that time out";
      reported = total;
    }
  }
}

// The process's clock across fork(): the child has no watcher (threads are
// not copied) and may have copied the mutex locked, so the mutex is held
// across the fork and the child starts afresh at its first read.
void AwakeClock::BeforeFork() { g_process_clock->mu_.lock(); }

void AwakeClock::AfterForkInParent() { g_process_clock->mu_.unlock(); }

void AwakeClock::AfterForkInChild() {
  AwakeClock* c = g_process_clock;
  new (&c->mu_) std::mutex();
  new (&c->watcher_) std::thread();  // the parent's thread is not here to join
  c->need_watcher_.store(true, std::memory_order_relaxed);
}

Clock& ProcessAwakeClock() {
  static AwakeClock* clock = [] {
    auto* c = new AwakeClock(RealClock(), AwakeClockOptions(), /*watch=*/true);
    g_process_clock = c;
    pthread_atfork(&AwakeClock::BeforeFork, &AwakeClock::AfterForkInParent,
                   &AwakeClock::AfterForkInChild);
    return c;
  }();
  return *clock;
}

}  // namespace netfold
