// `netfold explain` and `netfold status` against a local fabric of real
// daemons: a group the manager refuses (the job's group quota is spent) is
// explained by the CLI with the reason the refusal carried; a job that fits
// says so. A manager restarted over a journal with a torn last record says
// so in `netfold status`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "auth/grpc_credential.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "netfold/netfold.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tools/local_fabric.h"
#include "tests/cli/run_cli.h"

namespace netfold {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs the netfold CLI with `args` (words separated by spaces) as an
// argument vector (tests/cli/run_cli.h), stdin from /dev/null, within 30 s.
CliResult RunNetfold(const std::string& args) {
  std::vector<std::string> argv = {NETFOLD_CLI};
  for (absl::string_view w : absl::StrSplit(args, ' ', absl::SkipEmpty())) argv.emplace_back(w);
  return RunCli(argv, absl::Seconds(30), "explain_command_test");
}

// A world of one rank: the out-of-band exchanges are copies.
int Allgather(void*, const void* send, void* recv, size_t bytes) {
  std::memcpy(recv, send, bytes);
  return 0;
}
int Bcast(void*, void*, size_t, int) { return 0; }
int Barrier(void*) { return 0; }

struct Finalize {
  void operator()(netfold_context* ctx) const { netfold_finalize(ctx); }
};

uint64_t JobId(const std::string& manager, const auth::ClientAuth& client_auth,
              const std::string& name) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(manager, client_auth));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  control::GetStatusResponse status;
  if (!stub->GetStatus(&c, control::GetStatusRequest(), &status).ok()) return 0;
  for (const control::JobStatus& j : status.jobs()) {
    if (j.name() == name) return j.job_id();
  }
  return 0;
}

TEST(NetfoldExplain, ARefusedGroupsReasonIsWhatExplainPrints) {
  tools::LocalFabricOptions o;
  o.hosts = 2;
  o.manager_config = "limits: {default_groups_per_job: 2}\n";
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const std::string manager = (*fabric)->manager_address();

  // The fabric only: a refused group must be an error, not the hosts'
  // algorithms (NETFOLD_ALGORITHM=auto would take over).
  setenv("NETFOLD_ALGORITHM", "innetwork", 1);
  setenv("NETFOLD_CREDENTIAL_FILE", (*fabric)->credential_file().c_str(), 1);
  setenv("NETFOLD_TLS_CA", (*fabric)->tls_ca_file().c_str(), 1);
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = 0;
  spec.world_size = 1;
  spec.oob = {Allgather, Bcast, Barrier, nullptr};
  spec.manager = manager.c_str();
  spec.host_name = "h0";
  spec.job_name = "explain-test";
  spec.timeout_ms = 20000;
  netfold_context_t raw = nullptr;
  ASSERT_EQ(netfold_init(&spec, &raw), NETFOLD_SUCCESS) << netfold_last_error();
  std::unique_ptr<netfold_context, Finalize> ctx(raw);  // destroys the job and its groups

  netfold_group_spec_t gspec = NETFOLD_GROUP_SPEC_INITIALIZER;
  gspec.rank = 0;
  gspec.size = 1;
  gspec.oob = spec.oob;
  netfold_group_t groups[3] = {};
  ASSERT_EQ(netfold_group_create(ctx.get(), &gspec, &groups[0]), NETFOLD_SUCCESS)
      << netfold_last_error();
  ASSERT_EQ(netfold_group_create(ctx.get(), &gspec, &groups[1]), NETFOLD_SUCCESS)
      << netfold_last_error();
  ASSERT_EQ(netfold_group_create(ctx.get(), &gspec, &groups[2]), NETFOLD_ERR_NO_RESOURCES);
  const std::string refusal = netfold_last_error();

  const uint64_t job = JobId(manager, (*fabric)->client_auth(), "explain-test");
  ASSERT_NE(job, 0u) << "no job explain-test at " << manager;
  const std::string reason = absl::StrFormat("job %d has 2 of 2 groups (its quota)", job);
  EXPECT_THAT(refusal, HasSubstr(reason));

  // The same reason from the CLI, with the address from --manager...
  CliResult r = RunNetfold(absl::StrFormat("explain --job %d --manager %s", job, manager));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrFormat("a group of job %d, ranks 0", job)));
  EXPECT_THAT(r.out, HasSubstr("does not fit"));
  EXPECT_THAT(r.out, HasSubstr(reason)) << "refused with: " << refusal;
  EXPECT_EQ(r.err, "");
  // ...and from NETFOLD_MANAGER (no fabric in the state directory given).
  const std::string elsewhere = absl::StrFormat(
      "explain --job %d --ranks 0 --state-dir %s/no-fabric-here", job, ::testing::TempDir());
  unsetenv("NETFOLD_MANAGER");
  r = RunNetfold(elsewhere);
  EXPECT_EQ(r.exit_code, 2) << "no manager given: " << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("no manager"));
  setenv("NETFOLD_MANAGER", manager.c_str(), 1);
  r = RunNetfold(elsewhere);
  unsetenv("NETFOLD_MANAGER");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(reason));

  // A new job of two ranks still fits; an unknown job is an error.
  r = RunNetfold(absl::StrFormat("explain --hosts h0,h1 --manager %s", manager));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("fits: the job fits: 2 ranks, quota 2 groups"));
  // With channels the default quota follows them, within the fabric's
  // planes (one here).
  r = RunNetfold(absl::StrFormat("explain --hosts h0,h1 --channels 2 --manager %s", manager));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("fits: the job fits: 2 ranks, quota 2 groups"));
  r = RunNetfold(absl::StrFormat("explain --job %d --channels 2 --manager %s", job, manager));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  r = RunNetfold(absl::StrFormat("explain --job %d --manager %s", job + 100, manager));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrFormat("has no job %d", job + 100)));

  for (netfold_group_t g : groups) {
    if (g != nullptr) netfold_group_destroy(g);
  }
}

// A new job's default quota follows its channels, within the fabric's
// planes: what `netfold explain --hosts ... --channels N` says before the
// job starts is what CreateJob will grant.
TEST(NetfoldExplain, ANewJobsDefaultQuotaFollowsItsChannels) {
  tools::LocalFabricOptions o;
  o.hosts = 2;
  o.planes = 2;
  o.manager_config = "limits: {default_groups_per_job: 3}\n";
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  setenv("NETFOLD_CREDENTIAL_FILE", (*fabric)->credential_file().c_str(), 1);
  setenv("NETFOLD_TLS_CA", (*fabric)->tls_ca_file().c_str(), 1);
  const std::string manager = (*fabric)->manager_address();
  CliResult r = RunNetfold(absl::StrFormat("explain --hosts h0,h1 --manager %s", manager));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("the job fits: 2 ranks, quota 3 groups"));
  r = RunNetfold(absl::StrFormat("explain --hosts h0,h1 --channels 2 --manager %s", manager));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("the job fits: 2 ranks, quota 6 groups"));
  r = RunNetfold(absl::StrFormat("explain --hosts h0,h1 --channels 4 --manager %s", manager));
  EXPECT_THAT(r.out, HasSubstr("the job fits: 2 ranks, quota 6 groups"));  // two planes
  r = RunNetfold(
      absl::StrFormat("explain --hosts h0,h1 --channels 2 --groups 5 --manager %s", manager));
  EXPECT_THAT(r.out, HasSubstr("the job fits: 2 ranks, quota 5 groups"));  // asked for
}

TEST(NetfoldStatus, AManagerRestartedOverATornJournalSaysSo) {
  tools::LocalFabricOptions o;
  o.hosts = 2;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  const std::string status = "status --state-dir " + (*fabric)->state_dir();
  const std::string state = (*fabric)->state_dir() + "/manager-state";
  CliResult r = RunNetfold(status);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrFormat("state: %s journaled, ", state)));
  EXPECT_THAT(r.out, Not(HasSubstr("WARNING")));

  // The manager dies in the middle of an append: the start of a header.
  ASSERT_TRUE((*fabric)->Kill("manager", SIGKILL).ok());
  {
    std::ofstream log(state + "/journal.log", std::ios::binary | std::ios::app);
    log.write("NFR2\x7f\x00", 6);
  }
  ASSERT_TRUE((*fabric)->Restart("manager").ok());
  r = RunNetfold(status);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("torn tail of 6 B dropped (copy kept: " + state +
                               "/journal.log.damaged-"));
  EXPECT_THAT(r.out, HasSubstr("WARNING: a torn last record (6 B) dropped at start"));
}

}  // namespace
}  // namespace netfold
