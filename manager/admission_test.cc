// Tests of what the manager admits and refuses: job credentials, malformed
// job, attach and group requests, quotas and policy limits, switch
// registrations; through the manager, and the checks on their own.
#include "manager/admission.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "manager/default_window.h"
#include "manager/testing/manager_test_fixture.h"

namespace netfold::manager {
namespace {

control::JobCredentials Credentials(uint64_t id, std::string key) {
  control::JobCredentials c;
  c.set_job_id(id);
  c.set_job_key(std::move(key));
  return c;
}

TEST(AdmissionTest, AuthenticateJobGivesOneAnswerForUnknownJobsAndWrongKeys) {
  std::map<uint64_t, Job> jobs;
  jobs[3].id = 3;
  jobs[3].key = std::string(16, 'k');
  absl::StatusOr<Job*> ok = AuthenticateJob(jobs, Credentials(3, std::string(16, 'k')));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->id, 3u);
  absl::Status wrong = AuthenticateJob(jobs, Credentials(3, std::string(16, 'x'))).status();
  absl::Status unknown = AuthenticateJob(jobs, Credentials(4, std::string(16, 'k'))).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.message().find("unknown job or wrong job key"), std::string::npos);
  EXPECT_NE(unknown.message().find("unknown job or wrong job key"), std::string::npos);
  EXPECT_EQ(AuthenticateJob(jobs, Credentials(3, "")).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(AdmissionTest, GroupRequestTakesTheJobQuotaForUnsetSizesAndNamesTheLeaves) {
  Job job;
  job.id = 1;
  job.quota.set_max_groups(1);
  job.quota.set_num_slots(4);
  job.quota.set_slot_bytes(1024);
  for (uint32_t r : {0u, 1u}) {
    job.ranks[r].rank = r;
    job.ranks[r].leaf = static_cast<int>(r) + 10;
    job.ranks[r].attached = true;
  }
  GroupRequest req;
  std::vector<Shortfall> why;
  ASSERT_TRUE(CheckGroupRequest(job, {0, 1}, 0, 0, &req, &why).ok());
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(req.num_slots, 4u);
  EXPECT_EQ(req.slot_bytes, 1024u);
  EXPECT_EQ(req.members, (std::vector<MemberLeaf>{{0, 10}, {1, 11}}));
  // Over the quota: a shortfall each, not an error.
  job.groups.insert(7);
  ASSERT_TRUE(CheckGroupRequest(job, {0, 1}, 8, 2048, &req, &why).ok());
  ASSERT_EQ(why.size(), 3u);
  for (const Shortfall& s : why) EXPECT_EQ(s.resource, "quota");
  EXPECT_NE(why[2].reason.find("has 1 of 1 groups (its quota)"), std::string::npos);
}

TEST(AdmissionTest, RankEndpointsAreIpv4WithA24BitQpnAndPsn) {
  control::Endpoint ep;
  ep.set_address("10.0.0.1:4791");
  ep.set_qpn(2);
  ep.set_psn(0xFFFFFF);
  EXPECT_TRUE(CheckRankEndpoint(0, ep).ok());
  ep.set_qpn(1);
  EXPECT_EQ(CheckRankEndpoint(0, ep).code(), absl::StatusCode::kInvalidArgument);
  ep.set_qpn(0x1000000);
  EXPECT_EQ(CheckRankEndpoint(0, ep).code(), absl::StatusCode::kInvalidArgument);
  ep.set_qpn(2);
  ep.set_psn(0x1000000);
  absl::Status s = CheckRankEndpoint(5, ep);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 5: PSN"), std::string::npos) << s;
}

TEST_F(ManagerTest, RefusesWrongOrMissingKey) {
  Start("single_switch.yaml");
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0", "h1"});
  control::CreateJobResponse other = CreateJob({"h2"});
  control::CreateJobResponse forged = job;
  forged.set_job_key(other.job_key());  // someone else's key
  EXPECT_EQ(Attach(forged, 0).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Group(forged, {0}).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(DestroyJob(forged).code(), absl::StatusCode::kPermissionDenied);
  control::CreateJobResponse keyless = job;
  keyless.clear_job_key();
  absl::Status s = DestroyJob(keyless);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("missing job key"), std::string::npos);
  control::CreateJobResponse unknown = job;
  unknown.set_job_id(999);
  s = Attach(unknown, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("unknown job or wrong job key"), std::string::npos);
  control::HostHeartbeatRequest hb;
  *hb.mutable_job() = Creds(forged);
  EXPECT_EQ(am_->HostHeartbeat(hb).status().code(), absl::StatusCode::kPermissionDenied);
  control::WatchEventsRequest w;
  *w.mutable_job() = Creds(forged);
  EXPECT_EQ(am_->WatchEvents(w).status().code(), absl::StatusCode::kPermissionDenied);
  // The real key still works.
  EXPECT_TRUE(Attach(job, 0).ok());
  EXPECT_TRUE(DestroyJob(job).ok());
}

TEST_F(ManagerTest, RejectsMalformedRequests) {
  Start("two_level.yaml");
  RegisterAll();
  struct Case {
    std::vector<std::pair<uint32_t, std::string>> ranks;
    uint32_t version;
    absl::StatusCode code;
    std::string text;
  };
  const uint32_t v = control::PROTOCOL_VERSION_CURRENT;
  std::vector<Case> cases = {
      {{}, v, absl::StatusCode::kInvalidArgument, "at least one rank"},
      {{{0, "h0"}, {0, "h1"}}, v, absl::StatusCode::kInvalidArgument, "rank 0 is listed twice"},
      {{{0, "h0"}, {2, "h1"}}, v, absl::StatusCode::kInvalidArgument, "out of range"},
      {{{0, "nohost"}}, v, absl::StatusCode::kInvalidArgument, "host 'nohost' is not in topology"},
      {{{0, "h0"}}, 7, absl::StatusCode::kFailedPrecondition, "protocol version 7"},
  };
  for (const Case& c : cases) {
    control::CreateJobRequest req;
    req.set_protocol_version(c.version);
    for (const auto& [rank, host] : c.ranks) {
      control::RankSpec* r = req.add_ranks();
      r->set_rank(rank);
      r->set_host(host);
    }
    absl::StatusOr<control::CreateJobResponse> resp = am_->CreateJob(req);
    EXPECT_EQ(resp.status().code(), c.code) << c.text;
    EXPECT_NE(resp.status().message().find(c.text), std::string::npos) << resp.status();
  }
  control::CreateJobResponse job = CreateJob({"h0", "h2"});
  control::AttachRequest bad;
  *bad.mutable_job() = Creds(job);
  bad.set_rank(0);
  bad.mutable_endpoint()->set_address("not-an-address");
  bad.mutable_endpoint()->set_qpn(5);
  absl::Status s = am_->Attach(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not an IPv4 ip:port"), std::string::npos);
  bad.mutable_endpoint()->set_address("10.1.1.1:4791");
  bad.mutable_endpoint()->set_qpn(0);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.mutable_endpoint()->set_qpn(1u << 24);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_rank(5);
  EXPECT_EQ(am_->Attach(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // Groups: unattached members, duplicates, unknown ranks.
  s = Group(job, {0, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not attached"), std::string::npos);
  AttachAll(job, 2);
  EXPECT_EQ(Group(job, {0, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Group(job, {0, 9}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Group(job, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ManagerTest, JobQuotaAndPolicyLimits) {
  ManagerOptions options;
  options.limits.max_slots_per_group = 8;
  Start("single_switch.yaml", options);
  RegisterAll();
  control::JobQuota quota;
  quota.set_max_groups(2);
  quota.set_num_slots(4);
  control::CreateJobResponse job = CreateJob({"h0", "h1"}, quota);
  AttachAll(job, 2);
  ASSERT_TRUE(Group(job, {0}).ok());
  ASSERT_TRUE(Group(job, {1}).ok());
  absl::Status s = Group(job, {0, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("has 2 of 2 groups (its quota)"), std::string::npos) << s;
  control::CreateJobResponse job2 = CreateJob({"h2"}, quota);
  AttachAll(job2, 1);
  s = Group(job2, {0}, "", 5).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("K=5 slots exceeds job"), std::string::npos) << s;
  quota.set_num_slots(16);
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  req.add_ranks()->set_host("h3");
  *req.mutable_quota() = quota;
  s = am_->CreateJob(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("num_slots 16 exceeds the per-group limit of 8"), std::string::npos);
}

// A job that leaves K and P to the manager gets the defaults (K = 128,
// P = 4032) within what the switches hold: P no larger than the smallest
// slot, K no more than a quarter of the fewest slots, so that four groups
// of the default size fit every switch. What a job asks for is refused
// when it does not fit, never lowered.
TEST_F(ManagerTest, UnsetSlotsAndSlotBytesFitTheSmallestSwitch) {
  absl::StatusOr<Topology> t = Topology::Parse(
      "name: small\n"
      "defaults: {capacity: {trees: 4, groups: 4, slots: 64, slot_bytes: 1024, qps: 8}}\n"
      "switches:\n"
      "  - {name: s0, tier: 0}\n"
      "hosts:\n"
      "  - {name: h0, switch: s0}\n");
  ASSERT_TRUE(t.ok()) << t.status();
  StartOn(*std::move(t));
  RegisterAll();
  control::CreateJobResponse job = CreateJob({"h0"});
  EXPECT_EQ(job.quota().slot_bytes(), 1024u);  // not the default 4032
  EXPECT_EQ(job.quota().num_slots(), 16u);     // a quarter of 64, not the default 128
  control::JobQuota quota;
  quota.set_slot_bytes(2048);  // asked for: refused, not lowered
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  req.add_ranks()->set_host("h0");
  *req.mutable_quota() = quota;
  EXPECT_EQ(am_->CreateJob(req).status().code(), absl::StatusCode::kResourceExhausted);
  quota.set_slot_bytes(0);
  quota.set_num_slots(64);  // the whole switch, asked for: granted
  *req.mutable_quota() = quota;
  absl::StatusOr<control::CreateJobResponse> whole = am_->CreateJob(req);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->quota().num_slots(), 64u);
}

TEST(DefaultWindow, IsTheManagersDefaultWhereTheSwitchesHaveRoom) {
  auto topology = [](int slots, int slot_bytes) {
    absl::StatusOr<Topology> t = Topology::Parse(absl::StrFormat(
        "name: t\n"
        "defaults: {capacity: {trees: 4, groups: 64, slots: 4096, slot_bytes: 4048, qps: 8}}\n"
        "switches:\n"
        "  - {name: root, tier: 1}\n"
        "  - {name: leaf, tier: 0, capacity: {slots: %d, slot_bytes: %d}}\n"
        "links:\n"
        "  - [leaf, root]\n"
        "hosts:\n"
        "  - {name: h0, switch: leaf}\n",
        slots, slot_bytes));
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  };
  const JobLimits limits;  // K = 128, P = 4032
  DefaultWindow w = DefaultWindowFor(limits, topology(4096, 4048));
  EXPECT_EQ(w.num_slots, 128u);
  EXPECT_EQ(w.slot_bytes, 4032u);
  w = DefaultWindowFor(limits, topology(128, 2048));  // the smaller switch of the two decides
  EXPECT_EQ(w.num_slots, 32u);
  EXPECT_EQ(w.slot_bytes, 2048u);
  EXPECT_EQ(DefaultWindowFor(limits, topology(2, 4048)).num_slots, 1u);
  EXPECT_EQ(DefaultWindowFor(limits, topology(512, 4048)).num_slots, 128u);
  EXPECT_EQ(DefaultWindowFor(limits, topology(256, 4048)).num_slots, 64u);
  JobLimits shallow = limits;
  shallow.default_slots_per_group = 64;
  EXPECT_EQ(DefaultWindowFor(shallow, topology(4096, 4048)).num_slots, 64u);
}

// A slot size the switches' ALU could not use is refused when the job or
// the group asks for it, not when a switch refuses to install the group.
TEST_F(ManagerTest, ASlotSizeThatIsNotAMultipleOf16IsRefusedAtOnce) {
  Start("single_switch.yaml");
  RegisterAll();
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  req.add_ranks()->set_host("h0");
  req.mutable_quota()->set_slot_bytes(17);
  absl::Status s = am_->CreateJob(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot_bytes 17 is not a multiple of 16"), std::string::npos) << s;
  control::CreateJobResponse job = CreateJob({"h1", "h2"});
  AttachAll(job, 2);
  s = Group(job, {0, 1}, "", 0, 1000).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot_bytes 1000 is not a multiple of 16"), std::string::npos) << s;
  EXPECT_TRUE(Group(job, {0, 1}, "", 0, 1008).ok());
}

TEST_F(ManagerTest, RegistrationIsChecked) {
  Start("two_level.yaml");
  control::RegisterSwitch reg = fabric_->Get("leaf0")->Registration();
  EXPECT_TRUE(am_->RegisterSwitch(reg, 1).ok());
  control::RegisterSwitch r = reg;
  r.set_name("leaf9");
  EXPECT_EQ(am_->RegisterSwitch(r, 2).status().code(), absl::StatusCode::kNotFound);
  r = reg;
  r.mutable_capacity()->set_num_slots(10);
  absl::Status s = am_->RegisterSwitch(r, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("offers slots=10 but topology 'two-level' declares 256"),
            std::string::npos);
  r = reg;
  r.set_data_address("localhost");
  EXPECT_EQ(am_->RegisterSwitch(r, 5).status().code(), absl::StatusCode::kInvalidArgument);
  r = reg;
  r.set_protocol_version(0);
  EXPECT_EQ(am_->RegisterSwitch(r, 6).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace netfold::manager
