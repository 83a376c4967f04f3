// The learning bridge: learning, flooding, filtering, moves, aging, limits.
#include "transport/dpdk/l2_bridge.h"

#include "gtest/gtest.h"

namespace netfold::transport::dpdk {
namespace {

MacAddress Host(uint8_t n) { return MacAddress{{0x02, 0, 0, 0, 0, n}}; }
constexpr int64_t kSecond = 1'000'000'000;

TEST(L2Bridge, FloodsUnknownThenForwardsLearned) {
  L2Bridge b({.num_links = 3});
  // A (link 0) -> B: B unknown, flooded; A learned on link 0.
  auto d = b.Process(0, Host(1), Host(2), 0);
  EXPECT_EQ(d.action, L2Bridge::Action::kFlood);
  // B (link 2) answers A: A is known on link 0.
  d = b.Process(2, Host(2), Host(1), 1);
  EXPECT_EQ(d.action, L2Bridge::Action::kForward);
  EXPECT_EQ(d.link, 0u);
  // A -> B again: forwarded to link 2 only.
  d = b.Process(0, Host(1), Host(2), 2);
  EXPECT_EQ(d.action, L2Bridge::Action::kForward);
  EXPECT_EQ(d.link, 2u);
  EXPECT_EQ(b.num_entries(), 2u);
  EXPECT_EQ(b.counters().learned, 2u);
  EXPECT_EQ(b.counters().flooded_unknown, 1u);
  EXPECT_EQ(b.counters().forwarded, 2u);
}

TEST(L2Bridge, GroupDestinationsAreAlwaysFlooded) {
  L2Bridge b({.num_links = 2});
  EXPECT_EQ(b.Process(0, Host(1), kBroadcastMac, 0).action, L2Bridge::Action::kFlood);
  EXPECT_EQ(b.Process(1, Host(2), Ipv4MulticastMac(0xe0000001), 0).action,
            L2Bridge::Action::kFlood);
  EXPECT_EQ(b.counters().flooded_group, 2u);
  EXPECT_EQ(b.num_entries(), 2u);  // sources learned all the same
}

TEST(L2Bridge, FiltersFramesForTheIngressLink) {
  L2Bridge b({.num_links = 2});
  b.Process(0, Host(1), Host(9), 0);
  b.Process(0, Host(2), Host(9), 0);
  // Host 1 and 2 share link 0 (a hub behind it): no need to forward.
  EXPECT_EQ(b.Process(0, Host(1), Host(2), 1).action, L2Bridge::Action::kFilter);
  EXPECT_EQ(b.counters().filtered, 1u);
}

TEST(L2Bridge, StationMoveRebindsTheAddress) {
  L2Bridge b({.num_links = 3});
  b.Process(0, Host(1), kBroadcastMac, 0);
  EXPECT_EQ(b.Lookup(Host(1), 0), 0u);
  b.Process(2, Host(1), kBroadcastMac, 1);
  EXPECT_EQ(b.Lookup(Host(1), 1), 2u);
  EXPECT_EQ(b.counters().moved, 1u);
  EXPECT_EQ(b.Process(1, Host(5), Host(1), 2).link, 2u);
}

TEST(L2Bridge, GroupAndZeroSourcesAreNotLearned) {
  L2Bridge b({.num_links = 2});
  b.Process(0, kBroadcastMac, Host(1), 0);
  b.Process(0, MacAddress{}, Host(1), 0);
  EXPECT_EQ(b.num_entries(), 0u);
  EXPECT_EQ(b.counters().bad_source, 2u);
  EXPECT_FALSE(b.Learn(Ipv4MulticastMac(0xe0000001), 1, 0));
}

TEST(L2Bridge, EntriesAgeOut) {
  L2Bridge b({.num_links = 2, .aging = absl::Seconds(10)});
  b.Process(0, Host(1), kBroadcastMac, 0);
  EXPECT_EQ(b.Lookup(Host(1), 10 * kSecond), 0u);  // exactly at the limit: still there
  EXPECT_FALSE(b.Lookup(Host(1), 10 * kSecond + 1).has_value());
  EXPECT_EQ(b.counters().aged, 1u);
  // Traffic from the host keeps it fresh.
  b.Process(1, Host(2), kBroadcastMac, 0);
  b.Process(1, Host(2), kBroadcastMac, 8 * kSecond);
  EXPECT_EQ(b.Lookup(Host(2), 15 * kSecond), 1u);
  EXPECT_EQ(b.Process(0, Host(3), Host(2), 30 * kSecond).action, L2Bridge::Action::kFlood);
}

TEST(L2Bridge, FullTableLearnsNothingNewUntilEntriesAge) {
  L2Bridge b({.num_links = 2, .max_entries = 4, .aging = absl::Seconds(10)});
  for (uint8_t i = 1; i <= 4; ++i) b.Process(0, Host(i), kBroadcastMac, 0);
  b.Process(1, Host(5), kBroadcastMac, kSecond);
  EXPECT_EQ(b.num_entries(), 4u);
  EXPECT_EQ(b.counters().table_full, 1u);
  EXPECT_FALSE(b.Lookup(Host(5), kSecond).has_value());
  // Known addresses still refresh and move.
  b.Process(1, Host(1), kBroadcastMac, kSecond);
  EXPECT_EQ(b.Lookup(Host(1), kSecond), 1u);
  // After aging, a sweep makes room.
  b.Process(1, Host(5), kBroadcastMac, 12 * kSecond);
  EXPECT_EQ(b.Lookup(Host(5), 12 * kSecond), 1u);
  EXPECT_GE(b.counters().aged, 3u);
}

TEST(L2Bridge, FlushLinkForgetsItsAddresses) {
  L2Bridge b({.num_links = 2});
  b.Process(0, Host(1), kBroadcastMac, 0);
  b.Process(1, Host(2), kBroadcastMac, 0);
  b.FlushLink(0);
  EXPECT_FALSE(b.Lookup(Host(1), 0).has_value());
  EXPECT_EQ(b.Lookup(Host(2), 0), 1u);
}

}  // namespace
}  // namespace netfold::transport::dpdk
