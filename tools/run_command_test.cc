// RunCommand (tools/run_command.h): arguments reach the program as they
// are, never through a shell; a deadline kills the program and what it
// started; exit codes, stdout and the stderr log are reported.
#include "tools/run_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "run_command_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(RunCommandTest, ArgumentsAreNeverInterpretedByAShell) {
  const std::string evil = "x;touch " + dir_ + "/pwned;#";
  const std::string subst = "$(touch " + dir_ + "/pwned2)";
  absl::StatusOr<CommandResult> r = RunCommand({"echo", evil, subst, "'q' \"d\""}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->output, evil + " " + subst + " 'q' \"d\"\n");
  EXPECT_FALSE(fs::exists(dir_ + "/pwned"));
  EXPECT_FALSE(fs::exists(dir_ + "/pwned2"));
}

TEST_F(RunCommandTest, ExitCodeStdoutAndStderrLog) {
  CommandOptions o;
  o.stderr_path = dir_ + "/err.log";
  absl::StatusOr<CommandResult> r =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->output, "out\n");
  // Appended, not truncated.
  ASSERT_TRUE(RunCommand({"/bin/sh", "-c", "echo again >&2"}, o).ok());
  EXPECT_EQ(Slurp(o.stderr_path), "err\nagain\n");
}

TEST_F(RunCommandTest, AStderrLogThatIsASymlinkIsRefused) {
  const std::string target = dir_ + "/target";
  std::ofstream(target) << "precious\n";
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/err.log").c_str()), 0);
  CommandOptions o;
  o.stderr_path = dir_ + "/err.log";
  absl::StatusOr<CommandResult> r = RunCommand({"/bin/sh", "-c", "echo clobber >&2"}, o);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(Slurp(target), "precious\n");
}

TEST_F(RunCommandTest, AMissingProgramIsNotFound) {
  absl::StatusOr<CommandResult> r = RunCommand({"netfold-no-such-program-xyz"}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_EQ(RunCommand({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindOnPath("netfold-no-such-program-xyz"), "");
  EXPECT_NE(FindOnPath("sh"), "");
}

TEST_F(RunCommandTest, ADeadlineKillsTheProgramAndWhatItStarted) {
  CommandOptions o;
  o.timeout = absl::Milliseconds(300);
  o.kill_grace = absl::Seconds(2);
  // The shell starts a child, says its pid, and waits: both must go.
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> r =
      RunCommand({"/bin/sh", "-c", "sleep 600 & echo $!; wait"}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->Succeeded());
  EXPECT_NE(r->term_signal, 0);
  int child = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(r->output), &child)) << r->output;
  // The child got the signal too; it is gone, or a zombie its new parent
  // has not reaped yet.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string state = "?";
  while (absl::Now() < deadline) {
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string all;
    std::getline(in, all);
    const size_t close = all.rfind(')');
    state = close == std::string::npos ? "gone" : all.substr(close + 2, 1);
    if (state == "gone" || state == "Z") break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(state, testing::AnyOf("gone", "Z"));
  kill(child, SIGKILL);  // in case the test failed: nothing outlives it
}

TEST_F(RunCommandTest, LargeOutputIsReadWhileTheProgramRuns) {
  absl::StatusOr<CommandResult> r = RunCommand({"head", "-c", "3000000", "/dev/zero"}, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->output.size(), 3000000u);
  CommandOptions small;
  small.max_output_bytes = 1000;
  r = RunCommand({"head", "-c", "3000000", "/dev/zero"}, small);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->Succeeded());
  EXPECT_EQ(r->output.size(), 1000u);
}

}  // namespace
}  // namespace netfold::tools
