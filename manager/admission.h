// Whether the manager serves a request, and if not, why. A malformed
// request gets an error Status naming what is wrong; a well-formed one that
// does not fit gets Shortfalls (a quota, a policy limit, a switch that is
// down or too small), which CreateJob and CreateGroup turn into
// RESOURCE_EXHAUSTED and Admin.Explain returns as they are.
//
//   control::JobQuota quota;
//   std::vector<std::pair<int, uint32_t>> qps;
//   std::vector<Shortfall> why;
//   NETFOLD_RETURN_IF_ERROR(CheckJobRequest(state, request, &quota, &qps, &why));
//   if (!why.empty()) return absl::ResourceExhaustedError(JoinShortfalls(why));
//
// Checks only: nothing here reserves or changes anything. Functions that
// read a FabricState need the manager's state lock held, as it does.
#ifndef NETFOLD_MANAGER_ADMISSION_H_
#define NETFOLD_MANAGER_ADMISSION_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/allocator.h"
#include "manager/default_window.h"
#include "manager/fabric_state.h"
#include "manager/manager_options.h"
#include "manager/topology.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

inline constexpr uint32_t kProtocolVersion = control::PROTOCOL_VERSION_CURRENT;

// The stateless checks of a switch registration: protocol version, a name
// of the topology (the fabric credential was checked before: ServerOptions), addresses, capacities at least those
// declared, and a bounded amount of reported state.
absl::Status ValidateRegistration(const Topology& topo, const ManagerOptions& options,
                                  const control::RegisterSwitch& request);

// The job that `creds` names, if its key is right. The same answer for an
// unknown job and a wrong key (PermissionDenied): there is nothing to probe.
absl::StatusOr<Job*> AuthenticateJob(std::map<uint64_t, Job>& jobs,
                                     const control::JobCredentials& creds);

// A CreateJob request: well-formed ranks on known hosts, then quotas within
// the policy limits, each rank's leaf up and large enough, a QP free there
// for each of its ranks. Fills `quota` (defaults applied) and the QPs to
// reserve per leaf.
absl::Status CheckJobRequest(const FabricState& state, const control::CreateJobRequest& request,
                             control::JobQuota* quota,
                             std::vector<std::pair<int, uint32_t>>* qps_per_leaf,
                             std::vector<Shortfall>* shortfalls);

// A group of `job` over `ranks` (ascending) in data plane `plane`: known,
// distinct ranks attached in that plane, K and P (0: the job's quota) and
// the group count within the job's quota. Fills the allocator's request.
absl::Status CheckGroupRequest(const Job& job, const std::vector<uint32_t>& ranks,
                               uint32_t num_slots, uint32_t slot_bytes, GroupRequest* out,
                               std::vector<Shortfall>* shortfalls, uint32_t plane = 0);

// The integrity key a new job gets: 32 random bytes if it asked for
// integrity or the manager requires it (ManagerOptions::require_integrity),
// else "" (docs/security.md).
std::string IntegrityKeyFor(const control::CreateJobRequest& request,
                            const ManagerOptions& options);

// The endpoint a rank attaches with: an IPv4 ip:port, a QPN in 2..2^24-1
// and a 24-bit PSN.
absl::Status CheckRankEndpoint(uint32_t rank, const control::Endpoint& endpoint);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_ADMISSION_H_
