#include "host/manager_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "auth/grpc_credential.h"
#include "base/awake_clock.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "proto/control/grpc_status.h"

namespace netfold::host {

namespace {

// The manager's rate limiter marks its refusals with the time until it
// takes requests again (docs/control_plane.md); nullopt for any other
// answer, including a RESOURCE_EXHAUSTED that means the fabric is full.
std::optional<absl::Duration> RateLimitedFor(const grpc::ClientContext& c, const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return std::nullopt;
  const auto& trailers = c.GetServerTrailingMetadata();
  auto it = trailers.find("netfold-retry-after-ms");
  if (it == trailers.end()) return std::nullopt;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &ms) || ms < 0) {
    ms = 0;
  }
  return absl::Milliseconds(std::min<int64_t>(ms, 60000));
}

void SetDeadline(grpc::ClientContext* c, absl::Duration d) {
  c->set_deadline(std::chrono::system_clock::now() +
                  std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d))));
}

}  // namespace

ManagerClient::ManagerClient(std::string address, const auth::ClientAuth& auth,
                             absl::Duration timeout, absl::Duration connect_timeout)
    : address_(std::move(address)),
      connect_hint_(auth::ConnectHint(auth)),
      timeout_(timeout),
      connect_timeout_(std::min(connect_timeout, timeout)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  // Find a restarted manager within about a heartbeat. gRPC's default
  // reconnect backoff grows to minutes: after 6 s of absence the next
  // attempt came 2 to 4 s after the manager was back, and a manager
  // with a shorter host timeout detached every rank (issue 23, item 7).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReconnectBackoffMin)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kReconnectBackoffMax)));
  channel_ = auth::CreateChannel(address_, auth, args);
  stub_ = control::HostControl::NewStub(channel_);
}

ManagerClient::~ManagerClient() { StopControl(); }

template <typename Rpc>
absl::Status ManagerClient::Call(std::string_view what, absl::Duration deadline_after,
                                 absl::Duration retry_for, absl::Duration retry_every,
                                 Patience patience, Rpc rpc) {
  Deadline deadline(RealClock(), std::min(deadline_after, timeout_));
  Deadline retrying(RealClock(), retry_for);
  // Retries for a connection wait only as long as a manager that does not
  // answer is worth waiting for (kUnreachablePatience from when it stopped);
  // retries of the manager's own UNAVAILABLE (a leaf switch not up yet) are
  // not bounded by it.
  bool no_connection = false;
  auto retry_left = [&] {
    return no_connection && patience == Patience::kBounded
               ? std::min(retrying.Remaining(), PatienceLeft())
               : retrying.Remaining();
  };
  // What a failure for want of a connection says, whatever the last
  // attempt's own status.
  auto unreachable = [&](const absl::Status& first) {
    return absl::UnavailableError(
        absl::StrFormat("%s (no manager answers at %s)", first.message(), address_));
  };
  absl::Status s;
  absl::Status first_unreachable;
  absl::Duration backoff = kRateLimitBackoffMin;
  bool wait_for_channel = false;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext c;
    if (!wait_for_channel) {
      SetDeadline(&c, deadline.Remaining());
    } else {
      // A retry after UNAVAILABLE waits for the channel to come back (and so
      // polls its reconnection, see the heartbeats) rather than failing at
      // once.
      SetDeadline(&c, std::min(deadline.Remaining(), retry_left()));
      c.set_wait_for_ready(true);
    }
    const grpc::Status g = rpc(&c);
    s = control::FromGrpc(g, what);
    no_connection = absl::IsUnavailable(s) &&
                    channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY;
    if (no_connection) {
      MarkUnreachable();
      if (first_unreachable.ok()) first_unreachable = s;
    } else if (!absl::IsDeadlineExceeded(s) && !absl::IsCancelled(s)) {
      MarkReachable();  // the manager answered, whatever it said
    }
    if (s.ok()) return s;
    if (wait_for_channel && absl::IsDeadlineExceeded(s) && !first_unreachable.ok()) {
      return unreachable(first_unreachable);  // waited for the channel in vain
    }
    absl::Duration pause;
    if (std::optional<absl::Duration> after = RateLimitedFor(c, g); after.has_value()) {
      // Rate-limited: back off, exponentially and with jitter so that the
      // ranks of a job do not come back in step, never sooner than the
      // manager said, and retry within the call's deadline.
      thread_local absl::BitGen gen;
      pause = std::max(*after, backoff * absl::Uniform(gen, 0.5, 1.0));
      backoff = std::min(2 * backoff, kRateLimitBackoffMax);
      NETFOLD_LOG(kDebug) << what << ": rate-limited by the manager; retrying in " << pause;
    } else if (absl::IsUnavailable(s) && retry_left() > retry_every) {
      pause = retry_every;
      wait_for_channel = true;
    } else {
      return no_connection ? unreachable(s) : s;
    }
    if (deadline.Remaining() <= pause) break;
    absl::SleepFor(pause);
    if (absl::IsUnavailable(s) && !no_connection &&
        channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
      // The connection broke with that answer, before the channel noticed:
      // a manager that stopped answering, whose retries wait only the
      // patience left (not the call's whole timeout).
      no_connection = true;
      MarkUnreachable();
      if (first_unreachable.ok()) first_unreachable = s;
    }
  }
  return s;
}

void ManagerClient::MarkUnreachable() {
  int64_t expected = 0;
  unreachable_since_ns_.compare_exchange_strong(expected, ProcessAwakeClock().NowNanos(),
                                                std::memory_order_relaxed);
}

absl::Duration ManagerClient::PatienceLeft() const {
  const int64_t since = unreachable_since_ns_.load(std::memory_order_relaxed);
  if (since == 0) return absl::InfiniteDuration();
  return std::max(absl::ZeroDuration(),
                  kUnreachablePatience - absl::Nanoseconds(ProcessAwakeClock().NowNanos() - since));
}

absl::Status ManagerClient::Connect() {
  // Refused or unresolvable: the channel fails within milliseconds and
  // nothing is worth waiting for. Unanswered (a host that drops the
  // connection attempt): up to connect_timeout.
  Deadline deadline(RealClock(), connect_timeout_);
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN && !deadline.Expired()) {
    channel_->WaitForStateChange(
        state, std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline.Remaining())));
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "no netfold manager answers at %s (%s): start a fabric with `netfold up` and export the "
      "NETFOLD_MANAGER it prints",
      address_,
      state == GRPC_CHANNEL_TRANSIENT_FAILURE
          ? "connection refused, the name does not resolve, or the TLS handshake failed: " +
                connect_hint_
          : absl::StrFormat("no answer within %s", absl::FormatDuration(connect_timeout_))));
}

absl::StatusOr<control::CreateJobResponse> ManagerClient::CreateJob(
    const control::CreateJobRequest& request) {
  NETFOLD_RETURN_IF_ERROR(Connect());
  control::CreateJobResponse response;
  absl::Status s = Call(absl::StrFormat("creating the job at the manager %s", address_), timeout_,
                        connect_timeout_, absl::Milliseconds(100), Patience::kWhole,
                        [&](grpc::ClientContext* c) {
                          return stub_->CreateJob(c, request, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

void ManagerClient::SetJob(uint64_t job_id, const std::string& job_key) {
  credentials_.set_job_id(job_id);
  credentials_.set_job_key(job_key);
}

absl::StatusOr<control::AttachResponse> ManagerClient::Attach(
    const control::AttachRequest& request) {
  control::AttachRequest req = request;
  *req.mutable_job() = credentials_;
  control::AttachResponse response;
  absl::Status s = Call(absl::StrFormat("rank %d attaching to its leaf switch", req.rank()),
                        timeout_, timeout_, absl::Milliseconds(50), Patience::kBounded,
                        [&](grpc::ClientContext* c) {
                          return stub_->Attach(c, req, &response);
                        });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<control::CreateGroupResponse> ManagerClient::CreateGroup(
    const control::CreateGroupRequest& request) {
  control::CreateGroupRequest req = request;
  *req.mutable_job() = credentials_;
  control::CreateGroupResponse response;
  absl::Status s = Call("creating a group", timeout_, timeout_, absl::Milliseconds(100),
                        Patience::kBounded,
                        [&](grpc::ClientContext* c) {
                          return stub_->CreateGroup(c, req, &response);
                        });
  if (absl::IsResourceExhausted(s)) return WithErrorCode(s, NETFOLD_ERR_NO_RESOURCES);
  if (!s.ok()) return s;
  return response;
}

absl::Status ManagerClient::DestroyGroup(uint64_t group_id, bool patient) {
  control::DestroyGroupRequest req;
  *req.mutable_job() = credentials_;
  req.set_group_id(group_id);
  control::DestroyGroupResponse response;
  return Call("destroying a group", patient ? timeout_ : connect_timeout_,
              patient ? timeout_ : absl::ZeroDuration(), absl::Milliseconds(100), Patience::kWhole,
              [&](grpc::ClientContext* c) {
                return stub_->DestroyGroup(c, req, &response);
              });
}

absl::Status ManagerClient::DestroyJob(bool patient) {
  control::DestroyJobRequest req;
  *req.mutable_job() = credentials_;
  control::DestroyJobResponse response;
  return Call("destroying the job", patient ? timeout_ : connect_timeout_,
              patient ? timeout_ : absl::ZeroDuration(), absl::Milliseconds(100), Patience::kWhole,
              [&](grpc::ClientContext* c) {
                return stub_->DestroyJob(c, req, &response);
              });
}

void ManagerClient::StartControl(uint32_t rank, absl::Duration heartbeat_interval,
                                 std::function<void(const control::JobEvent&)> on_event) {
  control_thread_ = std::thread(
      [this, rank, heartbeat_interval, on_event = std::move(on_event)] {
        RunControl(rank, heartbeat_interval, on_event);
      });
}

void ManagerClient::ReportLinkFailure(uint32_t plane, uint32_t psn, std::string why) {
  absl::MutexLock lock(&reports_mu_);
  for (const control::LinkFailure& f : reports_) {
    if (f.plane() == plane && f.psn() == psn) return;
  }
  control::LinkFailure& f = reports_.emplace_back();
  f.set_plane(plane);
  f.set_psn(psn);
  // Printable ASCII: a cut through a UTF-8 character would make the
  // heartbeat unparseable (a proto3 string).
  if (why.size() > 200) why.resize(200);
  f.set_reason(absl::CHexEscape(why));
  report_due_ = true;
}

void ManagerClient::StopControl() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  {
    absl::MutexLock lock(&reports_mu_);
    stopping_ = true;  // wakes the heartbeats' wait
  }
  {
    absl::MutexLock lock(&watch_mu_);
    if (watch_context_) watch_context_->TryCancel();
    if (heartbeat_context_ != nullptr) heartbeat_context_->TryCancel();
  }
  if (control_thread_.joinable()) control_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void ManagerClient::RunControl(uint32_t rank, absl::Duration heartbeat_interval,
                               const std::function<void(const control::JobEvent&)>& on_event) {
  if (stop_.HasBeenNotified()) return;
  // Heartbeats in their own small thread; this one blocks on the event stream.
  heartbeat_thread_ = std::thread([this, rank, heartbeat_interval] {
    // Failed heartbeats are not fatal here: the data plane does not need
    // the manager, and a restarted manager gives the ranks a grace period.
    int failed = 0;
    absl::Time failing_since;
    while (true) {
      control::HostHeartbeatRequest req;
      {
        // Every interval, or at once for a link failure to report.
        absl::MutexLock lock(&reports_mu_);
        auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reports_mu_) {
          return stopping_ || report_due_;
        };
        reports_mu_.AwaitWithTimeout(absl::Condition(&woken), heartbeat_interval);
        if (stopping_) break;
        report_due_ = false;
        for (const control::LinkFailure& f : reports_) *req.add_link_failures() = f;
      }
      *req.mutable_job() = credentials_;
      req.set_rank(rank);
      control::HostHeartbeatResponse resp;
      grpc::ClientContext c;
      SetDeadline(&c, heartbeat_interval);
      // Waits for the channel instead of failing at once while it is down:
      // a pending call is what polls the channel's reconnection attempts
      // (without one, gRPC notices a connection only at its 5 s backup
      // poll, and a restarted manager heard nothing for seconds).
      c.set_wait_for_ready(true);
      {
        absl::MutexLock lock(&watch_mu_);
        if (stop_.HasBeenNotified()) break;
        heartbeat_context_ = &c;
      }
      grpc::Status s = stub_->Heartbeat(&c, req, &resp);
      {
        absl::MutexLock lock(&watch_mu_);
        heartbeat_context_ = nullptr;
      }
      if (!s.ok()) {
        const bool no_answer = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                               s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                               s.error_code() == grpc::StatusCode::CANCELLED;
        if (no_answer && channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
          // No connection (a slow manager on a live one is not marked).
          MarkUnreachable();
        } else if (!no_answer) {
          MarkReachable();  // the manager answered, with an error
        }
        if (failed++ == 0) failing_since = absl::Now();
        NETFOLD_LOG(kDebug) << "heartbeat: " << s.error_message() << " (channel state "
                            << channel_->GetState(false) << ")";
      } else {
        MarkReachable();
        if (req.link_failures_size() > 0) {
          // Told: the reports this heartbeat carried are done with.
          absl::MutexLock lock(&reports_mu_);
          std::erase_if(reports_, [&](const control::LinkFailure& f) {
            for (const control::LinkFailure& sent : req.link_failures()) {
              if (sent.plane() == f.plane() && sent.psn() == f.psn()) return true;
            }
            return false;
          });
        }
        if (failed > 0) {
          NETFOLD_LOG(kInfo) << absl::StrFormat(
              "heartbeats to the manager %s resumed after %d failed over %s", address_, failed,
              absl::FormatDuration(absl::Now() - failing_since));
          failed = 0;
        }
      }
    }
  });
  // What this rank saw, in the numbering of the manager incarnation that
  // issued it: a restarted manager replays everything it kept when asked
  // with another incarnation's number.
  uint64_t last_sequence = 0, last_incarnation = 0;
  while (!stop_.HasBeenNotified()) {
    control::WatchEventsRequest req;
    *req.mutable_job() = credentials_;
    req.set_rank(rank);
    req.set_after_sequence(last_sequence);
    req.set_incarnation(last_incarnation);
    grpc::ClientContext* context = nullptr;
    {
      absl::MutexLock lock(&watch_mu_);
      if (stop_.HasBeenNotified()) break;
      watch_context_ = std::make_unique<grpc::ClientContext>();
      context = watch_context_.get();
    }
    auto reader = stub_->WatchEvents(context, req);
    control::JobEvent event;
    while (reader->Read(&event)) {
      if (event.manager_incarnation() != 0 && event.manager_incarnation() != last_incarnation) {
        last_incarnation = event.manager_incarnation();  // its numbering starts afresh
        last_sequence = 0;
      }
      if (event.sequence() > 0) last_sequence = event.sequence();
      if (event.kind() != control::JobEvent::WATCH_STARTED) on_event(event);
    }
    grpc::Status s = reader->Finish();
    if (stop_.HasBeenNotified()) break;
    NETFOLD_LOG(kDebug) << "event stream ended: " << s.error_message() << "; reconnecting";
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));  // back off, then watch again
  }
}

}  // namespace netfold::host
