// netfold-switchd's data-plane thread and its scheduling policy
// (transport.scheduling, docs/switch.md): SCHED_BATCH unless the config says
// normal, so that on a shared machine the switch's wakeups do not preempt
// the MPI ranks on the same cores. Read from /proc, as `chrt -p` would.
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/testing/grpc_test_util.h"
#include "manager/testing/temp_dir.h"
#include "tests/manager/subprocess.h"

namespace netfold {
namespace {

using manager::TempDir;
using manager::Subprocess;

// The scheduling policy of every thread of `pid` (field 41 of
// /proc/PID/task/TID/stat, counted after the command's closing parenthesis).
std::vector<int> ThreadPolicies(pid_t pid) {
  std::vector<int> policies;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 41 && fields >> field; ++i) {
      if (i == 41) policies.push_back(std::stoi(field));
    }
  }
  return policies;
}

// Starts a switchd with `transport` (a YAML line or "") and returns the
// policies of its threads once its data plane serves.
std::vector<int> PoliciesOfASwitchd(const std::string& transport) {
  TempDir dir;
  const std::string config = dir.path() + "/s0.yaml", port = dir.path() + "/data.port";
  std::ofstream(config) << "name: s0\ndata_address: 127.0.0.1:0\nadmin_address: \"\"\n"
                        << "auth: none\ntls: none\n" << transport << "\n";
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
      {NETFOLD_SWITCHD, "--config", config, "--data_port_file", port}, dir.path() + "/log");
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return {};
  }
  // Serving first (a loaded machine may take a while), then the data
  // plane, which sets its policy as its thread starts: until a thread has
  // it, or a while for the normal case.
  const bool serving = manager::WaitUntil(
      [&] { return std::ifstream(port).good() || !(*p)->running(); }, absl::Seconds(30));
  if (!serving || !std::ifstream(port).good()) {
    ADD_FAILURE() << "switchd did not serve:\n" << (*p)->Log();
    return {};
  }
  std::vector<int> policies;
  manager::WaitUntil(
      [&] {
        policies = ThreadPolicies((*p)->pid());
        return std::count(policies.begin(), policies.end(), SCHED_BATCH) > 0;
      },
      absl::Seconds(transport.empty() ? 20 : 1));
  return policies;
}

TEST(SwitchdScheduling, TheDataPlaneRunsAsSchedBatchByDefault) {
  const std::vector<int> policies = PoliciesOfASwitchd("");
  ASSERT_FALSE(policies.empty());
  // The data plane, and only it: gRPC's and the main thread keep theirs.
  EXPECT_EQ(std::count(policies.begin(), policies.end(), SCHED_BATCH), 1);
}

TEST(SwitchdScheduling, NormalKeepsEveryThreadSchedOther) {
  const std::vector<int> policies = PoliciesOfASwitchd("transport: {scheduling: normal}");
  ASSERT_FALSE(policies.empty());
  EXPECT_EQ(std::count(policies.begin(), policies.end(), SCHED_BATCH), 0);
  EXPECT_EQ(std::count(policies.begin(), policies.end(), SCHED_OTHER),
            static_cast<long>(policies.size()));
}

}  // namespace
}  // namespace netfold
