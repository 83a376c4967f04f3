// What a communicator costs an application that makes many: each round
// duplicates MPI_COMM_WORLD, runs one 4-byte allreduce on the duplicate
// and frees it (docs/performance.md, "Answering calls to a recovery").
//
//   comm_churn [ROUNDS (default 200)]
//
// Rank 0 prints the slowest rank's average per round and, of it, the
// average MPI_Comm_free:
//   per round T us, of which MPI_Comm_free F us
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  if (rounds <= 0) {
    if (rank == 0) std::fprintf(stderr, "usage: comm_churn [ROUNDS > 0]\n");
    MPI_Finalize();
    return 2;
  }
  double total = 0, freeing = 0;
  for (int i = 0; i < rounds; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int x = rank, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, dup);
    const double used = MPI_Wtime();
    MPI_Comm_free(&dup);
    const double end = MPI_Wtime();
    total += end - start;
    freeing += end - used;
  }
  double slowest[2] = {0, 0};
  const double mine[2] = {total, freeing};
  MPI_Reduce(mine, slowest, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("per round %.0f us, of which MPI_Comm_free %.0f us\n", 1e6 * slowest[0] / rounds,
                1e6 * slowest[1] / rounds);
  }
  MPI_Finalize();
  return 0;
}
