// The fabric as the aggregation manager sees it: switches (with their tier
// and capacities), hosts (each attached to one leaf switch) and the links
// between switches, read from a YAML file.
//
//   absl::StatusOr<Topology> topo = Topology::LoadFile("deploy/topologies/two_level.yaml");
//   int leaf = topo->FindSwitch("leaf0");
//   for (int up : topo->switch_at(leaf).up) ...
//
// File format (docs/manager.md has the full reference):
//
//   name: two-level
//   defaults:
//     capacity: {trees: 64, groups: 128, slots: 512, slot_bytes: 4048, qps: 256}
//   switches:
//     - {name: spine0, tier: 1}
//     - {name: leaf0, tier: 0, capacity: {slots: 256}}
//   links:
//     - [leaf0, spine0]
//   hosts:
//     - {name: h0, switch: leaf0}
//
// A link joins two switches whose tiers differ by exactly one; hosts hang off
// tier-0 switches. Unknown keys are errors, so a typo does not go unnoticed.
//
// Data planes (`planes: N`, docs/manager.md "Data planes"): every switch runs
// N independent data planes (netfold-switchd's transport.planes), each a
// switch of its own to the manager. The topology then holds N copies of the
// switches and links, plane-major: plane 0's are the file's, under their
// names, at indices 0..S-1; plane p's are named NAME@p
// (proto/control/plane_name.h) at p*S.., linked among themselves as plane
// 0's are, each with the capacity declared for its switch. A host hangs off
// its leaf in every plane (HostSpec.switch_index is plane 0's; LeafIn gives
// the others), so trees are planned per plane, plane 0's first.
// A Topology is immutable once built; const methods are thread-safe.
#ifndef NETFOLD_MANAGER_TOPOLOGY_H_
#define NETFOLD_MANAGER_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace netfold::manager {

// What one switch can hold. See SwitchCapacity in netfold_control.proto.
struct Capacity {
  uint32_t trees = 0;
  uint32_t groups = 0;
  uint32_t slots = 0;
  uint32_t slot_bytes = 0;
  uint32_t qps = 0;
};

struct SwitchSpec {
  std::string name;
  uint32_t plane = 0;  // the data plane this switch is (0 without planes)
  uint32_t tier = 0;
  Capacity capacity;
  std::vector<int> up;     // switch indices one tier up, ascending
  std::vector<int> down;   // switch indices one tier down, ascending
  std::vector<int> hosts;  // host indices attached here, ascending
};

struct HostSpec {
  std::string name;
  int switch_index = -1;  // its leaf in plane 0
};

// The pieces of a topology before validation (what the YAML holds).
struct TopologyDescription {
  std::string name;
  uint32_t planes = 1;
  struct Switch {
    std::string name;
    uint32_t tier = 0;
    Capacity capacity;
  };
  std::vector<Switch> switches;
  std::vector<std::pair<std::string, std::string>> links;
  std::vector<std::pair<std::string, std::string>> hosts;  // host, switch
};

// Names of switches, hosts, jobs: 1..64 of [A-Za-z0-9._-].
bool IsValidName(std::string_view name);

class Topology {
 public:
  // Validates `desc`: unique valid names, positive capacities, known link
  // ends, tiers one apart, no duplicate links, hosts on tier-0 switches,
  // 1..kMaxPlanes planes; then adds the switches of planes 1.. (above).
  // InvalidArgument names the first offending entry.
  static absl::StatusOr<Topology> Build(const TopologyDescription& desc);
  // Parses YAML text (format above). InvalidArgument with the line and
  // column for syntax errors, the entry for semantic ones.
  static absl::StatusOr<Topology> Parse(std::string_view yaml_text);
  // Reads and parses a file. NotFound if it cannot be read.
  static absl::StatusOr<Topology> LoadFile(const std::string& path);

  const std::string& name() const { return name_; }
  int num_switches() const { return static_cast<int>(switches_.size()); }
  int num_hosts() const { return static_cast<int>(hosts_.size()); }
  // Data planes, and switches in each (num_switches() = planes() x that).
  uint32_t planes() const { return planes_; }
  int num_switches_per_plane() const { return num_switches() / static_cast<int>(planes_); }
  // The switch `sw` is in plane `plane` (`sw` itself for its own plane).
  int InPlane(int sw, uint32_t plane) const {
    return sw % num_switches_per_plane() + static_cast<int>(plane) * num_switches_per_plane();
  }
  // Host `host`'s leaf in `plane`.
  int LeafIn(int host, uint32_t plane) const { return InPlane(hosts_[host].switch_index, plane); }
  const SwitchSpec& switch_at(int index) const { return switches_[index]; }
  const HostSpec& host_at(int index) const { return hosts_[index]; }
  const std::vector<SwitchSpec>& switches() const { return switches_; }
  // Index of the switch / host with this name, or -1.
  int FindSwitch(std::string_view name) const;
  int FindHost(std::string_view name) const;
  // True if switches `a` and `b` are linked (either direction).
  bool Linked(int a, int b) const;

 private:
  Topology() = default;

  std::string name_;
  uint32_t planes_ = 1;
  std::vector<SwitchSpec> switches_;
  std::vector<HostSpec> hosts_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TOPOLOGY_H_
