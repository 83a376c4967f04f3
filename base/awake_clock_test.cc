#include "base/awake_clock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"

namespace netfold {
namespace {

// Driven by hand: the test's reads are the only ones (no watcher).
class AwakeClockByHand : public ::testing::Test {
 protected:
  // Time passes while the process runs: read every 100 ms, as the watcher does.
  void Run(absl::Duration d) {
    for (absl::Duration t = absl::ZeroDuration(); t < d; t += absl::Milliseconds(100)) {
      source_.Advance(std::min(absl::Milliseconds(100), d - t));
      (void)clock_.Now();
    }
  }

  FakeClock source_{absl::Seconds(100)};
  AwakeClock clock_{source_, AwakeClockOptions(), /*watch=*/false};
};

TEST_F(AwakeClockByHand, RunsWithItsSourceWhileReadsComeOften) {
  const absl::Duration start = clock_.Now();
  Run(absl::Seconds(5));
  EXPECT_EQ(clock_.Now() - start, absl::Seconds(5));
  EXPECT_EQ(clock_.paused(), absl::ZeroDuration());
  EXPECT_EQ(clock_.pauses(), 0u);
}

TEST_F(AwakeClockByHand, AGapLongerThanTheThresholdIsLeftOutBeyondOneWatchPeriod) {
  const absl::Duration start = clock_.Now();
  source_.Advance(absl::Seconds(114));
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(100));  // the watcher's period
  EXPECT_EQ(clock_.paused(), absl::Seconds(114) - absl::Milliseconds(100));
  EXPECT_EQ(clock_.pauses(), 1u);
  source_.Advance(absl::Milliseconds(50));
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(150));  // and runs on from there
}

TEST_F(AwakeClockByHand, AGapUpToTheThresholdCountsAsTime) {
  const absl::Duration start = clock_.Now();
  source_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(clock_.Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(clock_.pauses(), 0u);
}

TEST_F(AwakeClockByHand, ADeadlineOnItSurvivesAPause) {
  Deadline d(clock_, absl::Seconds(3));
  Run(absl::Seconds(1));
  source_.Advance(absl::Seconds(60));  // the machine stops
  EXPECT_FALSE(d.Expired());
  EXPECT_EQ(d.Remaining(), absl::Seconds(2) - absl::Milliseconds(100));
  Run(absl::Seconds(2));
  EXPECT_TRUE(d.Expired());
}

// A source whose next read runs `hook` before it returns: another thread's
// read in the middle of this one.
class InterruptedSource : public Clock {
 public:
  absl::Duration Now() const override {
    const absl::Duration t = fake.Now();
    if (hook) std::exchange(hook, nullptr)();
    return t;
  }
  FakeClock fake{absl::Seconds(100)};
  mutable std::function<void()> hook;
};

// A read takes no lock, so another thread may find a pause between this
// read's look at its source and its look at what was left out: the read
// must not return the pause as time (and then go back by it).
TEST(AwakeClock, AReadOverlappingAnotherThatFindsAPauseLeavesThePauseOut) {
  InterruptedSource source;
  AwakeClock clock(source, AwakeClockOptions(), /*watch=*/false);
  const absl::Duration start = clock.Now();
  source.fake.Advance(absl::Seconds(60));  // the machine stops
  absl::Duration other;
  source.hook = [&] { other = clock.Now(); };
  const absl::Duration mine = clock.Now();
  EXPECT_EQ(other - start, absl::Milliseconds(100));
  EXPECT_EQ(mine - start, absl::Milliseconds(100));
  EXPECT_EQ(clock.pauses(), 1u);
  source.fake.Advance(absl::Milliseconds(5));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(105));
}

// Threads read while time runs and the machine stops now and then: each
// sees its reads never go back, and each pause is left out once.
TEST(AwakeClock, ConcurrentReadsNeverGoBackAndCountEachPauseOnce) {
  FakeClock source(absl::Seconds(100));
  AwakeClock clock(source, AwakeClockOptions(), /*watch=*/false);
  const absl::Duration start = clock.Now();
  std::atomic<bool> done{false};
  std::atomic<int> went_back{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      absl::Duration prev = clock.Now();
      while (!done.load(std::memory_order_relaxed)) {
        const absl::Duration now = clock.Now();
        if (now < prev) went_back.fetch_add(1);
        prev = now;
      }
    });
  }
  constexpr int kPauses = 20;
  constexpr int kSteps = 50;
  for (int p = 0; p < kPauses; ++p) {
    for (int i = 0; i < kSteps; ++i) {
      source.Advance(absl::Milliseconds(1));  // running: read every millisecond
      (void)clock.Now();
    }
    source.Advance(absl::Seconds(2));  // stopped
    (void)clock.Now();
  }
  done.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(went_back.load(), 0);
  EXPECT_EQ(clock.pauses(), static_cast<uint64_t>(kPauses));
  EXPECT_EQ(clock.paused(), kPauses * (absl::Seconds(2) - absl::Milliseconds(100)));
  EXPECT_EQ(clock.Now() - start,
            kPauses * (kSteps * absl::Milliseconds(1) + absl::Milliseconds(100)));
}

// A real process stopped with SIGSTOP (as every process is when its VM is
// paused): its awake clock, watched by its thread, leaves the stop out.
TEST(AwakeClock, AProcessStoppedForSecondsLeavesTheStopOut) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    const Clock& awake = ProcessAwakeClock();
    const absl::Duration a0 = awake.Now();
    const absl::Duration m0 = RealClock().Now();
    if (write(fds[1], "r", 1) != 1) _exit(2);  // ready: stop me
    // Busy for 3 s of monotonic time, reading nothing but the real clock.
    while (RealClock().Now() - m0 < absl::Seconds(3)) absl::SleepFor(absl::Milliseconds(20));
    const long long awake_ms = absl::ToInt64Milliseconds(awake.Now() - a0);
    const long long real_ms = absl::ToInt64Milliseconds(RealClock().Now() - m0);
    char line[64];
    const int n = std::snprintf(line, sizeof(line), "%lld %lld", awake_ms, real_ms);
    _exit(write(fds[1], line, n) == n ? 0 : 3);
  }
  close(fds[1]);
  char ready;
  ASSERT_EQ(read(fds[0], &ready, 1), 1);
  absl::SleepFor(absl::Milliseconds(200));
  // The stop as this process measures it: a loaded machine may make it
  // longer than the 1.5 s asked for.
  const absl::Time stopped = absl::Now();
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  absl::SleepFor(absl::Milliseconds(1500));
  ASSERT_EQ(kill(child, SIGCONT), 0);
  const long long stop_ms = absl::ToInt64Milliseconds(absl::Now() - stopped);
  char buf[64] = {};
  ssize_t got = 0;
  for (ssize_t n; (n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0;) got += n;
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  long long awake_ms = 0, real_ms = 0;
  ASSERT_EQ(std::sscanf(buf, "%lld %lld", &awake_ms, &real_ms), 2) << buf;
  // The stop is left out but for at most a watch period (100 ms); the
  // rest counts, less what the child waited for a CPU after SIGCONT.
  EXPECT_GE(real_ms, 3000);
  EXPECT_GE(stop_ms, 1500);
  EXPECT_LE(awake_ms, real_ms - stop_ms + 150)
      << "awake " << awake_ms << " ms, real " << real_ms << " ms, stopped " << stop_ms << " ms";
  EXPECT_GE(awake_ms, real_ms - stop_ms - 400)
      << "awake " << awake_ms << " ms, real " << real_ms << " ms, stopped " << stop_ms << " ms";
}

// A process forked without exec gets a watcher of its own: its idle waits
// are time, not pauses.
TEST(AwakeClock, AForkedChildWatchesItsOwnClock) {
  (void)ProcessAwakeClock().Now();  // the parent's watcher runs
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const Clock& awake = ProcessAwakeClock();
    const absl::Duration a0 = awake.Now();
    absl::SleepFor(absl::Seconds(2));  // idle, reading nothing
    const absl::Duration awake_elapsed = awake.Now() - a0;
    _exit(awake_elapsed >= absl::Milliseconds(1900) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's idle 2 s were taken for a pause";
}

}  // namespace
}  // namespace netfold
