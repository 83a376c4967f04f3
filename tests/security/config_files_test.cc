// Issue 23 item 11, the configuration part: what the manager and the
// switches accept from their files and from registrations. Each case was
// accepted before its fix, except duplicate keys (below).
// - A data endpoint (a switch's data_address, a rank's endpoint) must name
//   one unicast host: not 255.255.255.255, 0.0.0.0, a multicast group or
//   port 0 (manager/endpoint_address.h).
// - A slot size must be a positive multiple of 16, the largest element
//   (double_int, long_int), and at most 4048, so that a multicast result
//   fits one 4096-byte packet (proto/slot_size.h).
// - A duplicated key in any mapping of any config file (manager, switchd,
//   topology) is an error naming the key and its line (config/yaml_reader.h).
//   The parsers' CheckKeys already refused it in every map they read (the
//   topology's root was worded "topology (line 8): ..."); ParseYaml now
//   refuses it in any mapping, read or not (config/yaml_reader_test.cc).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "manager/admission.h"
#include "manager/manager_config.h"
#include "manager/topology.h"
#include "switch/switchd_config.h"

namespace netfold {
namespace {

using ::testing::HasSubstr;

constexpr char kTopology[] =
    "name: t\n"
    "defaults:\n"
    "  capacity: {trees: 4, groups: 4, slots: 16, slot_bytes: %SLOT%, qps: 8}\n"
    "switches:\n"
    "  - {name: leaf0, tier: 0}\n"
    "hosts:\n"
    "  - {name: h0, switch: leaf0}\n";

std::string Topology(const std::string& slot_bytes) {
  std::string t = kTopology;
  t.replace(t.find("%SLOT%"), 6, slot_bytes);
  return t;
}

control::RegisterSwitch Registration(const std::string& data_address) {
  control::RegisterSwitch req;
  req.set_protocol_version(manager::kProtocolVersion);
  req.set_name("leaf0");
  req.set_data_address(data_address);
  req.set_admin_address("127.0.0.1:5000");
  control::SwitchCapacity* cap = req.mutable_capacity();
  cap->set_max_trees(4);
  cap->set_max_groups(4);
  cap->set_num_slots(16);
  cap->set_slot_bytes(4048);
  cap->set_max_qps(8);
  return req;
}

TEST(ConfigFiles, ASwitchMustRegisterAUnicastDataAddress) {
  absl::StatusOr<manager::Topology> topo = manager::Topology::Parse(Topology("4048"));
  ASSERT_TRUE(topo.ok()) << topo.status();
  const manager::ManagerOptions options;
  ASSERT_TRUE(
      manager::ValidateRegistration(*topo, options, Registration("10.0.0.1:4791")).ok());
  for (const char* bad : {"255.255.255.255:4791", "0.0.0.0:4791", "239.1.2.3:4791",
                          "224.0.0.1:4791", "10.0.0.1:0", "0.1.2.3:4791", "240.0.0.1:4791"}) {
    absl::Status s = manager::ValidateRegistration(*topo, options, Registration(bad));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("data_address")) << bad;
    EXPECT_THAT(s.message(), HasSubstr(bad)) << bad;
  }
  // The admin address is where the switch listens for gRPC: 0.0.0.0 binds
  // every interface and stays allowed.
  control::RegisterSwitch any_admin = Registration("10.0.0.1:4791");
  any_admin.set_admin_address("0.0.0.0:5000");
  EXPECT_TRUE(manager::ValidateRegistration(*topo, options, any_admin).ok());
}

TEST(ConfigFiles, ARankMustGiveAUnicastEndpoint) {
  control::Endpoint ep;
  ep.set_qpn(0x100);
  ep.set_psn(1);
  ep.set_address("10.0.0.7:4791");
  EXPECT_TRUE(manager::CheckRankEndpoint(3, ep).ok());
  for (const char* bad : {"255.255.255.255:4791", "0.0.0.0:4791", "239.77.0.1:4791",
                          "10.0.0.7:0"}) {
    ep.set_address(bad);
    absl::Status s = manager::CheckRankEndpoint(3, ep);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("rank 3")) << bad;
  }
}

TEST(ConfigFiles, ASwitchdDataAddressMustBeUnicast) {
  for (const char* bad : {"255.255.255.255:4791", "0.0.0.0:4791", "239.1.1.1:4791"}) {
    absl::StatusOr<sw::SwitchdConfig> c =
        sw::ParseSwitchdConfig(std::string("name: a\ndata_address: ") + bad + "\n");
    ASSERT_TRUE(c.ok()) << c.status();
    absl::Status s = sw::ValidateSwitchdConfig(*c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("data_address")) << bad;
  }
}

TEST(ConfigFiles, TopologySlotSizesFitTheAluAndTheMtu) {
  EXPECT_TRUE(manager::Topology::Parse(Topology("4048")).ok());
  EXPECT_TRUE(manager::Topology::Parse(Topology("16")).ok());
  for (const char* bad : {"17", "8", "4040", "4064", "4096", "65536"}) {
    absl::StatusOr<manager::Topology> t = manager::Topology::Parse(Topology(bad));
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("slot_bytes " + std::string(bad))) << bad;
    EXPECT_THAT(t.status().message(), HasSubstr("leaf0")) << bad;
  }
}

TEST(ConfigFiles, ManagerDefaultSlotSizeFitsTheAluAndTheMtu) {
  auto validate = [](const std::string& limits) {
    absl::StatusOr<manager::ManagerConfig> c =
        manager::ParseManagerConfig("topology: t.yaml\nlimits: {" + limits + "}\n", "/etc");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? manager::ValidateManagerConfig(*c) : c.status();
  };
  EXPECT_TRUE(validate("default_slot_bytes: 4032").ok());
  for (const char* bad : {"default_slot_bytes: 17", "default_slot_bytes: 4040",
                          "default_slot_bytes: 8192, max_slot_bytes: 8192",
                          "max_slot_bytes: 65535"}) {
    absl::Status s = validate(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("slot_bytes")) << bad;
  }
}

TEST(ConfigFiles, StaticGroupSlotSizesFitTheAlu) {
  const std::string base =
      "name: a\ndata_address: 127.0.0.1:4791\n"
      "static:\n"
      "  qps:\n"
      "    - {qpn: 0x1000, psn: 1, remote: {address: 127.0.0.1:5000, qpn: 0x2000, psn: 1}}\n"
      "  groups:\n"
      "    - {tree: 1, group: 7, num_slots: 4, slot_bytes: %SLOT%, multicast: 239.1.0.1:4791,\n"
      "       children: [{qpn: 0x1000, ranks: [0]}]}\n";
  auto validate = [&](const std::string& slot) {
    std::string text = base;
    text.replace(text.find("%SLOT%"), 6, slot);
    absl::StatusOr<sw::SwitchdConfig> c = sw::ParseSwitchdConfig(text);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? sw::ValidateSwitchdConfig(*c) : c.status();
  };
  EXPECT_TRUE(validate("1024").ok()) << validate("1024");
  absl::Status s = validate("17");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("slot_bytes 17"));
}

// Every file the project reads: a key given twice is refused with its line,
// never resolved silently to the first.
TEST(ConfigFiles, DuplicateKeysAreRefusedInEveryConfigFile) {
  absl::StatusOr<manager::ManagerConfig> m = manager::ParseManagerConfig(
      "listen: 127.0.0.1:1\ntopology: t.yaml\nlisten: 0.0.0.0:2\n", "/etc");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("line 3: duplicate key 'listen'"));
  m = manager::ParseManagerConfig("topology: t.yaml\nrate_limit:\n  burst: 1\n  burst: 2\n",
                                  "/etc");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("(line 4): duplicate key 'burst'"));

  absl::StatusOr<sw::SwitchdConfig> s =
      sw::ParseSwitchdConfig("name: a\nsecret: x\nname: b\n");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("line 3: duplicate key 'name'"));
  s = sw::ParseSwitchdConfig(
      "name: a\nlink_faults:\n  - {peer: all, impairment: 'drop=0.5', impairment: none}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("(line 3): duplicate key 'impairment'"));

  std::string topo = Topology("4048");
  absl::StatusOr<manager::Topology> t =
      manager::Topology::Parse(topo + "  - {name: h1, switch: leaf0, switch: leaf1}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("(line 8): duplicate key 'switch'"));
  t = manager::Topology::Parse(topo + "name: other\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("line 8: duplicate key 'name'"));
}

}  // namespace
}  // namespace netfold
