// The impaired port: one link (the same stages for every datagram, seeds as
// given) and per peer (stages, counters and seeds per remote address, the
// overflow peer), held packets released on time, link directions.
#include "transport/impaired_port.h"

#include <cstring>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "transport/memory_port.h"
#include "transport/testing/port_test_util.h"

namespace netfold::transport {
namespace {

constexpr Ipv4Endpoint kSwitch{0x0a000001, 4791};
constexpr Ipv4Endpoint kH1{0x0a000002, 4791};
constexpr Ipv4Endpoint kH2{0x0a000003, 4791};
constexpr Ipv4Endpoint kGroup{0xe0010203, 4791};

// Sends `n` packets tagged 0..n-1 from `from` to `to`, one per burst.
void SendTagged(Port& from, const Ipv4Endpoint& to, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    PacketBuffer* p = TaggedPacket(from, to, i);
    ASSERT_EQ(from.SendBurst({&p, 1}), 1u);
  }
}

std::vector<uint32_t> ReceiveAll(Port& port) {
  std::vector<uint32_t> tags;
  PacketBuffer* rx[64];
  while (true) {
    const size_t n = port.RecvBurst(rx, absl::ZeroDuration());
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) tags.push_back(Tag(rx[i]));
    PacketPool::FreeBurst({rx, n});
  }
  return tags;
}

struct Fixture {
  FakeClock clock{absl::Seconds(1)};
  MemoryNetwork net;
  ImpairedPort* sw = nullptr;
  std::unique_ptr<Port> sw_owner;
  std::unique_ptr<MemoryPort> h1, h2;

  Fixture() {
    auto inner = net.CreatePort({.local = kSwitch, .rx_queue_limit = 4096});
    EXPECT_TRUE(inner.ok());
    sw = new ImpairedPort(std::move(*inner), clock);
    sw_owner.reset(sw);
    h1 = *net.CreatePort({.local = kH1, .rx_queue_limit = 4096});
    h2 = *net.CreatePort({.local = kH2, .rx_queue_limit = 4096});
  }
};

TEST(ImpairedPortPerPeer, IdentityByDefaultWithCountersPerPeer) {
  Fixture f;
  SendTagged(*f.h1, kSwitch, 3);
  SendTagged(*f.h2, kSwitch, 2);
  EXPECT_EQ(ReceiveAll(*f.sw).size(), 5u);
  SendTagged(*f.sw, kH1, 4);
  EXPECT_EQ(ReceiveAll(*f.h1).size(), 4u);

  std::vector<PeerLinkSnapshot> peers = f.sw->Snapshot();
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].peer, kH1);  // ordered by address
  EXPECT_EQ(peers[0].rx_packets, 3u);
  EXPECT_EQ(peers[0].rx_bytes, 12u);
  EXPECT_EQ(peers[0].tx_packets, 4u);
  EXPECT_EQ(peers[0].tx_bytes, 16u);
  EXPECT_EQ(peers[1].peer, kH2);
  EXPECT_EQ(peers[1].rx_packets, 2u);
  EXPECT_EQ(peers[1].tx_packets, 0u);
  EXPECT_TRUE(peers[0].send.IsIdentity());
  EXPECT_EQ(peers[0].receive_stage.packets_out, 3u);
}

// What bypasses the port (a switch's in-process links) asks whether a
// fault was ever set; setting one, even none, says yes for good.
TEST(ImpairedPortPerPeer, EverImpairedOnceAnyImpairmentIsSet) {
  Fixture f;
  EXPECT_FALSE(f.sw->ever_impaired());
  EXPECT_TRUE(f.sw->SetPeerImpairment(kH1, LinkDirection::kSend, ImpairmentConfig{}).ok());
  EXPECT_TRUE(f.sw->ever_impaired());
  for (int how = 0; how < 2; ++how) {
    const Ipv4Endpoint local{0x0a000009, static_cast<uint16_t>(9 + how)};
    auto inner = f.net.CreatePort({.local = local});
    ASSERT_TRUE(inner.ok());
    ImpairedPort port(std::move(*inner), f.clock);
    EXPECT_FALSE(port.ever_impaired());
    if (how == 0) {
      port.SetDefaultImpairment(LinkDirection::kReceive, ImpairmentConfig{});
    } else {
      port.SetAllImpairment(LinkDirection::kBoth, ImpairmentConfig{});
    }
    EXPECT_TRUE(port.ever_impaired());
  }
}

TEST(ImpairedPortPerPeer, LinkDownOnOnePeerOnlyAffectsThatPeer) {
  Fixture f;
  ASSERT_TRUE(
      f.sw->SetPeerImpairment(kH1, LinkDirection::kReceive, *ParseImpairment("down=1")).ok());
  SendTagged(*f.h1, kSwitch, 10);
  SendTagged(*f.h2, kSwitch, 10);
  EXPECT_EQ(ReceiveAll(*f.sw).size(), 10u);
  // The send direction toward h1 is untouched.
  SendTagged(*f.sw, kH1, 5);
  EXPECT_EQ(ReceiveAll(*f.h1).size(), 5u);

  const PeerLinkSnapshot h1 = *f.sw->SnapshotPeer(kH1);
  EXPECT_EQ(h1.rx_packets, 10u);
  EXPECT_EQ(h1.receive_stage.dropped_down, 10u);
  EXPECT_EQ(h1.send_stage.dropped(), 0u);
  EXPECT_TRUE(h1.receive.link_down);
  EXPECT_EQ(f.sw->SnapshotPeer(kH2)->receive_stage.dropped(), 0u);

  // Back up at run time.
  ASSERT_TRUE(f.sw->SetPeerImpairment(kH1, LinkDirection::kBoth, ImpairmentConfig{}).ok());
  SendTagged(*f.h1, kSwitch, 4);
  EXPECT_EQ(ReceiveAll(*f.sw).size(), 4u);
}

TEST(ImpairedPortPerPeer, NamedPeerIsCreatedBeforeItsFirstPacket) {
  Fixture f;
  ASSERT_TRUE(f.sw->SetPeerImpairment(kH2, LinkDirection::kSend, *ParseImpairment("down=1")).ok());
  EXPECT_EQ(f.sw->num_peers(), 1u);
  SendTagged(*f.sw, kH2, 3);
  SendTagged(*f.sw, kH1, 3);
  EXPECT_TRUE(ReceiveAll(*f.h2).empty());
  EXPECT_EQ(ReceiveAll(*f.h1).size(), 3u);
  EXPECT_EQ(f.sw->SnapshotPeer(kH2)->send_stage.dropped_down, 3u);
}

TEST(ImpairedPortPerPeer, DefaultAppliesToNewPeersAllToExistingOnes) {
  Fixture f;
  SendTagged(*f.h1, kSwitch, 1);  // h1 exists before the default changes
  EXPECT_EQ(ReceiveAll(*f.sw).size(), 1u);
  f.sw->SetDefaultImpairment(LinkDirection::kReceive, *ParseImpairment("down=1"));
  SendTagged(*f.h1, kSwitch, 2);
  SendTagged(*f.h2, kSwitch, 2);  // h2 is new: created down
  EXPECT_EQ(ReceiveAll(*f.sw), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(f.sw->default_receive().link_down);
  EXPECT_FALSE(f.sw->default_send().link_down);

  f.sw->SetAllImpairment(LinkDirection::kBoth, *ParseImpairment("down=1"));
  SendTagged(*f.h1, kSwitch, 2);
  SendTagged(*f.sw, kH1, 2);
  EXPECT_TRUE(ReceiveAll(*f.sw).empty());
  EXPECT_TRUE(ReceiveAll(*f.h1).empty());
  f.sw->SetAllImpairment(LinkDirection::kBoth, ImpairmentConfig{});
  SendTagged(*f.h2, kSwitch, 2);
  EXPECT_EQ(ReceiveAll(*f.sw).size(), 2u);
}

TEST(ImpairedPortPerPeer, SeedsAreDerivedPerPeerAndReproducible) {
  EXPECT_NE(ImpairedPort::DeriveSeed(7, kH1), ImpairedPort::DeriveSeed(7, kH2));
  EXPECT_EQ(ImpairedPort::DeriveSeed(7, kH1), ImpairedPort::DeriveSeed(7, kH1));

  // The same default seed gives the same losses in two runs, and different
  // losses on two peers.
  auto run = []() {
    Fixture f;
    f.sw->SetDefaultImpairment(LinkDirection::kReceive, *ParseImpairment("drop=0.5,seed=9"));
    SendTagged(*f.h1, kSwitch, 64);
    std::vector<uint32_t> from_h1 = ReceiveAll(*f.sw);
    SendTagged(*f.h2, kSwitch, 64);
    std::vector<uint32_t> from_h2 = ReceiveAll(*f.sw);
    EXPECT_EQ(f.sw->SnapshotPeer(kH1)->receive.seed, ImpairedPort::DeriveSeed(9, kH1));
    return std::make_pair(from_h1, from_h2);
  };
  const auto a = run();
  const auto b = run();
  EXPECT_EQ(a, b);
  EXPECT_NE(a.first, a.second);
  EXPECT_GT(a.first.size(), 10u);
  EXPECT_LT(a.first.size(), 54u);
}

TEST(ImpairedPortPerPeer, DelayIsHeldPerPeerAndReleasedOnTime) {
  Fixture f;
  ASSERT_TRUE(
      f.sw->SetPeerImpairment(kH1, LinkDirection::kSend, *ParseImpairment("delay=5ms")).ok());
  SendTagged(*f.sw, kH1, 2);
  SendTagged(*f.sw, kH2, 2);
  EXPECT_EQ(ReceiveAll(*f.h2).size(), 2u);
  EXPECT_TRUE(ReceiveAll(*f.h1).empty());
  f.clock.Advance(absl::Milliseconds(6));
  PacketBuffer* rx[4];
  EXPECT_EQ(f.sw->RecvBurst(rx, absl::ZeroDuration()), 0u);  // releases what is due
  EXPECT_EQ(ReceiveAll(*f.h1), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(f.sw->SnapshotPeer(kH1)->send_stage.delayed, 2u);
}

TEST(ImpairedPortPerPeer, MulticastGroupIsASendPeer) {
  Fixture f;
  ASSERT_TRUE(f.h1->JoinMulticast(kGroup).ok());
  SendTagged(*f.sw, kGroup, 3);
  EXPECT_EQ(ReceiveAll(*f.h1).size(), 3u);
  EXPECT_EQ(f.sw->SnapshotPeer(kGroup)->tx_packets, 3u);
}

TEST(ImpairedPortPerPeer, PeersBeyondTheLimitShareTheOverflowPeer) {
  FakeClock clock;
  MemoryNetwork net;
  auto inner = *net.CreatePort({.local = kSwitch, .rx_queue_limit = 4096});
  ImpairedPort sw(std::move(inner), clock, /*max_peers=*/3);
  std::vector<std::unique_ptr<MemoryPort>> hosts;
  for (uint32_t i = 0; i < 6; ++i) {
    hosts.push_back(*net.CreatePort({.local = {0x0a000010u + i, 4791}}));
    SendTagged(*hosts.back(), kSwitch, 1);
  }
  EXPECT_EQ(ReceiveAll(sw).size(), 6u);
  EXPECT_EQ(sw.num_peers(), 3u);
  std::optional<PeerLinkSnapshot> overflow = sw.SnapshotPeer(Ipv4Endpoint{});
  ASSERT_TRUE(overflow.has_value());
  EXPECT_EQ(overflow->rx_packets, 4u);
  EXPECT_EQ(sw.SetPeerImpairment({0x0a0000ffu, 1}, LinkDirection::kBoth, ImpairmentConfig{}).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ImpairedPortOneLink, FakeClockDelayOnBothPaths) {
  MemoryNetwork net;
  FakeClock clock;
  ImpairmentConfig delay;
  delay.delay = absl::Milliseconds(1);
  ImpairedPort a(*net.CreatePort({.local = kSwitch}), delay, {}, clock);
  ImpairedPort b(*net.CreatePort({.local = kH1}), {}, delay, clock);
  PacketBuffer* p = TaggedPacket(a, kH1, 5);
  EXPECT_EQ(a.SendBurst({&p, 1}), 1u);  // held by a's send stage
  PacketBuffer* rx[4];
  EXPECT_EQ(b.RecvBurst(rx, absl::ZeroDuration()), 0u);
  clock.Advance(absl::Milliseconds(1));
  a.Flush();  // now on the wire, into b's receive stage
  EXPECT_EQ(b.RecvBurst(rx, absl::ZeroDuration()), 0u);
  clock.Advance(absl::Milliseconds(1));
  ASSERT_EQ(b.RecvBurst(rx, absl::ZeroDuration()), 1u);
  EXPECT_EQ(Tag(rx[0]), 5u);
  PacketPool::Free(rx[0]);
}

// A loop serving several ports sleeps on their fds: a packet held back by
// a delay bounds that sleep (until it is due), one ready bounds it to zero.
TEST(ImpairedPortOneLink, SleepBoundEndsWhenAHeldPacketIsDue) {
  MemoryNetwork net;
  FakeClock clock;
  ImpairmentConfig delay;
  delay.delay = absl::Milliseconds(3);
  auto a = *net.CreatePort({.local = kSwitch});
  ImpairedPort b(*net.CreatePort({.local = kH1}), {}, delay, clock);
  EXPECT_EQ(b.SleepBound(absl::Seconds(30)), absl::Seconds(30));
  EXPECT_EQ(b.wait_fd(), -1);  // an in-memory port has none
  PacketBuffer* p = TaggedPacket(*a, kH1, 7);
  a->SendBurst({&p, 1});
  PacketBuffer* rx[4];
  EXPECT_EQ(b.RecvBurst(rx, absl::ZeroDuration()), 0u);  // now held
  EXPECT_EQ(b.SleepBound(absl::Seconds(30)), absl::Milliseconds(3));
  clock.Advance(absl::Milliseconds(2));
  EXPECT_EQ(b.SleepBound(absl::Seconds(30)), absl::Milliseconds(1));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(b.SleepBound(absl::Seconds(30)), absl::ZeroDuration());
  ASSERT_EQ(b.RecvBurst(rx, absl::ZeroDuration()), 1u);
  PacketPool::Free(rx[0]);
  EXPECT_EQ(b.SleepBound(absl::Seconds(30)), absl::Seconds(30));
}

TEST(ImpairedPortOneLink, RealTimeDelayIsHonouredByTheReceiveTimeout) {
  MemoryNetwork net;
  ImpairmentConfig delay;
  delay.delay = absl::Milliseconds(30);
  auto a = *net.CreatePort({.local = kSwitch});
  ImpairedPort b(*net.CreatePort({.local = kH1}), {}, delay, RealClock());
  PacketBuffer* p = TaggedPacket(*a, kH1, 6);
  a->SendBurst({&p, 1});
  PacketBuffer* rx[4];
  absl::Time start = absl::Now();
  ASSERT_EQ(b.RecvBurst(rx, absl::Seconds(5)), 1u);
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(29));
  EXPECT_LT(took, absl::Seconds(2));
  PacketPool::Free(rx[0]);
}

// One link is the port with one peer: every address shares the stages and
// the counters of the link (0.0.0.0:0), and its seeds stay as given.
TEST(ImpairedPortOneLink, EveryAddressSharesTheLinksStagesAndSeeds) {
  FakeClock clock;
  MemoryNetwork net;
  const ImpairmentConfig lossy = *ParseImpairment("drop=0.5,seed=9");
  ImpairedPort sw(*net.CreatePort({.local = kSwitch, .rx_queue_limit = 4096}), {}, lossy, clock);
  auto h1 = *net.CreatePort({.local = kH1});
  auto h2 = *net.CreatePort({.local = kH2});
  SendTagged(*h1, kSwitch, 64);
  SendTagged(*h2, kSwitch, 64);
  const size_t received = ReceiveAll(sw).size();
  EXPECT_EQ(sw.num_peers(), 1u);
  const PeerLinkSnapshot link = *sw.SnapshotPeer(Ipv4Endpoint{});
  EXPECT_EQ(link.rx_packets, 128u);
  EXPECT_EQ(link.receive.seed, 9u);  // not derived
  EXPECT_EQ(sw.receive_stage().counters().packets_in, 128u);
  EXPECT_EQ(sw.receive_stage().counters().dropped_random, 128u - received);
  EXPECT_GT(received, 20u);
  EXPECT_LT(received, 108u);

  // Set at run time, for the link; a peer of its own cannot be named.
  sw.SetSendImpairment(*ParseImpairment("down=1,seed=4"));
  EXPECT_TRUE(sw.send_stage().config().link_down);
  EXPECT_EQ(sw.send_stage().config().seed, 4u);
  SendTagged(sw, kH1, 3);
  EXPECT_TRUE(ReceiveAll(*h1).empty());
  EXPECT_EQ(sw.send_stage().counters().dropped_down, 3u);
  EXPECT_EQ(sw.SetPeerImpairment(kH1, LinkDirection::kBoth, ImpairmentConfig{}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(sw.num_peers(), 1u);
}

TEST(LinkDirection, Parse) {
  EXPECT_EQ(*ParseLinkDirection("send"), LinkDirection::kSend);
  EXPECT_EQ(*ParseLinkDirection("Receive"), LinkDirection::kReceive);
  EXPECT_EQ(*ParseLinkDirection("recv"), LinkDirection::kReceive);
  EXPECT_EQ(*ParseLinkDirection("both"), LinkDirection::kBoth);
  EXPECT_EQ(ParseLinkDirection("sideways").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LinkDirectionName(LinkDirection::kReceive), "receive");
}

}  // namespace
}  // namespace netfold::transport
