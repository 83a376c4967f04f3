// The switch's client of SwitchControl.Connect (docs/control_plane.md,
// "Switch side"): registration, heartbeats, commands, QP errors, reconnect.
//
//   SwitchAgent agent(options, &data_plane, [&] { return usage_snapshot(); });
//   agent.Start();                                // its own threads
//   ... the data-plane loop, after each RunOnce:
//   agent.ReportQpFailures(data_plane.TakeQpFailures());
//   ...
//   agent.Stop();                                 // ends the stream, joins
//
// Threads. gRPC runs in the agent's threads; the data plane in its own. They
// meet only through SwitchDataPlane::Post (commands and state snapshots run
// on the data-plane thread) and completion notifications, and every wait has
// a deadline:
//   - the session thread opens the stream, asks the data plane for the state
//     it holds (deadline `data_plane_timeout`), and then reads: the welcome,
//     then commands, each posted to the data plane in the order received
//     (so they execute in order); it reconnects with exponential backoff
//     (`reconnect_min`..`reconnect_max`, 50..500 ms) whenever the stream ends;
//   - a writer thread per session writes everything else: the registration,
//     command results as the data plane completes them (in order), a
//     heartbeat every interval the manager asked for with the usage the data
//     plane actually holds, and QP errors. It cancels the stream if no
//     welcome comes within `register_timeout`.
// State survives a broken stream: a new session registers again, reporting
// the groups and QPs the switch still holds, and the manager reconciles.
//
// Thread-safety: every public method is thread-safe.
#ifndef NETFOLD_SWITCH_SWITCH_AGENT_H_
#define NETFOLD_SWITCH_SWITCH_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "switch/control_commands.h"
#include "switch/switch_data_plane.h"

namespace netfold::sw {

struct SwitchAgentOptions {
  std::string manager_address;  // gRPC target, e.g. "127.0.0.1:47910"
  std::string name;
  std::string data_address;   // "ip:port" as registered
  std::string admin_address;  // "" = none
  std::string credential;  // the fabric credential, presented on Connect ("" = none)
  std::string tls_ca_pem;  // the fabric's CA: TLS to the manager ("" = plaintext)
  control::SwitchCapacity capacity;
  uint64_t incarnation = 0;  // once per process start; 0: the agent picks one
  CommandLimits limits;
  absl::Duration register_timeout = absl::Seconds(10);   // open -> welcome
  absl::Duration data_plane_timeout = absl::Seconds(5);  // a state snapshot
  // Backoff between attempts (also the gRPC channel's reconnect backoff).
  // Keep the cap well under the manager's re-registration grace after its
  // own restart (max(switch_timeout, 2 x heartbeat), 2 s by default): a
  // switch that comes back later is written off and its groups revoked.
  absl::Duration reconnect_min = absl::Milliseconds(50);
  absl::Duration reconnect_max = absl::Milliseconds(500);
};

// A random non-zero incarnation number (one per process start).
uint64_t NewIncarnation();

class SwitchAgent {
 public:
  // `dp` must outlive the agent; only its Post is called from the agent's
  // threads. `usage` must be thread-safe (the daemon publishes it after each
  // data-plane pass).
  SwitchAgent(SwitchAgentOptions options, SwitchDataPlane* dp,
              std::function<control::ResourceUsage()> usage);
  ~SwitchAgent();
  SwitchAgent(const SwitchAgent&) = delete;
  SwitchAgent& operator=(const SwitchAgent&) = delete;

  void Start();
  // Ends the stream and joins the threads; idempotent. Commands already
  // posted to the data plane still run, their results are dropped.
  void Stop();

  // QP failures to report (queued until a registered stream takes them).
  void ReportQpFailures(std::vector<QpFailure> failures);

  // Waits until at least `count` registrations were welcomed.
  bool WaitRegistered(absl::Duration timeout, int count = 1);
  int registrations() const;
  bool connected() const;
  // The manager's last refusal or stream error (for logs and tests).
  std::string last_error() const;

 private:
  // Everything the threads and the data-plane closures share. Closures hold
  // it by shared_ptr, so one that runs after the agent is gone is harmless.
  struct State;

  void Run();
  // One stream, from open to end. Returns true if it was welcomed.
  bool RunSession();
  void WriterLoop(grpc::ClientReaderWriter<control::SwitchMessage, control::ManagerMessage>* stream,
                  grpc::ClientContext* ctx, uint64_t session_id,
                  const control::SwitchMessage& registration);

  const SwitchAgentOptions options_;
  SwitchDataPlane* const dp_;
  const std::function<control::ResourceUsage()> usage_;
  std::unique_ptr<control::SwitchControl::Stub> stub_;
  std::shared_ptr<State> state_;
  const uint64_t incarnation_;
  std::thread thread_;
  absl::Mutex start_mu_;
  uint64_t heartbeat_sequence_ = 0;  // writer threads only (one at a time)
  // The last refusal logged as an error, and when (the session thread only):
  // the same refusal again is an error once a minute, debug in between.
  std::string last_refusal_;
  absl::Time last_refusal_logged_ = absl::InfinitePast();
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_SWITCH_AGENT_H_
