// The gRPC face of the aggregation manager: the SwitchControl, HostControl
// and Admin services of proto/control/netfold_control.proto, the hub that
// carries commands to switches over their Connect streams, and the server
// that runs them with a background thread for liveness.
//
//   SwitchHub hub;
//   AggregationManager am(topo, options, RealClock(), &hub, journal.get());
//   am.Recover(state);
//   absl::StatusOr<std::unique_ptr<ManagerServer>> server =
//       ManagerServer::Start(&am, &hub, server_options);
//   ... (*server)->port() ...
//   (*server)->Shutdown();   // also on destruction
//
// Every call must present the fabric credential (ServerOptions::credential)
// before anything else is looked at. Requests are rate-limited per job for authenticated job requests, else per
// peer IP address (host heartbeats excepted: they are cheap, and many ranks
// of one host must not starve themselves into timeouts), and bounded in
// size; a rate-limit refusal carries kRetryAfterMetadata; every
// refusal is a gRPC status whose code is the absl::Status code and whose
// message says what was wrong. Thread-safe.
#ifndef NETFOLD_MANAGER_CONTROL_SERVICE_H_
#define NETFOLD_MANAGER_CONTROL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/tls_files.h"
#include "manager/aggregation_manager.h"
#include "manager/rate_limiter.h"
#include "manager/switch_commander.h"
#include "proto/control/netfold_control.grpc.pb.h"

namespace netfold::manager {

// Trailing metadata of a RESOURCE_EXHAUSTED that the rate limiter gave:
// milliseconds until the bucket holds a token again. Clients back off and
// retry such a refusal; other RESOURCE_EXHAUSTED answers (the fabric is
// full) they return (docs/control_plane.md).
inline constexpr char kRetryAfterMetadata[] = "netfold-retry-after-ms";

// Routes manager commands to the switches' Connect streams and their
// results back. One Session per stream; a switch that registers again
// replaces its older session, which is closed. Each session has a writer
// thread, so a switch that stops reading blocks only itself, and Execute
// always returns by its deadline.
class SwitchHub : public SwitchCommander {
 public:
  using Stream = grpc::ServerReaderWriter<control::ManagerMessage, control::SwitchMessage>;
  struct Session;

  SwitchHub() = default;
  ~SwitchHub() override;
  SwitchHub(const SwitchHub&) = delete;
  SwitchHub& operator=(const SwitchHub&) = delete;

  // Makes `stream` the route to switch `name`, closing an older session.
  // Commands queue up until Start. `ctx` and `stream` must stay valid until
  // Close(session) returns.
  std::shared_ptr<Session> Activate(const std::string& name, grpc::ServerContext* ctx,
                                    Stream* stream);
  uint64_t SessionId(const Session& session) const;
  // Writes `first`, then the queued commands, then whatever comes.
  void Start(const std::shared_ptr<Session>& session, control::ManagerMessage first);
  // Ends a session: stops its writer and fails its pending commands. The
  // Connect handler calls it before returning.
  void Close(const std::shared_ptr<Session>& session);
  // A CommandResult arrived on `session`.
  void OnResult(const Session& session, const control::CommandResult& result);

  // Connect streams that have not sent RegisterSwitch by `deadline` are
  // cancelled by CancelStale (called from the background loop).
  void WatchUnregistered(grpc::ServerContext* ctx, absl::Time deadline);
  void Registered(grpc::ServerContext* ctx);
  void CancelStale();

  // Closes every session and refuses new ones.
  void Shutdown();

  std::vector<absl::StatusOr<control::CommandResult>> Execute(
      const std::vector<SwitchCommand>& commands, absl::Duration timeout) override;
  void Post(const std::vector<SwitchCommand>& commands, absl::Duration timeout) override;
  void Disconnect(const std::string& switch_name) override;

 private:
  struct Batch;
  struct Pending {
    std::shared_ptr<Batch> batch;
    size_t index = 0;
    uint64_t session_id = 0;
  };

  void WriterLoop(Session* session);
  // Puts `msg` on `session`'s outbox; false if the session is closed.
  bool Queue(const std::shared_ptr<Session>& session, control::ManagerMessage msg);
  void Complete(uint64_t command_id, absl::StatusOr<control::CommandResult> result,
                uint64_t session_id);
  void FailPending(uint64_t session_id, const std::string& why);
  void Kick(const std::shared_ptr<Session>& session);

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> active_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::map<grpc::ServerContext*, absl::Time> connecting_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_command_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

struct ServerOptions {
  std::string listen_address = "127.0.0.1:47910";
  int max_message_bytes = 1 << 20;    // largest request accepted
  int max_threads = 1024;             // gRPC handler threads for calls and Connect streams
  // Open Connect streams (switches) at once: each holds a handler thread,
  // so a quarter of max_threads (at least 8) is kept for calls: heartbeats
  // and GetStatus get a thread however many streams are open. WatchEvents
  // streams run on gRPC's callback API and hold none (one per rank).
  // Connect streams not registered yet: at most this many per peer IP.
  int max_unregistered_streams_per_peer = 16;
  double requests_per_second = 1000;  // per job or peer IP, heartbeats exempt; 0 = unlimited
  double burst = 2000;
  absl::Duration register_timeout = absl::Seconds(10);  // Connect -> RegisterSwitch
  // The fabric credential every call must present (auth/grpc_credential.h):
  // switch registration, job calls, heartbeats, Admin. "" = none required,
  // which netfold-managerd allows only when told (auth: none).
  std::string credential;
  // The certificate and key the port presents (auth/tls_files.h); none:
  // plaintext, which netfold-managerd allows only when told (tls: none)
  // or without a credential to protect.
  std::optional<auth::TlsFiles> tls;
};

class ManagerServer {
 public:
  // Builds and starts the gRPC server on options.listen_address and the
  // background loop that calls am->Tick(). Unavailable if it cannot listen.
  // `am` and `hub` must outlive the server.
  static absl::StatusOr<std::unique_ptr<ManagerServer>> Start(AggregationManager* am,
                                                              SwitchHub* hub,
                                                              const ServerOptions& options);
  ~ManagerServer();
  ManagerServer(const ManagerServer&) = delete;
  ManagerServer& operator=(const ManagerServer&) = delete;

  // The port actually bound (useful with port 0).
  int port() const { return port_; }
  // Requests refused by the rate limiter; streams refused by the stream
  // limits (ServerOptions). Thread-safe.
  uint64_t num_rate_limited() const;
  uint64_t num_streams_refused() const;
  // WatchEvents streams open now (callback API: they hold no thread).
  int open_watches() const;
  // Calls refused for a missing or wrong fabric credential. Thread-safe.
  uint64_t num_unauthenticated() const;
  // Stops the background loop, ends every stream, stops the server.
  // Idempotent.
  void Shutdown();

  class Core;

 private:
  ManagerServer() = default;
  void BackgroundLoop();

  std::unique_ptr<Core> core_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Duration tick_ = absl::Milliseconds(100);
  absl::Mutex wake_mu_;
  bool woken_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread background_;
  bool shut_down_ = false;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_CONTROL_SERVICE_H_
