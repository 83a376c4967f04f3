// fake-switchd: the control side of one switch, without a data plane, as a
// process of its own, for integration tests that kill or stop switches.
//
//   fake-switchd --manager 127.0.0.1:47910 --topology two_level.yaml --name leaf0
//       --data_address 127.0.0.1:20001
//
// Registers with the topology's capacities, heartbeats, executes commands
// in memory (manager/testing/fake_switch.h), reconnects when the stream breaks.
// SIGTERM/SIGINT stop it cleanly.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "auth/fabric_credential.h"
#include "base/log.h"
#include "manager/testing/fake_switch.h"
#include "manager/testing/fake_switch_agent.h"
#include "manager/topology.h"

ABSL_FLAG(std::string, manager, "127.0.0.1:47910", "manager address");
ABSL_FLAG(std::string, topology, "", "topology YAML (for the capacities)");
ABSL_FLAG(std::string, name, "", "switch name in the topology");
ABSL_FLAG(std::string, data_address, "127.0.0.1:4791", "data-plane ip:port to report");
ABSL_FLAG(std::string, credential_file, "", "the fabric credential's file (0600), if any");

namespace {
int g_pipe[2] = {-1, -1};
void OnSignal(int) {
  const char b = 1;
  (void)!write(g_pipe[1], &b, 1);
}
}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (pipe(g_pipe) != 0) return 1;
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<netfold::manager::Topology> topo =
      netfold::manager::Topology::LoadFile(absl::GetFlag(FLAGS_topology));
  if (!topo.ok()) {
    std::fprintf(stderr, "fake-switchd: %s\n", std::string(topo.status().message()).c_str());
    return 2;
  }
  const int index = topo->FindSwitch(absl::GetFlag(FLAGS_name));
  if (index < 0) {
    std::fprintf(stderr, "fake-switchd: no switch '%s'\n", absl::GetFlag(FLAGS_name).c_str());
    return 2;
  }
  netfold::SetLogTag("fake-switchd " + absl::GetFlag(FLAGS_name));
  netfold::manager::FakeSwitch sw(
      absl::GetFlag(FLAGS_name), absl::GetFlag(FLAGS_data_address),
      netfold::manager::ToProtoCapacity(topo->switch_at(index).capacity));
  netfold::manager::FakeSwitchAgent::Options options;
  if (const std::string file = absl::GetFlag(FLAGS_credential_file); !file.empty()) {
    absl::StatusOr<std::string> credential = netfold::auth::ReadCredentialFile(file);
    if (!credential.ok()) {
      std::fprintf(stderr, "fake-switchd: %s\n", std::string(credential.status().message()).c_str());
      return 2;
    }
    options.credential = *credential;
  }
  netfold::manager::FakeSwitchAgent agent(absl::GetFlag(FLAGS_manager), &sw, options);
  agent.Start();
  char b;
  while (read(g_pipe[0], &b, 1) < 0 && errno == EINTR) {
  }
  agent.Stop();
  return 0;
}
