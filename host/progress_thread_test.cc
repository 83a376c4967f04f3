// Tests of the progress thread (host/progress_thread.h) with a fake data
// path: a drive that waits on a condition until woken, counting its calls.
#include "host/progress_thread.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace netfold::host {
namespace {

// A data path whose Progress waits (up to its timeout) until woken.
class FakePath {
 public:
  void Progress(absl::Duration timeout) {
    EXPECT_FALSE(driving_.exchange(true)) << "two threads drove the data path at once";
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&woken_), timeout);
    woken_ = false;
    ++drives_;
    driving_ = false;
  }
  void Wake() {
    absl::MutexLock lock(&mu_);
    woken_ = true;
  }
  int drives() {
    absl::MutexLock lock(&mu_);
    return drives_;
  }
  // What the application does inside the library: it drives too.
  void AppDrives() { Progress(absl::ZeroDuration()); }
  // Some thread is in Progress now.
  bool driving() const { return driving_.load(); }

 private:
  absl::Mutex mu_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  int drives_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> driving_{false};
};

ProgressThreadOptions Fast() {
  ProgressThreadOptions o;
  o.takeover_after = absl::Milliseconds(2);
  o.max_wait = absl::Seconds(30);  // only Wake ends a drive early
  return o;
}

bool WaitFor(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(ProgressThread, TakesOverWhenTheApplicationIsAwayAndHandsBackAtOnce) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  ASSERT_TRUE(WaitFor([&] { return progress.stats().takeovers >= 1; }));
  // The thread now waits in a 30 s drive: entering must wake it, not wait.
  // Away long enough for a takeover each time; on a loaded machine the
  // thread may not run within one absence, so the entries go on (at most
  // 10 s) until it took over again.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  for (int i = 0; i < 20 || (progress.stats().takeovers < 2 && absl::Now() < end); ++i) {
    const absl::Time start = absl::Now();
    {
      ProgressThread::Inside inside(progress);
      path.AppDrives();
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "entry " << i;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GE(progress.stats().takeovers, 2u);
  progress.Stop();
}

TEST(ProgressThread, DoesNotDriveWhileTheApplicationIsInside) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  {
    ProgressThread::Inside inside(progress);
    const uint64_t before = progress.stats().drives;
    absl::SleepFor(absl::Milliseconds(50));  // inside, 25 takeover periods
    EXPECT_EQ(progress.stats().drives, before);
  }
  progress.Stop();
}

TEST(ProgressThread, OutsideLetsTheThreadDriveDuringAWait) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  ProgressThread::Inside inside(progress);
  const uint64_t before = progress.stats().takeovers;
  {
    ProgressThread::Outside outside(progress);  // e.g. an out-of-band barrier
    EXPECT_TRUE(WaitFor([&] { return progress.stats().takeovers > before; }));
  }
  // Back inside: the thread let go (Inside and Outside nest).
  {
    ProgressThread::Inside nested(progress);
    path.AppDrives();
  }
  progress.Stop();
}

TEST(ProgressThread, CallsAtEveryPaceNeverDriveTogetherWithTheThread) {
  FakePath path;  // fails the test if two threads drive at once
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  // Back to back, then with gaps around the takeover time, from two
  // application threads: every hand-over races with the thread.
  auto caller = [&](int seed) {
    for (int i = 0; i < 300; ++i) {
      {
        ProgressThread::Inside inside(progress);
        path.AppDrives();
      }
      if ((i + seed) % 3 != 0) absl::SleepFor(absl::Microseconds((i * 37 + seed) % 4000));
    }
  };
  std::thread a(caller, 1), b(caller, 2);
  a.join();
  b.join();
  // And after all that racing it still takes over when they are gone
  // (takeovers counts a takeover when it starts: it may be the one under
  // way since the race).
  EXPECT_TRUE(WaitFor([&] { return progress.stats().takeovers >= 1; }));
  progress.Stop();
}

TEST(ProgressThread, BackToBackLongCallsDoNotWakeTheThread) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  // Calls of 10 ms (5 takeover periods) with 0.1 ms between them, as a
  // loop of large collectives: after the first call the thread parks and
  // the calls' timer is disarmed before it fires each time.
  auto call = [&] {
    ProgressThread::Inside inside(progress);
    path.AppDrives();
    absl::SleepFor(absl::Milliseconds(10));
  };
  {
    ProgressThread::Inside inside(progress);
    ASSERT_TRUE(WaitFor([&] { return progress.stats().parks >= 1; }));
  }
  call();
  const ProgressThreadStats before = progress.stats();
  for (int i = 0; i < 40; ++i) {
    call();
    absl::SleepFor(absl::Microseconds(100));
  }
  const ProgressThreadStats after = progress.stats();
  // A gap of 0.1 ms may stretch past 2 ms on a loaded machine, and then the
  // thread rightly takes over once: a few, not one or two a call.
  EXPECT_LE(after.wakeups - before.wakeups, 8u);
  EXPECT_LE(after.takeovers - before.takeovers, 4u);
  progress.Stop();
}

TEST(ProgressThread, TakesOverSoonAfterALongCall) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  for (int i = 0; i < 5; ++i) {
    {
      ProgressThread::Inside inside(progress);
      path.AppDrives();
      // Long enough for the thread to park (it looks within 8 ms).
      ASSERT_TRUE(WaitFor([&] { return progress.stats().parks > static_cast<uint64_t>(i); }));
    }
    const uint64_t before = progress.stats().takeovers;
    const absl::Time left = absl::Now();
    ASSERT_TRUE(WaitFor([&] { return progress.stats().takeovers > before; }));
    // The timer fires 2 ms after the leave; the parked thread's own look
    // would come after 1 s.
    EXPECT_LT(absl::Now() - left, absl::Milliseconds(500)) << "call " << i;
  }
  progress.Stop();
}

TEST(ProgressThread, ShortCallsAfterLongOnesLeaveThePark) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  {
    ProgressThread::Inside inside(progress);
    ASSERT_TRUE(WaitFor([&] { return progress.stats().parks >= 1; }));
  }
  // Short calls back to back: each would arm and disarm the timer while
  // the thread stays parked (waking once a second); within its next look
  // it goes back to looking every few takeover periods instead.
  const uint64_t before = progress.stats().wakeups;
  const absl::Time end = absl::Now() + absl::Milliseconds(2500);
  uint64_t calls = 0;
  while (absl::Now() < end) {
    ProgressThread::Inside inside(progress);
    path.AppDrives();
    ++calls;
  }
  EXPECT_GT(calls, 100u);
  // Parked throughout: 2 or 3 looks. Back to looking after one: a look
  // every 2-16 ms for the rest.
  EXPECT_GT(progress.stats().wakeups - before, 20u);
  progress.Stop();
}

// netfold_progress: an application thread drives for as long as it asked
// (here 30 s, until woken); another that enters meanwhile wakes it and gets
// in at once, with the thread or without it.
TEST(ProgressThread, AnApplicationThreadThatDrivesIsWokenByAnotherEntering) {
  for (const bool enabled : {true, false}) {
    SCOPED_TRACE(enabled ? "with the thread" : "without");
    FakePath path;
    ProgressThreadOptions o = Fast();
    o.enabled = enabled;
    o.takeover_after = absl::Seconds(60);  // the drive seen is the application's
    ProgressThread progress(o, [&](absl::Duration t) { path.Progress(t); }, [&] { path.Wake(); });
    progress.Start();
    std::thread driver([&] { progress.DriveFor(absl::Seconds(30)); });
    ASSERT_TRUE(WaitFor([&] { return path.driving(); }));
    const absl::Time start = absl::Now();
    {
      ProgressThread::Inside inside(progress);
      EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "kept waiting behind the drive";
    }
    driver.join();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

// Two application threads that drive in turn (two torch groups' completion
// threads) queue for the data path: neither cuts the other's wait short,
// which would make both spin.
TEST(ProgressThread, TwoApplicationThreadsThatDriveTakeTurns) {
  FakePath path;
  ProgressThreadOptions o = Fast();
  o.takeover_after = absl::Seconds(60);
  ProgressThread progress(o, [&](absl::Duration t) { path.Progress(t); }, [&] { path.Wake(); });
  progress.Start();
  std::atomic<bool> stop{false};
  auto driver = [&] {
    while (!stop.load()) progress.DriveFor(absl::Milliseconds(2));
  };
  std::thread a(driver), b(driver);
  absl::SleepFor(absl::Milliseconds(300));
  stop = true;
  a.join();
  b.join();
  // Waits of 2 ms one after the other: about 150 in 300 ms, fewer on a
  // loaded machine; thousands if each cut the other's short.
  EXPECT_LT(path.drives(), 400);
  EXPECT_GT(path.drives(), 0);
}

TEST(ProgressThread, DisabledMeansNoThreadButTheLockStillHolds) {
  FakePath path;
  ProgressThreadOptions o = Fast();
  o.enabled = false;
  ProgressThread progress(o, [&](absl::Duration t) { path.Progress(t); }, [&] { path.Wake(); });
  progress.Start();
  EXPECT_FALSE(progress.running());
  std::atomic<int> inside_together{0}, most{0};
  auto caller = [&] {
    for (int i = 0; i < 200; ++i) {
      ProgressThread::Inside inside(progress);
      most = std::max(most.load(), ++inside_together);
      path.AppDrives();
      --inside_together;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(most.load(), 1) << "two application threads were inside at once";
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(progress.stats().takeovers, 0u);
}

TEST(ProgressThread, AForkedChildKnowsAndExitsCleanly) {
  FakePath path;
  ProgressThread progress(Fast(), [&](absl::Duration t) { path.Progress(t); },
                          [&] { path.Wake(); });
  progress.Start();
  ASSERT_TRUE(WaitFor([&] { return progress.stats().takeovers >= 1; }));
  EXPECT_FALSE(ProgressThread::InForkedChild());
  const pid_t pid = fork();
  if (pid == 0) {
    // The thread does not exist here: Stop must not wait for it.
    const bool knows = ProgressThread::InForkedChild();
    progress.Stop();
    _exit(knows ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(ProgressThread::InForkedChild());
  progress.Stop();
}

}  // namespace
}  // namespace netfold::host
