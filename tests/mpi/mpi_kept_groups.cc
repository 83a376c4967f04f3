// mpi_collectives kept_groups: the fabric groups of freed communicators are
// kept and given to the next communicator of the same ranks (docs/host.md,
// "Kept groups"), dropped when the ranks do not all keep one, and dropped
// to make room when the job has no group left.
#include <mpi.h>

#include <string>
#include <vector>

#include "tests/mpi/mpi_checks.h"

namespace mpi_test {

namespace {

// One allreduce of 1000 ints on `comm`, every element checked against the
// members' sum of world rank + 1 (from MPI itself).
void CheckedSum(MPI_Comm comm, const std::string& what) {
  int expected = 0;
  const int mine = g_rank + 1;
  PMPI_Allreduce(&mine, &expected, 1, MPI_INT, MPI_SUM, comm);
  std::vector<int> in(1000, mine), out(1000, -1);
  MPI_Allreduce(in.data(), out.data(), 1000, MPI_INT, MPI_SUM, comm);
  ++g_checks;
  for (int v : out) {
    if (v != expected) {
      Fail(what + ": wrong sum");
      return;
    }
  }
}

}  // namespace

void KeptGroups() {
  if (g_size != 4) {
    Fail("kept_groups runs on 4 ranks");
    return;
  }
  CheckedSum(MPI_COMM_WORLD, "world");  // its group: one of the job's three
  // The second duplicate gets the first one's group back.
  for (int i = 0; i < 2; ++i) {
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CheckedSum(dup, "duplicate " + std::to_string(i));
    MPI_Comm_free(&dup);
  }
  // {0, 1}, then {2, 3}: the job's third group goes to {0, 1}, which keep
  // it when it is freed; {2, 3} find the job out of groups, drop the
  // duplicate's group they keep (not released: its rank 0, world rank 0,
  // still keeps it), find no room still and run on MPI itself.
  for (int half = 0; half < 2; ++half) {
    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank / 2 == half ? 0 : MPI_UNDEFINED, g_rank, &pair);
    if (pair != MPI_COMM_NULL) {
      CheckedSum(pair, "ranks " + std::to_string(2 * half) + " and " + std::to_string(2 * half + 1));
      MPI_Comm_free(&pair);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // A duplicate again: ranks 0 and 1 offer the kept group, 2 and 3 none;
  // all drop it (rank 0 releases it) and the manager makes a new one.
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  CheckedSum(dup, "duplicate after the drop");
  MPI_Comm_free(&dup);
}

}  // namespace mpi_test
