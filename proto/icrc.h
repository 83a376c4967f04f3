// The RoCEv2 Invariant CRC (ICRC): the 4 bytes that end every RoCEv2 packet,
// a CRC-32 over the fields of the IPv4, UDP and InfiniBand headers that no
// switch may change, and over the rest of the packet (IBTA Vol. 1 Annex A17
// "RoCEv2", A17.4.1; computed as Linux rdma_rxe and scapy compute it).
//
//   // Kernel-socket backend: there is no IP header in the buffer; both ends
//   // derive the same canonical headers from the addresses of the datagram.
//   IcrcAddresses addrs{.src_ip = 0x0A000001, .dst_ip = 0x0A000002,
//                       .src_port = 49152, .dst_port = kRoceUdpPort};
//   uint32_t icrc = ComputeIcrc(addrs, udp_payload.first(udp_payload.size() - 4));
//   StoreIcrc(icrc, udp_payload.last<4>());
//
// Exactly what is covered, in this order:
//   1. 8 bytes of 0xFF: the (absent) LRH, fully masked.
//   2. The 20-byte IPv4 header (no options) with TOS, TTL and header
//      checksum replaced by all ones. In the canonical form built from
//      IcrcAddresses the other fields are: version/IHL 0x45, total length
//      28 + UDP payload length (the ICRC included), identification
//      `addrs.ip_id` (0 unless a datagram is known to carry another: the
//      segments of one UDP GSO send carry 0, 1, 2, ...), flags DF with
//      fragment offset 0 (0x4000), protocol 17, source and destination
//      address from `addrs`.
//   3. The 8-byte UDP header with the checksum replaced by all ones; in the
//      canonical form: ports from `addrs`, length 8 + UDP payload length.
//   4. The UDP payload up to the ICRC (BTH, extended headers, payload, pad)
//      with BTH byte 4 (FECN, BECN, resv6) replaced by 0xFF.
// The CRC is zlib's crc32 (reflected CRC-32, initial and final inversion)
// of that byte string, stored in the packet least significant byte first
// (StoreIcrc), as rdma_rxe stores it and scapy packs it.
//
// All functions are pure and thread-safe.
#ifndef NETFOLD_PROTO_ICRC_H_
#define NETFOLD_PROTO_ICRC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "proto/roce_headers.h"

namespace netfold::proto {

inline constexpr size_t kIpv4HeaderSize = 20;
inline constexpr size_t kUdpHeaderSize = 8;
// The largest UDP payload (BTH .. ICRC) an IPv4 packet can carry; larger
// sizes would wrap the 16-bit length fields of the canonical headers.
inline constexpr size_t kMaxRoceUdpPayload = 65535 - kIpv4HeaderSize - kUdpHeaderSize;

// The addresses of one datagram, in host order, from which the canonical
// IPv4/UDP headers of the ICRC are built. The sender fills them with its
// own address/port (src) and the peer's (dst); the receiver with the
// datagram's source (from recvmsg) and its own local address/port.
struct IcrcAddresses {
  uint32_t src_ip = 0;   // IPv4 address, host order (10.0.0.1 is 0x0A000001)
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = kRoceUdpPort;
  uint16_t ip_id = 0;  // the IPv4 identification (see above)

  friend bool operator==(const IcrcAddresses&, const IcrcAddresses&) = default;
};

// Returns the ICRC of a packet whose UDP payload, without its trailing 4
// ICRC bytes, is `covered`, using the canonical IPv4/UDP headers built from
// `addrs` (UDP payload length = covered.size() + 4). `covered` normally
// begins with a BTH; if it is shorter than 5 bytes there is no BTH byte 4
// to mask and the bytes are covered as they are. Lengths above
// kMaxRoceUdpPayload wrap (such a packet cannot exist).
uint32_t ComputeIcrc(const IcrcAddresses& addrs, std::span<const uint8_t> covered);

// As ComputeIcrc, for a packet whose bytes [at, at + part.size()) are not
// in `covered` but in `part`: a payload still in the sender's memory
// (PacketBuffer::external, transport/packet_pool.h). What `covered` holds
// there is not read. `at` must lie past BTH byte 4 and the part inside
// `covered` (aborts otherwise: a caller's broken invariant).
uint32_t ComputeIcrcWithPart(const IcrcAddresses& addrs, std::span<const uint8_t> covered,
                             size_t at, std::span<const uint8_t> part);

// As ComputeIcrc, but over the packet's real IPv4 header (20 bytes: IHL 5,
// no options) and UDP header as they were received or will be sent; only
// the fields named above are masked, every other field is covered as is.
// For backends that see whole frames (DPDK).
uint32_t ComputeIcrcIpv4(std::span<const uint8_t, kIpv4HeaderSize> ipv4_header,
                         std::span<const uint8_t, kUdpHeaderSize> udp_header,
                         std::span<const uint8_t> covered);

// For receivers that cannot see the IPv4 header (kernel sockets): the
// IPv4 identification a sender must have used for `received_icrc` to be
// the ICRC of `covered` with the canonical headers of `addrs` and that
// identification (everything else canonical: DF, no fragment offset).
// ComputeIcrc assumes addrs.ip_id (0 by default), which is what Linux puts in DF
// datagrams of sockets with IP_PMTUDISC_DO (transport/udp_port.cc sets
// it), but RoCE NICs (rdma_rxe: __ip_select_ident) fill it in. The CRC is affine, so the identification that explains the
// difference is found by solving 16 unknowns, or there is none (nullopt).
// The price: of corrupted packets, about 1 in 2^16 (instead of 1 in 2^32)
// now passes the check, so receivers use this only when configured to.
std::optional<uint16_t> SolveIpv4Identification(const IcrcAddresses& addrs,
                                                std::span<const uint8_t> covered,
                                                uint32_t received_icrc);

// What an IPv4 identification of `ip_id` instead of 0 changes in the ICRC
// of a packet whose covered part (UDP payload without the ICRC) is
// `covered_size` bytes: ComputeIcrc with addrs.ip_id = x equals ComputeIcrc
// with 0, XOR this. The CRC is affine, so the change depends on nothing
// else. For senders that hand the kernel several packets in one UDP GSO
// send (segment i leaves with identification i) and receivers of such a
// batch. IcrcIdentificationTable caches the part that depends on the size.
uint32_t IcrcIdentificationDifference(size_t covered_size, uint16_t ip_id);
// The differences for the last few packet sizes seen: D(x) is linear in x,
// so a size costs 16 zlib combines once, and then any identification is an
// XOR of at most 16 cached words. Not thread-safe (one per port or
// endpoint).
class IcrcIdentificationTable {
 public:
  // Identifications a GSO send gives its segments: 0 .. kSegmentIds - 1.
  static constexpr uint16_t kSegmentIds = 64;

  uint32_t Difference(size_t covered_size, uint16_t ip_id);
  // The identification below kSegmentIds whose difference is `delta` for
  // this size, if any (0 for delta 0).
  std::optional<uint16_t> FindSegment(size_t covered_size, uint32_t delta);

 private:
  struct Size {
    size_t covered_size = SIZE_MAX;
    std::array<uint32_t, 16> bit{};                // D(1 << i)
    std::array<uint32_t, kSegmentIds> segment{};  // D(x), x < kSegmentIds
  };
  const Size& For(size_t covered_size);

  std::array<Size, 8> sizes_;
  size_t next_ = 0;  // the entry a new size replaces
};

// Writes / reads an ICRC value in its wire byte order (least significant
// byte first).
void StoreIcrc(uint32_t icrc, std::span<uint8_t, kIcrcSize> out);
uint32_t LoadIcrc(std::span<const uint8_t, kIcrcSize> in);

// Returns real IPv4 + UDP headers for a RoCEv2 datagram carrying
// `udp_payload_size` bytes (BTH .. ICRC) from addrs.src to addrs.dst, in the
// canonical form above with the given TTL and TOS, a correct IPv4 header
// checksum and UDP checksum 0 (allowed for IPv4 and what RoCE NICs send).
// ComputeIcrcIpv4 over these headers equals ComputeIcrc over `addrs`.
// For pcap writers and frame-building backends.
std::array<uint8_t, kIpv4HeaderSize + kUdpHeaderSize> MakeIpv4UdpHeaders(
    const IcrcAddresses& addrs, size_t udp_payload_size, uint8_t ttl = 64, uint8_t tos = 0);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_ICRC_H_
