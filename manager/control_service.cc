#include "manager/control_service.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_format.h"
#include "auth/grpc_credential.h"
#include "base/log.h"
#include "manager/endpoint_address.h"
#include "manager/event_watch.h"
#include "proto/control/grpc_status.h"

namespace netfold::manager {

// ---------------------------------------------------------------------------
// SwitchHub

struct SwitchHub::Session {
  uint64_t id = 0;
  std::string name;
  grpc::ServerContext* ctx = nullptr;
  Stream* stream = nullptr;
  absl::Mutex mu;
  std::deque<control::ManagerMessage> outbox ABSL_GUARDED_BY(mu);
  bool started ABSL_GUARDED_BY(mu) = false;
  bool closed ABSL_GUARDED_BY(mu) = false;
  bool writing ABSL_GUARDED_BY(mu) = false;
  bool handler_done ABSL_GUARDED_BY(mu) = false;  // ctx and stream are gone
  std::thread writer;
};

struct SwitchHub::Batch {
  explicit Batch(size_t n)
      : results(n, absl::UnknownError("pending")), done(n, false), remaining(n) {}
  absl::Mutex mu;
  std::vector<absl::StatusOr<control::CommandResult>> results ABSL_GUARDED_BY(mu);
  std::vector<bool> done ABSL_GUARDED_BY(mu);
  size_t remaining ABSL_GUARDED_BY(mu);
};

SwitchHub::~SwitchHub() { Shutdown(); }

uint64_t SwitchHub::SessionId(const Session& session) const { return session.id; }

std::shared_ptr<SwitchHub::Session> SwitchHub::Activate(const std::string& name,
                                                        grpc::ServerContext* ctx, Stream* stream) {
  auto session = std::make_shared<Session>();
  session->name = name;
  session->ctx = ctx;
  session->stream = stream;
  std::shared_ptr<Session> old;
  {
    absl::MutexLock lock(&mu_);
    session->id = next_session_++;
    if (shut_down_) {
      absl::MutexLock s(&session->mu);
      session->closed = true;
      return session;
    }
    auto it = active_.find(name);
    if (it != active_.end()) old = it->second;
    active_[name] = session;
  }
  if (old != nullptr) {
    NETFOLD_LOG(kInfo) << "switch " << name << ": session " << session->id << " replaces "
                       << old->id;
    Kick(old);
  }
  return session;
}

void SwitchHub::Start(const std::shared_ptr<Session>& session, control::ManagerMessage first) {
  absl::MutexLock lock(&session->mu);
  session->outbox.push_front(std::move(first));
  session->started = true;
  Session* s = session.get();
  session->writer = std::thread([this, s] { WriterLoop(s); });
}

void SwitchHub::WriterLoop(Session* s) {
  while (true) {
    control::ManagerMessage msg;
    {
      absl::MutexLock lock(&s->mu);
      auto ready = [s]() ABSL_SHARED_LOCKS_REQUIRED(s->mu) {
        return !s->outbox.empty() || s->closed;
      };
      s->mu.Await(absl::Condition(&ready));
      if (s->closed) return;
      msg = std::move(s->outbox.front());
      s->outbox.pop_front();
      s->writing = true;
    }
    const bool ok = s->stream->Write(msg);
    {
      absl::MutexLock lock(&s->mu);
      s->writing = false;
      if (!ok) s->closed = true;
    }
    if (!ok) {
      FailPending(s->id, absl::StrFormat("switch %s: control stream broke", s->name));
      return;
    }
  }
}

void SwitchHub::Kick(const std::shared_ptr<Session>& s) {
  {
    absl::MutexLock lock(&s->mu);
    s->closed = true;
    if (!s->handler_done && s->ctx != nullptr) s->ctx->TryCancel();
  }
  FailPending(s->id, absl::StrFormat("switch %s: control stream closed", s->name));
}

void SwitchHub::Close(const std::shared_ptr<Session>& s) {
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(s->name);
    if (it != active_.end() && it->second == s) active_.erase(it);
  }
  {
    absl::MutexLock lock(&s->mu);
    s->closed = true;
    // A writer stuck in Write (the switch stopped reading) needs a cancel.
    if (s->writing) s->ctx->TryCancel();
  }
  if (s->writer.joinable()) s->writer.join();
  FailPending(s->id, absl::StrFormat("switch %s: control stream closed", s->name));
  absl::MutexLock lock(&s->mu);
  s->handler_done = true;
}

void SwitchHub::Disconnect(const std::string& switch_name) {
  std::shared_ptr<Session> s;
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(switch_name);
    if (it == active_.end()) return;
    s = it->second;
    active_.erase(it);
  }
  NETFOLD_LOG(kInfo) << "closing the control stream of switch " << switch_name;
  Kick(s);
}

void SwitchHub::OnResult(const Session& session, const control::CommandResult& result) {
  Complete(result.command_id(), result, session.id);
}

void SwitchHub::Complete(uint64_t command_id, absl::StatusOr<control::CommandResult> result,
                         uint64_t session_id) {
  Pending p;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(command_id);
    // Unknown ids (late answers, answers on the wrong stream) are dropped.
    if (it == pending_.end() || it->second.session_id != session_id) return;
    p = std::move(it->second);
    pending_.erase(it);
  }
  absl::MutexLock lock(&p.batch->mu);
  if (p.batch->done[p.index]) return;
  p.batch->results[p.index] = std::move(result);
  p.batch->done[p.index] = true;
  p.batch->remaining -= 1;
}

void SwitchHub::FailPending(uint64_t session_id, const std::string& why) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, p] : pending_) {
      if (p.session_id == session_id) ids.push_back(id);
    }
  }
  for (uint64_t id : ids) Complete(id, absl::UnavailableError(why), session_id);
}

std::vector<absl::StatusOr<control::CommandResult>> SwitchHub::Execute(
    const std::vector<SwitchCommand>& commands, absl::Duration timeout) {
  auto batch = std::make_shared<Batch>(commands.size());
  std::vector<uint64_t> ids(commands.size(), 0);
  for (size_t i = 0; i < commands.size(); ++i) {
    std::shared_ptr<Session> s;
    uint64_t id = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = active_.find(commands[i].switch_name);
      if (it != active_.end()) {
        s = it->second;
        id = next_command_++;
        pending_[id] = Pending{batch, i, s->id};
        ids[i] = id;
      }
    }
    if (s == nullptr) {
      absl::MutexLock lock(&batch->mu);
      batch->results[i] = absl::UnavailableError("not connected to the manager");
      batch->done[i] = true;
      batch->remaining -= 1;
      continue;
    }
    control::ManagerMessage msg = commands[i].message;
    msg.set_command_id(id);
    if (!Queue(s, std::move(msg))) {
      Complete(id, absl::UnavailableError("control stream closed"), s->id);
    }
  }
  {
    absl::MutexLock lock(&batch->mu);
    auto all_done = [&batch]()
                        ABSL_SHARED_LOCKS_REQUIRED(batch->mu) { return batch->remaining == 0; };
    batch->mu.AwaitWithTimeout(absl::Condition(&all_done), timeout);
  }
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : ids) pending_.erase(id);
  }
  absl::MutexLock lock(&batch->mu);
  for (size_t i = 0; i < commands.size(); ++i) {
    if (!batch->done[i]) {
      batch->results[i] = absl::DeadlineExceededError(
          absl::StrFormat("no answer within %dms", absl::ToInt64Milliseconds(timeout)));
    }
  }
  return batch->results;
}

void SwitchHub::Post(const std::vector<SwitchCommand>& commands, absl::Duration) {
  for (const SwitchCommand& c : commands) {
    std::shared_ptr<Session> s;
    {
      absl::MutexLock lock(&mu_);
      auto it = active_.find(c.switch_name);
      if (it != active_.end()) s = it->second;
    }
    control::ManagerMessage msg = c.message;
    msg.set_command_id(0);  // no result
    if (s == nullptr || !Queue(s, std::move(msg))) {
      NETFOLD_LOG(kInfo) << "switch " << c.switch_name
                         << " is not connected: a command it misses is reconciled when it "
                            "registers again";
    }
  }
}

bool SwitchHub::Queue(const std::shared_ptr<Session>& session, control::ManagerMessage msg) {
  absl::MutexLock lock(&session->mu);
  if (session->closed) return false;
  session->outbox.push_back(std::move(msg));
  return true;
}

void SwitchHub::WatchUnregistered(grpc::ServerContext* ctx, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  connecting_[ctx] = deadline;
}

void SwitchHub::Registered(grpc::ServerContext* ctx) {
  absl::MutexLock lock(&mu_);
  connecting_.erase(ctx);
}

void SwitchHub::CancelStale() {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  for (auto it = connecting_.begin(); it != connecting_.end();) {
    if (shut_down_ || it->second <= now) {
      it->first->TryCancel();  // its handler is blocked in Read, so ctx lives
      it = connecting_.erase(it);
    } else {
      ++it;
    }
  }
}

void SwitchHub::Shutdown() {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [name, s] : active_) sessions.push_back(s);
    active_.clear();
  }
  CancelStale();
  for (const auto& s : sessions) Kick(s);
}

// ---------------------------------------------------------------------------
// Services

class ManagerServer::Core {
 public:
  Core(AggregationManager* am, SwitchHub* hub, const ServerOptions& options)
      : am(am),
        hub(hub),
        options(options),
        limiter(RealClock(), options.requests_per_second, options.burst),
        verifier(options.credential) {}

  // The fabric credential first (every call needs it, unless the manager
  // runs without one), then the rate limit for one request (or stream)
  // from `ctx`'s peer. A request
  // carrying valid credentials of a job (`job`) is counted against the
  // job's bucket, so that one job's flood does not starve the others on
  // the same host (every local process is 127.0.0.1); anything else against
  // its peer IP's. A refusal carries kRetryAfterMetadata.
  grpc::Status Admit(grpc::ServerContextBase* ctx, const char* method,
                     const control::JobCredentials* job = nullptr) {
    if (stopping.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the manager is shutting down");
    }
    // Before the limiter: a stranger's refused calls must not spend the
    // bucket of the operator's own tools on this host.
    if (grpc::Status s = verifier.Check(*ctx, method); !s.ok()) return s;
    const std::string key = job != nullptr && am->Authenticates(*job)
                                ? absl::StrFormat("job %d", job->job_id())
                                : PeerHost(ctx->peer());
    absl::Duration retry_after;
    if (!limiter.Allow(key, &retry_after)) {
      num_rate_limited.fetch_add(1, std::memory_order_relaxed);
      NETFOLD_LOG(kInfo) << method << " from " << ctx->peer() << " refused: rate limit of "
                         << key;
      ctx->AddTrailingMetadata(kRetryAfterMetadata,
                               absl::StrFormat("%d", absl::ToInt64Milliseconds(retry_after)));
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrFormat("rate limit: %s exceeded %g requests/s (burst %g)", key,
                                          limiter.per_second(), limiter.burst()));
    }
    return grpc::Status::OK;
  }

  // The open-stream limits (ServerOptions): OK and counted, or a clear
  // RESOURCE_EXHAUSTED. `unregistered_peer`: a Connect stream from that
  // peer IP, counted per peer until Registered. Every OK is paired with
  // CloseStream (StreamSlot).
  grpc::Status OpenStream(const char* method, const std::string& unregistered_peer) {
    absl::MutexLock lock(&streams_mu);
    std::string why;
    if (open_streams >= max_streams) {
      why = absl::StrFormat("%d streams are open, the most the manager keeps (the other threads "
                            "serve calls)",
                            open_streams);
    } else if (!unregistered_peer.empty() &&
               unregistered[unregistered_peer] >= options.max_unregistered_streams_per_peer) {
      why = absl::StrFormat("%s has %d Connect streams open that did not register, the most "
                            "allowed per peer",
                            unregistered_peer, unregistered[unregistered_peer]);
    }
    if (!why.empty()) {
      num_streams_refused.fetch_add(1, std::memory_order_relaxed);
      NETFOLD_LOG(kInfo) << method << " refused: " << why;
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "stream limit: " + why);
    }
    ++open_streams;
    if (!unregistered_peer.empty()) ++unregistered[unregistered_peer];
    return grpc::Status::OK;
  }
  // A Connect stream of `peer` registered (or ended before it did).
  void StreamRegistered(const std::string& peer) {
    absl::MutexLock lock(&streams_mu);
    auto it = unregistered.find(peer);
    if (it != unregistered.end() && --it->second <= 0) unregistered.erase(it);
  }
  void CloseStream() {
    absl::MutexLock lock(&streams_mu);
    --open_streams;
  }

  grpc::Status Reply(grpc::ServerContextBase* ctx, const char* method, const absl::Status& s) {
    if (!s.ok()) {
      NETFOLD_LOG(kInfo) << method << " from " << ctx->peer() << " refused: " << s.ToString();
    }
    return control::ToGrpc(s);
  }

  AggregationManager* const am;
  SwitchHub* const hub;
  const ServerOptions options;
  RateLimiter limiter;
  const auth::CredentialVerifier verifier;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> num_rate_limited{0};     // requests refused by the limiter
  std::atomic<uint64_t> num_streams_refused{0};  // streams refused by OpenStream
  std::atomic<int> open_watches{0};              // WatchEvents under way (no thread each)
  const int max_streams = options.max_threads - std::max(8, options.max_threads / 4);
  absl::Mutex streams_mu;
  int open_streams ABSL_GUARDED_BY(streams_mu) = 0;
  std::map<std::string, int> unregistered ABSL_GUARDED_BY(streams_mu);
};

namespace {

using Core = ManagerServer::Core;

// One open stream, counted from OpenStream until the handler returns.
class StreamSlot {
 public:
  explicit StreamSlot(Core* core) : core_(core) {}
  ~StreamSlot() {
    if (!unregistered_peer_.empty()) core_->StreamRegistered(unregistered_peer_);
    if (open_) core_->CloseStream();
  }
  StreamSlot(const StreamSlot&) = delete;
  StreamSlot& operator=(const StreamSlot&) = delete;

  grpc::Status Open(const char* method, const std::string& unregistered_peer = "") {
    grpc::Status s = core_->OpenStream(method, unregistered_peer);
    open_ = s.ok();
    if (open_) unregistered_peer_ = unregistered_peer;
    return s;
  }
  void Registered() {
    if (!unregistered_peer_.empty()) core_->StreamRegistered(unregistered_peer_);
    unregistered_peer_.clear();
  }

 private:
  Core* const core_;
  bool open_ = false;
  std::string unregistered_peer_;
};

class SwitchControlImpl final : public control::SwitchControl::Service {
 public:
  explicit SwitchControlImpl(Core* core) : core_(core) {}

  grpc::Status Connect(grpc::ServerContext* ctx, SwitchHub::Stream* stream) override {
    if (grpc::Status s = core_->Admit(ctx, "Connect"); !s.ok()) return s;
    StreamSlot slot(core_);
    if (grpc::Status s = slot.Open("Connect", PeerHost(ctx->peer())); !s.ok()) return s;
    core_->hub->WatchUnregistered(ctx, absl::Now() + core_->options.register_timeout);
    control::SwitchMessage first;
    const bool got = stream->Read(&first);
    core_->hub->Registered(ctx);
    slot.Registered();
    if (!got) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "the stream ended (or timed out) before RegisterSwitch");
    }
    if (first.msg_case() != control::SwitchMessage::kRegister) {
      return core_->Reply(
          ctx, "Connect",
          absl::InvalidArgumentError("the first message on Connect must be RegisterSwitch"));
    }
    const control::RegisterSwitch& reg = first.register_();
    if (absl::Status v = core_->am->ValidateRegistration(reg); !v.ok()) {
      return core_->Reply(ctx, "Connect", v);
    }
    const std::string name = reg.name();
    std::shared_ptr<SwitchHub::Session> session = core_->hub->Activate(name, ctx, stream);
    const uint64_t session_id = core_->hub->SessionId(*session);
    absl::StatusOr<control::RegisterReply> reply = core_->am->RegisterSwitch(reg, session_id);
    if (!reply.ok()) {
      core_->hub->Close(session);
      return core_->Reply(ctx, "Connect", reply.status());
    }
    control::ManagerMessage welcome;
    *welcome.mutable_welcome() = *reply;
    core_->hub->Start(session, std::move(welcome));
    NETFOLD_LOG(kInfo) << "switch " << name << " registered from " << ctx->peer() << " (session "
                       << session_id << ")";

    grpc::Status end = grpc::Status::OK;
    control::SwitchMessage msg;
    bool more = true;
    while (more && stream->Read(&msg)) {
      switch (msg.msg_case()) {
        case control::SwitchMessage::kHeartbeat:
          core_->am->SwitchHeartbeat(name, session_id, msg.heartbeat());
          break;
        case control::SwitchMessage::kResult:
          core_->hub->OnResult(*session, msg.result());
          break;
        case control::SwitchMessage::kQpError:
          core_->am->ReportQpError(name, session_id, msg.qp_error());
          break;
        default:
          end = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "unexpected message on a registered Connect stream");
          more = false;
          break;
      }
    }
    core_->hub->Close(session);
    core_->am->SwitchDisconnected(name, session_id);
    NETFOLD_LOG(kInfo) << "switch " << name << " session " << session_id << " ended";
    return end;
  }

 private:
  Core* core_;
};

class HostControlImpl final
    : public control::HostControl::WithCallbackMethod_WatchEvents<control::HostControl::Service> {
 public:
  explicit HostControlImpl(Core* core) : core_(core) {}

  grpc::Status CreateJob(grpc::ServerContext* ctx, const control::CreateJobRequest* req,
                         control::CreateJobResponse* resp) override {
    if (grpc::Status s = core_->Admit(ctx, "CreateJob"); !s.ok()) return s;
    absl::StatusOr<control::CreateJobResponse> r = core_->am->CreateJob(*req);
    if (r.ok()) *resp = *std::move(r);
    return core_->Reply(ctx, "CreateJob", r.status());
  }

  grpc::Status DestroyJob(grpc::ServerContext* ctx, const control::DestroyJobRequest* req,
                          control::DestroyJobResponse*) override {
    if (grpc::Status s = core_->Admit(ctx, "DestroyJob", &req->job()); !s.ok()) return s;
    return core_->Reply(ctx, "DestroyJob", core_->am->DestroyJob(*req));
  }

  grpc::Status Attach(grpc::ServerContext* ctx, const control::AttachRequest* req,
                      control::AttachResponse* resp) override {
    if (grpc::Status s = core_->Admit(ctx, "Attach", &req->job()); !s.ok()) return s;
    absl::StatusOr<control::AttachResponse> r = core_->am->Attach(*req);
    if (r.ok()) *resp = *std::move(r);
    return core_->Reply(ctx, "Attach", r.status());
  }

  grpc::Status CreateGroup(grpc::ServerContext* ctx, const control::CreateGroupRequest* req,
                           control::CreateGroupResponse* resp) override {
    if (grpc::Status s = core_->Admit(ctx, "CreateGroup", &req->job()); !s.ok()) return s;
    absl::StatusOr<control::CreateGroupResponse> r = core_->am->CreateGroup(*req);
    if (r.ok()) *resp = *std::move(r);
    return core_->Reply(ctx, "CreateGroup", r.status());
  }

  grpc::Status DestroyGroup(grpc::ServerContext* ctx, const control::DestroyGroupRequest* req,
                            control::DestroyGroupResponse*) override {
    if (grpc::Status s = core_->Admit(ctx, "DestroyGroup", &req->job()); !s.ok()) return s;
    return core_->Reply(ctx, "DestroyGroup", core_->am->DestroyGroup(*req));
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const control::HostHeartbeatRequest* req,
                         control::HostHeartbeatResponse* resp) override {
    // Not rate-limited (see the header); still authenticated.
    if (grpc::Status s = core_->verifier.Check(*ctx, "Heartbeat"); !s.ok()) return s;
    absl::StatusOr<control::HostHeartbeatResponse> r = core_->am->HostHeartbeat(*req);
    if (r.ok()) *resp = *std::move(r);
    return core_->Reply(ctx, "Heartbeat", r.status());
  }

  // On gRPC's callback API: an idle watch holds no handler thread, so the
  // watches of every rank of every job can be open at once (one per rank:
  // a rank's newer watch closes its older one).
  grpc::ServerWriteReactor<control::JobEvent>* WatchEvents(
      grpc::CallbackServerContext* ctx, const control::WatchEventsRequest* req) override {
    if (grpc::Status s = core_->Admit(ctx, "WatchEvents", &req->job()); !s.ok()) {
      return EventWatch::Refuse(s);
    }
    absl::StatusOr<std::shared_ptr<EventStream>> stream = core_->am->WatchEvents(*req);
    if (!stream.ok()) return EventWatch::Refuse(core_->Reply(ctx, "WatchEvents", stream.status()));
    core_->open_watches.fetch_add(1, std::memory_order_relaxed);
    Core* core = core_;
    return new EventWatch(*std::move(stream),
                          [core] { core->open_watches.fetch_sub(1, std::memory_order_relaxed); });
  }

 private:
  Core* core_;
};

class AdminImpl final : public control::Admin::Service {
 public:
  explicit AdminImpl(Core* core) : core_(core) {}

  grpc::Status GetStatus(grpc::ServerContext* ctx, const control::GetStatusRequest*,
                         control::GetStatusResponse* resp) override {
    if (grpc::Status s = core_->Admit(ctx, "GetStatus"); !s.ok()) return s;
    *resp = core_->am->GetStatus();
    return grpc::Status::OK;
  }

  grpc::Status Explain(grpc::ServerContext* ctx, const control::ExplainRequest* req,
                       control::ExplainResponse* resp) override {
    if (grpc::Status s = core_->Admit(ctx, "Explain"); !s.ok()) return s;
    *resp = core_->am->Explain(*req);
    return grpc::Status::OK;
  }

 private:
  Core* core_;
};

}  // namespace

// ---------------------------------------------------------------------------
// ManagerServer

absl::StatusOr<std::unique_ptr<ManagerServer>> ManagerServer::Start(AggregationManager* am,
                                                                    SwitchHub* hub,
                                                                    const ServerOptions& options) {
  std::unique_ptr<ManagerServer> server(new ManagerServer());
  server->core_ = std::make_unique<Core>(am, hub, options);
  server->services_.push_back(std::make_unique<SwitchControlImpl>(server->core_.get()));
  server->services_.push_back(std::make_unique<HostControlImpl>(server->core_.get()));
  server->services_.push_back(std::make_unique<AdminImpl>(server->core_.get()));

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           auth::ServerCredentials(options.tls ? &*options.tls : nullptr),
                           &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second manager would share the
  // port silently instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  grpc::ResourceQuota quota("netfold-managerd");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  for (auto& s : server->services_) builder.RegisterService(s.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    if (server->server_ != nullptr) {
      server->server_->Shutdown();
      server->server_->Wait();
    }
    server->shut_down_ = true;  // the destructor has nothing to stop
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (address in use or invalid?)", options.listen_address));
  }

  am->Serving();  // switches can reach it from now on
  const ManagerOptions& mo = am->options();
  server->tick_ =
      std::max(absl::Milliseconds(10), std::min(mo.heartbeat_interval, mo.switch_timeout / 4));
  ManagerServer* self = server.get();
  am->SetWakeup([self] {
    absl::MutexLock lock(&self->wake_mu_);
    self->woken_ = true;
  });
  server->background_ = std::thread([self] { self->BackgroundLoop(); });
  return server;
}

void ManagerServer::BackgroundLoop() {
  while (true) {
    {
      absl::MutexLock lock(&wake_mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(wake_mu_) { return woken_ || stopping_; };
      wake_mu_.AwaitWithTimeout(absl::Condition(&ready), tick_);
      if (stopping_) return;
      woken_ = false;
    }
    core_->am->Tick();
    core_->hub->CancelStale();
  }
}

void ManagerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  core_->stopping.store(true);
  {
    absl::MutexLock lock(&wake_mu_);
    stopping_ = true;
  }
  if (background_.joinable()) background_.join();
  core_->am->SetWakeup(nullptr);
  core_->am->Shutdown();   // ends WatchEvents streams
  core_->hub->Shutdown();  // ends Connect streams
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
}

ManagerServer::~ManagerServer() { Shutdown(); }

uint64_t ManagerServer::num_rate_limited() const { return core_->num_rate_limited.load(); }
uint64_t ManagerServer::num_streams_refused() const { return core_->num_streams_refused.load(); }
int ManagerServer::open_watches() const { return core_->open_watches.load(); }
uint64_t ManagerServer::num_unauthenticated() const { return core_->verifier.num_refused(); }

}  // namespace netfold::manager
