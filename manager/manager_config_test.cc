// Tests of the netfold-managerd config file.
#include "manager/manager_config.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "manager/testing/temp_dir.h"

namespace netfold::manager {
namespace {

TEST(ManagerConfig, DefaultsAndOverrides) {
  absl::StatusOr<ManagerConfig> c = ParseManagerConfig(R"(
listen: 127.0.0.1:5555
topology: topo.yaml
state_dir: /var/lib/x
heartbeat_interval_ms: 200
switch_timeout_ms: 1000
host_timeout_ms: 0
abandoned_job_timeout_ms: 120000
replan_on_failure: false
rate_limit: {requests_per_second: 50, burst: 60}
limits: {max_jobs: 7, default_slot_bytes: 512}
)",
                                                       "/etc/netfold");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server.listen_address, "127.0.0.1:5555");
  EXPECT_EQ(c->topology_path, "/etc/netfold/topo.yaml");
  EXPECT_EQ(c->state_dir, "/var/lib/x");
  EXPECT_EQ(c->manager.heartbeat_interval, absl::Milliseconds(200));
  EXPECT_EQ(c->manager.switch_timeout, absl::Seconds(1));
  EXPECT_EQ(c->manager.host_timeout, absl::ZeroDuration());
  EXPECT_EQ(c->manager.abandoned_job_timeout, absl::Seconds(120));
  EXPECT_FALSE(c->manager.replan_on_failure);
  EXPECT_EQ(c->server.requests_per_second, 50);
  EXPECT_EQ(c->manager.limits.max_jobs, 7u);
  EXPECT_EQ(c->manager.limits.default_slot_bytes, 512u);
  EXPECT_EQ(c->manager.limits.max_slot_bytes, 65536u);  // default kept
  EXPECT_EQ(c->manager.command_timeout, absl::Seconds(3));
  EXPECT_TRUE(ValidateManagerConfig(*c).ok());
}

TEST(ManagerConfig, NumbersMayBeHexadecimal) {
  absl::StatusOr<ManagerConfig> c = ParseManagerConfig("snapshot_every: 0x100\n", "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->manager.snapshot_every, 256);
}

TEST(ManagerConfig, ErrorsNameTheKey) {
  EXPECT_NE(ParseManagerConfig("lisen: x\n", "").status().message().find("unknown key 'lisen'"),
            std::string::npos);
  EXPECT_NE(ParseManagerConfig("switch_timeout_ms: soon\n", "")
                .status()
                .message()
                .find("switch_timeout_ms"),
            std::string::npos);
  EXPECT_NE(ParseManagerConfig("limits: {max_job: 1}\n", "").status().message().find("max_job"),
            std::string::npos);
  // The rules of every netfold config (config/yaml_reader.h), as switchd's.
  EXPECT_EQ(ParseManagerConfig("listen: a\nlisten: b\n", "").status().message(),
            "line 2: duplicate key 'listen' (first on line 1)");
  EXPECT_EQ(ParseManagerConfig("state_dir:\n", "").status().message(),
            "state_dir: no value, expected a string (\"\" for an empty one)");
  EXPECT_EQ(ParseManagerConfig("limits: {max_jobs: 1, max_jobs: 2}\n", "").status().message(),
            "limits (line 1): duplicate key 'max_jobs' (first on line 1)");
  EXPECT_EQ(ParseManagerConfig("rate_limit: {burst: -1}\n", "").status().message(),
            "rate_limit.burst (line 1): '-1' is not a non-negative integer");
  ManagerConfig c;
  EXPECT_NE(ValidateManagerConfig(c).message().find("no topology"), std::string::npos);
  c.topology_path = "t.yaml";
  c.manager.switch_timeout = c.manager.heartbeat_interval;
  EXPECT_NE(ValidateManagerConfig(c).message().find("at least twice"), std::string::npos);
  c.manager.switch_timeout = absl::Seconds(5);
  c.manager.multicast_prefix = "10.1";
  EXPECT_NE(ValidateManagerConfig(c).message().find("multicast_prefix"), std::string::npos);
  c.manager.multicast_prefix = "239.77";
  c.log_level = "loud";
  EXPECT_NE(ValidateManagerConfig(c).message().find("log_level"), std::string::npos);
}

TEST(ManagerConfig, TlsIsRequiredWithACredentialUnlessPlaintextIsAskedFor) {
  absl::StatusOr<ManagerConfig> c =
      ParseManagerConfig("tls_dir: tls\ntls: required\n", "/etc/netfold");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls_dir, "/etc/netfold/tls");
  EXPECT_FALSE(c->tls_none);
  EXPECT_NE(ParseManagerConfig("tls: off\n", "").status().message().find("required or none"),
            std::string::npos);
  ManagerConfig m;
  m.server.credential = "secret";
  absl::Status s = LoadManagerTls(&m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no TLS: give --tls_dir DIR"), std::string::npos) << s;
  m.tls_none = true;
  EXPECT_TRUE(LoadManagerTls(&m).ok());
  EXPECT_FALSE(m.server.tls.has_value());
  m.tls_dir = "/nonexistent";
  EXPECT_EQ(LoadManagerTls(&m).code(), absl::StatusCode::kInvalidArgument);  // both given
  m.tls_none = false;
  EXPECT_EQ(LoadManagerTls(&m).code(), absl::StatusCode::kNotFound);  // ca.pem missing
  // auth: none has no credential to protect: plaintext without asking.
  ManagerConfig open;
  EXPECT_TRUE(LoadManagerTls(&open).ok());
}

TEST(ManagerConfig, LoadsAFileRelativeToItself) {
  TempDir dir;
  {
    std::ofstream out(dir.path() + "/m.yaml");
    out << "topology: topologies/t.yaml\n";
  }
  absl::StatusOr<ManagerConfig> c = LoadManagerConfig(dir.path() + "/m.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topology_path, dir.path() + "/topologies/t.yaml");
  EXPECT_EQ(LoadManagerConfig(dir.path() + "/none.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ManagerConfig, ErrorsInAFileNameTheFileTheKeyAndTheLine) {
  TempDir dir;
  const std::string path = dir.path() + "/m.yaml";
  {
    std::ofstream out(path);
    out << "topology: t.yaml\nheartbeat_interval_ms: soon\n";
  }
  absl::StatusOr<ManagerConfig> c = LoadManagerConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            path + ": heartbeat_interval_ms (line 2): 'soon' is not a non-negative integer");
}

}  // namespace
}  // namespace netfold::manager
