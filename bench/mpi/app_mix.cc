// A small application's mix of collectives, to see what a job that
// computes between its calls gets from the fabric (docs/performance.md,
// "Nonblocking collectives after a failure" and "Two-rank communicators").
//
//   app_mix ITERATIONS [MASK]
//
// The ranks form rows of four (rank / 4) and columns (rank % 4). Each
// iteration: an MPI_Iallreduce of 1.2 MB on the rank's column overlapped
// with computation (MASK bit 1); an in-place allreduce of 64 KB on the
// world (bit 2); every fifth iteration a 256 KB reduce on the row to a
// rotating root and a bcast of as much on the world from a rotating root
// (bit 4); every fiftieth a new duplicate of the world, one allreduce on
// it, freed. MASK defaults to 7 (all). Integer data, so the result is the
// same bits whatever runs the collectives: rank 0 prints
//   loop T s digest D
// with D an FNV-1a hash of what every rank received, xored over the ranks.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

uint64_t g_digest = 1469598103934665603ull;

void Mix(const std::vector<int32_t>& v) {
  for (size_t i = 0; i < v.size(); i += 97) {
    g_digest ^= static_cast<uint32_t>(v[i]);
    g_digest *= 1099511628211ull;
  }
}

void Compute(std::vector<int32_t>& v, int salt) {
  for (int round = 0; round < 4; ++round) {
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = (v[i] * 31 + salt + static_cast<int32_t>(i)) & 0xffff;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 0;
  const int mask = argc > 2 ? std::atoi(argv[2]) : 7;
  if (iterations <= 0 || mask < 0 || mask > 7) {
    if (rank == 0) std::fprintf(stderr, "usage: app_mix ITERATIONS [MASK (0-7, default 7)]\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Comm row, column;
  MPI_Comm_split(MPI_COMM_WORLD, rank / 4, rank, &row);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 4, rank, &column);
  int row_rank = 0, row_size = 0;
  MPI_Comm_rank(row, &row_rank);
  MPI_Comm_size(row, &row_size);
  std::vector<int32_t> a(300000), b(300000), w(16384), x(65536), y(65536), work(200000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = rank + static_cast<int32_t>(i);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int it = 0; it < iterations; ++it) {
    MPI_Request column_sum = MPI_REQUEST_NULL;
    for (size_t i = 0; i < a.size(); i += 1000) a[i] = (a[i] + it) & 0xffff;
    if (mask & 1) {
      MPI_Iallreduce(a.data(), b.data(), static_cast<int>(a.size()), MPI_INT, MPI_SUM, column,
                     &column_sum);
    }
    Compute(work, it + rank);
    MPI_Wait(&column_sum, MPI_STATUS_IGNORE);
    Mix(b);
    for (size_t i = 0; i < w.size(); ++i) w[i] = (rank * 7 + static_cast<int32_t>(i) + it) & 0xfff;
    if (mask & 2) {
      MPI_Allreduce(MPI_IN_PLACE, w.data(), static_cast<int>(w.size()), MPI_INT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    Mix(w);
    if ((mask & 4) && it % 5 == 0) {
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = (rank + static_cast<int32_t>(i) * 3 + it) & 0xfff;
      }
      const int root = it % row_size;
      MPI_Reduce(x.data(), y.data(), static_cast<int>(x.size()), MPI_INT, MPI_SUM, root, row);
      if (row_rank == root) Mix(y);
      if (rank == it % size) {
        for (size_t i = 0; i < y.size(); ++i) y[i] = (static_cast<int32_t>(i) * 5 + it) & 0xffff;
      }
      MPI_Bcast(y.data(), static_cast<int>(y.size()), MPI_INT, it % size, MPI_COMM_WORLD);
      Mix(y);
    }
    if (it % 50 == 49) {
      MPI_Comm dup;
      MPI_Comm_dup(MPI_COMM_WORLD, &dup);
      std::vector<int32_t> v = {rank + it}, s = {0};
      MPI_Allreduce(v.data(), s.data(), 1, MPI_INT, MPI_SUM, dup);
      Mix(s);
      MPI_Comm_free(&dup);
    }
  }
  const double seconds = MPI_Wtime() - start;
  uint64_t all = 0;
  MPI_Reduce(&g_digest, &all, 1, MPI_UINT64_T, MPI_BXOR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("loop %.1f s digest %016llx\n", seconds, static_cast<unsigned long long>(all));
  }
  MPI_Comm_free(&row);
  MPI_Comm_free(&column);
  MPI_Finalize();
  return 0;
}
