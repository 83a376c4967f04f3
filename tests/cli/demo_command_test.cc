// `netfold demo`, the first thing a newcomer runs (README.md): a quick run
// on 4 hosts, clean and with seeded faults on every link, exits 0 with every
// row verified by every rank, and a long allreduce's row is followed by its
// first call and the warming-up calls after it, timed apart
// (docs/operations.md, "The demo"). With its switches killed in the middle
// of a row, the library fails over: every result is still right, that row
// and every one after it are marked as the hosts', and the demo says the
// fabric failed and exits 1 with its logs kept.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/run_cli.h"

namespace netfold {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A row of the demo's table (not its header, a long row's extra lines or
// the summary).
bool IsRow(absl::string_view line) {
  return absl::StartsWith(line, "allreduce ") || absl::StartsWith(line, "reduce ") ||
         absl::StartsWith(line, "bcast ") || absl::StartsWith(line, "barrier ");
}

// The demo on 4 hosts with `extra` arguments, within 120 s (it takes one
// or two on an idle machine).
CliResult RunDemo(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {NETFOLD_CLI, "demo", "--quick", "--hosts", "4"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCli(argv, absl::Seconds(120), "demo_command_test");
}

// Checks the table: every operation's row verified by the 4 ranks, and the
// 1 MiB allreduce's row followed by its first call's and its warming-up
// calls'.
void ExpectEveryRowVerified(const CliResult& r) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(" checks, 0 failed."));
  EXPECT_THAT(r.out, HasSubstr("all results verified on every rank; fabric stopped."));
  int rows = 0;
  int after_long_row = 0;  // lines since the long row, while they are its own
  bool long_row_seen = false;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    const bool is_row = IsRow(line);
    if (after_long_row == 1) {
      EXPECT_THAT(std::string(line), HasSubstr("its first call, on fresh buffers:"));
      ++after_long_row;
    } else if (after_long_row == 2) {
      EXPECT_THAT(std::string(line), HasSubstr("the next 4, warming up:"));
      after_long_row = 0;
    }
    if (!is_row) continue;
    ++rows;
    EXPECT_TRUE(absl::EndsWith(line, "yes (4/4)")) << line;
    if (absl::StartsWith(line, "allreduce ") && absl::StrContains(line, " 1 MiB ")) {
      after_long_row = 1;
      long_row_seen = true;
    }
  }
  // The summary counts a check per row: "N checks, 0 failed."
  const size_t at = r.out.find(" checks, ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t from = r.out.rfind('\n', at) + 1;
  int checks = 0;
  ASSERT_TRUE(absl::SimpleAtoi(r.out.substr(from, at - from), &checks)) << r.out;
  EXPECT_GE(checks, 20);  // every data type, four sizes, reduce, bcast, barrier
  EXPECT_EQ(rows, checks) << r.out;
  EXPECT_TRUE(long_row_seen) << r.out;
}

TEST(DemoCommand, EveryResultIsVerifiedByEveryRank) { ExpectEveryRowVerified(RunDemo({})); }

TEST(DemoCommand, EveryResultIsVerifiedUnderSeededFaultsOnEveryLink) {
  const CliResult r = RunDemo({"--faults", "--seed", "3"});
  ExpectEveryRowVerified(r);
  EXPECT_THAT(r.out, HasSubstr("seeded faults on every link"));
}

// The demo's rank processes: `netfold __demo-rank`, children of the demo,
// which is this test's child.
std::vector<pid_t> DemoRanks() {
  auto parent_of = [](pid_t pid) -> pid_t {
    const std::string stat = ReadFile(absl::StrFormat("/proc/%d/stat", pid));
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return 0;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid = 0;
    return fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) ? ppid : 0;
  };
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const pid_t parent = parent_of(pid);
    if (parent <= 1 || parent_of(parent) != getpid()) continue;
    if (absl::StrContains(ReadFile(absl::StrFormat("/proc/%d/cmdline", pid)), "__demo-rank")) {
      out.push_back(pid);
    }
  }
  return out;
}

TEST(DemoCommand, SwitchesKilledMidRunLeaveTheRestToTheHostsAndTheDemoSaysSo) {
  // The demo's fabric makes its state directory under TMPDIR: ours, so
  // that the test finds it (and no other demo's).
  std::string tmpl = (std::filesystem::temp_directory_path() / "demo_fail_test-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir != nullptr ? old_tmpdir : "";
  setenv("TMPDIR", dir.c_str(), 1);
  const std::string err_path = dir + "/demo.err";
  tools::CommandResult result;
  absl::Status ran;
  std::thread demo([&] {
    tools::CommandOptions options;
    options.timeout = absl::Seconds(150);
    options.stderr_path = err_path;
    absl::StatusOr<tools::CommandResult> r =
        tools::RunCommand({NETFOLD_CLI, "demo", "--hosts", "4"}, options);
    if (r.ok()) result = *r; else ran = r.status();
  });
  // The 16 MiB row's announcement: its eleven calls take half a second or
  // more. The ranks are stopped before they can finish it, the switches
  // killed, and the ranks let go.
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  bool announced = false;
  while (!announced && absl::Now() < give_up) {
    announced = absl::StrContains(ReadFile(err_path), "allreduce of 16 MiB");
    if (!announced) absl::SleepFor(absl::Milliseconds(5));
  }
  const std::vector<pid_t> ranks = DemoRanks();
  for (pid_t pid : ranks) kill(pid, SIGSTOP);
  std::string state;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (absl::StartsWith(e.path().filename().string(), "netfold-fabric-")) state = e.path();
  }
  CliResult killed;
  if (!state.empty()) {
    killed = RunCli({NETFOLD_CLI, "kill", "switches", "--state-dir", state}, absl::Seconds(30),
                    "demo_command_test");
  }
  for (pid_t pid : ranks) kill(pid, SIGCONT);
  const absl::Time killed_at = absl::Now();
  demo.join();
  const absl::Duration after_kill = absl::Now() - killed_at;
  if (old_tmpdir != nullptr) setenv("TMPDIR", saved.c_str(), 1); else unsetenv("TMPDIR");
  const std::string err = ReadFile(err_path);
  // The directory (and the demo's kept state directory in it) goes at the
  // end, unless the test failed: then its logs stay for a look.
  struct RemoveUnlessFailed {
    std::string dir;
    ~RemoveUnlessFailed() {
      if (::testing::Test::HasFailure()) {
        std::fprintf(stderr, "the demo's logs are kept in %s\n", dir.c_str());
        return;
      }
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove{dir};

  ASSERT_TRUE(announced) << "the 16 MiB row never started\n" << err;
  ASSERT_EQ(ranks.size(), 4u) << err;
  ASSERT_FALSE(state.empty());
  ASSERT_EQ(killed.exit_code, 0) << killed.out << killed.err;
  ASSERT_TRUE(ran.ok()) << ran << "\n" << err;
  EXPECT_EQ(result.exit_code, 1) << result.output << err;
  EXPECT_LT(after_kill, absl::Seconds(60)) << result.output << err;
  // Every row verified; the rows before the kill by the fabric, the three
  // after the 16 MiB row (reduce, bcast, barrier) on the hosts. The 16 MiB
  // row itself may be either: a call the failover's resync finished on the
  // fabric's results, or a test thread late to stop the ranks, leaves it
  // the fabric's.
  int by_fabric = 0, by_hosts = 0;
  bool after = false;
  for (absl::string_view line : absl::StrSplit(result.output, '\n')) {
    if (!IsRow(line)) continue;
    if (absl::StrContains(line, " 16 MiB ")) {
      EXPECT_TRUE(absl::EndsWith(line, "yes (4/4)") ||
                  absl::EndsWith(line, "yes (4/4), on the hosts")) << line;
      after = true;
      continue;
    }
    if (after) {
      EXPECT_TRUE(absl::EndsWith(line, "yes (4/4), on the hosts")) << line;
      ++by_hosts;
    } else {
      EXPECT_TRUE(absl::EndsWith(line, "yes (4/4)")) << line;
      ++by_fabric;
    }
  }
  EXPECT_GE(by_fabric, 20) << result.output;
  EXPECT_EQ(by_hosts, 3) << result.output;
  EXPECT_THAT(result.output, HasSubstr(" checks, 0 failed."));
  EXPECT_THAT(result.output, HasSubstr("The fabric failed during the demo: the hosts ran the rows "
                                       "marked \"on the hosts\""));
  EXPECT_THAT(result.output, HasSubstr("but the fabric failed during the demo"));
  EXPECT_THAT(result.output, Not(HasSubstr("FAILED")));
  EXPECT_THAT(err, HasSubstr("the hosts take over"));
}

}  // namespace
}  // namespace netfold
