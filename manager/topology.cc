#include "manager/topology.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "config/yaml_reader.h"
#include "proto/control/plane_name.h"
#include "proto/slot_size.h"

namespace netfold::manager {

using config::CheckKeys;
using config::ParseYaml;
using config::ReadString;
using config::ReadTextFile;
using config::ReadUint;
namespace {

constexpr uint32_t kMaxTier = 8;
constexpr uint64_t kMaxCapacity = 1u << 30;

absl::Status ReadCapacity(const YAML::Node& node, std::string_view where, Capacity* cap) {
  if (!node.IsDefined() || node.IsNull()) return absl::OkStatus();
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(node, {"trees", "groups", "slots", "slot_bytes", "qps"}, where));
  struct Field {
    const char* key;
    uint32_t* value;
  };
  for (Field f :
       {Field{"trees", &cap->trees}, Field{"groups", &cap->groups}, Field{"slots", &cap->slots},
        Field{"slot_bytes", &cap->slot_bytes}, Field{"qps", &cap->qps}}) {
    if (!node[f.key].IsDefined()) continue;
    NETFOLD_ASSIGN_OR_RETURN(
        uint64_t v, ReadUint(node[f.key], absl::StrFormat("%s.%s", where, f.key), kMaxCapacity));
    *f.value = static_cast<uint32_t>(v);
  }
  return absl::OkStatus();
}

absl::Status ParseInto(const YAML::Node& root, TopologyDescription* desc) {
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(root, {"name", "planes", "defaults", "switches", "links", "hosts"}, "topology"));
  NETFOLD_ASSIGN_OR_RETURN(desc->name, ReadString(root["name"], "name"));
  if (root["planes"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(uint64_t planes,
                             ReadUint(root["planes"], "planes", control::kMaxPlanes));
    desc->planes = static_cast<uint32_t>(planes);
  }

  Capacity defaults;
  if (root["defaults"].IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(root["defaults"], {"capacity"}, "defaults"));
    NETFOLD_RETURN_IF_ERROR(
        ReadCapacity(root["defaults"]["capacity"], "defaults.capacity", &defaults));
  }

  const YAML::Node switches = root["switches"];
  if (!switches.IsSequence()) {
    return absl::InvalidArgumentError("switches: expected a list of switches");
  }
  for (size_t i = 0; i < switches.size(); ++i) {
    const YAML::Node s = switches[i];
    std::string where = absl::StrFormat("switches[%d]", i);
    NETFOLD_RETURN_IF_ERROR(CheckKeys(s, {"name", "tier", "capacity"}, where));
    TopologyDescription::Switch sw;
    NETFOLD_ASSIGN_OR_RETURN(sw.name, ReadString(s["name"], where + ".name"));
    if (s["tier"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t tier, ReadUint(s["tier"], where + ".tier", kMaxTier));
      sw.tier = static_cast<uint32_t>(tier);
    }
    sw.capacity = defaults;
    NETFOLD_RETURN_IF_ERROR(ReadCapacity(s["capacity"], where + ".capacity", &sw.capacity));
    desc->switches.push_back(std::move(sw));
  }

  const YAML::Node links = root["links"];
  if (links.IsDefined() && !links.IsNull()) {
    if (!links.IsSequence()) return absl::InvalidArgumentError("links: expected a list");
    for (size_t i = 0; i < links.size(); ++i) {
      const YAML::Node l = links[i];
      std::string where = absl::StrFormat("links[%d]", i);
      if (!l.IsSequence() || l.size() != 2) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: expected [switch, switch]", where));
      }
      NETFOLD_ASSIGN_OR_RETURN(std::string a, ReadString(l[0], where));
      NETFOLD_ASSIGN_OR_RETURN(std::string b, ReadString(l[1], where));
      desc->links.emplace_back(std::move(a), std::move(b));
    }
  }

  const YAML::Node hosts = root["hosts"];
  if (hosts.IsDefined() && !hosts.IsNull()) {
    if (!hosts.IsSequence()) return absl::InvalidArgumentError("hosts: expected a list");
    for (size_t i = 0; i < hosts.size(); ++i) {
      const YAML::Node h = hosts[i];
      std::string where = absl::StrFormat("hosts[%d]", i);
      NETFOLD_RETURN_IF_ERROR(CheckKeys(h, {"name", "switch"}, where));
      NETFOLD_ASSIGN_OR_RETURN(std::string name, ReadString(h["name"], where + ".name"));
      NETFOLD_ASSIGN_OR_RETURN(std::string sw, ReadString(h["switch"], where + ".switch"));
      desc->hosts.emplace_back(std::move(name), std::move(sw));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<Topology> Topology::Build(const TopologyDescription& desc) {
  Topology topo;
  if (!IsValidName(desc.name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topology name '%s' is invalid (1..64 of [A-Za-z0-9._-])", desc.name));
  }
  topo.name_ = desc.name;
  if (desc.switches.empty()) return absl::InvalidArgumentError("topology has no switches");
  if (desc.planes < 1 || desc.planes > control::kMaxPlanes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("planes %d: a fabric has 1..%d data planes", desc.planes,
                        control::kMaxPlanes));
  }

  absl::flat_hash_map<std::string, int> switch_index;
  for (const auto& s : desc.switches) {
    if (!IsValidName(s.name)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("switch name '%s' is invalid (1..64 of [A-Za-z0-9._-])", s.name));
    }
    if (!switch_index.emplace(s.name, static_cast<int>(topo.switches_.size())).second) {
      return absl::InvalidArgumentError(absl::StrFormat("switch '%s' is listed twice", s.name));
    }
    const Capacity& c = s.capacity;
    struct Check {
      const char* what;
      uint32_t value;
    };
    for (Check check : {Check{"trees", c.trees}, Check{"groups", c.groups}, Check{"slots", c.slots},
                        Check{"slot_bytes", c.slot_bytes}, Check{"qps", c.qps}}) {
      if (check.value == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("switch '%s': capacity %s must be positive (set it per switch or in "
                            "defaults.capacity)",
                            s.name, check.what));
      }
    }
    // The switch's ALU refuses any other slot size, so a topology that
    // declares one could never install a group (proto/slot_size.h).
    if (!proto::IsValidSlotBytes(c.slot_bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "switch '%s': capacity slot_bytes %d must be a multiple of %d (the largest element) "
          "and at most %d (a multicast result, %d-byte header + slot, fits one 4096-byte packet)",
          s.name, c.slot_bytes, proto::kSlotAlignment, proto::kMaxSlotBytes,
          proto::kAggregationHeaderSize));
    }
    SwitchSpec spec;
    spec.name = s.name;
    spec.tier = s.tier;
    spec.capacity = s.capacity;
    topo.switches_.push_back(std::move(spec));
  }

  std::set<std::pair<int, int>> seen_links;
  for (const auto& [a_name, b_name] : desc.links) {
    auto a_it = switch_index.find(a_name);
    auto b_it = switch_index.find(b_name);
    if (a_it == switch_index.end() || b_it == switch_index.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("link [%s, %s]: unknown switch '%s'", a_name, b_name,
                          a_it == switch_index.end() ? a_name : b_name));
    }
    int a = a_it->second, b = b_it->second;
    if (a == b) {
      return absl::InvalidArgumentError(absl::StrFormat("link [%s, %s] is a loop", a_name, b_name));
    }
    uint32_t ta = topo.switches_[a].tier, tb = topo.switches_[b].tier;
    if (ta + 1 != tb && tb + 1 != ta) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "link [%s, %s]: tiers %d and %d are not adjacent (a link joins tier t and t+1)", a_name,
          b_name, ta, tb));
    }
    int lower = ta < tb ? a : b;
    int upper = ta < tb ? b : a;
    if (!seen_links.emplace(lower, upper).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("link [%s, %s] is listed twice", a_name, b_name));
    }
    topo.switches_[lower].up.push_back(upper);
    topo.switches_[upper].down.push_back(lower);
  }

  absl::flat_hash_map<std::string, int> host_index;
  for (const auto& [host, sw] : desc.hosts) {
    if (!IsValidName(host)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("host name '%s' is invalid (1..64 of [A-Za-z0-9._-])", host));
    }
    auto it = switch_index.find(sw);
    if (it == switch_index.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("host '%s': unknown switch '%s'", host, sw));
    }
    if (topo.switches_[it->second].tier != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "host '%s': switch '%s' is in tier %d; hosts attach to tier-0 (leaf) switches", host, sw,
          topo.switches_[it->second].tier));
    }
    if (!host_index.emplace(host, static_cast<int>(topo.hosts_.size())).second) {
      return absl::InvalidArgumentError(absl::StrFormat("host '%s' is listed twice", host));
    }
    topo.switches_[it->second].hosts.push_back(static_cast<int>(topo.hosts_.size()));
    topo.hosts_.push_back(HostSpec{host, it->second});
  }

  for (SwitchSpec& s : topo.switches_) {
    std::sort(s.up.begin(), s.up.end());
    std::sort(s.down.begin(), s.down.end());
  }
  // Planes 1..: copies of plane 0, linked among themselves.
  topo.planes_ = desc.planes;
  const int per_plane = static_cast<int>(topo.switches_.size());
  for (uint32_t plane = 1; plane < desc.planes; ++plane) {
    const int offset = static_cast<int>(plane) * per_plane;
    for (int i = 0; i < per_plane; ++i) {
      SwitchSpec copy = topo.switches_[i];
      copy.name = control::PlaneSwitchName(copy.name, plane);
      copy.plane = plane;
      for (int& up : copy.up) up += offset;
      for (int& down : copy.down) down += offset;
      topo.switches_.push_back(std::move(copy));
    }
  }
  return topo;
}

absl::StatusOr<Topology> Topology::Parse(std::string_view yaml_text) {
  NETFOLD_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text));
  TopologyDescription desc;
  NETFOLD_RETURN_IF_ERROR(ParseInto(root, &desc));
  return Build(desc);
}

absl::StatusOr<Topology> Topology::LoadFile(const std::string& path) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  absl::StatusOr<Topology> topo = Parse(text);
  if (!topo.ok()) {
    return absl::Status(topo.status().code(),
                        absl::StrFormat("topology %s: %s", path, topo.status().message()));
  }
  return topo;
}

int Topology::FindSwitch(std::string_view name) const {
  for (size_t i = 0; i < switches_.size(); ++i) {
    if (switches_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Topology::FindHost(std::string_view name) const {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool Topology::Linked(int a, int b) const {
  const auto& up = switches_[a].up;
  const auto& down = switches_[a].down;
  return std::binary_search(up.begin(), up.end(), b) ||
         std::binary_search(down.begin(), down.end(), b);
}

}  // namespace netfold::manager
