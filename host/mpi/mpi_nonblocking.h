// Nonblocking collectives on the fabric (an internal header of
// libnetfold_mpi; docs/mpi.md, "Nonblocking collectives"). MPI_Iallreduce,
// MPI_Ireduce, MPI_Ibcast and MPI_Ibarrier start libnetfold's _nb call and
// hand the application an MPI generalized request. libnetfold moves the
// operation on its own (its progress thread is the NIC); the interposer's
// MPI_Wait/Test family completes the generalized request once libnetfold's
// request is done, which is when MPI's rules let the application see it.
//
//   CommState* s = Usable(comm, kAllreduce, ...);
//   return StartNonblocking(comm, s, std::move(p),
//                           [&](netfold_request_t* r) { return netfold_allreduce_nb(..., r); },
//                           request);
//
// A communicator's operations complete in the order they started, whatever
// order the application waits in (an operation waited for first waits for
// the ones before it), so its count of completed operations stays the one
// the failover (mpi_resync.h) compares across ranks. A blocking collective,
// MPI_Comm_free and MPI_Finalize first complete what is outstanding
// (FinishOutstanding). An operation the fabric fails is recovered when it
// completes, as a blocking one is (Recover).
//
// Thread safety: requests are found under Global::mu; a communicator's
// queue of outstanding operations is under its CommState::nb_mu, so
// several threads may complete (and start) operations of one communicator
// (MPI_THREAD_MULTIPLE); a Test that finds another thread completing them
// reports "not yet".
#ifndef NETFOLD_HOST_MPI_MPI_NONBLOCKING_H_
#define NETFOLD_HOST_MPI_MPI_NONBLOCKING_H_

#include <mpi.h>

#include "absl/functional/function_ref.h"
#include "host/mpi/interposer_state.h"
#include "netfold/netfold.h"

namespace netfold::mpi {

// Starts `p` on the fabric with `start` (one of libnetfold's _nb calls) and
// sets `*request` to a generalized request the application waits on. If
// the start fails, `p` is recovered (Recover) when it completes, in its
// turn like any other.
int StartNonblocking(MPI_Comm comm, CommState* s, Pending p,
                     absl::FunctionRef<int(netfold_request_t*)> start, MPI_Request* request);

// Completes (waiting) every nonblocking operation of `s` started so far.
void FinishOutstanding(CommState* s);

}  // namespace netfold::mpi

#endif  // NETFOLD_HOST_MPI_MPI_NONBLOCKING_H_
