// Ethernet/ARP/IPv4/UDP/ICMP parsing and building on golden bytes.
#include "transport/dpdk/ethernet_frame.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "proto/icrc.h"

namespace netfold::transport::dpdk {
namespace {

const MacAddress kHostMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
const MacAddress kSwitchMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0xfe}};
constexpr uint32_t kHostIp = 0xc6120001;    // 198.18.0.1
constexpr uint32_t kSwitchIp = 0xc61200fe;  // 198.18.0.254

// An ARP request from 198.18.0.1 (02:00:00:00:00:01) for 198.18.0.254, as
// Linux sends it (no padding on a veth).
const std::vector<uint8_t> kArpRequest = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06,  // eth
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,                                      // arp
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc6, 0x12, 0x00, 0x01,                          // sender
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc6, 0x12, 0x00, 0xfe};                         // target

// A UDP datagram 198.18.0.1:49152 -> 198.18.0.254:4791 with 4 payload
// bytes, identification 0x1234, DF, TTL 64 (header checksum 0x9b75).
std::vector<uint8_t> UdpFrame() {
  return {0x02, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
          0x45, 0x00, 0x00, 0x20, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x9b, 0x75,
          0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00, 0xfe,
          0xc0, 0x00, 0x12, 0xb7, 0x00, 0x0c, 0x00, 0x00,
          0xde, 0xad, 0xbe, 0xef};
}

TEST(MacAddress, FormatsParsesAndClassifies) {
  EXPECT_EQ(kHostMac.ToString(), "02:00:00:00:00:01");
  EXPECT_EQ(*ParseMacAddress("02:00:00:00:00:01"), kHostMac);
  EXPECT_EQ(*ParseMacAddress("02-00-00-00-00-FE"), kSwitchMac);
  EXPECT_FALSE(ParseMacAddress("02:00:00:00:00").ok());
  EXPECT_FALSE(ParseMacAddress("02:00:00:00:00:0g").ok());
  EXPECT_FALSE(ParseMacAddress("02:00:00:00:00:001").ok());
  EXPECT_TRUE(kBroadcastMac.IsBroadcast());
  EXPECT_TRUE(kBroadcastMac.IsMulticast());
  EXPECT_FALSE(kHostMac.IsMulticast());
  EXPECT_TRUE(MacAddress{}.IsZero());
  EXPECT_EQ(MacAddress::FromU64(kHostMac.ToU64()), kHostMac);
}

TEST(MacAddress, Ipv4MulticastMapping) {
  // 239.255.1.2 -> 01:00:5e:7f:01:02 (the top bit of the second byte is dropped).
  EXPECT_EQ(Ipv4MulticastMac(0xefff0102).ToString(), "01:00:5e:7f:01:02");
  EXPECT_EQ(Ipv4MulticastMac(0xe0000001).ToString(), "01:00:5e:00:00:01");
  EXPECT_TRUE(Ipv4MulticastMac(0xe0000001).IsMulticast());
}

TEST(InternetChecksum, MatchesRfc1071Example) {
  // RFC 1071 section 3's example words sum to 0xddf2; the checksum is its complement.
  const std::vector<uint8_t> bytes = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(bytes), static_cast<uint16_t>(~0xddf2));
  // Odd length: the last byte is padded with zero.
  EXPECT_EQ(InternetChecksum(std::vector<uint8_t>{0x01}), static_cast<uint16_t>(~0x0100));
  // A block including its correct checksum sums to zero.
  std::vector<uint8_t> frame = UdpFrame();
  EXPECT_EQ(InternetChecksum(std::span<const uint8_t>(frame).subspan(14, 20)), 0);
}

TEST(ParseFrame, ArpRequest) {
  FrameView v;
  ASSERT_EQ(ParseFrame(kArpRequest, &v), FrameParseResult::kOk);
  EXPECT_TRUE(v.dst.IsBroadcast());
  EXPECT_EQ(v.src, kHostMac);
  EXPECT_EQ(v.ether_type, kEtherTypeArp);
  ASSERT_TRUE(v.has_arp);
  EXPECT_EQ(v.arp.op, ArpOp::kRequest);
  EXPECT_EQ(v.arp.sender_mac, kHostMac);
  EXPECT_EQ(v.arp.sender_ip, kHostIp);
  EXPECT_EQ(v.arp.target_ip, kSwitchIp);
  EXPECT_FALSE(v.has_ipv4);
}

TEST(ParseFrame, BuildsTheSameArpBytes) {
  uint8_t out[kArpFrameSize];
  WriteArpFrame(kBroadcastMac, ArpOp::kRequest, kHostMac, kHostIp, MacAddress{}, kSwitchIp, out);
  EXPECT_EQ(std::vector<uint8_t>(out, out + kArpFrameSize), kArpRequest);

  WriteArpFrame(kHostMac, ArpOp::kReply, kSwitchMac, kSwitchIp, kHostMac, kHostIp, out);
  FrameView v;
  ASSERT_EQ(ParseFrame(out, &v), FrameParseResult::kOk);
  EXPECT_EQ(v.dst, kHostMac);
  EXPECT_EQ(v.src, kSwitchMac);
  EXPECT_EQ(v.arp.op, ArpOp::kReply);
  EXPECT_EQ(v.arp.sender_ip, kSwitchIp);
  EXPECT_EQ(v.arp.target_mac, kHostMac);
}

TEST(ParseFrame, RejectsBadArp) {
  FrameView v;
  std::vector<uint8_t> short_arp(kArpRequest.begin(), kArpRequest.end() - 1);
  EXPECT_EQ(ParseFrame(short_arp, &v), FrameParseResult::kBadArp);
  std::vector<uint8_t> ipv6 = kArpRequest;
  ipv6[16] = 0x86;  // protocol type 0x86dd
  ipv6[17] = 0xdd;
  EXPECT_EQ(ParseFrame(ipv6, &v), FrameParseResult::kBadArp);
  std::vector<uint8_t> op3 = kArpRequest;
  op3[21] = 3;
  EXPECT_EQ(ParseFrame(op3, &v), FrameParseResult::kBadArp);
}

TEST(ParseFrame, Ipv4Udp) {
  const std::vector<uint8_t> frame = UdpFrame();
  FrameView v;
  ASSERT_EQ(ParseFrame(frame, &v), FrameParseResult::kOk);
  EXPECT_EQ(v.dst, kSwitchMac);
  ASSERT_TRUE(v.has_ipv4);
  EXPECT_EQ(v.ipv4.offset, 14u);
  EXPECT_EQ(v.ipv4.header_length, 20u);
  EXPECT_EQ(v.ipv4.total_length, 32);
  EXPECT_EQ(v.ipv4.identification, 0x1234);
  EXPECT_EQ(v.ipv4.flags_fragment, kIpv4DontFragment);
  EXPECT_EQ(v.ipv4.ttl, 64);
  EXPECT_EQ(v.ipv4.src, kHostIp);
  EXPECT_EQ(v.ipv4.dst, kSwitchIp);
  ASSERT_TRUE(v.has_udp);
  EXPECT_EQ(v.udp.src_port, 49152);
  EXPECT_EQ(v.udp.dst_port, 4791);
  EXPECT_EQ(v.udp.payload_offset, 42u);
  EXPECT_EQ(v.udp.payload_length, 4u);
  EXPECT_FALSE(IsCanonicalRoceIpv4(v.ipv4));  // identification != 0
}

TEST(ParseFrame, EthernetPaddingIsIgnored) {
  std::vector<uint8_t> frame = UdpFrame();
  frame.resize(60, 0);  // padded to the Ethernet minimum
  FrameView v;
  ASSERT_EQ(ParseFrame(frame, &v), FrameParseResult::kOk);
  EXPECT_EQ(v.udp.payload_length, 4u);
}

TEST(ParseFrame, ReportsEachIpv4Problem) {
  FrameView v;
  EXPECT_EQ(ParseFrame(std::vector<uint8_t>(13, 0), &v), FrameParseResult::kRunt);

  std::vector<uint8_t> f = UdpFrame();
  f.resize(40);  // shorter than the IPv4 total length
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadIpv4Header);

  f = UdpFrame();
  f[14] = 0x65;  // version 6
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadIpv4Header);

  f = UdpFrame();
  f[14] = 0x44;  // IHL 4
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadIpv4Header);

  f = UdpFrame();
  f[25] ^= 1;  // checksum
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadIpv4Checksum);

  f = UdpFrame();
  f[20] = 0x20;  // MF: a first fragment; fix the checksum
  f[24] = f[25] = 0;
  proto::StoreBigEndian<uint16_t>(&f[24], InternetChecksum(std::span<const uint8_t>(f).subspan(14, 20)));
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kIpv4Fragment);

  f = UdpFrame();
  f[39] = 0x0d;  // UDP length 13 > 12 bytes of IPv4 payload
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadUdpLength);
  f[39] = 0x07;  // < 8
  EXPECT_EQ(ParseFrame(f, &v), FrameParseResult::kBadUdpLength);
}

TEST(ParseFrame, OtherEtherTypesParseAsEthernetOnly) {
  std::vector<uint8_t> f = UdpFrame();
  f[12] = 0x86;
  f[13] = 0xdd;  // IPv6
  FrameView v;
  ASSERT_EQ(ParseFrame(f, &v), FrameParseResult::kOk);
  EXPECT_EQ(v.ether_type, 0x86dd);
  EXPECT_FALSE(v.has_ipv4);
  EXPECT_FALSE(v.has_arp);
}

TEST(ParseFrame, CanonicalHeadersFromMakeIpv4UdpHeaders) {
  // What FramePort sends: Ethernet + the proto layer's canonical IPv4/UDP.
  const proto::IcrcAddresses addrs{kSwitchIp, kHostIp, 4791, 4791};
  const auto headers = proto::MakeIpv4UdpHeaders(addrs, 16, 64, 0);
  std::vector<uint8_t> f(14 + headers.size() + 16, 0xab);
  WriteEthernetHeader(kHostMac, kSwitchMac, kEtherTypeIpv4, f.data());
  std::memcpy(f.data() + 14, headers.data(), headers.size());
  FrameView v;
  ASSERT_EQ(ParseFrame(f, &v), FrameParseResult::kOk);
  EXPECT_TRUE(IsCanonicalRoceIpv4(v.ipv4));
  EXPECT_EQ(v.ipv4.src, kSwitchIp);
  EXPECT_EQ(v.udp.payload_length, 16u);
}

TEST(IcmpEcho, ReplyInPlace) {
  // Echo request 198.18.0.1 -> 198.18.0.254, id 7, seq 1, 4 bytes of data.
  std::vector<uint8_t> f = {0x02, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x02, 0x00, 0x00, 0x00, 0x00,
                            0x01, 0x08, 0x00, 0x45, 0x00, 0x00, 0x20, 0x00, 0x01, 0x40, 0x00,
                            0x40, 0x01, 0x00, 0x00, 0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12, 0x00,
                            0xfe, 0x08, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x01, 'p', 'i',
                            'n', 'g'};
  std::span<uint8_t> s(f);
  proto::StoreBigEndian<uint16_t>(&f[24], InternetChecksum(s.subspan(14, 20)));
  proto::StoreBigEndian<uint16_t>(&f[36], InternetChecksum(s.subspan(34, 12)));
  FrameView v;
  ASSERT_EQ(ParseFrame(f, &v), FrameParseResult::kOk);
  ASSERT_TRUE(MakeIcmpEchoReply(f, v, kSwitchMac, 64));
  FrameView r;
  ASSERT_EQ(ParseFrame(f, &r), FrameParseResult::kOk);  // IPv4 checksum valid again
  EXPECT_EQ(r.dst, kHostMac);
  EXPECT_EQ(r.src, kSwitchMac);
  EXPECT_EQ(r.ipv4.src, kSwitchIp);
  EXPECT_EQ(r.ipv4.dst, kHostIp);
  EXPECT_EQ(f[34], 0);  // echo reply
  EXPECT_EQ(InternetChecksum(s.subspan(34, 12)), 0);
  EXPECT_EQ(f[42], 'p');
  // A reply is not answered again.
  EXPECT_FALSE(MakeIcmpEchoReply(f, r, kSwitchMac, 64));
}

}  // namespace
}  // namespace netfold::transport::dpdk
