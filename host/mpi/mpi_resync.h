// libnetfold_mpi's failover (an internal header of the library): when the
// fabric fails during an operation, NETFOLD_MPI_ENABLE=try brings the
// communicator's ranks back in step with the protocol of host/resync.h
// (the ranks that completed the operation hand its result to those that did
// not, or everyone re-runs it from saved inputs) over MPI itself, and the
// communicator continues on PMPI_; with =1 the error is returned
// (docs/mpi.md).
//
//   const int rc = netfold_allreduce(s->group, ...);
//   if (rc != NETFOLD_SUCCESS) return Recover(comm, s, p, rc);
//   ...
//   ResyncAtEnd(comm, s);  // at MPI_Comm_free / MPI_Finalize
//
// Both are collective over the communicator's members. Thread safety: that
// of host/mpi/interposer_state.h (one thread per communicator at a time,
// holding CommState::nb_mu when it completes a nonblocking operation).
#ifndef NETFOLD_HOST_MPI_MPI_RESYNC_H_
#define NETFOLD_HOST_MPI_MPI_RESYNC_H_

#include <mpi.h>

#include <string>

#include "host/mpi/interposer_state.h"

namespace netfold::mpi {

// Called by every member (from a failed operation, or from MPI_Comm_free /
// MPI_Finalize with `current` null). Afterwards the ranks agree on every
// operation before `current`, and `current` (if any) is complete. Returns
// MPI_SUCCESS, an MPI error code, or MPI_ERR_OTHER when the ranks cannot
// be brought back in step (the job is aborted unless an MPI exchange failed).
int Resync(MPI_Comm comm, CommState* s, Pending* current);

// At MPI_Comm_free and MPI_Finalize, every member there with nothing
// outstanding (FinishOutstanding): Resync(comm, s, nullptr) if the
// communicator has a group whose members have not met in a resync yet.
// Once they have (CommState::last_to_recover), every operation in doubt
// was recovered in its turn, and a rank that was ahead may have left after
// the resync at its own free, which was the others' recovery.
void ResyncAtEnd(MPI_Comm comm, CommState* s);

// A fabric operation `p` failed on this rank with `netfold_rc`. With
// NETFOLD_MPI_ENABLE=1: the communicator's error handler is called and
// MPI_ERR_OTHER returned. Otherwise the failure is counted and told, the
// communicator goes to PMPI for good, and Resync(comm, s, &p) completes `p`;
// returns what Resync returns.
// `why`: libnetfold's message for the failure (default: netfold_last_error()).
int Recover(MPI_Comm comm, CommState* s, Pending& p, int netfold_rc,
            const std::string& why = netfold_last_error());

// A call on a communicator the fabric failed under, past the operations
// the ranks recovered, that would go to MPI. Counts it; at the first
// blocking call from the NETFOLD_MPI_RETRY_AFTER-th such call on (the
// count doubles after each try) every rank, in the same call, meets the
// others, completes what it has outstanding, gives up the failed group
// and creates a new one (collective). True if the communicator is back on
// the fabric: the call goes there.
bool ReturnToTheFabric(MPI_Comm comm, CommState* s, bool nonblocking);

}  // namespace netfold::mpi

#endif  // NETFOLD_HOST_MPI_MPI_RESYNC_H_
