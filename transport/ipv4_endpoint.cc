#include "transport/ipv4_endpoint.h"

#include <arpa/inet.h>

#include <charconv>
#include <string>

#include "absl/strings/str_format.h"

namespace netfold::transport {

std::string Ipv4Endpoint::ToString() const {
  return absl::StrFormat("%s:%d", FormatIpv4Address(ip), port);
}

absl::StatusOr<uint32_t> ParseIpv4Address(std::string_view text) {
  std::string copy(text);
  in_addr addr;
  // inet_pton accepts exactly the dotted-quad form (no octal, no short forms).
  if (copy.empty() || inet_pton(AF_INET, copy.c_str(), &addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not an IPv4 address (expected a.b.c.d)", text));
  }
  return ntohl(addr.s_addr);
}

std::string FormatIpv4Address(uint32_t ip) {
  return absl::StrFormat("%d.%d.%d.%d", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff,
                         ip & 0xff);
}

absl::StatusOr<Ipv4Endpoint> ParseIpv4Endpoint(std::string_view text, uint16_t default_port) {
  Ipv4Endpoint ep;
  ep.port = default_port;
  std::string_view host = text;
  size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    host = text.substr(0, colon);
    std::string_view port_text = text.substr(colon + 1);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
        value > 65535) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s': port must be a number 0..65535", text));
    }
    ep.port = static_cast<uint16_t>(value);
  }
  auto ip = ParseIpv4Address(host);
  if (!ip.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not an endpoint (expected a.b.c.d[:port])", text));
  }
  ep.ip = *ip;
  return ep;
}

}  // namespace netfold::transport
