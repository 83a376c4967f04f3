// The durable form of the manager's books (manager_state.proto): every job,
// ready group and connected tree link as a record, appended to the journal
// before the manager answers; id counters reserved in blocks, so that an id
// is never handed out twice across restarts; and the whole state as a
// snapshot every `snapshot_every` records. Records name switches, hosts and
// trees (by their root switch) rather than indices, so a state directory
// survives edits of the topology file. recovery.h reads them back.
//
//   StateRecords records(topo, trees, journal.get(), /*snapshot_every=*/1000);
//   NETFOLD_ASSIGN_OR_RETURN(uint64_t id, records.NextJobId());
//   NETFOLD_RETURN_IF_ERROR(records.PutJob(job));   // durable when it returns
//   records.MaybeSnapshot(jobs, groups, links);
//
// `journal` may be null (no --state_dir): nothing is written and every
// write succeeds. A write that fails is logged and returns Unavailable.
// Not thread-safe: the manager calls it under its state lock.
#ifndef NETFOLD_MANAGER_STATE_RECORDS_H_
#define NETFOLD_MANAGER_STATE_RECORDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/fabric_objects.h"
#include "manager/journal.h"
#include "manager/manager_state.pb.h"
#include "manager/topology.h"
#include "manager/tree_planner.h"

namespace netfold::manager {

// A rank's attachment in one data plane to and from its record: a
// RankRecord (plane 0's, in the rank's own fields) or a
// PlaneAttachmentRecord, whose fields have the same names. The leaf is
// not recorded: recovery finds it from the host and the plane.
template <typename Record>
void WriteAttachment(const LeafAttachment& a, Record* rec) {
  rec->set_attached(a.attached);
  rec->set_host_address(a.host_endpoint.address());
  rec->set_host_qpn(a.host_endpoint.qpn());
  rec->set_host_psn(a.host_endpoint.psn());
  rec->set_leaf_qpn(a.leaf_qpn);
  rec->set_leaf_psn(a.leaf_psn);
}
template <typename Record>
void ReadAttachment(const Record& rec, LeafAttachment* a) {
  a->attached = rec.attached();
  a->host_endpoint.set_address(rec.host_address());
  a->host_endpoint.set_qpn(rec.host_qpn());
  a->host_endpoint.set_psn(rec.host_psn());
  a->leaf_qpn = rec.leaf_qpn();
  a->leaf_psn = rec.leaf_psn();
}

// The largest group id the manager hands out: the aggregation header
// (docs/protocol.md) carries group_id in 32 bits. Tree ids stay below
// kMaxTrees (tree_planner.h) for its 16-bit tree_id.
inline constexpr uint64_t kMaxGroupId = 0xFFFFFFFFull;

class StateRecords {
 public:
  // `topo`, `trees` and `journal` must outlive the records.
  StateRecords(const Topology& topo, const std::vector<Tree>& trees, Journal* journal,
               int snapshot_every);
  StateRecords(const StateRecords&) = delete;
  StateRecords& operator=(const StateRecords&) = delete;

  // ---- Encoding (pure).
  state::JobRecord JobRecord(const Job& job) const;
  state::GroupRecord GroupRecord(const Group& group) const;
  state::LinkRecord LinkRecord(const Link& link) const;
  // The whole state: every job, the ready groups, the connected links, and
  // the id counters.
  state::Snapshot Snapshot(const std::map<uint64_t, Job>& jobs,
                           const std::map<uint64_t, Group>& groups,
                           const std::map<LinkKey, Link>& links) const;

  // ---- Journal records (upserts and deletes of whole objects).
  absl::Status PutJob(const Job& job);
  absl::Status DeleteJob(uint64_t job_id);
  absl::Status PutGroup(const Group& group);
  absl::Status DeleteGroup(uint64_t group_id);
  absl::Status PutLink(const Link& link);
  absl::Status DeleteLink(const Link& link);
  absl::Status Append(const state::JournalEntry& entry);

  // ---- Snapshots. Replaces the snapshot (and empties the journal) once
  // `snapshot_every` records were appended since the last one, and at every
  // call while the journal refuses appends (Journal::broken(): a snapshot
  // makes it usable again; the manager calls this at every tick). A failure
  // is logged (once while it repeats), the journal keeps the records.
  void MaybeSnapshot(const std::map<uint64_t, Job>& jobs, const std::map<uint64_t, Group>& groups,
                     const std::map<LinkKey, Link>& links);
  absl::Status WriteSnapshot(const state::Snapshot& snapshot);

  // ---- Ids. The next job or group id; a new block of ids is journaled
  // before the first id of the block is handed out. Group ids stop at
  // kMaxGroupId (ResourceExhausted).
  absl::StatusOr<uint64_t> NextJobId();
  absl::StatusOr<uint64_t> NextGroupId();
  // Where recovery found the counters: the next ids to hand out, none of
  // them reserved yet.
  void StartIdsAt(uint64_t next_job_id, uint64_t next_group_id);

  // The journal written to (null without --state_dir), for reports of what
  // it found at start and how its appends fare (admin_report.h).
  const Journal* journal() const { return journal_; }

 private:
  absl::Status WriteCounters();

  const Topology* topo_;
  const std::vector<Tree>* trees_;
  Journal* journal_;
  const int snapshot_every_;
  uint64_t next_job_id_ = 1;
  uint64_t job_id_limit_ = 1;
  uint64_t next_group_id_ = 1;
  uint64_t group_id_limit_ = 1;
  std::string last_snapshot_error_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_STATE_RECORDS_H_
