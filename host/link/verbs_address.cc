#include "host/link/verbs_address.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace netfold::host {

const char* GidTypeName(GidType type) {
  switch (type) {
    case GidType::kIb:
      return "IB";
    case GidType::kRoceV1:
      return "RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
  }
  return "?";
}

Gid Ipv4MappedGid(uint32_t ipv4) {
  Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  g[12] = static_cast<uint8_t>(ipv4 >> 24);
  g[13] = static_cast<uint8_t>(ipv4 >> 16);
  g[14] = static_cast<uint8_t>(ipv4 >> 8);
  g[15] = static_cast<uint8_t>(ipv4);
  return g;
}

std::optional<uint32_t> Ipv4FromGid(const Gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid[static_cast<size_t>(i)] != 0) return std::nullopt;
  }
  if (gid[10] != 0xff || gid[11] != 0xff) return std::nullopt;
  return (uint32_t{gid[12]} << 24) | (uint32_t{gid[13]} << 16) | (uint32_t{gid[14]} << 8) |
         uint32_t{gid[15]};
}

std::string FormatGid(const Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.data(), text, sizeof(text)) == nullptr) return "?";
  return text;
}

absl::StatusOr<Gid> ParseGid(std::string_view text) {
  const std::string s(text);
  Gid g{};
  if (inet_pton(AF_INET6, s.c_str(), g.data()) == 1) return g;
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) return Ipv4MappedGid(ntohl(v4.s_addr));
  return absl::InvalidArgumentError(
      absl::StrFormat("'%s' is neither an IPv6 nor an IPv4 address (a GID)", s));
}

namespace {

std::string DescribeTable(std::span<const GidEntry> table) {
  if (table.empty()) return "the port's GID table is empty";
  return absl::StrFormat(
      "the port's GID table: %s",
      absl::StrJoin(table, ", ", [](std::string* out, const GidEntry& e) {
        absl::StrAppendFormat(out, "[%d] %s %s", e.index, FormatGid(e.gid), GidTypeName(e.type));
      }));
}

std::string FormatIpv4(uint32_t ipv4) {
  return absl::StrFormat("%d.%d.%d.%d", ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff,
                         ipv4 & 0xff);
}

}  // namespace

absl::StatusOr<uint32_t> SelectGidIndex(std::span<const GidEntry> table, uint32_t ipv4,
                                        std::optional<uint32_t> forced_index) {
  if (forced_index) {
    for (const GidEntry& e : table) {
      if (e.index != *forced_index) continue;
      if (e.type != GidType::kRoceV2) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "GID index %d (%s) is %s; netfold speaks RoCE v2 only. %s", e.index,
            FormatGid(e.gid), GidTypeName(e.type), DescribeTable(table)));
      }
      return e.index;
    }
    return absl::NotFoundError(absl::StrFormat("there is no GID index %d; %s", *forced_index,
                                               DescribeTable(table)));
  }
  const Gid wanted = Ipv4MappedGid(ipv4);
  for (const GidEntry& e : table) {
    if (e.type == GidType::kRoceV2 && e.gid == wanted) return e.index;
  }
  return absl::NotFoundError(absl::StrFormat(
      "no RoCE v2 GID holds %s (NETFOLD_LOCAL_ADDRESS) on this device and port; %s",
      FormatIpv4(ipv4), DescribeTable(table)));
}

absl::StatusOr<uint16_t> FindPkeyIndex(std::span<const uint16_t> table_be, uint16_t pkey) {
  std::string seen;
  for (size_t i = 0; i < table_be.size(); ++i) {
    const uint16_t entry = ntohs(table_be[i]);
    if (entry == 0) continue;  // an empty slot
    absl::StrAppendFormat(&seen, "%s0x%04x", seen.empty() ? "" : ", ", entry);
    const bool same_partition = (entry & 0x7fff) == (pkey & 0x7fff);
    const bool membership_ok = (pkey & 0x8000) == 0 || (entry & 0x8000) != 0;
    if (same_partition && membership_ok) return static_cast<uint16_t>(i);
  }
  return absl::NotFoundError(absl::StrFormat(
      "the port's P_Key table (%s) has no entry for the job's P_Key 0x%04x; a RoCE port "
      "holds only the default partition 0xffff, so the job must be created with "
      "default_partition (libnetfold does this for NETFOLD_TRANSPORT=verbs)",
      seen.empty() ? "empty" : seen, pkey));
}

}  // namespace netfold::host
