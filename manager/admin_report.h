// The manager's answers to Admin.GetStatus and Admin.Explain, read from its
// books: switches (state, heartbeat age, capacity, what is booked and what
// they report), trees with their links, jobs, ready groups, the state
// directory's journal (what it found at start, failed appends); and for a job
// or group that is asked about, whether it would fit and, if not, every
// reason (admission.h), without reserving anything. `netfold status`
// prints the first (tools/status_text.h).
//
//   control::GetStatusResponse st = StatusReport(state, incarnation);
//   control::ExplainResponse why = ExplainReport(state, request);
//   if (!why.fits()) std::cout << why.summary();
//
// Read-only over a `const FabricState&`; the caller holds the manager's
// state lock for the duration.
#ifndef NETFOLD_MANAGER_ADMIN_REPORT_H_
#define NETFOLD_MANAGER_ADMIN_REPORT_H_

#include <cstdint>

#include "manager/fabric_state.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// Heartbeat ages are measured at `state.clock`'s now.
control::GetStatusResponse StatusReport(const FabricState& state, uint64_t incarnation);

// A malformed request is answered too: fits=false with one "request"
// shortfall saying what is wrong.
control::ExplainResponse ExplainReport(const FabricState& state,
                                       const control::ExplainRequest& request);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_ADMIN_REPORT_H_
