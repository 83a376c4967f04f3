// The per-job integrity key at the manager (docs/security.md): drawn at
// CreateJob when the job asks or the manager requires it, returned beside
// the job key, handed to every switch of every group in InstallGroup, kept
// across a restart by the journal; absent otherwise.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manager/manager_config.h"
#include "manager/testing/manager_test_fixture.h"
#include "manager/testing/temp_dir.h"
#include "manager/testing/test_books.h"
#include "proto/aggregation_tag.h"

namespace netfold::manager {
namespace {

control::CreateJobResponse CreateJobWith(AggregationManager& am,
                                         const std::vector<std::string>& hosts, bool integrity) {
  control::CreateJobRequest req;
  req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  req.set_name("tagged");
  req.set_integrity(integrity);
  for (size_t i = 0; i < hosts.size(); ++i) {
    control::RankSpec* r = req.add_ranks();
    r->set_rank(static_cast<uint32_t>(i));
    r->set_host(hosts[i]);
  }
  absl::StatusOr<control::CreateJobResponse> resp = am.CreateJob(req);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? *resp : control::CreateJobResponse();
}

TEST_F(ManagerTest, AJobThatAsksGetsAKeyEverySwitchOfItsGroupsGetsAndARestartKeeps) {
  TempDir dir;
  state_dir_ = dir.path() + "/state";
  ManagerOptions options;
  options.host_timeout = absl::ZeroDuration();
  Start("two_level.yaml", options);
  RegisterAll();
  control::CreateJobResponse tagged = CreateJobWith(*am_, kTwoLevelHosts, true);
  control::CreateJobResponse plain = CreateJobWith(*am_, kTwoLevelHosts, false);
  ASSERT_EQ(tagged.integrity_key().size(), proto::kAggregationKeySize);
  EXPECT_TRUE(plain.integrity_key().empty());
  AttachAll(tagged, 8);
  AttachAll(plain, 8);
  absl::StatusOr<control::GroupInfo> g = Group(tagged, {0, 2, 4, 6});
  absl::StatusOr<control::GroupInfo> p = Group(plain, {1, 3, 5, 7});
  ASSERT_TRUE(g.ok() && p.ok());
  for (const std::string& sw : g->switches()) {
    std::optional<control::InstallGroup> ig = fabric_->Get(sw)->GetGroup(g->group_id());
    ASSERT_TRUE(ig.has_value()) << sw;
    EXPECT_EQ(ig->integrity_key(), tagged.integrity_key()) << sw;
  }
  for (const std::string& sw : p->switches()) {
    std::optional<control::InstallGroup> ig = fabric_->Get(sw)->GetGroup(p->group_id());
    ASSERT_TRUE(ig.has_value()) << sw;
    EXPECT_TRUE(ig->integrity_key().empty()) << sw;
  }

  // The key is in the journal: a restarted manager installs the same key
  // on a group it creates for the job.
  StartManager();
  RegisterAll();
  absl::StatusOr<control::GroupInfo> g2 = Group(tagged, {1, 3});
  ASSERT_TRUE(g2.ok()) << g2.status();
  for (const std::string& sw : g2->switches()) {
    EXPECT_EQ(fabric_->Get(sw)->GetGroup(g2->group_id())->integrity_key(),
              tagged.integrity_key())
        << sw;
  }
}

TEST_F(ManagerTest, AManagerThatRequiresIntegrityGivesEveryJobAKey) {
  ManagerOptions options;
  options.require_integrity = true;
  Start("two_level.yaml", options);
  RegisterAll();
  control::CreateJobResponse a = CreateJobWith(*am_, {"h0", "h1"}, false);
  control::CreateJobResponse b = CreateJobWith(*am_, {"h2", "h3"}, true);
  EXPECT_EQ(a.integrity_key().size(), proto::kAggregationKeySize);
  EXPECT_EQ(b.integrity_key().size(), proto::kAggregationKeySize);
  EXPECT_NE(a.integrity_key(), b.integrity_key());
}

TEST(ManagerConfigIntegrity, RequireIntegrityIsReadAndOffByDefault) {
  absl::StatusOr<ManagerConfig> off = ParseManagerConfig("topology: t.yaml\n", ".");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->manager.require_integrity);
  absl::StatusOr<ManagerConfig> on =
      ParseManagerConfig("topology: t.yaml\nrequire_integrity: true\n", ".");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->manager.require_integrity);
  EXPECT_FALSE(ParseManagerConfig("topology: t.yaml\nrequire_integrity: 7\n", ".").ok());
}

}  // namespace
}  // namespace netfold::manager
