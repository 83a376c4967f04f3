// libnetfold_mpi's node-level hierarchy (mpi_hierarchy.h, docs/mpi.md).
#include "host/mpi/mpi_hierarchy.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_format.h"
#include "host/mpi/mpi_datatypes.h"
#include "netfold/netfold.h"

namespace netfold::mpi {
namespace {

constexpr int kNameBytes = 64;
constexpr int kToLeaderTag = 7301;  // on the node communicator, which only we use

// The splits, by communicator. Its own lock: taken inside collectives on
// one communicator, never around an MPI call.
struct Splits {
  std::mutex mu;
  std::unordered_map<uintptr_t, std::unique_ptr<NodeSplit>> by_comm;
};
Splits& TheSplits() {
  static Splits* s = new Splits();
  return *s;
}

// The name libnetfold gives this rank's host (host/options.cc).
std::string HostName() {
  if (const char* v = std::getenv("NETFOLD_HOST"); v != nullptr && v[0] != '\0') return v;
  return absl::StrFormat("h%d", G().world_rank);
}

// Splits `comm` by host (collective over `comm`).
std::unique_ptr<NodeSplit> Split(MPI_Comm comm) {
  auto h = std::make_unique<NodeSplit>();
  int rank = 0, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  char mine[kNameBytes] = {};
  const std::string name = HostName();
  std::memcpy(mine, name.data(), std::min<size_t>(name.size(), kNameBytes - 1));
  std::vector<char> all(static_cast<size_t>(size) * kNameBytes);
  if (PMPI_Allgather(mine, kNameBytes, MPI_CHAR, all.data(), kNameBytes, MPI_CHAR, comm) !=
      MPI_SUCCESS) {
    return h;  // flat
  }
  // A host's color is its lowest rank, which leads it.
  std::vector<int> color(static_cast<size_t>(size));
  bool shared = false;
  for (int r = 0; r < size; ++r) {
    color[r] = r;
    for (int q = 0; q < r; ++q) {
      if (std::strncmp(&all[q * kNameBytes], &all[r * kNameBytes], kNameBytes) == 0) {
        color[r] = q;
        shared = true;
        break;
      }
    }
  }
  if (!shared) return h;
  h->applies = true;
  h->leader_of.resize(static_cast<size_t>(size));
  h->node_rank_of.resize(static_cast<size_t>(size));
  int hosts = 0;
  for (int r = 0; r < size; ++r) {
    // Leaders are ordered by rank in `leaders`: count the leaders below.
    int leaders_below = 0, node_below = 0;
    for (int q = 0; q < r; ++q) {
      if (color[q] == q && q < color[r]) ++leaders_below;
      if (color[q] == color[r]) ++node_below;
    }
    h->leader_of[r] = color[r] == r ? leaders_below : h->leader_of[color[r]];
    h->node_rank_of[r] = node_below;
    if (color[r] == r) ++hosts;
  }
  h->host_sizes.assign(static_cast<size_t>(hosts), 0);
  for (int r = 0; r < size; ++r) ++h->host_sizes[h->leader_of[r]];
  std::vector<int> host_start(static_cast<size_t>(hosts), 0);
  for (int l = 1; l < hosts; ++l) host_start[l] = host_start[l - 1] + h->host_sizes[l - 1];
  h->host_position.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    h->host_position[r] = host_start[h->leader_of[r]] + h->node_rank_of[r];
    if (color[r] == color[rank]) h->my_host_ranks.push_back(r);
  }
  PMPI_Comm_split(comm, color[rank], rank, &h->node);
  PMPI_Comm_split(comm, color[rank] == rank ? 0 : MPI_UNDEFINED, rank, &h->leaders);
  if (h->leaders != MPI_COMM_NULL) {
    char comm_name[MPI_MAX_OBJECT_NAME] = {};
    int len = 0;
    PMPI_Comm_get_name(comm, comm_name, &len);
    const std::string leaders_name = absl::StrFormat(
        "netfold host leaders of %s", len > 0 ? std::string(comm_name, len) : "a communicator");
    PMPI_Comm_set_name(h->leaders, leaders_name.c_str());
  }
  return h;
}

// Whether the fabric could take this collective at all (the checks of
// Usable that depend on the call, not on the communicator's state): a
// collective it cannot take goes to MPI on `comm` as it is, in MPI's order.
bool Eligible(Kind kind, MPI_Datatype type, MPI_Op op, int count) {
  if (kind == kBarrier) return true;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  if (static_cast<int64_t>(extent) * count > INT32_MAX) return false;
  if (kind == kBcast || kind == kAllgather) return true;  // bytes: any type
  auto dtype = NetfoldDatatype(type);
  auto nop = NetfoldOp(op);
  return dtype && nop && AllowedOnSpecialType(type, op) && netfold_op_supported(*dtype, *nop);
}

// The host's reduction at its leader (node rank 0), into `out` there:
// every rank's input gathered (bytes) and folded in node-rank order by
// libnetfold's ALU, the arithmetic of the switches. Not MPI's own op: its
// result would depend on MPI's algorithm, and Open MPI's vectorised sums of
// 8- and 16-bit integers are wrong (docs/mpi.md, "MPI's own bugs").
int NodeReduce(const void* input, void* out, int count, MPI_Datatype type, MPI_Op op,
               const NodeSplit& h) {
  const size_t bytes = Bytes(type, count);
  int n = 1, me = 0;
  PMPI_Comm_size(h.node, &n);
  PMPI_Comm_rank(h.node, &me);
  if (n == 1) {
    if (input != out && bytes > 0) std::memcpy(out, input, bytes);
    return MPI_SUCCESS;
  }
  std::vector<uint8_t> gathered(me == 0 ? bytes * static_cast<size_t>(n) : 0);
  int rc = PMPI_Gather(input, static_cast<int>(bytes), MPI_BYTE, gathered.data(),
                       static_cast<int>(bytes), MPI_BYTE, 0, h.node);
  if (rc != MPI_SUCCESS || me != 0) return rc;
  std::vector<const void*> inputs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) inputs[r] = gathered.data() + bytes * static_cast<size_t>(r);
  rc = netfold_reduce_local(inputs.data(), n, out, static_cast<size_t>(count),
                            *NetfoldDatatype(type), *NetfoldOp(op));
  return rc == NETFOLD_SUCCESS ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// The leader's outcome to its host's other ranks, then (if it succeeded)
// `share`, which moves the result on the node. A rank that is not a leader
// reports a failure through `comm`'s error handler, as the leader did
// through the leaders' (which it inherited from `comm`).
template <typename Share>
int Outcome(MPI_Comm comm, const NodeSplit& h, int rc, Share share) {
  const int bcast = PMPI_Bcast(&rc, 1, MPI_INT, 0, h.node);
  if (bcast != MPI_SUCCESS) return bcast;
  if (rc != MPI_SUCCESS) {
    if (h.leaders == MPI_COMM_NULL) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
  }
  return share();
}

}  // namespace

const NodeSplit* HierarchyFor(MPI_Comm comm, Kind kind, MPI_Datatype type, MPI_Op op,
                              int count) {
  Global& g = G();
  if (!g.initialized || !g.fabric || g.config.hierarchy == Hierarchy::kFlat) return nullptr;
  // A communicator already split (most calls; flat ones on a local fabric)
  // costs one lookup here; the checks below run for the others.
  Splits& splits = TheSplits();
  const NodeSplit* known = nullptr;
  {
    std::lock_guard<std::mutex> lock(splits.mu);
    auto it = splits.by_comm.find(Key(comm));
    if (it != splits.by_comm.end()) {
      if (!it->second->applies) return nullptr;
      known = it->second.get();
    }
  }
  if (count < 0 || !Eligible(kind, type, op, count)) return nullptr;
  if (known != nullptr) {
    FinishFlatOperations(comm);  // a blocking collective the flat state does not see
    return known;
  }
  int inter = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  PMPI_Comm_size(comm, &size);
  if (inter || size < g.config.min_comm_size) return nullptr;
  std::unique_ptr<NodeSplit> made = Split(comm);
  const NodeSplit* h = made.get();
  {
    std::lock_guard<std::mutex> lock(splits.mu);
    splits.by_comm[Key(comm)] = std::move(made);
  }
  if (!h->applies) return nullptr;
  FinishFlatOperations(comm);
  Tell(comm, kHierarchyBit, kind, [&] {
    int size_of = 0;
    PMPI_Comm_size(comm, &size_of);
    return absl::StrFormat("%d ranks on %d hosts: each host's ranks combine at one leader, "
                           "which uses the fabric",
                           size_of, h->host_sizes.size());
  });
  return h;
}

std::unique_ptr<NodeSplit> TakeSplit(MPI_Comm comm) {
  Splits& splits = TheSplits();
  std::lock_guard<std::mutex> lock(splits.mu);
  auto it = splits.by_comm.find(Key(comm));
  if (it == splits.by_comm.end()) return nullptr;
  std::unique_ptr<NodeSplit> h = std::move(it->second);
  splits.by_comm.erase(it);
  return h;
}

void ForgetSplits() {
  Splits& splits = TheSplits();
  std::lock_guard<std::mutex> lock(splits.mu);
  splits.by_comm.clear();
}

int HierAllreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm, const NodeSplit& h) {
  ++G().hierarchical[kAllreduce];
  const bool leader = h.leaders != MPI_COMM_NULL;
  // The host's reduction at its leader, in the leader's receive buffer.
  int rc = NodeReduce(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, leader ? recvbuf : nullptr,
                      count, type, op, h);
  if (rc != MPI_SUCCESS) return rc;
  if (leader) rc = MPI_Allreduce(MPI_IN_PLACE, recvbuf, count, type, op, h.leaders);
  return Outcome(comm, h, rc, [&] { return PMPI_Bcast(recvbuf, count, type, 0, h.node); });
}

int HierReduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm, const NodeSplit& h) {
  ++G().hierarchical[kReduce];
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  const bool leader = h.leaders != MPI_COMM_NULL;
  const bool root_here = h.leader_of[rank] == h.leader_of[root];
  const bool root_leads = h.node_rank_of[root] == 0;
  const void* input = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  // The host's reduction at its leader: in the root's buffer if the root
  // leads, else in a buffer of the leader's own.
  std::vector<uint8_t> scratch;
  void* at_leader = recvbuf;
  if (leader && rank != root) {
    scratch.resize(Bytes(type, count));
    at_leader = scratch.data();
  }
  int rc = NodeReduce(input, leader ? at_leader : nullptr, count, type, op, h);
  if (rc != MPI_SUCCESS) return rc;
  if (leader) {
    const int leaders_root = h.leader_of[root];
    int me = 0;
    PMPI_Comm_rank(h.leaders, &me);
    rc = me == leaders_root ? MPI_Reduce(MPI_IN_PLACE, at_leader, count, type, op, me, h.leaders)
                            : MPI_Reduce(at_leader, nullptr, count, type, op, leaders_root,
                                         h.leaders);
  }
  if (!root_here || root_leads) return rc;
  // The root is not its host's leader: the leader hands it the outcome and
  // the result.
  const int root_node_rank = h.node_rank_of[root];
  if (leader) {
    int sent = PMPI_Send(&rc, 1, MPI_INT, root_node_rank, kToLeaderTag, h.node);
    if (sent == MPI_SUCCESS && rc == MPI_SUCCESS) {
      sent = PMPI_Send(at_leader, count, type, root_node_rank, kToLeaderTag, h.node);
    }
    return rc != MPI_SUCCESS ? rc : sent;
  }
  if (rank != root) return MPI_SUCCESS;
  int outcome = MPI_SUCCESS;
  rc = PMPI_Recv(&outcome, 1, MPI_INT, 0, kToLeaderTag, h.node, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return rc;
  if (outcome != MPI_SUCCESS) {
    PMPI_Comm_call_errhandler(comm, outcome);
    return outcome;
  }
  return PMPI_Recv(recvbuf, count, type, 0, kToLeaderTag, h.node, MPI_STATUS_IGNORE);
}

int HierBcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
              const NodeSplit& h) {
  ++G().hierarchical[kBcast];
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  const bool leader = h.leaders != MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  // A root that does not lead its host hands the data to its leader first.
  if (h.node_rank_of[root] != 0) {
    if (rank == root) {
      rc = PMPI_Send(buffer, count, type, 0, kToLeaderTag, h.node);
    } else if (leader && h.leader_of[rank] == h.leader_of[root]) {
      rc = PMPI_Recv(buffer, count, type, h.node_rank_of[root], kToLeaderTag, h.node,
                     MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) return rc;
  }
  if (leader) rc = MPI_Bcast(buffer, count, type, h.leader_of[root], h.leaders);
  return Outcome(comm, h, rc, [&] { return PMPI_Bcast(buffer, count, type, 0, h.node); });
}

int HierBarrier(MPI_Comm comm, const NodeSplit& h) {
  ++G().hierarchical[kBarrier];
  int rc = PMPI_Barrier(h.node);
  if (rc != MPI_SUCCESS) return rc;
  if (h.leaders != MPI_COMM_NULL) rc = MPI_Barrier(h.leaders);
  // The outcome's broadcast ends the barrier on the node: no rank leaves
  // before its leader passed the leaders' barrier.
  return Outcome(comm, h, rc, [] { return MPI_SUCCESS; });
}

int HierAllgather(const void* sendbuf, void* recvbuf, int bytes, MPI_Comm comm,
                  const NodeSplit& h) {
  ++G().hierarchical[kAllgather];
  int rank = 0, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  const size_t per = static_cast<size_t>(bytes);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const void* mine = sendbuf == MPI_IN_PLACE ? out + per * static_cast<size_t>(rank) : sendbuf;
  const bool leader = h.leaders != MPI_COMM_NULL;
  const int n = static_cast<int>(h.my_host_ranks.size());
  // This host's blocks at its leader, then every host's from the leaders,
  // in host order; then to the host's ranks, which put them in rank order.
  std::vector<uint8_t> host_blocks(leader ? per * static_cast<size_t>(n) : 0);
  int rc = PMPI_Gather(mine, bytes, MPI_BYTE, host_blocks.data(), bytes, MPI_BYTE, 0, h.node);
  if (rc != MPI_SUCCESS) return rc;
  std::vector<uint8_t> ordered(per * static_cast<size_t>(size));
  if (leader) {
    std::vector<int> counts(h.host_sizes.size()), displs(h.host_sizes.size());
    for (size_t l = 0, at = 0; l < counts.size(); ++l) {
      counts[l] = h.host_sizes[l] * bytes;
      displs[l] = static_cast<int>(at);
      at += static_cast<size_t>(counts[l]);
    }
    rc = MPI_Allgatherv(host_blocks.data(), n * bytes, MPI_BYTE, ordered.data(), counts.data(),
                        displs.data(), MPI_BYTE, h.leaders);
  }
  return Outcome(comm, h, rc, [&] {
    const int shared = PMPI_Bcast(ordered.data(), size * bytes, MPI_BYTE, 0, h.node);
    if (shared != MPI_SUCCESS) return shared;
    for (int r = 0; r < size; ++r) {
      std::memcpy(out + per * static_cast<size_t>(r),
                  ordered.data() + per * static_cast<size_t>(h.host_position[r]), per);
    }
    return MPI_SUCCESS;
  });
}

int HierReduceScatter(const void* sendbuf, void* recvbuf, const std::vector<int>& counts,
                      MPI_Datatype type, MPI_Op op, MPI_Comm comm, const NodeSplit& h) {
  ++G().hierarchical[kReduceScatter];
  int rank = 0, size = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  const size_t elem = Bytes(type, 1);
  std::vector<size_t> first(static_cast<size_t>(size) + 1, 0);
  for (int r = 0; r < size; ++r) first[r + 1] = first[r] + static_cast<size_t>(counts[r]);
  const bool leader = h.leaders != MPI_COMM_NULL;
  // The host's reduction of the whole vector at its leader, as an allreduce
  // reduces it, so each block is bitwise that block of MPI_Allreduce.
  std::vector<uint8_t> reduced(leader ? first[size] * elem : 0);
  int rc = NodeReduce(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, reduced.data(),
                      static_cast<int>(first[size]), type, op, h);
  if (rc != MPI_SUCCESS) return rc;
  // The leaders reduce-scatter the vector in host order: each gets its
  // host's blocks, which it scatters to the host's ranks.
  std::vector<uint8_t> host_part;
  if (leader) {
    std::vector<uint8_t> ordered(reduced.size());
    std::vector<int> by_host(h.host_sizes.size(), 0);
    std::vector<int> order(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      order[h.host_position[r]] = r;
      by_host[h.leader_of[r]] += counts[r];
    }
    size_t at = 0;
    for (int r : order) {
      const size_t n = static_cast<size_t>(counts[r]) * elem;
      std::memcpy(ordered.data() + at, reduced.data() + first[r] * elem, n);
      at += n;
    }
    int me = 0;
    PMPI_Comm_rank(h.leaders, &me);
    host_part.resize(static_cast<size_t>(by_host[me]) * elem);
    rc = MPI_Reduce_scatter(ordered.data(), host_part.data(), by_host.data(), type, op,
                            h.leaders);
  }
  return Outcome(comm, h, rc, [&] {
    const int n = static_cast<int>(h.my_host_ranks.size());
    std::vector<int> part_counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
    for (int j = 0, at = 0; j < n; ++j) {
      part_counts[j] = counts[h.my_host_ranks[j]];
      displs[j] = at;
      at += part_counts[j];
    }
    return PMPI_Scatterv(host_part.data(), part_counts.data(), displs.data(), type, recvbuf,
                         counts[rank], type, 0, h.node);
  });
}

}  // namespace netfold::mpi
