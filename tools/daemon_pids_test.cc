// fabric.pids records (tools/daemon_pids.h): a pid is signalled only while
// it is still the recorded process (start time), of this user, running one
// of the expected programs.
#include "tools/daemon_pids.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

using ::testing::HasSubstr;

// A `sleep` child, killed and reaped at the end of the test whatever happens.
class SleepChild {
 public:
  SleepChild() {
    pid_ = fork();
    if (pid_ == 0) {
      execlp("sleep", "sleep", "600", nullptr);
      _exit(127);
    }
  }
  ~SleepChild() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The child's wait status once it has ended, waiting up to `timeout`;
  // nullopt while it still runs.
  std::optional<int> Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    do {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
      if (absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(5));
    } while (true);
    return std::nullopt;
  }
  // Its record once it runs `sleep` (exec is asynchronous to fork).
  DaemonRecord Record() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    DaemonRecord r{"leaf0", pid_, ProcessStartTime(pid_).value_or(0)};
    std::string why;
    while (CheckDaemon(r, {"sleep"}, &why) != DaemonState::kRunning && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return r;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

TEST(DaemonPids, RecordsRoundTrip) {
  std::vector<DaemonRecord> in = {{"manager", 100, 12345}, {"leaf0", 101, 12346}};
  absl::StatusOr<std::vector<DaemonRecord>> out = ParseDaemonRecords(FormatDaemonRecords(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[1].name, "leaf0");
  EXPECT_EQ((*out)[1].pid, 101);
  EXPECT_EQ((*out)[1].start_time, 12346u);
}

TEST(DaemonPids, RecordsWithoutAStartTimeOrWithOddPidsAreRefused) {
  for (const char* bad : {"manager 100\n", "manager 1 5\n", "manager -3 5\n", "manager x 5\n",
                          "manager 100 5 extra\n", " 100 5\n", "manager 100 -5\n"}) {
    absl::StatusOr<std::vector<DaemonRecord>> r = ParseDaemonRecords(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("line 1")) << bad;
  }
}

TEST(DaemonPids, StartTimeOfThisProcess) {
  absl::StatusOr<uint64_t> t = ProcessStartTime(getpid());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(*t, 0u);
  EXPECT_EQ(ProcessStartTime(0x3ffffff0).status().code(), absl::StatusCode::kNotFound);
}

TEST(DaemonPids, CheckWantsTheSameStartTimeUserAndProgram) {
  SleepChild child;
  const DaemonRecord r = child.Record();
  std::string why;
  EXPECT_EQ(CheckDaemon(r, {"sleep"}, &why), DaemonState::kRunning) << why;
  // Another program name: not ours to signal.
  EXPECT_EQ(CheckDaemon(r, {"netfold-managerd", "netfold-switchd"}, &why), DaemonState::kOther);
  EXPECT_THAT(why, HasSubstr("not a netfold daemon"));
  // The pid with another start time: a reused pid.
  DaemonRecord reused = r;
  reused.start_time += 1;
  EXPECT_EQ(CheckDaemon(reused, {"sleep"}, &why), DaemonState::kOther);
  EXPECT_THAT(why, HasSubstr("reused"));
  // Once it has exited (a zombie here, then gone): nothing to signal.
  kill(child.pid(), SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (CheckDaemon(r, {"sleep"}, &why) == DaemonState::kRunning && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(CheckDaemon(r, {"sleep"}, &why), DaemonState::kGone) << why;
}

TEST(DaemonPids, StopLeavesAProcessThatIsNotADaemonAlone) {
  SleepChild child;
  const DaemonRecord r = child.Record();
  std::vector<std::string> notes;
  EXPECT_EQ(StopDaemons({r}, {"netfold-managerd", "netfold-switchd"}, absl::Seconds(1), &notes), 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("was not signalled"));
  EXPECT_FALSE(child.Wait(absl::ZeroDuration()).has_value()) << "the process was signalled";
  // Nor one whose pid was reused.
  DaemonRecord reused = r;
  reused.start_time -= 1;
  notes.clear();
  EXPECT_EQ(StopDaemons({reused}, {"sleep"}, absl::Seconds(1), &notes), 0);
  EXPECT_THAT(notes.at(0), HasSubstr("reused"));
  EXPECT_FALSE(child.Wait(absl::ZeroDuration()).has_value()) << "the process was signalled";
}

TEST(DaemonPids, StopTerminatesTheRecordedProcess) {
  SleepChild child;
  const DaemonRecord r = child.Record();
  std::vector<std::string> notes;
  EXPECT_EQ(StopDaemons({r}, {"sleep"}, absl::Seconds(30), &notes), 1);
  std::optional<int> status = child.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFSIGNALED(*status));
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);
  EXPECT_TRUE(notes.empty()) << notes[0];
}

TEST(DaemonPids, SignalReachesOnlyTheRecordedProcessAndWaitsForItsEnd) {
  SleepChild child;
  const DaemonRecord r = child.Record();
  // Not one of the programs: refused, the process untouched.
  absl::Status s = SignalDaemon(r, {"netfold-switchd"}, SIGKILL, absl::Seconds(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("was not signalled"));
  EXPECT_FALSE(child.Wait(absl::ZeroDuration()).has_value()) << "the process was signalled";
  // Paused and resumed without a wait.
  ASSERT_TRUE(SignalDaemon(r, {"sleep"}, SIGSTOP, absl::ZeroDuration()).ok());
  ASSERT_TRUE(SignalDaemon(r, {"sleep"}, SIGCONT, absl::ZeroDuration()).ok());
  // Killed: it returns once the process has exited (a zombie of this test
  // counts as gone).
  ASSERT_TRUE(SignalDaemon(r, {"sleep"}, SIGKILL, absl::Seconds(30)).ok());
  EXPECT_EQ(CheckDaemon(r, {"sleep"}, nullptr), DaemonState::kGone);
  std::optional<int> status = child.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  // And then there is nothing to signal.
  EXPECT_TRUE(absl::IsFailedPrecondition(SignalDaemon(r, {"sleep"}, SIGKILL, absl::Seconds(1))));
}

}  // namespace
}  // namespace netfold::tools
