// The node-level hierarchy of libnetfold_mpi (NETFOLD_MPI_HIERARCHY,
// docs/mpi.md "Several ranks per host"): when a communicator holds several
// ranks of one netfold host, its blocking MPI_Allreduce, MPI_Reduce,
// MPI_Bcast, MPI_Barrier, MPI_Allgather and MPI_Reduce_scatter(_block)
// first combine the host's ranks (gathered over MPI on the node
// communicator, reduced with libnetfold's ALU), one leader per host runs
// the operation on the fabric (the interposed collective on the leaders'
// communicator, with all its eligibility, counters and failover), and the
// result fans back out on the node. A host's link then carries V up and V down whatever its number
// of ranks, and the fabric holds one group of leaders, not a group of
// every rank.
//
//   if (const NodeSplit* h = HierarchyFor(comm, kAllreduce, type, op, count))
//     return HierAllreduce(sendbuf, recvbuf, count, type, op, comm, *h);
//
// Hosts are told apart by the name libnetfold gives the rank's host
// ($NETFOLD_HOST, else "h<world rank>"): on a local fabric every rank is a
// host of its own and nothing changes; on the namespace testbed the ranks
// of one host namespace share one. The split is made, collectively, at the
// first eligible collective on the communicator and kept until
// MPI_Comm_free.
//
// Thread safety: the map of splits is under Global::mu; a split is used by
// the thread calling a collective on its communicator (MPI orders those).
#ifndef NETFOLD_HOST_MPI_MPI_HIERARCHY_H_
#define NETFOLD_HOST_MPI_MPI_HIERARCHY_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "host/mpi/interposer_state.h"

namespace netfold::mpi {

struct NodeSplit {
  bool applies = false;              // false: every host holds one rank (flat)
  MPI_Comm node = MPI_COMM_NULL;     // this rank's host, its leader (lowest rank) first
  MPI_Comm leaders = MPI_COMM_NULL;  // one rank per host; MPI_COMM_NULL away from leaders
  std::vector<int> leader_of;        // per rank of the communicator: its leader's rank in `leaders`
  std::vector<int> node_rank_of;     // per rank: its rank in its host's `node`
  // Host order: the ranks host by host (in the order of `leaders`), each
  // host's in node order. Per rank, its place in that order; per host (as
  // a rank of `leaders`), its number of ranks; this host's ranks.
  std::vector<int> host_position;
  std::vector<int> host_sizes;
  std::vector<int> my_host_ranks;
};

// The split of `comm` if this collective goes through the node hierarchy,
// else nullptr (NETFOLD_MPI_HIERARCHY=flat, no fabric, an inter- or small
// communicator, a datatype or op the fabric cannot reduce, every host with
// one rank). Collective over `comm` the first time.
const NodeSplit* HierarchyFor(MPI_Comm comm, Kind kind, MPI_Datatype type, MPI_Op op, int count);

// Takes `comm`'s split out of the books (MPI_Comm_free releases its
// communicators); nullptr if it has none.
std::unique_ptr<NodeSplit> TakeSplit(MPI_Comm comm);
// Forgets every split (MPI_Finalize; MPI frees their communicators).
void ForgetSplits();

int HierAllreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm, const NodeSplit& h);
int HierReduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm, const NodeSplit& h);
int HierBcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
              const NodeSplit& h);
int HierBarrier(MPI_Comm comm, const NodeSplit& h);
// `bytes` per rank (contiguous buffers).
int HierAllgather(const void* sendbuf, void* recvbuf, int bytes, MPI_Comm comm,
                  const NodeSplit& h);
// `counts` elements per rank.
int HierReduceScatter(const void* sendbuf, void* recvbuf, const std::vector<int>& counts,
                      MPI_Datatype type, MPI_Op op, MPI_Comm comm, const NodeSplit& h);

}  // namespace netfold::mpi

#endif  // NETFOLD_HOST_MPI_MPI_HIERARCHY_H_
