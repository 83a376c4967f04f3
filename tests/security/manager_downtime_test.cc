// Issue 23, item 7: a manager's downtime must not kill running jobs. A real
// netfold-managerd is SIGKILLed while a job streams allreduces through real
// switches, stays away for longer than the hosts' and the switches'
// heartbeat timeouts, and is started again with the same config: the job
// must keep running on the data plane meanwhile, stay a job of the
// restarted manager, and finish with every result exact and no operation
// handed to the hosts.
//
// The durations scale together with NETFOLD_DOWNTIME_SCALE (default 1):
// heartbeats every 100 ms x scale, switch and host timeouts of 1 s x scale,
// an absence of 6 s x scale. At scale 5 the manager runs its production
// heartbeat and host timeout (500 ms, 5 s) and stays away 30 s, as in the
// issue; the default proves the same thing (absence > 4 x every timeout) in
// a few seconds.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/host/rank_launcher.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

using testing::Launch;

int Scale() {
  const char* s = std::getenv("NETFOLD_DOWNTIME_SCALE");
  const int n = s ? std::atoi(s) : 1;
  return n > 0 ? n : 1;
}

absl::StatusOr<control::GetStatusResponse> Status(const tools::LocalFabric& fabric) {
  auto stub = control::Admin::NewStub(
      auth::CreateChannel(fabric.manager_address(), fabric.client_auth()));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  control::GetStatusResponse status;
  grpc::Status s = stub->GetStatus(&c, control::GetStatusRequest(), &status);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return status;
}

TEST(ManagerDowntime, JobsSurviveAnAbsenceLongerThanEveryHeartbeatTimeout) {
  const int scale = Scale();
  const absl::Duration heartbeat = absl::Milliseconds(100) * scale;
  const absl::Duration timeout = absl::Seconds(1) * scale;
  const absl::Duration absence = absl::Seconds(6) * scale;

  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  o.manager_config = absl::StrFormat(
      "heartbeat_interval_ms: %d\nswitch_timeout_ms: %d\nhost_timeout_ms: %d\n",
      absl::ToInt64Milliseconds(heartbeat), absl::ToInt64Milliseconds(timeout),
      absl::ToInt64Milliseconds(timeout));
  auto started = tools::LocalFabric::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<tools::LocalFabric> fabric = *std::move(started);

  testing::ReleaseFlag release;
  // In-network only: a job that lost its fabric fails its operations
  // instead of quietly handing them to the hosts.
  Launch ranks(*fabric, 4, 0, {"until"},
               {{"NETFOLD_TEST_RELEASE", release.path}, {"NETFOLD_ALGORITHM", "innetwork"},
                {"NETFOLD_TIMEOUT_MS", "20000"}});
  const int not_streaming = ranks.WaitForEveryOutput("streaming", absl::Seconds(60));
  ASSERT_EQ(not_streaming, -1) << ranks.output(not_streaming);

  ASSERT_TRUE(fabric->Kill("manager", SIGKILL).ok());
  absl::SleepFor(absence);  // the manager is away; the data plane carries on
  ranks.Drain();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks.output(r).find("stream ok="), std::string::npos)
        << "rank " << r << " stopped while the manager was away:\n" << ranks.output(r);
  }
  const absl::Time restarted = absl::Now();
  ASSERT_TRUE(fabric->Restart("manager", absl::Seconds(60)).ok());

  // The restarted manager keeps the job through its grace and after: the
  // ranks' heartbeats resume. Watch for twice the host timeout after the
  // switches are back (a revocation shows as a missing job or rank).
  const absl::Time watch_until = absl::Now() + 2 * timeout + 2 * heartbeat;
  while (absl::Now() < watch_until) {
    absl::StatusOr<control::GetStatusResponse> st = Status(*fabric);
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ(st->jobs_size(), 1) << "the restarted manager lost the job";
    ASSERT_EQ(st->jobs(0).num_attached(), 4u)
        << "ranks were detached " << absl::FormatDuration(absl::Now() - restarted)
        << " after the restart";
    ASSERT_EQ(st->groups_size(), 1) << "the job's group was revoked";
    absl::SleepFor(heartbeat);
  }

  release.Raise();
  testing::ExpectStreamExact(ranks.Wait(absl::Minutes(2)), /*no_failover=*/true);
}

}  // namespace
}  // namespace netfold
