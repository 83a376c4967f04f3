// What transport/udp_port.cc and udp_port_read.cc share: the batch limits
// and the conversions between Ipv4Endpoint and sockaddr_in. Internal to
// UdpPort; nothing else includes it.
#ifndef NETFOLD_TRANSPORT_UDP_PORT_INTERNAL_H_
#define NETFOLD_TRANSPORT_UDP_PORT_INTERNAL_H_

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>

#include "transport/ipv4_endpoint.h"

namespace netfold::transport::udp_port_internal {

constexpr size_t kMaxBurst = 64;
constexpr int kMaxEvents = 16;
// Segmentation batches: at most this many packets (the kernel's
// UDP_MAX_SEGMENTS is 64 on old kernels) and this many bytes (a UDP
// datagram's payload limit) per send.
constexpr size_t kMaxSegments = 64;
constexpr size_t kMaxBatchBytes = 65507;
// Whole batches read per recvmmsg when UDP_GRO is on, into batch buffers
// of kGroBufferBytes (kBatchBuffers of them: packets of a batch hold its
// buffer until they are freed).
constexpr size_t kGroReads = 8;
constexpr uint32_t kGroBufferBytes = 65536;
constexpr uint32_t kBatchBuffers = 32;

inline sockaddr_in ToSockaddr(const Ipv4Endpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ip);
  sa.sin_port = htons(ep.port);
  return sa;
}

inline Ipv4Endpoint FromSockaddr(const sockaddr_in& sa) {
  return Ipv4Endpoint{ntohl(sa.sin_addr.s_addr), ntohs(sa.sin_port)};
}

}  // namespace netfold::transport::udp_port_internal

#endif  // NETFOLD_TRANSPORT_UDP_PORT_INTERNAL_H_
