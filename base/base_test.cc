// Tests of base/: status macros, errno mapping, log levels, clocks.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/aligned_buffer.h"
#include "base/clock.h"
#include "base/daemon.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace netfold {
namespace {

int g_calls = 0;

absl::StatusOr<int> Half(int x) {
  ++g_calls;
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Check(bool ok) {
  ++g_calls;
  return ok ? absl::OkStatus() : absl::FailedPreconditionError("nope");
}

absl::StatusOr<int> Quarter(int x) {
  NETFOLD_ASSIGN_OR_RETURN(int h, Half(x));
  NETFOLD_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status Both(bool a, bool b) {
  NETFOLD_RETURN_IF_ERROR(Check(a));
  NETFOLD_RETURN_IF_ERROR(Check(b));
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesAndEvaluatesOnce) {
  g_calls = 0;
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(g_calls, 2);
  g_calls = 0;
  absl::StatusOr<int> r = Quarter(6);  // 6 -> 3 -> odd
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g_calls, 2);
}

TEST(StatusMacros, ReturnIfErrorStopsAtFirstError) {
  g_calls = 0;
  EXPECT_TRUE(Both(true, true).ok());
  EXPECT_EQ(g_calls, 2);
  g_calls = 0;
  EXPECT_EQ(Both(false, true).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(g_calls, 1);
}

TEST(StatusMacros, ReturnIfErrorAcceptsStatusOr) {
  auto f = [](int x) -> absl::Status {
    NETFOLD_RETURN_IF_ERROR(Half(x));
    return absl::OkStatus();
  };
  EXPECT_TRUE(f(2).ok());
  EXPECT_FALSE(f(3).ok());
}

TEST(ErrnoStatus, MapsCodesAndKeepsContext) {
  EXPECT_TRUE(ErrnoToStatus(0, "x").ok());
  absl::Status s = ErrnoToStatus(EADDRINUSE, "bind 127.0.0.1:4791");
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("bind 127.0.0.1:4791"), std::string::npos);
  EXPECT_NE(s.message().find("errno"), std::string::npos);
  EXPECT_EQ(ErrnoToStatus(EINVAL, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus(ETIMEDOUT, "").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ErrnoToStatus(ENOMEM, "").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EPERM, "").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(12345, "").code(), absl::StatusCode::kUnknown);
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(ParseLogLevel("ERROR"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("Info"), LogLevel::kInfo);
  EXPECT_EQ(ParseLogLevel("3"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("trace"), LogLevel::kTrace);
  EXPECT_EQ(ParseLogLevel("verbose"), std::nullopt);
  EXPECT_EQ(ParseLogLevel(""), std::nullopt);
}

TEST(Log, ThresholdFiltersWithoutEvaluatingArguments) {
  LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kError);
  int evaluated = 0;
  auto touch = [&] { return ++evaluated; };
  NETFOLD_LOG(kDebug) << touch();
  EXPECT_EQ(evaluated, 0);
  testing::internal::CaptureStderr();
  NETFOLD_LOG(kError) << "boom " << touch();
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_NE(out.find("boom 1"), std::string::npos);
  EXPECT_EQ(out.back(), '\n');
  SetLogLevel(saved);
}

template <size_t kOffset>
void ExpectPlacedAndKept() {
  LineOffsetVector<kOffset> v(40 + 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kCacheLine, kOffset);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i);
  v.resize(3 * 4096);  // grows into a new allocation, placed the same way
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % kCacheLine, kOffset);
  for (size_t i = 0; i < 40 + 4096; ++i) ASSERT_EQ(v[i], static_cast<uint8_t>(i)) << i;
  LineOffsetVector<kOffset> copy = v;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % kCacheLine, kOffset);
  EXPECT_EQ(copy, v);
}

TEST(AlignedBuffer, StartsAtTheOffsetFromACacheLineAndKeepsItWhenGrown) {
  ExpectPlacedAndKept<0>();
  ExpectPlacedAndKept<24>();
  ExpectPlacedAndKept<63>();
}

TEST(Clock, RealClockIsMonotonic) {
  absl::Duration a = RealClock().Now();
  absl::Duration b = RealClock().Now();
  EXPECT_LE(a, b);
}

TEST(Clock, FakeClockAndDeadline) {
  FakeClock clock(absl::Seconds(10));
  Deadline d(clock, absl::Milliseconds(100));
  EXPECT_FALSE(d.Expired());
  EXPECT_EQ(d.Remaining(), absl::Milliseconds(100));
  clock.Advance(absl::Milliseconds(60));
  EXPECT_EQ(d.Remaining(), absl::Milliseconds(40));
  clock.Advance(-absl::Seconds(5));  // ignored: time never goes back
  EXPECT_EQ(clock.Now(), absl::Seconds(10) + absl::Milliseconds(60));
  clock.Advance(absl::Milliseconds(40));
  EXPECT_TRUE(d.Expired());
  EXPECT_EQ(d.Remaining(), absl::ZeroDuration());
}

TEST(Clock, CoarseClockReadsItsClockOnceEveryNCallsAndAfterRefresh) {
  FakeClock fake;
  CoarseClock coarse(fake, 3);
  EXPECT_EQ(coarse.Now(), absl::ZeroDuration());  // a reading
  fake.Advance(absl::Milliseconds(1));
  EXPECT_EQ(coarse.Now(), absl::ZeroDuration());  // the same reading, twice more
  EXPECT_EQ(coarse.Now(), absl::ZeroDuration());
  EXPECT_EQ(coarse.Now(), absl::Milliseconds(1));  // the fourth call reads again
  fake.Advance(absl::Milliseconds(1));
  EXPECT_EQ(coarse.Now(), absl::Milliseconds(1));
  coarse.Refresh();
  EXPECT_EQ(coarse.Now(), absl::Milliseconds(2)) << "Refresh: the next call reads";
  EXPECT_EQ(coarse.NowNanos(), 2'000'000);
  CoarseClock every_call(fake, 0);  // at least one call per reading
  fake.Advance(absl::Milliseconds(1));
  EXPECT_EQ(every_call.Now(), absl::Milliseconds(3));
  fake.Advance(absl::Milliseconds(1));
  EXPECT_EQ(every_call.Now(), absl::Milliseconds(4));
}

TEST(Daemon, WritePortFileWritesThePortAndFailsClearly) {
  const std::string path = ::testing::TempDir() + "/base_test.port";
  ASSERT_TRUE(WritePortFile(path, 47910).ok());
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "47910");
  std::remove(path.c_str());
  absl::Status s = WritePortFile("/nonexistent-dir/x.port", 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.port.tmp"), std::string::npos) << s;
}

// Two locks taken in one order, then in the other: a lock-order cycle,
// which Abseil's checks abort on (no thread is ever blocked).
void LockInBothOrders() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

// Each case runs in a child process (the setting is process-wide).
TEST(Daemon, MutexDeadlockChecksAreOffUnlessTheEnvironmentAsks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // With Abseil's defaults: if this Abseil does not check at all (built
  // with NDEBUG), there is nothing to turn off.
  const bool checks_built_in = [] {
    const pid_t pid = fork();
    if (pid == 0) {
      LockInBothOrders();
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }();
  if (!checks_built_in) GTEST_SKIP() << "this Abseil does not check lock order";
  EXPECT_EXIT(
      {
        unsetenv("NETFOLD_MUTEX_DEADLOCK_CHECKS");
        if (ConfigureMutexDeadlockChecks()) _exit(3);
        LockInBothOrders();
        _exit(0);
      },
      testing::ExitedWithCode(0), "");
  EXPECT_DEATH(
      {
        setenv("NETFOLD_MUTEX_DEADLOCK_CHECKS", "1", 1);
        if (!ConfigureMutexDeadlockChecks()) _exit(3);
        LockInBothOrders();
        _exit(0);
      },
      "potential deadlock");
}

}  // namespace
}  // namespace netfold
