// The resource side of the aggregation manager: what every switch holds, on
// which tree a group goes, and why a request does not fit.
//
//   Allocator alloc(topo, PlanTrees(topo));
//   alloc.SetSwitchUsable(leaf, true, "");
//   std::vector<Shortfall> why;
//   absl::StatusOr<Placement> p = alloc.PlanGroup({members, /*K=*/4, /*P=*/1024}, &why);
//   if (p.ok()) NETFOLD_RETURN_IF_ERROR(alloc.Reserve(*p));
//   ...
//   alloc.Release(*p);                       // when the group is destroyed
//
// Resources per switch: groups (one node state per group), slots (K per
// group on every node of its subtree), QPs (one per attached rank on its
// leaf, and one at each end of every connected tree link). A slot's payload
// P must not exceed the switch's slot_bytes. Reservations are all or
// nothing: a request that does not fit leaves nothing behind, and the
// returned Shortfall names the node, the resource, what was needed and what
// is free. Tree links (tree, child -> parent) get their QP pair reserved
// the first time a placement uses them and keep it until ReleaseLink (the
// link is infrastructure shared by every group on that tree).
//
// Not thread-safe: the manager serializes access under its own lock.
#ifndef NETFOLD_MANAGER_ALLOCATOR_H_
#define NETFOLD_MANAGER_ALLOCATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/topology.h"
#include "manager/tree_planner.h"

namespace netfold::manager {

struct Usage {
  uint32_t groups = 0;
  uint32_t slots = 0;
  uint32_t qps = 0;
  bool operator==(const Usage&) const = default;
};

// One reason a request does not fit (mirrors control.Shortfall).
struct Shortfall {
  int tree_id = -1;  // -1: not specific to a tree
  int switch_index = -1;
  std::string switch_name;
  std::string resource;  // groups, slots, slot_bytes, qps, switch, link, tree, quota, ...
  uint64_t needed = 0;
  uint64_t free = 0;
  uint64_t capacity = 0;
  std::string reason;  // one line, complete on its own
};

// "tree 1: switch agg00 has 2 of 256 slots free, needs 4" style summary of
// several shortfalls, joined with "; ".
std::string JoinShortfalls(const std::vector<Shortfall>& shortfalls);

struct GroupRequest {
  std::vector<MemberLeaf> members;  // (rank, leaf switch index), distinct ranks
  uint32_t num_slots = 0;           // K
  uint32_t slot_bytes = 0;          // P
  uint32_t plane = 0;               // only this data plane's trees (members' leaves there)
};

// Where a group goes and what it holds. `new_links` are the child switches
// whose link to their parent in this tree gets its QP pair reserved by
// Reserve (filled in by PlanGroup; empty once they are connected).
struct Placement {
  Subtree subtree;
  uint32_t num_slots = 0;
  uint32_t slot_bytes = 0;
  std::vector<int> new_links;
  uint32_t tree_id() const { return subtree.tree_id; }
};

class Allocator {
 public:
  Allocator(const Topology& topo, std::vector<Tree> trees);

  const Topology& topology() const { return *topo_; }
  const std::vector<Tree>& trees() const { return trees_; }

  // Whether new reservations may use a switch (dead or unregistered
  // switches may not). `reason` explains an unusable switch ("dead: missed
  // heartbeats"). All switches start unusable ("not registered").
  void SetSwitchUsable(int switch_index, bool usable, std::string reason);
  bool SwitchUsable(int switch_index) const { return switches_[switch_index].usable; }

  // Links are named by their child switch in a tree. A link is down after a
  // failure until set up again; it is connected once its QP pair exists.
  void SetLinkDown(uint32_t tree_id, int child, bool down, std::string reason);
  bool LinkDown(uint32_t tree_id, int child) const;
  bool LinkReserved(uint32_t tree_id, int child) const;

  // Chooses the least loaded usable tree that fits (fewest groups, then
  // lowest id) and trims the subtree. On failure returns ResourceExhausted
  // (or FailedPrecondition when no tree could ever hold the members) whose
  // message explains every tree, and fills `why` (may be null) with one
  // shortfall per tree. Reserves nothing. `avoid_tree`, if set, is tried
  // last (re-planning away from a failed tree).
  absl::StatusOr<Placement> PlanGroup(const GroupRequest& request, std::vector<Shortfall>* why,
                                      std::optional<uint32_t> avoid_tree = std::nullopt) const;

  // Same checks for one given tree and subtree; fills placement->new_links.
  // `require_usable` false skips the switch-usability check (re-reserving
  // persisted groups before their switches re-registered).
  std::optional<Shortfall> CheckPlacement(Placement* placement, bool require_usable = true) const;

  // Reserves a placement's groups and slots on every node and the QP pairs of
  // its new links. All or nothing: ResourceExhausted with the shortfall.
  absl::Status Reserve(const Placement& placement, bool require_usable = true);
  // Releases a placement's groups and slots (not its links).
  void Release(const Placement& placement);
  // Releases the QP pair of a reserved link (link down, or switch dead).
  void ReleaseLink(uint32_t tree_id, int child);
  // Reserves a link's QP pair outside a placement (reload from the journal).
  absl::Status ReserveLink(uint32_t tree_id, int child);

  // QPs toward hosts: `count` QPs on each listed switch, all or nothing.
  absl::Status ReserveQps(const std::vector<std::pair<int, uint32_t>>& per_switch,
                          std::vector<Shortfall>* why);
  void ReleaseQps(const std::vector<std::pair<int, uint32_t>>& per_switch);

  const Usage& used(int switch_index) const { return switches_[switch_index].used; }
  // Groups currently placed on a tree.
  uint32_t tree_load(uint32_t tree_id) const { return tree_load_[tree_id]; }
  // Trees a switch belongs to.
  uint32_t trees_of(int switch_index) const;

 private:
  struct SwitchLedger {
    Usage used;
    bool usable = false;
    std::string unusable_reason = "not registered";
  };
  struct LinkLedger {
    bool reserved = false;
    bool down = false;
    std::string down_reason;
  };

  std::optional<Shortfall> CheckTree(const Tree& tree, const GroupRequest& request,
                                     Placement* placement) const;
  std::optional<Shortfall> CheckNodes(const Tree& tree, Placement* placement,
                                      bool require_usable) const;
  LinkLedger& link(uint32_t tree_id, int child) { return links_[tree_id][child]; }
  const LinkLedger& link(uint32_t tree_id, int child) const { return links_[tree_id][child]; }

  const Topology* topo_;
  std::vector<Tree> trees_;
  std::vector<SwitchLedger> switches_;
  std::vector<std::vector<LinkLedger>> links_;  // [tree][child switch]
  std::vector<uint32_t> tree_load_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_ALLOCATOR_H_
