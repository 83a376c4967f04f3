// `netfold bench` end to end on a tiny sweep: it starts its own fabric, runs
// bench/mpi/collective_bench under mpirun for every variant, and must leave
// a table, a CSV with a row per variant and size, and link bytes that are
// what in-network aggregation moves (V up and V down, plus headers). No
// time is asserted: this checks that the benchmark measures what it says,
// not how fast anything is (docs/performance.md has the figures).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string output;
};

bool HaveMpirun() { return system("command -v mpirun >/dev/null 2>&1") == 0; }

// Runs the CLI with a deadline (coreutils timeout), stdout and stderr captured.
CliRun Netfold(const std::string& args, int timeout_s) {
  const char* cli = std::getenv("NETFOLD_CLI");
  if (cli == nullptr) return {-1, "NETFOLD_CLI is not set (run the test through meson)"};
  CliRun r;
  FILE* f = popen(absl::StrFormat("timeout -k 5 %d %s %s 2>&1", timeout_s, cli, args).c_str(), "r");
  if (f == nullptr) return r;
  char buf[512];
  while (fgets(buf, sizeof(buf), f) != nullptr) r.output += buf;
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct Row {
  int ranks = 0;
  long size = 0;
  int iterations = 0;
  double avg_us = 0, p50_us = 0, p99_us = 0, link_bytes = 0;
  int round = 0;
};

// results.csv as {variant -> {size -> row}}, of round `round` (1 unless
// the run had --rounds).
std::map<std::string, std::map<long, Row>> ReadCsv(const fs::path& path, int round = 1) {
  std::map<std::string, std::map<long, Row>> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  EXPECT_EQ(line, "op,ranks,size_bytes,variant,iterations,avg_us,p50_us,p99_us,"
                  "link_bytes_per_op,round");
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    Row r;
    if (f.size() != 10 || !absl::SimpleAtoi(f[1], &r.ranks) || !absl::SimpleAtoi(f[2], &r.size) ||
        !absl::SimpleAtoi(f[4], &r.iterations) || !absl::SimpleAtod(f[5], &r.avg_us) ||
        !absl::SimpleAtod(f[6], &r.p50_us) || !absl::SimpleAtod(f[7], &r.p99_us) ||
        !absl::SimpleAtod(f[8], &r.link_bytes) || !absl::SimpleAtoi(f[9], &r.round)) {
      ADD_FAILURE() << "bad CSV line: " << line;
      continue;
    }
    if (r.round == round) rows[f[3]][r.size] = r;
  }
  return rows;
}

// Where `text` first occurs in `output`; npos-safe for EXPECT_LT.
size_t At(const std::string& output, const std::string& text) {
  const size_t at = output.find(text);
  EXPECT_NE(at, std::string::npos) << "no \"" << text << "\" in\n" << output;
  return at;
}

class NetfoldBench : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed (deploy/install-deps.sh installs Open MPI)";
    char tmpl[] = "/tmp/netfold-bench-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// Two rounds: every variant measured twice, the second round in the
// opposite order, a CSV row per round and the ratio's range in the table.
TEST_F(NetfoldBench, AllreduceRowsForEveryVariantAndRoundWithInNetworkLinkBytes) {
  constexpr long kBig = 8192;
  const CliRun r = Netfold(
      absl::StrFormat("bench allreduce --ranks 2 --sizes 8,%d --seconds 0.05 --rounds 2 --out %s",
                      kBig, dir_.string()),
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nf/tcp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("range"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("failed or timed out"), std::string::npos) << r.output;
  EXPECT_LT(At(r.output, "measuring netfold on 2 ranks (round 1 of 2)"),
            At(r.output, "measuring ompi-tcp on 2 ranks (round 1 of 2)"));
  EXPECT_LT(At(r.output, "measuring ompi-tcp on 2 ranks (round 1 of 2)"),
            At(r.output, "measuring tree on 2 ranks (round 1 of 2)"));
  EXPECT_LT(At(r.output, "measuring tree on 2 ranks (round 1 of 2)"),
            At(r.output, "measuring tree on 2 ranks (round 2 of 2)"));
  EXPECT_LT(At(r.output, "measuring tree on 2 ranks (round 2 of 2)"),
            At(r.output, "measuring ompi-tcp on 2 ranks (round 2 of 2)"));
  EXPECT_LT(At(r.output, "measuring ompi-tcp on 2 ranks (round 2 of 2)"),
            At(r.output, "measuring netfold on 2 ranks (round 2 of 2)"));
  const auto rows = ReadCsv(dir_ / "results.csv");
  const auto second = ReadCsv(dir_ / "results.csv", 2);
  for (const char* variant : {"netfold", "ompi-sm", "ompi-tcp", "ring", "bidir", "tree"}) {
    for (const auto* round : {&rows, &second}) {
      auto v = round->find(variant);
      ASSERT_NE(v, round->end()) << "no rows for " << variant << "\n" << r.output;
      for (long size : {8l, kBig}) {
        auto row = v->second.find(size);
        ASSERT_NE(row, v->second.end()) << variant << " " << size << " B\n" << r.output;
        EXPECT_EQ(row->second.ranks, 2);
        EXPECT_GE(row->second.iterations, 5) << variant;
        EXPECT_GT(row->second.avg_us, 0) << variant;
        EXPECT_LE(row->second.p50_us, row->second.p99_us) << variant;
      }
    }
  }
  EXPECT_TRUE(ReadCsv(dir_ / "results.csv", 3).empty());
  // Open MPI alone has no netfold counters; every netfold variant has them.
  EXPECT_EQ(rows.at("ompi-tcp").at(kBig).link_bytes, -1);
  // In-network: V up and V down on the rank's link, plus RoCE and
  // aggregation headers (3 chunks of at most 4032 bytes, their ACKs).
  const double in_network = rows.at("netfold").at(kBig).link_bytes;
  EXPECT_GE(in_network, 2.0 * kBig);
  EXPECT_LT(in_network, 2.0 * kBig * 1.1);
  // With two ranks the ring sends and receives V/2 per phase: the fabric
  // does not move fewer bytes than that (2(p-1)V/p = V each way).
  EXPECT_GE(rows.at("ring").at(kBig).link_bytes, 2.0 * kBig);
  EXPECT_TRUE(fs::exists(dir_ / "mpirun.log"));
}

// --slots: netfold with another window too, measured next to the default
// (the ratio between two windows is only fair from runs side by side).
TEST_F(NetfoldBench, OtherWindowsAreMeasuredNextToTheDefault) {
  const CliRun r = Netfold(
      absl::StrFormat("bench bcast --ranks 2 --sizes 65536 --seconds 0.05 --slots 8 --out %s",
                      dir_.string()),
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(At(r.output, "measuring netfold on 2 ranks"),
            At(r.output, "measuring netfold K=8 on 2 ranks"));
  EXPECT_LT(At(r.output, "measuring netfold K=8 on 2 ranks"),
            At(r.output, "measuring ompi-tcp on 2 ranks"));
  EXPECT_NE(r.output.find("other windows (--slots)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("K/default"), std::string::npos) << r.output;
  const auto rows = ReadCsv(dir_ / "results.csv");
  auto k8 = rows.find("netfold K=8");
  ASSERT_NE(k8, rows.end()) << r.output;
  auto row = k8->second.find(65536);
  ASSERT_NE(row, k8->second.end()) << r.output;
  EXPECT_GT(row->second.avg_us, 0);
  EXPECT_GE(row->second.link_bytes, 65536) << "a netfold run reads its link counters";
}

TEST_F(NetfoldBench, BarrierBcastAllgatherReduceScatterAndNonblockingMeasureEveryVariant) {
  for (const char* op :
       {"barrier", "bcast", "allgather", "reduce_scatter", "iallreduce", "allreduce_in_place"}) {
    const CliRun r = Netfold(
        absl::StrFormat("bench %s --ranks 2 --sizes 4096 --seconds 0.05 --out %s", op, dir_.string()),
        600);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = ReadCsv(dir_ / "results.csv");
    const long size = std::string(op) == "barrier" ? 0 : 4096;
    for (const char* variant : {"netfold", "ompi-sm", "ompi-tcp"}) {
      ASSERT_TRUE(rows.count(variant) && rows.at(variant).count(size))
          << op << " " << variant << "\n" << r.output;
    }
    EXPECT_EQ(rows.count("ring"), 0u) << "host algorithms are allreduce only";
  }
}

// --testbed: the same program on the namespace testbed's shaped links, every
// variant's row with the link's rate, and in-network moving fewer bytes on
// a host link than the ring.
TEST_F(NetfoldBench, TestbedModeMeasuresEveryVariantOnShapedLinks) {
  if (geteuid() != 0) GTEST_SKIP() << "the testbed builds network namespaces: needs root";
  if (system("ip netns add nfbenchprobe >/dev/null 2>&1 && ip netns del nfbenchprobe") != 0) {
    GTEST_SKIP() << "network namespaces are not available here";
  }
  const CliRun r = Netfold(
      absl::StrFormat("bench allreduce --testbed 500mbit --ranks 4 --sizes 262144 --seconds 0.1 "
                      "--out %s", dir_.string()),
      900);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nf/ring"), std::string::npos) << r.output;
  std::ifstream in(dir_ / "results.csv");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "op,ranks,size_bytes,variant,iterations,avg_us,p50_us,p99_us,"
                  "link_bytes_per_op,link_rate_bps");
  std::map<std::string, double> link_bytes;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    ASSERT_EQ(f.size(), 10u) << line;
    EXPECT_EQ(f[1], "4") << line;
    EXPECT_EQ(f[2], "262144") << line;
    EXPECT_EQ(f[9], "500000000") << line;
    double bytes = 0, avg = 0;
    ASSERT_TRUE(absl::SimpleAtod(f[8], &bytes) && absl::SimpleAtod(f[5], &avg)) << line;
    EXPECT_GT(avg, 0) << line;
    link_bytes[f[3]] = bytes;
  }
  ASSERT_EQ(link_bytes.size(), 3u) << r.output;
  // 2V plus headers in-network, against 2 x 2(p-1)V/p = 3V for the ring.
  EXPECT_LT(link_bytes.at("netfold"), 2.0 * 262144 * 1.1);
  EXPECT_GT(link_bytes.at("ring"), 2.9 * 262144);
  EXPECT_EQ(link_bytes.at("ompi-tcp"), -1);
  EXPECT_TRUE(fs::exists(dir_ / "testbed.log"));
  // The testbed went down after the run.
  EXPECT_NE(system("ip netns list | grep -q nfbench"), 0) << "namespaces left behind";
}

TEST_F(NetfoldBench, BadArgumentsAreClearErrors) {
  CliRun r = Netfold("bench alltoall --ranks 2", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("allreduce, reduce, bcast, barrier, allgather or reduce_scatter"),
            std::string::npos)
      << r.output;
  r = Netfold("bench i --ranks 2", 60);
  EXPECT_NE(r.exit_code, 0) << "an i alone is no collective";
  r = Netfold("bench bcast_in_place --ranks 2", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("only allreduce and reduce run in place"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --poll-us -3", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--poll-us"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --testbed 1gbit,fast", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("link rate 'fast'"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --topology x.yaml", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--testbed"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --rounds 0", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--rounds"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --testbed 1gbit --rounds 2", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--rounds is for loopback"), std::string::npos) << r.output;
  for (const char* slots : {"0", "x", "8,", "70000"}) {
    r = Netfold(absl::StrFormat("bench allreduce --slots %s", slots), 60);
    EXPECT_EQ(r.exit_code, 2) << slots << ": " << r.output;
    EXPECT_NE(r.output.find("--slots is a comma-separated list"), std::string::npos) << r.output;
  }
  r = Netfold("bench allreduce --testbed 1gbit --slots 128", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--slots is for loopback"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --seconds 0", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--seconds"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace netfold
