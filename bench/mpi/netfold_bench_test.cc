// `netfold bench` end to end on a tiny sweep: it starts its own fabric, runs
// bench/mpi/collective_bench under mpirun for every variant, and must leave
// a table, a CSV with a row per variant and size, and link bytes that are
// what in-network aggregation moves (V up and V down, plus headers). No
// time is asserted: this checks that the benchmark measures what it says,
// not how fast anything is (docs/performance.md has the figures).
#include <sys/wait.h>

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
};

// results.csv as {variant -> {size -> row}}.
std::map<std::string, std::map<long, Row>> ReadCsv(const fs::path& path) {
  std::map<std::string, std::map<long, Row>> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    Row r;
    if (f.size() != 9 || !absl::SimpleAtoi(f[1], &r.ranks) || !absl::SimpleAtoi(f[2], &r.size) ||
        !absl::SimpleAtoi(f[4], &r.iterations) || !absl::SimpleAtod(f[5], &r.avg_us) ||
        !absl::SimpleAtod(f[6], &r.p50_us) || !absl::SimpleAtod(f[7], &r.p99_us) ||
        !absl::SimpleAtod(f[8], &r.link_bytes)) {
      ADD_FAILURE() << "bad CSV line: " << line;
      continue;
    }
    rows[f[3]][r.size] = r;
  }
  return rows;
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

TEST_F(NetfoldBench, AllreduceRowsForEveryVariantWithInNetworkLinkBytes) {
  constexpr long kBig = 8192;
  const CliRun r = Netfold(absl::StrFormat("bench allreduce --ranks 2 --sizes 8,%d --seconds 0.05 --out %s",
                                        kBig, dir_.string()),
                        600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nf/tcp"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("failed or timed out"), std::string::npos) << r.output;
  const auto rows = ReadCsv(dir_ / "results.csv");
  for (const char* variant : {"netfold", "ompi-sm", "ompi-tcp", "ring", "bidir", "tree"}) {
    auto v = rows.find(variant);
    ASSERT_NE(v, rows.end()) << "no rows for " << variant << "\n" << r.output;
    for (long size : {8l, kBig}) {
      auto row = v->second.find(size);
      ASSERT_NE(row, v->second.end()) << variant << " " << size << " B\n" << r.output;
      EXPECT_EQ(row->second.ranks, 2);
      EXPECT_GE(row->second.iterations, 5) << variant;
      EXPECT_GT(row->second.avg_us, 0) << variant;
      EXPECT_LE(row->second.p50_us, row->second.p99_us) << variant;
    }
  }
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

TEST_F(NetfoldBench, BarrierBcastAllgatherReduceScatterAndNonblockingMeasureEveryVariant) {
  for (const char* op : {"barrier", "bcast", "allgather", "reduce_scatter", "iallreduce"}) {
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

TEST_F(NetfoldBench, BadArgumentsAreClearErrors) {
  CliRun r = Netfold("bench alltoall --ranks 2", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("allreduce, reduce, bcast, barrier, allgather or reduce_scatter"),
            std::string::npos)
      << r.output;
  r = Netfold("bench i --ranks 2", 60);
  EXPECT_NE(r.exit_code, 0) << "an i alone is no collective";
  r = Netfold("bench allreduce --poll-us -3", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--poll-us"), std::string::npos) << r.output;
  r = Netfold("bench allreduce --seconds 0", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--seconds"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace netfold
