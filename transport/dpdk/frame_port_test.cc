// FramePort over memory wires: what it terminates (ARP, ICMP echo, RoCE UDP
// with the ICRC over the real headers), what it bridges, next-hop
// resolution, multicast out of every link, per-link faults, backpressure,
// the idle policy, and RC traffic between two FramePorts.
#include "transport/dpdk/frame_port.h"

#include <time.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"
#include "transport/roce_endpoint.h"

namespace netfold::transport::dpdk {
namespace {

constexpr uint32_t kSwitchIp = 0xc61200fe;  // 198.18.0.254
constexpr uint32_t kHostIp = 0xc6120001;    // 198.18.0.1
constexpr uint32_t kHost2Ip = 0xc6120002;
constexpr Ipv4Endpoint kGroup{0xef010203, 4791};
const MacAddress kSwitchMac{{0x02, 0xaa, 0, 0, 0, 0xfe}};
const MacAddress kHostMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddress kHost2Mac{{0x02, 0, 0, 0, 0, 2}};

struct Rig {
  std::vector<MemoryFrameLink*> wires;
  std::unique_ptr<FramePort> port;
};

Rig MakeRig(size_t num_links, FramePortConfig config = {}, const Clock& clock = RealClock()) {
  Rig rig;
  std::vector<std::unique_ptr<FrameLink>> links;
  for (size_t i = 0; i < num_links; ++i) {
    auto l = std::make_unique<MemoryFrameLink>(
        "l" + std::to_string(i), MacAddress{{0x02, 0xbb, 0, 0, 0, static_cast<uint8_t>(i)}});
    rig.wires.push_back(l.get());
    links.push_back(std::move(l));
  }
  if (config.local.ip == 0) config.local = {kSwitchIp, 4791};
  if (config.mac.IsZero()) config.mac = kSwitchMac;
  auto port = FramePort::Create(config, std::move(links), clock);
  EXPECT_TRUE(port.ok()) << port.status();
  if (port.ok()) rig.port = *std::move(port);
  return rig;
}

std::vector<uint8_t> ArpFrame(const MacAddress& eth_dst, ArpOp op, const MacAddress& sender_mac,
                              uint32_t sender_ip, const MacAddress& target_mac,
                              uint32_t target_ip) {
  std::vector<uint8_t> f(kArpFrameSize);
  WriteArpFrame(eth_dst, op, sender_mac, sender_ip, target_mac, target_ip,
                std::span<uint8_t, kArpFrameSize>(f.data(), kArpFrameSize));
  return f;
}

// A RoCE UD SEND_ONLY carrying `message`, ICRC over canonical addresses.
std::vector<uint8_t> RocePayload(const proto::IcrcAddresses& addrs, std::vector<uint8_t> message) {
  proto::RocePacketSpec spec;
  spec.bth.opcode = proto::BthOpcode::kUdSendOnly;
  spec.bth.pkey = 0xffff;
  spec.bth.dest_qp = 0x100;
  spec.bth.psn = 1;
  spec.deth = proto::Deth{.qkey = 0x1234, .src_qp = 0x200};
  std::vector<uint8_t> out(proto::RocePacketSize(spec.bth.opcode, message.size()));
  auto n = proto::BuildRocePacket(spec, message, addrs, out);
  EXPECT_TRUE(n.ok()) << n.status();
  return out;
}

// Ethernet + IPv4 + UDP around `payload`. With `canonical`, the header is
// the one kernel sockets send (identification 0, DF); otherwise it has
// identification 0x1234 and no DF, and `payload`'s ICRC is recomputed over
// those real headers as a RoCE NIC would.
std::vector<uint8_t> UdpFrame(const MacAddress& dst_mac, const MacAddress& src_mac,
                              const proto::IcrcAddresses& addrs, std::vector<uint8_t> payload,
                              bool canonical = true) {
  auto headers = proto::MakeIpv4UdpHeaders(addrs, payload.size(), 64, 0);
  if (!canonical) {
    headers[4] = 0x12;
    headers[5] = 0x34;
    headers[6] = 0;  // no DF
    headers[10] = headers[11] = 0;
    const uint16_t sum = InternetChecksum(std::span<const uint8_t>(headers.data(), 20));
    proto::StoreBigEndian<uint16_t>(&headers[10], sum);
    const uint32_t icrc = proto::ComputeIcrcIpv4(
        std::span<const uint8_t, 20>(headers.data(), 20),
        std::span<const uint8_t, 8>(headers.data() + 20, 8),
        std::span<const uint8_t>(payload.data(), payload.size() - 4));
    proto::StoreIcrc(icrc, std::span<uint8_t, 4>(payload.data() + payload.size() - 4, 4));
  }
  std::vector<uint8_t> f(kEthernetHeaderSize);
  WriteEthernetHeader(dst_mac, src_mac, kEtherTypeIpv4, f.data());
  f.insert(f.end(), headers.begin(), headers.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// An L2 frame between hosts (not for the switch).
std::vector<uint8_t> HostFrame(const MacAddress& dst, const MacAddress& src, uint8_t tag) {
  std::vector<uint8_t> f(60, tag);
  WriteEthernetHeader(dst, src, 0x88b5, f.data());  // local experimental EtherType
  return f;
}

std::vector<PacketBuffer*> Receive(FramePort& port, size_t want = 1) {
  std::vector<PacketBuffer*> got;
  PacketBuffer* rx[16];
  Deadline deadline(RealClock(), absl::Seconds(2));
  while (got.size() < want && !deadline.Expired()) {
    const size_t n = port.RecvBurst(rx, absl::Milliseconds(5));
    got.insert(got.end(), rx, rx + n);
  }
  return got;
}

PacketBuffer* Packet(FramePort& port, const Ipv4Endpoint& dst, std::vector<uint8_t> bytes) {
  PacketBuffer* p = port.pool().Alloc();
  std::memcpy(p->data(), bytes.data(), bytes.size());
  p->set_len(static_cast<uint32_t>(bytes.size()));
  p->dst = dst;
  return p;
}

TEST(FramePort, RejectsBadConfigs) {
  std::vector<std::unique_ptr<FrameLink>> none;
  EXPECT_EQ(FramePort::Create({.local = {kSwitchIp, 4791}}, std::move(none)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto one = [] {
    std::vector<std::unique_ptr<FrameLink>> l;
    l.push_back(std::make_unique<MemoryFrameLink>("x", kHostMac));
    return l;
  };
  EXPECT_FALSE(FramePort::Create({}, one()).ok());  // no address
  EXPECT_FALSE(FramePort::Create({.local = {0xe0000001, 4791}}, one()).ok());
  FramePortConfig small{.local = {kSwitchIp, 4791}};
  small.pool.num_buffers = 8;
  EXPECT_FALSE(FramePort::Create(small, one()).ok());
  // The MAC defaults to one derived from the address; the port to 4791.
  auto ok = FramePort::Create({.local = {kSwitchIp, 0}}, one());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->mac().ToString(), "02:6e:66:12:00:fe");
  EXPECT_EQ((*ok)->local().port, 4791);
}

TEST(FramePort, AnswersArpForItsAddressAndFloodsTheRequest) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  rig.wires[0]->Inject(
      ArpFrame(kBroadcastMac, ArpOp::kRequest, kHostMac, kHostIp, MacAddress{}, kSwitchIp));
  rig.port->Flush();
  auto out0 = rig.wires[0]->Take();
  ASSERT_EQ(out0.size(), 1u);
  FrameView v;
  ASSERT_EQ(ParseFrame(out0[0], &v), FrameParseResult::kOk);
  EXPECT_EQ(v.dst, kHostMac);
  EXPECT_EQ(v.src, kSwitchMac);
  ASSERT_TRUE(v.has_arp);
  EXPECT_EQ(v.arp.op, ArpOp::kReply);
  EXPECT_EQ(v.arp.sender_mac, kSwitchMac);
  EXPECT_EQ(v.arp.sender_ip, kSwitchIp);
  EXPECT_EQ(v.arp.target_ip, kHostIp);
  // The broadcast also crossed the bridge, unchanged.
  auto out1 = rig.wires[1]->Take();
  ASSERT_EQ(out1.size(), 1u);
  EXPECT_EQ(out1[0],
            ArpFrame(kBroadcastMac, ArpOp::kRequest, kHostMac, kHostIp, MacAddress{}, kSwitchIp));
  EXPECT_EQ(rig.port->frame_counters().arp_requests_received, 1u);
  EXPECT_EQ(rig.port->frame_counters().arp_replies_sent, 1u);
  // A request for another address is only bridged.
  rig.wires[0]->Inject(
      ArpFrame(kBroadcastMac, ArpOp::kRequest, kHostMac, kHostIp, MacAddress{}, kHost2Ip));
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, DeliversRoceToItsAddress) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  const proto::IcrcAddresses addrs{kHostIp, kSwitchIp, 49152, 4791};
  const std::vector<uint8_t> roce = RocePayload(addrs, {1, 2, 3, 4, 5});
  std::vector<uint8_t> frame = UdpFrame(kSwitchMac, kHostMac, addrs, roce);
  frame.resize(frame.size() + 7, 0);  // Ethernet padding is not payload
  rig.wires[0]->Inject(frame);
  auto got = Receive(*rig.port);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::vector<uint8_t>(got[0]->data(), got[0]->data() + got[0]->len()), roce);
  EXPECT_EQ(got[0]->src, (Ipv4Endpoint{kHostIp, 49152}));
  EXPECT_EQ(got[0]->dst, (Ipv4Endpoint{kSwitchIp, 4791}));
  EXPECT_TRUE(proto::DecodeRocePacket(got[0]->bytes(), &addrs).ok());
  EXPECT_EQ(rig.port->counters().rx_packets, 1u);
  EXPECT_EQ(rig.port->counters().rx_bytes, roce.size());
  EXPECT_EQ(rig.port->frame_counters().rx_icrc_normalized, 0u);
  PacketPool::FreeBurst(got);
}

TEST(FramePort, TranslatesTheIcrcOfNonCanonicalHeaders) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  const proto::IcrcAddresses addrs{kHostIp, kSwitchIp, 49152, 4791};
  // A NIC-style sender: identification != 0, no DF, ICRC over those headers.
  rig.wires[0]->Inject(
      UdpFrame(kSwitchMac, kHostMac, addrs, RocePayload(addrs, {9, 9, 9}), /*canonical=*/false));
  // The same with a flipped payload bit: the ICRC stays wrong.
  std::vector<uint8_t> bad =
      UdpFrame(kSwitchMac, kHostMac, addrs, RocePayload(addrs, {7, 7, 7}), /*canonical=*/false);
  bad[kUdpFrameHeadersSize + 21] ^= 0x10;  // a payload byte
  rig.wires[0]->Inject(bad);
  auto got = Receive(*rig.port, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(proto::DecodeRocePacket(got[0]->bytes(), &addrs).ok());
  EXPECT_EQ(proto::DecodeRocePacket(got[1]->bytes(), &addrs).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(rig.port->frame_counters().rx_icrc_normalized, 1u);
  PacketPool::FreeBurst(got);
}

TEST(FramePort, DropsAndCountsWhatItDoesNotServe) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  const proto::IcrcAddresses other_port{kHostIp, kSwitchIp, 49152, 9999};
  rig.wires[0]->Inject(UdpFrame(kSwitchMac, kHostMac, other_port, std::vector<uint8_t>(20, 1)));
  std::vector<uint8_t> bad_sum = UdpFrame(kSwitchMac, kHostMac, {kHostIp, kSwitchIp, 1, 4791},
                                          std::vector<uint8_t>(20, 1));
  bad_sum[24] ^= 0xff;
  rig.wires[0]->Inject(bad_sum);
  rig.wires[0]->Inject(std::vector<uint8_t>(10, 0));  // runt
  std::vector<uint8_t> own = HostFrame(kHostMac, kSwitchMac, 1);  // our MAC as source
  rig.wires[0]->Inject(own);
  rig.port->Flush();
  PacketBuffer* rx[4];
  EXPECT_EQ(rig.port->RecvBurst(rx, absl::ZeroDuration()), 0u);
  const FramePortCounters& c = rig.port->frame_counters();
  EXPECT_EQ(c.rx_unhandled, 1u);
  EXPECT_EQ(c.ParseDrops(FrameParseResult::kBadIpv4Checksum), 1u);
  EXPECT_EQ(c.ParseDrops(FrameParseResult::kRunt), 1u);
  EXPECT_EQ(c.rx_own_source, 1u);
  EXPECT_EQ(rig.port->counters().rx_errors, 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, AnswersPing) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  std::vector<uint8_t> f = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, 0x45, 0x00, 0x00,
                            0x20, 0x00, 0x01, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 0xc6, 0x12,
                            0x00, 0x01, 0xc6, 0x12, 0x00, 0xfe, 0x08, 0x00, 0x00, 0x00, 0x00,
                            0x07, 0x00, 0x01, 'p', 'i', 'n', 'g'};
  WriteEthernetHeader(kSwitchMac, kHostMac, kEtherTypeIpv4, f.data());
  std::span<uint8_t> s(f);
  proto::StoreBigEndian<uint16_t>(&f[24], InternetChecksum(s.subspan(14, 20)));
  proto::StoreBigEndian<uint16_t>(&f[36], InternetChecksum(s.subspan(34, 12)));
  rig.wires[1]->Inject(f);
  rig.port->Flush();
  auto out = rig.wires[1]->Take();
  ASSERT_EQ(out.size(), 1u);
  FrameView v;
  ASSERT_EQ(ParseFrame(out[0], &v), FrameParseResult::kOk);
  EXPECT_EQ(v.dst, kHostMac);
  EXPECT_EQ(v.ipv4.src, kSwitchIp);
  EXPECT_EQ(out[0][34], 0);  // echo reply
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  EXPECT_EQ(rig.port->frame_counters().icmp_echo_replies, 1u);
}

TEST(FramePort, ResolvesTheNextHopThenSendsCanonicalHeaders) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  const Ipv4Endpoint host{kHostIp, 4791};
  const proto::IcrcAddresses addrs{kSwitchIp, kHostIp, 4791, 4791};
  const std::vector<uint8_t> roce = RocePayload(addrs, {4, 3, 2, 1});
  PacketBuffer* p = Packet(*rig.port, host, roce);
  ASSERT_EQ(rig.port->SendBurst({&p, 1}), 1u);
  // An ARP request out of every link, the packet held.
  for (MemoryFrameLink* w : rig.wires) {
    auto out = w->Take();
    ASSERT_EQ(out.size(), 1u);
    FrameView v;
    ASSERT_EQ(ParseFrame(out[0], &v), FrameParseResult::kOk);
    EXPECT_TRUE(v.dst.IsBroadcast());
    EXPECT_EQ(v.arp.op, ArpOp::kRequest);
    EXPECT_EQ(v.arp.target_ip, kHostIp);
    EXPECT_EQ(v.arp.sender_ip, kSwitchIp);
  }
  // The host answers on link 1: the packet goes there, and only there.
  rig.wires[1]->Inject(ArpFrame(kSwitchMac, ArpOp::kReply, kHostMac, kHostIp, kSwitchMac, kSwitchIp));
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  auto out = rig.wires[1]->Take();
  ASSERT_EQ(out.size(), 1u);
  FrameView v;
  ASSERT_EQ(ParseFrame(out[0], &v), FrameParseResult::kOk);
  EXPECT_EQ(v.dst, kHostMac);
  EXPECT_EQ(v.src, kSwitchMac);
  EXPECT_TRUE(IsCanonicalRoceIpv4(v.ipv4));
  EXPECT_EQ(v.ipv4.ttl, 64);
  EXPECT_EQ(v.udp.dst_port, 4791);
  // The ICRC over the real headers is right (what a RoCE NIC checks).
  const std::span<const uint8_t> frame(out[0]);
  proto::RocePacketView view;
  EXPECT_EQ(proto::ParseRocePacketIpv4(frame.subspan(14).first<20>(), frame.subspan(34).first<8>(),
                                       frame.subspan(42), &view),
            proto::RoceParseResult::kOk);
  EXPECT_EQ(std::vector<uint8_t>(frame.begin() + 42, frame.end()), roce);
  // Now cached: the next packet goes straight out.
  p = Packet(*rig.port, host, roce);
  ASSERT_EQ(rig.port->SendBurst({&p, 1}), 1u);
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_EQ(rig.port->frame_counters().arp_requests_sent, 1u);
  EXPECT_EQ(rig.port->frame_counters().arp_replies_received, 1u);
  EXPECT_EQ(rig.port->counters().tx_packets, 2u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, GatewayIsTheNextHopOffLink) {
  FramePortConfig config;
  config.gateway = kHost2Ip;
  Rig rig = MakeRig(1, config);
  ASSERT_TRUE(rig.port);
  PacketBuffer* p = Packet(*rig.port, {0x0a000001, 4791}, std::vector<uint8_t>(32, 0));
  rig.port->SendBurst({&p, 1});
  auto out = rig.wires[0]->Take();
  ASSERT_EQ(out.size(), 1u);
  FrameView v;
  ASSERT_EQ(ParseFrame(out[0], &v), FrameParseResult::kOk);
  EXPECT_EQ(v.arp.target_ip, kHost2Ip);
}

TEST(FramePort, UnresolvedPacketsAreDroppedAfterRetries) {
  FakeClock clock;
  FramePortConfig config;
  config.arp.retry_interval = absl::Milliseconds(100);
  config.arp.max_requests = 3;
  Rig rig = MakeRig(1, config, clock);
  ASSERT_TRUE(rig.port);
  PacketBuffer* p = Packet(*rig.port, {kHostIp, 4791}, std::vector<uint8_t>(32, 0));
  rig.port->SendBurst({&p, 1});
  for (int i = 0; i < 5; ++i) {
    clock.Advance(absl::Milliseconds(100));
    rig.port->Flush();
  }
  EXPECT_EQ(rig.wires[0]->Take().size(), 3u);  // three requests, no data
  EXPECT_EQ(rig.port->frame_counters().arp_requests_sent, 3u);
  EXPECT_EQ(rig.port->frame_counters().arp_unresolved, 1u);
  EXPECT_EQ(rig.port->counters().tx_errors, 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, BridgesLearnsAndFloods) {
  Rig rig = MakeRig(3);
  ASSERT_TRUE(rig.port);
  // A (link 0) -> B: unknown, flooded to links 1 and 2.
  const auto a_to_b = HostFrame(kHost2Mac, kHostMac, 1);
  rig.wires[0]->Inject(a_to_b);
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  EXPECT_EQ(rig.wires[1]->Take(), std::vector<std::vector<uint8_t>>{a_to_b});
  EXPECT_EQ(rig.wires[2]->Take(), std::vector<std::vector<uint8_t>>{a_to_b});
  // B answers from link 2: A is known, only link 0.
  const auto b_to_a = HostFrame(kHostMac, kHost2Mac, 2);
  rig.wires[2]->Inject(b_to_a);
  rig.port->Flush();
  EXPECT_EQ(rig.wires[0]->Take(), std::vector<std::vector<uint8_t>>{b_to_a});
  EXPECT_TRUE(rig.wires[1]->Take().empty());
  // A -> B again: only link 2.
  rig.wires[0]->Inject(a_to_b);
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[1]->Take().empty());
  EXPECT_EQ(rig.wires[2]->Take().size(), 1u);
  // Broadcast from B: everyone else.
  rig.wires[2]->Inject(HostFrame(kBroadcastMac, kHost2Mac, 3));
  rig.port->Flush();
  EXPECT_EQ(rig.wires[0]->Take().size(), 1u);
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_TRUE(rig.wires[2]->Take().empty());
  const BridgeCounters& b = rig.port->bridge_counters();
  EXPECT_EQ(b.learned, 2u);
  EXPECT_EQ(b.flooded_unknown, 1u);
  EXPECT_EQ(b.forwarded, 2u);
  EXPECT_EQ(b.flooded_group, 1u);
  EXPECT_EQ(rig.port->link_counters(0).rx_frames, 2u);
  EXPECT_EQ(rig.port->link_counters(2).tx_frames, 2u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, BridgingCanBeTurnedOff) {
  FramePortConfig config;
  config.bridge = false;
  Rig rig = MakeRig(2, config);
  ASSERT_TRUE(rig.port);
  rig.wires[0]->Inject(HostFrame(kHost2Mac, kHostMac, 1));
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 1));
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[1]->Take().empty());
  EXPECT_EQ(rig.port->frame_counters().rx_not_for_us, 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, MulticastGoesOutOfEveryLinkAndComesBackIfJoined) {
  Rig rig = MakeRig(3);
  ASSERT_TRUE(rig.port);
  ASSERT_TRUE(rig.port->JoinMulticast(kGroup).ok());
  EXPECT_EQ(rig.port->JoinMulticast(kGroup).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(rig.port->JoinMulticast({kHostIp, 4791}).code(), absl::StatusCode::kInvalidArgument);
  const proto::IcrcAddresses addrs{kSwitchIp, kGroup.ip, 4791, 4791};
  PacketBuffer* p = Packet(*rig.port, kGroup, RocePayload(addrs, {5, 5}));
  ASSERT_EQ(rig.port->SendBurst({&p, 1}), 1u);
  for (MemoryFrameLink* w : rig.wires) {
    auto out = w->Take();
    ASSERT_EQ(out.size(), 1u);
    FrameView v;
    ASSERT_EQ(ParseFrame(out[0], &v), FrameParseResult::kOk);
    EXPECT_EQ(v.dst, Ipv4MulticastMac(kGroup.ip));
    EXPECT_EQ(v.ipv4.dst, kGroup.ip);
    EXPECT_EQ(v.ipv4.ttl, 1);
  }
  auto looped = Receive(*rig.port);
  ASSERT_EQ(looped.size(), 1u);
  EXPECT_EQ(looped[0]->dst, kGroup);
  EXPECT_TRUE(proto::DecodeRocePacket(looped[0]->bytes(), &addrs).ok());
  PacketPool::FreeBurst(looped);

  // From a host on link 0: delivered (joined) and flooded to links 1, 2.
  const proto::IcrcAddresses from_host{kHostIp, kGroup.ip, 4791, 4791};
  rig.wires[0]->Inject(UdpFrame(Ipv4MulticastMac(kGroup.ip), kHostMac, from_host,
                                RocePayload(from_host, {6})));
  auto got = Receive(*rig.port);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->src, (Ipv4Endpoint{kHostIp, 4791}));
  EXPECT_EQ(got[0]->dst, kGroup);
  PacketPool::FreeBurst(got);
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_EQ(rig.wires[2]->Take().size(), 1u);

  // After leaving, the group is only bridged.
  ASSERT_TRUE(rig.port->LeaveMulticast(kGroup).ok());
  EXPECT_EQ(rig.port->LeaveMulticast(kGroup).code(), absl::StatusCode::kNotFound);
  rig.wires[0]->Inject(UdpFrame(Ipv4MulticastMac(kGroup.ip), kHostMac, from_host,
                                RocePayload(from_host, {6})));
  rig.port->Flush();
  PacketBuffer* rx[2];
  EXPECT_EQ(rig.port->RecvBurst(rx, absl::ZeroDuration()), 0u);
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, LinkFaultsApplyPerLinkAndChangeAtRunTime) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  ASSERT_TRUE(rig.port->SetLinkImpairment(0, {}, *ParseImpairment("down=1")).ok());
  EXPECT_EQ(rig.port->SetLinkImpairment(2, {}, {}).code(), absl::StatusCode::kOutOfRange);
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 1));
  rig.wires[1]->Inject(HostFrame(kBroadcastMac, kHost2Mac, 2));
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[1]->Take().empty());  // link 0's frame died on arrival
  EXPECT_EQ(rig.wires[0]->Take().size(), 1u);  // link 1's went out of link 0
  EXPECT_EQ(rig.port->receive_stage(0).counters().dropped_down, 1u);
  // Sending side: everything leaving link 1 is lost.
  ASSERT_TRUE(rig.port->SetLinkImpairment(0, {}, {}).ok());
  ASSERT_TRUE(rig.port->SetLinkImpairment(1, *ParseImpairment("drop=1"), {}).ok());
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 3));
  rig.port->Flush();
  EXPECT_TRUE(rig.wires[1]->Take().empty());
  EXPECT_EQ(rig.port->send_stage(1).counters().dropped_random, 1u);
  // Cleared: traffic flows again.
  ASSERT_TRUE(rig.port->SetLinkImpairment(1, {}, {}).ok());
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 4));
  rig.port->Flush();
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, DelayedFramesLeaveOnTime) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  ASSERT_TRUE(rig.port->SetLinkImpairment(1, *ParseImpairment("delay=30ms"), {}).ok());
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 1));
  const absl::Time start = absl::Now();
  PacketBuffer* rx[2];
  rig.port->RecvBurst(rx, absl::Milliseconds(10));
  EXPECT_TRUE(rig.wires[1]->Take().empty());
  while (rig.wires[1]->num_sent() == 0 && absl::Now() - start < absl::Seconds(2)) {
    rig.port->RecvBurst(rx, absl::Milliseconds(10));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(rig.wires[1]->Take().size(), 1u);
  EXPECT_GE(took, absl::Milliseconds(29));
  EXPECT_LT(took, absl::Milliseconds(500));
}

TEST(FramePort, StalledLinkPushesBack) {
  FramePortConfig config;
  config.tx_queue_limit = 16;
  Rig rig = MakeRig(1, config);
  ASSERT_TRUE(rig.port);
  // Teach the port where the host is.
  rig.wires[0]->Inject(ArpFrame(kBroadcastMac, ArpOp::kRequest, kHostMac, kHostIp, MacAddress{}, kSwitchIp));
  rig.port->Flush();
  rig.wires[0]->Take();
  rig.wires[0]->set_accepting(false);
  std::vector<PacketBuffer*> tx;
  for (int i = 0; i < 40; ++i) tx.push_back(Packet(*rig.port, {kHostIp, 4791}, std::vector<uint8_t>(64, 1)));
  const size_t taken = rig.port->SendBurst(tx);
  EXPECT_EQ(taken, 16u);
  PacketPool::FreeBurst(std::span<PacketBuffer* const>(tx).subspan(taken));
  rig.wires[0]->set_accepting(true);
  rig.port->Flush();
  EXPECT_EQ(rig.wires[0]->Take().size(), 16u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

TEST(FramePort, LoopbackToItsOwnAddress) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  PacketBuffer* p = Packet(*rig.port, {kSwitchIp, 4791}, {1, 2, 3});
  rig.port->SendBurst({&p, 1});
  EXPECT_TRUE(rig.wires[0]->Take().empty());
  auto got = Receive(*rig.port);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]->len(), 3u);
  EXPECT_EQ(got[0]->src, (Ipv4Endpoint{kSwitchIp, 4791}));
  PacketPool::FreeBurst(got);
}

TEST(FramePort, OversizedPacketIsRefusedAndCounted) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  PacketBuffer* p = rig.port->pool().Alloc();
  p->set_len(p->capacity() - 10);
  p->dst = {kHostIp, 4791};
  EXPECT_EQ(rig.port->SendBurst({&p, 1}), 1u);
  EXPECT_EQ(rig.port->frame_counters().tx_too_big, 1u);
  EXPECT_EQ(rig.port->pool().num_in_use(), 0u);
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(FramePort, IdleReceiveSleepsInsteadOfSpinning) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  PacketBuffer* rx[4];
  const double cpu0 = ThreadCpuSeconds();
  const absl::Time start = absl::Now();
  EXPECT_EQ(rig.port->RecvBurst(rx, absl::Milliseconds(300)), 0u);
  const absl::Duration wall = absl::Now() - start;
  const double cpu = ThreadCpuSeconds() - cpu0;
  EXPECT_GE(wall, absl::Milliseconds(299));
  EXPECT_LT(wall, absl::Seconds(2));
  EXPECT_LT(cpu, 0.1) << "idle RecvBurst used " << cpu << " s of CPU in " << wall;
  // Polls 20us, 40us, ... 1ms apart: at most about one per millisecond
  // (fewer when a loaded machine wakes the thread late).
  EXPECT_LT(rig.wires[0]->num_polls(), 400u);
  EXPECT_GT(rig.wires[0]->num_polls(), 30u);
}

TEST(FramePort, BusyPollSpins) {
  FramePortConfig config;
  config.busy_poll = true;
  Rig rig = MakeRig(1, config);
  ASSERT_TRUE(rig.port);
  PacketBuffer* rx[4];
  EXPECT_EQ(rig.port->RecvBurst(rx, absl::Milliseconds(100)), 0u);
  // Never sleeps: far more polls than the ~100 the idle policy makes (even
  // on a loaded machine).
  EXPECT_GT(rig.wires[0]->num_polls(), 2000u);
}

TEST(FramePort, ReceiveWakesUpForTrafficWithinTheSleepCap) {
  Rig rig = MakeRig(1);
  ASSERT_TRUE(rig.port);
  const proto::IcrcAddresses addrs{kHostIp, kSwitchIp, 4791, 4791};
  std::thread injector([&] {
    absl::SleepFor(absl::Milliseconds(50));
    rig.wires[0]->Inject(UdpFrame(kSwitchMac, kHostMac, addrs, RocePayload(addrs, {1})));
  });
  PacketBuffer* rx[4];
  const absl::Time start = absl::Now();
  const size_t n = rig.port->RecvBurst(rx, absl::Seconds(2));
  const absl::Duration took = absl::Now() - start;
  injector.join();
  ASSERT_EQ(n, 1u);
  PacketPool::Free(rx[0]);
  // Woken within the 1 ms sleep cap, plus scheduling slack on a busy machine.
  EXPECT_LT(took, absl::Milliseconds(50) + absl::Milliseconds(250));
}

TEST(FramePort, CountersAreListedByName) {
  Rig rig = MakeRig(2);
  ASSERT_TRUE(rig.port);
  rig.wires[0]->Inject(HostFrame(kBroadcastMac, kHostMac, 1));
  rig.port->Flush();
  std::map<std::string, uint64_t> all;
  rig.port->ForEachCounter([&](std::string_view n, uint64_t v) { all[std::string(n)] = v; });
  EXPECT_EQ(all.at("link.l0.rx_frames"), 1u);
  EXPECT_EQ(all.at("link.l1.tx_frames"), 1u);
  EXPECT_EQ(all.at("bridge.learned"), 1u);
  EXPECT_EQ(all.at("link.l0.receive.packets_in"), 1u);
  EXPECT_TRUE(all.contains("frame.arp_requests_sent"));
  EXPECT_TRUE(all.contains("frame.drop.bad_ipv4_checksum"));
  EXPECT_TRUE(all.contains("port.rx_packets"));
}

// Two switches' ports joined by a wire that the test carries frames over;
// RC messages both ways through the RoCE engine, ICRCs checked on the way.
TEST(FramePort, RcBetweenTwoFramePorts) {
  FramePortConfig ca{.local = {kHostIp, 4791}, .mac = kHostMac};
  FramePortConfig cb{.local = {kHost2Ip, 4791}, .mac = kHost2Mac};
  Rig a = MakeRig(1, ca);
  Rig b = MakeRig(1, cb);
  ASSERT_TRUE(a.port && b.port);
  MemoryFrameLink* wa = a.wires[0];
  MemoryFrameLink* wb = b.wires[0];
  RoceEndpoint ea(std::move(a.port), RealClock());
  RoceEndpoint eb(std::move(b.port), RealClock());
  auto shuttle = [&] {
    for (auto& f : wa->Take()) wb->Inject(f);
    for (auto& f : wb->Take()) wa->Inject(f);
  };
  RcQueuePair* qa = *ea.CreateRcQp();
  RcQueuePair* qb = *eb.CreateRcQp();
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.remote = eb.local();
  attrs.remote_qpn = qb->qpn();
  ASSERT_TRUE(qa->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qa->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qa->Modify(QpState::kRts, attrs).ok());
  attrs.remote = ea.local();
  attrs.remote_qpn = qa->qpn();
  ASSERT_TRUE(qb->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qb->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qb->Modify(QpState::kRts, attrs).ok());

  const int n = 50;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(qa->PostSend(std::vector<uint8_t>(1 + i * 97, static_cast<uint8_t>(i)), i).ok());
    ASSERT_TRUE(qb->PostSend(std::vector<uint8_t>(3 + i * 53, static_cast<uint8_t>(i + 1)), i).ok());
  }
  int got_a = 0, got_b = 0;
  Deadline deadline(RealClock(), absl::Seconds(10));
  while ((got_a < n || got_b < n) && !deadline.Expired()) {
    ea.Progress(absl::ZeroDuration());
    eb.Progress(absl::ZeroDuration());
    shuttle();
    RecvMessage m;
    while (qb->PeekRecv(&m)) {
      EXPECT_EQ(m.data.size(), 1u + got_b * 97);
      EXPECT_EQ(m.data[0], static_cast<uint8_t>(got_b));
      ++got_b;
      qb->PopRecv();
    }
    while (qa->PeekRecv(&m)) {
      EXPECT_EQ(m.data.size(), 3u + got_a * 53);
      EXPECT_EQ(m.data[0], static_cast<uint8_t>(got_a + 1));
      ++got_a;
      qa->PopRecv();
    }
  }
  EXPECT_EQ(got_a, n);
  EXPECT_EQ(got_b, n);
  EXPECT_EQ(ea.counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 0u);
  EXPECT_EQ(eb.counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 0u);
  EXPECT_EQ(qa->state(), QpState::kRts) << qa->error();
}

}  // namespace
}  // namespace netfold::transport::dpdk
