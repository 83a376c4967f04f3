// The endpoint over real UDP sockets on loopback: RC through a lossy link,
// UD multicast to several receivers, and payloads a receive placer put in
// place. Split from roce_endpoint_test.cc.
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/roce_packet.h"
#include "transport/impaired_port.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::transport {
namespace {

using proto::BthOpcode;

constexpr uint16_t kPkey = 0x8123;
constexpr uint32_t kQkey = 0x11223344;

std::unique_ptr<RoceEndpoint> UdpEndpoint(const ImpairmentConfig& faults = {}) {
  UdpPortConfig config;
  config.local = {0x7f000001, 0};
  auto udp = UdpPort::Create(config);
  EXPECT_TRUE(udp.ok()) << udp.status();
  if (!udp.ok()) return nullptr;
  auto port = std::make_unique<ImpairedPort>(std::move(*udp), faults, ImpairmentConfig{},
                                             RealClock());
  return std::make_unique<RoceEndpoint>(std::move(port), RealClock());
}

TEST(RoceEndpointUdp, RcOverLoopbackWithLoss) {
  auto a = UdpEndpoint(*ParseImpairment("drop=0.05,dup=0.02,seed=11"));
  auto b = UdpEndpoint(*ParseImpairment("drop=0.05,seed=12"));
  ASSERT_TRUE(a && b);
  RcQueuePair* qa = *a->CreateRcQp();
  RcQueuePair* qb = *b->CreateRcQp();
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(2);
  attrs.remote = b->local();
  attrs.remote_qpn = qb->qpn();
  ASSERT_TRUE(qa->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qa->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qa->Modify(QpState::kRts, attrs).ok());
  attrs.remote = a->local();
  attrs.remote_qpn = qa->qpn();
  ASSERT_TRUE(qb->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qb->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qb->Modify(QpState::kRts, attrs).ok());

  const int n = 300;
  int posted = 0, received = 0;
  Deadline deadline(RealClock(), absl::Seconds(20));
  while (received < n && !deadline.Expired()) {
    while (posted < n) {
      std::vector<uint8_t> m(1 + (posted * 997) % 9000, static_cast<uint8_t>(posted));
      if (!qa->PostSend(m, posted).ok()) break;
      ++posted;
    }
    a->Progress(absl::ZeroDuration());
    b->Progress(absl::Milliseconds(1));
    RecvMessage m;
    while (qb->PeekRecv(&m)) {
      ASSERT_EQ(m.data.size(), 1u + (received * 997) % 9000);
      ASSERT_EQ(m.data[0], static_cast<uint8_t>(received));
      ++received;
      qb->PopRecv();
    }
  }
  EXPECT_EQ(received, n);
  EXPECT_EQ(qa->state(), QpState::kRts) << qa->error();
}

TEST(RoceEndpointUdp, MulticastReachesEveryReceiver) {
  auto sender = UdpEndpoint();
  ASSERT_NE(sender, nullptr);
  const Ipv4Endpoint group{0xef4f0000u | static_cast<uint32_t>(getpid() & 0xffff),
                           sender->local().port};
  std::vector<std::unique_ptr<RoceEndpoint>> receivers;
  std::vector<UdQueuePair*> qps;
  for (int i = 0; i < 5; ++i) {
    receivers.push_back(UdpEndpoint());
    ASSERT_NE(receivers.back(), nullptr);
    qps.push_back(*receivers.back()->CreateUdQp({.qkey = kQkey, .pkey = kPkey}));
    absl::Status s = receivers.back()->AttachMulticast(qps.back()->qpn(), group);
    ASSERT_TRUE(s.ok()) << s;
  }
  UdQueuePair* tx = *sender->CreateUdQp({.qkey = kQkey, .pkey = kPkey});
  for (uint8_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> m(64, i);
    ASSERT_TRUE(tx->PostSend(group, kMulticastQpn, kQkey, m).ok());
  }
  sender->Flush();
  for (size_t r = 0; r < receivers.size(); ++r) {
    int got = 0;
    Deadline deadline(RealClock(), absl::Seconds(5));
    while (got < 20 && !deadline.Expired()) {
      receivers[r]->Progress(absl::Milliseconds(10));
      UdDatagram d;
      while (qps[r]->PeekRecv(&d)) {
        EXPECT_EQ(d.data[0], got);
        EXPECT_EQ(d.dst, group);
        EXPECT_EQ(d.src_qpn, tx->qpn());
        ++got;
        qps[r]->PopRecv();
      }
    }
    EXPECT_EQ(got, 20) << "receiver " << r;
  }
}

// A receive placer that puts every payload of `len` bytes in the next
// slice of its arena, in arrival order, and claims whatever comes there.
struct ArenaPlacer : ReceivePlacer {
  std::vector<uint8_t> arena;
  uint32_t len = 0;
  size_t next = 0;  // the next slice to offer
  size_t PredictPlaces(const Ipv4Endpoint& group, std::span<ReceivePlace> out) override {
    (void)group;
    size_t n = 0;
    for (; n < out.size() && (next + n + 1) * len <= arena.size(); ++n) {
      out[n] = {.at = arena.data() + (next + n) * len,
                .len = len,
                .head = static_cast<uint32_t>(proto::RoceHeadersSize(BthOpcode::kUdSendOnly)),
                .tail = static_cast<uint32_t>(proto::RocePadCount(len) + proto::kIcrcSize),
                .id = next + n};
    }
    return n;
  }
  bool ClaimPlace(const ReceivePlace& place, std::span<const uint8_t> head) override {
    (void)head;
    next = place.id + 1;
    return true;
  }
};

// A UD queue pair that keeps placed payloads gets each datagram with its
// payload where the port's placer had it written, whole and in order, its
// ICRC checked over the pieces; one that does not, or a group with two
// queue pairs (the copy for the first reads the packet), gets it whole.
TEST(RoceEndpointUdp, PlacedPayloadsStayInTheirPlaceForAQueuePairThatKeepsThem) {
  auto sender = UdpEndpoint();
  auto receiver = UdpEndpoint();
  ASSERT_TRUE(sender && receiver);
  const Ipv4Endpoint group{0xef500000u | static_cast<uint32_t>(getpid() & 0xffff),
                           sender->local().port};
  ArenaPlacer placer;
  placer.len = 1000;
  placer.arena.assign(64 * placer.len, 0);
  receiver->port().SetReceivePlacer(&placer);
  UdQueuePair* keeper = *receiver->CreateUdQp({.qkey = kQkey, .pkey = kPkey, .keeps_placed = true});
  ASSERT_TRUE(receiver->AttachMulticast(keeper->qpn(), group).ok());
  UdQueuePair* tx = *sender->CreateUdQp({.qkey = kQkey, .pkey = kPkey});
  auto message = [](int i) {
    std::vector<uint8_t> m(1000);
    for (size_t k = 0; k < m.size(); ++k) m[k] = static_cast<uint8_t>(i * 13 + k);
    return m;
  };
  // Receives `n` datagrams on `qp`: the whole payload of each (placed
  // part put back in), and how many came placed.
  auto receive = [&](UdQueuePair* qp, int n, int* placed) {
    std::vector<std::vector<uint8_t>> got;
    Deadline deadline(RealClock(), absl::Seconds(5));
    while (static_cast<int>(got.size()) < n && !deadline.Expired()) {
      receiver->Progress(absl::Milliseconds(10));
      UdDatagram d;
      while (qp->PeekRecv(&d)) {
        std::vector<uint8_t> whole(d.data.begin(), d.data.end());
        if (!d.placed.empty()) {
          ++*placed;
          std::copy(d.placed.begin(), d.placed.end(),
                    whole.begin() + static_cast<long>(d.placed_at));
        }
        got.push_back(whole);
        qp->PopRecv();
      }
    }
    return got;
  };
  auto send = [&](int from, int n) {
    for (int i = from; i < from + n; ++i) {
      ASSERT_TRUE(tx->PostSend(group, kMulticastQpn, kQkey, message(i)).ok());
    }
    sender->Flush();
  };
  send(0, 20);
  int placed = 0;
  auto got = receive(keeper, 20, &placed);
  ASSERT_EQ(got.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[i], message(i)) << "datagram " << i;
  EXPECT_EQ(placed, 20);
  EXPECT_EQ(receiver->port().counters().rx_placed, 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(std::equal(placer.arena.begin() + i * 1000, placer.arena.begin() + (i + 1) * 1000,
                           message(i).begin()))
        << "place " << i;
  }
  // Two queue pairs on the group: both whole.
  UdQueuePair* other = *receiver->CreateUdQp({.qkey = kQkey, .pkey = kPkey});
  ASSERT_TRUE(receiver->AttachMulticast(other->qpn(), group).ok());
  send(20, 5);
  placed = 0;
  got = receive(other, 5, &placed);
  ASSERT_EQ(got.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], message(20 + i));
  auto kept = receive(keeper, 5, &placed);
  ASSERT_EQ(kept.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(kept[i], message(20 + i));
  EXPECT_EQ(placed, 0);
  EXPECT_EQ(
      receiver->counters().parse_drops[static_cast<size_t>(proto::RoceParseResult::kBadIcrc)],
      0u);
  receiver->port().SetReceivePlacer(nullptr);
}

}  // namespace
}  // namespace netfold::transport
