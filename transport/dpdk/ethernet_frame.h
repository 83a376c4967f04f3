// Ethernet, ARP, IPv4, UDP and ICMP echo as they sit in a whole frame: the
// wire structs and the bounds-checked parsers and builders the frame-level
// backends (FramePort over DPDK) use. Pure functions, no DPDK.
//
//   FrameView v;
//   FrameParseResult r = ParseFrame(frame_bytes, &v);
//   if (r == FrameParseResult::kOk && v.has_udp && v.udp.dst_port == 4791) {
//     std::span<const uint8_t> roce = frame_bytes.subspan(v.udp.payload_offset,
//                                                         v.udp.payload_length);
//   }
//
//   uint8_t arp[kArpFrameSize];
//   WriteArpFrame(kBroadcastMac, ArpOp::kRequest, my_mac, my_ip, MacAddress{}, peer_ip, arp);
//
// Frames are untrusted: parsers never read outside their input and report
// why a frame is unusable (each reason is a counted drop in FramePort). All
// functions are thread-safe and allocate nothing (ToString/Parse* of text
// excepted).
#ifndef NETFOLD_TRANSPORT_DPDK_ETHERNET_FRAME_H_
#define NETFOLD_TRANSPORT_DPDK_ETHERNET_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/big_endian.h"

namespace netfold::transport::dpdk {

// A 48-bit IEEE MAC address, bytes in wire order.
struct MacAddress {
  std::array<uint8_t, 6> bytes{};

  // Group bit (I/G) set: multicast, including broadcast.
  bool IsMulticast() const { return (bytes[0] & 1) != 0; }
  bool IsBroadcast() const;
  bool IsZero() const;
  // The address as a number (first byte most significant), for hashing.
  uint64_t ToU64() const;
  static MacAddress FromU64(uint64_t value);
  // "02:00:00:00:00:01".
  std::string ToString() const;

  friend bool operator==(const MacAddress&, const MacAddress&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const MacAddress& m) {
    return H::combine(std::move(h), m.ToU64());
  }
};

inline constexpr MacAddress kBroadcastMac{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

// "aa:bb:cc:dd:ee:ff" (or with '-'), hex digits in either case.
// InvalidArgument otherwise.
absl::StatusOr<MacAddress> ParseMacAddress(std::string_view text);

// The MAC an IPv4 multicast group maps to (RFC 1112): 01:00:5e followed by
// the low 23 bits of the group address (host order).
MacAddress Ipv4MulticastMac(uint32_t group_ip);

// A locally administered unicast MAC for a switch at `ip`: 02:6e:66 ("nf")
// followed by the low 24 bits of the address. Distinct from every NIC's
// burned-in address, so a kernel sharing an af_packet or tap interface with
// the switch never takes the switch's frames for its own.
MacAddress SwitchMacForAddress(uint32_t ip);

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint8_t kIpProtocolIcmp = 1;
inline constexpr uint8_t kIpProtocolUdp = 17;
inline constexpr uint16_t kIpv4DontFragment = 0x4000;
inline constexpr uint16_t kIpv4MoreFragments = 0x2000;
inline constexpr uint16_t kIpv4FragmentOffsetMask = 0x1fff;

// Wire layouts (big-endian fields, alignment 1: read and written by memcpy).
struct EthernetWire {
  std::array<uint8_t, 6> dst;
  std::array<uint8_t, 6> src;
  proto::Be16 ether_type;
};
static_assert(sizeof(EthernetWire) == 14 && alignof(EthernetWire) == 1);

struct ArpWire {
  proto::Be16 hardware_type;  // 1: Ethernet
  proto::Be16 protocol_type;  // 0x0800: IPv4
  uint8_t hardware_size;      // 6
  uint8_t protocol_size;      // 4
  proto::Be16 op;             // 1 request, 2 reply
  std::array<uint8_t, 6> sender_mac;
  proto::Be32 sender_ip;
  std::array<uint8_t, 6> target_mac;
  proto::Be32 target_ip;
};
static_assert(sizeof(ArpWire) == 28 && alignof(ArpWire) == 1);

struct Ipv4Wire {
  uint8_t version_ihl;
  uint8_t tos;
  proto::Be16 total_length;
  proto::Be16 identification;
  proto::Be16 flags_fragment;
  uint8_t ttl;
  uint8_t protocol;
  proto::Be16 checksum;
  proto::Be32 src;
  proto::Be32 dst;
};
static_assert(sizeof(Ipv4Wire) == 20 && alignof(Ipv4Wire) == 1);

struct UdpWire {
  proto::Be16 src_port;
  proto::Be16 dst_port;
  proto::Be16 length;
  proto::Be16 checksum;
};
static_assert(sizeof(UdpWire) == 8 && alignof(UdpWire) == 1);

struct IcmpEchoWire {
  uint8_t type;  // 8 request, 0 reply
  uint8_t code;
  proto::Be16 checksum;
  proto::Be16 id;
  proto::Be16 sequence;
};
static_assert(sizeof(IcmpEchoWire) == 8 && alignof(IcmpEchoWire) == 1);

inline constexpr size_t kEthernetHeaderSize = sizeof(EthernetWire);
inline constexpr size_t kArpFrameSize = kEthernetHeaderSize + sizeof(ArpWire);  // 42
// Ethernet + IPv4 without options + UDP: what a RoCEv2 frame has in front of
// its BTH.
inline constexpr size_t kUdpFrameHeadersSize = kEthernetHeaderSize + 20 + 8;  // 42

enum class ArpOp : uint16_t { kRequest = 1, kReply = 2 };

// Why a frame cannot be used by the local stack. Values index counters.
enum class FrameParseResult : uint8_t {
  kOk = 0,
  kRunt,              // shorter than an Ethernet header
  kBadArp,            // ARP that is not Ethernet/IPv4, or truncated
  kBadIpv4Header,     // version != 4, IHL < 5, total length out of the frame
  kBadIpv4Checksum,   // header checksum wrong
  kIpv4Fragment,      // a fragment (MF set or offset != 0): not reassembled
  kBadUdpLength,      // UDP length < 8 or beyond the IPv4 payload
};
inline constexpr size_t kNumFrameParseResults = 7;
std::string_view FrameParseResultName(FrameParseResult r);

struct Ipv4View {
  size_t offset = 0;         // of the IPv4 header in the frame
  size_t header_length = 0;  // IHL * 4
  uint16_t total_length = 0;
  uint16_t identification = 0;
  uint16_t flags_fragment = 0;
  uint8_t tos = 0;
  uint8_t ttl = 0;
  uint8_t protocol = 0;
  uint32_t src = 0;  // host order
  uint32_t dst = 0;
};

struct UdpView {
  size_t offset = 0;  // of the UDP header in the frame
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint16_t length = 0;  // header included
  size_t payload_offset = 0;
  size_t payload_length = 0;
};

struct ArpView {
  ArpOp op = ArpOp::kRequest;
  MacAddress sender_mac;
  uint32_t sender_ip = 0;
  MacAddress target_mac;
  uint32_t target_ip = 0;
};

// A parsed frame. Only the parts the flags say are valid.
struct FrameView {
  MacAddress dst;
  MacAddress src;
  uint16_t ether_type = 0;
  bool has_arp = false;
  ArpView arp;
  bool has_ipv4 = false;
  Ipv4View ipv4;
  bool has_udp = false;  // IPv4 protocol 17 with a sane length
  UdpView udp;
};

// Parses the Ethernet header and, for ARP and IPv4 (untagged), the layers
// above it. kOk with only the Ethernet part filled for other EtherTypes.
// The IPv4 header checksum is verified; the UDP checksum is not (RoCEv2
// receivers rely on the ICRC, IBTA Annex A17). On an error the fields up to
// the failing layer are filled.
FrameParseResult ParseFrame(std::span<const uint8_t> frame, FrameView* out);

// RFC 1071 one's-complement sum of `bytes`, folded and complemented: the
// value to store in a checksum field that was zero while summing (and 0
// when verifying a block that includes its checksum).
uint16_t InternetChecksum(std::span<const uint8_t> bytes);

// True if the IPv4 header is the canonical one the ICRC of kernel-socket
// peers assumes (docs/protocol.md, "ICRC"): no options, identification 0,
// DF and no fragment offset. Then the ICRC over the real headers equals the
// ICRC over the canonical headers built from the addresses.
bool IsCanonicalRoceIpv4(const Ipv4View& ipv4);

// Writes an Ethernet header at out[0..14).
void WriteEthernetHeader(const MacAddress& dst, const MacAddress& src, uint16_t ether_type,
                         uint8_t* out);

// Writes a whole ARP frame (kArpFrameSize bytes, no padding) into `out`.
void WriteArpFrame(const MacAddress& eth_dst, ArpOp op, const MacAddress& sender_mac,
                   uint32_t sender_ip, const MacAddress& target_mac, uint32_t target_ip,
                   std::span<uint8_t, kArpFrameSize> out);

// Turns the ICMP echo request in `frame` (parsed into `v`, IPv4 protocol 1)
// into its reply in place: Ethernet and IPv4 addresses swapped (the reply
// comes from `own_mac`), TTL `ttl`, type 0, both checksums recomputed.
// Returns false (frame unchanged) if it is not a well-formed echo request.
bool MakeIcmpEchoReply(std::span<uint8_t> frame, const FrameView& v, const MacAddress& own_mac,
                       uint8_t ttl);

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_ETHERNET_FRAME_H_
