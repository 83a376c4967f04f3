// `netfold bench OP --testbed RATES`: the same MPI program as the loopback
// runs (bench/mpi/collective_bench), on the namespace testbed
// (deploy/testbed/netfold-testbed, docs/testbed.md) with every link shaped
// to each rate in turn: in-network, libnetfold's ring over the same links
// (allreduce), and Open MPI over TCP through the same emulated switches.
// What the fabric is for (each host link carries V each way, a ring
// 2(p-1)V/p) shows only where the link, not the CPU, sets the pace.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "tools/bench.h"
#include "tools/bench_results.h"
#include "tools/run_command.h"
#include "tools/status_text.h"

namespace netfold::tools {
namespace {

namespace fs = std::filesystem;

// The testbed's prefix for these runs: its namespaces and state directory
// are this tool's own, whatever testbed the user has up under the default.
constexpr char kPrefix[] = "nfbench";

struct TestbedVariant {
  std::string name;
  std::vector<std::string> options;  // netfold-testbed mpirun options
};

// Runs `netfold-testbed ARGS`, its stderr appended to `log`.
bool Testbed(const std::string& testbed, std::vector<std::string> args, const std::string& log,
             absl::Duration timeout, std::string* output = nullptr) {
  args.insert(args.begin(), {"/usr/bin/python3", testbed});
  CommandOptions run;
  run.timeout = timeout;
  run.stderr_path = log;
  absl::StatusOr<CommandResult> ran = RunCommand(args, run);
  if (!ran.ok()) {
    std::fprintf(stderr, "  %s\n", ran.status().ToString().c_str());
    return false;
  }
  if (output != nullptr) *output = ran->output;
  return ran->Succeeded();
}

}  // namespace

absl::StatusOr<double> ParseLinkRate(const std::string& rate) {
  static const std::map<std::string, double> kScale = {
      {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}};
  const std::string r = absl::AsciiStrToLower(rate);
  for (const auto& [unit, scale] : kScale) {
    if (r.size() <= unit.size() || r.compare(r.size() - unit.size(), unit.size(), unit) != 0) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(r.substr(0, r.size() - unit.size()), &v) && v > 0 &&
        r.find_first_not_of("0123456789.", 0) == r.size() - unit.size()) {
      return v * scale;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "link rate '%s': a number and kbit, mbit or gbit, as tc spells it (250mbit, 2.5gbit)", rate));
}

int RunTestbedBench(const BenchOptions& o) {
  if (absl::Status s = CheckBenchOp(o.op); !s.ok()) {
    std::fprintf(stderr, "netfold bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::string base = o.op.size() > 1 && o.op[0] == 'i' ? o.op.substr(1) : o.op;
  if (geteuid() != 0) {
    std::fprintf(stderr, "netfold bench --testbed builds network namespaces: run it as root\n");
    return 2;
  }
  const std::string testbed =
      FindBeside(o.self, {"../../deploy/testbed/netfold-testbed",
                          "../share/netfold/testbed/netfold-testbed"});
  const std::string bench = FindBeside(o.self, {"../bench/mpi/collective_bench", "collective_bench"});
  if (testbed.empty() || bench.empty() || FindOnPath("mpirun").empty()) {
    std::fprintf(stderr, "netfold bench --testbed needs deploy/testbed/netfold-testbed, mpirun "
                         "(Open MPI) and bench/mpi/collective_bench: run it from a build "
                         "directory of the checkout (build/tools/netfold)\n");
    return 2;
  }
  const std::string build_dir = fs::path(o.self).parent_path().parent_path().string();
  const std::string topology =
      !o.topology.empty() ? o.topology
                          : FindBeside(o.self, {"../../deploy/topologies/testbed_two_level.yaml"});
  std::vector<double> rates_bps;
  for (const std::string& r : o.testbed_rates) {
    absl::StatusOr<double> bps = ParseLinkRate(r);
    if (!bps.ok()) {
      std::fprintf(stderr, "netfold bench: %s\n", std::string(bps.status().message()).c_str());
      return 2;
    }
    rates_bps.push_back(*bps);
  }
  std::vector<long> sizes = o.sizes.empty() ? std::vector<long>{1l << 20, 16l << 20} : o.sizes;
  if (base == "barrier") sizes = {0};
  const int p = o.ranks.empty() ? 8 : o.ranks.front();
  const std::string out_dir = o.out_dir.empty() ? "netfold-bench-testbed-" + o.op : o.out_dir;
  const std::string log = PrepareOutputDir(out_dir, "testbed.log");
  if (log.empty()) return 2;
  const std::string size_list = SizeList(sizes);
  std::printf("netfold bench %s --testbed: %d ranks on %s (kernel-socket switches, NIC offloads "
              "on), every link shaped with tc tbf to %s in turn; %.2f s per point; %s\n",
              o.op.c_str(), p, topology.c_str(), absl::StrJoin(o.testbed_rates, ", ").c_str(),
              o.seconds_per_size, MachineLine().c_str());

  // The fabric at every rank count, two included (docs/mpi.md).
  const std::vector<std::string> on_fabric = {"-x", "NETFOLD_MPI_ENABLE=1", "-x",
                                              "NETFOLD_MPI_MIN_COMM_SIZE=2"};
  std::vector<TestbedVariant> variants = {{"netfold", on_fabric}};
  if (base == "allreduce") {
    std::vector<std::string> ring = on_fabric;
    ring.insert(ring.end(), {"-x", "NETFOLD_ALGORITHM=ring"});
    variants.push_back({"ring", ring});
  }
  variants.push_back({"ompi-tcp", {"--no-preload"}});
  // results[rate][variant] = points
  std::vector<std::map<std::string, std::vector<Point>>> results(rates_bps.size());
  // switches[rate]: what each switch carried over that rate's runs.
  std::vector<std::vector<control::GetCountersResponse>> switches(rates_bps.size());
  std::vector<std::string> failed;
  const std::vector<std::string> prefix = {"--prefix", kPrefix};
  for (size_t i = 0; i < rates_bps.size(); ++i) {
    const std::string& rate = o.testbed_rates[i];
    std::fprintf(stderr, "  testbed up, links at %s ...\n", rate.c_str());
    // A testbed of ours left by a killed run goes first.
    (void)Testbed(testbed, {"down", "--prefix", kPrefix}, log, absl::Minutes(2));
    std::vector<std::string> up = {"up", topology, "--backend", "udp", "--rate", "all=" + rate,
                                   "--build-dir", build_dir};
    up.insert(up.end(), prefix.begin(), prefix.end());
    if (!Testbed(testbed, up, log, absl::Minutes(3))) {
      std::fprintf(stderr, "  the testbed did not come up at %s (see %s)\n", rate.c_str(), log.c_str());
      failed.push_back("testbed at " + rate);
      (void)Testbed(testbed, {"down", "--prefix", kPrefix}, log, absl::Minutes(2));
      continue;
    }
    for (const TestbedVariant& v : variants) {
      std::fprintf(stderr, "  measuring %s on %d ranks at %s ...\n", v.name.c_str(), p, rate.c_str());
      std::vector<std::string> run = {"mpirun", "--prefix", kPrefix, "-np", std::to_string(p)};
      run.insert(run.end(), v.options.begin(), v.options.end());
      run.insert(run.end(), {"--", bench, o.op, size_list, absl::StrFormat("%.3f", o.seconds_per_size)});
      std::string out;
      const absl::Duration timeout =
          absl::Seconds(120 + static_cast<int>(sizes.size() * (o.seconds_per_size * 4 + 60)));
      if (!Testbed(testbed, run, log, timeout, &out)) {
        std::fprintf(stderr, "  %s at %s failed or timed out (see %s)\n", v.name.c_str(),
                     rate.c_str(), log.c_str());
        failed.push_back(absl::StrFormat("%s at %s", v.name, rate));
      }
      results[i][v.name] = ParsePoints(out);
    }
    std::string counters;
    if (!Testbed(testbed, {"counters", "all", "--json", "--prefix", kPrefix}, log,
                 absl::Minutes(1), &counters)) {
      failed.push_back("the switches' counters at " + rate);
    } else if (auto parsed = ParseSwitchCountersLines(counters); !parsed.ok()) {
      std::fprintf(stderr, "  %s\n", std::string(parsed.status().message()).c_str());
      failed.push_back("the switches' counters at " + rate);
    } else {
      switches[i] = *std::move(parsed);
    }
    if (!Testbed(testbed, {"down", "--prefix", kPrefix}, log, absl::Minutes(2))) {
      failed.push_back("testbed down at " + rate);
    }
  }

  const std::string csv_path = out_dir + "/results.csv";
  std::ofstream csv(csv_path);
  csv << "op,ranks,size_bytes,variant,iterations,avg_us,p50_us,p99_us,link_bytes_per_op,"
         "link_rate_bps\n";
  // The bound: in-network moves V each way per host link where a ring moves
  // 2(p-1)V/p (allreduce), so on links that set the pace it takes
  // p / (2(p-1)) of the ring's time.
  const double bound = static_cast<double>(p) / (2.0 * (p - 1));
  std::printf("\n%-9s %9s  %11s %11s %11s  %9s %9s  %9s\n", "link", "size", "in-network", "ring",
              "ompi-tcp", "nf/ring", "nf/tcp", "link use");
  for (size_t i = 0; i < rates_bps.size(); ++i) {
    for (long size : sizes) {
      const Point* nf = PointOf(results[i]["netfold"], size);
      const Point* ring = PointOf(results[i]["ring"], size);
      const Point* tcp = PointOf(results[i]["ompi-tcp"], size);
      for (const TestbedVariant& v : variants) {
        if (const Point* pt = PointOf(results[i][v.name], size)) {
          csv << absl::StrFormat("%s,%d,%d,%s,%d,%.3f,%.3f,%.3f,%.1f,%.0f\n", o.op, p, size, v.name,
                                 pt->iterations, pt->avg, pt->p50, pt->p99, pt->link_bytes,
                                 rates_bps[i]);
        }
      }
      // The share of one direction of a host link the in-network run used:
      // half its link bytes (both directions) over what the link carries in
      // the operation's time.
      const double use = nf && nf->link_bytes > 0 && nf->avg > 0
                             ? nf->link_bytes / 2 / (rates_bps[i] / 8 * nf->avg * 1e-6)
                             : -1;
      auto ratio = [](const Point* a, const Point* b) {
        return a && b ? absl::StrFormat("%.2fx", a->avg / b->avg) : std::string("-");
      };
      std::printf("%-9s %9s  %11s %11s %11s  %9s %9s  %9s\n", o.testbed_rates[i].c_str(),
                  HumanSize(size).c_str(), Us(nf ? nf->avg : -1).c_str(),
                  Us(ring ? ring->avg : -1).c_str(), Us(tcp ? tcp->avg : -1).c_str(),
                  ratio(nf, ring).c_str(), ratio(nf, tcp).c_str(),
                  use >= 0 ? absl::StrFormat("%.0f %%", use * 100).c_str() : "-");
    }
  }
  csv.close();
  std::printf("\nnf/ring: in-network over libnetfold's ring on the same links (the bound on links "
              "that set the pace is p/(2(p-1)) = %.3f at %d ranks); nf/tcp: over Open MPI's TCP "
              "through the same switches; link use: the in-network run's bytes on one host link, "
              "one direction, over what the link carries in that time.\nCSV: %s\n",
              bound, p, csv_path.c_str());
  // What each switch carried, per rate: every variant's runs (Open MPI's
  // TCP crosses the switches as plain IP and is not counted here). The
  // switches run a process each, in their namespaces.
  for (size_t i = 0; i < rates_bps.size(); ++i) {
    if (switches[i].empty()) continue;
    std::printf("\nthe switches at %s, over every run:\n", o.testbed_rates[i].c_str());
    for (const control::GetCountersResponse& c : switches[i]) {
      std::printf("  %s\n", FormatSwitchTraffic(c).c_str());
    }
    for (const std::string& w : SwitchTrafficWarnings(switches[i], /*one_process=*/false,
                                                      /*batches_expected=*/true)) {
      std::printf("WARNING: %s\n", w.c_str());
    }
  }
  Plot(o.self, csv_path, out_dir);
  if (!failed.empty()) {
    std::printf("FAILED: %s (see %s)\n", absl::StrJoin(failed, ", ").c_str(), log.c_str());
    return 1;
  }
  return 0;
}

}  // namespace netfold::tools
