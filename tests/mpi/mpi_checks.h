// What the scenarios of tests/mpi/mpi_collectives share: the process's rank
// and counters, inputs whose reduction is exact in any order, the
// reference op, bitwise comparison and failure reporting. Checks of
// allgather and reduce-scatter are mpi_gather_scatter_checks.cc.
#ifndef NETFOLD_TESTS_MPI_MPI_CHECKS_H_
#define NETFOLD_TESTS_MPI_MPI_CHECKS_H_

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace mpi_test {

inline int g_rank = 0, g_size = 1;
inline int g_checks = 0, g_failed = 0, g_mpi_wrong = 0;

struct FloatInt { float v; int i; };
struct DoubleInt { double v; int i; };
struct LongInt { long v; int i; };
struct TwoInt { int v; int i; };
struct ShortInt { short v; int i; };

template <typename T>
constexpr bool kIsPair = std::is_same_v<T, FloatInt> || std::is_same_v<T, DoubleInt> ||
                         std::is_same_v<T, LongInt> || std::is_same_v<T, TwoInt> ||
                         std::is_same_v<T, ShortInt>;

// splitmix64's finalizer: every bit of the result depends on every bit of x.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Inputs whose exact result is the same in any reduction order. A hash of
// (seed, i, rank), not a generator seeded per element: every rank makes
// every rank's inputs for its references, and seeding a Mersenne twister
// per element was 85 % of the MPI tests' CPU.
template <typename T>
T Input(int rank, size_t i, uint64_t seed, MPI_Op op) {
  const uint64_t h = Mix(Mix(Mix(seed) ^ i) ^ static_cast<uint64_t>(rank));
  const int small = static_cast<int>(h % 9) - 4;
  if constexpr (kIsPair<T>) {
    T t{};
    t.v = static_cast<decltype(t.v)>(small);
    t.i = rank;
    return t;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (op == MPI_PROD) return (h >> 40) % 2 ? T(1) : T(-1);
    return static_cast<T>(small);
  } else {
    if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR) return static_cast<T>((h >> 40) % 3);
    return static_cast<T>(h);  // integers wrap: any value is exact
  }
}

template <typename T>
T Apply(MPI_Op op, T a, T b) {
  if constexpr (kIsPair<T>) {
    const bool lt = b.v < a.v, gt = b.v > a.v;
    if (op == MPI_MINLOC) return lt || (b.v == a.v && b.i < a.i) ? b : a;
    return gt || (b.v == a.v && b.i < a.i) ? b : a;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (op == MPI_SUM) return a + b;
    if (op == MPI_PROD) return a * b;
    if (op == MPI_MIN) return b < a ? b : a;
    return b > a ? b : a;
  } else {
    using U = std::make_unsigned_t<T>;
    if (op == MPI_SUM) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if (op == MPI_PROD) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if (op == MPI_MIN) return b < a ? b : a;
    if (op == MPI_MAX) return b > a ? b : a;
    if (op == MPI_BAND) return a & b;
    if (op == MPI_BOR) return a | b;
    if (op == MPI_BXOR) return a ^ b;
    if (op == MPI_LAND) return (a != 0) && (b != 0);
    if (op == MPI_LOR) return (a != 0) || (b != 0);
    return (a != 0) != (b != 0);
  }
}

template <typename T>
bool Same(const T& a, const T& b) {
  if constexpr (kIsPair<T>) return std::memcmp(&a.v, &b.v, sizeof(a.v)) == 0 && a.i == b.i;
  else return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The predefined ops MPI defines on T, with their names.
struct NamedOp {
  MPI_Op op;
  const char* name;
};
template <typename T>
std::vector<NamedOp> OpsFor() {
  if constexpr (kIsPair<T>) {
    return {{MPI_MINLOC, "minloc"}, {MPI_MAXLOC, "maxloc"}};
  } else if constexpr (std::is_floating_point_v<T>) {
    return {{MPI_SUM, "sum"}, {MPI_PROD, "prod"}, {MPI_MIN, "min"}, {MPI_MAX, "max"}};
  } else {
    return {{MPI_SUM, "sum"}, {MPI_PROD, "prod"}, {MPI_MIN, "min"}, {MPI_MAX, "max"},
            {MPI_BAND, "band"}, {MPI_BOR, "bor"}, {MPI_BXOR, "bxor"}, {MPI_LAND, "land"},
            {MPI_LOR, "lor"}, {MPI_LXOR, "lxor"}};
  }
}

inline void Fail(const std::string& what) {
  ++g_failed;
  if (g_failed <= 20) std::fprintf(stderr, "rank %d: FAIL %s\n", g_rank, what.c_str());
}

// Allgather and reduce-scatter of every datatype x op (reduce-scatter)
// and of bytes (allgather): blocks, variable blocks, in place.
void CheckGatherScatter(MPI_Comm comm, uint64_t& seed);
// One reduce-scatter (variable blocks) and one allgather, checked.
void CheckGatherScatterOnce(MPI_Comm comm, uint64_t& seed);
// Strided allgather, which goes to MPI itself.
void CheckNonContiguousAllgather(MPI_Comm comm);
// The outage scenarios (mpi_outage_scenarios.cc).
// Waits (at most 30 s) for the driver's fault: NETFOLD_TEST_OUTAGE_FILE
// exists.
void WaitForTheDriver();
// In-place allreduces (or reduces) back to back, the switches killed in
// the middle of them; every element checked.
void OutageInPlace(int count, int ops, bool reduces);
// The root of a reduce behind the ranks that returned from it when the
// switches die; `next`: what the ranks ahead do next ("blocking_next",
// "nonblocking_next", "free_next", "cross_next", "recv_next").
void RootLate(const std::string& next);
// Four ranks: a reduce on {0, 1, 2} whose root (rank 0) is late as in
// RootLate (rank 2's an MPI_Ireduce it waits for only at the end), while
// ranks 1 and 2 go on to an allreduce on {1, 2, 3}, which the dead
// switches fail too, without the caller in it (so its recovery goes on
// past its first exchange while rank 1 is away in the reduce's).
void CallerOutside();
// One allreduce on a duplicate of the world, then rank 0 sleeps `seconds`
// before it frees it, which the others wait for in MPI_Comm_free.
void LateToFree(int seconds);
// Allreduces, then a sleep of `seconds` (the driver stops the fabric on
// "compute phase"), then `rounds` new communicators, each used once:
// rank 0 prints how long the slowest took.
void NewComms(double seconds, int rounds);
// Nonblocking allreduces of 1000 ints on the world, each waited for and
// checked; after 3, "phase 1 done" and a wait for the driver's outage,
// then `before` more, one blocking allreduce (if `blocking`), and `after`
// more.
void NonblockingOutage(int before, int after, bool blocking);
// World and three duplicates, an allreduce on each per round; after round
// 3, "phase 1 done" and a wait for the driver's cut (NETFOLD_TEST_OUTAGE_FILE),
// then `rounds` more: rank 0 prints the slowest round after the cut. With
// `new_comm_after` > 0, a new communicator that many seconds after the cut
// (the driver heals it meanwhile), used once, then `world_after` more
// allreduces on the world.
void LinkCut(int rounds, double new_comm_after, int world_after);
// Four ranks, NETFOLD_MPI_MIN_COMM_SIZE=2, NETFOLD_MAX_GROUPS=3
// (mpi_kept_groups.cc): duplicates of the world freed and made again, then
// pairs that run the job out of groups, each allreduce checked.
void KeptGroups();
void KeptThreads(int rounds);

}  // namespace mpi_test

#endif  // NETFOLD_TESTS_MPI_MPI_CHECKS_H_
