// The library's per-process state behind the C API: the job at the manager
// (ManagerClient), this rank's data path to its leaf switch (DataPath), and
// the groups it made.
//
//   auto ctx = *Context::Create(options, world_oob);           // collective
//   auto group = *ctx->CreateGroup(group_oob, world_ranks);    // collective (host/group.h)
//   auto op = *group->Start({.dtype = ..., .send = in, .recv = out, .count = n});
//   absl::Status s = group->Wait(op);
//   group->Destroy(group_oob);  ctx->Finalize(world_oob);      // collective
//
// Threads: the manager client's control thread blocks on the manager's
// event stream and sends heartbeats (it never spins); events reach the data
// path as posted failures. The data path is driven by the caller's thread
// inside library calls, and by the context's ProgressThread while the
// caller is away (host/progress_thread.h). Calls may come from several
// threads: each holds the data path's lock while it touches it. Deadlines
// run on the process's awake clock, whose thread wakes every 100 ms
// (base/awake_clock.h).
//
// Two files: context.cc (joining the job, the planes' links, events, waits,
// finalizing) and context_groups.cc (creating groups: planes, channels,
// the manager's grants, joining, and the fallbacks).
#ifndef NETFOLD_HOST_CONTEXT_H_
#define NETFOLD_HOST_CONTEXT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/data_path.h"
#include "host/group.h"
#include "host/group_engine.h"
#include "host/manager_client.h"
#include "host/oob.h"
#include "host/options.h"
#include "host/progress_thread.h"
#include "proto/control/plane_name.h"

namespace netfold::host {

struct ContextStats {
  GroupEngineStats engines;    // summed over every group, alive or destroyed
  uint64_t host_ops = 0;       // operations the hosts ran (host algorithms)
  uint64_t failovers = 0;      // groups moved from the fabric to the hosts
  uint64_t link_tx_bytes = 0;
  uint64_t link_rx_bytes = 0;
  uint64_t retransmissions = 0;
  uint64_t packets_dropped = 0;
  uint64_t foreign_packets_dropped = 0;  // of those, not from the switch (LeafLinkStats)
  uint64_t results_placed = 0;           // LeafLinkStats
  uint64_t results_place_missed = 0;
  // Kept groups (docs/host.md, "Kept groups"): fabric groups this rank
  // asked the manager for as a member, those given again from the kept
  // ones, and how many it keeps now.
  uint64_t groups_requested = 0;
  uint64_t groups_reused = 0;
  uint64_t groups_kept = 0;
};

class Context : private GroupOwner {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options, Oob& world);
  ~Context() override;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Collective over the world: destroys the job (rank 0) after a barrier.
  absl::Status Finalize(Oob& world);

  // Collective over the group's members (group_oob ranks are group ranks;
  // world_ranks[i] is group rank i's world rank).
  absl::StatusOr<std::unique_ptr<Group>> CreateGroup(Oob& group_oob,
                                                     const std::vector<int>& world_ranks);
  // Collective over the group's members, as Group::Destroy; but when every
  // member may (NETFOLD_KEEP_GROUPS, room among its kept groups, the group
  // Keepable) the group is kept, as it is, and the next CreateGroup of the
  // same members in the same order gets it back without the manager.
  absl::Status DestroyGroup(std::unique_ptr<Group> group, Oob& group_oob);

  const ContextOptions& options() const { return options_; }
  // K of each channel; a group has at most num_slots() x channels()
  // chunks in flight.
  uint32_t num_slots() const { return num_slots_; }
  // The most channels a group of this job has (NETFOLD_CHANNELS, the
  // largest any rank asks for, at most the fabric's planes).
  uint32_t channels() const { return channels_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint32_t max_groups() const { return max_groups_; }
  ContextStats stats() const;
  uint64_t job_id() const { return job_id_; }
  // Moves the data path for up to `timeout` on the calling thread
  // (netfold_progress; ProgressThread::DriveFor).
  void DriveFor(absl::Duration timeout) { progress_->DriveFor(timeout); }

 private:
  explicit Context(const ContextOptions& options);
  absl::Status Join(Oob& world);
  // Group rank 0 asks the manager for the group; every member gets the
  // answer (or the manager's refusal).
  absl::StatusOr<control::GroupInfo> RequestGroup(Oob& group_oob,
                                                  const std::vector<int>& world_ranks,
                                                  uint32_t plane);
  // Attaches `link` (in RESET) in data plane `plane` at the manager: the
  // manager's answer, and the PSN this side starts at in `psn`. A call to
  // the manager: outside the data path's lock.
  // `*psn` 0: a new one is picked (and returned there).
  absl::StatusOr<control::AttachResponse> RequestAttach(uint32_t plane, const LeafLink& link,
                                                        uint32_t* psn);
  // The leaf's end the manager named, and this side's first PSN.
  absl::StatusOr<LeafPeer> PeerFrom(const control::AttachResponse& attached, uint32_t psn) const;
  // Connects `link` to the leaf the manager named: with the lock held.
  absl::Status ConnectLink(LeafLink& link, const control::AttachResponse& attached, uint32_t psn);
  // Tries to attach again in every data plane this rank lost (Reattach),
  // as a group is created: OK if plane 0 is this rank's (again), else why
  // not. With the data path's lock held.
  absl::Status ReattachLostPlanes();
  // This rank lost its attachment in `plane` (its link failed, or the
  // manager detached it): attaches again at the manager (a new PSN),
  // connects the link's QP to the leaf's new one and sends keepalives; the
  // plane is the rank's again once the leaf answers one (within
  // kReattachProbe). At once the first time; kReattachAttachRetry after
  // an Attach that found no manager or leaf up; kReattachFirstBackoff
  // after a leaf that did not answer or a refusal, doubling up to
  // kReattachMaxBackoff; never again for a plane the manager does not have.
  // A leaf that does not answer is reported to the manager as a failed
  // link. Soft links only.
  absl::Status Reattach(uint32_t plane);
  // The data planes of a new group's channels (docs/host.md, "Data
  // planes", "Channels"): group rank 0 takes the next of the planes it may
  // use, round-robin, and as many after it as the job's channels; every
  // member attaches there if it has not yet (EnsurePlane), and the group
  // goes to plane 0 alone if one cannot. With the data path's lock held.
  absl::StatusOr<std::vector<uint32_t>> ChoosePlanes(Oob& group_oob);
  absl::Status EnsurePlane(uint32_t plane);
  // This rank lost data plane `plane`: detached by the manager, or its own
  // link there failed (then marked lost). Under the data path's lock.
  bool PlaneLost(uint32_t plane);
  // A fabric group per plane (RequestGroup), every member with the same
  // answer; if one is refused, those granted are released.
  absl::StatusOr<std::vector<control::GroupInfo>> RequestGroups(
      Oob& group_oob, const std::vector<int>& world_ranks, const std::vector<uint32_t>& planes);
  // Channel `channel` of `channels` of the group's fabric side, added to
  // `setup`: its engine and, for multicast delivery, the group address
  // joined, in the data plane agreed (`plane`). The members agree on the
  // outcome.
  absl::Status JoinFabricGroup(Oob& group_oob, const control::GroupInfo& info, uint32_t plane,
                               uint32_t channel, uint32_t channels, GroupSetup& setup);
  // Undoes JoinFabricGroup for every channel in `setup`.
  void LeaveFabricGroups(GroupSetup& setup);
  // Group rank 0 releases `infos`' groups at the manager (outside the
  // data path's lock); the others do nothing.
  void ReleaseGroups(Oob& group_oob, const std::vector<control::GroupInfo>& infos);
  // The kept group every member of `world_ranks` offers (each its oldest
  // of those members that is still Keepable), taken out of kept_; null if
  // they offer different ones or none, and then every member drops those
  // it kept of them (DropKept). One round of the OOB. With the data path's
  // lock held.
  absl::StatusOr<std::unique_ptr<Group>> TakeKeptGroup(Oob& group_oob,
                                                       const std::vector<int>& world_ranks);
  // Drops kept groups, alone (not with their members): the one that was
  // their group rank 0 releases them at the manager; a member that still
  // keeps one finds the others do not at its next offer and drops it too.
  // With the data path's lock held.
  void DropKept(std::vector<std::unique_ptr<Group>> dropped);
  // Takes out of kept_ the groups `taken` says.
  std::vector<std::unique_ptr<Group>> TakeKeptIf(const std::function<bool(const Group&)>& taken);
  // Drops the kept groups no longer Keepable (their fabric failed: revoked,
  // re-planned, a plane lost), whoever else keeps them: each member finds
  // the failure itself. With the data path's lock held.
  void DropFailedKept();
  // A drop the members of a new group agreed on (offers that differed,
  // a fabric with no room), of the kept groups of exactly its ranks or
  // of any of them. Threads make the members meet it in different places
  // of a concurrent destroy of a group it covers: before the destroy at
  // one, while the destroy decides at another. So a destroy votes to keep
  // with the number of drops that covered its group before it started
  // (members that differ release it), and drops the group itself if one
  // covers it while it decides: its members keep it, or none does.
  struct KeptDrop {
    std::vector<int> ranks;
    bool any_of_them = false;
    bool Covers(const Group& group) const;
    auto operator<=>(const KeptDrop&) const = default;
  };
  void RecordKeptDrop(const KeptDrop& drop);
  // How many drops ever covered `group`, and whether one after drop number
  // `since` did. With the data path's lock held.
  uint64_t KeptDropsCovering(const Group& group) const;
  bool KeptDropCoveredSince(const Group& group, uint64_t since) const;
  void OnEvent(const control::JobEvent& event);
  // False once the fabric failed under this rank (its leaf link failed, a
  // group of its was revoked or lost its switches, the manager detached the
  // rank or destroyed the job): releases at the manager then do not wait
  // for a manager that does not answer.
  bool FabricThere();

  // GroupOwner
  ProgressThread& progress() override { return *progress_; }
  void Progress(absl::Duration timeout) override;
  absl::Status ReleaseAtManager(uint64_t group_id, bool fabric_failed) override;
  void Forget(Group& group) override;
  int world_rank() const override { return options_.rank; }
  absl::Duration op_timeout() const override { return options_.timeout; }
  void WhileWaiting() override;

  ContextOptions options_;
  std::unique_ptr<ManagerClient> manager_;
  uint64_t job_id_ = 0;
  uint16_t pkey_ = 0;
  uint32_t qkey_ = 0;
  std::optional<proto::AggregationKey> integrity_key_;  // the job has integrity
  // The leaf switch's data address (from Attach): where results come from
  // when the manager names no group root address.
  transport::Ipv4Endpoint leaf_address_;
  uint32_t num_slots_ = 8, slot_bytes_ = 4032, max_groups_ = 0;
  uint64_t groups_created_ = 0;  // for idempotency tags
  // Kept groups (DestroyGroup), oldest first; whether the job keeps them
  // (every rank's NETFOLD_KEEP_GROUPS > 0); places taken by groups being
  // destroyed that may be kept; what stats() counts. Under the data
  // path's lock.
  std::vector<std::unique_ptr<Group>> kept_;
  bool keeps_groups_ = false;
  size_t keeping_ = 0;
  // Of every drop (RecordKeptDrop), by what it covered: how many, and the
  // number of the last one; and the number of drops so far.
  struct KeptDropTally {
    uint64_t count = 0;
    uint64_t last = 0;
  };
  std::map<KeptDrop, KeptDropTally> kept_drops_;
  uint64_t kept_drops_made_ = 0;
  uint64_t groups_requested_ = 0;
  uint64_t groups_reused_ = 0;
  // Data planes: the fabric's (from Attach), the next one this rank gives
  // a group it creates, and those lost (bit p: plane p's link failed or
  // the manager detached it; not used until Reattach succeeds).
  uint32_t planes_ = 1;
  uint32_t usable_planes_ = 1;  // of those, the ones this rank gives its groups
  uint32_t next_plane_ = 0;
  uint32_t channels_ = 1;  // channels()
  std::atomic<uint32_t> lost_planes_{0};
  // Per plane: the PSN this rank's current attachment was made with (its
  // AttachRequest's), which tells the manager's detaches and this rank's
  // reports of it from those of an earlier one; and the PSN of the last
  // attachment a RANK_DETACHED named. Set under the data path's lock, read
  // by the control thread too.
  std::array<std::atomic<uint32_t>, control::kMaxPlanes> attach_psn_{};
  std::array<std::atomic<uint32_t>, control::kMaxPlanes> detached_psn_{};
  // Reattach: when each plane may be tried again, and the wait after the
  // last try whose leaf did not answer.
  struct ReattachTimes {
    int64_t due_ns = 0;
    absl::Duration backoff = absl::ZeroDuration();
    bool attaching = false;  // a thread is in Reattach (outside the lock, at the manager)
  };
  static constexpr absl::Duration kReattachProbe = absl::Seconds(2);
  static constexpr absl::Duration kKeepaliveEvery = absl::Milliseconds(200);
  static constexpr absl::Duration kReattachAttachRetry = absl::Milliseconds(500);
  static constexpr absl::Duration kReattachFirstBackoff = absl::Seconds(2);
  static constexpr absl::Duration kReattachMaxBackoff = absl::Seconds(64);
  std::array<ReattachTimes, control::kMaxPlanes> reattach_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);

  std::unique_ptr<DataPath> data_path_;
  std::unique_ptr<ProgressThread> progress_;  // the data path's lock and thread
  std::atomic<bool> lost_fabric_{false};      // JOB_DESTROYED seen
  bool fabric_failed_ = false;                // a released group had failed
  std::vector<Group*> groups_;   // every live group, fabric or not
  // WhileWaiting: when it last looked (how deep a thread is: t_following).
  int64_t followed_ns_ = 0;
  GroupEngineStats retired_;     // stats of destroyed groups' engines
  uint64_t retired_host_ops_ = 0, retired_failovers_ = 0;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_CONTEXT_H_
