#include "host/progress_thread.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace netfold::host {

namespace {

std::atomic<bool> g_had_progress_thread{false};
std::atomic<bool> g_forked_child{false};

void MarkForkedChild() {
  if (g_had_progress_thread.load(std::memory_order_relaxed)) {
    g_forked_child.store(true, std::memory_order_relaxed);
  }
}

// How deep the calling thread is inside each progress thread's scope
// (nesting: a library call that calls another).
int& Depth(const ProgressThread* p) {
  thread_local std::vector<std::pair<const ProgressThread*, int>> depths;
  for (auto& [owner, depth] : depths) {
    if (owner == p) return depth;
  }
  for (auto& entry : depths) {
    if (entry.second == 0) {  // reuse a slot no scope uses
      entry.first = p;
      return entry.second;
    }
  }
  return depths.emplace_back(p, 0).second;
}

int64_t Now() { return RealClock().NowNanos(); }

}  // namespace

bool ProgressThread::InForkedChild() { return g_forked_child.load(std::memory_order_relaxed); }

ProgressThread::ProgressThread(const ProgressThreadOptions& options,
                               std::function<void(absl::Duration)> drive,
                               std::function<void()> wake)
    : options_(options), drive_(std::move(drive)), wake_(std::move(wake)) {
  last_leave_ns_.store(Now(), std::memory_order_relaxed);
}

ProgressThread::~ProgressThread() { Stop(); }

void ProgressThread::Start() {
  if (!options_.enabled || thread_.joinable() || stop_.HasBeenNotified()) return;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, MarkForkedChild); });
  g_had_progress_thread.store(true, std::memory_order_relaxed);
  thread_ = std::thread([this] { Run(); });
}

void ProgressThread::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (!thread_.joinable()) return;
  if (InForkedChild()) {
    // The thread exists only in the parent: joining it here would wait
    // forever, and destroying a joinable std::thread aborts. Forget it.
    new std::thread(std::move(thread_));
    return;
  }
  wake_();
  {
    absl::MutexLock lock(&park_mu_);
    park_cv_.SignalAll();
  }
  thread_.join();
}

void ProgressThread::Enter() {
  if (Depth(this)++ > 0) return;
  inside_.fetch_add(1);  // seq_cst, paired with Run's driving_ store
  if (driving_.load()) wake_();
  mu_.Lock();
}

void ProgressThread::Leave() {
  if (--Depth(this) > 0) return;
  last_leave_ns_.store(Now(), std::memory_order_relaxed);
  mu_.Unlock();
  inside_.fetch_sub(1);  // seq_cst, paired with AwaitAbsence's parked_ store
  if (parked_.load()) {
    absl::MutexLock lock(&park_mu_);
    park_cv_.Signal();
  }
}

ProgressThread::Outside::Outside(ProgressThread& p) : p_(p), depth_(Depth(&p)) {
  if (depth_ == 0) return;  // not inside: nothing to release
  Depth(&p_) = 1;
  p_.Leave();
}

ProgressThread::Outside::~Outside() {
  if (depth_ == 0) return;
  p_.Enter();
  Depth(&p_) = depth_;
}

bool ProgressThread::AwaitAbsence() {
  const int64_t takeover_ns = absl::ToInt64Nanoseconds(options_.takeover_after);
  // While the application keeps coming back, look less often (up to 8
  // times takeover_after): a busy caller costs the thread few wake-ups.
  int64_t interval_ns = takeover_ns;
  while (!stop_.HasBeenNotified()) {
    if (inside_.load() > 0) {
      // A long call (a large operation, a slow peer): sleep until the
      // application leaves instead of checking again and again.
      absl::MutexLock lock(&park_mu_);
      parked_.store(true);  // seq_cst, paired with Leave's inside_ update
      while (inside_.load() > 0 && !stop_.HasBeenNotified()) {
        park_cv_.WaitWithTimeout(&park_mu_, absl::Seconds(1));
      }
      parked_.store(false);
      continue;
    }
    const int64_t away = Now() - last_leave_ns_.load(std::memory_order_relaxed);
    if (away >= takeover_ns) return true;
    stop_.WaitForNotificationWithTimeout(absl::Nanoseconds(std::max(interval_ns, takeover_ns - away)));
    interval_ns = std::min(interval_ns * 2, 8 * takeover_ns);
  }
  return false;
}

void ProgressThread::Run() {
  while (AwaitAbsence()) {
    absl::MutexLock lock(&mu_);
    driving_.store(true);  // seq_cst, paired with Enter's inside_ update
    takeovers_.fetch_add(1, std::memory_order_relaxed);
    while (inside_.load() == 0 && !stop_.HasBeenNotified()) {
      drive_(options_.max_wait);
      drives_.fetch_add(1, std::memory_order_relaxed);
    }
    driving_.store(false);
  }
}

ProgressThreadStats ProgressThread::stats() const {
  return {takeovers_.load(std::memory_order_relaxed), drives_.load(std::memory_order_relaxed)};
}

}  // namespace netfold::host
