// An OSU-style MPI benchmark of one collective, run by `netfold bench`
// under mpirun: once with libnetfold_mpi.so preloaded (the fabric), once
// without (Open MPI itself, shared memory or TCP). Same program, same
// measurement, so the ratio compares the collectives and nothing else.
//
//   collective_bench allreduce|reduce|bcast|barrier|allgather|reduce_scatter SIZES [SECONDS]
//     (an `i` in front: the nonblocking form, then MPI_Wait at once;
//     `_in_place` after allreduce or reduce: MPI_IN_PLACE, as most
//     applications call them, the result replacing the input)
//     SIZES: comma-separated bytes, e.g. 4,4096,1048576: the whole vector
//     (fp32; bcast: bytes). Allgather: each rank gives SIZE / p bytes and
//     receives SIZE; reduce-scatter (MPI_Reduce_scatter_block): each rank
//     gives SIZE and receives its SIZE / p.
//
// Per size: warm-up (5 operations, a probe of 10 that sets the iteration
// count, then a tenth of that count), then iterations until the time budget
// is spent (at least 5, at most 100000). As in the OSU collective
// benchmarks, every rank times every iteration and the iterations are
// separated by a barrier outside the timed region, so a collective that
// lets some ranks leave early (reduce and bcast on Open MPI) cannot overlap
// one iteration with the next; the latencies are those of all ranks. The
// barrier is PMPI_Barrier, Open MPI's own, in every variant, so it is the
// same separator for all of them and adds nothing to netfold's link
// counters.
// After the timed iterations one more operation runs on rank-dependent
// inputs and every rank that receives a result checks it; a wrong result
// aborts the job before the size's line is printed, so a row in the table
// always stands for correct results.
// Rank 0 prints one CSV line per size:
//   size,iterations,avg_us,p50_us,p99_us,link_bytes_per_op
// avg_us, p50_us and p99_us are over every (rank, iteration) sample.
// link_bytes_per_op is rank 0's RoCE bytes (both directions) per operation
// when the interposer is loaded (netfold_mpi_stats), else -1.
// With NETFOLD_BENCH_STATS=1 and the interposer loaded, rank 0 also prints
// to stderr, after the sweep, what every rank's link spent on recovery:
//   collective_bench: all ranks: chunks N, repairs N, retransmissions N, dropped N
// and each rank's link bytes, sent and received:
//   collective_bench: rank R: link tx N rx N bytes
// (sums of netfold_stats_t over the ranks, the whole run, warm-ups included).
// With NETFOLD_BENCH_COMMUNICATORS=N (0-64), N more communicators (duplicates
// of MPI_COMM_WORLD, each used for one allreduce so that it is set up) sit
// idle through the sweep, as in applications that hold many: what the
// library does for a job's other groups while one waits shows.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "netfold/netfold.h"

namespace {

// The whole netfold_stats_t: the interposer writes all of it (a struct of
// only the fields read here was overrun on the stack).
using Stats = netfold_stats_t;
using StatsFn = int (*)(Stats*);

int64_t LinkBytes(StatsFn fn) {
  if (fn == nullptr) return -1;
  Stats s{};
  if (fn(&s) != 0) return -1;
  return static_cast<int64_t>(s.link_tx_bytes + s.link_rx_bytes);
}

// Elements per rank of an allgather or reduce-scatter of `bytes` (fp32).
size_t BlockCount(long bytes, int size) {
  return static_cast<size_t>(std::max<long>(1, bytes / 4 / size));
}

// One `op` on MPI_COMM_WORLD, or with `nonblocking` its I-form followed by
// MPI_Wait: fp32 sums of `count` elements (allgather, reduce_scatter:
// `count` per rank), bcast: `count` bytes of `recv` from rank 0.
bool g_in_place = false;  // allreduce, reduce: send is MPI_IN_PLACE (at the root, for reduce)

void Collective(const std::string& op, bool nonblocking, const void* send, void* recv, int count) {
  MPI_Comm w = MPI_COMM_WORLD;
  if (g_in_place && (op == "allreduce" || op == "reduce")) {
    // The input is where the result goes (a reduce's non-roots send as usual).
    int rank = 0;
    MPI_Comm_rank(w, &rank);
    if (op == "allreduce" || rank == 0) {
      if (send != recv) std::memcpy(recv, send, static_cast<size_t>(count) * sizeof(float));
      send = MPI_IN_PLACE;
    }
  }
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Request* req = nonblocking ? &r : nullptr;
  if (op == "allreduce") {
    req ? MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, w, req)
        : MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, w);
  } else if (op == "reduce") {
    req ? MPI_Ireduce(send, recv, count, MPI_FLOAT, MPI_SUM, 0, w, req)
        : MPI_Reduce(send, recv, count, MPI_FLOAT, MPI_SUM, 0, w);
  } else if (op == "bcast") {
    req ? MPI_Ibcast(recv, count, MPI_BYTE, 0, w, req) : MPI_Bcast(recv, count, MPI_BYTE, 0, w);
  } else if (op == "allgather") {
    req ? MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, w, req)
        : MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, w);
  } else if (op == "reduce_scatter") {
    req ? MPI_Ireduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, w, req)
        : MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, w);
  } else {
    req ? MPI_Ibarrier(w, req) : MPI_Barrier(w);
  }
  if (req) MPI_Wait(req, MPI_STATUS_IGNORE);
}

// Verify, for allgather and reduce-scatter: element i of rank r's input is
// r + 1 + (i % 3), as below.
std::string VerifyBlocks(const std::string& op, bool nonblocking, long bytes, int rank,
                         int size) {
  char what[256] = "";
  const size_t n = BlockCount(bytes, size);
  const size_t in_count = op == "allgather" ? n : n * size;
  std::vector<float> in(in_count), out(op == "allgather" ? n * size : n, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 3));
  Collective(op, nonblocking, in.data(), out.data(), static_cast<int>(n));
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t i = op == "allgather" ? j % n : rank * n + j;  // index in the owner's input
    const int owner = op == "allgather" ? static_cast<int>(j / n) : -1;
    const float want = op == "allgather"
                           ? static_cast<float>(owner + 1 + static_cast<int>(i % 3))
                           : static_cast<float>(size * (size + 1) / 2 + size * static_cast<int>(i % 3));
    if (out[j] != want) {
      std::snprintf(what, sizeof(what), "%s element %zu is %g, expected %g", op.c_str(), j,
                    static_cast<double>(out[j]), static_cast<double>(want));
      break;
    }
  }
  return what;
}

// Runs `op` once on inputs that identify the ranks and checks the result
// where MPI defines one: element i of rank r's input is r + 1 + (i % 3), so
// the fp32 sum over p ranks is exact (p (p + 1) / 2 + p (i % 3), far below
// 2^24); bcast sends bytes that depend on the index. Returns an empty
// string or what was wrong.
std::string Verify(const std::string& op, bool nonblocking, long bytes, int rank, int size) {
  char what[256] = "";
  if (op == "bcast") {
    std::vector<unsigned char> buf(static_cast<size_t>(std::max<long>(bytes, 1)));
    for (size_t i = 0; i < buf.size(); ++i) {
      buf[i] = rank == 0 ? static_cast<unsigned char>(i * 7 + 3) : 0;
    }
    Collective(op, nonblocking, nullptr, buf.data(), static_cast<int>(bytes));
    for (size_t i = 0; i < static_cast<size_t>(bytes); ++i) {
      if (buf[i] != static_cast<unsigned char>(i * 7 + 3)) {
        std::snprintf(what, sizeof(what), "bcast byte %zu is %u, expected %u", i, buf[i],
                      static_cast<unsigned char>(i * 7 + 3));
        break;
      }
    }
    return what;
  }
  if (op == "allgather" || op == "reduce_scatter") {
    return VerifyBlocks(op, nonblocking, bytes, rank, size);
  }
  if (op != "allreduce" && op != "reduce") return "";
  const size_t count = static_cast<size_t>(std::max<long>(1, bytes / 4));
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 3));
  Collective(op, nonblocking, in.data(), out.data(), static_cast<int>(count));
  if (op == "reduce" && rank != 0) return "";
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(size * (size + 1) / 2 + size * static_cast<int>(i % 3));
    if (out[i] != want) {
      std::snprintf(what, sizeof(what), "%s element %zu is %g, expected %g", op.c_str(), i,
                    static_cast<double>(out[i]), static_cast<double>(want));
      break;
    }
  }
  return what;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    if (rank == 0) std::fprintf(stderr, "usage: collective_bench OP SIZES [SECONDS]\n");
    MPI_Finalize();
    return 2;
  }
  // iallreduce, ibcast, ...: the nonblocking form, waited for at once.
  std::string op = argv[1];
  const bool nonblocking = op.size() > 1 && op[0] == 'i' &&
                           (op.substr(1) == "allreduce" || op.substr(1) == "reduce" ||
                            op.substr(1) == "bcast" || op.substr(1) == "barrier" ||
                            op.substr(1) == "allgather" || op.substr(1) == "reduce_scatter");
  if (nonblocking) op = op.substr(1);
  if (const std::string suffix = "_in_place";
      op.size() > suffix.size() && op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0) {
    op = op.substr(0, op.size() - suffix.size());
    g_in_place = true;
    if (op != "allreduce" && op != "reduce") {
      if (rank == 0) std::fprintf(stderr, "collective_bench: only allreduce and reduce run in place\n");
      MPI_Finalize();
      return 2;
    }
  }
  std::vector<long> sizes;
  for (char* p = argv[2]; *p;) {
    sizes.push_back(std::strtol(p, &p, 10));
    if (*p == ',') ++p;
  }
  const double budget = argc > 3 ? std::atof(argv[3]) : 1.0;
  auto stats = reinterpret_cast<StatsFn>(dlsym(RTLD_DEFAULT, "netfold_mpi_stats"));
  std::vector<MPI_Comm> idle;
  if (const char* n = std::getenv("NETFOLD_BENCH_COMMUNICATORS"); n != nullptr) {
    char* end = nullptr;
    const long count = std::strtol(n, &end, 10);
    if (end == n || *end != '\0' || count < 0 || count > 64) {
      if (rank == 0) std::fprintf(stderr, "collective_bench: NETFOLD_BENCH_COMMUNICATORS: 0-64\n");
      MPI_Finalize();
      return 2;
    }
    idle.resize(static_cast<size_t>(count));
    for (MPI_Comm& c : idle) {
      MPI_Comm_dup(MPI_COMM_WORLD, &c);
      int one = 1, sum = 0;
      MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
    }
  }
  for (long bytes : sizes) {
    const int count = static_cast<int>(op == "bcast" ? bytes : std::max<long>(1, bytes / 4));
    const int block = static_cast<int>(BlockCount(bytes, size));  // allgather, reduce_scatter
    std::vector<float> a(static_cast<size_t>(std::max(count, block * size)), 1.0f), b(a.size());
    const bool blocks = op == "allgather" || op == "reduce_scatter";
    // In place: the vector is its own input and output (b is not used).
    auto once = [&] { Collective(op, nonblocking, a.data(),
                                 op == "bcast" || g_in_place ? a.data() : b.data(),
                                 blocks ? block : count); };
    for (int i = 0; i < 5; ++i) once();
    MPI_Barrier(MPI_COMM_WORLD);
    // Decide the iteration count on rank 0 from the average of a timed
    // probe of 10 iterations (one alone is too noisy when processes share
    // cores), share it.
    constexpr int kProbe = 10;
    double t0 = MPI_Wtime();
    for (int i = 0; i < kProbe; ++i) {
      once();
      PMPI_Barrier(MPI_COMM_WORLD);
    }
    double probe = (MPI_Wtime() - t0) / kProbe;
    MPI_Bcast(&probe, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int iters = static_cast<int>(std::min(100000.0, std::max(5.0, budget / std::max(probe, 1e-7))));
    std::vector<double> lat(static_cast<size_t>(iters));
    // Warm-up proportional to the run (a tenth of it, OSU-style): caches,
    // connections and the scheduler settle before anything is timed.
    for (int i = 0; i < iters / 10; ++i) once();
    // Rank 0's link counters before the barrier that starts the timed
    // operations: once through it, its neighbours may send their part of
    // the first one, and what rank 0 took in before reading the counters
    // fell outside the window (a ring of 4 ranks measured 2.86 V per
    // operation instead of 3 V over 5 operations on a loaded machine).
    const int64_t link0 = LinkBytes(stats);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      t0 = MPI_Wtime();
      once();
      lat[static_cast<size_t>(i)] = MPI_Wtime() - t0;
      PMPI_Barrier(MPI_COMM_WORLD);
    }
    const int64_t link1 = LinkBytes(stats);
    // Every rank's samples, at rank 0 (at most 100000 x 16 doubles).
    std::vector<double> all(rank == 0 ? lat.size() * static_cast<size_t>(size) : 0);
    PMPI_Gather(lat.data(), iters, MPI_DOUBLE, all.data(), iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (const std::string wrong = Verify(op, nonblocking, bytes, rank, size); !wrong.empty()) {
      std::fprintf(stderr, "collective_bench: WRONG RESULT on rank %d of %d, %ld bytes: %s\n", rank,
                   size, bytes, wrong.c_str());
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      double sum = 0;
      for (double l : all) sum += l;
      std::sort(all.begin(), all.end());
      const double p50 = all[all.size() / 2], p99 = all[std::min(all.size() - 1, all.size() * 99 / 100)];
      const double link = link0 < 0 ? -1 : static_cast<double>(link1 - link0) / iters;
      std::printf("%ld,%d,%.3f,%.3f,%.3f,%.1f\n", bytes, iters,
                  sum / static_cast<double>(all.size()) * 1e6, p50 * 1e6, p99 * 1e6, link);
      std::fflush(stdout);
    }
  }
  if (const char* want = std::getenv("NETFOLD_BENCH_STATS");
      stats != nullptr && want != nullptr && std::string(want) == "1") {
    Stats s{};
    (void)stats(&s);
    const uint64_t mine[4] = {s.chunks_posted, s.repairs_sent, s.retransmissions,
                              s.packets_dropped};
    uint64_t sum[4] = {};
    PMPI_Reduce(mine, sum, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::fprintf(stderr,
                   "collective_bench: all ranks: chunks %llu, repairs %llu, retransmissions %llu, "
                   "dropped %llu\n",
                   static_cast<unsigned long long>(sum[0]), static_cast<unsigned long long>(sum[1]),
                   static_cast<unsigned long long>(sum[2]), static_cast<unsigned long long>(sum[3]));
    }
    // Each rank's link, both ways: which ranks carry a collective's bytes.
    const uint64_t link[2] = {s.link_tx_bytes, s.link_rx_bytes};
    std::vector<uint64_t> links(rank == 0 ? 2 * static_cast<size_t>(size) : 0);
    PMPI_Gather(link, 2, MPI_UINT64_T, links.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < size; ++r) {
      std::fprintf(stderr, "collective_bench: rank %d: link tx %llu rx %llu bytes\n", r,
                   static_cast<unsigned long long>(links[2 * static_cast<size_t>(r)]),
                   static_cast<unsigned long long>(links[2 * static_cast<size_t>(r) + 1]));
    }
  }
  for (MPI_Comm& c : idle) MPI_Comm_free(&c);
  MPI_Finalize();
  return 0;
}
