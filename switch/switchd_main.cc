// netfold-switchd: one emulated switch, or several on one data-plane
// thread (docs/switch.md).
//
//   netfold-switchd --name leaf0 --data_address 127.0.0.1:4791
//       --manager 127.0.0.1:47910 --credential_file /etc/netfold/credential
//       [--admin_address 127.0.0.1:0] [--config leaf0.yaml]
//   netfold-switchd --config static.yaml            # static mode: no manager
//   netfold-switchd --name root,leaf0,leaf1 --data_address 127.0.0.1:0
//       --admin_port_file 'DIR/{name}.admin_port' ...   # three switches
//
// Flags override the config file. --help prints the usage and the flags
// (exit status 0). SIGTERM or SIGINT shut it down cleanly: the control
// stream ends, every group is removed (no slot left behind), exit status 0.
// Exit status 1 for a runtime error, 2 for a bad command line or config.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/daemon.h"
#include "base/log.h"
#include "proto/control/plane_name.h"
#include "config/command_line.h"
#include "switch/data_plane_thread.h"
#include "switch/switch_daemon.h"
#include "switch/switchd_config.h"
#include "transport/ipv4_endpoint.h"

ABSL_FLAG(std::string, config, "", "YAML config file (docs/switch.md)");
ABSL_FLAG(std::string, name, "",
          "the switch's name (as in the manager's topology); several, separated by commas: "
          "one process runs them all on one data-plane thread (each with its own ports; "
          "--data_address then needs port 0 and the port files a {name})");
ABSL_FLAG(std::string, data_address, "",
          "data-plane ip:port (RoCEv2 over UDP; port 0 picks one; default 127.0.0.1:4791)");
ABSL_FLAG(std::string, backend, "", "I/O backend: udp or dpdk (the dpdk: section of --config; docs/dpdk.md)");
ABSL_FLAG(std::string, admin_address, "",
          "admin API ip:port (default 127.0.0.1:0; \"none\" turns it off)");
ABSL_FLAG(bool, admin_detail, false,
          "let the admin API answer requests for its detailed view (QPNs, PSN counters, "
          "P_Keys, peers); needs a loopback admin_address (the API is not authenticated)");
ABSL_FLAG(std::string, manager, "",
          "the aggregation manager's address ip:port (none: static mode from --config)");
ABSL_FLAG(std::string, credential_file, "",
          "the fabric credential: a file only this user can read (mode 0600), presented to the "
          "manager and asked of admin callers (default: $NETFOLD_CREDENTIAL_FILE)");
ABSL_FLAG(std::string, tls_dir, "",
          "TLS: a directory holding ca.pem (the manager is checked against it), server.pem and "
          "server.key (mode 0600; the admin port presents them), as netfold certs makes it");
ABSL_FLAG(bool, plaintext, false,
          "run without TLS (as tls: none): the fabric credential crosses the network in clear; "
          "the manager must run in plaintext too");
ABSL_FLAG(bool, insecure, false,
          "no credential (as auth: none): anyone who reaches the admin address can set faults "
          "and read QPNs; the manager must run without one too");
// Gone: a secret on the command line is in every user's ps. Still parsed,
// so that the refusal can say what to do instead.
ABSL_FLAG(std::string, secret, "", "no longer accepted: use --credential_file");
ABSL_FLAG(std::string, log_level, "", "error|warning|info|debug|trace");
ABSL_FLAG(std::string, data_port_file, "", "write the bound data-plane UDP port here once serving");
ABSL_FLAG(std::string, admin_port_file, "", "write the bound admin port here once serving");
ABSL_FLAG(std::string, link_faults, "",
          "link faults at start: PEER/DIRECTION/IMPAIRMENT entries separated by ';', PEER = "
          "default|all|ip:port, DIRECTION = send|receive|both, e.g. all/both/drop=0.01,seed=3");
ABSL_FLAG(int, ack_timeout_ms, -1, "RC ACK timeout (default 4)");
ABSL_FLAG(int, retry_count, -1, "RC retransmissions before a QP fails, 0..7 (default 7)");
ABSL_FLAG(int, max_groups, -1, "capacity: groups held at once");
ABSL_FLAG(int, max_slots, -1, "capacity: slots in total");
ABSL_FLAG(int, slot_bytes, -1, "capacity: the largest slot (P), a multiple of 16");
ABSL_FLAG(int, max_qps, -1, "capacity: RC queue pairs");
ABSL_FLAG(bool, in_process_links, true,
          "several switches in one process (--name A,B,..): messages between them are handed "
          "over in memory, not through the sockets, while no link fault was ever set on their "
          "ports (docs/switch.md)");
ABSL_FLAG(int, receive_queues, -1,
          "udp backend: threads that read the data port, 0..16 (default 0: the data-plane "
          "thread reads it; docs/switch.md, \"Receive queues\")");
ABSL_FLAG(int, planes, -1,
          "udp backend: independent data planes, 1..16, each a switch of its own to the "
          "fabric (NAME, NAME@1, ...) with its own ports and thread (default 1; docs/switch.md, "
          "\"Data planes\")");
ABSL_FLAG(int, poll_us, -1,
          "udp backend: read without sleeping this long after the last packet, 0..1000000 "
          "(default 0: sleep at once)");

namespace netfold::sw {
namespace {

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "netfold-switchd: %s\n", std::string(s.message()).c_str());
  return code;
}

// The config file, then the flags over it.
absl::StatusOr<SwitchdConfig> BuildConfig() {
  SwitchdConfig config;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::StatusOr<SwitchdConfig> loaded = LoadSwitchdConfig(absl::GetFlag(FLAGS_config));
    if (!loaded.ok()) return loaded.status();
    config = *std::move(loaded);
  }
  auto set = [](const std::string& flag, std::string* field) {
    if (!flag.empty()) *field = flag;
  };
  set(absl::GetFlag(FLAGS_name), &config.name);
  set(absl::GetFlag(FLAGS_backend), &config.backend);
  set(absl::GetFlag(FLAGS_manager), &config.manager_address);
  if (!absl::GetFlag(FLAGS_secret).empty()) {
    return absl::InvalidArgumentError(
        "--secret is no longer accepted: every user can read a command line (ps). Put the "
        "fabric credential in a file only you can read (chmod 600) and give --credential_file");
  }
  set(absl::GetFlag(FLAGS_credential_file), &config.credential_file);
  if (absl::GetFlag(FLAGS_insecure)) config.auth_none = true;
  set(absl::GetFlag(FLAGS_tls_dir), &config.tls_dir);
  if (absl::GetFlag(FLAGS_plaintext)) config.tls_none = true;
  set(absl::GetFlag(FLAGS_log_level), &config.log_level);
  set(absl::GetFlag(FLAGS_data_port_file), &config.data_port_file);
  set(absl::GetFlag(FLAGS_admin_port_file), &config.admin_port_file);
  if (const std::string a = absl::GetFlag(FLAGS_admin_address); !a.empty()) {
    config.admin_address = a == "none" ? "" : a;
  }
  if (absl::GetFlag(FLAGS_admin_detail)) config.admin_detail = true;
  if (const std::string a = absl::GetFlag(FLAGS_data_address); !a.empty()) {
    absl::StatusOr<transport::Ipv4Endpoint> ep = transport::ParseIpv4Endpoint(a);
    if (!ep.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("--data_address '%s' is not ip:port", a));
    }
    config.data_address = *ep;
  }
  if (const std::string lf = absl::GetFlag(FLAGS_link_faults); !lf.empty()) {
    absl::StatusOr<std::vector<LinkFaultSpec>> faults = ParseLinkFaultList(lf);
    if (!faults.ok()) return faults.status();
    config.link_faults.insert(config.link_faults.end(), faults->begin(), faults->end());
  }
  auto set_int = [](int flag, const char* what, int64_t max, auto* field) -> absl::Status {
    if (flag < 0) return absl::OkStatus();
    if (flag > max) {
      return absl::InvalidArgumentError(absl::StrFormat("--%s %d is larger than %d", what, flag, max));
    }
    *field = static_cast<std::remove_reference_t<decltype(*field)>>(flag);
    return absl::OkStatus();
  };
  SwitchConfig& d = config.data_plane;
  if (absl::GetFlag(FLAGS_ack_timeout_ms) >= 0) {
    d.ack_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_ack_timeout_ms));
  }
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_retry_count), "retry_count", 7, &d.retry_count);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_max_groups), "max_groups", 1 << 20, &d.max_groups);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_max_slots), "max_slots", 1 << 24, &d.max_slots);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          set_int(absl::GetFlag(FLAGS_slot_bytes), "slot_bytes", 1 << 20, &d.max_slot_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_max_qps), "max_qps", 1 << 24, &d.max_qps);
      !s.ok()) {
    return s;
  }
  int64_t poll_us = -1;
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_poll_us), "poll_us", 1000000, &poll_us); !s.ok()) {
    return s;
  }
  if (poll_us >= 0) config.poll_window = absl::Microseconds(poll_us);
  int64_t receive_queues = -1;
  if (absl::Status s =
          set_int(absl::GetFlag(FLAGS_receive_queues), "receive_queues", 16, &receive_queues);
      !s.ok()) {
    return s;
  }
  if (receive_queues >= 0) config.receive_queues = static_cast<uint32_t>(receive_queues);
  int64_t planes = -1;
  if (absl::Status s = set_int(absl::GetFlag(FLAGS_planes), "planes", control::kMaxPlanes, &planes);
      !s.ok()) {
    return s;
  }
  if (planes >= 0) config.planes = static_cast<uint32_t>(planes);
  return config;
}

// One config per switch the process runs: per name of a comma-separated
// --name, and per data plane of each (transport.planes: NAME, NAME@1, ...;
// proto/control/plane_name.h). The port files' {name} becomes each one's
// name. Several switches need a backend that can share a thread and ports of
// their own: the kernel's (port 0), or, for the planes of one switch, the
// given ports counted up (plane p at port + p).
absl::StatusOr<std::vector<SwitchdConfig>> SplitSwitches(const SwitchdConfig& config) {
  std::vector<std::string> names = absl::StrSplit(config.name, ',');
  const uint32_t planes = config.planes;
  if (names.size() == 1 && planes == 1) return std::vector<SwitchdConfig>{config};
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        (names.size() > 1 ? "several switches in one process (--name A,B,..): "
                          : "several data planes (--planes N): ") +
        why);
  };
  if (names.size() > 1) {
    if (config.data_address.port != 0) {
      return refuse("--data_address needs port 0 (each switch gets a port of its own)");
    }
    if (config.backend != "udp" || config.poll_window > absl::ZeroDuration()) {
      return refuse("only the udp backend without poll_us can share a thread");
    }
  }
  std::optional<transport::Ipv4Endpoint> admin;
  if (!config.admin_address.empty()) {
    absl::StatusOr<transport::Ipv4Endpoint> a = transport::ParseIpv4Endpoint(config.admin_address);
    if (!a.ok()) {
      return refuse(absl::StrFormat("admin_address '%s' is not ip:port", config.admin_address));
    }
    admin = *a;
  }
  for (const uint16_t port : {config.data_address.port, admin ? admin->port : uint16_t{0}}) {
    if (port != 0 && port + planes - 1 > 65535) {
      return refuse(absl::StrFormat("port %d + %d planes goes past 65535", port, planes));
    }
  }
  for (const std::string* file : {&config.data_port_file, &config.admin_port_file}) {
    if (!file->empty() && file->find("{name}") == std::string::npos) {
      return refuse(absl::StrFormat("the port file '%s' needs a {name}", *file));
    }
  }
  if (!config.static_qps.empty() || !config.static_groups.empty()) {
    return refuse("static QPs and groups belong to one switch");
  }
  std::vector<SwitchdConfig> out;
  for (const std::string& name : names) {
    if (std::count(names.begin(), names.end(), name) > 1) {
      return refuse(absl::StrFormat("'%s' is named twice", name));
    }
    for (uint32_t plane = 0; plane < planes; ++plane) {
      SwitchdConfig c = config;
      c.name = name;
      c.plane = plane;
      const std::string switch_name = control::PlaneSwitchName(name, plane);
      if (c.data_address.port != 0) c.data_address.port = static_cast<uint16_t>(c.data_address.port + plane);
      if (admin && admin->port != 0) {
        transport::Ipv4Endpoint a = *admin;
        a.port = static_cast<uint16_t>(a.port + plane);
        c.admin_address = a.ToString();
      }
      if (names.size() > 1) c.data_plane.in_process_links = absl::GetFlag(FLAGS_in_process_links);
      c.data_port_file = absl::StrReplaceAll(c.data_port_file, {{"{name}", switch_name}});
      c.admin_port_file = absl::StrReplaceAll(c.admin_port_file, {{"{name}", switch_name}});
      out.push_back(std::move(c));
    }
  }
  return out;
}

int Main(int argc, char** argv) {
  ConfigureMutexDeadlockChecks();
  if (!config::ParseDaemonCommandLine(
          argc, argv,
          "netfold switches: aggregation nodes on a RoCEv2 data plane (docs/switch.md).\n"
          "  netfold-switchd --name NAME --manager IP:PORT --credential_file FILE\n"
          "                  --tls_dir DIR\n"
          "                  [--data_address IP:PORT]\n"
          "                  [--config FILE]\n"
          "  netfold-switchd --config FILE          (static mode: QPs and groups from the file)\n"
          "  netfold-switchd --name A,B,C ...       (several switches, one data-plane thread)")) {
    return 0;  // --help
  }
  if (absl::Status s = InstallTerminationHandlers(); !s.ok()) return Fail(1, s);

  absl::StatusOr<SwitchdConfig> config = BuildConfig();
  if (!config.ok()) return Fail(2, config.status());
  absl::StatusOr<std::vector<SwitchdConfig>> configs = SplitSwitches(*config);
  if (!configs.ok()) return Fail(2, configs.status());
  // The names as given (--name A,B,C), before config becomes the first
  // switch's: whether the switches share data-plane threads, and the log tag.
  const std::string names = config->name;
  for (SwitchdConfig& c : *configs) {
    if (absl::Status s = ValidateSwitchdConfig(c); !s.ok()) return Fail(2, s);
    if (absl::Status s = LoadSwitchdCredential(&c); !s.ok()) return Fail(2, s);
    if (absl::Status s = LoadSwitchdTls(&c); !s.ok()) return Fail(2, s);
  }
  config = configs->front();
  if (config->auth_none && !config->admin_address.empty()) {
    std::fprintf(stderr,
                 "netfold-switchd: WARNING: INSECURE: started with auth: none (--insecure): "
                 "anyone who reaches the admin address %s can set link faults (stopping jobs) "
                 "and read QPNs and P_Keys.\n",
                 config->admin_address.c_str());
  }
  if (!config->tls && (!config->admin_address.empty() || !config->manager_address.empty())) {
    std::fprintf(stderr,
                 "netfold-switchd: WARNING: PLAINTEXT: running without TLS (%s): its calls to "
                 "the manager and to its admin address %s, the fabric credential included, "
                 "cross the network in clear for anyone who can capture them.\n",
                 config->tls_none ? "tls: none, --plaintext" : "auth: none",
                 config->admin_address.empty() ? "(none)" : config->admin_address.c_str());
  }
  if (!config->log_level.empty()) SetLogLevel(*ParseLogLevel(config->log_level));
  SetLogTag(absl::StrFormat("switchd %s", absl::StrReplaceAll(names, {{",", "+"}})));

  // With several switches, one thread per data plane runs that plane of
  // every switch (the daemons stop before the threads go); a switch alone
  // runs a thread of its own for each of its planes.
  std::vector<std::unique_ptr<DataPlaneThread>> shared;
  if (absl::StrContains(names, ',')) {
    for (uint32_t plane = 0; plane < config->planes; ++plane) {
      shared.push_back(std::make_unique<DataPlaneThread>(DataPlaneThreadOptions{
          .idle_wait = config->idle_wait.value_or(kIdleWaitWoken),
          .sched_batch = config->sched_batch,
          .name = plane == 0 ? names : absl::StrFormat("%s@%d", names, plane)}));
    }
  }
  std::vector<std::unique_ptr<SwitchDaemon>> daemons;
  for (const SwitchdConfig& c : *configs) {
    absl::StatusOr<std::unique_ptr<SwitchDaemon>> daemon =
        SwitchDaemon::Start(c, shared.empty() ? nullptr : shared[c.plane].get());
    if (!daemon.ok()) return Fail(1, daemon.status());
    if (!c.data_port_file.empty()) {
      if (absl::Status s = WritePortFile(c.data_port_file, (*daemon)->data_address().port);
          !s.ok()) {
        return Fail(1, s);
      }
    }
    if (!c.admin_port_file.empty() && (*daemon)->admin_port() != 0) {
      if (absl::Status s = WritePortFile(c.admin_port_file, (*daemon)->admin_port()); !s.ok()) {
        return Fail(1, s);
      }
    }
    daemons.push_back(*std::move(daemon));
  }

  const int sig = WaitForTerminationSignal();
  NETFOLD_LOG(kWarning) << "signal " << sig << ": shutting down";
  int code = 0;
  for (std::unique_ptr<SwitchDaemon>& daemon : daemons) {
    absl::StatusOr<ShutdownReport> report = daemon->Stop();
    daemon.reset();
    if (!report.ok()) code = Fail(1, report.status());
  }
  return code;
}

}  // namespace
}  // namespace netfold::sw

int main(int argc, char** argv) { return netfold::sw::Main(argc, argv); }
