#include "manager/allocator.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_format.h"
#include "base/log.h"

namespace netfold::manager {

std::string JoinShortfalls(const std::vector<Shortfall>& shortfalls) {
  std::string out;
  for (const Shortfall& s : shortfalls) {
    if (!out.empty()) out += "; ";
    if (s.tree_id >= 0) out += absl::StrFormat("tree %d: ", s.tree_id);
    out += s.reason;
  }
  return out;
}

Allocator::Allocator(const Topology& topo, std::vector<Tree> trees)
    : topo_(&topo), trees_(std::move(trees)) {
  switches_.resize(topo.num_switches());
  links_.assign(trees_.size(), std::vector<LinkLedger>(topo.num_switches()));
  tree_load_.assign(trees_.size(), 0);
}

void Allocator::SetSwitchUsable(int switch_index, bool usable, std::string reason) {
  switches_[switch_index].usable = usable;
  switches_[switch_index].unusable_reason = usable ? "" : std::move(reason);
}

void Allocator::SetLinkDown(uint32_t tree_id, int child, bool down, std::string reason) {
  LinkLedger& l = link(tree_id, child);
  l.down = down;
  l.down_reason = down ? std::move(reason) : "";
}

bool Allocator::LinkDown(uint32_t tree_id, int child) const { return link(tree_id, child).down; }

bool Allocator::LinkReserved(uint32_t tree_id, int child) const {
  return link(tree_id, child).reserved;
}

uint32_t Allocator::trees_of(int switch_index) const {
  uint32_t n = 0;
  for (const Tree& t : trees_) n += t.Contains(switch_index) ? 1 : 0;
  return n;
}

std::optional<Shortfall> Allocator::CheckNodes(const Tree& tree, Placement* placement,
                                               bool require_usable) const {
  const Subtree& sub = placement->subtree;
  auto make = [&](int sw, std::string resource, uint64_t needed, uint64_t free, uint64_t capacity,
                  std::string reason) {
    Shortfall s;
    s.tree_id = static_cast<int>(tree.id);
    s.switch_index = sw;
    s.switch_name = topo_->switch_at(sw).name;
    s.resource = std::move(resource);
    s.needed = needed;
    s.free = free;
    s.capacity = capacity;
    s.reason = std::move(reason);
    return s;
  };

  // Demand per switch, in subtree order so the first shortfall is the one
  // nearest the group root.
  std::map<int, Usage> demand;
  placement->new_links.clear();
  for (const SubtreeNode& node : sub.nodes) {
    const int sw = node.switch_index;
    const SwitchSpec& spec = topo_->switch_at(sw);
    if (require_usable && !switches_[sw].usable) {
      return make(
          sw, "switch", 1, 0, 1,
          absl::StrFormat("switch %s is unusable: %s", spec.name, switches_[sw].unusable_reason));
    }
    if (placement->slot_bytes > spec.capacity.slot_bytes) {
      return make(sw, "slot_bytes", placement->slot_bytes, spec.capacity.slot_bytes,
                  spec.capacity.slot_bytes,
                  absl::StrFormat("switch %s holds at most %d bytes per slot, the group needs %d",
                                  spec.name, spec.capacity.slot_bytes, placement->slot_bytes));
    }
    Usage& d = demand[sw];
    d.groups += 1;
    d.slots += placement->num_slots;
    if (node.parent >= 0) {
      const LinkLedger& l = link(tree.id, sw);
      if (l.down) {
        return make(sw, "link", 1, 0, 1,
                    absl::StrFormat("link %s -> %s is down: %s", spec.name,
                                    topo_->switch_at(node.parent).name, l.down_reason));
      }
      if (!l.reserved) {
        placement->new_links.push_back(sw);
        d.qps += 1;
        demand[node.parent].qps += 1;
      }
    }
  }
  for (const SubtreeNode& node : sub.nodes) {
    const int sw = node.switch_index;
    const SwitchSpec& spec = topo_->switch_at(sw);
    const Usage& used = switches_[sw].used;
    const Usage& d = demand[sw];
    const Capacity& cap = spec.capacity;
    if (used.groups + d.groups > cap.groups) {
      uint32_t free = cap.groups - std::min(cap.groups, used.groups);
      return make(sw, "groups", d.groups, free, cap.groups,
                  absl::StrFormat("switch %s has %d of %d group entries free, needs %d", spec.name,
                                  free, cap.groups, d.groups));
    }
    if (static_cast<uint64_t>(used.slots) + d.slots > cap.slots) {
      uint32_t free = cap.slots - std::min(cap.slots, used.slots);
      return make(sw, "slots", d.slots, free, cap.slots,
                  absl::StrFormat("switch %s has %d of %d slots free, needs %d", spec.name, free,
                                  cap.slots, d.slots));
    }
    if (used.qps + d.qps > cap.qps) {
      uint32_t free = cap.qps - std::min(cap.qps, used.qps);
      return make(sw, "qps", d.qps, free, cap.qps,
                  absl::StrFormat("switch %s has %d of %d QPs free, needs %d for tree links",
                                  spec.name, free, cap.qps, d.qps));
    }
  }
  // Every new link joins two subtree nodes, so all QP demand was checked.
  return std::nullopt;
}

std::optional<Shortfall> Allocator::CheckTree(const Tree& tree, const GroupRequest& request,
                                              Placement* placement) const {
  absl::StatusOr<Subtree> sub = TrimSubtree(*topo_, tree, request.members);
  if (!sub.ok()) {
    Shortfall s;
    s.tree_id = static_cast<int>(tree.id);
    s.resource = "tree";
    s.needed = 1;
    s.capacity = 1;
    s.reason = std::string(sub.status().message());
    return s;
  }
  placement->subtree = *std::move(sub);
  placement->num_slots = request.num_slots;
  placement->slot_bytes = request.slot_bytes;
  return CheckNodes(tree, placement, /*require_usable=*/true);
}

std::optional<Shortfall> Allocator::CheckPlacement(Placement* placement,
                                                   bool require_usable) const {
  const uint32_t id = placement->tree_id();
  if (id >= trees_.size()) {
    Shortfall s;
    s.resource = "tree";
    s.needed = 1;
    s.reason = absl::StrFormat("there is no tree %d", id);
    return s;
  }
  return CheckNodes(trees_[id], placement, require_usable);
}

absl::StatusOr<Placement> Allocator::PlanGroup(const GroupRequest& request,
                                               std::vector<Shortfall>* why,
                                               std::optional<uint32_t> avoid_tree) const {
  if (why != nullptr) why->clear();
  if (request.members.empty()) return absl::InvalidArgumentError("a group needs members");
  if (request.num_slots == 0 || request.slot_bytes == 0) {
    return absl::InvalidArgumentError("a group needs at least one slot of at least one byte");
  }
  std::vector<uint32_t> order(trees_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    bool avoid_a = avoid_tree.has_value() && *avoid_tree == a;
    bool avoid_b = avoid_tree.has_value() && *avoid_tree == b;
    if (avoid_a != avoid_b) return avoid_b;
    return tree_load_[a] < tree_load_[b];
  });
  std::vector<Shortfall> shortfalls;
  bool any_tree_holds_members = false;
  for (uint32_t id : order) {
    if (topo_->switch_at(trees_[id].root).plane != request.plane) continue;
    Placement placement;
    std::optional<Shortfall> s = CheckTree(trees_[id], request, &placement);
    if (!s.has_value()) return placement;
    any_tree_holds_members = any_tree_holds_members || s->resource != "tree";
    shortfalls.push_back(*std::move(s));
  }
  std::sort(shortfalls.begin(), shortfalls.end(),
            [](const Shortfall& a, const Shortfall& b) { return a.tree_id < b.tree_id; });
  std::string text = absl::StrFormat(
      "no tree can host the group (%d members, K=%d slots x %d B): %s", request.members.size(),
      request.num_slots, request.slot_bytes, JoinShortfalls(shortfalls));
  if (why != nullptr) *why = std::move(shortfalls);
  if (!any_tree_holds_members) return absl::FailedPreconditionError(text);
  return absl::ResourceExhaustedError(text);
}

absl::Status Allocator::Reserve(const Placement& placement, bool require_usable) {
  Placement check = placement;
  if (std::optional<Shortfall> s = CheckPlacement(&check, require_usable)) {
    return absl::ResourceExhaustedError(JoinShortfalls({*s}));
  }
  const uint32_t id = placement.tree_id();
  for (const SubtreeNode& node : placement.subtree.nodes) {
    Usage& u = switches_[node.switch_index].used;
    u.groups += 1;
    u.slots += placement.num_slots;
  }
  for (int child : check.new_links) {
    link(id, child).reserved = true;
    switches_[child].used.qps += 1;
    switches_[trees_[id].parent[child]].used.qps += 1;
  }
  tree_load_[id] += 1;
  return absl::OkStatus();
}

void Allocator::Release(const Placement& placement) {
  for (const SubtreeNode& node : placement.subtree.nodes) {
    Usage& u = switches_[node.switch_index].used;
    if (u.groups == 0 || u.slots < placement.num_slots) {
      NETFOLD_LOG(kError) << "allocator: releasing more than reserved on "
                          << topo_->switch_at(node.switch_index).name;
    }
    u.groups -= std::min(u.groups, 1u);
    u.slots -= std::min(u.slots, placement.num_slots);
  }
  uint32_t& load = tree_load_[placement.tree_id()];
  load -= std::min(load, 1u);
}

absl::Status Allocator::ReserveLink(uint32_t tree_id, int child) {
  if (tree_id >= trees_.size() || !trees_[tree_id].Contains(child) ||
      trees_[tree_id].parent[child] < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no link above switch %d in tree %d", child, tree_id));
  }
  LinkLedger& l = link(tree_id, child);
  if (l.reserved) return absl::OkStatus();
  int parent = trees_[tree_id].parent[child];
  for (int sw : {child, parent}) {
    const Capacity& cap = topo_->switch_at(sw).capacity;
    if (switches_[sw].used.qps + 1 > cap.qps) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("switch %s has 0 of %d QPs free, needs 1 for a tree link",
                          topo_->switch_at(sw).name, cap.qps));
    }
  }
  l.reserved = true;
  switches_[child].used.qps += 1;
  switches_[parent].used.qps += 1;
  return absl::OkStatus();
}

void Allocator::ReleaseLink(uint32_t tree_id, int child) {
  LinkLedger& l = link(tree_id, child);
  if (!l.reserved) return;
  l.reserved = false;
  for (int sw : {child, trees_[tree_id].parent[child]}) {
    Usage& u = switches_[sw].used;
    u.qps -= std::min(u.qps, 1u);
  }
}

absl::Status Allocator::ReserveQps(const std::vector<std::pair<int, uint32_t>>& per_switch,
                                   std::vector<Shortfall>* why) {
  std::map<int, uint64_t> demand;
  for (const auto& [sw, count] : per_switch) demand[sw] += count;
  for (const auto& [sw, count] : demand) {
    const SwitchSpec& spec = topo_->switch_at(sw);
    const Usage& used = switches_[sw].used;
    if (used.qps + count > spec.capacity.qps) {
      Shortfall s;
      s.switch_index = sw;
      s.switch_name = spec.name;
      s.resource = "qps";
      s.needed = count;
      s.free = spec.capacity.qps - std::min(spec.capacity.qps, used.qps);
      s.capacity = spec.capacity.qps;
      s.reason = absl::StrFormat("switch %s has %d of %d QPs free, needs %d for ranks", spec.name,
                                 s.free, s.capacity, count);
      if (why != nullptr) why->push_back(s);
      return absl::ResourceExhaustedError(s.reason);
    }
  }
  for (const auto& [sw, count] : demand) switches_[sw].used.qps += static_cast<uint32_t>(count);
  return absl::OkStatus();
}

void Allocator::ReleaseQps(const std::vector<std::pair<int, uint32_t>>& per_switch) {
  for (const auto& [sw, count] : per_switch) {
    Usage& u = switches_[sw].used;
    u.qps -= std::min(u.qps, count);
  }
}

}  // namespace netfold::manager
