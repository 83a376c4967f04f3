// libnetfold_mpi's NETFOLD_MPI_STATS=1 (docs/mpi.md, "Knobs"): what the
// job's collectives did, summed over the ranks at MPI_Finalize and
// printed by rank 0.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <utility>

#include "host/mpi/interposer_state.h"
#include "netfold/netfold.h"

namespace netfold::mpi {

void PrintStats() {
  Global& g = G();
  constexpr int kKinds = static_cast<int>(kNumKinds);
  constexpr int kReasons = static_cast<int>(kNumReasons);
  // The counts after the offloaded, fallback and hierarchical ones.
  enum Extra {
    kHostOps,
    kRecovered,
    kReducedAgain,
    kJoined,
    kTries,
    kReturned,
    kRequested,
    kReused,
    kKept,
    kDuplicates,
    kExtras
  };
  constexpr int kFirstExtra = 2 * kKinds + kReasons;
  constexpr int kAll = kFirstExtra + kExtras;
  uint64_t local[kAll], total[kAll];
  for (int k = 0; k < kKinds; ++k) local[k] = g.offloaded[k].load();
  for (int r = 0; r < kReasons; ++r) local[kKinds + r] = g.fallbacks[r].load();
  for (int k = 0; k < kKinds; ++k) local[kKinds + kReasons + k] = g.hierarchical[k].load();
  // Calls counted as offloaded that libnetfold ran on its host algorithms
  // (NETFOLD_ALGORITHM=auto and the like; failovers).
  netfold_stats_t lib{};
  local[kFirstExtra + kHostOps] =
      g.ctx != nullptr && netfold_get_stats(g.ctx, &lib) == NETFOLD_SUCCESS ? lib.host_ops : 0;
  local[kFirstExtra + kRecovered] = g.recovered_bytes.load();
  local[kFirstExtra + kReducedAgain] = g.reduced_again_bytes.load();
  local[kFirstExtra + kJoined] = g.recoveries_joined.load();
  local[kFirstExtra + kTries] = g.tries.load();
  local[kFirstExtra + kReturned] = g.returned.load();
  local[kFirstExtra + kDuplicates] = g.duplicates.load();
  // Groups: made by the manager, kept ones given again (docs/host.md,
  // "Kept groups"), kept now; one per member.
  const std::pair<Extra, const char*> kGroups[] = {
      {kRequested, "groups_requested"}, {kReused, "groups_reused"}, {kKept, "groups_kept"}};
  for (const auto& [e, name] : kGroups) {
    uint64_t v = 0;
    local[kFirstExtra + e] =
        g.ctx != nullptr && netfold_get_counter(g.ctx, name, &v) == NETFOLD_SUCCESS ? v : 0;
  }
  PMPI_Reduce(local, total, kAll, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (g.world_rank != 0) return;
  auto extra = [&](Extra e) { return static_cast<unsigned long long>(total[kFirstExtra + e]); };
  std::fprintf(stderr, "netfold-mpi: collectives summed over all ranks:\n");
  for (int k = 1; k < kNumKinds; ++k) {
    std::fprintf(stderr, "  offloaded %-10s %llu\n", kKindNames[k],
                 static_cast<unsigned long long>(total[k]));
  }
  if (extra(kHostOps) > 0) {
    std::fprintf(stderr, "  of these, on libnetfold's host algorithms %llu\n", extra(kHostOps));
  }
  for (int k = 1; k < kNumKinds; ++k) {
    if (total[kKinds + kReasons + k] > 0) {
      std::fprintf(stderr, "  node hierarchy %-10s %llu (the leaders' share is offloaded)\n",
                   kKindNames[k], static_cast<unsigned long long>(total[kKinds + kReasons + k]));
    }
  }
  for (int r = 0; r < kNumReasons; ++r) {
    if (total[kKinds + r] > 0) {
      std::fprintf(stderr, "  fallback: %-35s %llu\n", kReasonNames[r],
                   static_cast<unsigned long long>(total[kKinds + r]));
    }
  }
  if (extra(kRecovered) + extra(kReducedAgain) > 0) {
    std::fprintf(stderr,
                 "  failover: bytes the fabric had delivered %llu, reduced again on MPI %llu\n",
                 extra(kRecovered), extra(kReducedAgain));
  }
  if (extra(kJoined) > 0) {
    std::fprintf(stderr, "  failover: recoveries joined while waiting in another %llu\n",
                 extra(kJoined));
  }
  if (extra(kRequested) + extra(kReused) > 0) {
    std::fprintf(stderr,
                 "  groups (one per member): made by the manager %llu, kept ones given again "
                 "%llu, kept now %llu; private duplicates of communicators made %llu\n",
                 extra(kRequested), extra(kReused), extra(kKept), extra(kDuplicates));
  }
  if (extra(kTries) > 0) {
    std::fprintf(stderr, "  failover: tries of the fabric again %llu, back on it %llu\n",
                 extra(kTries), extra(kReturned));
  }
}

}  // namespace netfold::mpi
