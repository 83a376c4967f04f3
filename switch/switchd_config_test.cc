// netfold-switchd's config: the YAML keys, numbers in decimal and hex, clear
// errors (file, key path and line) for bad files, duplicate and empty keys
// refused, the cross-key validation, and the --link_faults syntax. The rules
// are config/yaml_reader.h's, shared with netfold-managerd's config.
#include "switch/switchd_config.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;
using transport::LinkDirection;

constexpr char kFull[] = R"(
name: leaf0
data_address: 127.0.0.1:0
backend: udp
admin_address: 127.0.0.1:9999
log_level: debug
data_port_file: /tmp/x.port
capacity: {trees: 8, groups: 32, slots: 512, slot_bytes: 2048, qps: 100}
job_quota: {groups: 4, slots: 64, qps: 9}
transport: {path_mtu: 4096, ack_timeout_ms: 3, ack_delay_us: 250, retry_count: 5,
            link_failure_ms: 4500, idle_wait_us: 500, poll_us: 150, packet_buffers: 1024, ip_identification: solve,
            scheduling: normal}
link_faults:
  - {peer: default, direction: receive, impairment: "drop=0.01,seed=3"}
  - {peer: 127.0.0.1:5000, direction: send, impairment: "down=1"}
static:
  jobs: [{id: 1, quota: {groups: 2, slots: 16, qps: 4}}]
  qps:
    - {qpn: 0x100, psn: 1000, job: 1, pkey: 0x8001, peer: "rank 0",
       remote: {address: 127.0.0.1:6000, qpn: 0x200, psn: 2000}}
    - {qpn: 257, psn: 0xabc, job: 1, pkey: 0x8001,
       remote: {address: 127.0.0.1:6001, qpn: 0x201, psn: 2001}}
  groups:
    - {tree: 2, group: 7, epoch: 3, job: 1, pkey: 0x8001, qkey: 0x1234,
       num_slots: 8, slot_bytes: 1024, multicast: 239.1.0.1:4791,
       children: [{qpn: 0x100, ranks: [0]}, {qpn: 0x101, ranks: [1, 2]}]}
)";

TEST(SwitchdConfig, ReceiveQueuesAreOptIn) {
  EXPECT_EQ(SwitchdConfig{}.receive_queues, 0u);
  absl::StatusOr<SwitchdConfig> c =
      ParseSwitchdConfig("name: a\ntransport: {receive_queues: 3}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->receive_queues, 3u);
  EXPECT_TRUE(ValidateSwitchdConfig(*c).ok());
}

TEST(SwitchdConfig, OneDataPlaneUnlessAskedForMore) {
  EXPECT_EQ(SwitchdConfig{}.planes, 1u);
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig("name: a\ntransport: {planes: 4}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->planes, 4u);
  EXPECT_EQ(c->plane, 0u);
  EXPECT_TRUE(ValidateSwitchdConfig(*c).ok());
}

TEST(SwitchdConfig, ParsesEveryKey) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(kFull);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "leaf0");
  EXPECT_EQ(c->data_address, (Ipv4Endpoint{0x7f000001, 0}));
  EXPECT_EQ(c->admin_address, "127.0.0.1:9999");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->data_port_file, "/tmp/x.port");
  EXPECT_EQ(c->max_trees, 8u);
  EXPECT_EQ(c->data_plane.max_groups, 32u);
  EXPECT_EQ(c->data_plane.max_slots, 512u);
  EXPECT_EQ(c->data_plane.max_slot_bytes, 2048u);
  EXPECT_EQ(c->data_plane.max_qps, 100u);
  EXPECT_EQ(c->data_plane.default_quota.max_groups, 4u);
  EXPECT_EQ(c->data_plane.default_quota.max_qps, 9u);
  EXPECT_EQ(c->data_plane.ack_timeout, absl::Milliseconds(3));
  EXPECT_EQ(c->data_plane.ack_delay, absl::Microseconds(250));
  EXPECT_EQ(c->data_plane.retry_count, 5);
  EXPECT_EQ(c->data_plane.min_failure_time, absl::Milliseconds(4500));
  EXPECT_EQ(c->idle_wait, absl::Microseconds(500));  // set: kept whatever the port
  EXPECT_EQ(c->poll_window, absl::Microseconds(150));
  EXPECT_EQ(c->packet_buffers, 1024u);
  EXPECT_TRUE(c->data_plane.solve_ip_identification);
  EXPECT_FALSE(c->sched_batch);
  EXPECT_TRUE(SwitchdConfig{}.sched_batch) << "batch unless the file says normal";
  ASSERT_EQ(c->link_faults.size(), 2u);
  EXPECT_EQ(c->link_faults[0].peer, "default");
  EXPECT_EQ(c->link_faults[0].direction, LinkDirection::kReceive);
  EXPECT_EQ(c->link_faults[0].impairment.drop, 0.01);
  EXPECT_EQ(c->link_faults[0].impairment.seed, 3u);
  EXPECT_TRUE(c->link_faults[1].impairment.link_down);
  ASSERT_EQ(c->static_job_quotas.size(), 1u);
  EXPECT_EQ(c->static_job_quotas[0].second.max_slots, 16u);
  ASSERT_EQ(c->static_qps.size(), 2u);
  EXPECT_EQ(*c->static_qps[0].qpn, 0x100u);
  EXPECT_EQ(*c->static_qps[0].psn, 1000u);
  EXPECT_EQ(c->static_qps[0].pkey, 0x8001);
  EXPECT_EQ(c->static_qps[0].peer, "rank 0");
  EXPECT_EQ(*c->static_qps[0].remote, (Ipv4Endpoint{0x7f000001, 6000}));
  EXPECT_EQ(c->static_qps[0].remote_qpn, 0x200u);
  EXPECT_EQ(*c->static_qps[1].qpn, 257u);
  EXPECT_EQ(*c->static_qps[1].psn, 0xabcu);
  EXPECT_EQ(c->static_qps[1].peer, "static QP 0x000101");
  ASSERT_EQ(c->static_groups.size(), 1u);
  const GroupSpec& g = c->static_groups[0];
  EXPECT_EQ(g.tree_id, 2);
  EXPECT_EQ(g.group_id, 7u);
  EXPECT_EQ(g.epoch, 3u);
  EXPECT_EQ(g.qkey, 0x1234u);
  EXPECT_EQ(g.num_slots, 8u);
  EXPECT_EQ(*g.multicast, (Ipv4Endpoint{0xef010001, 4791}));
  EXPECT_FALSE(g.parent_qpn.has_value());
  ASSERT_EQ(g.children.size(), 2u);
  EXPECT_EQ(g.children[1].ranks, (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(ValidateSwitchdConfig(*c).ok()) << ValidateSwitchdConfig(*c);
}

// A field left out of job_quota: static mode's default here, and marked
// not given, so that a switch with a manager puts its capacity there
// (SwitchDaemon::Start) rather than the static 64 groups and 2048 slots.
TEST(SwitchdConfig, AJobQuotaFieldLeftOutIsMarkedNotGiven) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig("name: a\njob_quota: {qps: 512}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job_quota_given.max_qps, 512u);
  EXPECT_EQ(c->job_quota_given.max_groups, SwitchdConfig::kQuotaNotGiven);
  EXPECT_EQ(c->job_quota_given.max_slots, SwitchdConfig::kQuotaNotGiven);
  EXPECT_EQ(c->data_plane.default_quota.max_qps, 512u);
  EXPECT_EQ(c->data_plane.default_quota.max_groups, JobQuota{}.max_groups);
  EXPECT_EQ(c->data_plane.default_quota.max_slots, JobQuota{}.max_slots);
  absl::StatusOr<SwitchdConfig> none = ParseSwitchdConfig("name: a\n");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->job_quota_given.max_slots, SwitchdConfig::kQuotaNotGiven);
}

TEST(SwitchdConfig, ParsesTheDpdkSection) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(
      "name: leaf0\n"
      "data_address: 10.0.0.254:4791\n"
      "backend: dpdk\n"
      "dpdk:\n"
      "  eal_args: \"--no-huge --no-pci -l 0\"\n"
      "  links:\n"
      "    - {device: \"net_af_packet0,iface=p0\", send_faults: \"drop=0.5,seed=2\"}\n"
      "    - {device: net_tap1, receive_faults: \"down=1\"}\n"
      "  prefix_length: 16\n"
      "  gateway: 10.0.0.1\n"
      "  mac: \"02:00:00:00:00:07\"\n"
      "  busy_poll: true\n"
      "  bridge: no\n"
      "  mbufs_per_link: 1023\n"
      "  mbuf_data_size: 8192\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, "dpdk");
  EXPECT_EQ(c->dpdk.eal_args, "--no-huge --no-pci -l 0");
  ASSERT_EQ(c->dpdk.links.size(), 2u);
  EXPECT_EQ(c->dpdk.links[0].device, "net_af_packet0,iface=p0");
  EXPECT_DOUBLE_EQ(c->dpdk.links[0].send.drop, 0.5);
  EXPECT_FALSE(c->dpdk.links[0].receive.link_down);
  EXPECT_TRUE(c->dpdk.links[1].receive.link_down);
  EXPECT_EQ(c->dpdk.prefix_length, 16);
  EXPECT_EQ(c->dpdk.gateway, 0x0a000001u);
  EXPECT_EQ(c->dpdk.mac, "02:00:00:00:00:07");
  EXPECT_TRUE(c->dpdk.busy_poll);
  EXPECT_FALSE(c->dpdk.bridge);
  EXPECT_EQ(c->dpdk.mbufs_per_link, 1023u);
  EXPECT_EQ(c->dpdk.mbuf_data_size, 8192u);

  EXPECT_FALSE(ParseSwitchdConfig("name: a\ndpdk: {busy_poll: maybe}\n").ok());
  EXPECT_FALSE(ParseSwitchdConfig("name: a\ndpdk: {links: [{device: x, faults: y}]}\n").ok());
  EXPECT_FALSE(ParseSwitchdConfig("name: a\ndpdk: {gateway: 10.0.0}\n").ok());
  EXPECT_FALSE(
      ParseSwitchdConfig("name: a\ndpdk: {links: [{device: x, send_faults: \"drop=2\"}]}\n").ok());
}

TEST(SwitchdConfig, EmptyFileGivesTheDefaultsButNoName) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, "udp");
  EXPECT_EQ(c->admin_address, "127.0.0.1:0");
  EXPECT_EQ(c->data_plane.max_slot_bytes, 4048u);
  EXPECT_FALSE(c->data_plane.solve_ip_identification);
  absl::Status v = ValidateSwitchdConfig(*c);
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("name"), std::string::npos) << v;
  c->name = "s1";
  EXPECT_TRUE(ValidateSwitchdConfig(*c).ok()) << ValidateSwitchdConfig(*c);
}

// The admin API's detailed view (QPNs, PSNs, P_Keys) is off by default and
// can be turned on only with an admin address on loopback (issue 23.2).
TEST(SwitchdConfig, AdminDetailIsOffByDefaultAndNeedsALoopbackAdminAddress) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig("name: s1\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->admin_detail);
  c = ParseSwitchdConfig("name: s1\nadmin_detail: true\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->admin_detail);
  EXPECT_TRUE(ValidateSwitchdConfig(*c).ok()) << ValidateSwitchdConfig(*c);
  c->admin_address = "10.0.0.5:0";
  absl::Status v = ValidateSwitchdConfig(*c);
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("loopback"), std::string::npos) << v;
}

// Each bad file is refused with InvalidArgument and a message holding `want`.
struct BadCase {
  const char* yaml;
  const char* want;
};

class BadConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, IsRefusedWithAClearMessage) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(GetParam().yaml);
  ASSERT_FALSE(c.ok()) << GetParam().yaml;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(GetParam().want), std::string::npos)
      << "got: " << c.status().message() << "\nwant: " << GetParam().want;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfig,
    ::testing::Values(
        BadCase{"name: [unclosed", "YAML syntax error"},
        BadCase{"name: a\nnmae: b\n", "unknown key 'nmae'"},
        BadCase{"name: a\nnmae: b\n", "line 2"},
        BadCase{"name: a\nname: b\n", "line 2: duplicate key 'name' (first on line 1)"},
        BadCase{"capacity: {slots: 1, slots: 2}\n", "capacity (line 1): duplicate key 'slots'"},
        BadCase{"name: a\nmanager:\n", "manager: no value, expected a string"},
        BadCase{"- just\n- a list\n", "expected a map"},
        BadCase{"capacity: 5\n", "capacity (line 1): expected a map"},
        BadCase{"capacity: {slots: -3}\n", "capacity.slots"},
        BadCase{"capacity: {slots: many}\n", "'many' is not a non-negative integer"},
        BadCase{"capacity: {sluts: 3}\n", "unknown key 'sluts'"},
        BadCase{"transport: {retry_count: 9}\n", "transport.retry_count"},
        BadCase{"transport: {retry_count: 9}\n", "larger than 7"},
        BadCase{"transport: {ip_identification: guess}\n", "must be zero or solve"},
        BadCase{"transport: {scheduling: realtime}\n", "must be batch or normal"},
        BadCase{"transport: {ack_delay_us: 1001}\n", "transport.ack_delay_us"},
        BadCase{"transport: {poll_us: 1000001}\n", "transport.poll_us"},
        BadCase{"transport: {poll_us: -5}\n", "transport.poll_us"},
        BadCase{"transport: {receive_queues: 17}\n", "transport.receive_queues"},
        BadCase{"transport: {planes: 17}\n", "transport.planes"},
        BadCase{"data_address: localhost\n", "not an ip:port address"},
        BadCase{"link_faults: {peer: all}\n", "expected a list"},
        BadCase{"link_faults:\n  - {peer: all, impairment: \"drop=2\"}\n",
                "link_faults[0].impairment"},
        BadCase{"link_faults:\n  - {peer: somewhere}\n", "neither default, all nor"},
        BadCase{"link_faults:\n  - {direction: up}\n", "not one of send, receive, both"},
        BadCase{"static: {qps: [{qpn: 0x1000000, psn: 1}]}\n", "static.qps[0].qpn"},
        BadCase{"static: {qps: [{qpn: 1, psn: 1}]}\n", "reserved"},
        BadCase{"static: {qps: [{qpn: 5}]}\n", "static.qps[0].psn: missing"},
        BadCase{"static: {qps: [{qpn: 5, psn: 1, pkey: 0x10000}]}\n", "static.qps[0].pkey"},
        BadCase{"static: {groups: [{tree: 70000, group: 1, children: [{qpn: 5, ranks: [0]}]}]}\n",
                "static.groups[0].tree"},
        BadCase{"static: {groups: [{tree: 1, group: 0x100000000, children: []}]}\n",
                "static.groups[0].group"},
        BadCase{"static: {groups: [{tree: 1, group: 1, children: []}]}\n",
                "static.groups[0].children"},
        BadCase{"static: {groups: [{tree: 1, group: 1, children: [{qpn: 5, ranks: []}]}]}\n",
                "at least one rank"},
        BadCase{"static: {groups: [{tree: 1, group: 1, children: [{qpn: 5, rank: 0}]}]}\n",
                "unknown key 'rank'"}));

// Valid YAML, refused by the validation that spans keys.
struct InvalidCase {
  const char* yaml;
  absl::StatusCode code;
  const char* want;
};

class InvalidConfig : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidConfig, IsRefusedByValidation) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(GetParam().yaml);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status v = ValidateSwitchdConfig(*c);
  EXPECT_EQ(v.code(), GetParam().code) << v;
  EXPECT_NE(v.message().find(GetParam().want), std::string::npos)
      << "got: " << v.message() << "\nwant: " << GetParam().want;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidConfig,
    ::testing::Values(
        InvalidCase{"name: \"a b\"\n", absl::StatusCode::kInvalidArgument, "name 'a b'"},
#ifdef NETFOLD_HAVE_DPDK
        InvalidCase{"name: a\nbackend: dpdk\n", absl::StatusCode::kInvalidArgument,
                    "dpdk.links lists no device"},
        InvalidCase{"name: a\nbackend: dpdk\ndpdk: {links: [{device: x}], mbuf_data_size: 1000}\n",
                    absl::StatusCode::kInvalidArgument, "cannot hold a frame"},
        InvalidCase{"name: a\nbackend: dpdk\ndpdk: {links: [{device: \"\"}]}\n",
                    absl::StatusCode::kInvalidArgument, "device is empty"},
#else
        InvalidCase{"name: a\nbackend: dpdk\n", absl::StatusCode::kUnimplemented, "without DPDK"},
#endif
        InvalidCase{"name: a\ndpdk: {links: [{device: x}]}\n", absl::StatusCode::kInvalidArgument,
                    "set backend: dpdk"},
        InvalidCase{"name: a\nbackend: rdma\n", absl::StatusCode::kInvalidArgument,
                    "not one of udp, dpdk"},
        InvalidCase{"name: a\ndata_address: 0.0.0.0:4791\n", absl::StatusCode::kInvalidArgument,
                    "not 0.0.0.0"},
        InvalidCase{"name: a\ncapacity: {slot_bytes: 4096}\n", absl::StatusCode::kInvalidArgument,
                    "at most 4048"},
        InvalidCase{"name: a\ntransport: {path_mtu: 1000}\n", absl::StatusCode::kInvalidArgument,
                    "path_mtu 1000"},
        InvalidCase{"name: a\ncapacity: {groups: 0}\n", absl::StatusCode::kInvalidArgument,
                    "must be positive"},
        InvalidCase{"name: a\ntransport: {receive_queues: 2, poll_us: 100}\n",
                    absl::StatusCode::kInvalidArgument, "do not go together"},
        InvalidCase{"name: a\ntransport: {planes: 0}\n", absl::StatusCode::kInvalidArgument,
                    "transport.planes must be 1..16"},
        InvalidCase{"name: a\nbackend: dpdk\ndpdk: {links: [{device: x}]}\ntransport: {planes: 2}\n",
#ifdef NETFOLD_HAVE_DPDK
                    absl::StatusCode::kInvalidArgument, "planes is for the udp backend"},
#else
                    absl::StatusCode::kUnimplemented, "without DPDK"},
#endif
        InvalidCase{"name: a\ntransport: {planes: 2}\nstatic:\n  qps: [{qpn: 5, psn: 1, remote: "
                    "{address: 127.0.0.1:1, qpn: 9, psn: 0}}]\n",
                    absl::StatusCode::kInvalidArgument, "static mode with one plane"},
        InvalidCase{"name: a\nlog_level: loud\n", absl::StatusCode::kInvalidArgument,
                    "log_level 'loud'"},
        InvalidCase{"name: a\nadmin_address: nowhere\n", absl::StatusCode::kInvalidArgument,
                    "admin_address"},
        InvalidCase{"name: a\nmanager: 127.0.0.1:1\nstatic:\n  qps: [{qpn: 5, psn: 1, remote: "
                    "{address: 127.0.0.1:1, qpn: 9, psn: 0}}]\n",
                    absl::StatusCode::kInvalidArgument, "drop the static: section"},
        InvalidCase{"name: a\nstatic:\n  qps: [{qpn: 5, psn: 1}]\n",
                    absl::StatusCode::kInvalidArgument, "needs remote"},
        InvalidCase{"name: a\nstatic:\n  qps: [{qpn: 5, psn: 1, remote: {address: 127.0.0.1:1, "
                    "qpn: 9, psn: 0}}, {qpn: 5, psn: 2, remote: {address: 127.0.0.1:2, qpn: 9, "
                    "psn: 0}}]\n",
                    absl::StatusCode::kInvalidArgument, "QPN 0x5 appears twice"}));

TEST(SwitchdConfig, TlsIsRequiredWithACredentialUnlessPlaintextIsAskedFor) {
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig("tls_dir: /etc/netfold/tls\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls_dir, "/etc/netfold/tls");
  EXPECT_TRUE(ParseSwitchdConfig("tls: none\n")->tls_none);
  EXPECT_NE(ParseSwitchdConfig("tls: off\n").status().message().find("required or none"),
            std::string::npos);
  SwitchdConfig d;
  d.credential = "secret";
  absl::Status s = LoadSwitchdTls(&d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no TLS: give --tls_dir DIR"), std::string::npos) << s;
  d.tls_none = true;
  EXPECT_TRUE(LoadSwitchdTls(&d).ok());
  EXPECT_FALSE(d.tls.has_value());
  d.tls_dir = "/nonexistent";
  EXPECT_EQ(LoadSwitchdTls(&d).code(), absl::StatusCode::kInvalidArgument);  // both given
  d.tls_none = false;
  EXPECT_EQ(LoadSwitchdTls(&d).code(), absl::StatusCode::kNotFound);
  SwitchdConfig open;  // auth: none, or static mode: nothing to protect
  EXPECT_TRUE(LoadSwitchdTls(&open).ok());
}

TEST(SwitchdConfig, LinkFaultFlagSyntax) {
  absl::StatusOr<std::vector<LinkFaultSpec>> f =
      ParseLinkFaultList("all/both/drop=0.05,seed=3; 127.0.0.1:5000/send/down=1;");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->size(), 2u);
  EXPECT_EQ((*f)[0].peer, "all");
  EXPECT_EQ((*f)[0].impairment.drop, 0.05);
  EXPECT_EQ((*f)[1].peer, "127.0.0.1:5000");
  EXPECT_EQ((*f)[1].direction, LinkDirection::kSend);
  EXPECT_TRUE((*f)[1].impairment.link_down);
  // burst= and reorder= keep their colons.
  f = ParseLinkFaultList("default/receive/burst=0.01:0.3,reorder=0.1:200us");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)[0].impairment.burst_exit, 0.3);
  EXPECT_TRUE(ParseLinkFaultList("").ok());
  EXPECT_FALSE(ParseLinkFaultList("all/both").ok());
  EXPECT_FALSE(ParseLinkFaultList("moon/both/drop=0.1").ok());
  EXPECT_FALSE(ParseLinkFaultList("all/sideways/drop=0.1").ok());
  EXPECT_FALSE(ParseLinkFaultList("all/both/drop=7").ok());
}

TEST(SwitchdConfig, FilesAndTheDeployedExample) {
  absl::StatusOr<SwitchdConfig> missing = LoadSwitchdConfig("/nonexistent/switchd.yaml");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/switchd.yaml"), std::string::npos);
  absl::StatusOr<SwitchdConfig> example =
      LoadSwitchdConfig(std::string(NETFOLD_SOURCE_DIR) + "/deploy/switchd.example.yaml");
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_TRUE(ValidateSwitchdConfig(*example).ok()) << ValidateSwitchdConfig(*example);
  absl::StatusOr<SwitchdConfig> stat =
      LoadSwitchdConfig(std::string(NETFOLD_SOURCE_DIR) + "/deploy/switchd.static.example.yaml");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_TRUE(ValidateSwitchdConfig(*stat).ok()) << ValidateSwitchdConfig(*stat);
  EXPECT_FALSE(stat->static_groups.empty());
}

TEST(SwitchdConfig, ErrorsInAFileNameTheFileTheKeyAndTheLine) {
  const std::string path = ::testing::TempDir() + "/switchd_config_test_bad.yaml";
  {
    std::ofstream out(path);
    out << "name: leaf0\ncapacity:\n  slots: many\n";
  }
  absl::StatusOr<SwitchdConfig> c = LoadSwitchdConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            path + ": capacity.slots (line 3): 'many' is not a non-negative integer");
  std::remove(path.c_str());
}

TEST(SwitchdConfig, MaxSlotBytesLeavesRoomForTheHeader) {
  EXPECT_EQ(MaxSlotBytesForMtu(4096), 4048u);
  EXPECT_EQ(MaxSlotBytesForMtu(1024), 976u);
  EXPECT_EQ(MaxSlotBytesForMtu(256), 208u);
}

}  // namespace
}  // namespace netfold::sw
