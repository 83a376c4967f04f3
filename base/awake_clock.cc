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

// Raises `a` to `v` unless it is already there or higher.
void RaiseTo(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_release,
                                             std::memory_order_relaxed)) {
  }
}

}  // namespace

AwakeClock::AwakeClock(const Clock& source, AwakeClockOptions options, bool watch)
    : source_(source), options_(options), last_read_ns_(source.NowNanos()) {
  if (watch) StartWatcher();
}

AwakeClock::~AwakeClock() {
  stopping_.store(true, std::memory_order_relaxed);
  if (watcher_.joinable()) watcher_.join();
}

absl::Duration AwakeClock::Now() const {
  if (need_watcher_.load(std::memory_order_relaxed) &&
      need_watcher_.exchange(false, std::memory_order_acq_rel)) {
    // The time since the fork was nobody's to watch: not a pause.
    RaiseTo(last_read_ns_, source_.NowNanos());
    StartWatcher();
  }
  // A read whose source time may be from before a pause that another
  // thread left out meanwhile sees paused_ns_ change, and reads again; the
  // last try holds the mutex, under which paused_ns_ cannot change.
  constexpr int kTries = 3;
  for (int attempt = 1;; ++attempt) {
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    if (attempt == kTries) lock.lock();
    const int64_t paused = paused_ns_.load(std::memory_order_acquire);
    const int64_t t = source_.NowNanos();
    const int64_t last = last_read_ns_.load(std::memory_order_acquire);
    if (t - last > Ns(options_.pause_threshold)) {
      if (!lock.owns_lock()) lock.lock();
      // The read that finds a pause is the first after it: the rest of the
      // process follows from its time.
      if (NoteGap(t)) return absl::Nanoseconds(t - paused_ns_.load(std::memory_order_relaxed));
    } else if (t - last >= kNoteEveryNs) {
      RaiseTo(last_read_ns_, t);
    }
    if (paused_ns_.load(std::memory_order_acquire) == paused) return absl::Nanoseconds(t - paused);
  }
}

bool AwakeClock::NoteGap(int64_t t) const {
  const int64_t gap = t - last_read_ns_.load(std::memory_order_relaxed);
  const bool pause = gap > Ns(options_.pause_threshold);
  if (pause) {
    // Published before last_read_ns_ passes the pause (release below).
    paused_ns_.store(paused_ns_.load(std::memory_order_relaxed) + gap -
                         Ns(options_.watch_period),
                     std::memory_order_release);
    pauses_.fetch_add(1, std::memory_order_relaxed);
  }
  RaiseTo(last_read_ns_, t);
  return pause;
}

absl::Duration AwakeClock::paused() const {
  return absl::Nanoseconds(paused_ns_.load(std::memory_order_acquire));
}

uint64_t AwakeClock::pauses() const { return pauses_.load(std::memory_order_relaxed); }

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
