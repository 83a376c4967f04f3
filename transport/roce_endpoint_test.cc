// The endpoint's receive path: every malformed or foreign packet is dropped
// and counted with its reason (table-driven); UD unicast and multicast (RC
// and UD over real UDP sockets on loopback: roce_endpoint_udp_test.cc).
#include "transport/roce_endpoint.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/roce_packet.h"
#include "transport/memory_port.h"

namespace netfold::transport {
namespace {

using proto::BthOpcode;

constexpr Ipv4Endpoint kAddrA{0x0a000001, 4791};
constexpr Ipv4Endpoint kAddrB{0x0a000002, 4791};
constexpr Ipv4Endpoint kAttacker{0x0a0000ee, 4791};
constexpr Ipv4Endpoint kGroup{0xe0000042, 4791};
constexpr uint16_t kPkey = 0x8123;
constexpr uint32_t kQkey = 0x11223344;

struct Crafted {
  proto::RocePacketSpec spec;
  std::vector<uint8_t> payload;
};

Crafted RcSend(uint32_t dest_qp, uint32_t psn, size_t len = 16) {
  Crafted c;
  c.spec.bth.opcode = BthOpcode::kRcSendOnly;
  c.spec.bth.pkey = kPkey;
  c.spec.bth.dest_qp = dest_qp;
  c.spec.bth.psn = psn;
  c.spec.bth.ack_req = true;
  c.payload.assign(len, 0x42);
  return c;
}

// An endpoint A with an RC QP connected to B (an inert port we inject
// from) and a UD QP; an attacker port elsewhere on the network.
class EndpointTest : public ::testing::Test {
 public:
  void SetUp() override {
    a_ = std::make_unique<RoceEndpoint>(*net_.CreatePort({.local = kAddrA}), clock_);
    b_ = *net_.CreatePort({.local = kAddrB});
    attacker_ = *net_.CreatePort({.local = kAttacker});
    rc_ = ConnectedToB(*a_);
    ASSERT_NE(rc_, nullptr);
    ud_ = *a_->CreateUdQp({.qkey = kQkey, .pkey = kPkey});
    idle_rc_ = *a_->CreateRcQp();  // stays in RESET
  }

  // A new RC QP of `ep` in RTS toward B's QP 0x777, expecting PSN 100;
  // null (and a test failure) if a transition fails.
  static RcQueuePair* ConnectedToB(RoceEndpoint& ep) {
    RcQueuePair* qp = *ep.CreateRcQp();
    RcQpAttributes attrs;
    attrs.pkey = kPkey;
    attrs.remote = kAddrB;
    attrs.remote_qpn = 0x777;
    attrs.rq_psn = 100;
    attrs.sq_psn = 500;
    attrs.path_mtu = 1024;
    for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
      absl::Status st = qp->Modify(s, attrs);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return nullptr;
    }
    return qp;
  }

  // Sends raw bytes from `from` to `to`, then lets `at` (default A) process them.
  void Inject(MemoryPort& from, std::vector<uint8_t> bytes, Ipv4Endpoint to = kAddrA,
              RoceEndpoint* at = nullptr) {
    PacketBuffer* p = from.pool().Alloc();
    std::memcpy(p->data(), bytes.data(), bytes.size());
    p->set_len(static_cast<uint32_t>(bytes.size()));
    p->dst = to;
    from.SendBurst({&p, 1});
    (at != nullptr ? at : a_.get())->Progress(absl::ZeroDuration());
  }

  std::vector<uint8_t> Build(const Crafted& c, const Ipv4Endpoint& from,
                             const Ipv4Endpoint& to = kAddrA) {
    std::vector<uint8_t> out(8192);
    const proto::IcrcAddresses addrs{from.ip, to.ip, from.port, to.port};
    auto n = proto::BuildRocePacket(c.spec, c.payload, addrs, out);
    EXPECT_TRUE(n.ok()) << n.status();
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  // Packets B received (A's replies), parsed.
  std::vector<proto::RocePacketView> Replies() {
    std::vector<proto::RocePacketView> views;
    PacketBuffer* rx[16];
    size_t n = b_->RecvBurst(rx, absl::ZeroDuration());
    for (size_t i = 0; i < n; ++i) {
      auto v = proto::DecodeRocePacket(rx[i]->bytes(), nullptr);
      if (v.ok()) {
        replies_storage_.emplace_back(rx[i]->bytes().begin(), rx[i]->bytes().end());
        v->payload = {};
        views.push_back(*v);
      }
    }
    PacketPool::FreeBurst({rx, n});
    return views;
  }

  FakeClock clock_;
  MemoryNetwork net_;
  std::unique_ptr<RoceEndpoint> a_;
  std::unique_ptr<MemoryPort> b_;
  std::unique_ptr<MemoryPort> attacker_;
  RcQueuePair* rc_;
  UdQueuePair* ud_;
  RcQueuePair* idle_rc_;
  std::vector<std::vector<uint8_t>> replies_storage_;
};

TEST_F(EndpointTest, AcceptsAValidRcSendAndAcksIt) {
  Inject(*b_, Build(RcSend(rc_->qpn(), 100), kAddrB));
  RecvMessage m;
  ASSERT_TRUE(rc_->PeekRecv(&m));
  EXPECT_EQ(m.data.size(), 16u);
  auto replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].bth.opcode, BthOpcode::kRcAcknowledge);
  EXPECT_EQ(replies[0].bth.psn, 100u);
  EXPECT_EQ(replies[0].bth.dest_qp, 0x777u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kAck);
  EXPECT_EQ(replies[0].aeth->msn, 1u);
}

// The owner's loop is Receive, take the messages, Flush. A Flush whose
// ACK timer is due reads the socket first, so messages can reach the QPs
// after the owner took them: the next Receive must not sleep on them.
TEST_F(EndpointTest, ReceiveDoesNotWaitWhileAFlushLeftMessagesUntaken) {
  auto send_from_b = [&](uint32_t psn) {
    std::vector<uint8_t> bytes = Build(RcSend(rc_->qpn(), psn), kAddrB);
    PacketBuffer* p = b_->pool().Alloc();
    std::memcpy(p->data(), bytes.data(), bytes.size());
    p->set_len(static_cast<uint32_t>(bytes.size()));
    p->dst = kAddrA;
    ASSERT_EQ(b_->SendBurst({&p, 1}), 1u);
  };
  send_from_b(100);
  a_->Receive(absl::ZeroDuration());
  RecvMessage m;
  ASSERT_TRUE(rc_->PeekRecv(&m));
  rc_->PopRecv();
  send_from_b(101);
  a_->Flush();  // the ACK of 100 is due: reads 101 first
  ASSERT_TRUE(rc_->PeekRecv(&m)) << "Flush took in the second message";
  const absl::Time start = absl::Now();
  a_->Receive(absl::Seconds(5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "Receive slept on a message in hand";
  a_->Flush();  // reads nothing: no timer is due
  const absl::Time again = absl::Now();
  a_->Receive(absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - again, absl::Milliseconds(250)) << "an idle Receive waits";
}

// A request queued to send is not a timer: the Flush that sends it does
// not read first (on a rank that was a read finding nothing, once per
// request sent). What arrived waits for the owner's next Receive.
TEST_F(EndpointTest, AFlushThatOnlySendsRequestsDoesNotRead) {
  PacketBuffer* p = b_->pool().Alloc();
  std::vector<uint8_t> bytes = Build(RcSend(rc_->qpn(), 100), kAddrB);
  std::memcpy(p->data(), bytes.data(), bytes.size());
  p->set_len(static_cast<uint32_t>(bytes.size()));
  p->dst = kAddrA;
  ASSERT_EQ(b_->SendBurst({&p, 1}), 1u);
  ASSERT_TRUE(rc_->PostSend(std::vector<uint8_t>(8, 1), 9).ok());
  a_->Flush();
  RecvMessage m;
  EXPECT_FALSE(rc_->PeekRecv(&m)) << "Flush read although no timer was due";
  auto replies = Replies();
  ASSERT_EQ(replies.size(), 1u) << "the request went out";
  EXPECT_EQ(replies[0].bth.opcode, BthOpcode::kRcSendOnly);
  a_->Receive(absl::ZeroDuration());
  EXPECT_TRUE(rc_->PeekRecv(&m)) << "the next Receive takes it";
}

// A RoCE NIC sends from a UDP source port of its own choosing (rxe: 0xC000
// + a hash of the QPN) and listens on 4791: an RC QP must accept its peer's
// packets from any source port of the peer's address, and answer to the
// connected address.
TEST_F(EndpointTest, AcceptsThePeersPacketsFromAnySourcePortAndAnswersTheConnectedAddress) {
  const Ipv4Endpoint nic_source{kAddrB.ip, 0xC123};
  std::unique_ptr<MemoryPort> nic = *net_.CreatePort({.local = nic_source});
  Inject(*nic, Build(RcSend(rc_->qpn(), 100), nic_source));
  RecvMessage m;
  ASSERT_TRUE(rc_->PeekRecv(&m));
  EXPECT_EQ(rc_->counters().drops.Get(QpDropReason::kWrongSource), 0u);
  auto replies = Replies();  // at kAddrB, the connected address
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].bth.opcode, BthOpcode::kRcAcknowledge);
  EXPECT_EQ(replies[0].bth.psn, 100u);
}

// Issue 23, item 2: another process on the peer's machine shares its IP
// address. Once the QP has taken a packet from the peer, it is bound to that
// packet's source port: a request at the expected PSN or an ACK from another
// port of the same address is dropped as wrong_source, not delivered and not
// answered, and the peer's next packet is taken as if nothing happened.
TEST_F(EndpointTest, AConnectedQpTakesPacketsOnlyFromThePeersFirstSourcePort) {
  const Ipv4Endpoint forger{kAddrB.ip, 40000};
  std::unique_ptr<MemoryPort> forger_port = *net_.CreatePort({.local = forger});
  EXPECT_EQ(rc_->bound_source_port(), std::nullopt);
  Inject(*b_, Build(RcSend(rc_->qpn(), 100), kAddrB));
  EXPECT_EQ(rc_->bound_source_port(), kAddrB.port);
  ASSERT_EQ(Replies().size(), 1u);

  Crafted forged = RcSend(rc_->qpn(), 101);
  forged.payload.assign(16, 0xee);
  Inject(*forger_port, Build(forged, forger));
  EXPECT_EQ(rc_->counters().drops.Get(QpDropReason::kWrongSource), 1u);
  EXPECT_TRUE(Replies().empty()) << "a forged packet is not answered";

  // An ACK for what the QP sent, from the forger: not taken either.
  ASSERT_TRUE(rc_->PostSend(std::vector<uint8_t>(8, 1), 9).ok());
  a_->Flush();
  (void)Replies();
  Crafted ack;
  ack.spec.bth.opcode = BthOpcode::kRcAcknowledge;
  ack.spec.bth.pkey = kPkey;
  ack.spec.bth.dest_qp = rc_->qpn();
  ack.spec.bth.psn = 500;
  ack.spec.aeth = proto::MakeAck(1);
  Inject(*forger_port, Build(ack, forger));
  EXPECT_EQ(rc_->counters().drops.Get(QpDropReason::kWrongSource), 2u);
  EXPECT_EQ(rc_->num_send_queued(), 1u) << "the forged ACK completed nothing";

  Inject(*b_, Build(RcSend(rc_->qpn(), 101), kAddrB));
  RecvMessage m;
  ASSERT_TRUE(rc_->PeekRecv(&m));
  rc_->PopRecv();
  ASSERT_TRUE(rc_->PeekRecv(&m)) << "the peer's PSN 101 was taken";
  EXPECT_EQ(m.data[0], 0x42);
  EXPECT_EQ(rc_->counters().messages_received.load(), 2u);
}

// A NIC's QP sends from its own port (not 4791): the first packet binds the
// QP to it, and 4791 of the same address is then another sender. Back in
// RESET the binding is forgotten.
TEST_F(EndpointTest, TheBoundSourcePortIsTheFirstOneSeenAndResetForgetsIt) {
  const Ipv4Endpoint nic_source{kAddrB.ip, 0xC123};
  std::unique_ptr<MemoryPort> nic = *net_.CreatePort({.local = nic_source});
  Inject(*nic, Build(RcSend(rc_->qpn(), 100), nic_source));
  Inject(*nic, Build(RcSend(rc_->qpn(), 101), nic_source));
  EXPECT_EQ(rc_->counters().messages_received.load(), 2u);
  EXPECT_EQ(rc_->bound_source_port(), 0xC123);
  Inject(*b_, Build(RcSend(rc_->qpn(), 102), kAddrB));
  EXPECT_EQ(rc_->counters().messages_received.load(), 2u);
  EXPECT_EQ(rc_->counters().drops.Get(QpDropReason::kWrongSource), 1u);
  // A packet the QP does not take (a duplicate) binds nothing.
  RcQueuePair* fresh = ConnectedToB(*a_);
  ASSERT_NE(fresh, nullptr);
  Inject(*nic, Build(RcSend(fresh->qpn(), 99), nic_source));
  EXPECT_EQ(fresh->bound_source_port(), std::nullopt);
  ASSERT_TRUE(rc_->Modify(QpState::kReset, {}).ok());
  EXPECT_EQ(rc_->bound_source_port(), std::nullopt);
}

// Replaces the ICRC of a packet from B to A by the one a NIC computes over
// its real header, with IPv4 identification `id`.
void StoreNicIcrc(std::vector<uint8_t>& packet, uint16_t id) {
  const proto::IcrcAddresses addrs{kAddrB.ip, kAddrA.ip, kAddrB.port, kAddrA.port};
  auto headers = proto::MakeIpv4UdpHeaders(addrs, packet.size(), 64, 0);
  headers[4] = static_cast<uint8_t>(id >> 8);
  headers[5] = static_cast<uint8_t>(id);
  const std::span<const uint8_t> h(headers);
  const std::span<const uint8_t> payload =
      std::span<const uint8_t>(packet).first(packet.size() - proto::kIcrcSize);
  proto::StoreIcrc(
      proto::ComputeIcrcIpv4(h.first<proto::kIpv4HeaderSize>(),
                             h.subspan<proto::kIpv4HeaderSize, proto::kUdpHeaderSize>(), payload),
      std::span<uint8_t>(packet).last<proto::kIcrcSize>());
}

// A NIC's packet with a non-zero IPv4 identification (rdma_rxe picks one),
// received through a socket that shows no IP header: dropped as bad_icrc
// unless the endpoint solves for the identification, which then accepts it
// and counts it; a corrupted one stays dropped.
TEST_F(EndpointTest, SolvesTheIpIdentificationOfANicsPacketOnlyWhenConfigured) {
  std::vector<uint8_t> packet = Build(RcSend(rc_->qpn(), 100), kAddrB);
  StoreNicIcrc(packet, 0x5e21);
  Inject(*b_, packet);
  RecvMessage m;
  EXPECT_FALSE(rc_->PeekRecv(&m));
  EXPECT_EQ(a_->counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 1u);

  // The same kind of packet at an endpoint configured to solve.
  MemoryNetwork net;
  RoceEndpoint solving(*net.CreatePort({.local = kAddrA}), clock_,
                       RoceEndpointConfig{.solve_ip_identification = true});
  std::unique_ptr<MemoryPort> peer = *net.CreatePort({.local = kAddrB});
  RcQueuePair* qp = ConnectedToB(solving);
  ASSERT_NE(qp, nullptr);
  std::vector<uint8_t> ours = Build(RcSend(qp->qpn(), 100), kAddrB);
  StoreNicIcrc(ours, 0x5e21);
  std::vector<uint8_t> corrupted = ours;
  corrupted[proto::kBthSize + 3] ^= 0x10;  // a payload bit
  Inject(*peer, corrupted, kAddrA, &solving);
  EXPECT_FALSE(qp->PeekRecv(&m));
  EXPECT_EQ(solving.counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 1u);
  Inject(*peer, ours, kAddrA, &solving);
  ASSERT_TRUE(qp->PeekRecv(&m));
  EXPECT_EQ(m.data.size(), 16u);
  EXPECT_EQ(solving.counters().ip_identification_solved.load(), 1u);
}

struct DropCase {
  std::string name;
  std::function<std::vector<uint8_t>(EndpointTest&)> make;
  bool from_attacker;
  // Exactly one of these names the expected counter.
  std::optional<proto::RoceParseResult> parse_result;
  std::optional<QpDropReason> endpoint_reason;
  std::optional<QpDropReason> rc_reason;
  std::optional<QpDropReason> ud_reason;
  std::optional<QpDropReason> idle_reason;
};

class EndpointDropTest : public EndpointTest, public ::testing::WithParamInterface<DropCase> {};

TEST_P(EndpointDropTest, DropsAndCountsWithTheReason) {
  const DropCase& c = GetParam();
  std::vector<uint8_t> bytes = c.make(*this);
  Inject(c.from_attacker ? *attacker_ : *b_, bytes);
  if (c.parse_result) {
    EXPECT_EQ(a_->counters().ParseDrops(*c.parse_result), 1u) << c.name;
  }
  if (c.endpoint_reason) {
    EXPECT_EQ(a_->counters().drops.Get(*c.endpoint_reason), 1u) << c.name;
  }
  if (c.rc_reason) {
    EXPECT_EQ(rc_->counters().drops.Get(*c.rc_reason), 1u) << c.name;
  }
  if (c.ud_reason) {
    EXPECT_EQ(ud_->counters().drops.Get(*c.ud_reason), 1u) << c.name;
  }
  if (c.idle_reason) {
    EXPECT_EQ(idle_rc_->counters().drops.Get(*c.idle_reason), 1u) << c.name;
  }
  // Nothing was delivered.
  RecvMessage m;
  EXPECT_FALSE(rc_->PeekRecv(&m)) << c.name;
  UdDatagram d;
  EXPECT_FALSE(ud_->PeekRecv(&d)) << c.name;
  // Exactly one drop was counted in total.
  uint64_t total = a_->counters().drops.Total() + rc_->counters().drops.Total() +
                   ud_->counters().drops.Total() + idle_rc_->counters().drops.Total();
  for (size_t r = 0; r < proto::kNumRoceParseResults; ++r) {
    total += a_->counters().parse_drops[r].load();
  }
  EXPECT_EQ(total, 1u) << c.name;
}

std::vector<uint8_t> Rewrite(std::vector<uint8_t> bytes, size_t offset, uint8_t value,
                             const Ipv4Endpoint& from) {
  bytes[offset] = value;
  const proto::IcrcAddresses addrs{from.ip, kAddrA.ip, from.port, kAddrA.port};
  EXPECT_TRUE(proto::RewriteIcrc(addrs, bytes).ok());
  return bytes;
}

INSTANTIATE_TEST_SUITE_P(
    Table, EndpointDropTest,
    ::testing::Values(
        DropCase{"truncated", [](EndpointTest&) { return std::vector<uint8_t>(5, 0); }, false,
                 proto::RoceParseResult::kTruncated},
        DropCase{"bad_icrc",
                 [](EndpointTest& t) {
                   auto b = t.Build(RcSend(t.rc_->qpn(), 100), kAddrB);
                   b[20] ^= 0x01;
                   return b;
                 },
                 false, proto::RoceParseResult::kBadIcrc},
        DropCase{"icrc_of_another_source",
                 [](EndpointTest& t) { return t.Build(RcSend(t.rc_->qpn(), 100), kAddrB); }, true,
                 proto::RoceParseResult::kBadIcrc},
        // An RDMA WRITE to no QP of ours, and a UC SEND (no UC here): not
        // answered. (An RDMA WRITE to an RC QP is counted there: see below.)
        DropCase{"unknown_opcode_rdma_write_to_no_qp",
                 [](EndpointTest& t) {
                   return Rewrite(t.Build(RcSend(0x999, 100), kAddrB), 0, 0x0a, kAddrB);
                 },
                 false, proto::RoceParseResult::kUnknownOpcode},
        DropCase{"unknown_opcode_uc_send",
                 [](EndpointTest& t) {
                   return Rewrite(t.Build(RcSend(t.rc_->qpn(), 100), kAddrB), 0, 0x24, kAddrB);
                 },
                 false, proto::RoceParseResult::kUnknownOpcode},
        DropCase{"bad_transport_version",
                 [](EndpointTest& t) {
                   auto b = t.Build(RcSend(t.rc_->qpn(), 100), kAddrB);
                   return Rewrite(b, 1, static_cast<uint8_t>(b[1] | 0x01), kAddrB);
                 },
                 false, proto::RoceParseResult::kBadTransportVersion},
        DropCase{"unknown_qp",
                 [](EndpointTest& t) { return t.Build(RcSend(0x999, 100), kAddrB); }, false,
                 std::nullopt, QpDropReason::kUnknownQp},
        DropCase{"multicast_nobody_attached",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(kMulticastQpn, 0);
                   c.spec.bth.opcode = BthOpcode::kUdSendOnly;
                   c.spec.bth.ack_req = false;
                   c.spec.deth = proto::Deth{kQkey, 0x55};
                   return t.Build(c, kAddrB);
                 },
                 false, std::nullopt, QpDropReason::kUnknownQp},
        DropCase{"wrong_pkey",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(t.rc_->qpn(), 100);
                   c.spec.bth.pkey = 0x8124;
                   return t.Build(c, kAddrB);
                 },
                 false, std::nullopt, std::nullopt, QpDropReason::kWrongPkey},
        DropCase{"wrong_source",
                 [](EndpointTest& t) { return t.Build(RcSend(t.rc_->qpn(), 100), kAttacker); },
                 true, std::nullopt, std::nullopt, QpDropReason::kWrongSource},
        DropCase{"ud_opcode_to_rc_qp",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(t.rc_->qpn(), 100);
                   c.spec.bth.opcode = BthOpcode::kUdSendOnly;
                   c.spec.deth = proto::Deth{kQkey, 0x55};
                   return t.Build(c, kAddrB);
                 },
                 false, std::nullopt, std::nullopt, QpDropReason::kWrongTransport},
        DropCase{"rc_opcode_to_ud_qp",
                 [](EndpointTest& t) { return t.Build(RcSend(t.ud_->qpn(), 100), kAddrB); }, false,
                 std::nullopt, std::nullopt, std::nullopt, QpDropReason::kWrongTransport},
        DropCase{"wrong_qkey",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(t.ud_->qpn(), 0);
                   c.spec.bth.opcode = BthOpcode::kUdSendOnly;
                   c.spec.deth = proto::Deth{kQkey + 1, 0x55};
                   return t.Build(c, kAttacker);
                 },
                 true, std::nullopt, std::nullopt, std::nullopt, QpDropReason::kWrongQkey},
        DropCase{"ud_wrong_pkey",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(t.ud_->qpn(), 0);
                   c.spec.bth.opcode = BthOpcode::kUdSendOnly;
                   c.spec.bth.pkey = 0x8999;  // another partition
                   c.spec.deth = proto::Deth{kQkey, 0x55};
                   return t.Build(c, kAttacker);
                 },
                 true, std::nullopt, std::nullopt, std::nullopt, QpDropReason::kWrongPkey},
        DropCase{"qp_in_reset",
                 [](EndpointTest& t) { return t.Build(RcSend(t.idle_rc_->qpn(), 0), kAddrB); },
                 false, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                 QpDropReason::kBadState},
        DropCase{"psn_ahead",
                 [](EndpointTest& t) { return t.Build(RcSend(t.rc_->qpn(), 105), kAddrB); },
                 false, std::nullopt, std::nullopt, QpDropReason::kOutOfSequence},
        DropCase{"psn_behind",
                 [](EndpointTest& t) { return t.Build(RcSend(t.rc_->qpn(), 99), kAddrB); }, false,
                 std::nullopt, std::nullopt, QpDropReason::kDuplicate},
        DropCase{"ack_for_unsent_psn",
                 [](EndpointTest& t) {
                   Crafted c;
                   c.spec.bth.opcode = BthOpcode::kRcAcknowledge;
                   c.spec.bth.pkey = kPkey;
                   c.spec.bth.dest_qp = t.rc_->qpn();
                   c.spec.bth.psn = 900;
                   c.spec.aeth = proto::MakeAck(1);
                   return t.Build(c, kAddrB);
                 },
                 false, std::nullopt, std::nullopt, QpDropReason::kUnexpectedAck},
        DropCase{"payload_over_mtu",
                 [](EndpointTest& t) { return t.Build(RcSend(t.rc_->qpn(), 100, 1028), kAddrB); },
                 false, std::nullopt, std::nullopt, QpDropReason::kBadLength},
        DropCase{"middle_without_first",
                 [](EndpointTest& t) {
                   Crafted c = RcSend(t.rc_->qpn(), 100, 1024);
                   c.spec.bth.opcode = BthOpcode::kRcSendMiddle;
                   return t.Build(c, kAddrB);
                 },
                 false, std::nullopt, std::nullopt, QpDropReason::kBadOpcodeSequence}),
    [](const ::testing::TestParamInfo<DropCase>& info) { return info.param.name; });

TEST_F(EndpointTest, OutOfSequenceGetsOneNakUntilTheGapIsFilled) {
  Inject(*b_, Build(RcSend(rc_->qpn(), 102), kAddrB));
  Inject(*b_, Build(RcSend(rc_->qpn(), 103), kAddrB));
  auto replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kNak);
  EXPECT_EQ(replies[0].bth.psn, 100u) << "the NAK carries the expected PSN";
  Inject(*b_, Build(RcSend(rc_->qpn(), 100), kAddrB));
  replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kAck);
  Inject(*b_, Build(RcSend(rc_->qpn(), 102), kAddrB));  // a new gap: a new NAK
  replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kNak);
  EXPECT_EQ(replies[0].bth.psn, 101u);
}

TEST_F(EndpointTest, InvalidRequestIsNakedAndErrorsTheQp) {
  Crafted c = RcSend(rc_->qpn(), 100, 1024);
  c.spec.bth.opcode = BthOpcode::kRcSendLast;
  Inject(*b_, Build(c, kAddrB));
  auto replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kNak);
  EXPECT_EQ(proto::GetAethValue(*replies[0].aeth),
            static_cast<uint8_t>(proto::NakCode::kInvalidRequest));
  EXPECT_EQ(rc_->state(), QpState::kError);
  EXPECT_EQ(rc_->error().code(), absl::StatusCode::kDataLoss);
}

// Issue 23, item 11: an RDMA WRITE, READ or atomic (netfold implements
// SEND only) is dropped and counted on the QP, at the expected PSN or any
// other: no answer, the QP stays in RTS and still expects that PSN (a NAK
// invalid request would put it in ERROR and revoke the job's groups).
TEST_F(EndpointTest, UnsupportedRequestsAreDroppedAndCountedAndTheQpStaysUp) {
  int n = 0;
  for (uint8_t opcode : {0x0a, 0x0c, 0x13}) {
    for (uint32_t psn : {101u, 100u, 99u}) {
      Inject(*b_, Rewrite(Build(RcSend(rc_->qpn(), psn), kAddrB), 0, opcode, kAddrB));
      ++n;
      EXPECT_TRUE(Replies().empty()) << int{opcode} << " at PSN " << psn;
      EXPECT_EQ(rc_->state(), QpState::kRts);
      EXPECT_EQ(rc_->counters().drops.Get(QpDropReason::kUnsupportedOpcode),
                static_cast<uint64_t>(n));
    }
  }
  EXPECT_EQ(a_->counters().ParseDrops(proto::RoceParseResult::kUnknownOpcode), 0u);
  Inject(*b_, Build(RcSend(rc_->qpn(), 100), kAddrB));
  RecvMessage m;
  EXPECT_TRUE(rc_->PeekRecv(&m)) << "PSN 100 is still the one expected";
  auto replies = Replies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(proto::GetAethType(*replies[0].aeth), proto::AethType::kAck);
}

// An ACK of PSN 500 to `qpn` (a QP of A's), as a peer sends it.
Crafted AckTo(uint32_t qpn) {
  Crafted ack;
  ack.spec.bth.opcode = BthOpcode::kRcAcknowledge;
  ack.spec.bth.pkey = kPkey;
  ack.spec.bth.dest_qp = qpn;
  ack.spec.bth.psn = 500;
  ack.spec.aeth = proto::MakeAck(1);
  return ack;
}

// The peer of a QP destroyed at the end of a job may still send it the ACK
// of a last message: discarded, counted as late, not as unknown_qp. From
// anyone else, anything but an ACK, to a QPN never used, or after
// kLateAfterDestroyNs, it is a drop as before.
TEST_F(EndpointTest, AnAckFromTheLatePeerOfADestroyedQpIsNotADrop) {
  const uint32_t qpn = rc_->qpn();
  ASSERT_TRUE(a_->DestroyQp(qpn).ok());
  Crafted ack = AckTo(qpn);
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().late_for_destroyed_qp, 1u);
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 0u);
  Inject(*attacker_, Build(ack, kAttacker));  // not the QP's peer
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 1u);
  Inject(*b_, Build(RcSend(qpn, 100), kAddrB));  // a request: the peer's loss, a drop
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 2u);
  ack.spec.bth.dest_qp = 0x5555;  // no QP ever had it
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 3u);
  ack.spec.bth.dest_qp = qpn;
  clock_.Advance(absl::Nanoseconds(kLateAfterDestroyNs));
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 4u);
  EXPECT_EQ(a_->counters().late_for_destroyed_qp, 1u);
}

// A RoCE NIC sends from a port of its own choosing, not the one it listens
// on (the QP's remote): the late ACK is known by the address and the port
// the QP had bound (RcQueuePair::Admits), not by the remote's port.
TEST_F(EndpointTest, ALateAckIsKnownByThePortItsQpBound) {
  const Ipv4Endpoint nic_source{kAddrB.ip, 40001};
  std::unique_ptr<MemoryPort> nic = *net_.CreatePort({.local = nic_source});
  const Ipv4Endpoint other_source{kAddrB.ip, 40002};
  std::unique_ptr<MemoryPort> other = *net_.CreatePort({.local = other_source});
  RcQueuePair* qp = ConnectedToB(*a_);
  ASSERT_NE(qp, nullptr);
  Inject(*nic, Build(RcSend(qp->qpn(), 100), nic_source));  // binds port 40001
  ASSERT_EQ(qp->bound_source_port(), std::optional<uint16_t>(40001));
  const uint32_t qpn = qp->qpn();
  ASSERT_TRUE(a_->DestroyQp(qpn).ok());
  Crafted ack = AckTo(qpn);
  Inject(*nic, Build(ack, nic_source));
  EXPECT_EQ(a_->counters().late_for_destroyed_qp, 1u);
  Inject(*other, Build(ack, other_source));  // the same host, another port
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 1u);
}

// Only the last kMaxDestroyedRemembered destroyed QPs are known; a QPN
// destroyed, created again and destroyed again is known by its last
// destruction, whatever the clock says (a fake one does not move here).
TEST_F(EndpointTest, TheLastDestroyedQpsAreRememberedAndAReusedQpnByItsLast) {
  Crafted ack = AckTo(0);
  const uint32_t reused = 0x4242;
  auto connect_with_qpn = [&](uint32_t qpn) {
    absl::StatusOr<RcQueuePair*> qp = a_->CreateRcQpWithQpn(qpn);
    ASSERT_TRUE(qp.ok()) << qp.status();
    RcQpAttributes attrs;
    attrs.pkey = kPkey;
    attrs.remote = kAddrB;
    attrs.remote_qpn = 0x777;
    for (QpState st : {QpState::kInit, QpState::kRtr}) ASSERT_TRUE((*qp)->Modify(st, attrs).ok());
  };
  connect_with_qpn(reused);
  ASSERT_TRUE(a_->DestroyQp(reused).ok());
  connect_with_qpn(reused);
  ASSERT_TRUE(a_->DestroyQp(reused).ok());
  std::vector<uint32_t> qpns;
  for (size_t i = 0; i + 1 < kMaxDestroyedRemembered; ++i) {
    RcQueuePair* qp = ConnectedToB(*a_);
    ASSERT_NE(qp, nullptr);
    qpns.push_back(qp->qpn());
  }
  for (uint32_t q : qpns) ASSERT_TRUE(a_->DestroyQp(q).ok());
  // The reused QPN's first destruction has just been forgotten, its
  // second not: still known.
  ack.spec.bth.dest_qp = reused;
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().late_for_destroyed_qp, 1u);
  // One more destruction forgets it.
  RcQueuePair* one_more = ConnectedToB(*a_);
  ASSERT_NE(one_more, nullptr);
  const uint32_t last = one_more->qpn();
  ASSERT_TRUE(a_->DestroyQp(last).ok());
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().drops.Get(QpDropReason::kUnknownQp), 1u);
  ack.spec.bth.dest_qp = qpns.back();
  Inject(*b_, Build(ack, kAddrB));
  EXPECT_EQ(a_->counters().late_for_destroyed_qp, 2u);
}

TEST_F(EndpointTest, UdUnicastAndMulticastDelivery) {
  ASSERT_TRUE(a_->AttachMulticast(ud_->qpn(), kGroup).ok());
  EXPECT_EQ(a_->AttachMulticast(ud_->qpn(), kGroup).code(), absl::StatusCode::kAlreadyExists);
  UdQueuePair* second = *a_->CreateUdQp({.qkey = kQkey, .pkey = kPkey});
  ASSERT_TRUE(a_->AttachMulticast(second->qpn(), kGroup).ok());

  Crafted c = RcSend(ud_->qpn(), 0, 33);
  c.spec.bth.opcode = BthOpcode::kUdSendOnlyWithImmediate;
  c.spec.deth = proto::Deth{kQkey, 0x55};
  c.spec.imm = 0xfeed;
  Inject(*attacker_, Build(c, kAttacker));
  UdDatagram d;
  ASSERT_TRUE(ud_->PeekRecv(&d));
  EXPECT_EQ(d.src, kAttacker);
  EXPECT_EQ(d.src_qpn, 0x55u);
  EXPECT_EQ(d.imm, 0xfeedu);
  EXPECT_EQ(d.data.size(), 33u);
  ud_->PopRecv();

  c.spec.bth.dest_qp = kMulticastQpn;
  Inject(*attacker_, Build(c, kAttacker, kGroup), kGroup);
  ASSERT_TRUE(ud_->PeekRecv(&d));
  EXPECT_EQ(d.dst, kGroup);
  ASSERT_TRUE(second->PeekRecv(&d));
  EXPECT_EQ(d.data.size(), 33u);
  ud_->PopRecv();
  second->PopRecv();

  ASSERT_TRUE(a_->DestroyQp(second->qpn()).ok());
  ASSERT_TRUE(a_->DetachMulticast(ud_->qpn(), kGroup).ok());
  EXPECT_EQ(a_->DetachMulticast(ud_->qpn(), kGroup).code(), absl::StatusCode::kNotFound);
  Inject(*attacker_, Build(c, kAttacker, kGroup), kGroup);
  EXPECT_FALSE(ud_->PeekRecv(&d));
  EXPECT_EQ(a_->DestroyQp(0xabcdef).code(), absl::StatusCode::kNotFound);
}

// Issue 23, item 1: the P_Key and Q_Key of a group's results travel in
// clear and anyone may join its multicast address. A UD QP that filters
// sources takes results for a group only from the address and port named
// for it (the group root switch); the same keys from anyone else, or from
// another port of the root's own address, are dropped as wrong_source.
TEST_F(EndpointTest, AFilteringUdQpTakesAGroupsResultsOnlyFromItsNamedSource) {
  UdQueuePair* ud = *a_->CreateUdQp({.qkey = kQkey, .pkey = kPkey, .filter_sources = true});
  ASSERT_TRUE(a_->AttachMulticast(ud->qpn(), kGroup).ok());
  ud->AllowSource(kGroup, kAddrB);
  const Ipv4Endpoint same_host{kAddrB.ip, 40001};
  std::unique_ptr<MemoryPort> neighbour = *net_.CreatePort({.local = same_host});
  Crafted c = RcSend(kMulticastQpn, 0, 24);
  c.spec.bth.opcode = BthOpcode::kUdSendOnly;
  c.spec.bth.ack_req = false;
  c.spec.deth = proto::Deth{kQkey, 0x55};

  Inject(*attacker_, Build(c, kAttacker, kGroup), kGroup);
  Inject(*neighbour, Build(c, same_host, kGroup), kGroup);
  UdDatagram d;
  EXPECT_FALSE(ud->PeekRecv(&d));
  EXPECT_EQ(ud->counters().drops.Get(QpDropReason::kWrongSource), 2u);

  Inject(*b_, Build(c, kAddrB, kGroup), kGroup);
  ASSERT_TRUE(ud->PeekRecv(&d));
  EXPECT_EQ(d.src, kAddrB);
  ud->PopRecv();

  // Unicast to the QP: no source was named for our own address.
  c.spec.bth.dest_qp = ud->qpn();
  Inject(*b_, Build(c, kAddrB));
  EXPECT_FALSE(ud->PeekRecv(&d));
  EXPECT_EQ(ud->counters().drops.Get(QpDropReason::kWrongSource), 3u);

  // Forgotten: the group's results are dropped again; a QP that does not
  // filter (the default) still takes anyone's.
  ud->ForgetSource(kGroup);
  c.spec.bth.dest_qp = kMulticastQpn;
  Inject(*b_, Build(c, kAddrB, kGroup), kGroup);
  EXPECT_FALSE(ud->PeekRecv(&d));
  EXPECT_EQ(ud->counters().drops.Get(QpDropReason::kWrongSource), 4u);
  ASSERT_TRUE(a_->AttachMulticast(ud_->qpn(), kGroup).ok());
  Inject(*attacker_, Build(c, kAttacker, kGroup), kGroup);
  EXPECT_TRUE(ud_->PeekRecv(&d));
}

TEST_F(EndpointTest, UdPostSendValidatesAndBuildsADatagram) {
  std::vector<uint8_t> payload(100, 7);
  EXPECT_EQ(ud_->PostSend(kGroup, 0x55, kQkey, payload).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ud_->PostSend(kAddrB, kMulticastQpn, kQkey, payload).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> big(5000);
  EXPECT_EQ(ud_->PostSend(kAddrB, 0x55, kQkey, big).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ud_->PostSend(kAddrB, 0x55, kQkey, payload).ok());
  a_->Flush();
  PacketBuffer* rx[2];
  ASSERT_EQ(b_->RecvBurst(rx, absl::ZeroDuration()), 1u);
  const proto::IcrcAddresses addrs{kAddrA.ip, kAddrB.ip, kAddrA.port, kAddrB.port};
  auto v = proto::DecodeRocePacket(rx[0]->bytes(), &addrs);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->bth.opcode, BthOpcode::kUdSendOnly);
  EXPECT_EQ(v->deth->qkey, kQkey);
  EXPECT_EQ(v->deth->src_qp, ud_->qpn());
  EXPECT_EQ(v->payload.size(), 100u);
  PacketPool::Free(rx[0]);
}

}  // namespace
}  // namespace netfold::transport
