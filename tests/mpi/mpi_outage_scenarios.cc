// mpi_collectives' outage scenarios: the driver breaks the fabric (NETFOLD_TEST_OUTAGE_FILE)
// and every result is checked.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/mpi/mpi_checks.h"

namespace mpi_test {

void WaitForTheDriver() {
  const char* flag = std::getenv("NETFOLD_TEST_OUTAGE_FILE");
  for (int i = 0; flag != nullptr && i < 600 && access(flag, F_OK) != 0; ++i) usleep(50000);
}

// In-place allreduces of `count` ints, back to back, OPS of them (with
// `reduces`, reduces to a moving root instead); the driver kills the
// switches once phase 1 (three of them) is done, so the fabric fails one in
// the middle: the failover completes an allreduce from the chunks the
// fabric wrote and the inputs it had not touched (it keeps no copy of an
// in-place input), a reduce from the end of their inputs the ranks that
// returned kept. Every element of every result is checked.
void OutageInPlace(int count, int ops, bool reduces) {
  std::vector<int32_t> v(static_cast<size_t>(count)), out;
  const int32_t ranks_sum = g_size * (g_size + 1) / 2;
  for (int op = 0; op < ops; ++op) {
    const int root = op % g_size;
    for (size_t i = 0; i < v.size(); ++i) v[i] = (g_rank + 1) * (op + 1) + static_cast<int32_t>(i % 977);
    if (reduces) {
      out.assign(v.size(), -1);
      MPI_Reduce(v.data(), out.data(), count, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
      v.swap(out);
    } else {
      MPI_Allreduce(MPI_IN_PLACE, v.data(), count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    ++g_checks;
    for (size_t i = 0; i < v.size() && (!reduces || g_rank == root); ++i) {
      if (v[i] != ranks_sum * (op + 1) + g_size * static_cast<int32_t>(i % 977)) {
        Fail("operation " + std::to_string(op) + " element " + std::to_string(i));
        break;
      }
    }
    if (op == 2 && g_rank == 0) {
      std::printf("phase 1 done\n");
      std::fflush(stdout);
    }
  }
}

// A reduce whose root is behind the ranks that returned from it: the ranks
// other than rank 0 finish a reduce to rank 0 of fewer chunks than the
// window (their input has left; the root has not started), tell rank 0 so
// by point-to-point messages (which the interposer leaves to MPI), and go
// on to the next reduce. Rank 0 prints "phase 1 done", waits until the
// driver killed the switches (NETFOLD_TEST_OUTAGE_FILE), then starts the
// reduce: it is behind the others, in it, and gets it reduced again from
// what they kept. The operations after it are recovered or run on MPI,
// and finalize finds the ranks in step. What comes next at the ranks ahead,
// where they meet the failure while rank 0 is still in the reduce: a
// reduce ("blocking_next"), an MPI_Iallreduce ("nonblocking_next"),
// ("free_next") MPI_Comm_free of the duplicate of the world the late reduce
// runs on, ("cross_next") an allreduce on the world, which waits for rank 0
// while rank 0 waits for them in the duplicate's recovery (they answer its
// call to it from the world's), or ("recv_next") a message from rank 0,
// which it sends after the reduce: a wait the interposer does not see, so
// the job cannot end.
void RootLate(const std::string& next) {
  const int count = 2048;  // 8 KiB: 3 chunks of 4032 bytes
  std::vector<int32_t> in(count), out(count);
  auto check = [&](int op, int root) {
    ++g_checks;
    if (g_rank != root) return;
    for (int i = 0; i < count; ++i) {
      if (out[i] != g_size * (g_size + 1) / 2 * (op + 1) + g_size * i) {
        Fail("reduce " + std::to_string(op) + " element " + std::to_string(i));
        return;
      }
    }
  };
  auto reduce = [&](int op, int root, MPI_Comm comm = MPI_COMM_WORLD) {
    for (int i = 0; i < count; ++i) in[i] = (g_rank + 1) * (op + 1) + i;
    out.assign(count, -1);
    MPI_Reduce(in.data(), out.data(), count, MPI_INT, MPI_SUM, root, comm);
    check(op, root);
  };
  MPI_Comm late = MPI_COMM_WORLD;
  if (next == "free_next" || next == "cross_next" || next == "recv_next") {
    MPI_Comm_dup(MPI_COMM_WORLD, &late);
    MPI_Barrier(late);  // on the fabric, which gives it a group
  }
  for (int op = 0; op < 3; ++op) reduce(op, op % g_size);
  MPI_Barrier(MPI_COMM_WORLD);  // every earlier operation is complete everywhere
  int token = 0;
  if (g_rank != 0) {
    reduce(3, 0, late);  // returns once the input has left
    MPI_Send(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
  } else {
    for (int r = 1; r < g_size; ++r) {
      MPI_Recv(&token, 1, MPI_INT, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    std::printf("phase 1 done\n");
    std::fflush(stdout);
    WaitForTheDriver();
    reduce(3, 0, late);
  }
  if (next == "cross_next") {
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ++g_checks;
    if (sum != g_size) Fail("allreduce after the late reduce");
  }
  if (next == "recv_next") {
    if (g_rank == 0) {
      for (int r = 1; r < g_size; ++r) MPI_Send(&token, 1, MPI_INT, r, 8, MPI_COMM_WORLD);
    } else {
      MPI_Recv(&token, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
  if (late != MPI_COMM_WORLD) MPI_Comm_free(&late);
  // Nonblocking operations: every rank must run them the same way, though
  // the ranks that were ahead met the failure in the operation after reduce
  // 3 and rank 0 in reduce 3 itself.
  auto iallreduces = [&] {
    for (int op = 100; op < 103; ++op) {
      int32_t x = g_rank + op, sum = -1;
      MPI_Request q;
      MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
      MPI_Wait(&q, MPI_STATUS_IGNORE);
      ++g_checks;
      if (sum != g_size * (g_size - 1) / 2 + g_size * op) Fail("iallreduce " + std::to_string(op));
    }
  };
  if (next == "nonblocking_next") iallreduces();
  reduce(4, 0);
  if (next != "nonblocking_next") iallreduces();
  for (int op = 5; op < 8; ++op) reduce(op, op % g_size);
}

void CallerOutside() {
  if (g_size != 4) {
    Fail("caller_outside needs 4 ranks");
    return;
  }
  MPI_Comm low, high;  // {0, 1, 2} and {1, 2, 3}
  MPI_Comm_split(MPI_COMM_WORLD, g_rank < 3 ? 0 : MPI_UNDEFINED, g_rank, &low);
  MPI_Comm_split(MPI_COMM_WORLD, g_rank > 0 ? 0 : MPI_UNDEFINED, g_rank, &high);
  for (MPI_Comm c : {low, high}) {
    if (c != MPI_COMM_NULL) MPI_Barrier(c);  // on the fabric: each gets a group
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int count = 2048;
  std::vector<int32_t> in(count), out(count, -1);
  for (int i = 0; i < count; ++i) in[i] = (g_rank + 1) + i;
  int token = 0;
  MPI_Request pending = MPI_REQUEST_NULL;
  if (g_rank == 1) {
    MPI_Reduce(in.data(), out.data(), count, MPI_INT, MPI_SUM, 0, low);  // returns at once
    MPI_Send(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
  } else if (g_rank == 2) {
    // Waited for only after the allreduce: outstanding while it fails.
    MPI_Ireduce(in.data(), out.data(), count, MPI_INT, MPI_SUM, 0, low, &pending);
    MPI_Send(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
  } else if (g_rank == 0) {
    for (int r = 1; r < 3; ++r) {
      MPI_Recv(&token, 1, MPI_INT, r, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    std::printf("phase 1 done\n");
    std::fflush(stdout);
    WaitForTheDriver();
    MPI_Reduce(in.data(), out.data(), count, MPI_INT, MPI_SUM, 0, low);
    ++g_checks;
    for (int i = 0; i < count; ++i) {
      if (out[i] != 6 + 3 * i) {
        Fail("reduce element " + std::to_string(i));
        break;
      }
    }
  }
  if (high != MPI_COMM_NULL) {
    // Rank 3 comes a second after the switches died: ranks 1 and 2 take
    // rank 0's call in the allreduce's first exchange, before it completes.
    if (g_rank == 3) {
      WaitForTheDriver();
      sleep(1);
    }
    int x = g_rank, sum = -1;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, high);
    ++g_checks;
    if (sum != 6) Fail("allreduce on {1, 2, 3}");
  }
  MPI_Wait(&pending, MPI_STATUS_IGNORE);
  for (MPI_Comm* c : {&low, &high}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

void LateToFree(int seconds) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup);
  ++g_checks;
  if (sum != g_size) Fail("allreduce");
  if (g_rank == 0) sleep(static_cast<unsigned>(seconds));
  MPI_Comm_free(&dup);
}

namespace {

// An allreduce of one int on `comm`, checked.
void CheckedAllreduce(MPI_Comm comm, int salt) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int x = g_rank + salt, sum = -1;
  MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm);
  ++g_checks;
  // Every communicator here holds every rank of the world.
  if (sum != g_size * (g_size - 1) / 2 + g_size * salt || size != g_size) {
    Fail("allreduce of " + std::to_string(salt));
  }
}

}  // namespace

void NonblockingOutage(int before, int after, bool blocking) {
  const int n = 1000;
  std::vector<int32_t> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  auto checked = [&](int salt) {
    for (int k = 0; k < n; ++k) in[static_cast<size_t>(k)] = g_rank + k + salt;
    MPI_Request q;
    MPI_Iallreduce(in.data(), out.data(), n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    ++g_checks;
    for (int k = 0; k < n; ++k) {
      if (out[static_cast<size_t>(k)] != g_size * (k + salt) + g_size * (g_size - 1) / 2) {
        Fail("iallreduce " + std::to_string(salt));
        break;
      }
    }
  };
  for (int i = 0; i < 3; ++i) checked(i);
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("phase 1 done\n");
    std::fflush(stdout);
  }
  WaitForTheDriver();
  for (int i = 0; i < before; ++i) checked(100 + i);
  if (blocking) CheckedAllreduce(MPI_COMM_WORLD, 5);
  for (int i = 0; i < after; ++i) checked(200 + i);
}

void NewComms(double seconds, int rounds) {
  for (int i = 0; i < 5; ++i) CheckedAllreduce(MPI_COMM_WORLD, i);
  if (g_rank == 0) {
    std::printf("compute phase of %.0f s (sleeping)\n", seconds);
    std::fflush(stdout);
  }
  const double end = MPI_Wtime() + seconds;
  while (MPI_Wtime() < end) usleep(100000);
  double slowest = 0;
  for (int round = 0; round < rounds; ++round) {
    const double t0 = MPI_Wtime();
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CheckedAllreduce(dup, round);
    MPI_Comm_free(&dup);
    slowest = std::max(slowest, MPI_Wtime() - t0);
  }
  for (int i = 0; i < 5; ++i) CheckedAllreduce(MPI_COMM_WORLD, i);
  if (g_rank == 0) std::printf("slowest new communicator took %.3f s\n", slowest);
}

void LinkCut(int rounds, double new_comm_after, int world_after) {
  MPI_Comm comms[4] = {MPI_COMM_WORLD};
  for (int k = 1; k < 4; ++k) MPI_Comm_dup(MPI_COMM_WORLD, &comms[k]);
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 4; ++k) CheckedAllreduce(comms[k], k);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("phase 1 done\n");
    std::fflush(stdout);
  }
  WaitForTheDriver();
  const double cut = MPI_Wtime();
  double slowest = 0;
  for (int round = 0; round < rounds; ++round) {
    const double t0 = MPI_Wtime();
    for (int k = 0; k < 4; ++k) CheckedAllreduce(comms[k], k + round);
    slowest = std::max(slowest, MPI_Wtime() - t0);
    usleep(100000);
  }
  for (int k = 1; k < 4; ++k) MPI_Comm_free(&comms[k]);
  if (g_rank == 0) std::printf("slowest round after the cut took %.3f s\n", slowest);
  if (new_comm_after <= 0) return;
  // Once the driver healed the cut: a new communicator, used once.
  while (MPI_Wtime() < cut + new_comm_after) usleep(100000);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  CheckedAllreduce(dup, 7);
  MPI_Comm_free(&dup);
  for (int i = 0; i < world_after; ++i) CheckedAllreduce(MPI_COMM_WORLD, 8 + i);
}

}  // namespace mpi_test
