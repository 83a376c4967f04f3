// A communicator's netfold group: the out-of-band exchanges it runs over an
// MPI communicator, its creation in the communicator's first collective, and
// its release at MPI_Comm_free, where a kept group takes the interposer's
// private communicator with it (docs/mpi.md, "Communicators"; docs/host.md,
// "Kept groups"). Split from mpi_interposer.cc.
#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "host/mpi/interposer_state.h"
#include "host/mpi/mpi_nonblocking.h"
#include "host/mpi/mpi_resync.h"
#include "netfold/netfold.h"

namespace netfold::mpi {
namespace {

int OobAllgather(void* ctx, const void* send, void* recv, size_t bytes) {
  MPI_Comm comm = *static_cast<MPI_Comm*>(ctx);
  if (bytes > INT32_MAX) return -1;
  return PMPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                        MPI_BYTE, comm) == MPI_SUCCESS ? 0 : -1;
}
int OobBcast(void* ctx, void* buf, size_t bytes, int root) {
  MPI_Comm comm = *static_cast<MPI_Comm*>(ctx);
  if (bytes > INT32_MAX) return -1;
  return PMPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm) == MPI_SUCCESS ? 0 : -1;
}
int OobBarrier(void* ctx) {
  return PMPI_Barrier(*static_cast<MPI_Comm*>(ctx)) == MPI_SUCCESS ? 0 : -1;
}

// A kept group's private communicator, when the group is released.
void FreeKeptOob(void* oob) {
  PMPI_Comm_free(static_cast<MPI_Comm*>(oob));
  delete static_cast<MPI_Comm*>(oob);
}

}  // namespace

netfold_oob_t Oob(MPI_Comm* comm) { return {OobAllgather, OobBcast, OobBarrier, comm}; }

// The map is shared between threads; the state is this thread's while it
// calls a collective on `comm`.
CommState* Known(MPI_Comm comm) {
  Global& g = G();
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.comms.find(Key(comm));
  return it == g.comms.end() ? nullptr : it->second.get();
}

int CreateGroup(MPI_Comm comm, CommState* s) {
  MPI_Group world_group, comm_group;
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  PMPI_Comm_group(comm, &comm_group);
  std::vector<int> local(static_cast<size_t>(s->size)), world(static_cast<size_t>(s->size));
  for (int i = 0; i < s->size; ++i) local[i] = i;
  PMPI_Group_translate_ranks(comm_group, s->size, local.data(), world_group, world.data());
  PMPI_Group_free(&world_group);
  PMPI_Group_free(&comm_group);
  // A communicator's first group is made in its first collective, which
  // every member is in: the group's exchanges run on the communicator
  // itself. A group given again comes with the private duplicate of the
  // communicator it served (ReleaseComm); any other gets one of its own,
  // as every member does (they all get the same group).
  const bool first = s->oob == MPI_COMM_NULL;
  if (first) s->oob = comm;
  netfold_group_spec_t spec = NETFOLD_GROUP_SPEC_INITIALIZER;
  spec.rank = s->rank;
  spec.size = s->size;
  spec.world_ranks = world.data();
  spec.oob = Oob(&s->oob);  // read at every exchange: the duplicate from below on
  const int rc = netfold_group_create(G().ctx, &spec, &s->group);
  MPI_Comm* kept =
      rc == NETFOLD_SUCCESS ? static_cast<MPI_Comm*>(netfold_group_take_data(s->group)) : nullptr;
  if (kept != nullptr) {
    if (first) {
      s->oob = *kept;
    } else {
      PMPI_Comm_free(kept);  // (a group made again after a failure: it has one)
    }
    delete kept;
  } else if (first) {
    // A split, not MPI_Comm_dup: the application's attributes are not
    // copied to it, so their callbacks never run for it (it is freed
    // whenever its group is dropped, on any thread). A failure leaves none:
    // the group's later exchanges fail, and MPI_Comm_free neither destroys
    // the group nor frees anything.
    MPI_Comm oob = MPI_COMM_NULL;
    if (PMPI_Comm_split(comm, 0, s->rank, &oob) == MPI_SUCCESS) ++G().duplicates;
    s->oob = oob;
  }
  return rc;
}

void ReleaseComm(MPI_Comm comm, bool destroy_group) {
  Global& g = G();
  CommState* s = Known(comm);
  if (s == nullptr) return;
  if (s->oob != MPI_COMM_NULL) {
    FinishOutstanding(s);  // MPI lets a communicator be freed with operations pending
    ResyncAtEnd(comm, s);
    if (destroy_group && s->group != nullptr) {
      // The private duplicate goes with the group: kept with it for the
      // next communicator of the same ranks (CreateGroup), or freed when
      // the group is released. At every member alike, so that every member
      // of a group given again finds one.
      auto* oob = new MPI_Comm(s->oob);
      const bool goes = netfold_group_keep_data(s->group, oob, FreeKeptOob) == NETFOLD_SUCCESS;
      if (!goes) delete oob;
      netfold_group_destroy(s->group);
      if (goes) {
        s->oob = MPI_COMM_NULL;
      } else {
        PMPI_Comm_free(&s->oob);
      }
    } else {
      PMPI_Comm_free(&s->oob);
    }
  }
  std::lock_guard<std::mutex> lock(g.mu);
  g.comms.erase(Key(comm));
}

void ForgetComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(G().mu);
  G().told.erase(Key(comm));
}

}  // namespace netfold::mpi
