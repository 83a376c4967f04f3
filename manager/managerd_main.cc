// netfold-managerd: the aggregation manager daemon.
//
//   netfold-managerd --topology deploy/topologies/two_level.yaml
//       --state_dir /var/lib/netfold/manager [--listen 127.0.0.1:47910]
//       [--config manager.yaml] [--port_file /run/netfold/manager.port]
//
// Flags override the config file (docs/manager.md). SIGTERM or SIGINT shut
// it down cleanly: streams are ended, the journal is closed, exit status 0.
// Exit status 1 for a runtime error, 2 for a bad command line or config.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
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
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, log_level, "", "error|warning|info|debug|trace");

namespace netfold::manager {
namespace {

// SIGTERM/SIGINT write the signal number here; main waits on the other end.
// A handler (not sigwait) because gRPC may start threads before main, and
// any thread may take the signal.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &b, 1);
}

absl::Status InstallSignalHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, nullptr) != 0 || sigaction(SIGINT, &sa, nullptr) != 0) {
    return ErrnoToStatus(errno, "sigaction");
  }
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

int WaitForSignal() {
  unsigned char b = 0;
  while (true) {
    ssize_t n = read(g_signal_pipe[0], &b, 1);
    if (n == 1) return b;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "netfold-managerd: %s\n", std::string(s.message()).c_str());
  return code;
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrFormat("open %s", tmp));
  std::string text = absl::StrFormat("%d\n", port);
  ssize_t n = write(fd, text.data(), text.size());
  int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return ErrnoToStatus(e, absl::StrFormat("write %s", tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("rename %s", tmp));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the netfold aggregation manager.\n"
      "  netfold-managerd --topology FILE [--state_dir DIR] [--listen IP:PORT] [--config FILE]");
  absl::ParseCommandLine(argc, argv);

  if (absl::Status s = InstallSignalHandlers(); !s.ok()) return Fail(1, s);

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
  if (absl::Status s = ValidateManagerConfig(config); !s.ok()) return Fail(2, s);
  if (!config.log_level.empty()) SetLogLevel(*ParseLogLevel(config.log_level));
  SetLogTag("managerd");

  absl::StatusOr<Topology> topo = Topology::LoadFile(config.topology_path);
  if (!topo.ok()) return Fail(2, topo.status());

  state::Snapshot loaded;
  std::unique_ptr<Journal> journal;
  if (config.state_dir.empty()) {
    NETFOLD_LOG(kWarning) << "no --state_dir: jobs and groups will not survive a restart";
  } else {
    absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(config.state_dir, &loaded);
    if (!j.ok()) return Fail(1, j.status());
    journal = *std::move(j);
  }

  SwitchHub hub;
  AggregationManager am(*topo, config.manager, RealClock(), &hub, journal.get());
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
                        << " hosts) on port " << (*server)->port();

  const int sig = WaitForSignal();
  NETFOLD_LOG(kWarning) << "signal " << sig << ": shutting down";
  (*server)->Shutdown();
  server->reset();
  NETFOLD_LOG(kWarning) << "netfold-managerd stopped";
  return 0;
}

}  // namespace
}  // namespace netfold::manager

int main(int argc, char** argv) { return netfold::manager::Main(argc, argv); }
