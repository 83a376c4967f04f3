#include "transport/dpdk/ethernet_frame.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::transport::dpdk {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

MacAddress ToMac(const std::array<uint8_t, 6>& bytes) { return MacAddress{bytes}; }

// Folds a 32-bit one's-complement accumulator to 16 bits.
uint16_t Fold(uint32_t sum) {
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

uint32_t SumWords(std::span<const uint8_t> bytes) {
  uint32_t sum = 0;
  size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) {
    sum += static_cast<uint32_t>(bytes[i] << 8 | bytes[i + 1]);
    if (sum > 0xFFFF0000u) sum = Fold(sum);
  }
  if (i < bytes.size()) sum += static_cast<uint32_t>(bytes[i] << 8);
  return sum;
}

FrameParseResult ParseArp(std::span<const uint8_t> frame, FrameView* out) {
  if (frame.size() < kArpFrameSize) return FrameParseResult::kBadArp;
  ArpWire w;
  std::memcpy(&w, frame.data() + kEthernetHeaderSize, sizeof(w));
  if (w.hardware_type.get() != 1 || w.protocol_type.get() != kEtherTypeIpv4 ||
      w.hardware_size != 6 || w.protocol_size != 4) {
    return FrameParseResult::kBadArp;
  }
  const uint16_t op = w.op.get();
  if (op != static_cast<uint16_t>(ArpOp::kRequest) && op != static_cast<uint16_t>(ArpOp::kReply)) {
    return FrameParseResult::kBadArp;
  }
  out->has_arp = true;
  out->arp.op = static_cast<ArpOp>(op);
  out->arp.sender_mac = ToMac(w.sender_mac);
  out->arp.sender_ip = w.sender_ip.get();
  out->arp.target_mac = ToMac(w.target_mac);
  out->arp.target_ip = w.target_ip.get();
  return FrameParseResult::kOk;
}

FrameParseResult ParseIpv4(std::span<const uint8_t> frame, FrameView* out) {
  constexpr size_t kOffset = kEthernetHeaderSize;
  if (frame.size() < kOffset + sizeof(Ipv4Wire)) return FrameParseResult::kBadIpv4Header;
  Ipv4Wire w;
  std::memcpy(&w, frame.data() + kOffset, sizeof(w));
  const size_t ihl = static_cast<size_t>(w.version_ihl & 0x0f) * 4;
  const uint16_t total = w.total_length.get();
  if ((w.version_ihl >> 4) != 4 || ihl < sizeof(Ipv4Wire) || total < ihl ||
      kOffset + total > frame.size()) {
    return FrameParseResult::kBadIpv4Header;
  }
  Ipv4View& v = out->ipv4;
  v.offset = kOffset;
  v.header_length = ihl;
  v.total_length = total;
  v.identification = w.identification.get();
  v.flags_fragment = w.flags_fragment.get();
  v.tos = w.tos;
  v.ttl = w.ttl;
  v.protocol = w.protocol;
  v.src = w.src.get();
  v.dst = w.dst.get();
  if (InternetChecksum(frame.subspan(kOffset, ihl)) != 0) return FrameParseResult::kBadIpv4Checksum;
  out->has_ipv4 = true;
  if ((v.flags_fragment & (kIpv4MoreFragments | kIpv4FragmentOffsetMask)) != 0) {
    return FrameParseResult::kIpv4Fragment;
  }
  if (v.protocol != kIpProtocolUdp) return FrameParseResult::kOk;

  const size_t udp_offset = kOffset + ihl;
  const size_t ip_payload = total - ihl;
  if (ip_payload < sizeof(UdpWire)) return FrameParseResult::kBadUdpLength;
  UdpWire u;
  std::memcpy(&u, frame.data() + udp_offset, sizeof(u));
  const uint16_t udp_length = u.length.get();
  if (udp_length < sizeof(UdpWire) || udp_length > ip_payload) {
    return FrameParseResult::kBadUdpLength;
  }
  out->has_udp = true;
  out->udp.offset = udp_offset;
  out->udp.src_port = u.src_port.get();
  out->udp.dst_port = u.dst_port.get();
  out->udp.length = udp_length;
  out->udp.payload_offset = udp_offset + sizeof(UdpWire);
  out->udp.payload_length = udp_length - sizeof(UdpWire);
  return FrameParseResult::kOk;
}

}  // namespace

bool MacAddress::IsBroadcast() const { return *this == kBroadcastMac; }

bool MacAddress::IsZero() const { return ToU64() == 0; }

uint64_t MacAddress::ToU64() const {
  uint64_t v = 0;
  for (uint8_t b : bytes) v = (v << 8) | b;
  return v;
}

MacAddress MacAddress::FromU64(uint64_t value) {
  MacAddress m;
  for (size_t i = 6; i-- > 0;) {
    m.bytes[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
  return m;
}

std::string MacAddress::ToString() const {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2], bytes[3],
                         bytes[4], bytes[5]);
}

absl::StatusOr<MacAddress> ParseMacAddress(std::string_view text) {
  MacAddress m;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not a MAC address (expected aa:bb:cc:dd:ee:ff)", text));
  };
  if (text.size() != 17) return bad();
  for (size_t i = 0; i < 6; ++i) {
    const int hi = HexDigit(text[3 * i]);
    const int lo = HexDigit(text[3 * i + 1]);
    if (hi < 0 || lo < 0) return bad();
    if (i < 5 && text[3 * i + 2] != ':' && text[3 * i + 2] != '-') return bad();
    m.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return m;
}

MacAddress Ipv4MulticastMac(uint32_t group_ip) {
  return MacAddress{{0x01, 0x00, 0x5e, static_cast<uint8_t>((group_ip >> 16) & 0x7f),
                     static_cast<uint8_t>((group_ip >> 8) & 0xff),
                     static_cast<uint8_t>(group_ip & 0xff)}};
}

MacAddress SwitchMacForAddress(uint32_t ip) {
  return MacAddress{{0x02, 0x6e, 0x66, static_cast<uint8_t>((ip >> 16) & 0xff),
                     static_cast<uint8_t>((ip >> 8) & 0xff), static_cast<uint8_t>(ip & 0xff)}};
}

std::string_view FrameParseResultName(FrameParseResult r) {
  switch (r) {
    case FrameParseResult::kOk: return "ok";
    case FrameParseResult::kRunt: return "runt";
    case FrameParseResult::kBadArp: return "bad_arp";
    case FrameParseResult::kBadIpv4Header: return "bad_ipv4_header";
    case FrameParseResult::kBadIpv4Checksum: return "bad_ipv4_checksum";
    case FrameParseResult::kIpv4Fragment: return "ipv4_fragment";
    case FrameParseResult::kBadUdpLength: return "bad_udp_length";
  }
  return "invalid";
}

FrameParseResult ParseFrame(std::span<const uint8_t> frame, FrameView* out) {
  *out = FrameView{};
  if (frame.size() < kEthernetHeaderSize) return FrameParseResult::kRunt;
  EthernetWire eth;
  std::memcpy(&eth, frame.data(), sizeof(eth));
  out->dst = ToMac(eth.dst);
  out->src = ToMac(eth.src);
  out->ether_type = eth.ether_type.get();
  switch (out->ether_type) {
    case kEtherTypeArp: return ParseArp(frame, out);
    case kEtherTypeIpv4: return ParseIpv4(frame, out);
    default: return FrameParseResult::kOk;
  }
}

uint16_t InternetChecksum(std::span<const uint8_t> bytes) {
  return static_cast<uint16_t>(~Fold(SumWords(bytes)) & 0xFFFF);
}

bool IsCanonicalRoceIpv4(const Ipv4View& ipv4) {
  return ipv4.header_length == sizeof(Ipv4Wire) && ipv4.identification == 0 &&
         ipv4.flags_fragment == kIpv4DontFragment;
}

void WriteEthernetHeader(const MacAddress& dst, const MacAddress& src, uint16_t ether_type,
                         uint8_t* out) {
  EthernetWire eth;
  eth.dst = dst.bytes;
  eth.src = src.bytes;
  eth.ether_type.set(ether_type);
  std::memcpy(out, &eth, sizeof(eth));
}

void WriteArpFrame(const MacAddress& eth_dst, ArpOp op, const MacAddress& sender_mac,
                   uint32_t sender_ip, const MacAddress& target_mac, uint32_t target_ip,
                   std::span<uint8_t, kArpFrameSize> out) {
  WriteEthernetHeader(eth_dst, sender_mac, kEtherTypeArp, out.data());
  ArpWire w;
  w.hardware_type.set(1);
  w.protocol_type.set(kEtherTypeIpv4);
  w.hardware_size = 6;
  w.protocol_size = 4;
  w.op.set(static_cast<uint16_t>(op));
  w.sender_mac = sender_mac.bytes;
  w.sender_ip.set(sender_ip);
  w.target_mac = target_mac.bytes;
  w.target_ip.set(target_ip);
  std::memcpy(out.data() + kEthernetHeaderSize, &w, sizeof(w));
}

bool MakeIcmpEchoReply(std::span<uint8_t> frame, const FrameView& v, const MacAddress& own_mac,
                       uint8_t ttl) {
  if (!v.has_ipv4 || v.ipv4.protocol != kIpProtocolIcmp) return false;
  const size_t icmp_offset = v.ipv4.offset + v.ipv4.header_length;
  const size_t icmp_length = v.ipv4.total_length - v.ipv4.header_length;
  if (icmp_length < sizeof(IcmpEchoWire) || icmp_offset + icmp_length > frame.size()) return false;
  uint8_t* icmp = frame.data() + icmp_offset;
  if (icmp[0] != 8 || icmp[1] != 0) return false;
  if (InternetChecksum(frame.subspan(icmp_offset, icmp_length)) != 0) return false;

  WriteEthernetHeader(v.src, own_mac, kEtherTypeIpv4, frame.data());
  uint8_t* ip = frame.data() + v.ipv4.offset;
  Ipv4Wire w;
  std::memcpy(&w, ip, sizeof(w));
  w.src.set(v.ipv4.dst);
  w.dst.set(v.ipv4.src);
  w.ttl = ttl;
  w.checksum.set(0);
  std::memcpy(ip, &w, sizeof(w));
  const uint16_t ip_sum = InternetChecksum(frame.subspan(v.ipv4.offset, v.ipv4.header_length));
  proto::StoreBigEndian<uint16_t>(ip + 10, ip_sum);

  icmp[0] = 0;  // echo reply
  icmp[2] = icmp[3] = 0;
  const uint16_t icmp_sum = InternetChecksum(frame.subspan(icmp_offset, icmp_length));
  proto::StoreBigEndian<uint16_t>(icmp + 2, icmp_sum);
  return true;
}

}  // namespace netfold::transport::dpdk
