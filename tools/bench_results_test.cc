// How `netfold bench` reads collective_bench's lines and combines rounds
// (tools/bench_results.h): medians per field, ratios only from rounds that
// measured both variants.
#include "tools/bench_results.h"
#include "tools/bench.h"

#include <unistd.h>

#include <cmath>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

TEST(BenchResults, ParsePointsKeepsCsvLinesAndSkipsTheRest) {
  const std::vector<Point> points = ParsePoints(
      "mpirun: a warning\n8,100,10.5,9.0,20.0,137.6\n65536,5,300,280,400,-1\n1,2,3\n");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].size, 8);
  EXPECT_EQ(points[0].iterations, 100);
  EXPECT_DOUBLE_EQ(points[0].avg, 10.5);
  EXPECT_DOUBLE_EQ(points[1].link_bytes, -1);
  EXPECT_EQ(PointOf(points, 65536), &points[1]);
  EXPECT_EQ(PointOf(points, 4), nullptr);
}

TEST(BenchResults, MedianOfOddAndEvenCountsAndNothing) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
  EXPECT_TRUE(std::isnan(Median({})));
}

TEST(BenchResults, MedianPointTakesEachFieldsMedianOverTheRoundsThatMeasuredTheSize) {
  const Rounds rounds = {
      {{.size = 8, .iterations = 10, .avg = 30, .p50 = 5, .p99 = 90, .link_bytes = 100}},
      {{.size = 8, .iterations = 20, .avg = 10, .p50 = 7, .p99 = 70, .link_bytes = 100},
       {.size = 64, .iterations = 1, .avg = 1, .p50 = 1, .p99 = 1, .link_bytes = 1}},
      {},  // a failed run: no points
      {{.size = 8, .iterations = 30, .avg = 20, .p50 = 6, .p99 = 80, .link_bytes = 100}},
  };
  const std::optional<Point> m = MedianPoint(rounds, 8);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->size, 8);
  EXPECT_EQ(m->iterations, 60);
  EXPECT_DOUBLE_EQ(m->avg, 20);
  EXPECT_DOUBLE_EQ(m->p50, 6);
  EXPECT_DOUBLE_EQ(m->p99, 80);
  EXPECT_DOUBLE_EQ(m->link_bytes, 100);
  ASSERT_TRUE(MedianPoint(rounds, 64).has_value());
  EXPECT_DOUBLE_EQ(MedianPoint(rounds, 64)->avg, 1);
  EXPECT_FALSE(MedianPoint(rounds, 4096).has_value());
  EXPECT_FALSE(MedianPoint({}, 8).has_value());
}

TEST(BenchResults, RoundRatiosPairEachRoundWithItselfAndSkipRoundsMissingEither) {
  const Rounds a = {{{.size = 8, .avg = 20}}, {{.size = 8, .avg = 30}}, {{.size = 8, .avg = 50}}};
  const Rounds b = {{{.size = 8, .avg = 10}}, {}, {{.size = 8, .avg = 25}}};
  const std::vector<double> r = RoundRatios(a, b, 8);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0], 2.0);   // round 1: 20 / 10
  EXPECT_DOUBLE_EQ(r[1], 2.0);   // round 3: 50 / 25, round 2 had no b
  // Not the ratio of medians (30 / 17.5): each round against its own.
  EXPECT_TRUE(RoundRatios(a, b, 64).empty());
  EXPECT_TRUE(RoundRatios(a, {{{.size = 8, .avg = 0}}}, 8).empty()) << "no division by zero";
}

TEST(BenchResults, TheMachineLineSaysCoresAndWhatAWakeUpCosts) {
  const std::string line = MachineLine();
  EXPECT_EQ(line.rfind(absl::StrFormat("machine: %ld cores; a wake-up costs ",
                                       sysconf(_SC_NPROCESSORS_ONLN)),
                       0),
            0u)
      << line;
  EXPECT_NE(line.find(" us of CPU on one"), std::string::npos) << line;
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
    EXPECT_NE(line.find(" us across two"), std::string::npos) << line;
  }
  EXPECT_NE(line.find("; the kernel's first read of a page the application wrote "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(" us, the next "), std::string::npos) << line;
}

// The shell offers what bench accepts, and bench refuses what is not one.
TEST(BenchOps, EveryFormOfferedIsAcceptedAndOthersAreNot) {
  const std::vector<std::string> ops = BenchOps();
  EXPECT_EQ(ops.size(), 16u);
  for (const std::string& op : ops) EXPECT_TRUE(CheckBenchOp(op).ok()) << op;
  for (const char* bad : {"bcast_in_place", "alltoall", "iiallreduce", ""}) {
    EXPECT_FALSE(CheckBenchOp(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace netfold::tools