// mpi_allreduce.cc - the same ordinary MPI program in C++ (MPI's C API, no
// Fortran, no C++ bindings), with a communicator split: each communicator
// gets its own netfold group when the interposer is preloaded.
//
//   mpicxx -std=c++17 examples/mpi_allreduce.cc -o mpi_allreduce_cc
//   mpirun -np 4 -x NETFOLD_MANAGER=... -x LD_PRELOAD=.../libnetfold_mpi.so ./mpi_allreduce_cc
#include <mpi.h>

#include <cstdio>
#include <numeric>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  std::vector<long> v(1000, rank);
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_LONG, MPI_SUM, half);
  long expected = 0;
  for (int r = rank % 2; r < size; r += 2) expected += r;
  bool ok = v.front() == expected && v.back() == expected;
  int all_ok = 0, mine = ok;
  MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) std::printf("split allreduce: %s\n", all_ok ? "ok on every rank" : "WRONG");
  MPI_Comm_free(&half);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
