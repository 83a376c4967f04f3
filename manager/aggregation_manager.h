// The aggregation manager (AM) of the SHArP paper, without its transport:
// the lifecycle of switches, jobs and groups, liveness and faults. It is the
// one place that takes locks and sequences work; the rest is delegated:
//
//   fabric_state.h     the books (switches, jobs, groups, links, resources)
//                      and the changes that keep them consistent
//   admission.h        whether a request is well-formed and fits
//   group_installer.h  the switch commands that bring a group up
//   state_records.h    journal records and snapshots; recovery.h reads them
//   event_hub.h        what the jobs' processes are told (WatchEvents)
//   liveness.h         who has gone quiet (the sweep of Tick)
//   failures.h         what a dead switch, a QP error or a switch that came
//                      back changes in the books (sent and re-planned here)
//   admin_report.h     Admin.GetStatus and Admin.Explain
//
// The gRPC services (control_service.h) are thin wrappers that
// authenticate nothing themselves, rate-limit, and map Status to gRPC.
//
//   AggregationManager am(topo, options, RealClock(), &hub, journal.get());
//   NETFOLD_RETURN_IF_ERROR(am.Recover(loaded_state));
//   ... start the server ...;  am.Serving();
//   // stream reader thread of a switch:
//   am.RegisterSwitch(reg, session);  am.SwitchHeartbeat(...);
//   // host RPCs:
//   absl::StatusOr<control::CreateJobResponse> job = am.CreateJob(request);
//   // a background thread, every tick or when woken:
//   am.Tick();
//
// Concurrency. Two locks: `op_mu_` serializes every operation that changes
// state and may talk to switches (job/group/attach/destroy, Tick); `mu_`
// guards the books (FabricState, with its journal records and event logs)
// and is never held while waiting on a switch: commands are collected in an
// Outbox under `mu_` and sent after. Calls from switch stream readers
// (RegisterSwitch, SwitchHeartbeat, SwitchDisconnected, ReportQpError) take
// only `mu_` and never wait on a switch: work they cause (reconciling,
// failure handling) runs in Tick. Every public method is thread-safe.
//
// Time. Liveness uses the injected Clock, so tests drive it by hand; waits
// for switch answers use `options.command_timeout` in real time (the
// commander's business).
#ifndef NETFOLD_MANAGER_AGGREGATION_MANAGER_H_
#define NETFOLD_MANAGER_AGGREGATION_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "manager/event_hub.h"
#include "manager/fabric_state.h"
#include "manager/group_installer.h"
#include "manager/journal.h"
#include "manager/manager_options.h"
#include "manager/manager_state.pb.h"
#include "manager/switch_commander.h"
#include "manager/topology.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

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
  // max(switch_timeout, 2 x heartbeat_interval) from Serving() to
  // re-register before their state is written off.
  absl::Status Recover(const state::Snapshot& snapshot);
  // Called once the server accepts connections, before the first Tick: the
  // switches' re-registration grace after Recover starts over from now
  // (RestartReregistrationGrace).
  void Serving();

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

  // True if `creds` name a live job and carry its key (compared in constant
  // time): the transport keys a job's request limits on the job only then.
  bool Authenticates(const control::JobCredentials& creds) const;

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
  // Failures found by reader threads, handled in Tick.
  struct QpFailure {
    int switch_index;
    uint32_t qpn;
    std::string reason;
  };

  // Brings a reserved group (state kInstalling) to kReady: connects the new
  // links of its placement, installs its node state on every switch and
  // waits for all confirmations. On failure removes what was installed and
  // returns the error; the caller releases the group.
  absl::Status BringUpGroup(uint64_t group_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  absl::Status ConnectLinks(uint32_t tree_id, const std::vector<int>& children)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  // A group lost a switch, link or member: re-plan it on another tree when
  // allowed and possible, else revoke it. Notifies its members.
  void FailGroups(const std::vector<uint64_t>& group_ids, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void HandleSwitchDeath(int sw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void Reconcile(int sw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void HandleQpFailure(const QpFailure& qp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  // Sends commands, logs failures; for cleanup that cannot be undone.
  void SendBestEffort(const Outbox& out, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  void WakeUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Topology* topo_;
  const ManagerOptions options_;
  SwitchCommander* commander_;
  const uint64_t incarnation_;
  const GroupInstaller installer_;  // stateless; called without `mu_`

  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::function<void()> wakeup_ ABSL_GUARDED_BY(mu_);
  FabricState state_ ABSL_GUARDED_BY(mu_);
  std::vector<QpFailure> qp_failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_AGGREGATION_MANAGER_H_
