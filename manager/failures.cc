#include "manager/failures.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "manager/group_installer.h"

namespace netfold::manager {

Fallout SwitchDied(FabricState& state, int sw) {
  Fallout f;
  Switch& s = state.switches[sw];
  f.reason = absl::StrFormat("switch %s is dead: %s", state.SwitchName(sw), s.dead_reason);
  NETFOLD_LOG(kWarning) << f.reason;
  state.SetSwitchState(sw, SwitchState::kDead, s.dead_reason);
  s.death_pending = false;
  s.grace_until = absl::ZeroDuration();
  s.session = 0;
  s.reported = control::ResourceUsage();
  std::vector<LinkKey> keys;
  for (const auto& [key, link] : state.links) {
    if (link.child == sw || link.parent == sw) keys.push_back(key);
  }
  for (const LinkKey& key : keys) {
    std::vector<uint64_t> g = state.DropLink(key, f.reason, /*mark_down=*/false, &f.out);
    f.lost_groups.insert(f.lost_groups.end(), g.begin(), g.end());
  }
  // The ranks lose their attachment in the dead leaf's plane only.
  const uint32_t plane = state.topo.switch_at(sw).plane;
  for (auto& [jid, job] : state.jobs) {
    std::vector<uint32_t> ranks;
    for (const auto& [r, rank] : job.ranks) {
      const LeafAttachment* a = rank.In(plane);
      if (a != nullptr && a->leaf == sw && a->attached) ranks.push_back(r);
    }
    if (ranks.empty()) continue;
    std::vector<uint64_t> g =
        state.DetachRanks(job, ranks, f.reason, /*destroy_qp=*/false, &f.out, plane);
    f.lost_groups.insert(f.lost_groups.end(), g.begin(), g.end());
  }
  for (const auto& [gid, g] : state.groups) {
    if (g.placement.subtree.Find(sw) != nullptr) f.lost_groups.push_back(gid);
  }
  return f;
}

std::optional<Fallout> QpFailed(FabricState& state, int sw, uint32_t qpn, std::string_view why) {
  Fallout f;
  f.reason = absl::StrFormat("QP %d on switch %s failed: %s", qpn, state.SwitchName(sw), why);
  const uint32_t plane = state.topo.switch_at(sw).plane;
  for (auto& [jid, job] : state.jobs) {
    for (auto& [r, rank] : job.ranks) {
      const LeafAttachment* a = rank.In(plane);
      if (a != nullptr && a->attached && a->leaf == sw && a->leaf_qpn == qpn) {
        f.lost_groups = state.DetachRanks(job, {r}, f.reason, /*destroy_qp=*/true, &f.out, plane);
        return f;
      }
    }
  }
  for (const auto& [key, link] : state.links) {
    if ((link.parent == sw && link.parent_qpn == qpn) ||
        (link.child == sw && link.child_qpn == qpn)) {
      const LinkKey k = key;  // DropLink erases the entry `key` refers to
      f.lost_groups = state.DropLink(k, f.reason, /*mark_down=*/true, &f.out);
      return f;
    }
  }
  NETFOLD_LOG(kInfo) << "ignoring error report for unknown " << f.reason;
  return std::nullopt;
}

std::optional<Reconciliation> PlanReconcile(FabricState& state, int sw) {
  Switch& s = state.switches[sw];
  if (s.state != SwitchState::kReconciling) return std::nullopt;
  Reconciliation plan;
  Fallout& f = plan.fallout;
  const std::string& name = state.SwitchName(sw);
  f.reason = absl::StrFormat("switch %s came back without it (restarted?)", name);
  std::set<uint32_t> expected_qpns;
  const uint32_t plane = state.topo.switch_at(sw).plane;
  for (auto& [jid, job] : state.jobs) {
    std::vector<uint32_t> missing;
    for (const auto& [r, rank] : job.ranks) {
      const LeafAttachment* a = rank.In(plane);
      if (a == nullptr || a->leaf != sw || !a->attached) continue;
      if (s.reported_qpns.count(a->leaf_qpn)) {
        expected_qpns.insert(a->leaf_qpn);
      } else {
        missing.push_back(r);
      }
    }
    if (missing.empty()) continue;
    std::vector<uint64_t> g = state.DetachRanks(
        job, missing, absl::StrFormat("switch %s lost the ranks' QPs (restarted?)", name),
        /*destroy_qp=*/false, &f.out, plane);
    f.lost_groups.insert(f.lost_groups.end(), g.begin(), g.end());
  }
  std::vector<LinkKey> lost;
  for (const auto& [key, link] : state.links) {
    if (link.child != sw && link.parent != sw) continue;
    const uint32_t qpn = link.child == sw ? link.child_qpn : link.parent_qpn;
    if (s.reported_qpns.count(qpn)) {
      expected_qpns.insert(qpn);
    } else {
      lost.push_back(key);
    }
  }
  for (const LinkKey& key : lost) {
    std::vector<uint64_t> g = state.DropLink(key, f.reason, /*mark_down=*/false, &f.out);
    f.lost_groups.insert(f.lost_groups.end(), g.begin(), g.end());
  }
  for (uint32_t qpn : s.reported_qpns) {
    if (expected_qpns.count(qpn)) continue;
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(qpn);
    f.out.Add(name, std::move(m));
  }
  std::sort(f.lost_groups.begin(), f.lost_groups.end());
  std::set<std::pair<uint64_t, uint32_t>> expected_groups;
  for (const auto& [gid, g] : state.groups) {
    if (std::binary_search(f.lost_groups.begin(), f.lost_groups.end(), gid)) continue;
    const SubtreeNode* node = g.placement.subtree.Find(sw);
    if (node == nullptr) continue;
    expected_groups.emplace(gid, g.epoch);
    if (!s.reported_groups.count({gid, g.epoch}) && g.state == GroupState::kReady) {
      plan.installs.push_back({name, InstallMessage(state, g, *node)});
      plan.install_groups.push_back(gid);
    }
  }
  for (const auto& [gid, epoch] : s.reported_groups) {
    if (expected_groups.count({gid, epoch})) continue;
    control::ManagerMessage m;
    m.mutable_remove_group()->set_group_id(gid);
    m.mutable_remove_group()->set_epoch(epoch);
    f.out.Add(name, std::move(m));
  }
  NETFOLD_LOG(kInfo) << "reconciling switch " << name << ": " << f.out.commands.size()
                     << " removals, " << plan.installs.size() << " re-installs, "
                     << f.lost_groups.size() << " groups lost";
  return plan;
}

void EndReconcile(FabricState& state, int sw) {
  Switch& s = state.switches[sw];
  if (s.state != SwitchState::kReconciling || s.death_pending) return;
  s.reported_groups.clear();
  s.reported_qpns.clear();
  s.grace_until = absl::ZeroDuration();
  state.SetSwitchState(sw, SwitchState::kUp, "");
}

}  // namespace netfold::manager
