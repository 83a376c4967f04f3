// The SwitchAdmin gRPC service of netfold-switchd (proto/control/
// netfold_control.proto, docs/switch.md "Admin API"): counters, installed
// groups, and link faults set at run time.
//
//   SwitchAdminService service(&data_plane, peer_port, info);
//   absl::StatusOr<std::unique_ptr<AdminServer>> server =
//       AdminServer::Start("127.0.0.1:0", &service);
//   (*server)->port();          // the bound port
//   (*server)->Shutdown();      // before the data plane stops
//
// GetCounters and ListGroups read state that belongs to the data-plane
// thread, so they post a snapshot request to it (SwitchDataPlane::Post) and
// wait at most `timeout` for it (UNAVAILABLE past that). SetLinkFault
// talks to the ImpairedPort directly (it is thread-safe).
//
// Every call must present the fabric credential (auth/grpc_credential.h)
// unless the switch runs without one: SetLinkFault changes what the data
// plane does (a fault stops a job; a peer per call fills the peer table),
// and GetCounters and ListGroups show QPNs, PSN counters and P_Keys.
// Refusals are UNAUTHENTICATED or PERMISSION_DENIED, counted in
// num_unauthenticated().
//
// The Fill* functions build the answers; they run on the data-plane thread
// (tests call them directly). Thread-safety: the service is thread-safe.
#ifndef NETFOLD_SWITCH_SWITCH_ADMIN_SERVICE_H_
#define NETFOLD_SWITCH_SWITCH_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "switch/switch_data_plane.h"
#include "transport/impaired_port.h"

namespace netfold::sw {

// What the admin API says about the switch itself.
struct SwitchIdentity {
  std::string name;
  std::string data_address;
  uint64_t incarnation = 0;
  absl::Time started = absl::Now();
  control::SwitchCapacity capacity;
  std::string backend = "udp";  // udp or dpdk
  // Whether a request may ask for the detailed view (QPNs, per-QP PSN
  // counters, P_Keys, peers). The admin API is not authenticated: anyone
  // who reaches it could use that view to forge a job's data, so it is off
  // unless the operator turns it on (admin_detail, loopback only). The seam
  // for an authenticated admin API: it decides this per caller.
  bool allow_detail = false;
  // The backend's own counters (the DPDK port's links, bridge, ARP; the
  // receive queues' packets and waits), any thread; empty for the socket
  // backend without receive queues.
  std::function<void(const std::function<void(std::string_view, uint64_t)>&)> backend_counters;
};

// Every counter (data-plane thread). `port` may be null (no per-peer data).
// Without `detail`, aggregates only: the port, the switch's drops and the
// drops of every QP it has had (destroyed ones too) summed by reason, usage;
// no QPN, PSN counter, P_Key or peer. With it, each QP, peer and group, and
// every QP's counts summed (all_qps).
void FillCounters(SwitchDataPlane& dp, const transport::ImpairedPort* port,
                  control::GetCountersResponse* out, bool detail = true);
// The installed groups (data-plane thread); without `detail`, usage and
// busy slots only.
void FillGroups(const SwitchDataPlane& dp, control::ListGroupsResponse* out, bool detail = true);
// Applies a SetLinkFault request (any thread). InvalidArgument for a bad
// peer, direction or impairment text; ResourceExhausted if the port tracks
// too many peers already.
absl::StatusOr<control::SetLinkFaultResponse> ApplyLinkFault(
    transport::ImpairedPort& port, const control::SetLinkFaultRequest& request);

class SwitchAdminService final : public control::SwitchAdmin::Service {
 public:
  // `dp` and `port` must outlive the service. `credential`: the fabric
  // credential callers must present ("" = none asked: auth: none).
  SwitchAdminService(SwitchDataPlane* dp, transport::ImpairedPort* port, SwitchIdentity identity,
                     std::string credential, absl::Duration timeout = absl::Seconds(2));

  grpc::Status GetCounters(grpc::ServerContext* ctx, const control::GetCountersRequest* request,
                           control::GetCountersResponse* response) override;
  grpc::Status ListGroups(grpc::ServerContext* ctx, const control::ListGroupsRequest* request,
                          control::ListGroupsResponse* response) override;
  grpc::Status SetLinkFault(grpc::ServerContext* ctx, const control::SetLinkFaultRequest* request,
                            control::SetLinkFaultResponse* response) override;

  // Calls refused for a missing or wrong credential.
  uint64_t num_unauthenticated() const { return verifier_.num_refused(); }

 private:
  // OK unless `wanted` and the detailed view is off (PERMISSION_DENIED).
  grpc::Status CheckDetail(bool wanted, std::string_view what) const;

  SwitchDataPlane* const dp_;
  transport::ImpairedPort* const port_;
  const SwitchIdentity identity_;
  const auth::CredentialVerifier verifier_;
  const absl::Duration timeout_;
};

// A gRPC server for one service on one address.
class AdminServer {
 public:
  // Unavailable if it cannot listen on `address` ("ip:port"; port 0 picks).
  // With `tls` (copied), the port speaks TLS with its certificate and key;
  // null: plaintext.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Start(const std::string& address,
                                                            grpc::Service* service,
                                                            const auth::TlsFiles* tls);
  ~AdminServer();
  int port() const { return port_; }
  // Ends in-flight calls (after `grace`) and stops. Idempotent.
  void Shutdown(absl::Duration grace = absl::Milliseconds(500));

 private:
  AdminServer() = default;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_SWITCH_ADMIN_SERVICE_H_
