#include "manager/fabric_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/log.h"

namespace netfold::manager {
namespace {

constexpr uint32_t kRocePort = 4791;
constexpr uint32_t kMaxMulticastIndex = 65534;

}  // namespace

std::string RanksText(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) {
    out += absl::StrFormat("%s%d", i == 0 ? "" : ",", ranks[i]);
  }
  if (ranks.size() > 16) out += absl::StrFormat(",... (%d ranks)", ranks.size());
  return out;
}

FabricState::FabricState(const Topology& topo, const ManagerOptions& options, Clock& clock,
                         Journal* journal, uint64_t incarnation)
    : topo(topo),
      options(options),
      clock(clock),
      alloc(topo, PlanTrees(topo)),
      records(topo, alloc.trees(), journal, options.snapshot_every),
      events(incarnation, options.events_per_job),
      switches(topo.num_switches()) {}

// ---------------------------------------------------------------------------
// Queries

bool FabricState::Reachable(int sw) const {
  const SwitchState st = switches[sw].state;
  return st == SwitchState::kUp || st == SwitchState::kReconciling;
}

std::string FabricState::MulticastAddress(uint32_t index) const {
  return absl::StrFormat("%s.%d.%d:%d", options.multicast_prefix, index >> 8, index & 0xff,
                         kRocePort);
}

control::GroupInfo FabricState::DescribeGroup(const Group& g) const {
  control::GroupInfo info;
  info.set_group_id(g.id);
  info.set_tree_id(g.placement.tree_id());
  info.set_epoch(g.epoch);
  info.set_num_slots(g.placement.num_slots);
  info.set_slot_bytes(g.placement.slot_bytes);
  info.set_delivery(g.delivery);
  info.set_multicast_address(MulticastAddress(g.multicast_index));
  info.set_root_switch(SwitchName(g.placement.subtree.root()));
  if (const int root = g.placement.subtree.root();
      root >= 0 && static_cast<size_t>(root) < switches.size()) {
    info.set_root_data_address(switches[static_cast<size_t>(root)].data_address);
  }
  info.set_tag(g.tag);
  info.set_plane(GroupPlane(g));
  for (uint32_t r : g.ranks) {
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      auto pos = std::find(n.host_ranks.begin(), n.host_ranks.end(), r);
      if (pos == n.host_ranks.end()) continue;
      control::GroupMember* m = info.add_members();
      m->set_rank(r);
      m->set_leaf_switch(SwitchName(n.switch_index));
      m->set_child_index(static_cast<uint32_t>(pos - n.host_ranks.begin()));
    }
  }
  const std::vector<SubtreeNode>& nodes = g.placement.subtree.nodes;
  for (const SubtreeNode& n : nodes) {
    info.add_switches(SwitchName(n.switch_index));
    control::GroupNode* node = info.add_nodes();
    node->set_name(SwitchName(n.switch_index));
    // The reduction order: host ranks, then child switches.
    for (uint32_t r : n.host_ranks) node->add_children(-1 - static_cast<int32_t>(r));
    for (int child : n.child_switches) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].switch_index == child) node->add_children(static_cast<int32_t>(i));
      }
    }
  }
  return info;
}

// ---------------------------------------------------------------------------
// Transitions

void FabricState::SetSwitchState(int sw, SwitchState state, const std::string& reason) {
  Switch& s = switches[sw];
  if (s.state != state) {
    NETFOLD_LOG(kInfo) << "switch " << SwitchName(sw) << ": state " << static_cast<int>(s.state)
                       << " -> " << static_cast<int>(state) << (reason.empty() ? "" : " (")
                       << reason << (reason.empty() ? "" : ")");
  }
  s.state = state;
  alloc.SetSwitchUsable(sw, state == SwitchState::kUp,
                        state == SwitchState::kDead          ? "dead: " + reason
                        : state == SwitchState::kReconciling ? "reconciling after registration"
                                                             : "not registered");
}

uint32_t FabricState::AllocateMulticast(uint64_t group_id) {
  const uint32_t start =
      static_cast<uint32_t>((group_id + kMaxMulticastIndex - 1) % kMaxMulticastIndex);
  for (uint32_t n = 0; n < kMaxMulticastIndex; ++n) {
    const uint32_t i = (start + n) % kMaxMulticastIndex + 1;  // 1 to kMaxMulticastIndex
    if ((i & 0xff) == 0 || (i & 0xff) == 0xff) continue;
    if (!multicast_used.count(i)) {
      multicast_used.insert(i);
      return i;
    }
  }
  return 0;
}

void FabricState::ReleaseGroup(Group& g, Outbox* out) {
  alloc.Release(g.placement);
  for (const SubtreeNode& n : g.placement.subtree.nodes) {
    if (!Reachable(n.switch_index)) continue;
    control::ManagerMessage m;
    m.mutable_remove_group()->set_group_id(g.id);
    m.mutable_remove_group()->set_epoch(g.epoch);
    out->Add(SwitchName(n.switch_index), std::move(m));
  }
}

void FabricState::EraseGroup(uint64_t group_id, const std::string& reason, bool notify) {
  auto it = groups.find(group_id);
  if (it == groups.end()) return;
  Group g = std::move(it->second);
  groups.erase(it);
  if (!records.DeleteGroup(group_id).ok()) {
    NETFOLD_LOG(kError) << "group " << group_id << " not journaled";
  }
  auto job_it = jobs.find(g.job_id);
  if (job_it == jobs.end()) {
    multicast_used.erase(g.multicast_index);
    return;
  }
  job_it->second.groups.erase(group_id);
  if (notify && g.multicast_index != 0) {
    // Revoked: its members learn it when they next look, and stay joined
    // until they destroy it.
    job_it->second.revoked_multicast[group_id] = g.multicast_index;
  } else {
    multicast_used.erase(g.multicast_index);
  }
  if (notify) {
    NETFOLD_LOG(kWarning) << "group " << group_id << " of job " << g.job_id
                          << " revoked: " << reason;
    control::JobEvent ev;
    ev.set_kind(control::JobEvent::GROUP_REVOKED);
    ev.set_group_id(group_id);
    ev.set_reason(reason);
    events.Publish(g.job_id, ev, g.ranks);
  }
}

bool FabricState::ReleaseRevokedGroup(Job& job, uint64_t group_id) {
  auto it = job.revoked_multicast.find(group_id);
  if (it == job.revoked_multicast.end()) return false;
  multicast_used.erase(it->second);
  job.revoked_multicast.erase(it);
  return true;
}

void FabricState::DestroyJob(Job& job, const std::string& reason, Outbox* out) {
  const uint64_t id = job.id;
  std::vector<uint64_t> job_groups(job.groups.begin(), job.groups.end());
  for (uint64_t g : job_groups) {
    ReleaseGroup(groups.at(g), out);
    EraseGroup(g, "", /*notify=*/false);
  }
  for (const auto& [group_id, index] : job.revoked_multicast) multicast_used.erase(index);
  job.revoked_multicast.clear();
  std::map<int, uint32_t> qps;
  for (auto& [r, rank] : job.ranks) {
    rank.ForEachAttachment([&](uint32_t, const LeafAttachment& a) {
      qps[a.leaf] += 1;
      if (a.attached && Reachable(a.leaf)) {
        control::ManagerMessage m;
        m.mutable_destroy_qp()->set_qpn(a.leaf_qpn);
        out->Add(SwitchName(a.leaf), std::move(m));
      }
    });
  }
  alloc.ReleaseQps(std::vector<std::pair<int, uint32_t>>(qps.begin(), qps.end()));
  if (job.pkey != kDefaultPkey) pkeys_used.erase(job.pkey);
  control::JobEvent ev;
  ev.set_kind(control::JobEvent::JOB_DESTROYED);
  ev.set_reason(reason);
  events.Publish(id, ev, {});
  events.EndJob(id);
  jobs.erase(id);  // `job` is gone from here on
  if (!records.DeleteJob(id).ok()) {
    NETFOLD_LOG(kError) << "job " << id << " destroyed but not journaled";
  }
  NETFOLD_LOG(kInfo) << "job " << id << " destroyed: " << reason;
  MaybeSnapshot();
}

std::vector<uint64_t> FabricState::DetachRanks(Job& job, const std::vector<uint32_t>& ranks,
                                               const std::string& reason, bool destroy_qp,
                                               Outbox* out, std::optional<uint32_t> only_plane) {
  std::vector<uint64_t> lost;
  // plane -> the ranks detached there, and the PSNs of their attachments
  std::map<uint32_t, std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> detached;
  for (uint32_t r : ranks) {
    Rank& rank = job.ranks.at(r);
    std::set<uint32_t> planes;
    rank.ForEachAttachment([&](uint32_t plane, LeafAttachment& a) {
      if (!a.attached || (only_plane && *only_plane != plane)) return;
      planes.insert(plane);
      detached[plane].first.push_back(r);
      detached[plane].second.push_back(a.host_endpoint.psn());
      a.attached = false;
      if (destroy_qp && Reachable(a.leaf)) {
        control::ManagerMessage m;
        m.mutable_destroy_qp()->set_qpn(a.leaf_qpn);
        out->Add(SwitchName(a.leaf), std::move(m));
      }
      a.leaf_qpn = 0;
      a.leaf_psn = 0;
    });
    for (uint64_t gid : job.groups) {
      const Group& g = groups.at(gid);
      if (planes.count(GroupPlane(g)) && std::binary_search(g.ranks.begin(), g.ranks.end(), r)) {
        lost.push_back(gid);
      }
    }
  }
  if (detached.empty()) return lost;
  (void)records.PutJob(job);
  // One event per plane: a host keeps its attachments in the others.
  for (const auto& [plane, lost_here] : detached) {
    const auto& [in_plane, psns] = lost_here;
    control::JobEvent ev;
    ev.set_kind(control::JobEvent::RANK_DETACHED);
    for (uint32_t r : in_plane) ev.add_ranks(r);
    for (uint32_t psn : psns) ev.add_host_psns(psn);
    ev.set_reason(reason);
    ev.set_plane(plane);
    NETFOLD_LOG(kWarning) << "job " << job.id << ": ranks " << RanksText(in_plane) << " detached"
                          << (plane == 0 ? "" : absl::StrFormat(" in plane %d", plane)) << ": "
                          << reason;
    events.Publish(job.id, ev, {});
  }
  std::sort(lost.begin(), lost.end());
  lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
  return lost;
}

bool FabricState::ReplanGroup(uint64_t group_id, const std::string& reason, Outbox* out) {
  Group& g = groups.at(group_id);
  const uint32_t old_tree = g.placement.tree_id();
  ReleaseGroup(g, out);
  if (!options.replan_on_failure) {
    EraseGroup(group_id, reason, /*notify=*/true);
    return false;
  }
  std::string replan_failure;
  const Job& job = jobs.at(g.job_id);
  GroupRequest req;
  req.num_slots = g.placement.num_slots;
  req.slot_bytes = g.placement.slot_bytes;
  req.plane = GroupPlane(g);
  for (uint32_t r : g.ranks) {
    const LeafAttachment* a = job.ranks.at(r).In(req.plane);
    if (a == nullptr || !a->attached) {
      replan_failure = absl::StrFormat("rank %d is detached", r);
      break;
    }
    req.members.emplace_back(r, a->leaf);
  }
  if (replan_failure.empty()) {
    absl::StatusOr<Placement> p = alloc.PlanGroup(req, nullptr, old_tree);
    absl::Status s = p.ok() ? alloc.Reserve(*p) : p.status();
    if (s.ok()) {
      g.placement = *std::move(p);
      g.epoch += 1;
      g.state = GroupState::kInstalling;
      return true;
    }
    replan_failure = std::string(s.message());
  }
  EraseGroup(group_id, absl::StrFormat("%s; re-plan impossible: %s", reason, replan_failure),
             /*notify=*/true);
  return false;
}

std::vector<uint64_t> FabricState::DropLink(const LinkKey& key, const std::string& reason,
                                            bool mark_down, Outbox* out) {
  std::vector<uint64_t> users;
  auto it = links.find(key);
  if (it == links.end()) return users;
  const Link link = it->second;
  links.erase(it);
  alloc.ReleaseLink(link.tree_id, link.child);
  for (auto [sw, qpn] :
       {std::pair{link.parent, link.parent_qpn}, std::pair{link.child, link.child_qpn}}) {
    if (qpn == 0 || !Reachable(sw)) continue;
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(qpn);
    out->Add(SwitchName(sw), std::move(m));
  }
  (void)records.DeleteLink(link);
  if (mark_down) {
    alloc.SetLinkDown(link.tree_id, link.child, true, reason);
    links_down_until[key] = clock.Now() + options.link_retry_after;
  }
  NETFOLD_LOG(kWarning) << "tree " << link.tree_id << " link " << SwitchName(link.child) << " -> "
                        << SwitchName(link.parent) << " dropped: " << reason;
  for (const auto& [gid, g] : groups) {
    if (g.placement.tree_id() != link.tree_id) continue;
    const SubtreeNode* n = g.placement.subtree.Find(link.child);
    if (n != nullptr && n->parent >= 0) users.push_back(gid);
  }
  return users;
}

// ---------------------------------------------------------------------------
// Tree links being connected

void FabricState::OpenLink(uint32_t tree_id, int child) {
  Link link;
  link.tree_id = tree_id;
  link.child = child;
  link.parent = alloc.trees()[tree_id].parent[child];
  links[{tree_id, child}] = link;
}

void FabricState::LinkConnected(uint32_t tree_id, int child, const control::QpCreated& parent_qp,
                                const control::QpCreated& child_qp) {
  Link& link = links[{tree_id, child}];
  link.parent_qpn = parent_qp.qpn();
  link.parent_psn = parent_qp.psn();
  link.child_qpn = child_qp.qpn();
  link.child_psn = child_qp.psn();
  link.connected = true;
  // A link that is not journaled is only a leak on the switch until the
  // next reconcile, so a journal error does not fail it.
  (void)records.PutLink(link);
}

void FabricState::ForgetLink(uint32_t tree_id, int child) {
  links.erase({tree_id, child});
  alloc.ReleaseLink(tree_id, child);
}

}  // namespace netfold::manager
