// Tests of the topology file format and its validation.
#include "manager/topology.h"

#include <string>

#include "gtest/gtest.h"
#include "manager/testing/test_topologies.h"

namespace netfold::manager {
namespace {

TEST(Topology, LoadsTheExamples) {
  absl::StatusOr<Topology> single = LoadExampleTopology("single_switch.yaml");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->num_switches(), 1);
  EXPECT_EQ(single->num_hosts(), 4);
  EXPECT_EQ(single->switch_at(0).capacity.slots, 256u);

  absl::StatusOr<Topology> two = LoadExampleTopology("two_level.yaml");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->name(), "two-level");
  EXPECT_EQ(two->num_switches(), 5);
  EXPECT_EQ(two->num_hosts(), 8);
  int root = two->FindSwitch("root0");
  ASSERT_GE(root, 0);
  EXPECT_EQ(two->switch_at(root).down.size(), 4u);
  EXPECT_EQ(two->switch_at(root).capacity.slots, 512u);  // per-switch override
  EXPECT_EQ(two->switch_at(root).capacity.qps, 128u);    // from defaults
  int h3 = two->FindHost("h3");
  ASSERT_GE(h3, 0);
  EXPECT_EQ(two->switch_at(two->host_at(h3).switch_index).name, "leaf1");

  absl::StatusOr<Topology> fat = LoadExampleTopology("fat_tree.yaml");
  ASSERT_TRUE(fat.ok()) << fat.status();
  EXPECT_EQ(fat->num_switches(), 20);
  EXPECT_EQ(fat->num_hosts(), 16);
  int edge = fat->FindSwitch("edge21");
  ASSERT_GE(edge, 0);
  EXPECT_EQ(fat->switch_at(edge).up.size(), 2u);
  EXPECT_TRUE(fat->Linked(edge, fat->FindSwitch("agg20")));
  EXPECT_FALSE(fat->Linked(edge, fat->FindSwitch("agg10")));
  EXPECT_EQ(fat->FindSwitch("nope"), -1);
}

TEST(Topology, MissingFileIsNotFound) {
  absl::StatusOr<Topology> t = Topology::LoadFile("/nonexistent/topo.yaml");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("/nonexistent/topo.yaml"), std::string::npos);
}

struct BadCase {
  const char* yaml;
  const char* expected;  // a piece of the error message
};

class TopologyRejects : public testing::TestWithParam<BadCase> {};

TEST_P(TopologyRejects, WithAClearMessage) {
  absl::StatusOr<Topology> t = Topology::Parse(GetParam().yaml);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(GetParam().expected), std::string::npos)
      << t.status().message();
}

constexpr char kCap[] = "{trees: 4, groups: 4, slots: 16, slot_bytes: 256, qps: 8}";

INSTANTIATE_TEST_SUITE_P(
    Cases, TopologyRejects,
    testing::Values(
        BadCase{"name: t\nswitches: [ {name: a, tier: 0 }\n", "syntax error"},
        BadCase{"name: t\nswitchs: []\n", "unknown key 'switchs'"},
        BadCase{"name: t\nswitches: []\n", "no switches"},
        BadCase{"name: t\nswitches:\n  - {name: a, capacity: {slots: 1}}\n",
                "capacity trees must be positive"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: 1, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a}\n  - {name: a}\n",
                "listed twice"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: 1, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a, tier: 0}\n  - {name: b, tier: 2}\n"
                "links:\n  - [a, b]\n",
                "not adjacent"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: 1, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a, tier: 0}\nlinks:\n  - [a, z]\n",
                "unknown switch 'z'"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: 1, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a, tier: 1}\nhosts:\n  - {name: h, switch: a}\n",
                "hosts attach to tier-0"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: -3, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a}\n",
                "not a non-negative integer"},
        BadCase{"name: 'bad name'\nswitches: []\n", "invalid"},
        BadCase{"name: t\ndefaults: {capacity: {trees: 1, groups: 1, slots: 1, slot_bytes: 16, "
                "qps: 1}}\nswitches:\n  - {name: a}\nhosts:\n  - {name: h, switch: a}\n"
                "  - {name: h, switch: a}\n",
                "host 'h' is listed twice"}));

TEST(Topology, DefaultsApplyAndOverride) {
  std::string yaml = std::string("name: t\ndefaults:\n  capacity: ") + kCap +
                     "\nswitches:\n  - {name: s, capacity: {qps: 99}}\n";
  absl::StatusOr<Topology> t = Topology::Parse(yaml);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->switch_at(0).capacity.qps, 99u);
  EXPECT_EQ(t->switch_at(0).capacity.slots, 16u);
}

// `planes: 3`: plane 0 is the file's, planes 1 and 2 are copies named
// NAME@p, linked among themselves, each host on its leaf in every plane.
TEST(Topology, PlanesCopyTheSwitchesAndLinksPerPlane) {
  std::string yaml = std::string("name: t\nplanes: 3\ndefaults:\n  capacity: ") + kCap +
                     "\nswitches:\n  - {name: root, tier: 1, capacity: {slots: 64}}\n"
                     "  - {name: leaf0, tier: 0}\n  - {name: leaf1, tier: 0}\n"
                     "links:\n  - [leaf0, root]\n  - [leaf1, root]\n"
                     "hosts:\n  - {name: h0, switch: leaf0}\n  - {name: h1, switch: leaf1}\n";
  absl::StatusOr<Topology> t = Topology::Parse(yaml);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->planes(), 3u);
  EXPECT_EQ(t->num_switches_per_plane(), 3);
  ASSERT_EQ(t->num_switches(), 9);
  EXPECT_EQ(t->num_hosts(), 2);
  for (uint32_t plane = 0; plane < 3; ++plane) {
    const std::string at = plane == 0 ? "" : "@" + std::to_string(plane);
    const int root = t->FindSwitch("root" + at);
    const int leaf0 = t->FindSwitch("leaf0" + at);
    const int leaf1 = t->FindSwitch("leaf1" + at);
    ASSERT_EQ(root, static_cast<int>(plane) * 3) << plane;
    ASSERT_GE(leaf0, 0);
    ASSERT_GE(leaf1, 0);
    EXPECT_EQ(t->switch_at(root).plane, plane);
    EXPECT_EQ(t->switch_at(root).capacity.slots, 64u);   // the switch's own
    EXPECT_EQ(t->switch_at(leaf0).capacity.slots, 16u);  // the defaults
    EXPECT_EQ(t->switch_at(root).down, (std::vector<int>{leaf0, leaf1}));
    EXPECT_EQ(t->switch_at(leaf1).up, (std::vector<int>{root}));
    EXPECT_EQ(t->LeafIn(t->FindHost("h0"), plane), leaf0);
    EXPECT_EQ(t->LeafIn(t->FindHost("h1"), plane), leaf1);
    EXPECT_EQ(t->InPlane(t->FindSwitch("leaf1"), plane), leaf1);
    EXPECT_EQ(t->InPlane(leaf1, 0), t->FindSwitch("leaf1"));
  }
  // No link between planes.
  EXPECT_FALSE(t->Linked(t->FindSwitch("leaf0"), t->FindSwitch("root@1")));
  EXPECT_EQ(t->host_at(0).switch_index, t->FindSwitch("leaf0"));
}

TEST(Topology, PlanesMustBeOneToSixteen) {
  for (const char* planes : {"0", "17"}) {
    std::string yaml = std::string("name: t\nplanes: ") + planes + "\ndefaults:\n  capacity: " +
                       kCap + "\nswitches:\n  - {name: s}\n";
    absl::StatusOr<Topology> t = Topology::Parse(yaml);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << planes;
    EXPECT_NE(t.status().message().find("planes"), std::string::npos) << t.status();
  }
  // A name with '@' is never a topology's own: it would collide with a plane's.
  EXPECT_FALSE(IsValidName("leaf0@1"));
}

TEST(Topology, ValidNames) {
  EXPECT_TRUE(IsValidName("leaf-0.a_b"));
  EXPECT_FALSE(IsValidName(""));
  EXPECT_FALSE(IsValidName("a b"));
  EXPECT_FALSE(IsValidName(std::string(65, 'x')));
}

}  // namespace
}  // namespace netfold::manager
