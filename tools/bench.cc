#include "tools/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "host/options.h"
#include "manager/default_window.h"
#include "manager/manager_options.h"
#include "manager/topology.h"
#include "tools/bench_results.h"
#include "tools/local_fabric.h"
#include "tools/run_command.h"
#include "tools/status_text.h"

namespace netfold::tools {
namespace {

namespace fs = std::filesystem;

// Variants measured, in table order.
struct Variant {
  std::string name;                         // column label
  std::vector<std::string> mpirun_options;  // arguments, each passed as is
  bool netfold = false;
};

// results[variant][ranks] = a collective_bench run's points per round
using Results = std::map<std::string, std::map<int, Rounds>>;

const Rounds& RoundsOf(const Results& results, const std::string& variant, int ranks) {
  static const Rounds kNone;
  auto v = results.find(variant);
  if (v == results.end()) return kNone;
  auto r = v->second.find(ranks);
  return r == v->second.end() ? kNone : r->second;
}

// The point of `variant` at `ranks` and `size` over its rounds (medians),
// or nullopt if it was not measured.
std::optional<Point> Find(const Results& results, const std::string& variant, int ranks,
                          long size) {
  return MedianPoint(RoundsOf(results, variant, ranks), size);
}

// "1.23x": the median over rounds of a / b, each round's pair measured
// next to each other; "-" if no round measured both.
std::string Ratio(const Results& results, const std::string& a, const std::string& b, int ranks,
                  long size) {
  const std::vector<double> r =
      RoundRatios(RoundsOf(results, a, ranks), RoundsOf(results, b, ranks), size);
  return r.empty() ? "-" : absl::StrFormat("%.2fx", Median(r));
}

// "1.10-1.35": the least and greatest of a / b over rounds; "-" if fewer
// than two rounds measured both.
std::string RatioRange(const Results& results, const std::string& a, const std::string& b,
                       int ranks, long size) {
  const std::vector<double> r =
      RoundRatios(RoundsOf(results, a, ranks), RoundsOf(results, b, ranks), size);
  if (r.size() < 2) return "-";
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  return absl::StrFormat("%.2f-%.2f", *lo, *hi);
}

}  // namespace

namespace {

constexpr std::string_view kInPlace = "_in_place";
// The collectives bench measures, and those of them that run in place.
constexpr std::string_view kBenchBases[] = {"allreduce", "reduce",    "bcast",
                                            "barrier",   "allgather", "reduce_scatter"};
bool RunsInPlace(std::string_view base) { return base == "allreduce" || base == "reduce"; }

bool InPlace(const std::string& op) {
  return op.size() > kInPlace.size() &&
         op.compare(op.size() - kInPlace.size(), kInPlace.size(), kInPlace) == 0;
}

// The collective without its forms: "iallreduce_in_place" -> "allreduce".
std::string BenchBase(const std::string& op) {
  std::string base = op.size() > 1 && op[0] == 'i' ? op.substr(1) : op;
  if (InPlace(base)) base.resize(base.size() - kInPlace.size());
  return base;
}

}  // namespace

absl::Status CheckBenchOp(const std::string& op) {
  // "iallreduce", "ibcast", ...: the nonblocking form, waited for at once;
  // "allreduce_in_place", "reduce_in_place": MPI_IN_PLACE.
  const std::string base = BenchBase(op);
  if (std::find(std::begin(kBenchBases), std::end(kBenchBases), base) == std::end(kBenchBases)) {
    return absl::InvalidArgumentError(
        "the collective must be allreduce, reduce, bcast, barrier, allgather or reduce_scatter, "
        "or one of them with an i in front (iallreduce: the nonblocking form), or allreduce or "
        "reduce with _in_place after it (MPI_IN_PLACE)");
  }
  if (InPlace(op) && !RunsInPlace(base)) {
    return absl::InvalidArgumentError("only allreduce and reduce run in place (_in_place)");
  }
  return absl::OkStatus();
}

std::vector<std::string> BenchOps() {
  std::vector<std::string> ops;
  for (const std::string_view nonblocking : {"", "i"}) {
    for (const std::string_view base : kBenchBases) {
      ops.push_back(std::string(nonblocking) + std::string(base));
    }
    for (const std::string_view base : kBenchBases) {
      if (RunsInPlace(base)) {
        ops.push_back(std::string(nonblocking) + std::string(base) + std::string(kInPlace));
      }
    }
  }
  return ops;
}

int RunBench(const BenchOptions& o) {
  const std::string base = BenchBase(o.op);
  if (absl::Status s = CheckBenchOp(o.op); !s.ok()) {
    std::fprintf(stderr, "netfold bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!o.testbed_rates.empty()) return RunTestbedBench(o);
  const std::string bench = FindBeside(o.self, {"../bench/mpi/collective_bench", "collective_bench"});
  const std::string interposer = FindBeside(o.self, {"../host/mpi/libnetfold_mpi.so", "../lib/libnetfold_mpi.so",
                                               "../lib/x86_64-linux-gnu/libnetfold_mpi.so"});
  if (bench.empty() || interposer.empty() || FindOnPath("mpirun").empty()) {
    std::fprintf(stderr, "netfold bench needs mpirun (Open MPI), bench/mpi/collective_bench and "
                         "libnetfold_mpi.so (build with -Dmpi=enabled)\n");
    return 2;
  }
  std::vector<long> sizes = o.sizes;
  if (sizes.empty()) {
    sizes = o.quick ? std::vector<long>{8, 4096, 65536}
                    : std::vector<long>{4, 64, 1024, 16384, 262144, 4l << 20, 64l << 20};
  }
  if (base == "barrier") sizes = {0};
  std::vector<int> ranks = o.ranks;
  const int max_ranks = *std::max_element(ranks.begin(), ranks.end());
  const std::string out_dir = o.out_dir.empty() ? "netfold-bench-" + o.op : o.out_dir;
  const std::string log = PrepareOutputDir(out_dir, "mpirun.log");
  if (log.empty()) return 2;
  std::error_code ec;

  std::printf("netfold bench %s: ranks %s, sizes %s .. %s, %.2f s per point%s; %s\n",
              o.op.c_str(), absl::StrJoin(ranks, ",").c_str(), HumanSize(sizes.front()).c_str(),
              HumanSize(sizes.back()).c_str(), o.seconds_per_size,
              o.rounds > 1 ? absl::StrFormat(", %d rounds in alternating order", o.rounds).c_str()
                           : "",
              MachineLine().c_str());
  LocalFabricOptions fo;
  fo.hosts = max_ranks;
  fo.switch_poll_us = o.poll_us;
  auto fabric = LocalFabric::Start(fo);
  if (!fabric.ok()) {
    std::fprintf(stderr, "netfold bench: %s\n", fabric.status().ToString().c_str());
    return 2;
  }
  // The window every netfold rank gets: the manager's defaults (LocalFabric
  // sets none) within what the fabric's switches hold, what `netfold up`
  // users get too.
  auto topology = manager::Topology::LoadFile((*fabric)->topology_file());
  if (!topology.ok()) {
    std::fprintf(stderr, "netfold bench: %s\n", topology.status().ToString().c_str());
    return 2;
  }
  manager::DefaultWindow window = manager::DefaultWindowFor(manager::JobLimits{}, *topology);
  // Unless this environment, which the ranks inherit, asks for its own: read
  // as the ranks' library reads it.
  host::ContextOptions rank_options;
  if (absl::Status s = host::ApplyEnvironment(&rank_options); !s.ok()) {
    std::fprintf(stderr, "netfold bench: the ranks would refuse this environment: %s\n",
                 s.ToString().c_str());
    return 2;
  }
  std::string asked;
  if (rank_options.num_slots != 0) {
    window.num_slots = rank_options.num_slots;
    asked += absl::StrFormat(" (NETFOLD_SLOTS=%d)", rank_options.num_slots);
  }
  if (rank_options.slot_bytes != 0) {
    window.slot_bytes = rank_options.slot_bytes;
    asked += absl::StrFormat(" (NETFOLD_SLOT_BYTES=%d)", rank_options.slot_bytes);
  }
  std::printf("fabric: manager %s, 3 switches (root, leaf0, leaf1), K=%u slots of P=%u bytes%s; %s\n",
              (*fabric)->manager_address().c_str(), window.num_slots, window.slot_bytes,
              asked.c_str(),
              o.poll_us > 0 ? absl::StrFormat("switches and netfold ranks poll %d us after each packet",
                                              o.poll_us).c_str()
                            : "netfold sleeps in epoll (no polling; --poll-us N to poll)");
  // Where the ranks sit decides how many switch processes an operation
  // crosses (LocalFabric puts the first half of the hosts on leaf0).
  const int on_leaf0 = (max_ranks + 1) / 2;
  std::vector<int> one_leaf, three;
  for (int p : ranks) (p <= on_leaf0 ? one_leaf : three).push_back(p);
  std::printf("placement: rank r is host h<r>; %s on leaf0, the rest on leaf1.%s%s\n\n",
              on_leaf0 == 1 ? "h0" : absl::StrFormat("h0..h%d", on_leaf0 - 1).c_str(),
              one_leaf.empty() ? ""
                               : absl::StrFormat(" Ranks %s: leaf0 alone (one switch).",
                                                 absl::StrJoin(one_leaf, ",")).c_str(),
              three.empty() ? ""
                            : absl::StrFormat(" Ranks %s: leaf0, leaf1 and root (three switches).",
                                              absl::StrJoin(three, ",")).c_str());
  // Every command below is an argument vector (tools/run_command.h): a path
  // or an --out with spaces, quotes or `;` is one argument, never a command.
  std::vector<std::string> netfold_options = {
      "-x", "NETFOLD_MANAGER=" + (*fabric)->manager_address(),
      "-x", "NETFOLD_CREDENTIAL_FILE=" + (*fabric)->credential_file(),
      "-x", "NETFOLD_TLS_CA=" + (*fabric)->tls_ca_file(),
      "-x", "LD_PRELOAD=" + interposer,
      // The fabric at every rank count, two included (the interposer's
      // default leaves two-rank communicators to MPI: docs/mpi.md).
      "-x", "NETFOLD_MPI_ENABLE=1", "-x", "NETFOLD_MPI_MIN_COMM_SIZE=2"};
  if (o.poll_us > 0) {
    netfold_options.insert(netfold_options.end(),
                           {"-x", absl::StrFormat("NETFOLD_POLL_US=%d", o.poll_us)});
  }
  // NETFOLD_INTEGRITY=1 for `netfold bench`: the fabric also runs with the
  // per-job integrity tag (docs/security.md), as "netfold+tag", in the same
  // run; plain "netfold" is then explicitly without it.
  const char* integrity_env = std::getenv("NETFOLD_INTEGRITY");
  const bool with_tag = integrity_env != nullptr && std::string(integrity_env) == "1";
  std::vector<std::string> tag_options = netfold_options;
  if (with_tag) {
    netfold_options.insert(netfold_options.end(), {"-x", "NETFOLD_INTEGRITY=0"});
    tag_options.insert(tag_options.end(), {"-x", "NETFOLD_INTEGRITY=1"});
  }
  // In the order they run (the tables have their own): netfold next to
  // Open MPI over TCP, the ratio the goals are set in.
  std::vector<Variant> variants = {
      {"netfold", netfold_options, true},
      {"ompi-tcp", {"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"}, false},
      {"ompi-sm", {"--mca", "btl", "self,vader"}, false},
  };
  if (with_tag) variants.insert(variants.begin() + 1, {"netfold+tag", tag_options, true});
  // --slots: the same fabric and ranks with other windows, each measured
  // next to the default (rounds alternate the order).
  std::vector<std::string> window_variants;
  for (int k : o.compare_slots) {
    std::vector<std::string> options = netfold_options;
    options.insert(options.end(), {"-x", absl::StrFormat("NETFOLD_SLOTS=%d", k)});
    window_variants.push_back(absl::StrFormat("netfold K=%d", k));
    variants.insert(variants.begin() + static_cast<long>(window_variants.size()),
                    {window_variants.back(), options, true});
  }
  // libnetfold's host algorithms (docs/algorithms.md) over the same
  // transport, forced with NETFOLD_ALGORITHM: what the fabric buys.
  const std::vector<std::string> host_algorithms = {"ring", "bidir", "tree"};
  if (o.op == "allreduce") {
    for (const std::string& a : host_algorithms) {
      std::vector<std::string> options = netfold_options;
      options.insert(options.end(), {"-x", "NETFOLD_ALGORITHM=" + a});
      variants.push_back({a, options, true});
    }
  }
  const std::string size_list = SizeList(sizes);

  Results results;
  std::vector<std::string> failed;  // "variant on N ranks"
  auto measure = [&](const Variant& v, int p, int round) {
    const std::string in_round =
        o.rounds > 1 ? absl::StrFormat(" (round %d of %d)", round + 1, o.rounds) : "";
    std::fprintf(stderr, "  measuring %s on %d ranks%s ...\n", v.name.c_str(), p,
                 in_round.c_str());
    std::vector<std::string> argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                                     std::to_string(p)};
    argv.insert(argv.end(), v.mpirun_options.begin(), v.mpirun_options.end());
    argv.insert(argv.end(), {bench, o.op, size_list, absl::StrFormat("%.3f", o.seconds_per_size)});
    CommandOptions run;
    run.timeout =
        absl::Seconds(120 + static_cast<int>(sizes.size() * (o.seconds_per_size * 4 + 20)));
    run.stderr_path = log;
    const uintmax_t log_before = fs::exists(log, ec) ? fs::file_size(log, ec) : 0;
    absl::StatusOr<CommandResult> ran = RunCommand(argv, run);
    std::string out = ran.ok() ? ran->output : "";
    if (!ran.ok() || !ran->Succeeded()) {
      if (!ran.ok()) std::fprintf(stderr, "  %s\n", ran.status().ToString().c_str());
      std::fprintf(stderr, "  %s on %d ranks%s failed or timed out (see %s)\n", v.name.c_str(), p,
                   in_round.c_str(), log.c_str());
      failed.push_back(absl::StrFormat("%s on %d ranks%s", v.name, p, in_round));
      // collective_bench checks one result per size and aborts on a
      // wrong one: say so here, the row stays empty.
      std::ifstream in(log);
      in.seekg(static_cast<std::streamoff>(log_before));
      for (std::string line; std::getline(in, line);) {
        if (line.find("WRONG RESULT") != std::string::npos) {
          std::fprintf(stderr, "  %s\n", line.c_str());
        }
      }
    }
    results[v.name][p].push_back(ParsePoints(out));
  };
  // Rounds alternate the order (forward, then backward, ...): when the
  // machine's speed drifts during a run, no variant is always measured
  // first, and each round's ratios come from runs next to each other.
  for (int p : ranks) {
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t i = 0; i < variants.size(); ++i) {
        measure(variants[round % 2 == 0 ? i : variants.size() - 1 - i], p, round);
      }
    }
  }
  // What the switches carried over every run, and what did not engage
  // that should have (the in-memory links between switches of one process
  // went unused from the eleventh to the twenty-fourth session, unseen).
  std::vector<control::GetCountersResponse> switch_counters;
  for (const std::string& name : (*fabric)->switch_names()) {
    absl::StatusOr<control::GetCountersResponse> c = (*fabric)->SwitchCounters(name);
    if (c.ok()) {
      switch_counters.push_back(*std::move(c));
    } else {
      std::fprintf(stderr, "  %s\n", c.status().ToString().c_str());
    }
  }
  (void)(*fabric)->Stop();

  // The table (medians over rounds), and the CSV with every round.
  const std::string csv_path = out_dir + "/results.csv";
  std::ofstream csv(csv_path);
  csv << "op,ranks,size_bytes,variant,iterations,avg_us,p50_us,p99_us,link_bytes_per_op,round\n";
  for (int p : ranks) {
    for (const Variant& v : variants) {
      const Rounds& rounds = RoundsOf(results, v.name, p);
      for (size_t r = 0; r < rounds.size(); ++r) {
        for (const Point& pt : rounds[r]) {
          csv << absl::StrFormat("%s,%d,%d,%s,%d,%.3f,%.3f,%.3f,%.1f,%d\n", o.op, p, pt.size,
                                 v.name, pt.iterations, pt.avg, pt.p50, pt.p99, pt.link_bytes,
                                 r + 1);
        }
      }
    }
  }
  // With rounds, the ratio columns are the median of each round's ratio
  // and "range" their least and greatest.
  const bool ranges = o.rounds > 1;
  std::printf("%-5s %9s  %11s %11s %11s  %11s %11s  %9s %9s%s  %12s %12s\n", "ranks", "size",
              "netfold avg", "p50", "p99", "ompi-sm avg", "ompi-tcp", "nf/sm", "nf/tcp",
              ranges ? absl::StrFormat(" %11s", "range").c_str() : "", "nf link B/op",
              "ring B/op");
  for (int p : ranks) {
    for (long size : sizes) {
      auto get = [&](const std::string& variant) { return Find(results, variant, p, size); };
      const std::optional<Point> nf = get("netfold");
      const std::optional<Point> sm = get("ompi-sm");
      const std::optional<Point> tcp = get("ompi-tcp");
      // What a ring sends and receives (allgather and reduce-scatter: half
      // of an allreduce's).
      const double ring =
          base == "allreduce" ? 2.0 * (p - 1) * static_cast<double>(size) / p
          : base == "allgather" || base == "reduce_scatter"
              ? 2.0 * (p - 1) * static_cast<double>(size / p) : -1;
      std::printf(
          "%-5d %9s  %11s %11s %11s  %11s %11s  %9s %9s%s  %12s %12s\n", p,
          HumanSize(size).c_str(), Us(nf ? nf->avg : -1).c_str(), Us(nf ? nf->p50 : -1).c_str(),
          Us(nf ? nf->p99 : -1).c_str(), Us(sm ? sm->avg : -1).c_str(),
          Us(tcp ? tcp->avg : -1).c_str(), Ratio(results, "netfold", "ompi-sm", p, size).c_str(),
          Ratio(results, "netfold", "ompi-tcp", p, size).c_str(),
          ranges ? absl::StrFormat(" %11s", RatioRange(results, "netfold", "ompi-tcp", p, size))
                       .c_str()
                 : "",
          nf && nf->link_bytes >= 0 ? absl::StrFormat("%.0f", nf->link_bytes).c_str() : "-",
          ring >= 0 ? absl::StrFormat("%.0f", ring).c_str() : "-");
    }
  }
  if (o.op == "allreduce") {
    // The host algorithms next to in-network: time and the bytes on one
    // rank's link per operation.
    std::printf("\nin-network against libnetfold's host algorithms (same transport, same ranks):\n");
    std::printf("%-5s %9s  %11s %11s %11s %11s  %12s %12s %12s %12s\n", "ranks", "size",
                "in-network", "ring", "bidir", "tree", "in-net B/op", "ring B/op", "bidir B/op",
                "tree B/op");
    for (int p : ranks) {
      for (long size : sizes) {
        auto get = [&](const std::string& variant) { return Find(results, variant, p, size); };
        std::vector<std::optional<Point>> row = {get("netfold")};
        for (const std::string& a : host_algorithms) row.push_back(get(a));
        std::string times, bytes;
        for (const auto& pt : row) times += absl::StrFormat(" %11s", Us(pt ? pt->avg : -1));
        for (const auto& pt : row) {
          bytes += absl::StrFormat(
              " %12s", pt && pt->link_bytes >= 0 ? absl::StrFormat("%.0f", pt->link_bytes) : "-");
        }
        std::printf("%-5d %9s %s %s\n", p, HumanSize(size).c_str(), times.c_str(), bytes.c_str());
      }
    }
  }
  if (with_tag) {
    std::printf("\nthe integrity tag (NETFOLD_INTEGRITY=1), same fabric, same run:\n");
    std::printf("%-5s %9s  %11s %11s %9s  %11s %11s\n", "ranks", "size", "netfold avg",
                "+tag avg", "tag/none", "netfold p99", "+tag p99");
    for (int p : ranks) {
      for (long size : sizes) {
        const std::optional<Point> nf = Find(results, "netfold", p, size);
        const std::optional<Point> tag = Find(results, "netfold+tag", p, size);
        std::printf("%-5d %9s  %11s %11s %9s  %11s %11s\n", p, HumanSize(size).c_str(),
                    Us(nf ? nf->avg : -1).c_str(), Us(tag ? tag->avg : -1).c_str(),
                    Ratio(results, "netfold+tag", "netfold", p, size).c_str(),
                    Us(nf ? nf->p99 : -1).c_str(), Us(tag ? tag->p99 : -1).c_str());
      }
    }
  }
  if (!window_variants.empty()) {
    std::printf("\nother windows (--slots), same fabric, same run; netfold: K=%u\n",
                window.num_slots);
    for (const std::string& w : window_variants) {
      std::printf("%-5s %9s  %11s %11s %9s%s %9s  %11s %11s\n", "ranks", "size", "netfold avg",
                  w.substr(std::string("netfold ").size()).c_str(), "K/default",
                  ranges ? absl::StrFormat(" %11s", "range").c_str() : "", "K/tcp", "netfold p99",
                  "K p99");
      for (int p : ranks) {
        for (long size : sizes) {
          const std::optional<Point> nf = Find(results, "netfold", p, size);
          const std::optional<Point> k = Find(results, w, p, size);
          std::printf(
              "%-5d %9s  %11s %11s %9s%s %9s  %11s %11s\n", p, HumanSize(size).c_str(),
              Us(nf ? nf->avg : -1).c_str(), Us(k ? k->avg : -1).c_str(),
              Ratio(results, w, "netfold", p, size).c_str(),
              ranges ? absl::StrFormat(" %11s", RatioRange(results, w, "netfold", p, size)).c_str()
                     : "",
              Ratio(results, w, "ompi-tcp", p, size).c_str(), Us(nf ? nf->p99 : -1).c_str(),
              Us(k ? k->p99 : -1).c_str());
        }
      }
    }
  }
  csv.close();
  std::printf("\nratios are netfold / Open MPI (below 1: netfold is faster). Link bytes: RoCE bytes "
              "on one rank's link (both directions) per operation, against what a ring must send and "
              "receive (allreduce 2(p-1)V/p; allgather and reduce-scatter (p-1)V/p each way, V the "
              "whole vector).%s\nCSV: %s\n",
              ranges ? absl::StrFormat(" Over %d rounds: times are medians, a ratio is the median "
                                       "of the rounds' ratios (each round's runs next to each "
                                       "other) and range its least and greatest.",
                                       o.rounds).c_str()
                     : " One round: each ratio carries whatever the machine did while it ran; "
                       "--rounds 3 gives the median and range of three.",
              csv_path.c_str());
  std::printf("\nthe switches over every run:\n");
  for (const control::GetCountersResponse& c : switch_counters) {
    std::printf("  %s\n", FormatSwitchTraffic(c).c_str());
  }
  for (const std::string& w :
       SwitchTrafficWarnings(switch_counters, (*fabric)->one_switch_process(),
                             window.num_slots > 1)) {
    std::printf("WARNING: %s\n", w.c_str());
  }
  Plot(o.self, csv_path, out_dir);
  if (!failed.empty()) {
    // The rows of a failed run are missing ('-'), not guessed.
    std::printf("FAILED: %s (see %s)\n", absl::StrJoin(failed, ", ").c_str(), log.c_str());
    return 1;
  }
  return 0;
}

}  // namespace netfold::tools
