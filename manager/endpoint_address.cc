#include "manager/endpoint_address.h"

#include <arpa/inet.h>

#include "absl/strings/str_format.h"

namespace netfold::manager {

absl::StatusOr<EndpointAddress> ParseEndpointAddress(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not an IPv4 ip:port (%s)", what, text.substr(0, 64), why));
  };
  if (text.size() > 21) return bad("too long");
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string ip(text.substr(0, colon));
  std::string_view port_text = text.substr(colon + 1);
  in_addr addr;
  if (inet_pton(AF_INET, ip.c_str(), &addr) != 1) return bad("bad address");
  if (port_text.empty() || port_text.size() > 5) return bad("bad port");
  uint32_t port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("bad port");
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port == 0 || port > 65535) return bad("port out of range");
  return EndpointAddress{ip, static_cast<uint16_t>(port)};
}

absl::StatusOr<EndpointAddress> ParseDataEndpoint(std::string_view text, std::string_view what) {
  absl::StatusOr<EndpointAddress> ep = ParseEndpointAddress(text, what);
  if (!ep.ok()) return ep.status();
  in_addr addr;
  inet_pton(AF_INET, ep->ip.c_str(), &addr);  // parsed above
  const uint32_t ip = ntohl(addr.s_addr);
  const char* why = nullptr;
  if ((ip >> 24) == 0) {
    why = "0.0.0.0/8 names no host";
  } else if (ip == 0xffffffffu) {
    why = "the broadcast address names no single host";
  } else if ((ip >> 28) == 0xe) {
    why = "a multicast group, not a host";
  } else if ((ip >> 28) == 0xf) {
    why = "a reserved address (240.0.0.0/4)";
  }
  if (why != nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: '%s' cannot receive RoCE packets: %s; give a unicast IPv4 address", what, text, why));
  }
  return ep;
}

std::string PeerHost(std::string_view peer) {
  if (peer.substr(0, 5) == "ipv4:") {
    std::string_view rest = peer.substr(5);
    size_t colon = rest.rfind(':');
    return std::string(colon == std::string_view::npos ? rest : rest.substr(0, colon));
  }
  if (peer.substr(0, 5) == "ipv6:") {
    std::string_view rest = peer.substr(5);
    size_t close = rest.find(']');
    if (!rest.empty() && rest[0] == '[' && close != std::string_view::npos) {
      return std::string(rest.substr(1, close - 1));
    }
    return std::string(rest);
  }
  return std::string(peer);
}

}  // namespace netfold::manager
