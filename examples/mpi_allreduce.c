/*
 * mpi_allreduce.c - an ordinary MPI program: nothing in it knows netfold.
 * Run it with the interposer preloaded and its collectives go through the
 * fabric (docs/mpi.md):
 *
 *   netfold up --hosts 4            # prints NETFOLD_MANAGER=..., NETFOLD_CREDENTIAL_FILE=...
 *   mpicc examples/mpi_allreduce.c -o mpi_allreduce
 *   mpirun -np 4 -x NETFOLD_MANAGER=... -x NETFOLD_CREDENTIAL_FILE=... -x NETFOLD_MPI_STATS=1 \
 *          -x LD_PRELOAD=$PWD/build/host/mpi/libnetfold_mpi.so ./mpi_allreduce
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = 1 << 16;
  double* x = malloc(n * sizeof(double));
  for (int i = 0; i < n; ++i) x[i] = rank + 1;
  MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  struct { double v; int i; } mine = {(double)(rank % 3), rank}, best;
  MPI_Allreduce(&mine, &best, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double expected = size * (size + 1) / 2.0;
  int ok = x[0] == expected && x[n - 1] == expected && best.v == (size > 2 ? 2 : size - 1);
  if (rank == 0) {
    printf("sum of 1..%d = %g (%s); max of rank %% 3 = %g, first at rank %d\n", size, x[0],
           ok ? "ok" : "WRONG", best.v, best.i);
  }
  free(x);
  MPI_Finalize();
  return ok ? 0 : 1;
}
