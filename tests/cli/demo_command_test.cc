// `netfold demo`, the first thing a newcomer runs (README.md): a quick run
// on 4 hosts, clean and with seeded faults on every link, exits 0 with every
// row verified by every rank, and a long allreduce's row is followed by its
// first call and the warming-up calls after it, timed apart
// (docs/operations.md, "The demo").
#include <string>
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
    const bool is_row = absl::StartsWith(line, "allreduce ") || absl::StartsWith(line, "reduce ") ||
                        absl::StartsWith(line, "bcast ") || absl::StartsWith(line, "barrier ");
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

}  // namespace
}  // namespace netfold
