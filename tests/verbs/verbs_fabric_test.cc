// libnetfold with NETFOLD_TRANSPORT=verbs against a real netfold-switchd:
// ranks whose queue pairs live on an RDMA device (Soft-RoCE in the VM of
// rxe_vm_test.py, or a NIC) run the full sweep of collectives through the
// switch, with multicast and with RC delivery. NETFOLD_ALGORITHM=innetwork:
// a failure of the verbs path cannot hide behind the host algorithms.
//
// Needs a running fabric whose manager is $NETFOLD_TEST_VERBS_MANAGER and
// the rank's RoCE address in $NETFOLD_TEST_VERBS_ADDRESS (rxe_vm_test.py
// sets both); skips with the reason otherwise.
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/host/rank_launcher.h"

namespace netfold {
namespace {

using testing::Launch;
using testing::RankResult;

struct VerbsFabricSetup {
  std::string manager, address, slot_bytes;
};

std::optional<VerbsFabricSetup> FromEnvironment() {
  const char* manager = std::getenv("NETFOLD_TEST_VERBS_MANAGER");
  const char* address = std::getenv("NETFOLD_TEST_VERBS_ADDRESS");
  if (manager == nullptr || address == nullptr) return std::nullopt;
  const char* slot = std::getenv("NETFOLD_TEST_VERBS_SLOT_BYTES");
  return VerbsFabricSetup{manager, address, slot != nullptr ? slot : "976"};
}

void RunSweep(const VerbsFabricSetup& s, int ranks, const char* delivery) {
  // The VM is emulated (qemu TCG) on a host that runs other tests: a TLS
  // connection to its manager, which is up, took over the library's 1 s
  // connect timeout (meant for a manager that is not there) once, in a
  // full run of the suite from a fresh clone.
  Launch launch(s.manager, ranks, 0, {"sweep"},
                {{"NETFOLD_CONNECT_TIMEOUT_MS", "30000"},
                 {"NETFOLD_TRANSPORT", "verbs"},
                 {"NETFOLD_LOCAL_ADDRESS", s.address},
                 {"NETFOLD_SLOT_BYTES", s.slot_bytes},
                 {"NETFOLD_DELIVERY", delivery},
                 {"NETFOLD_ALGORITHM", "innetwork"},
                 {"NETFOLD_LOG_LEVEL", "info"}});
  std::vector<RankResult> results = launch.Wait(absl::Minutes(8));
  for (size_t r = 0; r < results.size(); ++r) {
    std::printf("--- rank %zu ---\n%s", r, results[r].output.c_str());
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r;
    EXPECT_NE(results[r].output.find(absl::StrFormat("rank %d: ok", r)), std::string::npos);
    EXPECT_NE(results[r].output.find("verbs transport, P_Key 0xffff"), std::string::npos)
        << "rank " << r << " did not use the verbs transport";
    EXPECT_NE(results[r].output.find("host_ops=0,"), std::string::npos) << "rank " << r;
  }
}

TEST(VerbsFabric, SweepWithMulticastResults) {
  std::optional<VerbsFabricSetup> s = FromEnvironment();
  if (!s) GTEST_SKIP() << "no verbs fabric: run through tests/verbs/rxe_vm_test.py";
  RunSweep(*s, 2, "multicast");
}

TEST(VerbsFabric, SweepWithResultsOverRc) {
  std::optional<VerbsFabricSetup> s = FromEnvironment();
  if (!s) GTEST_SKIP() << "no verbs fabric: run through tests/verbs/rxe_vm_test.py";
  RunSweep(*s, 2, "rc");
}

}  // namespace
}  // namespace netfold
