// An MPI program for tests/mpi: run it under mpirun with libnetfold_mpi.so
// preloaded (or not) against a running fabric. It checks every result
// against an independent reference computed from the known inputs of all
// ranks, compares with what PMPI_ computes, and prints per check one line
// at rank 0 on failure, then "mpi_collectives: N checks, F failed, M MPI
// discrepancies" and exits non-zero if F > 0.
//
//   mpi_collectives sweep     every predefined datatype x op x size, in place too;
//                             reduce-scatter of every datatype x op, allgather
//   mpi_collectives comms     dup and split communicators, freed and reused
//                             (allreduce, reduce-scatter and allgather on each)
//   mpi_collectives kept_groups   freed communicators' groups kept and given
//                             again, dropped, evicted (mpi_kept_groups.cc)
//   mpi_collectives kept_threads ROUNDS   MPI_THREAD_MULTIPLE; two threads
//                             each make, use and free ROUNDS communicators
//                             of the world's ranks at once
//   mpi_collectives hierarchy [quick]   with NETFOLD_TEST_RANKS_PER_HOST=N
//                             (rank r is host h<r/N>): the sweep (not with
//                             quick), split communicators, and the bytes
//                             on each rank's link
//   mpi_collectives fallback  user op, derived datatype, strided allgather, tiny
//                             comm: still right
//   mpi_collectives outage    allreduces in a loop; the driver kills the
//                             switches in the middle (after "phase 1 done")
//   mpi_collectives outage_inplace COUNT OPS   in-place int allreduces of
//                             COUNT elements; the driver kills the switches
//                             after the third ("phase 1 done")
//   mpi_collectives outage_reduce COUNT OPS   the same with reduces to a
//                             moving root
//   mpi_collectives root_late [blocking_next|nonblocking_next|free_next|cross_next|recv_next]
//                             a reduce's root behind the ranks that
//                             returned from it when the switches die
//   mpi_collectives caller_outside   the same on {0, 1, 2}, ranks 1 and 2
//                             then in a failed allreduce on {1, 2, 3}
//   mpi_collectives late_to_free SECONDS   an allreduce on a duplicate of
//                             the world, which rank 0 frees SECONDS after
//                             the others
//   mpi_collectives nb_outage BEFORE AFTER [blocking|nonblocking_only]
//                             nonblocking allreduces around an outage, with
//                             or without a blocking one between
//   mpi_collectives strict return|fatal   phase 1 of outage, then (with
//                             NETFOLD_MPI_ENABLE=1) one allreduce on the dead
//                             fabric: it must return an error under
//                             MPI_ERRORS_RETURN and abort the job under the
//                             default MPI_ERRORS_ARE_FATAL
//   mpi_collectives pause SECONDS OPS sleep|busy   one of each collective
//                             (a reduce last), a compute phase of SECONDS
//                             without any MPI call (sleeping, or busy on
//                             the CPU), then OPS collectives, each checked
//   mpi_collectives verbose DUPS   a barrier on MPI_COMM_WORLD, a long double
//                             allreduce twice, a single-rank split, then DUPS
//                             duplicates of MPI_COMM_WORLD each with a barrier
//                             (enough of them exhaust the job's group quota)
//   mpi_collectives threads OPS   MPI_Init_thread(MPI_THREAD_MULTIPLE); two
//                             threads, each on its own duplicate of
//                             MPI_COMM_WORLD, run OPS checked allreduces and
//                             OPS checked bcasts at the same time; then 40
//                             MPI_Iallreduce on one of them completed by two
//                             threads at once; then one allreduce on
//                             MPI_COMM_WORLD
//   mpi_collectives nonblocking ROUNDS   each round starts seven nonblocking
//                             collectives at once (MPI_Iallreduce, in place
//                             and not, MPI_Ibcast, MPI_Ireduce, MPI_Ibarrier,
//                             MPI_Ireduce_scatter_block, MPI_Iallgather on
//                             two communicators) and completes them with
//                             MPI_Waitall, MPI_Wait in reverse, an
//                             MPI_Testall loop or MPI_Waitany; every fifth
//                             round also a blocking MPI_Allreduce while an
//                             MPI_Iallreduce is outstanding; all checked
//   mpi_collectives bench COUNT ITERS   (used by bench/)
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/vector_state.h"
#include "netfold/netfold.h"
#include "tests/mpi/mpi_checks.h"

using namespace mpi_test;  // NOLINT: the scenarios' shared helpers (mpi_checks.h)

namespace {

// Two threads collectives at once, each on its own communicator (what
// MPI_THREAD_MULTIPLE allows), every result checked.
void Threads(int ops) {
  MPI_Comm comms[2];
  for (MPI_Comm& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  std::atomic<int> checks{0}, wrong{0};
  auto work = [&](int t) {
    const MPI_Comm comm = comms[t];
    for (int i = 0; i < ops; ++i) {
      // Sizes differ per thread and per operation: one chunk to several.
      const int n = 1 + (i * 997 + t * 3001) % 5000;
      std::vector<int> x(static_cast<size_t>(n)), y(x.size(), -1);
      for (int k = 0; k < n; ++k) x[static_cast<size_t>(k)] = g_rank + i + k + t;
      MPI_Allreduce(x.data(), y.data(), n, MPI_INT, MPI_SUM, comm);
      for (int k = 0; k < n; ++k) {
        const int want = g_size * (i + k + t) + g_size * (g_size - 1) / 2;
        if (y[static_cast<size_t>(k)] != want) {
          ++wrong;
          break;
        }
      }
      const int root = i % g_size;
      std::vector<unsigned char> b(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        b[static_cast<size_t>(k)] = g_rank == root ? static_cast<unsigned char>(k * 7 + i + t) : 0;
      }
      MPI_Bcast(b.data(), n, MPI_BYTE, root, comm);
      for (int k = 0; k < n; ++k) {
        if (b[static_cast<size_t>(k)] != static_cast<unsigned char>(k * 7 + i + t)) {
          ++wrong;
          break;
        }
      }
      checks += 2;
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  // One thread starts nonblocking allreduces on one communicator; two
  // threads complete them at once, each waiting for every other request
  // (MPI allows it; the operations still complete in start order).
  constexpr int kShared = 40;
  std::vector<int> in(kShared), out(kShared, -1);
  std::vector<MPI_Request> reqs(kShared);
  for (int i = 0; i < kShared; ++i) {
    in[i] = g_rank + i;
    MPI_Iallreduce(&in[i], &out[i], 1, MPI_INT, MPI_SUM, comms[0], &reqs[i]);
  }
  auto complete = [&](int parity) {
    for (int i = parity; i < kShared; i += 2) {
      if (i % 4 < 2) {
        MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
      } else {
        int flag = 0;
        while (!flag) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
      }
    }
  };
  std::thread even(complete, 0), odd(complete, 1);
  even.join();
  odd.join();
  for (int i = 0; i < kShared; ++i) {
    ++checks;
    if (out[i] != g_size * i + g_size * (g_size - 1) / 2) ++wrong;
  }
  g_checks += checks.load();
  if (wrong.load() > 0) Fail(std::to_string(wrong.load()) + " wrong results under MPI_THREAD_MULTIPLE");
  for (MPI_Comm& c : comms) MPI_Comm_free(&c);
}

void Nonblocking(int rounds) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  for (int i = 0; i < rounds; ++i) {
    const int n = 1 + (i * 1009) % 3000;
    const int root = i % g_size;
    std::vector<int> a(n), a_out(n, -1), b(n), c(n), c_out(n, -1), d(n);
    std::vector<int> e(static_cast<size_t>(n) * g_size), e_out(n, -1), f(n * g_size, -1);
    for (int k = 0; k < n; ++k) {
      a[k] = g_rank + k + i;
      b[k] = g_rank == root ? k * 3 + i : 0;
      c[k] = g_rank * k + i;
      d[k] = 2 * g_rank + k;
    }
    for (size_t k = 0; k < e.size(); ++k) e[k] = g_rank + static_cast<int>(k);
    MPI_Request reqs[7];
    MPI_Iallreduce(a.data(), a_out.data(), n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[0]);
    MPI_Ibcast(b.data(), n, MPI_INT, root, MPI_COMM_WORLD, &reqs[1]);
    MPI_Ireduce(c.data(), c_out.data(), n, MPI_INT, MPI_MAX, root, dup, &reqs[2]);
    MPI_Iallreduce(MPI_IN_PLACE, d.data(), n, MPI_INT, MPI_SUM, dup, &reqs[3]);
    MPI_Ibarrier(MPI_COMM_WORLD, &reqs[4]);
    MPI_Ireduce_scatter_block(e.data(), e_out.data(), n, MPI_INT, MPI_SUM, dup, &reqs[5]);
    MPI_Iallgather(a.data(), n, MPI_INT, f.data(), n, MPI_INT, MPI_COMM_WORLD, &reqs[6]);
    switch (i % 4) {
      case 0:
        MPI_Waitall(7, reqs, MPI_STATUSES_IGNORE);
        break;
      case 1:
        for (int r = 6; r >= 0; --r) MPI_Wait(&reqs[r], MPI_STATUS_IGNORE);
        break;
      case 2: {
        int flag = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!flag && std::chrono::steady_clock::now() < deadline) {
          MPI_Testall(7, reqs, &flag, MPI_STATUSES_IGNORE);
          if (!flag) usleep(100);
        }
        if (!flag) Fail("MPI_Testall never saw the operations complete");
        break;
      }
      default:
        for (int done = 0; done < 7; ++done) {
          int index = -1;
          MPI_Waitany(7, reqs, &index, MPI_STATUS_IGNORE);
          if (index < 0 || index >= 7) Fail("MPI_Waitany returned no index");
        }
        break;
    }
    for (MPI_Request r : reqs) {
      if (r != MPI_REQUEST_NULL) Fail("a request was left active");
    }
    bool ok = true;
    for (int k = 0; k < n; ++k) {
      ok = ok && a_out[k] == g_size * (k + i) + g_size * (g_size - 1) / 2;
      ok = ok && b[k] == k * 3 + i;
      ok = ok && (g_rank != root || c_out[k] == (g_size - 1) * k + i);
      ok = ok && d[k] == g_size * k + g_size * (g_size - 1);
      // Block g_rank of e, summed: sum over r of (r + g_rank * n + k).
      ok = ok && e_out[k] == g_size * (g_rank * n + k) + g_size * (g_size - 1) / 2;
      for (int r = 0; r < g_size; ++r) ok = ok && f[r * n + k] == r + k + i;
    }
    ++g_checks;
    if (!ok) Fail("nonblocking round " + std::to_string(i));
    if (i % 5 == 0) {
      // A blocking collective while a nonblocking one is outstanding on
      // the same communicator: the earlier one completes first.
      int x = g_rank + 1, x_out = -1, y = 2 * g_rank, y_out = -1;
      MPI_Request r;
      MPI_Iallreduce(&x, &x_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
      MPI_Allreduce(&y, &y_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      ++g_checks;
      if (x_out != g_size * (g_size + 1) / 2 || y_out != g_size * (g_size - 1)) {
        Fail("blocking after nonblocking");
      }
    }
  }
  MPI_Comm_free(&dup);
}

template <typename T>
void CheckAllreduce(MPI_Comm comm, MPI_Datatype type, const char* tname, MPI_Op op,
                    const char* oname, size_t count, uint64_t seed, bool in_place) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<T> in(count), out(count), pmpi(count), ref(count);
  for (size_t i = 0; i < count; ++i) {
    in[i] = Input<T>(rank, i, seed, op);
    ref[i] = Input<T>(0, i, seed, op);
    for (int r = 1; r < size; ++r) ref[i] = Apply(op, ref[i], Input<T>(r, i, seed, op));
  }
  int rc;
  if (in_place) {
    out = in;
    rc = MPI_Allreduce(MPI_IN_PLACE, out.data(), static_cast<int>(count), type, op, comm);
  } else {
    rc = MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), type, op, comm);
  }
  PMPI_Allreduce(in.data(), pmpi.data(), static_cast<int>(count), type, op, comm);
  ++g_checks;
  bool ok = rc == MPI_SUCCESS, mpi_ok = true;
  for (size_t i = 0; i < count; ++i) {
    if (!Same(out[i], ref[i])) ok = false;
    if (!Same(pmpi[i], ref[i])) mpi_ok = false;
  }
  if (!ok) {
    Fail(std::string("allreduce ") + tname + " " + oname + " count " + std::to_string(count) +
         (in_place ? " in place" : ""));
  }
  if (!mpi_ok) {
    ++g_mpi_wrong;
    if (g_rank == 0 && g_mpi_wrong <= 10) {
      std::fprintf(stderr, "note: MPI's own MPI_Allreduce differs from the reference for %s %s "
                           "(count %zu): an MPI library bug, not netfold's\n", tname, oname, count);
    }
  }
}

template <typename T>
void AllOps(MPI_Comm comm, MPI_Datatype type, const char* tname, std::vector<size_t> counts,
            uint64_t& seed) {
  for (const NamedOp& o : OpsFor<T>()) {
    for (size_t c : counts) {
      CheckAllreduce<T>(comm, type, tname, o.op, o.name, c, ++seed, false);
    }
    CheckAllreduce<T>(comm, type, tname, o.op, o.name, counts.back() / 2 + 1, ++seed, true);
  }
}

void EveryRoot(MPI_Comm comm, uint64_t seed);

void Sweep(MPI_Comm comm, bool big) {
  uint64_t seed = 1;
  std::vector<size_t> counts = {1, 7, 1000};
  AllOps<int8_t>(comm, MPI_INT8_T, "int8", counts, seed);
  AllOps<signed char>(comm, MPI_SIGNED_CHAR, "signed char", {1, 300}, seed);
  AllOps<uint8_t>(comm, MPI_UINT8_T, "uint8", counts, seed);
  AllOps<unsigned char>(comm, MPI_UNSIGNED_CHAR, "unsigned char", {5}, seed);
  AllOps<int16_t>(comm, MPI_INT16_T, "int16", counts, seed);
  AllOps<short>(comm, MPI_SHORT, "short", {9}, seed);
  AllOps<uint16_t>(comm, MPI_UINT16_T, "uint16", counts, seed);
  AllOps<int32_t>(comm, MPI_INT32_T, "int32", counts, seed);
  AllOps<int>(comm, MPI_INT, "int", counts, seed);
  AllOps<uint32_t>(comm, MPI_UNSIGNED, "unsigned", counts, seed);
  AllOps<int64_t>(comm, MPI_INT64_T, "int64", counts, seed);
  AllOps<long>(comm, MPI_LONG, "long", {3}, seed);
  AllOps<long long>(comm, MPI_LONG_LONG, "long long", {3}, seed);
  AllOps<uint64_t>(comm, MPI_UINT64_T, "uint64", counts, seed);
  AllOps<unsigned long>(comm, MPI_UNSIGNED_LONG, "unsigned long", {3}, seed);
  AllOps<float>(comm, MPI_FLOAT, "float", counts, seed);
  AllOps<double>(comm, MPI_DOUBLE, "double", counts, seed);
  AllOps<FloatInt>(comm, MPI_FLOAT_INT, "float_int", counts, seed);
  AllOps<DoubleInt>(comm, MPI_DOUBLE_INT, "double_int", counts, seed);
  AllOps<LongInt>(comm, MPI_LONG_INT, "long_int", counts, seed);
  AllOps<TwoInt>(comm, MPI_2INT, "2int", counts, seed);
  AllOps<ShortInt>(comm, MPI_SHORT_INT, "short_int", counts, seed);
  // Large vectors: up to 1 Mi elements.
  const size_t large = big ? (1u << 20) : (1u << 16);
  CheckAllreduce<float>(comm, MPI_FLOAT, "float", MPI_SUM, "sum", large, ++seed, false);
  CheckAllreduce<int32_t>(comm, MPI_INT, "int", MPI_MAX, "max", large, ++seed, true);
  CheckAllreduce<double>(comm, MPI_DOUBLE, "double", MPI_MIN, "min", large / 4, ++seed, false);
  EveryRoot(comm, seed);
  CheckGatherScatter(comm, seed);
}

// Reduce to every root (in place at odd roots), bcast from every root, barrier.
void EveryRoot(MPI_Comm comm, uint64_t seed) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  for (int root = 0; root < size; ++root) {
    const size_t n = 5000;
    std::vector<long> in(n), out(n, 0), ref(n);
    for (size_t i = 0; i < n; ++i) {
      in[i] = Input<long>(rank, i, seed + root, MPI_SUM);
      ref[i] = Input<long>(0, i, seed + root, MPI_SUM);
      for (int r = 1; r < size; ++r) ref[i] = Apply(MPI_SUM, ref[i], Input<long>(r, i, seed + root, MPI_SUM));
    }
    int rc;
    if (rank == root && root % 2 == 1) {
      out = in;
      rc = MPI_Reduce(MPI_IN_PLACE, out.data(), static_cast<int>(n), MPI_LONG, MPI_SUM, root, comm);
    } else {
      rc = MPI_Reduce(in.data(), rank == root ? out.data() : nullptr, static_cast<int>(n), MPI_LONG,
                      MPI_SUM, root, comm);
    }
    ++g_checks;
    if (rc != MPI_SUCCESS || (rank == root && out != ref)) Fail("reduce to root " + std::to_string(root));
    std::vector<double> b(777, rank == root ? 0.5 * root : -1.0);
    rc = MPI_Bcast(b.data(), 777, MPI_DOUBLE, root, comm);
    ++g_checks;
    if (rc != MPI_SUCCESS || b[0] != 0.5 * root || b[776] != 0.5 * root) {
      Fail("bcast from root " + std::to_string(root));
    }
    ++g_checks;
    if (MPI_Barrier(comm) != MPI_SUCCESS) Fail("barrier");
  }
}

// NETFOLD_TEST_RANKS_PER_HOST=N (main: rank r calls itself host h<r/N>,
// as N ranks of one testbed host namespace do): the sweep on
// MPI_COMM_WORLD, the reductions and every root on a communicator that
// keeps hosts whole and on one that cuts them, then what a host's link
// carries per 1 MiB allreduce: V up and V down at its leader (its first
// rank), nothing at its other ranks.
void Hierarchy(int per_host, bool quick) {
  if (!quick) Sweep(MPI_COMM_WORLD, false);
  uint64_t seed = 700;
  MPI_Comm whole_hosts, cut_hosts;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank / per_host % 2, g_rank, &whole_hosts);
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &cut_hosts);  // reversed order too
  for (MPI_Comm c : {whole_hosts, cut_hosts}) {
    AllOps<int32_t>(c, MPI_INT, "int (split)", {1, 3000}, seed);
    AllOps<double>(c, MPI_DOUBLE, "double (split)", {500}, seed);
    EveryRoot(c, ++seed);
  }
  MPI_Comm_free(&cut_hosts);
  MPI_Comm_free(&whole_hosts);
  // The whole netfold_stats_t: the interposer writes all of it.
  using Stats = netfold_stats_t;
  using StatsFn = int (*)(Stats*);
  auto stats = reinterpret_cast<StatsFn>(dlsym(RTLD_DEFAULT, "netfold_mpi_stats"));
  if (stats == nullptr) {
    Fail("netfold_mpi_stats not found: is libnetfold_mpi.so preloaded?");
    return;
  }
  const int n = 1 << 18, ops = 10;  // 1 MiB of fp32
  std::vector<float> v(n, 1.0f);
  MPI_Allreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  Stats before{}, after{};
  stats(&before);
  for (int i = 0; i < ops; ++i) MPI_Allreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  stats(&after);
  const double per_op = static_cast<double>((after.link_tx_bytes + after.link_rx_bytes) -
                                            (before.link_tx_bytes + before.link_rx_bytes)) /
                        ops / (4.0 * n);
  std::vector<double> all(static_cast<size_t>(g_size));
  PMPI_Gather(&per_op, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (g_rank != 0) return;
  for (int r = 0; r < g_size; ++r) {
    ++g_checks;
    const bool leader = r % per_host == 0;
    std::printf("rank %d (%s): %.3f V on its link per 1 MiB allreduce\n", r,
                leader ? "leader" : "not a leader", all[r]);
    if (leader ? (all[r] < 2.0 || all[r] > 2.2) : all[r] > 0.01) {
      Fail("rank " + std::to_string(r) + "'s link carried " + std::to_string(all[r]) +
           " V per operation; a host's link should carry V up and V down, at its leader");
    }
  }
}

void Comms() {
  MPI_Comm dup, half, third;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 3, -g_rank, &third);  // reversed order
  uint64_t seed = 500;
  for (int round = 0; round < 3; ++round) {
    AllOps<int32_t>(dup, MPI_INT, "int (dup)", {100}, seed);
    AllOps<double>(half, MPI_DOUBLE, "double (split even/odd)", {2000}, seed);
    AllOps<int64_t>(third, MPI_INT64_T, "int64 (split mod 3, reversed)", {50}, seed);
    AllOps<float>(MPI_COMM_WORLD, MPI_FLOAT, "float (world)", {10}, seed);
    for (MPI_Comm c : {dup, half, third}) CheckGatherScatterOnce(c, seed);
  }
  MPI_Comm_free(&third);
  MPI_Comm_free(&half);
  // A new communicator may reuse a freed handle: its group must be new too.
  MPI_Comm_split(MPI_COMM_WORLD, g_rank < g_size / 2, g_rank, &half);
  AllOps<int32_t>(half, MPI_INT, "int (split after free)", {300}, seed);
  MPI_Comm_free(&half);
  MPI_Comm_free(&dup);
}

void UserSum(void* in, void* inout, int* len, MPI_Datatype*) {
  int* a = static_cast<int*>(in);
  int* b = static_cast<int*>(inout);
  for (int i = 0; i < *len; ++i) b[i] += a[i];
}

void Fallback() {
  // A user-defined op, a derived datatype and a communicator of one rank:
  // MPI does them; the results must still be right.
  MPI_Op user;
  MPI_Op_create(UserSum, 1, &user);
  std::vector<int> in(100, g_rank + 1), out(100);
  MPI_Allreduce(in.data(), out.data(), 100, MPI_INT, user, MPI_COMM_WORLD);
  ++g_checks;
  if (out[0] != g_size * (g_size + 1) / 2) Fail("user-defined op");
  MPI_Op_free(&user);
  MPI_Datatype pair;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  // A reduction on a type netfold lacks goes to MPI...
  long double ld = g_rank + 1, ld_sum = -1;
  MPI_Allreduce(&ld, &ld_sum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  ++g_checks;
  if (ld_sum != g_size * (g_size + 1) / 2) Fail("long double allreduce");
  // ...a bcast moves bytes, whatever the type: contiguous...
  MPI_Bcast(in.data(), 50, pair, 0, MPI_COMM_WORLD);
  ++g_checks;
  if (in[99] != 1) Fail("derived datatype bcast");
  MPI_Type_free(&pair);
  // ...or not (every other int of 100: packed, broadcast, unpacked).
  MPI_Datatype strided;
  MPI_Type_vector(50, 1, 2, MPI_INT, &strided);
  MPI_Type_commit(&strided);
  std::vector<int> holes(100);
  for (int k = 0; k < 100; ++k) holes[k] = g_rank == 1 % g_size ? k * 3 : -7;
  MPI_Bcast(holes.data(), 1, strided, 1 % g_size, MPI_COMM_WORLD);
  ++g_checks;
  for (int k = 0; k < 100; ++k) {
    const int want = k % 2 == 0 || g_rank == 1 % g_size ? k * 3 : -7;  // holes untouched
    if (holes[k] != want) {
      Fail("strided datatype bcast");
      break;
    }
  }
  CheckNonContiguousAllgather(MPI_COMM_WORLD);
  // A nonblocking bcast of it goes to MPI itself (it would have to unpack
  // at completion).
  for (int k = 0; k < 100; ++k) holes[k] = g_rank == 0 ? k * 5 : -7;
  MPI_Request ibcast;
  MPI_Ibcast(holes.data(), 1, strided, 0, MPI_COMM_WORLD, &ibcast);
  MPI_Wait(&ibcast, MPI_STATUS_IGNORE);
  ++g_checks;
  for (int k = 0; k < 100; ++k) {
    if (holes[k] != (k % 2 == 0 || g_rank == 0 ? k * 5 : -7)) {
      Fail("strided datatype ibcast");
      break;
    }
  }
  MPI_Type_free(&strided);
  int x = g_rank, y = -1;
  MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
  ++g_checks;
  if (y != g_rank) Fail("MPI_COMM_SELF allreduce");
  MPI_Request req;
  MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  ++g_checks;
  if (y != g_size - 1) Fail("nonblocking allreduce (on the fabric)");
}

// For NETFOLD_MPI_VERBOSE: one communicator offloaded, a per-call fallback
// (twice: said once), a communicator too small, and `dups` more
// communicators, the last ones refused a group when `dups` exceeds the
// job's quota. Every result is still checked.
void Verbose(int dups) {
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 2; ++i) {
    long double ld = g_rank + 1, ld_sum = -1;
    MPI_Allreduce(&ld, &ld_sum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ++g_checks;
    if (ld_sum != g_size * (g_size + 1) / 2) Fail("long double allreduce");
  }
  MPI_Comm alone;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank, 0, &alone);
  int x = g_rank + 1, y = -1;
  MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, alone);
  ++g_checks;
  if (y != g_rank + 1) Fail("single-rank allreduce");
  MPI_Comm_free(&alone);
  std::vector<MPI_Comm> comms(static_cast<size_t>(dups));
  for (MPI_Comm& c : comms) {
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c);
    ++g_checks;
    if (y != g_size * (g_size + 1) / 2) Fail("allreduce on a duplicate");
  }
  for (MPI_Comm& c : comms) MPI_Comm_free(&c);
}

void Outage() {
  // Phase 1 on the fabric, then the driver kills the switches; phase 2 must
  // complete anyway (NETFOLD_MPI_ENABLE=try) with the right results.
  uint64_t seed = 900;
  for (int i = 0; i < 20; ++i) AllOps<int32_t>(MPI_COMM_WORLD, MPI_INT, "int", {64}, seed);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("phase 1 done\n");
    std::fflush(stdout);
  }
  WaitForTheDriver();  // it kills the fabric
  // First two nonblocking allreduces, a reduce-scatter and an allgather,
  // outstanding together: the fabric fails them, and they are recovered
  // when they are waited for.
  int x[2] = {g_rank + 1, 2 * g_rank}, y[2] = {-1, -1};
  std::vector<int> scatter_in(static_cast<size_t>(g_size) * 3), gathered(g_size * 3, -1);
  int scattered[3] = {-1, -1, -1}, mine[3] = {g_rank, g_rank + 1, g_rank + 2};
  for (size_t k = 0; k < scatter_in.size(); ++k) scatter_in[k] = g_rank * 1000 + static_cast<int>(k);
  MPI_Request reqs[4];
  for (int k = 0; k < 2; ++k) {
    MPI_Iallreduce(&x[k], &y[k], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[k]);
  }
  MPI_Ireduce_scatter_block(scatter_in.data(), scattered, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                            &reqs[2]);
  MPI_Iallgather(mine, 3, MPI_INT, gathered.data(), 3, MPI_INT, MPI_COMM_WORLD, &reqs[3]);
  MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE);
  ++g_checks;
  bool ok = y[0] == g_size * (g_size + 1) / 2 && y[1] == g_size * (g_size - 1);
  for (int k = 0; k < 3; ++k) {
    ok = ok && scattered[k] == 1000 * g_size * (g_size - 1) / 2 + g_size * (3 * g_rank + k);
    for (int r = 0; r < g_size; ++r) ok = ok && gathered[r * 3 + k] == r + k;
  }
  if (!ok) Fail("nonblocking operations across the outage");
  // A blocking reduce-scatter and allgather after it, on MPI now.
  CheckGatherScatterOnce(MPI_COMM_WORLD, seed);
  for (int i = 0; i < 20; ++i) AllOps<double>(MPI_COMM_WORLD, MPI_DOUBLE, "double", {300}, seed);
}

// Phase 1 of Outage, then one allreduce after the driver killed the
// switches, under the error handler `handler` names.
void Strict(const std::string& handler) {
  uint64_t seed = 900;
  for (int i = 0; i < 5; ++i) AllOps<int32_t>(MPI_COMM_WORLD, MPI_INT, "int", {64}, seed);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("phase 1 done\n");
    std::fflush(stdout);
  }
  WaitForTheDriver();
  if (handler == "return") MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int in = g_rank + 1;
  int out = -1;
  const int rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  ++g_checks;
  if (handler == "fatal") {
    Fail("the failed allreduce returned (rc " + std::to_string(rc) + ") instead of aborting");
  } else if (rc == MPI_SUCCESS) {
    if (out != g_size * (g_size + 1) / 2) Fail("MPI_SUCCESS with a wrong result");
    Fail("the allreduce on a dead fabric returned MPI_SUCCESS under NETFOLD_MPI_ENABLE=1");
  } else {
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    std::printf("rank %d: allreduce returned error class %d\n", g_rank, error_class);
    if (error_class != MPI_ERR_OTHER) Fail("error class " + std::to_string(error_class));
  }
}

}  // namespace


// One collective of a mix, its result checked: allreduce, bcast of ints,
// bcast of MPI_CHAR (OSU's default type), barrier, reduce to a moving root.
void MixedCollective(int i) {
  const int root = i % g_size;
  const int count = (i % 7 == 0) ? 20000 : 1 + i % 64;
  switch (i % 5) {
    case 0: {
      std::vector<int32_t> in(static_cast<size_t>(count)), out(in.size());
      for (int k = 0; k < count; ++k) in[k] = g_rank * 1000 + k + i;
      const int rc = MPI_Allreduce(in.data(), out.data(), count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
      bool ok = rc == MPI_SUCCESS;
      for (int k = 0; k < count && ok; ++k) {
        ok = out[k] == 1000 * (g_size * (g_size - 1) / 2) + g_size * (k + i);
      }
      ++g_checks;
      if (!ok) Fail("pause: allreduce " + std::to_string(i));
      break;
    }
    case 1:
    case 2: {
      const bool chars = i % 5 == 2;
      std::vector<int32_t> ints(static_cast<size_t>(count));
      std::vector<char> bytes(static_cast<size_t>(count));
      for (int k = 0; k < count; ++k) {
        ints[k] = g_rank == root ? k * 31 + i : -1;
        bytes[k] = g_rank == root ? static_cast<char>('a' + (k + i) % 26) : 0;
      }
      const int rc = chars ? MPI_Bcast(bytes.data(), count, MPI_CHAR, root, MPI_COMM_WORLD)
                           : MPI_Bcast(ints.data(), count, MPI_INT, root, MPI_COMM_WORLD);
      bool ok = rc == MPI_SUCCESS;
      for (int k = 0; k < count && ok; ++k) {
        ok = chars ? bytes[k] == static_cast<char>('a' + (k + i) % 26) : ints[k] == k * 31 + i;
      }
      ++g_checks;
      if (!ok) Fail(std::string("pause: bcast of ") + (chars ? "MPI_CHAR " : "MPI_INT ") + std::to_string(i));
      break;
    }
    case 3: {
      ++g_checks;
      if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) Fail("pause: barrier " + std::to_string(i));
      break;
    }
    default: {
      std::vector<int64_t> in(static_cast<size_t>(count)), out(in.size(), -1);
      for (int k = 0; k < count; ++k) in[k] = (g_rank * 7 + k) % (g_size + 3) + i;
      const int rc =
          MPI_Reduce(in.data(), out.data(), count, MPI_INT64_T, MPI_MAX, root, MPI_COMM_WORLD);
      bool ok = rc == MPI_SUCCESS;
      for (int k = 0; k < count && ok && g_rank == root; ++k) {
        int64_t want = in[k];
        for (int r = 0; r < g_size; ++r) want = std::max<int64_t>(want, (r * 7 + k) % (g_size + 3) + i);
        ok = out[k] == want;
      }
      ++g_checks;
      if (!ok) Fail("pause: reduce " + std::to_string(i));
      break;
    }
  }
}

// A job that computes between collectives, as real applications do: the
// fabric must still serve it afterwards (the library acts as the NIC
// meanwhile, docs/host.md).
void Pause(double seconds, int ops, bool busy) {
  for (int i = 0; i < 5; ++i) MixedCollective(i);  // ends with a reduce
  if (g_rank == 0) {
    std::printf("compute phase of %.0f s (%s)\n", seconds, busy ? "busy" : "sleeping");
    std::fflush(stdout);
  }
  const double end = MPI_Wtime() + seconds;
  volatile double x = 1.0;
  while (MPI_Wtime() < end) {
    if (busy) {
      for (int k = 0; k < 100000; ++k) x = x * 1.0000001 + 1e-9;
    } else {
      usleep(100000);
    }
  }
  for (int i = 0; i < ops; ++i) MixedCollective(i);
}

int main(int argc, char** argv) {
  const auto init_start = std::chrono::steady_clock::now();
  const std::string what = argc > 1 ? argv[1] : "sweep";
  // Several ranks per netfold host, as in a testbed host namespace: rank r
  // calls itself host h<r/N> (before MPI_Init, where the fabric is joined),
  // unless it is already a host (the testbed sets NETFOLD_HOST).
  int per_host = 1;
  if (const char* n = std::getenv("NETFOLD_TEST_RANKS_PER_HOST")) {
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    per_host = std::max(1, std::atoi(n));
    if (r != nullptr) setenv("NETFOLD_HOST", ("h" + std::to_string(std::atoi(r) / per_host)).c_str(), 0);
  }
  if (what == "threads" || what == "kept_threads") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) Fail("MPI_THREAD_MULTIPLE not provided");
  } else {
    MPI_Init(&argc, &argv);
  }
  const double init_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - init_start).count();
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_rank == 0) {
    std::printf("MPI_Init took %.3f s\n", init_seconds);
    std::fflush(stdout);
  }
  if (what == "sweep") {
    Sweep(MPI_COMM_WORLD, argc > 2 && std::string(argv[2]) == "big");
    // The fabric ran on this thread: it must hand the vector registers back
    // with their upper halves unused, or the application's legacy-SSE code
    // runs several times slower from here on (base/vector_state.h).
    if (const std::optional<bool> in_use = netfold::UpperVectorStateInUse(); in_use.has_value()) {
      ++g_checks;
      if (*in_use) Fail("the collectives left the vector registers' upper halves in use");
    }
  }
  else if (what == "comms") Comms();
  else if (what == "kept_groups") KeptGroups();
  else if (what == "kept_threads") KeptThreads(argc > 2 ? std::atoi(argv[2]) : 30);
  else if (what == "hierarchy") Hierarchy(per_host, argc > 2 && std::string(argv[2]) == "quick");
  else if (what == "fallback") Fallback();
  else if (what == "outage") Outage();
  else if (what == "outage_inplace" || what == "outage_reduce") {
    OutageInPlace(argc > 2 ? std::atoi(argv[2]) : 1 << 20, argc > 3 ? std::atoi(argv[3]) : 30,
                  what == "outage_reduce");
  }
  else if (what == "root_late") RootLate(argc > 2 ? argv[2] : "blocking_next");
  else if (what == "caller_outside") CallerOutside();
  else if (what == "late_to_free") LateToFree(argc > 2 ? std::atoi(argv[2]) : 3);
  else if (what == "verbose") Verbose(argc > 2 ? std::atoi(argv[2]) : 0);
  else if (what == "threads") {
    Threads(argc > 2 ? std::atoi(argv[2]) : 100);
    int x = g_rank + 1, y = -1;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ++g_checks;
    if (y != g_size * (g_size + 1) / 2) Fail("allreduce under MPI_THREAD_MULTIPLE");
  }
  else if (what == "strict") Strict(argc > 2 ? argv[2] : "fatal");
  else if (what == "nonblocking") Nonblocking(argc > 2 ? std::atoi(argv[2]) : 40);
  else if (what == "pause") {
    Pause(argc > 2 ? std::atof(argv[2]) : 20, argc > 3 ? std::atoi(argv[3]) : 1000,
          argc > 4 && std::string(argv[4]) == "busy");
  }
  else if (what == "new_comms") {
    NewComms(argc > 2 ? std::atof(argv[2]) : 8, argc > 3 ? std::atoi(argv[3]) : 4);
  }
  else if (what == "nb_outage") {
    NonblockingOutage(argc > 2 ? std::atoi(argv[2]) : 5, argc > 3 ? std::atoi(argv[3]) : 20,
                      argc <= 4 || std::string(argv[4]) != "nonblocking_only");
  }
  else if (what == "link_cut") {
    LinkCut(argc > 2 ? std::atoi(argv[2]) : 10, argc > 3 ? std::atof(argv[3]) : 0,
            argc > 4 ? std::atoi(argv[4]) : 0);
  }
  else if (what == "bench") {
    const long count = argc > 2 ? std::atol(argv[2]) : 1;
    const int iters = argc > 3 ? std::atoi(argv[3]) : 100;
    std::vector<float> a(static_cast<size_t>(count), 1.0f), b(static_cast<size_t>(count));
    for (int i = 0; i < 10; ++i) MPI_Allreduce(a.data(), b.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(a.data(), b.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double t = (MPI_Wtime() - t0) / iters;
    if (g_rank == 0) std::printf("bench count %ld: %.3f us\n", count, t * 1e6);
  } else {
    Fail("unknown scenario " + what);
  }
  int failed = 0, mpi_wrong = 0, checks = 0;
  PMPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(&g_mpi_wrong, &mpi_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  PMPI_Allreduce(&g_checks, &checks, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0 && what != "bench") {
    std::printf("mpi_collectives %s: %d checks, %d failed, %d MPI discrepancies\n", what.c_str(),
                checks, failed, mpi_wrong);
  }
  const auto finalize_start = std::chrono::steady_clock::now();
  MPI_Finalize();
  if (g_rank == 0 && what != "bench") {
    std::printf("MPI_Finalize took %.3f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - finalize_start)
                    .count());
  }
  return failed == 0 ? 0 : 1;
}
