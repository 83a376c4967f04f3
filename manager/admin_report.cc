#include "manager/admin_report.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "manager/admission.h"

namespace netfold::manager {
namespace {

control::SwitchStatus::State ToProto(SwitchState state) {
  switch (state) {
    case SwitchState::kUnknown:
      return control::SwitchStatus::UNKNOWN;
    case SwitchState::kReconciling:
      return control::SwitchStatus::RECONCILING;
    case SwitchState::kUp:
      return control::SwitchStatus::UP;
    case SwitchState::kDead:
      return control::SwitchStatus::DEAD;
  }
  return control::SwitchStatus::UNKNOWN;
}

void AddSwitches(const FabricState& state, control::GetStatusResponse* resp) {
  const absl::Duration now = state.clock.Now();
  for (int sw = 0; sw < state.topo.num_switches(); ++sw) {
    const Switch& s = state.switches[sw];
    const SwitchSpec& spec = state.topo.switch_at(sw);
    control::SwitchStatus* st = resp->add_switches();
    st->set_name(spec.name);
    st->set_tier(spec.tier);
    st->set_state(ToProto(s.state));
    st->set_data_address(s.data_address);
    st->set_admin_address(s.admin_address);
    st->set_last_heartbeat_ms_ago(s.last_heartbeat == absl::InfiniteDuration()
                                      ? -1
                                      : absl::ToInt64Milliseconds(now - s.last_heartbeat));
    st->mutable_capacity()->set_max_trees(spec.capacity.trees);
    st->mutable_capacity()->set_max_groups(spec.capacity.groups);
    st->mutable_capacity()->set_num_slots(spec.capacity.slots);
    st->mutable_capacity()->set_slot_bytes(spec.capacity.slot_bytes);
    st->mutable_capacity()->set_max_qps(spec.capacity.qps);
    const Usage& u = state.alloc.used(sw);
    st->mutable_used()->set_groups(u.groups);
    st->mutable_used()->set_slots(u.slots);
    st->mutable_used()->set_qps(u.qps);
    *st->mutable_reported() = s.reported;
    st->set_num_trees(state.alloc.trees_of(sw));
    st->set_incarnation(s.incarnation);
  }
}

void AddTrees(const FabricState& state, control::GetStatusResponse* resp) {
  for (const Tree& t : state.alloc.trees()) {
    control::TreeStatus* ts = resp->add_trees();
    ts->set_tree_id(t.id);
    ts->set_root(state.SwitchName(t.root));
    ts->set_num_groups(state.alloc.tree_load(t.id));
    for (int sw : t.switches) {
      ts->add_switches(state.SwitchName(sw));
      if (t.parent[sw] < 0) continue;
      control::TreeEdge* e = ts->add_edges();
      e->set_parent(state.SwitchName(t.parent[sw]));
      e->set_child(state.SwitchName(sw));
      auto it = state.links.find({t.id, sw});
      e->set_connected(it != state.links.end() && it->second.connected);
      e->set_down(state.alloc.LinkDown(t.id, sw));
    }
  }
}

void AddJobsAndGroups(const FabricState& state, control::GetStatusResponse* resp) {
  for (const auto& [jid, job] : state.jobs) {
    control::JobStatus* js = resp->add_jobs();
    js->set_job_id(jid);
    js->set_name(job.name);
    js->set_num_ranks(static_cast<uint32_t>(job.ranks.size()));
    uint32_t attached = 0;
    for (const auto& [r, rank] : job.ranks) attached += rank.AttachedAnywhere() ? 1 : 0;
    js->set_num_attached(attached);
    *js->mutable_quota() = job.quota;
    js->set_num_groups(static_cast<uint32_t>(job.groups.size()));
    js->set_pkey(job.pkey);
  }
  for (const auto& [gid, g] : state.groups) {
    if (g.state != GroupState::kReady) continue;
    control::GroupStatus* gs = resp->add_groups();
    gs->set_group_id(gid);
    gs->set_job_id(g.job_id);
    gs->set_tree_id(g.placement.tree_id());
    gs->set_epoch(g.epoch);
    for (uint32_t r : g.ranks) gs->add_ranks(r);
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      gs->add_switches(state.SwitchName(n.switch_index));
    }
    gs->set_root_switch(state.SwitchName(g.placement.subtree.root()));
    gs->set_num_slots(g.placement.num_slots);
    gs->set_slot_bytes(g.placement.slot_bytes);
  }
}

// The answer: `fits_text` when there is no shortfall, else every one.
control::ExplainResponse Explained(control::ExplainResponse resp, const std::vector<Shortfall>& why,
                                   const std::string& fits_text) {
  for (const Shortfall& s : why) {
    control::Shortfall* p = resp.add_shortfalls();
    p->set_tree_id(s.tree_id);
    p->set_switch_name(s.switch_name);
    p->set_resource(s.resource);
    p->set_needed(s.needed);
    p->set_free(s.free);
    p->set_capacity(s.capacity);
    p->set_reason(s.reason);
  }
  resp.set_fits(why.empty());
  resp.set_summary(why.empty() ? fits_text : JoinShortfalls(why));
  return resp;
}

// A request that cannot even be checked, with the shortfalls found so far.
control::ExplainResponse Malformed(control::ExplainResponse resp, std::vector<Shortfall> why,
                                   const absl::Status& status) {
  Shortfall sf;
  sf.resource = "request";
  sf.reason = std::string(status.message());
  why.push_back(sf);
  return Explained(std::move(resp), why, "");
}

// What the journal found at start and how its appends fare since.
void AddState(const FabricState& state, control::GetStatusResponse* resp) {
  control::StateStatus* st = resp->mutable_state();
  const Journal* journal = state.records.journal();
  if (journal == nullptr) return;  // journaled stays false
  st->set_journaled(true);
  st->set_state_dir(journal->dir());
  st->set_records_replayed(static_cast<uint32_t>(journal->records_replayed()));
  st->set_torn_bytes_dropped(journal->bytes_discarded());
  st->set_damaged_records_skipped(static_cast<uint32_t>(journal->damaged_records()));
  for (const std::string& copy : journal->saved_copies()) st->add_saved_copies(copy);
  st->set_failed_appends(journal->failed_appends());
  if (!journal->broken().ok()) {
    st->set_appends_refused(true);
    st->set_refused_reason(std::string(journal->broken().message()));
  }
}

}  // namespace

control::GetStatusResponse StatusReport(const FabricState& state, uint64_t incarnation) {
  control::GetStatusResponse resp;
  resp.set_manager_incarnation(incarnation);
  resp.set_topology_name(state.topo.name());
  AddSwitches(state, &resp);
  AddTrees(state, &resp);
  AddJobsAndGroups(state, &resp);
  AddState(state, &resp);
  return resp;
}

control::ExplainResponse ExplainReport(const FabricState& state,
                                       const control::ExplainRequest& req) {
  control::ExplainResponse resp;
  resp.set_tree_id(-1);
  std::vector<Shortfall> why;
  if (req.has_job()) {
    control::JobQuota quota;
    std::vector<std::pair<int, uint32_t>> qps;
    absl::Status s = CheckJobRequest(state, req.job(), &quota, &qps, &why);
    if (!s.ok()) return Malformed(std::move(resp), std::move(why), s);
    return Explained(std::move(resp), why,
                     absl::StrFormat("the job fits: %d ranks, quota %d groups x %d slots x %d B",
                                     req.job().ranks_size(), quota.max_groups(), quota.num_slots(),
                                     quota.slot_bytes()));
  }
  if (req.has_group()) {
    auto it = state.jobs.find(req.group().job_id());
    if (it == state.jobs.end()) {
      return Malformed(std::move(resp), std::move(why),
                       absl::NotFoundError(absl::StrFormat("no job %d", req.group().job_id())));
    }
    std::vector<uint32_t> ranks(req.group().ranks().begin(), req.group().ranks().end());
    std::sort(ranks.begin(), ranks.end());
    if (req.group().plane() >= state.topo.planes()) {
      return Malformed(std::move(resp), std::move(why),
                       absl::InvalidArgumentError(absl::StrFormat(
                           "plane %d, but the fabric has %d data plane(s)", req.group().plane(),
                           state.topo.planes())));
    }
    GroupRequest greq;
    absl::Status s = CheckGroupRequest(it->second, ranks, req.group().num_slots(),
                                       req.group().slot_bytes(), &greq, &why, req.group().plane());
    if (!s.ok()) return Malformed(std::move(resp), std::move(why), s);
    if (!why.empty()) return Explained(std::move(resp), why, "");
    absl::StatusOr<Placement> p = state.alloc.PlanGroup(greq, &why);
    if (p.ok()) {
      resp.set_tree_id(static_cast<int32_t>(p->tree_id()));
      return Explained(std::move(resp), why,
                       absl::StrFormat("the group fits on tree %d, root %s", p->tree_id(),
                                       state.SwitchName(p->subtree.root())));
    }
    if (why.empty()) return Malformed(std::move(resp), std::move(why), p.status());
    return Explained(std::move(resp), why, "");
  }
  return Malformed(std::move(resp), std::move(why),
                   absl::InvalidArgumentError("ExplainRequest names neither a job nor a group"));
}

}  // namespace netfold::manager
