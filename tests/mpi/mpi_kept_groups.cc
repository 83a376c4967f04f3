// mpi_collectives kept_groups: the fabric groups of freed communicators are
// kept and given to the next communicator of the same ranks (docs/host.md,
// "Kept groups"), and dropped to make room when the job has no group left.
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
  // {0, 1}, then {0, 1, 2}: the job's third group goes to {0, 1}, which
  // keep it when it is freed; {0, 1, 2} find the job out of groups, drop
  // the kept group of their own ranks alone ({0, 1}'s, released by rank 0;
  // not the duplicate's, which rank 3 keeps too) and get one.
  for (int last : {1, 2}) {
    MPI_Comm some;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank <= last ? 0 : MPI_UNDEFINED, g_rank, &some);
    if (some != MPI_COMM_NULL) {
      CheckedSum(some, "ranks 0 to " + std::to_string(last));
      MPI_Comm_free(&some);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // A duplicate again: the first duplicate's group once more.
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  CheckedSum(dup, "the last duplicate");
  MPI_Comm_free(&dup);
}

}  // namespace mpi_test
