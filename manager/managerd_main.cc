// netfold-managerd: the aggregation manager daemon.
//
//   netfold-managerd --topology deploy/topologies/two_level.yaml
//       --state_dir /var/lib/netfold/manager [--listen 127.0.0.1:47910]
//       [--config manager.yaml] [--port_file /run/netfold/manager.port]
//       --credential_file /etc/netfold/credential   (or --insecure)
//       --tls_dir /etc/netfold/tls                   (or --plaintext)
//
// Flags override the config file (docs/manager.md). --help prints the usage
// and the flags (exit status 0). SIGTERM or SIGINT shut it down cleanly:
// streams are ended, the journal is closed, exit status 0. Exit status 1 for
// a runtime error, 2 for a bad command line or config.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/awake_clock.h"
#include "base/daemon.h"
#include "base/log.h"
#include "config/command_line.h"
#include "manager/aggregation_manager.h"
#include "manager/control_service.h"
#include "manager/journal.h"
#include "manager/manager_config.h"
#include "manager/topology.h"

ABSL_FLAG(std::string, config, "", "YAML config file (see docs/manager.md)");
ABSL_FLAG(std::string, listen, "",
          "gRPC listen address ip:port (default 127.0.0.1:47910; port 0 picks one)");
ABSL_FLAG(std::string, topology, "", "topology YAML file");
ABSL_FLAG(std::string, state_dir, "",
          "directory for the journal and snapshots (none: no durability)");
ABSL_FLAG(bool, state_skip_damaged, false,
          "start even if --state_dir holds damaged records that no later record replaces: "
          "they are dropped (the files are copied aside first); see docs/manager.md");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, log_level, "", "error|warning|info|debug|trace");
ABSL_FLAG(std::string, credential_file, "",
          "the fabric credential: a file only this user can read (mode 0600) holding the "
          "secret every switch, job and admin call must present (default: "
          "$NETFOLD_CREDENTIAL_FILE); never the secret itself");
ABSL_FLAG(std::string, tls_dir, "",
          "TLS for the port: a directory holding ca.pem, server.pem and server.key (mode "
          "0600), as netfold certs makes it");
ABSL_FLAG(bool, plaintext, false,
          "serve without TLS (as tls: none): the fabric credential crosses the network in "
          "clear, for anyone who can capture it");
ABSL_FLAG(bool, insecure, false,
          "ask no credential of anyone (as auth: none): anyone who reaches --listen can "
          "register a switch, create jobs and read every job's P_Key");

namespace netfold::manager {
namespace {

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "netfold-managerd: %s\n", std::string(s.message()).c_str());
  return code;
}

int Main(int argc, char** argv) {
  ConfigureMutexDeadlockChecks();
  if (!config::ParseDaemonCommandLine(
          argc, argv,
          "the netfold aggregation manager (docs/manager.md).\n"
          "  netfold-managerd --topology FILE --credential_file FILE --tls_dir DIR\n"
          "                   [--state_dir DIR]\n"
          "                   [--listen IP:PORT] [--config FILE]")) {
    return 0;  // --help
  }

  if (absl::Status s = InstallTerminationHandlers(); !s.ok()) return Fail(1, s);

  ManagerConfig config;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::StatusOr<ManagerConfig> loaded = LoadManagerConfig(absl::GetFlag(FLAGS_config));
    if (!loaded.ok()) return Fail(2, loaded.status());
    config = *std::move(loaded);
  }
  if (!absl::GetFlag(FLAGS_listen).empty())
    config.server.listen_address = absl::GetFlag(FLAGS_listen);
  if (!absl::GetFlag(FLAGS_topology).empty()) config.topology_path = absl::GetFlag(FLAGS_topology);
  if (!absl::GetFlag(FLAGS_state_dir).empty()) config.state_dir = absl::GetFlag(FLAGS_state_dir);
  if (!absl::GetFlag(FLAGS_log_level).empty()) config.log_level = absl::GetFlag(FLAGS_log_level);
  if (!absl::GetFlag(FLAGS_credential_file).empty()) {
    config.credential_file = absl::GetFlag(FLAGS_credential_file);
  }
  if (absl::GetFlag(FLAGS_insecure)) config.auth_none = true;
  if (!absl::GetFlag(FLAGS_tls_dir).empty()) config.tls_dir = absl::GetFlag(FLAGS_tls_dir);
  if (absl::GetFlag(FLAGS_plaintext)) config.tls_none = true;
  if (absl::Status s = ValidateManagerConfig(config); !s.ok()) return Fail(2, s);
  if (absl::Status s = LoadManagerCredential(&config); !s.ok()) return Fail(2, s);
  if (absl::Status s = LoadManagerTls(&config); !s.ok()) return Fail(2, s);
  if (!config.log_level.empty()) SetLogLevel(*ParseLogLevel(config.log_level));
  SetLogTag("managerd");

  absl::StatusOr<Topology> topo = Topology::LoadFile(config.topology_path);
  if (!topo.ok()) return Fail(2, topo.status());

  state::Snapshot loaded;
  std::unique_ptr<Journal> journal;
  if (config.state_dir.empty()) {
    NETFOLD_LOG(kWarning) << "no --state_dir: jobs and groups will not survive a restart";
  } else {
    JournalOptions journal_options;
    journal_options.skip_damaged = absl::GetFlag(FLAGS_state_skip_damaged);
    absl::StatusOr<std::unique_ptr<Journal>> j =
        Journal::Open(config.state_dir, journal_options, &loaded);
    if (!j.ok()) return Fail(1, j.status());
    journal = *std::move(j);
  }

  SwitchHub hub;
  // Liveness runs on the awake clock: while the manager's machine was
  // stopped, the switches' and hosts' silence is nobody's fault.
  AggregationManager am(*topo, config.manager, ProcessAwakeClock(), &hub, journal.get());
  if (absl::Status s = am.Recover(loaded); !s.ok()) return Fail(1, s);
  absl::StatusOr<std::unique_ptr<ManagerServer>> server =
      ManagerServer::Start(&am, &hub, config.server);
  if (!server.ok()) return Fail(1, server.status());
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, (*server)->port()); !s.ok()) {
      (*server)->Shutdown();
      return Fail(1, s);
    }
  }
  NETFOLD_LOG(kWarning) << "netfold-managerd serving topology '" << topo->name() << "' ("
                        << topo->num_switches() << " switches, " << topo->num_hosts()
                        << " hosts) on port " << (*server)->port()
                        << (config.server.credential.empty() ? "" : ", fabric credential required")
                        << (config.server.tls ? ", TLS" : ", plaintext");
  if (config.server.credential.empty()) {
    // On stderr whatever the log level: nobody should run this by accident.
    std::fprintf(stderr,
                 "netfold-managerd: WARNING: INSECURE: started with auth: none (--insecure): "
                 "anyone who reaches %s can register as any switch (and take over its groups), "
                 "create and destroy jobs and read every job's P_Key. Use --credential_file "
                 "unless every user of this network is trusted.\n",
                 config.server.listen_address.c_str());
  }
  if (!config.server.tls) {
    std::fprintf(stderr,
                 "netfold-managerd: WARNING: PLAINTEXT: serving %s without TLS (%s): every "
                 "call, the fabric credential (if any) and the jobs' keys included, crosses the "
                 "network in clear for anyone who can capture it. Use --tls_dir unless it listens on "
                 "loopback or a network only you can capture.\n",
                 config.server.listen_address.c_str(),
                 config.tls_none ? "tls: none, --plaintext" : "auth: none");
  }

  const int sig = WaitForTerminationSignal();
  NETFOLD_LOG(kWarning) << "signal " << sig << ": shutting down";
  (*server)->Shutdown();
  server->reset();
  NETFOLD_LOG(kWarning) << "netfold-managerd stopped";
  return 0;
}

}  // namespace
}  // namespace netfold::manager

int main(int argc, char** argv) { return netfold::manager::Main(argc, argv); }
