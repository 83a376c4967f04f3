// How much of a nonblocking allreduce hides behind computation, in the
// way of the OSU overlap benchmarks: run once with libnetfold_mpi.so
// preloaded (the fabric) and once without (MPI itself), on the same ranks.
//
//   overlap_bench BYTES ITERATIONS
//
// Per rank: t_comm, a blocking MPI_Allreduce of BYTES (fp32 sum); t_comp,
// a computation calibrated to take at least as long; t_both,
// MPI_Iallreduce, the same computation, MPI_Wait. Averages over ITERATIONS
// (the slowest rank's calibration is used everywhere). Rank 0 prints
//   bytes B: allreduce T ms, compute T ms, overlapped T ms, overlap P%
// with overlap = (t_comm + t_comp - t_both) / min(t_comm, t_comp): 100 %
// when the allreduce hid entirely, 0 % when nothing did, below 0 when
// running both together cost more than one after the other (CPU taken
// from the computation).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

volatile double g_sink = 0;

void Compute(long n) {
  double s = 0;
  for (long i = 0; i < n; ++i) s += static_cast<double>(i) * 1e-9;
  g_sink = g_sink + s;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 3) {
    if (rank == 0) std::fprintf(stderr, "usage: overlap_bench BYTES ITERATIONS\n");
    MPI_Finalize();
    return 2;
  }
  const int count = std::max(1, std::atoi(argv[1]) / 4);
  const int iterations = std::max(1, std::atoi(argv[2]));
  std::vector<float> in(static_cast<size_t>(count), 1.0f), out(in.size());
  MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // warm-up

  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) {
    MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  const double comm = (MPI_Wtime() - start) / iterations;

  long work = 1 << 16;
  for (int doublings = 0; doublings < 40; ++doublings, work *= 2) {
    const double t = MPI_Wtime();
    Compute(work);
    if (MPI_Wtime() - t >= comm) break;
  }
  MPI_Allreduce(MPI_IN_PLACE, &work, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);

  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) Compute(work);
  const double comp = (MPI_Wtime() - start) / iterations;

  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) {
    MPI_Request request;
    MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    Compute(work);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  const double both = (MPI_Wtime() - start) / iterations;

  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool right = out[0] == static_cast<float>(size) && out[out.size() - 1] == static_cast<float>(size);
  if (rank == 0) {
    std::printf("bytes %d: allreduce %.2f ms, compute %.2f ms, overlapped %.2f ms, overlap %.0f%%%s\n",
                count * 4, comm * 1e3, comp * 1e3, both * 1e3,
                100.0 * (comm + comp - both) / std::min(comm, comp), right ? "" : " (WRONG RESULT)");
  }
  MPI_Finalize();
  return right ? 0 : 1;
}
