// An IPv4 address and UDP port: where a transport endpoint lives.
//
//   absl::StatusOr<Ipv4Endpoint> ep = ParseIpv4Endpoint("127.0.0.1:4791");
//   std::string s = ep->ToString();        // "127.0.0.1:4791"
//
// Values are in host byte order. A plain value type; thread-compatible.
#ifndef NETFOLD_TRANSPORT_IPV4_ENDPOINT_H_
#define NETFOLD_TRANSPORT_IPV4_ENDPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace netfold::transport {

inline constexpr uint16_t kDefaultRocePort = 4791;

struct Ipv4Endpoint {
  uint32_t ip = 0;    // host byte order: 127.0.0.1 is 0x7f000001
  uint16_t port = 0;  // host byte order

  bool IsMulticast() const { return (ip >> 28) == 0xe; }  // 224.0.0.0/4
  std::string ToString() const;
  friend bool operator==(const Ipv4Endpoint&, const Ipv4Endpoint&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Ipv4Endpoint& e) {
    return H::combine(std::move(h), e.ip, e.port);
  }
};

// Dotted quad "a.b.c.d" to host-order address. InvalidArgument otherwise.
absl::StatusOr<uint32_t> ParseIpv4Address(std::string_view text);
std::string FormatIpv4Address(uint32_t ip);

// "a.b.c.d:port" (port 0..65535), or "a.b.c.d" with `default_port`.
absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text,
                                               uint16_t default_port = kDefaultRocePort);

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_IPV4_ENDPOINT_H_
