#include "host/progress_thread.h"

#include <poll.h>
#include <pthread.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/log.h"

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

// The thread never looks more often than this, whatever takeover_after says.
constexpr absl::Duration kLeastLook = absl::Microseconds(50);

}  // namespace

bool ProgressThread::InForkedChild() { return g_forked_child.load(std::memory_order_relaxed); }

ProgressThread::ProgressThread(const ProgressThreadOptions& options,
                               std::function<void(absl::Duration)> drive,
                               std::function<void()> wake)
    : options_(options), drive_(std::move(drive)), wake_(std::move(wake)) {
  last_leave_ns_.store(Now(), std::memory_order_relaxed);
}

ProgressThread::~ProgressThread() {
  Stop();
  if (timer_fd_ >= 0) close(timer_fd_);
}

void ProgressThread::Start() {
  if (!options_.enabled || thread_.joinable() || stop_.HasBeenNotified()) return;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, MarkForkedChild); });
  g_had_progress_thread.store(true, std::memory_order_relaxed);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) {
    NETFOLD_LOG(kWarning) << "progress thread: no timerfd (" << std::strerror(errno)
                          << "): it looks every takeover period during long calls";
  }
  thread_ = std::thread([this] { Run(); });
}

void ProgressThread::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (!thread_.joinable()) return;
  if (InForkedChild()) {
    // The thread exists only in the parent: joining it here would wait
    // forever, and destroying a joinable std::thread aborts. Forget it.
    // (Nor may the child touch the timer: the parent shares it.)
    new std::thread(std::move(thread_));
    return;
  }
  wake_();
  Arm(absl::ZeroDuration());  // a parked or sleeping thread looks at once
  thread_.join();
}

void ProgressThread::Arm(absl::Duration after) {
  if (timer_fd_ < 0) return;
  itimerspec when{};
  when.it_value = absl::ToTimespec(std::max(after, absl::Microseconds(1)));
  (void)timerfd_settime(timer_fd_, 0, &when, nullptr);
}

void ProgressThread::Disarm() {
  if (timer_fd_ < 0) return;
  const itimerspec never{};
  (void)timerfd_settime(timer_fd_, 0, &never, nullptr);
}

void ProgressThread::Sleep(absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(std::clamp(timeout, absl::ZeroDuration(), absl::Seconds(1)));
  pollfd fd{.fd = timer_fd_, .events = POLLIN, .revents = 0};
  // EINTR or a timeout: the caller looks again either way.
  if (ppoll(&fd, timer_fd_ >= 0 ? 1 : 0, &ts, nullptr) > 0 && (fd.revents & POLLIN) != 0) {
    uint64_t expirations = 0;
    (void)!read(timer_fd_, &expirations, sizeof(expirations));  // clears it (EAGAIN: disarmed since)
  }
  wakeups_.fetch_add(1, std::memory_order_relaxed);
}

void ProgressThread::Enter() {
  if (Depth(this)++ > 0) return;
  inside_.fetch_add(1);  // seq_cst, paired with Run's driving_ store
  const bool to_drive = DrivingHere();
  if (!to_drive) calls_inside_.fetch_add(1);  // seq_cst, paired with DriveFor's app_driving_
  last_enter_ns_.store(Now(), std::memory_order_relaxed);
  // An application thread in DriveFor gives way to a call, not to another
  // DriveFor: that one queues for the lock (two would cut each other short
  // at every turn and spin).
  if (driving_.load() || (!to_drive && app_driving_.load() > 0)) wake_();
  // Back before the timer Leave armed fired: the parked thread sleeps on.
  if (armed_.load(std::memory_order_relaxed) && armed_.exchange(false)) Disarm();
  mu_.Lock();
}

void ProgressThread::Leave() {
  if (--Depth(this) > 0) return;
  const int64_t now = Now();
  const bool long_call = now - last_enter_ns_.load(std::memory_order_relaxed) >=
                         absl::ToInt64Nanoseconds(options_.takeover_after);
  last_leave_ns_.store(now, std::memory_order_relaxed);
  last_call_long_.store(long_call, std::memory_order_relaxed);
  if (!DrivingHere()) calls_inside_.fetch_sub(1);
  mu_.Unlock();
  inside_.fetch_sub(1);  // seq_cst, paired with Park's parked_ store
  if (parked_.load()) {
    if (long_call) {
      short_calls_.store(0, std::memory_order_relaxed);
    } else if (short_calls_.fetch_add(1, std::memory_order_relaxed) + 1 >= kShortCallsToUnpark) {
      // Calls have become short: each would pay for the timer. Wake the
      // thread now to go back to looking now and then.
      short_calls_.store(0, std::memory_order_relaxed);
      unpark_.store(true);
      armed_.store(true);
      Arm(absl::ZeroDuration());
      return;
    }
    // The parked thread learns that the application left only if it stays
    // away: the timer fires then, and not at all if it comes back first.
    armed_.store(true);
    Arm(options_.takeover_after);
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

bool& ProgressThread::DrivingHere() {
  thread_local bool driving = false;
  return driving;
}

void ProgressThread::DriveFor(absl::Duration timeout) {
  if (Depth(this) > 0) {  // called from inside: the caller holds the lock
    drive_(absl::ZeroDuration());
    return;
  }
  DrivingHere() = true;
  {
    Inside inside(*this);
    app_driving_.fetch_add(1);  // seq_cst, paired with Enter's calls_inside_
    // A call that entered before the mark could be seen was not told to
    // wake this thread: do not wait in front of it. Other drivers are not
    // calls: they queue for the lock.
    if (calls_inside_.load() > 0) timeout = absl::ZeroDuration();
    drive_(timeout);
    app_driving_.fetch_sub(1);
  }
  DrivingHere() = false;
}

bool ProgressThread::AwaitAbsence() {
  const absl::Duration takeover = options_.takeover_after;
  const int64_t takeover_ns = absl::ToInt64Nanoseconds(takeover);
  // While the application keeps coming back, look less often (up to 8
  // times takeover_after): a busy caller costs the thread few wake-ups.
  const absl::Duration first_look = std::max(takeover, kLeastLook);
  absl::Duration interval = first_look;
  while (!stop_.HasBeenNotified()) {
    if (inside_.load() > 0) {
      // One long call (a large operation, a slow peer): park rather than
      // look again and again. Short ones: look again later.
      if (Now() - last_enter_ns_.load(std::memory_order_relaxed) >= takeover_ns) {
        Park();
      } else {
        Sleep(interval);
        interval = std::min(interval * 2, 8 * first_look);
      }
      continue;
    }
    const int64_t away = Now() - last_leave_ns_.load(std::memory_order_relaxed);
    if (away >= takeover_ns) return true;
    Sleep(std::max(interval, absl::Nanoseconds(takeover_ns - away)));
    interval = std::min(interval * 2, 8 * first_look);
  }
  return false;
}

void ProgressThread::Park() {
  parks_.fetch_add(1, std::memory_order_relaxed);
  parked_.store(true);  // seq_cst, paired with Leave's inside_ update
  // Without a timer nobody wakes the thread when the application leaves:
  // it looks every takeover period instead.
  const absl::Duration look =
      timer_fd_ >= 0 ? absl::Seconds(1) : std::max(options_.takeover_after, kLeastLook);
  while (inside_.load() > 0 && !stop_.HasBeenNotified() && !unpark_.exchange(false)) {
    Sleep(look);
  }
  parked_.store(false);
  unpark_.store(false);
  if (armed_.exchange(false)) Disarm();
}

void ProgressThread::Run() {
  while (AwaitAbsence()) {
    {
      absl::MutexLock lock(&mu_);
      driving_.store(true);  // seq_cst, paired with Enter's inside_ update
      takeovers_.fetch_add(1, std::memory_order_relaxed);
      while (inside_.load() == 0 && !stop_.HasBeenNotified()) {
        drive_(options_.max_wait);
        drives_.fetch_add(1, std::memory_order_relaxed);
      }
      driving_.store(false);
    }
    // The application came back after an absence. If its calls have been
    // long (waits of large operations), this one likely is too: park at
    // once rather than look again a takeover period later. After short
    // calls, look now and then as before: a parked thread would learn of
    // every absence at once, and take over for each.
    if (last_call_long_.load(std::memory_order_relaxed)) Park();
  }
}

ProgressThreadStats ProgressThread::stats() const {
  return {takeovers_.load(std::memory_order_relaxed), drives_.load(std::memory_order_relaxed),
          wakeups_.load(std::memory_order_relaxed), parks_.load(std::memory_order_relaxed)};
}

}  // namespace netfold::host
