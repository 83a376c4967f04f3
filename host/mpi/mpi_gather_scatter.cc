// libnetfold_mpi's allgather and reduce-scatter (docs/mpi.md): MPI_Allgather,
// MPI_Allgatherv (blocks packed in rank order), MPI_Reduce_scatter_block,
// MPI_Reduce_scatter and their nonblocking forms on the fabric (the
// blocking ones through the node hierarchy where it applies), with the eligibility, failover and counters of the other
// collectives (mpi_interposer.cc).
//
// An allgather moves bytes, as MPI_Bcast does: any contiguous datatype
// goes to the fabric (MPI requires the send and receive type signatures to
// match, so both sides move the same bytes). A reduce-scatter reduces, so
// it takes the datatypes and ops MPI_Allreduce takes; its result is bitwise
// the same block of an MPI_Allreduce on the fabric.
#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "host/mpi/interposer_state.h"
#include "host/mpi/mpi_datatypes.h"
#include "host/mpi/mpi_hierarchy.h"
#include "host/mpi/mpi_nonblocking.h"
#include "host/mpi/mpi_resync.h"
#include "netfold/netfold.h"

namespace {

using netfold::mpi::CommState;
using netfold::mpi::G;
using netfold::mpi::Kind;
using netfold::mpi::Pending;
using netfold::mpi::Reason;
using enum netfold::mpi::Kind;
using enum netfold::mpi::Reason;

// A call that goes to PMPI for a reason of its own: no state to use.
CommState* Refuse(MPI_Comm comm, Reason why, Kind kind) {
  netfold::mpi::CallFallsBack(comm, why, kind);
  return nullptr;
}

CommState* UsableFor(MPI_Comm comm, Kind kind, MPI_Datatype type, MPI_Op op, int count,
                     bool nonblocking) {
  return netfold::mpi::Usable(comm, kind, type, op, count, /*has_op=*/kind == kReduceScatter,
                              nonblocking);
}

// Why an allgather of `counts[r]` elements of `recvtype` per rank (packed
// in rank order, from `sendcount` of `sendtype`) cannot move as bytes, or
// kNumReasons if it can: at most 2^31 bytes, contiguous buffers.
Reason AllgatherShape(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                      const std::vector<int>& counts, MPI_Datatype recvtype) {
  int type_size = 0;
  PMPI_Type_size(recvtype, &type_size);
  int64_t total = 0;
  for (int c : counts) total += c;
  if (total * type_size > INT32_MAX) return kHugeCount;
  if (!netfold::mpi::Contiguous(recvtype, static_cast<int>(total)) ||
      (sendbuf != MPI_IN_PLACE && !netfold::mpi::Contiguous(sendtype, sendcount))) {
    return kNonContiguous;
  }
  return kNumReasons;
}

// An allgather's eligibility: AllgatherShape's and Usable's; on success the
// Pending that describes it (bytes of MPI_BYTE) in *p.
CommState* UsableAllgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                           void* recvbuf, const std::vector<int>& counts, MPI_Datatype recvtype,
                           MPI_Comm comm, bool nonblocking, Pending* p) {
  if (Reason why = AllgatherShape(sendbuf, sendcount, sendtype, counts, recvtype);
      why != kNumReasons) {
    return Refuse(comm, why, kAllgather);
  }
  int type_size = 0;
  PMPI_Type_size(recvtype, &type_size);
  int total = 0;
  std::vector<int> bytes;
  for (int c : counts) {
    total += c;
    bytes.push_back(c * type_size);
  }
  CommState* s = UsableFor(comm, kAllgather, recvtype, MPI_OP_NULL, total, nonblocking);
  if (s == nullptr) return nullptr;
  *p = Pending{kAllgather, sendbuf, recvbuf, total * type_size, MPI_BYTE, MPI_OP_NULL, 0, {},
               std::move(bytes)};
  return s;
}

// MPI_Allgatherv's blocks as the fabric takes them: packed in rank order.
bool Packed(const int* counts, const int* displs, int n) {
  int at = 0;
  for (int r = 0; r < n; ++r) {
    if (counts[r] < 0 || displs[r] != at) return false;
    at += counts[r];
  }
  return true;
}

// An allgatherv's eligibility: its blocks packed in rank order, then
// UsableAllgather's.
CommState* UsableAllgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                            void* recvbuf, const int recvcounts[], const int displs[],
                            MPI_Datatype recvtype, MPI_Comm comm, bool nonblocking, Pending* p) {
  if (recvcounts == nullptr || displs == nullptr) return nullptr;  // MPI reports it
  int size = 0;
  PMPI_Comm_size(comm, &size);
  if (!Packed(recvcounts, displs, size)) return Refuse(comm, kUnpacked, kAllgather);
  return UsableAllgather(sendbuf, sendcount, sendtype, recvbuf,
                         std::vector<int>(recvcounts, recvcounts + size), recvtype, comm,
                         nonblocking, p);
}

// A reduce-scatter's eligibility (`recvcounts`: elements per rank); on
// success its Pending, with an in-place input saved, in *p.
CommState* UsableReduceScatter(const void* sendbuf, void* recvbuf, std::vector<int> recvcounts,
                               MPI_Datatype type, MPI_Op op, MPI_Comm comm, bool nonblocking,
                               Pending* p) {
  int64_t total = 0;
  for (int c : recvcounts) total += c;
  if (total > INT32_MAX) return Refuse(comm, kHugeCount, kReduceScatter);
  CommState* s = UsableFor(comm, kReduceScatter, type, op, static_cast<int>(total), nonblocking);
  if (s == nullptr) return nullptr;
  *p = Pending{kReduceScatter, sendbuf, recvbuf, static_cast<int>(total), type, op, 0, {},
               std::move(recvcounts)};
  netfold::mpi::SaveInPlaceInput(*p);
  return s;
}

// Starts `p` on the fabric: blocking when `r` is null. Reads only what it
// needs of `p` before returning.
int StartOnFabric(CommState* s, const Pending& p, netfold_request_t* r) {
  const void* send = p.sendbuf == MPI_IN_PLACE ? NETFOLD_IN_PLACE : p.sendbuf;
  const std::vector<size_t> counts(p.counts.begin(), p.counts.end());
  if (p.kind == kAllgather) {
    return r == nullptr
               ? netfold_allgatherv(s->group, send, p.recvbuf, counts.data(), NETFOLD_DTYPE_UINT8)
               : netfold_allgatherv_nb(s->group, send, p.recvbuf, counts.data(),
                                       NETFOLD_DTYPE_UINT8, r);
  }
  const netfold_dtype_t dtype = *netfold::mpi::NetfoldDatatype(p.type);
  const netfold_op_t op = *netfold::mpi::NetfoldOp(p.op);
  return r == nullptr
             ? netfold_reduce_scatter(s->group, send, p.recvbuf, counts.data(), dtype, op)
             : netfold_reduce_scatter_nb(s->group, send, p.recvbuf, counts.data(), dtype, op, r);
}

// Runs `p` on the fabric, blocking, recovering it on MPI if the fabric fails.
int RunBlocking(MPI_Comm comm, CommState* s, Pending& p) {
  const int rc =
      netfold::mpi::OnFabric(s) ? StartOnFabric(s, p, nullptr) : netfold::mpi::kFailedEarlier;
  if (rc != NETFOLD_SUCCESS) return netfold::mpi::Recover(comm, s, p, rc);
  netfold::mpi::Completed(s, p);
  return MPI_SUCCESS;
}

// Starts `p` on the fabric behind a generalized request (mpi_nonblocking.h).
int RunNonblocking(MPI_Comm comm, CommState* s, Pending p, MPI_Request* request) {
  // What the start reads of `p`, which moves into the request first.
  Pending what{p.kind, p.sendbuf, p.recvbuf, p.count, p.type, p.op, 0, {}, p.counts};
  return netfold::mpi::StartNonblocking(
      comm, s, std::move(p), [&](netfold_request_t* r) { return StartOnFabric(s, what, r); },
      request);
}

bool AnyNegative(const int* counts, int n) {
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0) return true;
  }
  return false;
}

}  // namespace

extern "C" {

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  const std::vector<int> counts(static_cast<size_t>(size), recvcount);
  if (recvcount >= 0 &&
      AllgatherShape(sendbuf, sendcount, sendtype, counts, recvtype) == kNumReasons) {
    if (const auto* h = netfold::mpi::HierarchyFor(comm, kAllgather, recvtype, MPI_OP_NULL,
                                                   recvcount * size)) {
      int type_size = 0;
      PMPI_Type_size(recvtype, &type_size);
      return netfold::mpi::HierAllgather(sendbuf, recvbuf, recvcount * type_size, comm, *h);
    }
  }
  Pending p{};
  CommState* s = recvcount < 0 ? nullptr
                               : UsableAllgather(sendbuf, sendcount, sendtype, recvbuf, counts,
                                                 recvtype, comm, false, &p);
  if (s == nullptr) {
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  return RunBlocking(comm, s, p);
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  Pending p{};
  CommState* s = recvcount < 0
                     ? nullptr
                     : UsableAllgather(sendbuf, sendcount, sendtype, recvbuf,
                                       std::vector<int>(static_cast<size_t>(size), recvcount),
                                       recvtype, comm, true, &p);
  if (s == nullptr) {
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                           request);
  }
  return RunNonblocking(comm, s, std::move(p), request);
}

// Blocks packed in rank order (what MPI_Allgather does with unequal
// counts) go to the fabric; gaps or another order go to MPI.
int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm) {
  Pending p{};
  CommState* s = UsableAllgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                  recvtype, comm, false, &p);
  if (s == nullptr) {
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
  }
  return RunBlocking(comm, s, p);
}

int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request* request) {
  Pending p{};
  CommState* s = UsableAllgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                  recvtype, comm, true, &p);
  if (s == nullptr) {
    return PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                            comm, request);
  }
  return RunNonblocking(comm, s, std::move(p), request);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  if (recvcount >= 0 && int64_t{recvcount} * size <= INT32_MAX) {
    if (const auto* h = netfold::mpi::HierarchyFor(comm, kReduceScatter, type, op,
                                                   recvcount * size)) {
      return netfold::mpi::HierReduceScatter(sendbuf, recvbuf, std::vector<int>(size, recvcount),
                                             type, op, comm, *h);
    }
  }
  Pending p{};
  CommState* s = recvcount < 0 ? nullptr
                               : UsableReduceScatter(sendbuf, recvbuf,
                                                     std::vector<int>(size, recvcount), type, op,
                                                     comm, false, &p);
  if (s == nullptr) return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
  return RunBlocking(comm, s, p);
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                              MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  Pending p{};
  CommState* s = recvcount < 0 ? nullptr
                               : UsableReduceScatter(sendbuf, recvbuf,
                                                     std::vector<int>(size, recvcount), type, op,
                                                     comm, true, &p);
  if (s == nullptr) {
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, request);
  }
  return RunNonblocking(comm, s, std::move(p), request);
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                       MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  if (recvcounts != nullptr && !AnyNegative(recvcounts, size)) {
    int64_t total = 0;
    for (int r = 0; r < size; ++r) total += recvcounts[r];
    const auto* h = total > INT32_MAX ? nullptr
                                      : netfold::mpi::HierarchyFor(comm, kReduceScatter, type, op,
                                                                   static_cast<int>(total));
    if (h != nullptr) {
      return netfold::mpi::HierReduceScatter(
          sendbuf, recvbuf, std::vector<int>(recvcounts, recvcounts + size), type, op, comm, *h);
    }
  }
  Pending p{};
  CommState* s = recvcounts == nullptr || AnyNegative(recvcounts, size)
                     ? nullptr
                     : UsableReduceScatter(sendbuf, recvbuf,
                                           std::vector<int>(recvcounts, recvcounts + size), type,
                                           op, comm, false, &p);
  if (s == nullptr) return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
  return RunBlocking(comm, s, p);
}

int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                        MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  Pending p{};
  CommState* s = recvcounts == nullptr || AnyNegative(recvcounts, size)
                     ? nullptr
                     : UsableReduceScatter(sendbuf, recvbuf,
                                           std::vector<int>(recvcounts, recvcounts + size), type,
                                           op, comm, true, &p);
  if (s == nullptr) {
    return PMPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm, request);
  }
  return RunNonblocking(comm, s, std::move(p), request);
}

}  // extern "C"
