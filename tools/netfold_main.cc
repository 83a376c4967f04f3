// netfold: the command line of the fabric.
//
//   netfold demo [--hosts N] [--faults] [--seed S] [--quick]
//   netfold up [--topology FILE] [--hosts N] [--state-dir DIR] [--faults SPEC]
//   netfold down [--state-dir DIR]
//   netfold status [--manager IP:PORT | --state-dir DIR]
//   netfold bench allreduce|reduce|bcast|barrier [--ranks ..] [--sizes ..] [--quick]
//
// See docs/operations.md.
#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "manager/status_text.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tools/bench.h"
#include "tools/demo.h"
#include "tools/local_fabric.h"

namespace netfold::tools {
namespace {

constexpr char kUsage[] =
    "usage: netfold COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  demo    start a local fabric (3 switches) and N host processes on loopback, run\n"
    "          allreduce/reduce/bcast/barrier for every type and op, verify every result,\n"
    "          stop everything.   --hosts N (8)  --faults  --seed S  --quick\n"
    "  up      start a manager and the switches of a topology in the background and print\n"
    "          what to export.   --topology FILE | --hosts N (8)   --state-dir DIR\n"
    "          --faults IMPAIRMENT (on every switch port, e.g. drop=0.01,seed=3)\n"
    "  down    stop the fabric started by `up`.   --state-dir DIR\n"
    "  status  print switches, trees, jobs, groups and resources.\n"
    "          --manager IP:PORT (default: the fabric of --state-dir, or $NETFOLD_MANAGER)\n"
    "  bench   allreduce|reduce|bcast|barrier: the fabric against Open MPI (shared memory\n"
    "          and TCP) in the same run: a table of ratios, a CSV and PNG plots.\n"
    "          --ranks 2,4,8,16  --sizes 4,4096,...  --seconds S (per point)  --out DIR  --quick\n"
    "\n"
    "Common: --log-level error|warning|info|debug|trace. The state directory defaults to\n"
    "$NETFOLD_STATE_DIR or /tmp/netfold-<uid>.\n";

// --key=value / --key value / --flag, after the command.
struct Args {
  std::map<std::string, std::string> values;
  std::string error;

  static Args Parse(int argc, char** argv, const std::vector<std::string>& flags,
                    const std::vector<std::string>& valued) {
    Args a;
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        a.error = absl::StrFormat("unexpected argument '%s'", arg);
        return a;
      }
      std::string key = arg.substr(2), value;
      if (size_t eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      }
      for (char& c : key) c = c == '_' ? '-' : c;
      const bool is_flag = std::find(flags.begin(), flags.end(), key) != flags.end();
      const bool is_valued = std::find(valued.begin(), valued.end(), key) != valued.end();
      if (!is_flag && !is_valued) {
        a.error = absl::StrFormat("unknown option --%s", key);
        return a;
      }
      if (is_valued && value.empty() && arg.find('=') == std::string::npos) {
        if (i + 1 >= argc) {
          a.error = absl::StrFormat("--%s needs a value", key);
          return a;
        }
        value = argv[++i];
      }
      a.values[key] = is_flag && value.empty() ? "1" : value;
    }
    return a;
  }
  bool Has(const std::string& k) const { return values.count(k) > 0; }
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
  }
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "netfold: %s\n", message.c_str());
  return 2;
}

std::string SelfPath(const char* argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return argv0;
  buf[n] = '\0';
  return buf;
}

void ApplyLogLevel(const Args& args) {
  if (args.Has("log-level")) {
    if (auto level = ParseLogLevel(args.Get("log-level"))) SetLogLevel(*level);
  }
}

int Demo(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, {"faults", "quick"}, {"hosts", "seed", "log-level"});
  if (!args.error.empty()) return Fail(args.error);
  ApplyLogLevel(args);
  DemoOptions o;
  o.self = SelfPath(argv[0]);
  o.faults = args.Has("faults");
  o.quick = args.Has("quick");
  o.log_level = args.Get("log-level", "warning");
  if (args.Has("hosts") && (!absl::SimpleAtoi(args.Get("hosts"), &o.hosts) || o.hosts < 2 ||
                            o.hosts > 64)) {
    return Fail("--hosts must be a number from 2 to 64");
  }
  if (args.Has("seed") && !absl::SimpleAtoi(args.Get("seed"), &o.seed)) {
    return Fail("--seed must be a number");
  }
  return RunDemo(o);
}

int Up(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, {}, {"topology", "hosts", "state-dir", "faults", "log-level"});
  if (!args.error.empty()) return Fail(args.error);
  ApplyLogLevel(args);
  LocalFabricOptions o;
  o.topology_file = args.Get("topology");
  o.state_dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  o.log_level = args.Get("log-level", "warning");
  o.detach = true;
  if (args.Has("hosts") && (!absl::SimpleAtoi(args.Get("hosts"), &o.hosts) || o.hosts < 1)) {
    return Fail("--hosts must be a positive number");
  }
  if (args.Has("faults")) o.link_faults = "default/both/" + args.Get("faults");
  auto fabric = LocalFabric::Start(o);
  if (!fabric.ok()) return Fail(std::string(fabric.status().message()));
  (*fabric)->Release();
  std::printf("netfold fabric up: %zu switches, topology %s, logs in %s\n",
              (*fabric)->switch_names().size(), (*fabric)->topology_file().c_str(),
              (*fabric)->state_dir().c_str());
  std::printf("hosts of the topology: ");
  for (const std::string& h : (*fabric)->host_names()) std::printf("%s ", h.c_str());
  std::printf("\n\nexport NETFOLD_MANAGER=%s\n", (*fabric)->manager_address().c_str());
  std::printf("\n(stop it with: netfold down%s)\n",
              args.Has("state-dir") ? (" --state-dir " + o.state_dir).c_str() : "");
  return 0;
}

int Down(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, {}, {"state-dir", "log-level"});
  if (!args.error.empty()) return Fail(args.error);
  const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  absl::Status s = LocalFabric::StopStateDir(dir);
  if (!s.ok()) return Fail(std::string(s.message()));
  std::printf("netfold fabric in %s stopped\n", dir.c_str());
  return 0;
}

int Status(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, {}, {"manager", "state-dir", "log-level"});
  if (!args.error.empty()) return Fail(args.error);
  std::string manager = args.Get("manager");
  if (manager.empty()) {
    std::ifstream in(args.Get("state-dir", LocalFabric::DefaultStateDir()) + "/manager.address");
    std::getline(in, manager);
  }
  if (manager.empty()) {
    if (const char* m = std::getenv("NETFOLD_MANAGER")) manager = m;
  }
  if (manager.empty()) return Fail("no manager: pass --manager, run `netfold up`, or set NETFOLD_MANAGER");
  auto stub = control::Admin::NewStub(grpc::CreateChannel(manager, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  control::GetStatusResponse status;
  grpc::Status s = stub->GetStatus(&c, control::GetStatusRequest(), &status);
  if (!s.ok()) {
    return Fail(absl::StrFormat("manager %s: %s", manager, s.error_message()));
  }
  std::printf("manager %s\n%s", manager.c_str(), manager::FormatStatus(status).c_str());
  return 0;
}

int Bench(int argc, char** argv) {
  BenchOptions o;
  o.self = SelfPath(argv[0]);
  int first = 2;
  if (argc > 2 && argv[2][0] != '-') {
    o.op = argv[2];
    first = 3;
  }
  // Re-use the option parser on the rest.
  std::vector<char*> rest = {argv[0], argv[1]};
  for (int i = first; i < argc; ++i) rest.push_back(argv[i]);
  Args args = Args::Parse(static_cast<int>(rest.size()), rest.data(), {"quick"},
                          {"ranks", "sizes", "seconds", "out", "log-level"});
  if (!args.error.empty()) return Fail(args.error);
  o.quick = args.Has("quick");
  if (o.quick) {
    o.ranks = {2, 4};
    o.seconds_per_size = 0.2;
  }
  auto parse_list = [](const std::string& text, auto* out) {
    out->clear();
    for (absl::string_view f : absl::StrSplit(text, ',')) {
      typename std::remove_pointer_t<decltype(out)>::value_type v{};
      if (!absl::SimpleAtoi(f, &v) || v < 0) return false;
      out->push_back(v);
    }
    return !out->empty();
  };
  if (args.Has("ranks") && (!parse_list(args.Get("ranks"), &o.ranks) ||
                            *std::min_element(o.ranks.begin(), o.ranks.end()) < 2)) {
    return Fail("--ranks is a comma-separated list of rank counts >= 2");
  }
  if (args.Has("sizes") && !parse_list(args.Get("sizes"), &o.sizes)) {
    return Fail("--sizes is a comma-separated list of byte counts");
  }
  if (args.Has("seconds") && (!absl::SimpleAtod(args.Get("seconds"), &o.seconds_per_size) ||
                              o.seconds_per_size <= 0)) {
    return Fail("--seconds must be a positive number");
  }
  o.out_dir = args.Get("out");
  return RunBench(o);
}

}  // namespace
}  // namespace netfold::tools

int main(int argc, char** argv) {
  using namespace netfold::tools;  // NOLINT
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help" ||
      std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "demo") return Demo(argc, argv);
  if (command == "up") return Up(argc, argv);
  if (command == "down") return Down(argc, argv);
  if (command == "status") return Status(argc, argv);
  if (command == "bench") return Bench(argc, argv);
  if (command == "__demo-rank") return RunDemoRank();
  std::fprintf(stderr, "netfold: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
