#include "manager/recovery.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/status_macros.h"
#include "proto/aggregation_tag.h"

namespace netfold::manager {
namespace {

// What recovery has rebuilt so far, and what it has to write when done.
struct Rebuild {
  FabricState& state;
  absl::Duration now;
  std::vector<state::JournalEntry> drops;
  std::set<int> holders;  // switches holding recovered state
  uint64_t next_job_id = 1;
  uint64_t next_group_id = 1;
};

const Tree* TreeByRoot(const FabricState& state, const std::string& root) {
  for (const Tree& t : state.alloc.trees()) {
    if (state.SwitchName(t.root) == root) return &t;
  }
  return nullptr;
}

void RecoverJob(const state::JobRecord& rec, Rebuild& b) {
  const Topology& topo = b.state.topo;
  Job job;
  job.id = rec.job_id();
  job.name = rec.name();
  job.key = rec.key();
  job.pkey = rec.pkey();
  job.qkey = rec.qkey();
  job.integrity_key = rec.integrity_key();
  job.quota.set_max_groups(rec.max_groups());
  job.quota.set_num_slots(rec.num_slots());
  job.quota.set_slot_bytes(rec.slot_bytes());
  bool ok = job.key.size() == kJobKeyBytes &&
            (job.integrity_key.empty() || job.integrity_key.size() == proto::kAggregationKeySize);
  std::map<int, uint32_t> qps;
  for (const state::RankRecord& r : rec.ranks()) {
    int host = topo.FindHost(r.host());
    if (host < 0) {
      NETFOLD_LOG(kWarning) << "recover: job " << job.id << " rank " << r.rank()
                            << " is on unknown host '" << r.host() << "'";
      ok = false;
      break;
    }
    Rank rank;
    rank.rank = r.rank();
    rank.host = r.host();
    rank.leaf = topo.host_at(host).switch_index;
    ReadAttachment(r, &rank);  // plane 0's
    rank.last_seen = b.now;
    for (const state::PlaneAttachmentRecord& pr : r.planes()) {
      if (pr.plane() == 0 || pr.plane() >= topo.planes() || rank.planes.count(pr.plane())) {
        // A topology with fewer planes than before: the attachment is
        // forgotten (the snapshot written at the end of recovery leaves it
        // out; the plane's switch is no longer the manager's, so its QP
        // stays there until that switch restarts), the job and its other
        // planes go on. The ranks' libraries learn it from their next
        // group in that plane, which the manager refuses.
        NETFOLD_LOG(kWarning) << "recover: job " << job.id << " rank " << r.rank()
                              << ": forgetting its attachment in plane " << pr.plane()
                              << ", which the topology does not have (or names twice)";
        continue;
      }
      LeafAttachment& a = rank.planes[pr.plane()];
      a.leaf = topo.LeafIn(host, pr.plane());
      ReadAttachment(pr, &a);
    }
    rank.ForEachAttachment([&](uint32_t, const LeafAttachment& a) {
      qps[a.leaf] += 1;
      if (a.attached) b.holders.insert(a.leaf);
    });
    job.ranks[rank.rank] = rank;
  }
  if (ok) {
    std::vector<std::pair<int, uint32_t>> per_leaf(qps.begin(), qps.end());
    absl::Status s = b.state.alloc.ReserveQps(per_leaf, nullptr);
    if (!s.ok()) {
      NETFOLD_LOG(kWarning) << "recover: job " << job.id << ": " << s.message();
      ok = false;
    }
  }
  if (!ok) {
    NETFOLD_LOG(kWarning) << "recover: dropping job " << job.id;
    state::JournalEntry e;
    e.set_delete_job(job.id);
    b.drops.push_back(e);
    return;
  }
  b.next_job_id = std::max(b.next_job_id, job.id + 1);
  if (job.pkey != kDefaultPkey) b.state.pkeys_used.insert(job.pkey);
  b.state.jobs[job.id] = std::move(job);
}

void RecoverLink(const state::LinkRecord& rec, Rebuild& b) {
  const Topology& topo = b.state.topo;
  const Tree* tree = TreeByRoot(b.state, rec.tree_root());
  int child = topo.FindSwitch(rec.child());
  int parent = topo.FindSwitch(rec.parent());
  if (tree == nullptr || child < 0 || parent < 0 || !tree->Contains(child) ||
      tree->parent[child] != parent || !b.state.alloc.ReserveLink(tree->id, child).ok()) {
    NETFOLD_LOG(kWarning) << "recover: dropping link " << rec.child() << " -> " << rec.parent()
                          << " of tree " << rec.tree_root();
    state::JournalEntry e;
    *e.mutable_delete_link() = rec;
    b.drops.push_back(e);
    return;
  }
  Link link;
  link.tree_id = tree->id;
  link.child = child;
  link.parent = parent;
  link.parent_qpn = rec.parent_qpn();
  link.parent_psn = rec.parent_psn();
  link.child_qpn = rec.child_qpn();
  link.child_psn = rec.child_psn();
  link.connected = true;
  b.state.links[{tree->id, child}] = link;
  b.holders.insert(child);
  b.holders.insert(parent);
}

// The subtree of a recorded group, by switch index; false if a switch is
// unknown or a host rank is not an attached rank of `job` on that switch.
bool RecoverNodes(const state::GroupRecord& rec, const Job& job, const Topology& topo,
                  std::vector<SubtreeNode>* nodes) {
  bool ok = true;
  for (const state::NodeRecord& n : rec.nodes()) {
    SubtreeNode node;
    node.switch_index = topo.FindSwitch(n.switch_name());
    node.parent = n.parent().empty() ? -1 : topo.FindSwitch(n.parent());
    node.host_ranks.assign(n.host_ranks().begin(), n.host_ranks().end());
    for (const std::string& c : n.child_switches()) {
      node.child_switches.push_back(topo.FindSwitch(c));
    }
    ok = ok && node.switch_index >= 0 && (n.parent().empty() || node.parent >= 0);
    for (int c : node.child_switches) ok = ok && c >= 0;
    for (uint32_t r : node.host_ranks) {
      auto rank_it = job.ranks.find(r);
      const LeafAttachment* a =
          rank_it == job.ranks.end() || node.switch_index < 0
              ? nullptr
              : rank_it->second.In(topo.switch_at(node.switch_index).plane);
      ok = ok && a != nullptr && a->attached && a->leaf == node.switch_index;
    }
    nodes->push_back(std::move(node));
  }
  return ok;
}

void RecoverGroup(const state::GroupRecord& rec, Rebuild& b) {
  FabricState& state = b.state;
  auto job_it = state.jobs.find(rec.job_id());
  const Tree* tree = TreeByRoot(state, rec.tree_root());
  bool ok = job_it != state.jobs.end() && tree != nullptr && rec.nodes_size() > 0;
  Group g;
  g.id = rec.group_id();
  g.job_id = rec.job_id();
  g.epoch = rec.epoch();
  g.ranks.assign(rec.ranks().begin(), rec.ranks().end());
  g.delivery = static_cast<control::DeliveryMode>(rec.delivery());
  g.multicast_index = rec.multicast_index();
  g.tag = rec.tag();
  g.state = GroupState::kReady;
  if (ok) {
    g.placement.subtree.tree_id = tree->id;
    g.placement.num_slots = rec.num_slots();
    g.placement.slot_bytes = rec.slot_bytes();
    ok = RecoverNodes(rec, job_it->second, state.topo, &g.placement.subtree.nodes);
  }
  if (ok) {
    Placement check = g.placement;
    std::optional<Shortfall> s = state.alloc.CheckPlacement(&check, /*require_usable=*/false);
    ok =
        !s.has_value() && check.new_links.empty() && !state.multicast_used.count(g.multicast_index);
    if (ok) ok = state.alloc.Reserve(g.placement, /*require_usable=*/false).ok();
  }
  if (!ok) {
    NETFOLD_LOG(kWarning) << "recover: dropping group " << g.id << " of job " << g.job_id
                          << " (it no longer fits the topology or its links)";
    state::JournalEntry e;
    e.set_delete_group(g.id);
    b.drops.push_back(e);
    return;
  }
  for (const SubtreeNode& n : g.placement.subtree.nodes) b.holders.insert(n.switch_index);
  b.next_group_id = std::max(b.next_group_id, g.id + 1);
  state.multicast_used.insert(g.multicast_index);
  job_it->second.groups.insert(g.id);
  state.groups[g.id] = std::move(g);
}

// A switch's agent retries a lost manager every 500 ms at most
// (SwitchAgentOptions::reconnect_max), and its gRPC channel has a backoff of
// its own of up to 500 ms + 20 % under that: up to ~1.1 s pass before a
// switch can register with a manager that is back. Its timeout counts from
// then, as the hosts' does (kHostReconnectAllowance).
constexpr absl::Duration kSwitchReconnectAllowance = absl::Seconds(1);

absl::Duration ReregistrationGrace(const FabricState& state) {
  return std::max(state.options.switch_timeout, 2 * state.options.heartbeat_interval) +
         kSwitchReconnectAllowance;
}

// The hosts' heartbeats fail while the manager is away, and their gRPC
// channels retry it at least every kHostReconnectBackoffMax (500 ms, with
// up to 20% jitter; docs/control_plane.md): a full host_timeout counts from
// when they can have found it again.
constexpr absl::Duration kHostReconnectAllowance = absl::Seconds(1);

absl::Duration RankGrace(const FabricState& state) {
  return state.options.host_timeout + kHostReconnectAllowance;
}

}  // namespace

absl::Status RecoverFabricState(const state::Snapshot& snap, FabricState* state) {
  const Topology& topo = state->topo;
  if (!snap.topology_name().empty() && snap.topology_name() != topo.name()) {
    NETFOLD_LOG(kWarning) << "state was written for topology '" << snap.topology_name()
                          << "', now running '" << topo.name()
                          << "': objects are matched by switch and host names";
  }
  Rebuild b{.state = *state, .now = state->clock.Now()};
  b.next_job_id = std::max<uint64_t>(1, snap.counters().job_id_limit());
  b.next_group_id = std::max<uint64_t>(1, snap.counters().group_id_limit());
  for (const state::JobRecord& rec : snap.jobs()) RecoverJob(rec, b);
  for (const state::LinkRecord& rec : snap.links()) RecoverLink(rec, b);
  for (const state::GroupRecord& rec : snap.groups()) RecoverGroup(rec, b);

  state->records.StartIdsAt(b.next_job_id, b.next_group_id);
  for (int sw : b.holders) state->switches[sw].grace_until = b.now + ReregistrationGrace(*state);
  if (!state->jobs.empty()) state->ranks_grace_until = b.now + RankGrace(*state);

  for (const state::JournalEntry& e : b.drops) NETFOLD_RETURN_IF_ERROR(state->records.Append(e));
  NETFOLD_RETURN_IF_ERROR(state->records.WriteSnapshot(state->Snapshot()));
  NETFOLD_LOG(kInfo) << "recovered " << state->jobs.size() << " jobs, " << state->groups.size()
                     << " groups, " << state->links.size() << " tree links; waiting for "
                     << b.holders.size() << " switches to re-register";
  return absl::OkStatus();
}

void RestartReregistrationGrace(FabricState* state) {
  if (state->ranks_grace_until > absl::ZeroDuration()) {
    state->ranks_grace_until = state->clock.Now() + RankGrace(*state);
  }
  const absl::Duration until = state->clock.Now() + ReregistrationGrace(*state);
  for (Switch& s : state->switches) {
    if (s.state == SwitchState::kUnknown && s.grace_until > absl::ZeroDuration()) {
      s.grace_until = until;
    }
  }
}

}  // namespace netfold::manager
