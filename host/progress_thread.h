// The host behaves like a NIC while the application computes. A RoCE NIC
// acknowledges RC packets, takes multicast into posted buffers and answers
// retransmissions whether or not the CPU is inside the library; netfold's
// soft engine is code, so something has to run it while the application is
// away. This is that something: one thread per context that
//
// - does nothing while the application is inside the library (the
//   application's own thread drives the data path then, so the fast path
//   of a collective is the same code as without the thread);
// - takes over once the application has been out of the library for
//   `takeover_after`, and then drives the data path (acknowledgements,
//   retransmissions, results into their buffers, the next chunks of an
//   operation in flight) until the application comes back, sleeping in the
//   kernel between packets and timers;
// - hands the data path back within one wake-up when the application
//   enters the library again.
//
// The data path is guarded by one lock: the application holds it inside
// the library (Inside), the thread while it drives. A call that waits for
// other processes (an out-of-band exchange, the manager) steps outside for
// the wait (Outside), so that the thread can drive meanwhile.
//
//   ProgressThread progress({}, [&](absl::Duration t) { path.Progress(t); },
//                           [&] { path.Wake(); });
//   progress.Start();
//   { ProgressThread::Inside in(progress);  ...Start, Wait...  }   // the application
//
// While idle it costs nothing: it sleeps in the data path's epoll until a
// packet or a timer. While the application is active it costs few
// wake-ups: between short calls it looks every 1 to 8 `takeover_after`
// whether the application has left; once one call has lasted
// `takeover_after` it parks, and then the kernel wakes it (a timer the
// application arms when it leaves and disarms when it comes back, two
// system calls a call) only when the application stays away, so back to
// back long collectives do not wake it at all. With `enabled` false there
// is no thread and Inside only takes the lock: progress happens inside
// library calls only (NETFOLD_PROGRESS_THREAD=0; docs/host.md says what
// that gives up).
//
// fork(): the thread does not exist in a child process; a child must not
// use the context (InForkedChild() says whether this process is such a
// child), and may exec or exit.
//
// Thread-safety: every member may be called from any thread. Inside and
// Outside nest (a thread already inside does not take the lock again).
#ifndef NETFOLD_HOST_PROGRESS_THREAD_H_
#define NETFOLD_HOST_PROGRESS_THREAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace netfold::host {

struct ProgressThreadOptions {
  bool enabled = true;
  // The application out of the library this long: the thread drives.
  absl::Duration takeover_after = absl::Milliseconds(1);
  // The longest the thread waits in one drive (it returns earlier for
  // packets, timers and Wake).
  absl::Duration max_wait = absl::Seconds(1);
};

struct ProgressThreadStats {
  uint64_t takeovers = 0;  // times the thread took the data path over
  uint64_t drives = 0;     // drive calls it made
  uint64_t wakeups = 0;    // times it woke while waiting for the application to leave
  uint64_t parks = 0;      // times it parked for a long call
};

class ProgressThread {
 public:
  // `drive(timeout)` moves the data path, waiting at most `timeout`; it is
  // called with the lock held. `wake()` makes a drive waiting in another
  // thread return soon; it is called from any thread without the lock.
  ProgressThread(const ProgressThreadOptions& options,
                 std::function<void(absl::Duration)> drive, std::function<void()> wake);
  ~ProgressThread();  // Stop()
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Starts the thread (if enabled). Once.
  void Start();
  // Stops and joins it (idempotent; in a fork()ed child it only forgets it).
  void Stop();

  // The calling thread is inside the library for the scope's lifetime.
  class Inside {
   public:
    explicit Inside(ProgressThread& p) : p_(p) { p_.Enter(); }
    ~Inside() { p_.Leave(); }
    Inside(const Inside&) = delete;
    Inside& operator=(const Inside&) = delete;

   private:
    ProgressThread& p_;
  };
  // Inside, the calling thread waits for others for the scope's lifetime
  // (the lock is released; the thread may drive).
  class Outside {
   public:
    explicit Outside(ProgressThread& p);
    ~Outside();
    Outside(const Outside&) = delete;
    Outside& operator=(const Outside&) = delete;

   private:
    ProgressThread& p_;
    int depth_;
  };

  // Called inside: another application thread is waiting to come in (it
  // wants to start or finish an operation of its own).
  bool OthersWaiting() const { return inside_.load() > 1; }

  // The calling thread drives the data path for up to `timeout`, inside
  // (netfold_progress: a thread of the application's own that moves the
  // operations while others compute). Another application thread entering
  // for a call meanwhile wakes it as it wakes the progress thread, so a
  // call never waits for the drive longer than a wake-up; another DriveFor
  // waits for the lock instead.
  void DriveFor(absl::Duration timeout);

  ProgressThreadStats stats() const;
  bool running() const { return thread_.joinable(); }

  // True in a child of fork() of a process that had a progress thread.
  static bool InForkedChild();

 private:
  void Enter();
  void Leave();
  void Run();
  // Waits until the application has been away for takeover_after (false
  // when stopping).
  bool AwaitAbsence();
  // Parked while one long call lasts: returns when the application has
  // left (the timer Leave arms), when its calls have become short, or
  // when stopping.
  void Park();
  // Sleeps until `timeout` passes or the timer fires (then clears it).
  void Sleep(absl::Duration timeout);
  // The timer fires `after` from now (at least 1 us); disarmed.
  void Arm(absl::Duration after);
  void Disarm();

  const ProgressThreadOptions options_;
  const std::function<void(absl::Duration)> drive_;
  const std::function<void()> wake_;

  absl::Mutex mu_;                        // the data path lock
  std::atomic<int> inside_{0};            // application threads inside
  std::atomic<bool> driving_{false};      // the thread holds mu_ and drives
  std::atomic<int> app_driving_{0};       // application threads driving in DriveFor
  std::atomic<int> calls_inside_{0};      // application threads inside, not for DriveFor
  // True while the calling thread is in DriveFor.
  static bool& DrivingHere();
  std::atomic<int64_t> last_leave_ns_{0};
  std::atomic<int64_t> last_enter_ns_{0};
  std::atomic<bool> last_call_long_{false};  // the last call lasted takeover_after
  std::atomic<uint64_t> takeovers_{0};
  std::atomic<uint64_t> drives_{0};
  std::atomic<uint64_t> wakeups_{0};
  std::atomic<uint64_t> parks_{0};

  // The thread waits for the application on a CLOCK_MONOTONIC timerfd
  // (-1 if none could be made: it then looks every takeover_after). Parked,
  // it sleeps until the timer fires: Leave arms it, Enter disarms it.
  // Calls have become short (this many in a row while parked, each arming
  // the timer): Leave wakes the thread to stop parking.
  static constexpr int kShortCallsToUnpark = 16;
  int timer_fd_ = -1;
  std::atomic<bool> parked_{false};
  std::atomic<bool> armed_{false};
  std::atomic<bool> unpark_{false};
  std::atomic<int> short_calls_{0};

  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_PROGRESS_THREAD_H_
