// The aggregation manager's books: what it knows of the fabric (switches,
// jobs, groups, tree links), what they hold (the allocator), and the two
// things every change leaves behind, journal records (StateRecords) and job
// events (EventHub). The transitions below change several of these together
// so that they stay consistent: a released group gives its slots back to
// the allocator, leaves the journal and tells its members; a dropped link
// gives its QPs back and names the groups that used it.
//
//   FabricState state(topo, options, clock, journal.get(), incarnation);
//   Outbox out;
//   std::vector<uint64_t> lost =
//       state.DetachRanks(job, {3}, "QP error", /*destroy_qp=*/true, &out);
//   // ... then, without the lock: send `out`, fail or re-plan `lost`
//
// Transitions never talk to a switch: what switches must be told is put in
// an Outbox, sent by the caller once it has released the lock. Fields that
// change alone (a heartbeat time, a rank's endpoint) are set directly.
//
// Not thread-safe. AggregationManager guards the whole of it with its state
// lock (`mu_`) and never waits on a switch while holding it; the readers
// that take a `const FabricState&` (admission.h, admin_report.h,
// group_installer.h) run under that lock too.
#ifndef NETFOLD_MANAGER_FABRIC_STATE_H_
#define NETFOLD_MANAGER_FABRIC_STATE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"
#include "manager/allocator.h"
#include "manager/event_hub.h"
#include "manager/fabric_objects.h"
#include "manager/journal.h"
#include "manager/manager_options.h"
#include "manager/state_records.h"
#include "manager/switch_commander.h"
#include "manager/topology.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// "0,1,2" for log lines and reasons; long lists are cut after 16 ranks.
std::string RanksText(const std::vector<uint32_t>& ranks);

// A struct: its fields are the books, read and set by the manager under its
// lock; the methods are the changes that span several fields.
struct FabricState {
  // `topo`, `options`, `clock` and `journal` (may be null) must outlive the
  // state. Every switch starts UNKNOWN and unusable.
  FabricState(const Topology& topo, const ManagerOptions& options, Clock& clock, Journal* journal,
              uint64_t incarnation);
  FabricState(const FabricState&) = delete;
  FabricState& operator=(const FabricState&) = delete;

  const Topology& topo;
  const ManagerOptions& options;
  Clock& clock;

  Allocator alloc;               // what every switch holds, and the trees
  StateRecords records;          // the journal (writes only what is handed to it)
  EventHub events;               // what the jobs' processes are told
  std::vector<Switch> switches;  // indexed like topo's switches
  std::map<uint64_t, Job> jobs;
  std::map<uint64_t, Group> groups;
  std::map<LinkKey, Link> links;
  std::map<LinkKey, absl::Duration> links_down_until;
  std::set<uint32_t> multicast_used;
  std::set<uint32_t> pkeys_used;  // kDefaultPkey is shared, never in here
  // A restarted manager detaches no silent rank before this (recovery.h,
  // RestartReregistrationGrace): its hosts must find it again first.
  absl::Duration ranks_grace_until = absl::ZeroDuration();
  // The last liveness sweep (liveness.h), and whether it found the manager
  // itself late and judged no one silent.
  absl::Duration last_sweep = absl::InfiniteDuration();
  bool last_sweep_held_back = false;

  // ---- Queries.
  const std::string& SwitchName(int sw) const { return topo.switch_at(sw).name; }
  // Up or reconciling: a switch whose stream can carry commands, so that
  // state it holds can be removed.
  bool Reachable(int sw) const;
  // "<multicast_prefix>.x.y:4791".
  std::string MulticastAddress(uint32_t index) const;
  // What the members of `group` are told about it (CreateGroup, re-plans).
  control::GroupInfo DescribeGroup(const Group& group) const;
  // The data plane of a group's tree (0 without planes).
  uint32_t GroupPlane(const Group& group) const {
    const int root = group.placement.subtree.root();
    return root < 0 ? 0 : topo.switch_at(root).plane;
  }

  // ---- Transitions.
  // Sets a switch's state and whether the allocator may use it.
  void SetSwitchState(int sw, SwitchState state, const std::string& reason);
  // A free multicast index for group `group_id`, marked used; 0 when
  // there is none. The search starts at the group id's place among the
  // indices and goes round: group ids only grow, so an index given back
  // comes again only after the others were given out. A released group's
  // members leave its address on their own time (a kept group, docs/host.md,
  // is dropped by each member when it meets the drop), and a process
  // cannot join one address twice.
  uint32_t AllocateMulticast(uint64_t group_id);
  // Releases a group's resources and queues its removal from the reachable
  // switches of its subtree. The group stays in `groups` (see EraseGroup).
  void ReleaseGroup(Group& group, Outbox* out);
  // Forgets a group: journal, job, multicast address; when `notify`, its
  // members get GROUP_REVOKED with `reason`, and its multicast address
  // stays taken (the job's revoked_multicast) until they destroy the group
  // (ReleaseRevokedGroup) or the job ends. Call ReleaseGroup first.
  void EraseGroup(uint64_t group_id, const std::string& reason, bool notify);
  // A group `job` lost to a revocation, destroyed by its processes: its
  // multicast address is free again. Returns false if `job` had no such
  // group.
  bool ReleaseRevokedGroup(Job& job, uint64_t group_id);
  // Releases everything `job` holds (groups, QPs and their quota, P_Key),
  // tells its processes why (JOB_DESTROYED) and ends their event streams,
  // journals and erases it: `job` dangles afterwards.
  void DestroyJob(Job& job, const std::string& reason, Outbox* out);
  // Marks ranks detached, destroying their leaf QPs when `destroy_qp` (the
  // switch still has them), journals the job and publishes RANK_DETACHED.
  // Returns the groups that lost a member, ascending, for the caller to
  // fail (re-plan or revoke). In every data plane, or with `only_plane`
  // in that one alone (its groups are the ones lost).
  std::vector<uint64_t> DetachRanks(Job& job, const std::vector<uint32_t>& ranks,
                                    const std::string& reason, bool destroy_qp, Outbox* out,
                                    std::optional<uint32_t> only_plane = std::nullopt);
  // A group lost a switch, link or member: releases it and, with
  // `options.replan_on_failure` and every member still attached, plans it
  // again on another tree (epoch + 1, kInstalling) and returns true for the
  // caller to bring it up. Otherwise erases it, telling its members why
  // (GROUP_REVOKED), and returns false.
  bool ReplanGroup(uint64_t group_id, const std::string& reason, Outbox* out);
  // Forgets a tree link (switch dead, QP error, missing after reconcile):
  // its QPs are destroyed on the reachable ends and given back, and with
  // `mark_down` it stays unusable for `options.link_retry_after`. Returns
  // the groups that used it.
  std::vector<uint64_t> DropLink(const LinkKey& key, const std::string& reason, bool mark_down,
                                 Outbox* out);

  // ---- Tree links while GroupInstaller connects them: an entry (not yet
  // connected) from OpenLink on, then either the QPs of both ends
  // (journaled) or nothing again.
  void OpenLink(uint32_t tree_id, int child);
  void LinkConnected(uint32_t tree_id, int child, const control::QpCreated& parent_qp,
                     const control::QpCreated& child_qp);
  void ForgetLink(uint32_t tree_id, int child);

  // ---- Durability.
  state::Snapshot Snapshot() const { return records.Snapshot(jobs, groups, links); }
  void MaybeSnapshot() { records.MaybeSnapshot(jobs, groups, links); }
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_FABRIC_STATE_H_
