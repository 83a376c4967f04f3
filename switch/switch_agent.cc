#include "switch/switch_agent.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "auth/grpc_credential.h"
#include "base/log.h"

namespace netfold::sw {

struct SwitchAgent::State {
  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  int registrations ABSL_GUARDED_BY(mu) = 0;
  std::string last_error ABSL_GUARDED_BY(mu);
  grpc::ClientContext* ctx ABSL_GUARDED_BY(mu) = nullptr;
  // The current session (0: none). Results of another session are dropped.
  uint64_t session_id ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_session_id ABSL_GUARDED_BY(mu) = 1;
  bool welcomed ABSL_GUARDED_BY(mu) = false;
  bool session_over ABSL_GUARDED_BY(mu) = false;
  absl::Duration heartbeat_interval ABSL_GUARDED_BY(mu) = absl::Milliseconds(500);
  std::deque<control::CommandResult> results ABSL_GUARDED_BY(mu);
  std::deque<QpFailure> qp_failures ABSL_GUARDED_BY(mu);
};

namespace {

using Stream = grpc::ClientReaderWriter<control::SwitchMessage, control::ManagerMessage>;

// The state the switch holds, taken on the data-plane thread.
struct HeldState {
  absl::Notification done;
  control::RegisterSwitch reg;
};

}  // namespace

uint64_t NewIncarnation() {
  absl::BitGen gen;
  uint64_t x = 0;
  while (x == 0) x = absl::Uniform<uint64_t>(gen);
  return x;
}

SwitchAgent::SwitchAgent(SwitchAgentOptions options, SwitchDataPlane* dp,
                         std::function<control::ResourceUsage()> usage)
    : options_(std::move(options)),
      dp_(dp),
      usage_(std::move(usage)),
      state_(std::make_shared<State>()),
      incarnation_(options_.incarnation != 0 ? options_.incarnation : NewIncarnation()) {
  // Find a restarted manager within about a heartbeat (gRPC's default
  // reconnect backoff grows to minutes).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.reconnect_min)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.reconnect_min)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.reconnect_max)));
  stub_ = control::SwitchControl::NewStub(
      auth::CreateChannel(options_.manager_address,
                          {.credential = options_.credential, .tls_ca_pem = options_.tls_ca_pem},
                          args));
}

SwitchAgent::~SwitchAgent() { Stop(); }

void SwitchAgent::Start() {
  absl::MutexLock lock(&start_mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void SwitchAgent::Stop() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
    if (state_->ctx != nullptr) state_->ctx->TryCancel();
  }
  absl::MutexLock lock(&start_mu_);
  if (thread_.joinable()) thread_.join();
}

void SwitchAgent::ReportQpFailures(std::vector<QpFailure> failures) {
  if (failures.empty()) return;
  absl::MutexLock lock(&state_->mu);
  for (QpFailure& f : failures) state_->qp_failures.push_back(std::move(f));
}

bool SwitchAgent::WaitRegistered(absl::Duration timeout, int count) {
  State* st = state_.get();
  absl::MutexLock lock(&st->mu);
  auto done = [st, count]() ABSL_SHARED_LOCKS_REQUIRED(st->mu) {
    return st->registrations >= count;
  };
  return st->mu.AwaitWithTimeout(absl::Condition(&done), timeout);
}

int SwitchAgent::registrations() const {
  absl::MutexLock lock(&state_->mu);
  return state_->registrations;
}

bool SwitchAgent::connected() const {
  absl::MutexLock lock(&state_->mu);
  return state_->session_id != 0 && state_->welcomed && !state_->session_over;
}

std::string SwitchAgent::last_error() const {
  absl::MutexLock lock(&state_->mu);
  return state_->last_error;
}

void SwitchAgent::Run() {
  absl::Duration backoff = options_.reconnect_min;
  while (true) {
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->stopping) return;
    }
    const bool welcomed = RunSession();
    if (welcomed) backoff = options_.reconnect_min;
    State* st = state_.get();
    absl::MutexLock lock(&st->mu);
    auto stop = [st]() ABSL_SHARED_LOCKS_REQUIRED(st->mu) { return st->stopping; };
    if (st->mu.AwaitWithTimeout(absl::Condition(&stop), backoff)) return;
    if (!welcomed) backoff = std::min(backoff * 2, options_.reconnect_max);
  }
}

bool SwitchAgent::RunSession() {
  // What the switch holds, before a stream is open (the manager wants the
  // registration within its own timeout).
  auto held = std::make_shared<HeldState>();
  dp_->Post([held](SwitchDataPlane& dp) {
    FillHeldState(dp, &held->reg);
    held->done.Notify();
  });
  if (!held->done.WaitForNotificationWithTimeout(options_.data_plane_timeout)) {
    NETFOLD_LOG(kError) << "switch " << options_.name << ": the data plane did not report its "
                        << "state within " << options_.data_plane_timeout << "; not registering";
    return false;
  }
  control::SwitchMessage registration;
  control::RegisterSwitch* reg = registration.mutable_register_();
  *reg = held->reg;
  reg->set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  reg->set_name(options_.name);
  reg->set_data_address(options_.data_address);
  reg->set_admin_address(options_.admin_address);
  *reg->mutable_capacity() = options_.capacity;
  reg->set_incarnation(incarnation_);

  grpc::ClientContext ctx;
  uint64_t session_id;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->stopping) return false;
    session_id = state_->next_session_id++;
    state_->session_id = session_id;
    state_->ctx = &ctx;
    state_->welcomed = false;
    state_->session_over = false;
    state_->results.clear();
  }
  std::unique_ptr<Stream> stream = stub_->Connect(&ctx);
  std::thread writer(
      [&, session_id] { WriterLoop(stream.get(), &ctx, session_id, registration); });

  bool welcomed = false;
  control::ManagerMessage m;
  while (stream->Read(&m)) {
    if (m.has_welcome()) {
      absl::MutexLock lock(&state_->mu);
      if (!state_->welcomed) {
        state_->welcomed = true;
        state_->heartbeat_interval =
            absl::Milliseconds(std::max<uint32_t>(10, m.welcome().heartbeat_interval_ms()));
        ++state_->registrations;
        welcomed = true;
        NETFOLD_LOG(kInfo) << "switch " << options_.name << ": registered with manager "
                           << options_.manager_address << " (" << reg->installed_groups_size()
                           << " groups, " << reg->qpns_size() << " QPs reported; heartbeat every "
                           << state_->heartbeat_interval << ")";
      }
      continue;
    }
    // Commands run on the data-plane thread, in the order they came.
    std::shared_ptr<State> st = state_;
    const CommandLimits limits = options_.limits;
    dp_->Post([st, session_id, limits, cmd = std::move(m)](SwitchDataPlane& dp) {
      control::CommandResult r = ExecuteCommand(dp, cmd, limits);
      if (cmd.command_id() == 0) return;
      absl::MutexLock lock(&st->mu);
      if (st->session_id == session_id) st->results.push_back(std::move(r));
    });
    m = control::ManagerMessage();
  }
  {
    absl::MutexLock lock(&state_->mu);
    state_->session_over = true;
  }
  writer.join();
  const grpc::Status status = stream->Finish();
  bool stopping;
  {
    absl::MutexLock lock(&state_->mu);
    state_->ctx = nullptr;
    state_->session_id = 0;
    state_->results.clear();
    stopping = state_->stopping;
    if (!status.ok() && !stopping) {
      state_->last_error = absl::StrFormat("%d: %s", static_cast<int>(status.error_code()),
                                           status.error_message());
    }
  }
  if (welcomed) last_refusal_.clear();  // a refusal after a welcome is news
  if (!stopping) {
    const std::string what = absl::StrFormat(
        "switch %s: control stream to %s ended (%d: %s); reconnecting", options_.name,
        options_.manager_address, static_cast<int>(status.error_code()), status.error_message());
    const bool refused = !welcomed && status.error_code() != grpc::StatusCode::UNAVAILABLE &&
                         status.error_code() != grpc::StatusCode::CANCELLED &&
                         status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED;
    if (refused) {
      // The manager said no (unknown name, no or a wrong fabric credential, too small): an
      // operator has to act; the switch keeps retrying meanwhile (about twice a second),
      // and says so again once a minute, or at once if the reason changes.
      const std::string reason = status.error_message();
      const absl::Time now = absl::Now();
      if (reason != last_refusal_ || now - last_refusal_logged_ >= absl::Minutes(1)) {
        NETFOLD_LOG(kError) << what << " -- the manager refused the registration";
        last_refusal_ = reason;
        last_refusal_logged_ = now;
      } else {
        NETFOLD_LOG(kDebug) << what << " -- refused again";
      }
    } else if (welcomed) {
      NETFOLD_LOG(kWarning) << what;
    } else {
      NETFOLD_LOG(kInfo) << what;
    }
  }
  return welcomed;
}

void SwitchAgent::WriterLoop(Stream* stream, grpc::ClientContext* ctx, uint64_t session_id,
                             const control::SwitchMessage& registration) {
  State* st = state_.get();
  auto fail = [&](std::string_view what) {
    NETFOLD_LOG(kInfo) << "switch " << options_.name << ": writing " << what
                       << " failed; closing the stream";
    ctx->TryCancel();
  };
  if (!stream->Write(registration)) {
    fail("the registration");
    return;
  }
  const absl::Time welcome_deadline = absl::Now() + options_.register_timeout;
  absl::Time next_heartbeat = absl::InfiniteFuture();
  while (true) {
    std::vector<control::SwitchMessage> out;
    size_t num_failures = 0;
    bool heartbeat = false;
    {
      absl::MutexLock lock(&st->mu);
      const bool was_welcomed = next_heartbeat != absl::InfiniteFuture();
      auto ready = [st, was_welcomed]() ABSL_SHARED_LOCKS_REQUIRED(st->mu) {
        return st->stopping || st->session_over || !st->results.empty() ||
               (st->welcomed && (!was_welcomed || !st->qp_failures.empty()));
      };
      // Wake for work, or at the next heartbeat / the welcome deadline.
      const absl::Time until = st->welcomed ? std::min(next_heartbeat, absl::Now() + st->heartbeat_interval)
                                            : welcome_deadline;
      st->mu.AwaitWithDeadline(absl::Condition(&ready), until);
      if (st->stopping || st->session_over || st->session_id != session_id) return;
      if (!st->welcomed) {
        if (absl::Now() >= welcome_deadline) {
          st->last_error = absl::StrFormat("no welcome from the manager within %s",
                                           absl::FormatDuration(options_.register_timeout));
          ctx->TryCancel();
          return;
        }
        continue;
      }
      if (next_heartbeat == absl::InfiniteFuture()) {
        next_heartbeat = absl::Now();  // the first heartbeat right after the welcome
      }
      while (!st->results.empty()) {
        control::SwitchMessage msg;
        *msg.mutable_result() = std::move(st->results.front());
        st->results.pop_front();
        out.push_back(std::move(msg));
      }
      for (const QpFailure& f : st->qp_failures) {
        control::SwitchMessage msg;
        msg.mutable_qp_error()->set_qpn(f.qpn);
        msg.mutable_qp_error()->set_reason(
            absl::StrFormat("%s: %s", f.peer, std::string(f.reason.message())));
        out.push_back(std::move(msg));
        ++num_failures;
      }
      if (const absl::Time now = absl::Now(); now >= next_heartbeat) {
        heartbeat = true;
        if (const absl::Duration late = now - next_heartbeat; late > st->heartbeat_interval) {
          NETFOLD_LOG(kWarning) << "switch " << options_.name << ": heartbeat "
                                << heartbeat_sequence_ + 1 << " goes out "
                                << absl::Trunc(late, absl::Milliseconds(1))
                                << " late (this thread did not run, or a write blocked)";
        }
        next_heartbeat = now + st->heartbeat_interval;
      }
    }
    if (heartbeat) {
      control::SwitchMessage msg;
      msg.mutable_heartbeat()->set_sequence(++heartbeat_sequence_);
      *msg.mutable_heartbeat()->mutable_usage() = usage_();
      out.push_back(std::move(msg));
    }
    size_t failures_written = 0;
    bool broken = false;
    for (const control::SwitchMessage& msg : out) {
      if (!stream->Write(msg)) {
        fail(msg.has_result()      ? "a command result"
             : msg.has_heartbeat() ? "a heartbeat"
                                   : "a QP error");
        broken = true;
        break;
      }
      if (msg.has_qp_error()) {
        ++failures_written;
        NETFOLD_LOG(kWarning) << "switch " << options_.name << ": reported QP 0x" << std::hex
                              << msg.qp_error().qpn() << std::dec << " failed: "
                              << msg.qp_error().reason();
      }
    }
    {
      // Reported failures are done; the others wait for the next stream.
      absl::MutexLock lock(&st->mu);
      for (size_t i = 0; i < std::min(failures_written, num_failures) && !st->qp_failures.empty();
           ++i) {
        st->qp_failures.pop_front();
      }
    }
    if (broken) return;
  }
}

}  // namespace netfold::sw
