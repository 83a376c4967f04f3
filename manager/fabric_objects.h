// The objects the aggregation manager keeps: switches as it sees them, jobs
// with their ranks, groups with their placement, and tree links. Plain data:
// FabricState (fabric_state.h) holds them and keeps them consistent with
// each other and with the allocator; StateRecords (state_records.h) turns
// them into journal records and recovery.h back.
//
//   const Job& job = state.jobs.at(job_id);
//   for (const auto& [r, rank] : job.ranks) {
//     rank.ForEachAttachment([&](uint32_t plane, const LeafAttachment& a) {
//       if (a.attached) qpns.push_back(a.leaf_qpn);   // at switch a.leaf
//     });
//   }
//
// Not thread-safe: the manager guards them with its state lock.
#ifndef NETFOLD_MANAGER_FABRIC_OBJECTS_H_
#define NETFOLD_MANAGER_FABRIC_OBJECTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "manager/allocator.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// The default partition: between switches, and for jobs that ask for it
// (ranks behind RoCE NICs). Shared, so never counted as used by a job.
inline constexpr uint32_t kDefaultPkey = 0xFFFF;

// A job key is this many random bytes (auth/secrets.h).
inline constexpr size_t kJobKeyBytes = 16;

enum class SwitchState { kUnknown, kReconciling, kUp, kDead };

// A switch as the manager sees it, indexed like the topology's switches.
struct Switch {
  SwitchState state = SwitchState::kUnknown;
  uint64_t session = 0;  // the Connect stream it registered on; 0: none
  uint64_t incarnation = 0;
  std::string data_address;
  std::string admin_address;
  absl::Duration last_heartbeat = absl::InfiniteDuration();  // never
  uint64_t last_heartbeat_sequence = 0;
  absl::Duration grace_until = absl::ZeroDuration();         // UNKNOWN with state: deadline
  control::ResourceUsage reported;
  // Held by the switch at registration, until reconciled.
  std::set<std::pair<uint64_t, uint32_t>> reported_groups;
  std::set<uint32_t> reported_qpns;
  std::string dead_reason;
  bool death_pending = false;  // disconnected/timed out, Tick handles it
};

// A rank's connection to its leaf switch in one data plane: the rank's RC
// QP and the leaf's (docs/manager.md, "Data planes").
struct LeafAttachment {
  int leaf = -1;  // the rank's leaf switch in this plane
  bool attached = false;
  control::Endpoint host_endpoint;
  uint32_t leaf_qpn = 0;
  uint32_t leaf_psn = 0;
};

// A rank of a job. Its attachment in plane 0 is the rank's own fields (a
// fabric without planes has no other); those in planes 1.. are in
// `planes`, from its first Attach there on: the leaf's QP is reserved for
// the job from then, as plane 0's is from the job's creation.
struct Rank : LeafAttachment {
  uint32_t rank = 0;
  std::string host;
  std::map<uint32_t, LeafAttachment> planes;  // plane (>= 1) -> attachment
  absl::Duration last_seen;

  // The attachment in `plane`; nullptr if the rank never attached there.
  LeafAttachment* In(uint32_t plane) {
    if (plane == 0) return this;
    auto it = planes.find(plane);
    return it == planes.end() ? nullptr : &it->second;
  }
  const LeafAttachment* In(uint32_t plane) const {
    return const_cast<Rank*>(this)->In(plane);
  }
  bool AttachedIn(uint32_t plane) const {
    const LeafAttachment* a = In(plane);
    return a != nullptr && a->attached;
  }
  // Attached in some plane: the rank is there (liveness, admin).
  bool AttachedAnywhere() const {
    bool any = false;
    ForEachAttachment([&](uint32_t, const LeafAttachment& a) { any = any || a.attached; });
    return any;
  }
  // fn(plane, attachment) for plane 0 and every plane in `planes`, in order.
  template <typename Fn>
  void ForEachAttachment(Fn&& fn) {
    fn(0u, static_cast<LeafAttachment&>(*this));
    for (auto& [plane, a] : planes) fn(plane, a);
  }
  template <typename Fn>
  void ForEachAttachment(Fn&& fn) const {
    fn(0u, static_cast<const LeafAttachment&>(*this));
    for (const auto& [plane, a] : planes) fn(plane, a);
  }
};

struct Job {
  uint64_t id = 0;
  std::string name;
  std::string key;
  uint32_t pkey = 0;
  uint32_t qkey = 0;
  // 32 bytes (proto/aggregation_tag.h) if the job has integrity, else empty.
  std::string integrity_key;
  control::JobQuota quota;
  std::map<uint32_t, Rank> ranks;
  std::set<uint64_t> groups;
  // The multicast indices of this job's groups the manager revoked, by
  // group: the job's processes stay joined there until they destroy the
  // group or the job ends, so no group is given one meanwhile (a process
  // cannot attach its queue pair to an address twice). Not journaled.
  std::map<uint64_t, uint32_t> revoked_multicast;
  // Since when Tick() has seen no attached rank (unset: one is attached,
  // or the job was not looked at yet, e.g. just restored from the journal).
  std::optional<absl::Duration> unattached_since;
};

enum class GroupState { kInstalling, kReady };

struct Group {
  uint64_t id = 0;
  uint64_t job_id = 0;
  uint32_t epoch = 1;
  std::vector<uint32_t> ranks;  // ascending
  Placement placement;
  control::DeliveryMode delivery = control::DELIVERY_MULTICAST;
  uint32_t multicast_index = 0;
  std::string tag;
  GroupState state = GroupState::kInstalling;
};

// A connected (or connecting) tree link, keyed by (tree, child switch).
struct Link {
  uint32_t tree_id = 0;
  int child = -1;
  int parent = -1;
  uint32_t parent_qpn = 0;
  uint32_t parent_psn = 0;
  uint32_t child_qpn = 0;
  uint32_t child_psn = 0;
  bool connected = false;
};
using LinkKey = std::pair<uint32_t, int>;

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_FABRIC_OBJECTS_H_
