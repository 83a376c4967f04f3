// netfold-switchd without its main(): the port stack, the data-plane thread,
// the static configuration, the admin service and the manager agent, started
// and stopped in order (docs/switch.md, "Operations").
//
//   absl::StatusOr<std::unique_ptr<SwitchDaemon>> d = SwitchDaemon::Start(config);
//   (*d)->data_address();      // with the port the kernel picked
//   ... until SIGTERM ...
//   absl::Status s = (*d)->Stop();   // groups removed, threads joined
//
// The port stack: the backend (CreateBackendPort: kernel UDP sockets or
// DPDK) under an ImpairedPort (link faults per peer) under the
// SwitchDataPlane. A DataPlaneThread runs the data plane: the daemon's own,
// or one it shares with the other switches of the process
// (switch/data_plane_thread.h); gRPC (the agent's stream, the admin
// service) runs in its own threads and reaches the data plane only through
// SwitchDataPlane::Post.
//
// Thread-safety: Start/Stop from one thread; accessors are thread-safe.
#ifndef NETFOLD_SWITCH_SWITCH_DAEMON_H_
#define NETFOLD_SWITCH_SWITCH_DAEMON_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "switch/data_plane_thread.h"
#include "switch/switch_admin_service.h"
#include "switch/switch_agent.h"
#include "switch/switch_data_plane.h"
#include "switch/switchd_config.h"
#include "transport/impaired_port.h"
#include "transport/port.h"

namespace netfold::sw {

// The I/O backend named by config.backend, bound to config.data_address.
// The seam for the DPDK backend: Unimplemented for "dpdk" until it exists.
absl::StatusOr<std::unique_ptr<transport::Port>> CreateBackendPort(const SwitchdConfig& config);

// What Stop found and did.
struct ShutdownReport {
  size_t groups_removed = 0;
  size_t qps_destroyed = 0;
  uint32_t slots_left = 0;  // reserved slots after the removal: must be 0
  size_t busy_slots_left = 0;
};

class SwitchDaemon {
 public:
  // Everything up: the data plane serving, static state installed, the
  // admin API listening, the agent connecting (not necessarily registered
  // yet). An error leaves nothing running. `shared` (optional) runs the
  // data plane together with other switches' and must outlive the daemon;
  // without it the daemon runs a thread of its own.
  static absl::StatusOr<std::unique_ptr<SwitchDaemon>> Start(const SwitchdConfig& config,
                                                             DataPlaneThread* shared = nullptr);
  ~SwitchDaemon();
  SwitchDaemon(const SwitchDaemon&) = delete;
  SwitchDaemon& operator=(const SwitchDaemon&) = delete;

  // Clean shutdown: the agent ends its stream (the manager then treats the
  // switch as gone), every group is removed (its children get an abort, its
  // slots are freed), every QP is destroyed, the admin API and the
  // data-plane thread stop. Idempotent. Internal if slots were left (a bug).
  absl::StatusOr<ShutdownReport> Stop();

  transport::Ipv4Endpoint data_address() const { return data_address_; }
  // "ip:port" with the bound port; "" without an admin service.
  std::string admin_address() const { return admin_address_; }
  int admin_port() const { return admin_server_ ? admin_server_->port() : 0; }
  SwitchAgent* agent() { return agent_.get(); }

 private:
  explicit SwitchDaemon(const SwitchdConfig& config) : config_(config) {}
  absl::Status InstallStatic();
  // After each pass of the data-plane thread: usage for the heartbeats,
  // failed QPs to the manager.
  void AfterPass();

  SwitchdConfig config_;
  transport::ImpairedPort* port_ = nullptr;  // owned by the data plane's endpoint
  std::unique_ptr<SwitchDataPlane> dp_;
  std::unique_ptr<DataPlaneThread> own_thread_;
  DataPlaneThread* thread_ = nullptr;  // runs dp_ while not null
  // Usage published by the data-plane thread after every pass (heartbeats).
  std::atomic<uint32_t> used_groups_{0}, used_slots_{0}, used_qps_{0};
  std::unique_ptr<SwitchAdminService> admin_service_;
  std::unique_ptr<AdminServer> admin_server_;
  std::unique_ptr<SwitchAgent> agent_;
  std::atomic<SwitchAgent*> agent_for_dp_{nullptr};
  transport::Ipv4Endpoint data_address_;
  std::string admin_address_;
  bool stopped_ = false;
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_SWITCH_DAEMON_H_
