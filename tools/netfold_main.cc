// netfold: the command line of the fabric.
//
//   netfold demo [--hosts N] [--faults] [--seed S] [--quick]
//   netfold up [--topology FILE] [--hosts N] [--state-dir DIR] [--faults SPEC] [--plaintext]
//   netfold down [--state-dir DIR]
//   netfold status [--manager IP:PORT | --state-dir DIR] [--switch NAME]
//   netfold explain --job ID [--ranks LIST] | --hosts H0,H1,.. [--slots K] [--slot-bytes P]
//   netfold fault SWITCH IMPAIRMENT [--peer IP:PORT|all|default] [--direction both|send|receive]
//   netfold certs --out DIR [--hosts ADDR,...] [--days N] [--force]
//   netfold bench allreduce|reduce|bcast|barrier|allgather|reduce_scatter [--ranks ..] [--sizes ..] [--rounds N] [--slots K,..] [--quick] [--poll-us N] [--testbed RATES]
//   netfold help [COMMAND]      (also: netfold --help, netfold COMMAND --help)
//   netfold completion bash
//
// The verbs and their table are here; the framework that reads the table
// (the option parser, the usage, the bash completion) is tools/cli.h.
// See docs/operations.md.
#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "auth/fabric_credential.h"
#include "auth/grpc_credential.h"
#include "auth/tls_files.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "proto/control/plane_name.h"
#include "tools/bench.h"
#include "tools/cli.h"
#include "tools/demo.h"
#include "tools/explain.h"
#include "tools/fabric_certificates.h"
#include "tools/fabric_daemons.h"
#include "tools/local_fabric.h"
#include "tools/state_dir.h"
#include "tools/status_text.h"

namespace netfold::tools {
namespace {

int Demo(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("demo"));
  if (!args.error.empty()) return FailUsage("demo", args.error);
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
  Args args = Args::Parse(argc, argv, *FindCommand("up"));
  if (!args.error.empty()) return FailUsage("up", args.error);
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
  o.plaintext = args.Has("plaintext");
  if (args.Has("switch-processes")) {
    const std::string mode = args.Get("switch-processes");
    using SwitchProcesses = LocalFabricOptions::SwitchProcesses;
    if (mode == "auto") {
      o.switch_processes = SwitchProcesses::kAuto;
    } else if (mode == "one") {
      o.switch_processes = SwitchProcesses::kOne;
    } else if (mode == "each") {
      o.switch_processes = SwitchProcesses::kEach;
    } else {
      return Fail("--switch-processes must be auto, one or each");
    }
  }
  if (args.Has("poll-us") && (!absl::SimpleAtoi(args.Get("poll-us"), &o.switch_poll_us) ||
                              o.switch_poll_us < 0 || o.switch_poll_us > 1000000)) {
    return Fail("--poll-us must be a number of microseconds from 0 to 1000000");
  }
  if (args.Has("receive-queues") &&
      (!absl::SimpleAtoi(args.Get("receive-queues"), &o.switch_receive_queues) ||
       o.switch_receive_queues < 0 || o.switch_receive_queues > 16)) {
    return Fail("--receive-queues must be a number from 0 to 16");
  }
  if (o.switch_receive_queues > 0 && o.switch_poll_us > 0) {
    return Fail("--receive-queues and --poll-us do not go together: the queues sleep until a "
                "packet comes");
  }
  if (args.Has("planes") && (!absl::SimpleAtoi(args.Get("planes"), &o.planes) || o.planes < 1 ||
                             o.planes > static_cast<int>(control::kMaxPlanes))) {
    return Fail(absl::StrFormat("--planes must be a number from 1 to %d", control::kMaxPlanes));
  }
  auto fabric = LocalFabric::Start(o);
  if (!fabric.ok()) return Fail(std::string(fabric.status().message()));
  (*fabric)->Release();
  // A switch's planes are counted once: "3 switches x 2 data planes".
  const uint32_t planes = (*fabric)->planes();
  std::printf("netfold fabric up: %zu switches%s (%s), topology %s, logs in %s\n",
              (*fabric)->switch_names().size() / planes,
              planes > 1 ? absl::StrFormat(" x %d data planes", planes).c_str() : "",
              (*fabric)->one_switch_process() ? "one process" : "a process each",
              (*fabric)->topology_file().c_str(), (*fabric)->state_dir().c_str());
  std::printf("hosts of the topology: ");
  for (const std::string& h : (*fabric)->host_names()) std::printf("%s ", h.c_str());
  std::printf("\n\nexport NETFOLD_MANAGER=%s\n", (*fabric)->manager_address().c_str());
  std::printf("export NETFOLD_CREDENTIAL_FILE=%s\n", (*fabric)->credential_file().c_str());
  if (!o.plaintext) {
    std::printf("export NETFOLD_TLS_CA=%s\n", (*fabric)->tls_ca_file().c_str());
  } else {
    std::fprintf(stderr,
                 "netfold up: WARNING: PLAINTEXT (--plaintext): the control plane runs without "
                 "TLS; the fabric credential crosses loopback in clear (docs/security.md)\n");
  }
  if (planes > 1) {
    std::printf("\n(groups take the %d planes in turn; export NETFOLD_CHANNELS=%d to spread each "
                "group's operations over them: docs/host.md, \"Channels\")\n",
                planes, planes);
  }
  std::printf("\n(stop it with: netfold down%s)\n",
              args.Has("state-dir") ? (" --state-dir " + o.state_dir).c_str() : "");
  return 0;
}

int Down(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("down"));
  if (!args.error.empty()) return FailUsage("down", args.error);
  const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  std::vector<std::string> notes;
  absl::Status s = LocalFabric::StopStateDir(dir, absl::Seconds(5), &notes);
  for (const std::string& n : notes) std::fprintf(stderr, "netfold down: %s\n", n.c_str());
  if (!s.ok()) return Fail(std::string(s.message()));
  std::printf("netfold fabric in %s stopped\n", dir.c_str());
  return 0;
}

// The manager to talk to: --manager, the fabric of --state-dir, or
// $NETFOLD_MANAGER; "" if none. A state directory that another user could
// have prepared (tools/state_dir.h) is an error, not a source of addresses.
absl::StatusOr<std::string> FindManager(const Args& args) {
  std::string manager = args.Get("manager");
  if (manager.empty()) {
    absl::StatusOr<StateDir> dir =
        StateDir::Open(args.Get("state-dir", LocalFabric::DefaultStateDir()), /*create=*/false);
    if (!dir.ok() && !absl::IsNotFound(dir.status())) return dir.status();
    if (dir.ok()) {
      const std::string text = dir->ReadFile("manager.address", 256).value_or("");
      manager = std::string(absl::StripAsciiWhitespace(text));
    }
  }
  if (manager.empty()) {
    if (const char* m = std::getenv("NETFOLD_MANAGER")) manager = m;
  }
  return manager;
}

// What the command presents and trusts: the credential and the CA of the
// fabric of --state-dir if that directory has a credential (like its manager
// address), else the default ones (NETFOLD_CREDENTIAL_FILE, then the default
// state directory's; NETFOLD_TLS_CA, then the ca.pem beside the credential).
// No credential: none presented (a manager run with auth: none); no CA:
// plaintext (a fabric run with --plaintext).
absl::StatusOr<auth::ClientAuth> FindClientAuth(const Args& args) {
  auth::ClientAuth out;
  std::string credential_file;
  if (args.Has("state-dir")) {
    const std::string dir = args.Get("state-dir");
    absl::StatusOr<std::string> credential =
        auth::ReadCredentialFile(dir + "/" + auth::kCredentialFileName);
    if (!absl::IsNotFound(credential.status())) {
      if (!credential.ok()) return credential.status();
      out.credential = *std::move(credential);
      absl::StatusOr<std::string> ca = auth::ReadTlsCaFile(dir + "/" + auth::kTlsCaFileName);
      if (ca.ok()) out.tls_ca_pem = *std::move(ca);
      if (!ca.ok() && !absl::IsNotFound(ca.status())) return ca.status();
      return out;
    }
  }
  credential_file = auth::DefaultCredentialFile();
  if (!credential_file.empty()) {
    absl::StatusOr<std::string> credential = auth::ReadCredentialFile(credential_file);
    if (credential.ok()) out.credential = *std::move(credential);
    if (!credential.ok() && !absl::IsNotFound(credential.status())) return credential.status();
  }
  if (const std::string ca_file = auth::DefaultTlsCaFile(credential_file); !ca_file.empty()) {
    NETFOLD_ASSIGN_OR_RETURN(out.tls_ca_pem, auth::ReadTlsCaFile(ca_file));
  }
  return out;
}

// A failed call's error, with what to check when it could not connect.
std::string CallError(const grpc::Status& s, const auth::ClientAuth& client_auth) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return s.error_message();
  return absl::StrFormat("%s (%s)", s.error_message(), auth::ConnectHint(client_auth));
}

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(5);
}

absl::StatusOr<control::GetStatusResponse> GetManagerStatus(const std::string& manager,
                                                            const auth::ClientAuth& credential) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(manager, credential));
  grpc::ClientContext c;
  c.set_deadline(RpcDeadline());
  control::GetStatusResponse status;
  grpc::Status s = stub->GetStatus(&c, control::GetStatusRequest(), &status);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrFormat("manager %s: %s", manager, CallError(s, credential)));
  }
  return status;
}

// The admin address of switch `name`, as it registered with the manager.
absl::StatusOr<std::string> SwitchAdminAddress(const std::string& manager, const std::string& name,
                                               const auth::ClientAuth& credential) {
  absl::StatusOr<control::GetStatusResponse> status = GetManagerStatus(manager, credential);
  if (!status.ok()) return status.status();
  std::string names;
  for (const control::SwitchStatus& sw : status->switches()) {
    if (sw.name() == name) {
      if (sw.admin_address().empty()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "switch %s has no admin address (not registered, or started with --admin_address "
            "none)",
            name));
      }
      return sw.admin_address();
    }
    names += (names.empty() ? "" : ", ") + sw.name();
  }
  return absl::NotFoundError(
      absl::StrFormat("no switch '%s' at manager %s (switches: %s)", name, manager, names));
}

int SwitchStatus(const std::string& manager, const std::string& name,
                 const auth::ClientAuth& credential) {
  absl::StatusOr<std::string> admin = SwitchAdminAddress(manager, name, credential);
  if (!admin.ok()) return Fail(std::string(admin.status().message()));
  auto stub = control::SwitchAdmin::NewStub(auth::CreateChannel(*admin, credential));
  grpc::ClientContext c;
  c.set_deadline(RpcDeadline());
  control::GetCountersResponse r;
  control::GetCountersRequest request;
  // The operator's view (QPs, peers, per-link faults): the switch gives it
  // to a caller with the fabric credential.
  request.set_detail(!credential.credential.empty());
  grpc::Status s = stub->GetCounters(&c, request, &r);
  if (!s.ok()) {
    return Fail(absl::StrFormat("switch %s (%s): %s", name, *admin, CallError(s, credential)));
  }
  std::fputs(FormatSwitchCounters(r, *admin).c_str(), stdout);
  return 0;
}

int Status(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("status"));
  if (!args.error.empty()) return FailUsage("status", args.error);
  const absl::StatusOr<std::string> found = FindManager(args);
  if (!found.ok()) return Fail(std::string(found.status().message()));
  const std::string& manager = *found;
  if (manager.empty()) return Fail("no manager: pass --manager, run `netfold up`, or set NETFOLD_MANAGER");
  absl::StatusOr<auth::ClientAuth> credential = FindClientAuth(args);
  if (!credential.ok()) return Fail(std::string(credential.status().message()));
  if (args.Has("switch")) return SwitchStatus(manager, args.Get("switch"), *credential);
  // The processes of the fabric of `up` whose manager this is, first: they
  // show even when the manager is the one that is down (netfold kill).
  const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  if (absl::StatusOr<StateDir> state = StateDir::Open(dir, /*create=*/false);
      state.ok() &&
      absl::StripAsciiWhitespace(state->ReadFile("manager.address", 256).value_or("")) ==
          manager) {
    if (absl::StatusOr<std::string> daemons = FormatFabricDaemons(dir); daemons.ok()) {
      absl::PrintF("%s\n", *daemons);
    }
  }
  absl::StatusOr<control::GetStatusResponse> status = GetManagerStatus(manager, *credential);
  if (!status.ok()) return Fail(std::string(status.status().message()));
  absl::PrintF("manager %s\n%s", manager, FormatStatus(*status));
  return 0;
}

// Why a group (or a new job) would not fit: the manager's Admin.Explain.
// Exits 0 if it fits, 1 if not, 2 on errors.
int Explain(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("explain"));
  if (!args.error.empty()) return FailUsage("explain", args.error);
  absl::StatusOr<ExplainOptions> options = ParseExplainOptions(args.values);
  if (!options.ok()) return FailUsage("explain", std::string(options.status().message()));
  const absl::StatusOr<std::string> found = FindManager(args);
  if (!found.ok()) return Fail(std::string(found.status().message()));
  const std::string& manager = *found;
  if (manager.empty()) return Fail("no manager: pass --manager, run `netfold up`, or set NETFOLD_MANAGER");
  absl::StatusOr<auth::ClientAuth> credential = FindClientAuth(args);
  if (!credential.ok()) return Fail(std::string(credential.status().message()));
  control::GetStatusResponse status;
  if (options->job_id && options->ranks.empty()) {
    absl::StatusOr<control::GetStatusResponse> st = GetManagerStatus(manager, *credential);
    if (!st.ok()) return Fail(std::string(st.status().message()));
    status = *std::move(st);
  }
  absl::StatusOr<control::ExplainRequest> req = BuildExplainRequest(*options, status);
  if (!req.ok()) return Fail(absl::StrFormat("manager %s: %s", manager, req.status().message()));
  auto stub = control::Admin::NewStub(auth::CreateChannel(manager, *credential));
  grpc::ClientContext c;
  c.set_deadline(RpcDeadline());
  control::ExplainResponse resp;
  grpc::Status s = stub->Explain(&c, *req, &resp);
  if (!s.ok()) return Fail(absl::StrFormat("manager %s: %s", manager, CallError(s, *credential)));
  absl::PrintF("manager %s: %s", manager, FormatExplain(*req, resp));
  return resp.fits() ? 0 : 1;
}

int Kill(int argc, char** argv) {
  // netfold kill NAME [--signal KILL|TERM|STOP|CONT] [--state-dir DIR]
  Args args = Args::Parse(argc, argv, *FindCommand("kill"));
  if (!args.error.empty()) return FailUsage("kill", args.error);
  if (args.positional.size() != 1) {
    return FailUsage("kill", "give the daemon: manager, a switch's name, or switches");
  }
  absl::StatusOr<int> signal = ParseSignalName(args.Get("signal", "KILL"));
  if (!signal.ok()) return FailUsage("kill", std::string(signal.status().message()));
  const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  absl::StatusOr<std::string> said = SignalFabricDaemon(dir, args.positional[0], *signal);
  if (!said.ok()) return Fail(std::string(said.status().message()));
  std::printf("netfold kill: %s\n", said->c_str());
  return 0;
}

int Restart(int argc, char** argv) {
  // netfold restart NAME [--timeout S] [--state-dir DIR]
  Args args = Args::Parse(argc, argv, *FindCommand("restart"));
  if (!args.error.empty()) return FailUsage("restart", args.error);
  if (args.positional.size() != 1) {
    return FailUsage("restart", "give the daemon: manager, a switch's name, or switches");
  }
  double seconds = 30;
  if (args.Has("timeout") && (!absl::SimpleAtod(args.Get("timeout"), &seconds) ||
                              !(seconds > 0 && seconds <= 3600))) {
    return FailUsage("restart", "--timeout: seconds, more than 0 and at most 3600");
  }
  const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
  absl::StatusOr<std::string> said =
      RestartFabricDaemon(dir, args.positional[0], absl::Seconds(seconds));
  if (!said.ok()) return Fail(std::string(said.status().message()));
  std::printf("netfold restart: %s\n", said->c_str());
  return 0;
}

int Fault(int argc, char** argv) {
  // netfold fault SWITCH IMPAIRMENT [options]
  Args args = Args::Parse(argc, argv, *FindCommand("fault"));
  if (!args.error.empty()) return FailUsage("fault", args.error);
  if (args.positional.size() != 2) {
    return FailUsage("fault", "give SWITCH and IMPAIRMENT (e.g. leaf0 drop=0.05,seed=3)");
  }
  const absl::StatusOr<std::string> found = FindManager(args);
  if (!found.ok()) return Fail(std::string(found.status().message()));
  const std::string& manager = *found;
  if (manager.empty()) return Fail("no manager: pass --manager, run `netfold up`, or set NETFOLD_MANAGER");
  const std::string name = args.positional[0];
  control::SetLinkFaultRequest req;
  req.set_peer(args.Get("peer", "all"));
  req.set_impairment(args.positional[1]);
  const std::string direction = args.Get("direction", "both");
  if (direction == "both") {
    req.set_direction(control::LINK_DIRECTION_BOTH);
  } else if (direction == "send") {
    req.set_direction(control::LINK_DIRECTION_SEND);
  } else if (direction == "receive") {
    req.set_direction(control::LINK_DIRECTION_RECEIVE);
  } else {
    return Fail(absl::StrFormat("--direction '%s': use both, send or receive", direction));
  }
  absl::StatusOr<auth::ClientAuth> credential = FindClientAuth(args);
  if (!credential.ok()) return Fail(std::string(credential.status().message()));
  absl::StatusOr<std::string> admin = SwitchAdminAddress(manager, name, *credential);
  if (!admin.ok()) return Fail(std::string(admin.status().message()));
  auto stub = control::SwitchAdmin::NewStub(auth::CreateChannel(*admin, *credential));
  grpc::ClientContext c;
  c.set_deadline(RpcDeadline());
  control::SetLinkFaultResponse resp;
  grpc::Status s = stub->SetLinkFault(&c, req, &resp);
  if (!s.ok()) return Fail(absl::StrFormat("switch %s: %s", name, CallError(s, *credential)));
  absl::PrintF("switch %s: %d link%s changed\n", name, resp.links_size(),
              resp.links_size() == 1 ? "" : "s");
  for (const control::LinkFault& l : resp.links()) {
    absl::PrintF("  %-21s send %s, receive %s\n", l.peer(), l.send(),
                l.receive());
  }
  return 0;
}

// netfold certs --out DIR: a fabric's TLS files for daemons on several
// machines (docs/operations.md, "TLS files for a testbed").
int Certs(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("certs"));
  if (!args.error.empty()) return FailUsage("certs", args.error);
  if (!args.Has("out")) return FailUsage("certs", "give --out DIR");
  std::vector<std::string> hosts;
  if (args.Has("hosts")) hosts = absl::StrSplit(args.Get("hosts"), ',', absl::SkipEmpty());
  int days = 365;
  if (args.Has("days") &&
      (!absl::SimpleAtoi(args.Get("days"), &days) || days < 1 || days > 3650)) {
    return Fail("--days must be a number from 1 to 3650");
  }
  absl::Status s = MakeCertsDirectory(args.Get("out"), hosts, days, args.Has("force"));
  if (!s.ok()) return Fail(std::string(s.message()));
  return 0;
}

int Bench(int argc, char** argv) {
  BenchOptions o;
  o.self = SelfPath(argv[0]);
  Args args = Args::Parse(argc, argv, *FindCommand("bench"));
  if (!args.error.empty()) return FailUsage("bench", args.error);
  if (!args.positional.empty()) o.op = args.positional[0];
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
  if (args.Has("rounds") && (!absl::SimpleAtoi(args.Get("rounds"), &o.rounds) || o.rounds < 1 ||
                             o.rounds > 100)) {
    return Fail("--rounds must be a number from 1 to 100");
  }
  if (args.Has("poll-us") && (!absl::SimpleAtoi(args.Get("poll-us"), &o.poll_us) ||
                              o.poll_us < 0 || o.poll_us > 1000000)) {
    return Fail("--poll-us must be a number of microseconds from 0 to 1000000");
  }
  if (args.Has("slots") &&
      (!parse_list(args.Get("slots"), &o.compare_slots) ||
       *std::min_element(o.compare_slots.begin(), o.compare_slots.end()) < 1 ||
       *std::max_element(o.compare_slots.begin(), o.compare_slots.end()) > 65535)) {
    return Fail("--slots is a comma-separated list of windows (slots per group) from 1 to 65535");
  }
  o.out_dir = args.Get("out");
  if (args.Has("testbed")) {
    for (absl::string_view r : absl::StrSplit(args.Get("testbed"), ',', absl::SkipEmpty())) {
      if (absl::StatusOr<double> bps = ParseLinkRate(std::string(r)); !bps.ok()) {
        return Fail(absl::StrFormat("--testbed: %s", bps.status().message()));
      }
      o.testbed_rates.emplace_back(r);
    }
    if (o.testbed_rates.empty()) return Fail("--testbed is a comma-separated list of link rates");
    if (!args.Has("ranks")) o.ranks = {8};
    if (args.Has("rounds")) return Fail("--rounds is for loopback runs, not --testbed");
    if (args.Has("slots")) return Fail("--slots is for loopback runs, not --testbed");
  } else if (args.Has("topology")) {
    return Fail("--topology is for --testbed runs");
  }
  o.topology = args.Get("topology");
  return RunBench(o);
}

int Help(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("help"));
  if (!args.error.empty()) return FailUsage("help", args.error);
  if (args.positional.empty()) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  const Command* c = FindCommand(args.positional[0]);
  if (c == nullptr) {
    return Fail(absl::StrFormat("no command '%s' (netfold help lists them)", args.positional[0]));
  }
  std::fputs(CommandUsage(*c).c_str(), stdout);
  return 0;
}

int Completion(int argc, char** argv) {
  Args args = Args::Parse(argc, argv, *FindCommand("completion"));
  if (!args.error.empty()) return FailUsage("completion", args.error);
  if (args.positional.size() != 1 || args.positional[0] != "bash") {
    return FailUsage("completion", "say which shell: netfold completion bash");
  }
  std::fputs(BashCompletion().c_str(), stdout);
  return 0;
}

}  // namespace

// The table of commands (tools/cli.h), in the order of the usage.
const std::vector<Command>& Commands() {
  static const std::vector<Command>* const kCommands = new std::vector<Command>{
      {.name = "demo",
       .synopsis = "[--hosts N] [--faults] [--seed S] [--quick]",
       .summary = "start a local fabric (3 switches) and N host processes on loopback, run\n"
                  "allreduce/reduce/bcast/barrier for every type and op, verify every result,\n"
                  "stop everything.   --hosts N (8)  --faults  --seed S  --quick",
       .flags = {"faults", "quick"},
       .valued = {"hosts", "seed"},
       .run = Demo},
      {.name = "up",
       .synopsis = "[--topology FILE | --hosts N] [--state-dir DIR] [--faults IMPAIRMENT] "
                   "[--poll-us N] [--switch-processes auto|one|each] [--receive-queues N] "
                   "[--planes N] [--plaintext]",
       .summary = "start a manager and the switches of a topology in the background and print\n"
                  "what to export.   --topology FILE | --hosts N (8)   --state-dir DIR\n"
                  "--faults IMPAIRMENT (on every switch port, e.g. drop=0.01,seed=3)\n"
                  "--poll-us N: the switches poll N us after each packet (opt-in; ranks:\n"
                  "NETFOLD_POLL_US; gives each switch a process)\n"
                  "--switch-processes: one netfold-switchd for all switches (one thread), or\n"
                  "each its own; auto (default): one when this machine has fewer CPUs than\n"
                  "switches and hosts (kill one switch alone with each)\n"
                  "--receive-queues N: each switch reads its port with N threads (opt-in;\n"
                  "docs/switch.md, \"Receive queues\")\n"
                  "--planes N: N data planes, each switch a thread per plane (the topology's\n"
                  "planes:; docs/manager.md, \"Data planes\"); a job's groups take the planes\n"
                  "in turn, and with NETFOLD_CHANNELS=N each group's operations are spread\n"
                  "over N of them (docs/host.md, \"Channels\")\n"
                  "--plaintext: no TLS on the control plane (the credential crosses loopback\n"
                  "in clear; the default is TLS with a new CA per fabric)",
       .flags = {"plaintext"},
       .valued = {"topology", "hosts", "state-dir", "faults", "poll-us", "switch-processes",
                  "receive-queues", "planes"},
       .run = Up},
      {.name = "down",
       .synopsis = "[--state-dir DIR]",
       .summary = "stop the fabric started by `up`.   --state-dir DIR",
       .valued = {"state-dir"},
       .run = Down},
      {.name = "status",
       .synopsis = "[--manager IP:PORT | --state-dir DIR] [--switch NAME]",
       .summary = "print the daemons of the fabric of `up` (running, stopped or gone), then\n"
                  "the manager's switches, trees, jobs, groups and resources.\n"
                  "--manager IP:PORT (default: the fabric of --state-dir, or $NETFOLD_MANAGER)\n"
                  "--switch NAME: that switch's own counters, peers, QPs and groups instead",
       .valued = {"manager", "state-dir", "switch"},
       .run = Status},
      {.name = "explain",
       .synopsis = "--job ID [--ranks LIST] [--plane P] | --hosts H0,H1,... [--slots K] "
                   "[--slot-bytes P] [--groups G] [--channels N]",
       .summary = "why a group of a running job, or a new job, would not fit now, in the\n"
                  "manager's words (the reasons a refused request got); nothing is reserved.\n"
                  "--job ID [--ranks 0,1,4-7] (default: every rank of the job)\n"
                  "--plane P: the group in data plane P (default 0; docs/manager.md)\n"
                  "--hosts H0,H1,...: a new job, one rank per host (--groups G: its quota;\n"
                  "  --channels N: its NETFOLD_CHANNELS, which the default quota follows)\n"
                  "--slots K  --slot-bytes P   --manager/--state-dir as status\n"
                  "exit status: 0 fits, 1 does not fit, 2 error",
       .valued = {"manager", "state-dir", "job", "ranks", "hosts", "slots", "slot-bytes",
                  "groups", "channels", "plane"},
       .run = Explain},
      {.name = "fault",
       .synopsis = "SWITCH IMPAIRMENT [--peer IP:PORT|all|default] "
                   "[--direction both|send|receive] [--manager IP:PORT | --state-dir DIR]",
       .summary = "SWITCH IMPAIRMENT: set link faults on a running switch, e.g.\n"
                  "`netfold fault leaf0 drop=0.05,seed=3` or `netfold fault root down=1`;\n"
                  "`none` clears them.   --peer IP:PORT|all (default)|default\n"
                  "--direction both (default)|send|receive   --manager/--state-dir as status",
       .valued = {"manager", "state-dir", "peer", "direction"},
       .max_positional = 2,
       .run = Fault},
      {.name = "kill",
       .synopsis = "NAME [--signal KILL|TERM|STOP|CONT] [--state-dir DIR]",
       .summary = "NAME: a process fault on the fabric of `up`: the signal (KILL by default;\n"
                  "STOP pauses, CONT resumes) to its daemon NAME: manager, a switch, or\n"
                  "switches (the one process of every switch: --switch-processes each\n"
                  "gives each switch its own).   --signal S  --state-dir DIR",
       .valued = {"signal", "state-dir"},
       .max_positional = 1,
       .run = Kill},
      {.name = "restart",
       .synopsis = "NAME [--timeout S] [--state-dir DIR]",
       .summary = "NAME: start a daemon of the fabric of `up` again after `kill`, as it was\n"
                  "started (the manager on its port and journal; a switch registers again),\n"
                  "and wait until the manager has it up (the manager: every running\n"
                  "switch).   --timeout S (30; the whole wait)",
       .valued = {"timeout", "state-dir"},
       .max_positional = 1,
       .run = Restart},
      {.name = "certs",
       .synopsis = "--out DIR [--hosts ADDR,...] [--days N] [--force]",
       .summary = "make a fabric's TLS files for daemons on several machines: a new CA\n"
                  "(ca.pem) and a server certificate and key (server.pem, server.key) for\n"
                  "127.0.0.1, ::1, localhost and --hosts (the addresses the manager and the\n"
                  "switches' admin APIs listen on, comma-separated IPs or DNS names).\n"
                  "--out DIR (made 0700)  --days N (365)  --force: replace a set in DIR",
       .flags = {"force"},
       .valued = {"out", "hosts", "days"},
       .run = Certs},
      {.name = "bench",
       .synopsis = "allreduce|reduce|bcast|barrier|allgather|reduce_scatter [--ranks ..] "
                   "[--sizes ..] [--seconds S] [--rounds N] [--slots K,..] "
                   "[--out DIR] [--quick] [--poll-us N] [--testbed RATES [--topology FILE]]",
       .summary = "allreduce|reduce|bcast|barrier|allgather|reduce_scatter: the fabric against\n"
                  "Open MPI (shared memory and TCP) in the same run: a table of ratios, a CSV\n"
                  "and PNG plots. Sizes are the whole vector (allgather: the result;\n"
                  "reduce_scatter: the input). An i in front (iallreduce, ...): the\n"
                  "nonblocking form, waited for at once.\n"
                  "--ranks 2,4,8,16  --sizes 4,4096,...  --seconds S (per point)  --out DIR  "
                  "--quick\n"
                  "--rounds N: every variant N times in alternating order; medians and the\n"
                  "ratio's range over rounds (loopback runs)\n"
                  "--slots 256: netfold also with each window K (NETFOLD_SLOTS=K), next to\n"
                  "the default in the same run, and a table of their ratios\n"
                  "--poll-us N: netfold's switches and ranks poll N us after each packet "
                  "(opt-in)\n"
                  "--testbed 250mbit,1gbit: on the namespace testbed (root), every link shaped\n"
                  "to each rate in turn: in-network, libnetfold's ring and Open MPI over TCP\n"
                  "through the same links (--ranks: one count, default 8; --topology FILE)",
       .flags = {"quick"},
       .valued = {"ranks", "sizes", "seconds", "rounds", "slots", "out", "poll-us", "testbed",
                  "topology"},
       .max_positional = 1,
       .words = BenchOps(),
       .run = Bench},
      {.name = "help",
       .synopsis = "[COMMAND]",
       .summary = "[COMMAND]: this usage, or one command's (as `netfold COMMAND --help`)",
       .max_positional = 1,
       .run = Help},
      {.name = "completion",
       .synopsis = "bash",
       .summary = "bash: print a bash completion script for netfold; load it with\n"
                  "`source <(netfold completion bash)` (docs/operations.md)",
       .max_positional = 1,
       .words = {"bash"},
       .run = Completion},
  };
  return *kCommands;
}

}  // namespace netfold::tools

int main(int argc, char** argv) {
  using namespace netfold::tools;  // NOLINT
  if (argc < 2) {
    std::fputs(Usage().c_str(), stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (command == "__demo-rank") return RunDemoRank();
  const Command* c = FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "netfold: unknown command '%s'\n\n%s", command.c_str(), Usage().c_str());
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(CommandUsage(*c).c_str(), stdout);
      return 0;
    }
  }
  return c->run(argc, argv);
}
