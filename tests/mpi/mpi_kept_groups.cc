// mpi_collectives kept_groups: the fabric groups of freed communicators are
// kept and given to the next communicator of the same ranks (docs/host.md,
// "Kept groups"), and dropped to make room when the job has no group left.
// mpi_collectives kept_threads ROUNDS: the same, two threads at once.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
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

// An attribute of the world's whose callbacks count their calls: MPI
// copies it to every duplicate of the world the application makes and
// deletes it with each; the interposer's private communicators must not
// carry it (their callbacks would run when a kept group is dropped).
int g_copies = 0, g_deletes = 0;

int CountCopy(MPI_Comm, int, void*, void* in, void* out, int* flag) {
  ++g_copies;
  *static_cast<void**>(out) = in;
  *flag = 1;
  return MPI_SUCCESS;
}

int CountDelete(MPI_Comm, int, void*, void*) {
  ++g_deletes;
  return MPI_SUCCESS;
}

}  // namespace

void KeptGroups() {
  if (g_size != 4) {
    Fail("kept_groups runs on 4 ranks");
    return;
  }
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(CountCopy, CountDelete, &keyval, nullptr);
  MPI_Comm_set_attr(MPI_COMM_WORLD, keyval, &g_copies);
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
  // Three duplicates of the world, each freed: the attribute's callbacks
  // ran for them alone.
  MPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
  MPI_Comm_free_keyval(&keyval);
  ++g_checks;
  if (g_copies != 3 || g_deletes != 4) {
    Fail("the world's attribute was copied " + std::to_string(g_copies) + " times and deleted " +
         std::to_string(g_deletes) + " (3 and 4 expected: the application's duplicates alone)");
  }
}

void KeptThreads(int rounds) {
  // Each thread duplicates a parent of its own, so the two threads' groups
  // have the same ranks: both threads keep groups of the world's ranks and
  // offer them at once. In every other round, a thread whose number and
  // rank differ in parity waits until the other has started its first
  // collective (where it offers), and 5 ms more: on even and odd ranks the
  // two threads offer the kept groups in opposite orders, and the members'
  // offers differ (or, on a loaded machine, may not).
  MPI_Comm parents[2];
  for (MPI_Comm& p : parents) MPI_Comm_dup(MPI_COMM_WORLD, &p);
  std::atomic<int> checks{0}, wrong{0};
  std::atomic<int> started[2] = {0, 0};  // rounds whose collective each thread began
  auto work = [&](int t) {
    for (int i = 0; i < rounds; ++i) {
      MPI_Comm comm;
      MPI_Comm_dup(parents[t], &comm);
      if ((g_rank + t) % 2 == 1 && i % 2 == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (started[1 - t].load() <= i && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      started[t].store(i + 1);
      const int n = 1 + (i * 389 + t * 1201) % 2000;
      std::vector<int> x(static_cast<size_t>(n)), y(x.size(), -1);
      for (int k = 0; k < n; ++k) x[static_cast<size_t>(k)] = g_rank + i + k + t;
      MPI_Allreduce(x.data(), y.data(), n, MPI_INT, MPI_SUM, comm);
      ++checks;
      for (int k = 0; k < n; ++k) {
        if (y[static_cast<size_t>(k)] != g_size * (i + k + t) + g_size * (g_size - 1) / 2) {
          ++wrong;
          break;
        }
      }
      MPI_Comm_free(&comm);
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  g_checks += checks.load();
  if (wrong.load() > 0) Fail(std::to_string(wrong.load()) + " wrong results");
  for (MPI_Comm& p : parents) MPI_Comm_free(&p);
  // Then six communicators of the world's ranks at once: the job out of
  // groups drops its kept ones to make room, and a member unable to join
  // one of them (still joined to an address the manager gave again, as
  // when it gave the lowest free one) would show as a fallback.
  MPI_Comm many[6];
  for (int i = 0; i < 6; ++i) {
    MPI_Comm_dup(MPI_COMM_WORLD, &many[i]);
    CheckedSum(many[i], "communicator " + std::to_string(i) + " of six");
  }
  for (MPI_Comm& c : many) MPI_Comm_free(&c);
}

}  // namespace mpi_test
