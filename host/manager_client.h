// A rank's client of the aggregation manager (proto/control/netfold_control.proto,
// service HostControl): the job and group calls, and the control thread that
// sends heartbeats and watches the job's event stream.
//
//   ManagerClient manager(options.manager, credential, options.timeout);
//   auto job = manager.CreateJob(request);                  // rank 0
//   manager.SetJob(job->job_id(), job->job_key());          // every rank
//   auto attached = manager.Attach(attach_request);
//   manager.StartControl(rank, heartbeat_interval,
//                        [&](const control::JobEvent& e) { ... });  // control thread
//   ...
//   manager.StopControl();                                  // joins it
//
// Every call has a deadline of `timeout`. A manager that is not reachable
// (UNAVAILABLE: restarting, not started, gone) is asked again, but not for
// long where waiting helps nobody: the job's first call (CreateJob) gives
// up after `connect_timeout` (nothing listens: the job goes on without the
// fabric at once); the releases (DestroyGroup, DestroyJob) retry only when
// the caller says the fabric is still there (a manager restarting), and
// try once otherwise (a fabric that is gone reclaims nothing; a manager
// that comes back reclaims the job as abandoned). The others (Attach,
// CreateGroup) retry until the deadline, but wait for a connection to a
// manager that stopped answering (refused, or heartbeats unanswered on a
// channel that is not connected) only kUnreachablePatience from when it
// stopped, on the process's awake clock: the first group of a manager's
// restart waits for it, the groups after a manager that is gone fail at
// once (UNAVAILABLE, "... (no manager answers at ADDRESS)"). Any answer of
// the manager's (a heartbeat, a call's, even an error) makes the client
// patient again. A call the manager's rate limiter
// refused (RESOURCE_EXHAUSTED with its retry-after) is retried after a
// jittered exponential backoff, within the call's deadline, whatever the
// call. Other errors return at once, as a Status whose message says what
// was being done.
//
// Thread-safety: the calls may be made from any thread, but SetJob must
// happen before StartControl and any call that carries the job's
// credentials. The event callback runs on the control thread.
#ifndef NETFOLD_HOST_MANAGER_CLIENT_H_
#define NETFOLD_HOST_MANAGER_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::host {

class ManagerClient {
 public:
  // The channel's reconnect backoff toward a manager that went away: the
  // restarted manager counts its ranks' grace with the cap in mind
  // (manager/recovery.h).
  static constexpr absl::Duration kReconnectBackoffMin = absl::Milliseconds(100);
  static constexpr absl::Duration kReconnectBackoffMax = absl::Milliseconds(500);
  // The backoff between retries of a call the manager's rate limiter
  // refused (doubling from min to max, jittered; never sooner than the
  // manager's retry-after).
  static constexpr absl::Duration kRateLimitBackoffMin = absl::Milliseconds(20);
  static constexpr absl::Duration kRateLimitBackoffMax = absl::Seconds(1);
  // How long Attach and CreateGroup wait for a connection to a manager
  // that stopped answering, counted from when it stopped: a restart
  // (netfold's own take well under a second) is waited for, a manager that
  // is gone is not.
  static constexpr absl::Duration kUnreachablePatience = absl::Seconds(5);

  // `address` is host:port; `auth` the fabric credential every call
  // presents ("" = none) and the fabric's CA (TLS; "" = plaintext).
  // Connects lazily (on the first call).
  ManagerClient(std::string address, const auth::ClientAuth& auth, absl::Duration timeout,
                absl::Duration connect_timeout = absl::Seconds(1));
  ~ManagerClient();  // stops the control thread
  ManagerClient(const ManagerClient&) = delete;
  ManagerClient& operator=(const ManagerClient&) = delete;

  const std::string& address() const { return address_; }

  absl::StatusOr<control::CreateJobResponse> CreateJob(const control::CreateJobRequest& request);
  // The job's credentials, sent with every later call.
  void SetJob(uint64_t job_id, const std::string& job_key);
  const control::JobCredentials& credentials() const { return credentials_; }
  // Retries while the leaf switch is not up yet (UNAVAILABLE).
  absl::StatusOr<control::AttachResponse> Attach(const control::AttachRequest& request);
  absl::StatusOr<control::CreateGroupResponse> CreateGroup(const control::CreateGroupRequest& request);
  // `patient`: retry UNAVAILABLE until the deadline (the fabric is still
  // there: the manager is restarting); otherwise one attempt.
  absl::Status DestroyGroup(uint64_t group_id, bool patient);
  absl::Status DestroyJob(bool patient);

  // Starts the control thread: a heartbeat for `rank` every `interval`, and
  // the job's events, each handed to `on_event` (WATCH_STARTED markers are
  // not). A broken stream is watched again after a short back-off, from the
  // last sequence number seen. A failed heartbeat (the manager is away) is
  // not an error: the data plane does not need the manager, heartbeats go
  // on every interval and reach a restarted manager within about
  // kReconnectBackoffMax of its return. Once only.
  void StartControl(uint32_t rank, absl::Duration heartbeat_interval,
                    std::function<void(const control::JobEvent&)> on_event);
  // Stops and joins the control thread (idempotent).
  void StopControl();
  // This rank's leaf link in data plane `plane`, attached with `psn` (its
  // endpoint's), failed: the next heartbeat, sent at once, tells the
  // manager (HostHeartbeatRequest.link_failures), which detaches the rank
  // there and fails its groups, so that the job's other ranks learn it
  // from their events rather than each from an operation's deadline. The
  // manager ignores it if the rank attached again since. Kept until a
  // heartbeat carrying it is answered. Any thread; never blocks on the
  // manager.
  void ReportLinkFailure(uint32_t plane, uint32_t psn, std::string why);

 private:
  // How long a call retries while there is no connection to the manager:
  // its whole `retry_for`, or (kBounded) no longer than what is left of
  // kUnreachablePatience.
  enum class Patience { kWhole, kBounded };
  // Calls `rpc` with the remaining time of `deadline` (capped at
  // timeout_); retries UNAVAILABLE every `retry_every` for `retry_for`
  // (see Patience), each retry waiting (wait_for_ready) for the channel to
  // reconnect. A failure for want of a connection says "no manager answers".
  // Waits (at most connect_timeout) for a connection to the manager.
  absl::Status Connect();
  template <typename Rpc>
  absl::Status Call(std::string_view what, absl::Duration deadline, absl::Duration retry_for,
                    absl::Duration retry_every, Patience patience, Rpc rpc);
  void RunControl(uint32_t rank, absl::Duration heartbeat_interval,
                  const std::function<void(const control::JobEvent&)>& on_event);
  // The manager did not answer (marked once, from the first time) or did.
  void MarkUnreachable();
  void MarkReachable() { unreachable_since_ns_.store(0, std::memory_order_relaxed); }
  // What is left of kUnreachablePatience; infinite while the manager answers.
  absl::Duration PatienceLeft() const;

  const std::string address_;
  const std::string connect_hint_;  // auth::ConnectHint, for Connect's error
  const absl::Duration timeout_;
  const absl::Duration connect_timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<control::HostControl::Stub> stub_;
  control::JobCredentials credentials_;

  std::thread control_thread_;
  std::thread heartbeat_thread_;
  absl::Notification stop_;
  absl::Mutex watch_mu_;  // the calls StopControl cancels
  std::unique_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(watch_mu_);
  grpc::ClientContext* heartbeat_context_ ABSL_GUARDED_BY(watch_mu_) = nullptr;
  // ProcessAwakeClock nanoseconds since the manager stopped answering; 0
  // while it answers. Set by the heartbeats and by calls, from any thread.
  std::atomic<int64_t> unreachable_since_ns_{0};
  // Link failures for the heartbeats to carry (ReportLinkFailure).
  absl::Mutex reports_mu_;
  std::vector<control::LinkFailure> reports_ ABSL_GUARDED_BY(reports_mu_);
  bool report_due_ ABSL_GUARDED_BY(reports_mu_) = false;  // send without waiting
  bool stopping_ ABSL_GUARDED_BY(reports_mu_) = false;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_MANAGER_CLIENT_H_
