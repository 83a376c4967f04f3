#include "manager/group_installer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace netfold::manager {
namespace {

constexpr uint32_t kFabricPkey = kDefaultPkey;  // tree links are the fabric's own

// A QP on one end of a tree link, toward the switch `peer`.
control::ManagerMessage CreateTreeQp(const std::string& peer, uint32_t tree_id) {
  control::ManagerMessage m;
  control::SwitchPeer* p = m.mutable_create_qp()->mutable_peer()->mutable_switch_peer();
  p->set_name(peer);
  p->set_tree_id(tree_id);
  m.mutable_create_qp()->set_pkey(kFabricPkey);
  return m;
}

void SetRemote(const std::string& address, const control::QpCreated& qp,
               control::Endpoint* remote) {
  remote->set_address(address);
  remote->set_qpn(qp.qpn());
  remote->set_psn(qp.psn());
}

// One phase of connecting a tree link: the command it sends (to one end)
// and what it keeps of the answer (nothing when `record` is null).
struct LinkPhase {
  SwitchCommand (*command)(uint32_t tree_id, const LinkAttempt& link);
  void (*record)(const control::CommandResult& result, LinkAttempt* link);
};

// The QP pair comes up the way RC QPs do: the passive end first, then the
// active end straight to RTS toward it, then the passive end to RTS.
constexpr LinkPhase kLinkPhases[] = {
    // 1. The parent's QP, waiting for its peer.
    {[](uint32_t tree_id, const LinkAttempt& l) {
       return SwitchCommand{l.ends.parent_name, CreateTreeQp(l.ends.child_name, tree_id)};
     },
     [](const control::CommandResult& r, LinkAttempt* l) {
       l->parent_qp = r.qp();
       l->parent_created = true;
     }},
    // 2. The child's QP, straight to RTS toward the parent's.
    {[](uint32_t tree_id, const LinkAttempt& l) {
       control::ManagerMessage m = CreateTreeQp(l.ends.parent_name, tree_id);
       SetRemote(l.ends.parent_address, l.parent_qp, m.mutable_create_qp()->mutable_remote());
       return SwitchCommand{l.ends.child_name, std::move(m)};
     },
     [](const control::CommandResult& r, LinkAttempt* l) {
       l->child_qp = r.qp();
       l->child_created = true;
     }},
    // 3. The parent's QP to RTS toward the child's.
    {[](uint32_t, const LinkAttempt& l) {
       control::ManagerMessage m;
       m.mutable_connect_qp()->set_qpn(l.parent_qp.qpn());
       SetRemote(l.ends.child_address, l.child_qp, m.mutable_connect_qp()->mutable_remote());
       return SwitchCommand{l.ends.parent_name, std::move(m)};
     },
     nullptr},
};

// The member ranks at and below `switch_index` in `subtree`, ascending.
std::vector<uint32_t> SubtreeRanks(const Subtree& subtree, int switch_index) {
  std::vector<uint32_t> out;
  std::vector<int> todo = {switch_index};
  while (!todo.empty()) {
    const SubtreeNode* n = subtree.Find(todo.back());
    todo.pop_back();
    if (n == nullptr) continue;
    out.insert(out.end(), n->host_ranks.begin(), n->host_ranks.end());
    todo.insert(todo.end(), n->child_switches.begin(), n->child_switches.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

GroupInstaller::GroupInstaller(SwitchCommander* commander, absl::Duration timeout)
    : commander_(commander), timeout_(timeout) {}

std::vector<LinkAttempt> GroupInstaller::ConnectLinks(uint32_t tree_id,
                                                      const std::vector<LinkEnds>& links) const {
  std::vector<LinkAttempt> attempts(links.size());
  for (size_t i = 0; i < links.size(); ++i) attempts[i].ends = links[i];
  for (const LinkPhase& phase : kLinkPhases) {
    std::vector<SwitchCommand> batch;
    std::vector<LinkAttempt*> sent;
    for (LinkAttempt& a : attempts) {
      if (!a.status.ok()) continue;
      batch.push_back(phase.command(tree_id, a));
      sent.push_back(&a);
    }
    if (batch.empty()) break;  // every link has failed
    std::vector<absl::StatusOr<control::CommandResult>> results =
        commander_->Execute(batch, timeout_);
    for (size_t i = 0; i < sent.size(); ++i) {
      absl::Status s = CommandStatus(batch[i].switch_name, results[i]);
      if (!s.ok()) {
        sent[i]->status = s;
      } else if (phase.record != nullptr) {
        phase.record(*results[i], sent[i]);
      }
    }
  }
  return attempts;
}

void GroupInstaller::Undo(const LinkAttempt& attempt, Outbox* out) {
  if (attempt.parent_created) {
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(attempt.parent_qp.qpn());
    out->Add(attempt.ends.parent_name, std::move(m));
  }
  if (attempt.child_created) {
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(attempt.child_qp.qpn());
    out->Add(attempt.ends.child_name, std::move(m));
  }
}

absl::Status GroupInstaller::Install(uint64_t group_id,
                                     const std::vector<SwitchCommand>& installs) const {
  for (const absl::Status& s : InstallEach(installs)) {
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrFormat("group %d was not confirmed: %s", group_id, s.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<absl::Status> GroupInstaller::InstallEach(
    const std::vector<SwitchCommand>& installs) const {
  std::vector<absl::StatusOr<control::CommandResult>> results =
      commander_->Execute(installs, timeout_);
  std::vector<absl::Status> out;
  out.reserve(installs.size());
  for (size_t i = 0; i < installs.size(); ++i) {
    out.push_back(CommandStatus(installs[i].switch_name, results[i]));
  }
  return out;
}

LinkEnds LinkEndsOf(const FabricState& state, uint32_t tree_id, int child) {
  LinkEnds e;
  e.child = child;
  e.parent = state.alloc.trees()[tree_id].parent[child];
  e.child_name = state.SwitchName(e.child);
  e.parent_name = state.SwitchName(e.parent);
  e.child_address = state.switches[e.child].data_address;
  e.parent_address = state.switches[e.parent].data_address;
  return e;
}

control::ManagerMessage InstallMessage(const FabricState& state, const Group& g,
                                       const SubtreeNode& node) {
  const Job& job = state.jobs.at(g.job_id);
  const uint32_t tree = g.placement.tree_id();
  control::ManagerMessage msg;
  control::InstallGroup* ig = msg.mutable_install_group();
  ig->set_tree_id(tree);
  ig->set_group_id(g.id);
  ig->set_epoch(g.epoch);
  ig->set_job_id(g.job_id);
  ig->set_pkey(job.pkey);
  ig->set_qkey(job.qkey);
  ig->set_integrity_key(job.integrity_key);
  ig->set_num_slots(g.placement.num_slots);
  ig->set_slot_bytes(g.placement.slot_bytes);
  ig->set_delivery(g.delivery);
  ig->set_multicast_address(state.MulticastAddress(g.multicast_index));
  for (uint32_t r : node.host_ranks) {
    control::GroupChild* c = ig->add_children();
    c->set_rank(r);
    c->add_subtree_ranks(r);
    const LeafAttachment* a = job.ranks.at(r).In(state.topo.switch_at(node.switch_index).plane);
    c->set_qpn(a == nullptr ? 0 : a->leaf_qpn);
  }
  for (int child : node.child_switches) {
    control::GroupChild* c = ig->add_children();
    c->set_switch_name(state.SwitchName(child));
    for (uint32_t r : SubtreeRanks(g.placement.subtree, child)) c->add_subtree_ranks(r);
    auto it = state.links.find({tree, child});
    c->set_qpn(it == state.links.end() ? 0 : it->second.parent_qpn);
  }
  ig->set_is_root(node.parent < 0);
  if (node.parent >= 0) {
    auto it = state.links.find({tree, node.switch_index});
    ig->set_parent_qpn(it == state.links.end() ? 0 : it->second.child_qpn);
  }
  for (uint32_t r : g.ranks) ig->add_member_ranks(r);
  return msg;
}

}  // namespace netfold::manager
