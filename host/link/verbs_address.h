// Addresses of the verbs transport: RoCEv2 GIDs and the choice of the GID
// table entry a queue pair sends from. Pure functions; no device needed.
//
//   Gid g = Ipv4MappedGid(0x0a000001);                  // ::ffff:10.0.0.1
//   uint32_t index = *SelectGidIndex(table, 0x0a000001, std::nullopt);
//
// RoCEv2 over IPv4 names an endpoint by the IPv4-mapped IPv6 address of its
// interface (::ffff:a.b.c.d), in the port's GID table next to the link-local
// RoCE v1 entries; a multicast group by the IPv4-mapped group address
// (::ffff:239.x.y.z), as the kernel's rdma_cm maps it. netfold speaks
// RoCEv2 over IPv4 only (docs/verbs.md).
#ifndef NETFOLD_HOST_LINK_VERBS_ADDRESS_H_
#define NETFOLD_HOST_LINK_VERBS_ADDRESS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace netfold::host {

using Gid = std::array<uint8_t, 16>;

enum class GidType { kIb, kRoceV1, kRoceV2 };
const char* GidTypeName(GidType type);

// One entry of a port's GID table (ibv_query_gid_table's ibv_gid_entry).
struct GidEntry {
  uint32_t index = 0;
  Gid gid{};
  GidType type = GidType::kIb;
};

// ::ffff:a.b.c.d for `ipv4` (host byte order).
Gid Ipv4MappedGid(uint32_t ipv4);
// The IPv4 address of an IPv4-mapped GID; nullopt for any other GID.
std::optional<uint32_t> Ipv4FromGid(const Gid& gid);
// The text form of the GID as an IPv6 address ("::ffff:10.0.0.1", "fe80::1").
std::string FormatGid(const Gid& gid);
// Parses an IPv6 address, or an IPv4 address into its mapped GID.
// InvalidArgument otherwise.
absl::StatusOr<Gid> ParseGid(std::string_view text);

// The GID index this side sends from. With `forced_index`, that entry, which
// must exist and be RoCE v2 (FailedPrecondition otherwise: netfold speaks
// RoCEv2 only). Without, the RoCE v2 entry holding `ipv4`; NotFound, listing
// the table, if there is none (the address is on another device or port, or
// the interface has no such address).
absl::StatusOr<uint32_t> SelectGidIndex(std::span<const GidEntry> table, uint32_t ipv4,
                                        std::optional<uint32_t> forced_index);

// The index of `pkey` in a port's P_Key table (entries as ibv_query_pkey
// returns them, in network byte order). A match needs the same low 15 bits
// and the table's entry a full member when `pkey` is. NotFound with the
// reason otherwise: a RoCE port holds only the default 0xFFFF, so a job
// must use the default partition (docs/verbs.md).
absl::StatusOr<uint16_t> FindPkeyIndex(std::span<const uint16_t> table_be, uint16_t pkey);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_ADDRESS_H_
