#include "manager/state_records.h"

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace netfold::manager {

StateRecords::StateRecords(const Topology& topo, const std::vector<Tree>& trees, Journal* journal,
                           int snapshot_every)
    : topo_(&topo), trees_(&trees), journal_(journal), snapshot_every_(snapshot_every) {}

// ---------------------------------------------------------------------------
// Encoding

state::JobRecord StateRecords::JobRecord(const Job& job) const {
  state::JobRecord rec;
  rec.set_job_id(job.id);
  rec.set_name(job.name);
  rec.set_key(job.key);
  rec.set_pkey(job.pkey);
  rec.set_qkey(job.qkey);
  rec.set_integrity_key(job.integrity_key);
  rec.set_max_groups(job.quota.max_groups());
  rec.set_num_slots(job.quota.num_slots());
  rec.set_slot_bytes(job.quota.slot_bytes());
  for (const auto& [id, r] : job.ranks) {
    state::RankRecord* rr = rec.add_ranks();
    rr->set_rank(r.rank);
    rr->set_host(r.host);
    WriteAttachment(r, rr);  // plane 0's
    for (const auto& [plane, a] : r.planes) {
      state::PlaneAttachmentRecord* pr = rr->add_planes();
      pr->set_plane(plane);
      WriteAttachment(a, pr);
    }
  }
  return rec;
}

state::GroupRecord StateRecords::GroupRecord(const Group& g) const {
  state::GroupRecord rec;
  rec.set_group_id(g.id);
  rec.set_job_id(g.job_id);
  rec.set_epoch(g.epoch);
  rec.set_tree_root(topo_->switch_at((*trees_)[g.placement.tree_id()].root).name);
  for (uint32_t r : g.ranks) rec.add_ranks(r);
  rec.set_num_slots(g.placement.num_slots);
  rec.set_slot_bytes(g.placement.slot_bytes);
  rec.set_delivery(static_cast<uint32_t>(g.delivery));
  rec.set_multicast_index(g.multicast_index);
  rec.set_tag(g.tag);
  for (const SubtreeNode& n : g.placement.subtree.nodes) {
    state::NodeRecord* nr = rec.add_nodes();
    nr->set_switch_name(topo_->switch_at(n.switch_index).name);
    if (n.parent >= 0) nr->set_parent(topo_->switch_at(n.parent).name);
    for (uint32_t r : n.host_ranks) nr->add_host_ranks(r);
    for (int c : n.child_switches) nr->add_child_switches(topo_->switch_at(c).name);
  }
  return rec;
}

state::LinkRecord StateRecords::LinkRecord(const Link& l) const {
  state::LinkRecord rec;
  rec.set_tree_root(topo_->switch_at((*trees_)[l.tree_id].root).name);
  rec.set_child(topo_->switch_at(l.child).name);
  rec.set_parent(topo_->switch_at(l.parent).name);
  rec.set_parent_qpn(l.parent_qpn);
  rec.set_parent_psn(l.parent_psn);
  rec.set_child_qpn(l.child_qpn);
  rec.set_child_psn(l.child_psn);
  return rec;
}

state::Snapshot StateRecords::Snapshot(const std::map<uint64_t, Job>& jobs,
                                       const std::map<uint64_t, Group>& groups,
                                       const std::map<LinkKey, Link>& links) const {
  state::Snapshot snap;
  snap.set_topology_name(topo_->name());
  snap.mutable_counters()->set_job_id_limit(job_id_limit_);
  snap.mutable_counters()->set_group_id_limit(group_id_limit_);
  for (const auto& [id, job] : jobs) *snap.add_jobs() = JobRecord(job);
  for (const auto& [id, g] : groups) {
    if (g.state == GroupState::kReady) *snap.add_groups() = GroupRecord(g);
  }
  for (const auto& [key, l] : links) {
    if (l.connected) *snap.add_links() = LinkRecord(l);
  }
  return snap;
}

// ---------------------------------------------------------------------------
// Journal records

absl::Status StateRecords::PutJob(const Job& job) {
  state::JournalEntry e;
  *e.mutable_put_job() = JobRecord(job);
  return Append(e);
}

absl::Status StateRecords::DeleteJob(uint64_t job_id) {
  state::JournalEntry e;
  e.set_delete_job(job_id);
  return Append(e);
}

absl::Status StateRecords::PutGroup(const Group& group) {
  state::JournalEntry e;
  *e.mutable_put_group() = GroupRecord(group);
  return Append(e);
}

absl::Status StateRecords::DeleteGroup(uint64_t group_id) {
  state::JournalEntry e;
  e.set_delete_group(group_id);
  return Append(e);
}

absl::Status StateRecords::PutLink(const Link& link) {
  state::JournalEntry e;
  *e.mutable_put_link() = LinkRecord(link);
  return Append(e);
}

absl::Status StateRecords::DeleteLink(const Link& link) {
  state::JournalEntry e;
  *e.mutable_delete_link() = LinkRecord(link);
  return Append(e);
}

absl::Status StateRecords::Append(const state::JournalEntry& entry) {
  if (journal_ == nullptr) return absl::OkStatus();
  absl::Status s = journal_->Append(entry);
  if (!s.ok()) {
    NETFOLD_LOG(kError) << "journal write failed: " << s.message();
    return absl::UnavailableError(
        absl::StrFormat("cannot write the manager journal: %s", s.message()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Snapshots

void StateRecords::MaybeSnapshot(const std::map<uint64_t, Job>& jobs,
                                 const std::map<uint64_t, Group>& groups,
                                 const std::map<LinkKey, Link>& links) {
  if (journal_ == nullptr) return;
  // A journal that refuses appends (a failed append it could not roll
  // back) is made usable again by a snapshot: tried at every change.
  if (journal_->records_since_snapshot() < snapshot_every_ && journal_->broken().ok()) return;
  absl::Status s = journal_->WriteSnapshot(Snapshot(jobs, groups, links));
  if (s.ok()) {
    if (!last_snapshot_error_.empty()) NETFOLD_LOG(kWarning) << "snapshot written again";
    last_snapshot_error_.clear();
  } else if (s.message() != last_snapshot_error_) {
    NETFOLD_LOG(kError) << "snapshot failed: " << s.message();
    last_snapshot_error_ = std::string(s.message());
  }
}

absl::Status StateRecords::WriteSnapshot(const state::Snapshot& snapshot) {
  if (journal_ == nullptr) return absl::OkStatus();
  return journal_->WriteSnapshot(snapshot);
}

// ---------------------------------------------------------------------------
// Ids

absl::Status StateRecords::WriteCounters() {
  state::JournalEntry e;
  e.mutable_counters()->set_job_id_limit(job_id_limit_);
  e.mutable_counters()->set_group_id_limit(group_id_limit_);
  return Append(e);
}

absl::StatusOr<uint64_t> StateRecords::NextJobId() {
  if (next_job_id_ >= job_id_limit_) {
    job_id_limit_ = next_job_id_ + kIdBlock;
    NETFOLD_RETURN_IF_ERROR(WriteCounters());
  }
  return next_job_id_++;
}

absl::StatusOr<uint64_t> StateRecords::NextGroupId() {
  if (next_group_id_ > kMaxGroupId) {
    // The aggregation header carries 32 bits of group id: a larger id could
    // not be told apart on the wire.
    return absl::ResourceExhaustedError(absl::StrFormat(
        "group ids are exhausted: the aggregation header carries %d bits (ids 1..%d)", 32,
        kMaxGroupId));
  }
  if (next_group_id_ >= group_id_limit_) {
    group_id_limit_ = next_group_id_ + kIdBlock;
    NETFOLD_RETURN_IF_ERROR(WriteCounters());
  }
  return next_group_id_++;
}

void StateRecords::StartIdsAt(uint64_t next_job_id, uint64_t next_group_id) {
  next_job_id_ = job_id_limit_ = next_job_id;
  next_group_id_ = group_id_limit_ = next_group_id;
}

}  // namespace netfold::manager
