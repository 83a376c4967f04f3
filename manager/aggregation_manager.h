// The aggregation manager (AM) of the SHArP paper, without its transport:
// switches, jobs, groups, trees and resources, liveness and faults,
// durability. The gRPC services (control_service.h) are thin wrappers that
// authenticate nothing themselves, rate-limit, and map Status to gRPC.
//
//   AggregationManager am(topo, options, RealClock(), &hub, journal.get());
//   NETFOLD_RETURN_IF_ERROR(am.Recover(loaded_state));
//   // stream reader thread of a switch:
//   am.RegisterSwitch(reg, session);  am.SwitchHeartbeat(...);
//   // host RPCs:
//   absl::StatusOr<control::CreateJobResponse> job = am.CreateJob(request);
//   // a background thread, every tick or when woken:
//   am.Tick();
//
// Concurrency. Two locks: `op_mu_` serializes every operation that changes
// state and may talk to switches (job/group/attach/destroy, Tick); `mu_`
// guards the state itself and is never held while waiting on a switch.
// Calls from switch stream readers (RegisterSwitch, SwitchHeartbeat,
// SwitchDisconnected, ReportQpError) take only `mu_` and never wait on a
// switch: work they cause (reconciling, failure handling) runs in Tick.
// Every public method is thread-safe.
//
// Time. Liveness uses the injected Clock, so tests drive it by hand; waits
// for switch answers use `options.command_timeout` in real time (the
// commander's business).
#ifndef NETFOLD_MANAGER_AGGREGATION_MANAGER_H_
#define NETFOLD_MANAGER_AGGREGATION_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "manager/allocator.h"
#include "manager/journal.h"
#include "manager/manager_state.pb.h"
#include "manager/switch_commander.h"
#include "manager/topology.h"
#include "manager/tree_planner.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// The largest group id the manager hands out: the aggregation header
// (docs/protocol.md) carries group_id in 32 bits. Tree ids stay below
// kMaxTrees (tree_planner.h) for its 16-bit tree_id.
inline constexpr uint64_t kMaxGroupId = 0xFFFFFFFFull;

// Per-job policy limits and the defaults of an unspecified quota.
struct JobLimits {
  uint32_t max_jobs = 1024;
  uint32_t max_ranks_per_job = 4096;
  uint32_t max_groups_per_job = 256;
  uint32_t default_groups_per_job = 16;
  uint32_t max_slots_per_group = 64;
  uint32_t default_slots_per_group = 4;
  uint32_t max_slot_bytes = 65536;
  uint32_t default_slot_bytes = 1024;
};

struct ManagerOptions {
  absl::Duration heartbeat_interval = absl::Milliseconds(500);  // told to clients
  absl::Duration switch_timeout = absl::Seconds(2);             // missed heartbeats: dead
  absl::Duration host_timeout = absl::Seconds(5);               // 0: host processes never time out
  // A job none of whose ranks is attached for this long (its processes were
  // killed, or never came) is destroyed; 0: jobs live until DestroyJob.
  absl::Duration abandoned_job_timeout = absl::Seconds(60);
  absl::Duration command_timeout = absl::Seconds(3);            // per batch of switch commands
  absl::Duration link_retry_after = absl::Seconds(10);  // a failed link stays down this long
  bool replan_on_failure = true;
  std::string switch_secret;  // "" = switches need none
  JobLimits limits;
  std::string multicast_prefix = "239.77";  // groups get <prefix>.x.y:4791
  int snapshot_every = 1000;                // journal records between snapshots
  size_t events_per_job = 256;              // buffered for WatchEvents replay
};

// One WatchEvents subscriber's queue. Thread-safe.
class EventStream {
 public:
  EventStream(uint64_t job_id, uint32_t rank) : job_id_(job_id), rank_(rank) {}
  // Waits up to `timeout` for the next event; nullopt on timeout or once
  // closed and drained.
  std::optional<control::JobEvent> Next(absl::Duration timeout);
  // True once closed (job destroyed, replaced by a newer stream of the same
  // rank, manager shutting down) and every queued event was taken.
  bool Finished() const;
  void Push(const control::JobEvent& event);
  void Close();
  uint64_t job_id() const { return job_id_; }
  uint32_t rank() const { return rank_; }

 private:
  const uint64_t job_id_;
  const uint32_t rank_;
  mutable absl::Mutex mu_;
  std::deque<control::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class AggregationManager {
 public:
  // `topo`, `clock`, `commander` and `journal` (may be null: no durability)
  // must outlive the manager.
  AggregationManager(const Topology& topo, ManagerOptions options, Clock& clock,
                     SwitchCommander* commander, Journal* journal);
  ~AggregationManager();
  AggregationManager(const AggregationManager&) = delete;
  AggregationManager& operator=(const AggregationManager&) = delete;

  // Rebuilds jobs, groups and links from durable state (once, before
  // serving), re-reserving their resources. Objects that no longer fit the
  // topology are dropped with a warning. Switches start UNKNOWN and get
  // `switch_timeout` to re-register before their state is written off.
  absl::Status Recover(const state::Snapshot& snapshot);

  // Random per process; clients see it change when the manager restarted.
  uint64_t incarnation() const { return incarnation_; }
  const Topology& topology() const { return *topo_; }
  const ManagerOptions& options() const { return options_; }

  // Called when work for Tick appears (a switch registered, disconnected,
  // reported a QP error). Set once, before serving.
  void SetWakeup(std::function<void()> wakeup);

  // ---- Switches (stream reader threads; never block on switches).
  // The stateless checks of a registration (name, secret, protocol version,
  // addresses, capacities), so a transport can refuse an impostor before
  // routing anything to it. RegisterSwitch repeats them.
  absl::Status ValidateRegistration(const control::RegisterSwitch& request) const;
  // `session` identifies the Connect stream; messages of a replaced
  // session are ignored.
  absl::StatusOr<control::RegisterReply> RegisterSwitch(const control::RegisterSwitch& request,
                                                        uint64_t session);
  void SwitchHeartbeat(std::string_view name, uint64_t session,
                       const control::SwitchHeartbeat& heartbeat);
  void SwitchDisconnected(std::string_view name, uint64_t session);
  void ReportQpError(std::string_view name, uint64_t session, const control::QpErrorReport& report);

  // ---- Host processes.
  absl::StatusOr<control::CreateJobResponse> CreateJob(const control::CreateJobRequest& request);
  absl::Status DestroyJob(const control::DestroyJobRequest& request);
  absl::StatusOr<control::AttachResponse> Attach(const control::AttachRequest& request);
  absl::StatusOr<control::CreateGroupResponse> CreateGroup(
      const control::CreateGroupRequest& request);
  absl::Status DestroyGroup(const control::DestroyGroupRequest& request);
  absl::StatusOr<control::HostHeartbeatResponse> HostHeartbeat(
      const control::HostHeartbeatRequest& request);
  // A new subscription for (job, rank); a previous one of the same rank is
  // closed. Starts with WATCH_STARTED, then buffered events after
  // `after_sequence` (if non-zero), then new ones.
  absl::StatusOr<std::shared_ptr<EventStream>> WatchEvents(
      const control::WatchEventsRequest& request);

  // ---- Admin (read-only).
  control::GetStatusResponse GetStatus() const;
  control::ExplainResponse Explain(const control::ExplainRequest& request) const;

  // ---- Background work: switch and host liveness, reconciliation of
  // re-registered switches, QP errors, link retries, snapshots. Call every
  // tick (a fraction of the heartbeat interval) and whenever woken.
  void Tick();

  // Closes every event stream; later calls still work but nothing waits.
  void Shutdown();

 private:
  enum class SwitchState { kUnknown, kReconciling, kUp, kDead };

  struct Switch {
    SwitchState state = SwitchState::kUnknown;
    uint64_t session = 0;
    uint64_t incarnation = 0;
    std::string data_address;
    std::string admin_address;
    absl::Duration last_heartbeat = absl::InfiniteDuration();  // never
    absl::Duration grace_until = absl::ZeroDuration();         // UNKNOWN with state: deadline
    control::ResourceUsage reported;
    // Held by the switch at registration, until reconciled.
    std::set<std::pair<uint64_t, uint32_t>> reported_groups;
    std::set<uint32_t> reported_qpns;
    std::string dead_reason;
    bool death_pending = false;  // disconnected/timed out, Tick handles it
  };

  struct Rank {
    uint32_t rank = 0;
    std::string host;
    int leaf = -1;
    bool attached = false;
    control::Endpoint host_endpoint;
    uint32_t leaf_qpn = 0;
    uint32_t leaf_psn = 0;
    absl::Duration last_seen;
  };

  struct Job {
    uint64_t id = 0;
    std::string name;
    std::string key;
    uint32_t pkey = 0;
    uint32_t qkey = 0;
    control::JobQuota quota;
    std::map<uint32_t, Rank> ranks;
    std::set<uint64_t> groups;
    uint64_t next_event_sequence = 1;
    // Buffered events with the ranks they are for (empty: every rank).
    std::deque<std::pair<control::JobEvent, std::vector<uint32_t>>> events;
    std::map<uint32_t, std::shared_ptr<EventStream>> watchers;
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

  // Failures found by reader threads, handled in Tick.
  struct QpFailure {
    int switch_index;
    uint32_t qpn;
    std::string reason;
  };

  // Commands to send once `mu_` is released, and what to log if they fail.
  struct Outbox {
    std::vector<SwitchCommand> commands;
    void Add(const std::string& sw, control::ManagerMessage msg) {
      commands.push_back({sw, std::move(msg)});
    }
  };

  // ---- helpers; "Locked" ones need mu_ held, others need op_mu_ held.
  absl::StatusOr<Job*> AuthJobLocked(const control::JobCredentials& creds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckJobRequestLocked(const control::CreateJobRequest& request,
                                     control::JobQuota* quota,
                                     std::vector<std::pair<int, uint32_t>>* qps_per_leaf,
                                     std::vector<Shortfall>* shortfalls) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckGroupRequestLocked(const Job& job, const std::vector<uint32_t>& ranks,
                                       uint32_t num_slots, uint32_t slot_bytes, GroupRequest* out,
                                       std::vector<Shortfall>* shortfalls) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  control::GroupInfo GroupInfoLocked(const Group& group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string MulticastAddress(uint32_t index) const;
  uint32_t AllocateMulticastLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Brings a reserved group (state kInstalling) to kReady: connects the new
  // links of its placement, installs its node state on every switch and
  // waits for all confirmations. On failure removes what was installed and
  // returns the error; the caller releases the group.
  absl::Status BringUpGroup(uint64_t group_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  absl::Status ConnectLinks(uint32_t tree_id, const std::vector<int>& children)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  control::ManagerMessage InstallMessageLocked(const Group& group, const SubtreeNode& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases a group's resources and queues its removal from switches.
  void ReleaseGroupLocked(Group& group, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases everything `job` holds, tells its watchers why, journals and
  // erases it (`job` dangles afterwards).
  void DestroyJobLocked(Job& job, const std::string& reason, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a group entirely (journal, job, events with `reason`).
  void EraseGroupLocked(uint64_t group_id, const std::string& reason, bool notify)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A group lost a switch, link or member: re-plan it on another tree when
  // allowed and possible, else revoke it. Notifies its members.
  void FailGroups(const std::vector<uint64_t>& group_ids, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  // Marks ranks detached (their leaf QP is gone or must go), revoking the
  // groups they are in. Returns those groups.
  std::vector<uint64_t> DetachRanksLocked(Job& job, const std::vector<uint32_t>& ranks,
                                          const std::string& reason, bool destroy_qp, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a link (switch dead, QP error, missing after reconcile).
  std::vector<uint64_t> DropLinkLocked(const LinkKey& key, const std::string& reason,
                                       bool mark_down, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleSwitchDeath(int sw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void Reconcile(int sw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void HandleQpFailure(const QpFailure& failure) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  // Sends commands, logs failures; for cleanup that cannot be undone.
  void SendBestEffort(Outbox out, std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void SetSwitchStateLocked(int sw, SwitchState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeUp();

  // Events.
  void PublishLocked(Job& job, control::JobEvent event, std::vector<uint32_t> ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Durability.
  state::JobRecord JobRecordLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  state::GroupRecord GroupRecordLocked(const Group& group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  state::LinkRecord LinkRecordLocked(const Link& link) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  state::Snapshot SnapshotLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status JournalLocked(const state::JournalEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> NextJobIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> NextGroupIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteCountersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Tree* TreeByRoot(std::string_view root) const;

  const Topology* topo_;
  const ManagerOptions options_;
  Clock* clock_;
  SwitchCommander* commander_;
  Journal* journal_;
  const uint64_t incarnation_;
  std::function<void()> wakeup_;

  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  Allocator alloc_ ABSL_GUARDED_BY(mu_);
  std::vector<Switch> switches_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::map<LinkKey, Link> links_ ABSL_GUARDED_BY(mu_);
  std::map<LinkKey, absl::Duration> links_down_until_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> multicast_used_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> pkeys_used_ ABSL_GUARDED_BY(mu_);
  std::vector<QpFailure> qp_failures_ ABSL_GUARDED_BY(mu_);
  uint64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t job_id_limit_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_group_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t group_id_limit_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_AGGREGATION_MANAGER_H_
