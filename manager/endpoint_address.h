// Validation of the "ip:port" strings carried in control messages.
//
//   NETFOLD_RETURN_IF_ERROR(CheckEndpointAddress(req.endpoint().address(), "rank 3 endpoint"));
//
// Pure functions; thread-safe.
#ifndef NETFOLD_MANAGER_ENDPOINT_ADDRESS_H_
#define NETFOLD_MANAGER_ENDPOINT_ADDRESS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netfold::manager {

struct EndpointAddress {
  std::string ip;  // dotted quad
  uint16_t port = 0;
};

// Parses "a.b.c.d:port" (IPv4, port 1..65535). InvalidArgument naming
// `what` otherwise.
absl::StatusOr<EndpointAddress> ParseEndpointAddress(std::string_view text, std::string_view what);
inline absl::Status CheckEndpointAddress(std::string_view text, std::string_view what) {
  return ParseEndpointAddress(text, what).status();
}

// An address the fabric sends RoCE packets to (a switch's data_address, a
// rank's endpoint): ParseEndpointAddress's rules, and one host's unicast
// address, so not 0.0.0.0/8 ("this network", unspecified),
// 255.255.255.255 (broadcast), 224.0.0.0/4 (multicast) or 240.0.0.0/4
// (reserved). A switch's admin address may still be 0.0.0.0 (it binds
// every interface). InvalidArgument naming `what` and the reason.
absl::StatusOr<EndpointAddress> ParseDataEndpoint(std::string_view text, std::string_view what);
inline absl::Status CheckDataEndpoint(std::string_view text, std::string_view what) {
  return ParseDataEndpoint(text, what).status();
}

// The host part of a gRPC peer string ("ipv4:127.0.0.1:5555" ->
// "127.0.0.1", "ipv6:[::1]:5555" -> "::1", "unix:/x" -> "unix:/x").
std::string PeerHost(std::string_view grpc_peer);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_ENDPOINT_ADDRESS_H_
