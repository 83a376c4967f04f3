// libnetfold_mpi.so: a PMPI interposer that runs MPI_Allreduce, MPI_Reduce,
// MPI_Bcast, MPI_Barrier, MPI_Allgather(v) and MPI_Reduce_scatter(_block),
// and their nonblocking forms (completed through mpi_nonblocking.h), of
// unmodified MPI programs through a netfold fabric (docs/mpi.md).
//
//   mpirun -x LD_PRELOAD=libnetfold_mpi.so -x NETFOLD_MANAGER=... ./app
//
// Per communicator, a netfold group is created on the first collective that
// can use it (all members are in that collective, as MPI requires) and
// destroyed at MPI_Comm_free / MPI_Finalize. A collective the fabric cannot
// do goes to its PMPI_ twin, counted with the reason. If the fabric fails
// during an operation, the policy NETFOLD_MPI_ENABLE=try (the default) makes
// the ranks resynchronise (the ranks that completed the operation hand its
// result to those that did not, or everyone re-runs it from saved inputs)
// and continue on PMPI_ for that communicator; with =1 the error is returned.
//
// Knobs (environment): NETFOLD_MPI_ENABLE=0|1|try, NETFOLD_MPI_MIN_COMM_SIZE
// (3), NETFOLD_MPI_STATS=0|1 (counts printed by rank 0 at MPI_Finalize),
// NETFOLD_MPI_VERBOSE=0|1 (each communicator's decision, printed by its
// rank 0 when it is taken),
// NETFOLD_MPI_HIERARCHY=auto|flat|node, NETFOLD_MPI_RESYNC_TIMEOUT_S (600),
// NETFOLD_MPI_RETRY_AFTER (1000; 0: never), plus the library's NETFOLD_*
// (docs/host.md).
//
// The state these pieces share is host/mpi/interposer_state.h; a
// communicator's group, made and released, mpi_groups.cc; the failover
// after a fabric failure is host/mpi/mpi_resync.cc; allgather and
// reduce-scatter are mpi_gather_scatter.cc; several ranks per host, the
// node hierarchy, mpi_hierarchy.cc; what NETFOLD_MPI_STATS=1 prints,
// mpi_stats.cc.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "host/mpi/interposer_state.h"
#include "host/mpi/mpi_datatypes.h"
#include "host/mpi/mpi_hierarchy.h"
#include "host/mpi/mpi_nonblocking.h"
#include "host/mpi/mpi_resync.h"
#include "host/resync.h"
#include "netfold/netfold.h"

namespace netfold::mpi {

Global& G() {
  static Global* g = new Global();
  return *g;
}

// --- NETFOLD_MPI_VERBOSE: each decision, once -------------------------------------

namespace {

// Reasons that hold for one call (its datatype, op, size, form), not for the
// communicator: the communicator's other calls may still be offloaded.
bool PerCall(Reason r) {
  return r == kUserOp || r == kUnsupportedType || r == kOpNotAllowed || r == kHugeCount ||
         r == kNonblocking || r == kNonContiguous || r == kUnpacked;
}

// "MPI_COMM_WORLD (4 ranks)", or the handle's value when MPI has no name for it.
std::string CommText(MPI_Comm comm) {
  char name[MPI_MAX_OBJECT_NAME] = {};
  int len = 0;
  PMPI_Comm_get_name(comm, name, &len);
  int size = 0;
  PMPI_Comm_size(comm, &size);
  const std::string who =
      len > 0 ? std::string(name, static_cast<size_t>(len))
              : absl::StrFormat("0x%x", static_cast<unsigned long long>(Key(comm)));
  return absl::StrFormat("communicator %s (%d rank%s)", who, size, size == 1 ? "" : "s");
}

}  // namespace

void CallFallsBack(MPI_Comm comm, Reason why, Kind kind) {
  if (!G().initialized || !G().fabric) return;
  ++G().fallbacks[why];
  Tell(comm, why, kind);
}

void Tell(MPI_Comm comm, int bit, Kind kind, absl::FunctionRef<std::string()> detail) {
  Global& g = G();
  if (!g.config.verbose || !g.initialized) return;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    uint32_t& told = g.told[Key(comm)];
    if (told & (1u << bit)) return;
    told |= 1u << bit;
  }
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  if (rank != 0) return;
  const std::string d = detail();
  std::string line;
  if (bit == kOffloadedBit) {
    line = absl::StrFormat("%s: offloaded to the fabric", CommText(comm));
  } else if (bit == kReturnedBit) {
    line = absl::StrFormat("%s: offloaded to the fabric again", CommText(comm));
  } else if (bit == kHierarchyBit) {
    line = absl::StrFormat("%s: node hierarchy", CommText(comm));
  } else if (PerCall(static_cast<Reason>(bit))) {
    line = absl::StrFormat("%s: %s runs on MPI itself: %s", CommText(comm), kKindNames[kind],
                           kReasonNames[bit]);
  } else {
    line = absl::StrFormat("%s: not offloaded: %s", CommText(comm), kReasonNames[bit]);
  }
  if (!d.empty()) line += " (" + d + ")";
  std::fprintf(stderr, "netfold-mpi: %s\n", line.c_str());
}

void Completed(CommState* s, const Pending& p) {
  ++s->completed;
  ++G().offloaded[p.kind];
  s->last.kind = p.kind;
  s->last.root = p.root;
  s->last.result_bytes = 0;
  s->last.result.clear();
  s->last.input_bytes = 0;
  s->last.input.clear();
  const size_t bytes = p.kind == kBarrier ? 0 : Bytes(p.type, p.count);
  if (p.kind == kAllreduce || p.kind == kBcast || p.kind == kAllgather) {
    std::span<const uint8_t> kept =
        netfold::host::KeptResult({static_cast<const uint8_t*>(p.recvbuf), bytes},
                                  G().caps.num_slots, G().caps.slot_bytes);
    if (p.kind == kBcast && !netfold::host::BcastRootKeeps(static_cast<uint32_t>(p.root),
                                                           static_cast<uint32_t>(s->rank))) {
      kept = {};  // the root keeps it for everyone
    }
    s->last.result_bytes = bytes;
    s->last.result.assign(kept.begin(), kept.end());
  } else if (p.kind == kReduce || p.kind == kReduceScatter) {
    const uint8_t* in = static_cast<const uint8_t*>(
        p.sendbuf == MPI_IN_PLACE ? p.saved_input.data() : p.sendbuf);
    std::span<const uint8_t> kept(in, bytes);
    if (p.kind == kReduce) {
      kept = netfold::host::KeptInput(kept, G().caps.num_slots, G().caps.slot_bytes,
                                      Bytes(p.type, 1));
      // The root keeps nothing: the ranks reduce again only for a root
      // behind, and then its input is its current operation's.
      if (p.root == s->rank) kept = {};
    }
    s->last.input_bytes = bytes;
    s->last.input.assign(kept.begin(), kept.end());
  }
}

}  // namespace netfold::mpi

namespace {

using netfold::mpi::AllowedOnSpecialType;
using netfold::mpi::Bytes;
using netfold::mpi::CommState;
using netfold::mpi::Config;
using netfold::mpi::Contiguous;
using netfold::mpi::Enable;
using netfold::mpi::FinishOutstanding;
using netfold::mpi::ForgetComm;
using netfold::mpi::G;
using netfold::mpi::Global;
using netfold::mpi::Hierarchy;
using netfold::mpi::Key;
using netfold::mpi::Kind;
using netfold::mpi::kFailedEarlier;
using netfold::mpi::kKindNames;
using netfold::mpi::kOffloadedBit;
using netfold::mpi::kReasonNames;
using netfold::mpi::NetfoldDatatype;
using netfold::mpi::NetfoldOp;
using netfold::mpi::Oob;
using netfold::mpi::Pending;
using netfold::mpi::Reason;
using netfold::mpi::Recover;
using netfold::mpi::ReleaseComm;
using netfold::mpi::Resync;
using netfold::mpi::SaveInPlaceInput;
using netfold::mpi::StartNonblocking;
using netfold::mpi::Tell;
using netfold::mpi::Usable;
using enum netfold::mpi::Kind;
using enum netfold::mpi::Reason;

// --- Configuration ------------------------------------------------------------

Config ReadConfig() {
  Config c;
  if (const char* v = std::getenv("NETFOLD_MPI_ENABLE")) {
    const std::string s(v);
    if (s == "0" || s == "no" || s == "off") c.enable = Enable::kOff;
    else if (s == "1" || s == "yes" || s == "on") c.enable = Enable::kOn;
    else if (s == "try" || s.empty()) c.enable = Enable::kTry;
    else std::fprintf(stderr, "netfold-mpi: ignoring NETFOLD_MPI_ENABLE='%s' (0, 1 or try)\n", v);
  }
  // A positive integer, or a line saying it is ignored.
  auto positive = [](const char* name, int* out) {
    const char* v = std::getenv(name);
    if (v == nullptr) return;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n >= 1 && n < INT32_MAX) {
      *out = static_cast<int>(n);
    } else {
      std::fprintf(stderr, "netfold-mpi: ignoring %s='%s'\n", name, v);
    }
  };
  positive("NETFOLD_MPI_MIN_COMM_SIZE", &c.min_comm_size);
  positive("NETFOLD_MPI_RESYNC_TIMEOUT_S", &c.resync_timeout_s);
  if (const char* v = std::getenv("NETFOLD_MPI_RETRY_AFTER");
      v != nullptr && std::strcmp(v, "0") == 0) {
    c.retry_after = 0;
  } else {
    positive("NETFOLD_MPI_RETRY_AFTER", &c.retry_after);
  }
  if (const char* v = std::getenv("NETFOLD_MPI_STATS")) c.stats = std::string(v) == "1";
  if (const char* v = std::getenv("NETFOLD_MPI_VERBOSE")) c.verbose = std::string(v) == "1";
  if (const char* v = std::getenv("NETFOLD_MPI_HIERARCHY")) {
    const std::string s(v);
    if (s == "flat") c.hierarchy = Hierarchy::kFlat;
    else if (s == "node") c.hierarchy = Hierarchy::kNode;
    else if (s != "auto") std::fprintf(stderr, "netfold-mpi: ignoring NETFOLD_MPI_HIERARCHY='%s'\n", v);
  }
  return c;
}

void JoinFabric() {
  Global& g = G();
  g.config = ReadConfig();
  g.initialized = true;
  PMPI_Comm_rank(MPI_COMM_WORLD, &g.world_rank);
  int level = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&level);
  g.one_thread = level < MPI_THREAD_MULTIPLE;
  if (g.config.enable == Enable::kOff) return;
  int size = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  // One line, so that a job too small for the fabric (mpirun -np 2) does
  // not run without it silently.
  if (size < g.config.min_comm_size && g.world_rank == 0) {
    std::fprintf(stderr,
                 "netfold-mpi: MPI_COMM_WORLD has %d rank%s, fewer than "
                 "NETFOLD_MPI_MIN_COMM_SIZE=%d: every collective runs on MPI itself "
                 "(NETFOLD_MPI_MIN_COMM_SIZE=2 puts two-rank communicators on the fabric; "
                 "docs/mpi.md, \"Two-rank communicators\")\n",
                 size, size == 1 ? "" : "s", g.config.min_comm_size);
  }
  PMPI_Comm_dup(MPI_COMM_WORLD, &g.world_oob);
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = g.world_rank;
  spec.world_size = size;
  spec.oob = Oob(&g.world_oob);
  spec.job_name = "mpi";
  // When the fabric cannot serve a communicator, MPI's own collectives do
  // (the fallback above), not libnetfold's host algorithms: ask libnetfold
  // for in-network only, unless the user chose a policy.
  setenv("NETFOLD_ALGORITHM", "innetwork", /*overwrite=*/0);
  // A reduce this rank is not the root of returns once its input has left,
  // and the interposer counts it as done: the resync after a failure
  // (mpi_resync.cc) needs every rank within one operation of the others,
  // so one such reduce at a time.
  // More would break the failover; fewer (0) is the user's to choose.
  if (const char* v = std::getenv("NETFOLD_RELEASED_REDUCES"); v == nullptr || std::strcmp(v, "0") != 0) {
    setenv("NETFOLD_RELEASED_REDUCES", "1", /*overwrite=*/1);
  }
  const absl::Time tried = absl::Now();
  const int rc = netfold_init(&spec, &g.ctx);
  const absl::Duration trying = absl::Now() - tried;
  if (rc == NETFOLD_SUCCESS) {
    g.fabric = true;
    (void)netfold_query_caps(g.ctx, &g.caps);  // on failure K = P = 0: results kept whole
    return;
  }
  // netfold_init agrees on its outcome across ranks: all get here together.
  if (g.config.enable == Enable::kOn) {
    if (g.world_rank == 0) {
      std::fprintf(stderr, "netfold-mpi: cannot use the fabric (NETFOLD_MPI_ENABLE=1): %s: %s\n",
                   netfold_strerror(rc), netfold_last_error());
    }
    PMPI_Abort(MPI_COMM_WORLD, 1);
  }
  // One line, so that a job that preloaded the interposer to use a fabric
  // does not run without it silently, with what trying cost MPI_Init.
  if (g.world_rank == 0) {
    std::fprintf(stderr,
                 "netfold-mpi: the fabric is not used (MPI_Init tried it for %.3f s), collectives "
                 "run on MPI itself: %s\n",
                 absl::ToDoubleSeconds(trying), netfold_last_error());
  }
}

// --- Eligibility ------------------------------------------------------------------

// The datatype's name for NETFOLD_MPI_VERBOSE.
std::string TypeText(MPI_Datatype type) {
  if (type == MPI_DATATYPE_NULL) return "";
  char name[MPI_MAX_OBJECT_NAME] = {};
  int len = 0;
  PMPI_Type_get_name(type, name, &len);
  return len > 0 ? std::string(name, static_cast<size_t>(len)) : "a derived datatype";
}

}  // namespace

namespace netfold::mpi {

// The state of `comm` if this collective goes the fabric's way; nullptr
// (with the reason counted) if it goes to PMPI.
//
// After the fabric failed under the communicator, the operations some rank
// had started on it when the ranks first resynchronised still go the
// fabric's way, at every rank and blocking or not: each fails at once
// (OnFabric) and is recovered by a resync in its turn, as at the ranks
// that started it on the fabric. Every later one goes to PMPI.
CommState* Usable(MPI_Comm comm, Kind kind, MPI_Datatype type, MPI_Op op, int count,
                  bool has_op, bool nonblocking) {
  Global& g = G();
  auto fallback = [&](Reason r) -> CommState* {
    ++g.fallbacks[r];
    Tell(comm, r, kind, [&]() -> std::string {
      switch (r) {
        case kUnsupportedType:
        case kOpNotAllowed:
        case kUserOp:
          return TypeText(type);
        case kCommTooSmall:
          return absl::StrFormat("NETFOLD_MPI_MIN_COMM_SIZE=%d", g.config.min_comm_size);
        case kGroupFailed:
        case kFabricError:
        case kAfterFailure: {
          const CommState* known = Known(comm);
          return known == nullptr ? std::string() : known->pmpi_detail;
        }
        default:
          return std::string();
      }
    });
    return nullptr;
  };
  if (!g.initialized || g.config.enable == Enable::kOff) return fallback(kDisabled);
  if (!g.fabric) return fallback(kNoFabric);
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return fallback(kInterComm);
  if (kind != kBarrier) {
    // A bcast or an allgather moves bytes: any datatype MPI can send will
    // do (MPI_Bcast packs what is not contiguous). Reductions need netfold's
    // type.
    auto dtype = NetfoldDatatype(type);
    if (!dtype && kind != kBcast && kind != kAllgather) return fallback(kUnsupportedType);
    if (has_op) {
      auto nop = NetfoldOp(op);
      if (!nop) return fallback(kUserOp);
      if (!AllowedOnSpecialType(type, op) || !netfold_op_supported(*dtype, *nop)) {
        return fallback(kOpNotAllowed);
      }
    }
    int size = 0;
    PMPI_Type_size(type, &size);
    MPI_Aint lb = 0, extent = 0;
    PMPI_Type_get_extent(type, &lb, &extent);
    if (static_cast<int64_t>(extent) * count > INT32_MAX) return fallback(kHugeCount);
  }
  CommState* s = nullptr;
  {
    // The map is shared between threads; the state of `comm` is this
    // thread's while it calls a collective on `comm`.
    std::lock_guard<std::mutex> lock(g.mu);
    auto& slot = g.comms[Key(comm)];
    if (!slot) {
      slot = std::make_unique<CommState>();
      slot->seq = ++g.next_seq;
    }
    s = slot.get();
  }
  if (s->mode == CommState::Mode::kUnknown) {
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_size(comm, &s->size);
    if (s->size < g.config.min_comm_size) {
      s->mode = CommState::Mode::kPmpi;
      s->pmpi_reason = kCommTooSmall;
      return fallback(kCommTooSmall);
    }
    // Every member is in this collective now: create the group collectively.
    if (CreateGroup(comm, s) != NETFOLD_SUCCESS) {
      // Group creation agrees on its outcome: every member falls back.
      if (g.config.enable == Enable::kOn && s->rank == 0) {
        std::fprintf(stderr, "netfold-mpi: no group for a communicator of %d ranks: %s\n",
                     s->size, netfold_last_error());
      }
      s->mode = CommState::Mode::kPmpi;
      s->pmpi_reason = kGroupFailed;
      s->pmpi_detail = netfold_last_error();  // the manager's reason, at the group's rank 0
      return fallback(kGroupFailed);
    }
    s->mode = CommState::Mode::kFabric;
  }
  // A blocking collective: the nonblocking operations started before it
  // complete first (a failure among them may send the communicator to
  // PMPI).
  if (!nonblocking) FinishOutstanding(s);
  bool fabric = false, way = false;
  Reason why = kFabricError;
  {
    // Under the queue's lock: another thread completing the communicator's
    // operations may be meeting a failure (Recover changes mode and sets
    // last_to_recover under it).
    std::lock_guard<std::mutex> lock(s->nb_mu);
    fabric = OnFabric(s);
    why = s->pmpi_reason;
    way = fabric || (why == kFabricError && s->started < s->last_to_recover.value_or(0));
    if (way) ++s->started;
  }
  if (!way && why == kFabricError && ReturnToTheFabric(comm, s, nonblocking)) {
    std::lock_guard<std::mutex> lock(s->nb_mu);
    fabric = way = true;
    ++s->started;
  }
  if (!way) return fallback(why == kFabricError ? kAfterFailure : why);
  if (fabric) Tell(comm, kOffloadedBit, kind);
  return s;
}

void FinishFlatOperations(MPI_Comm comm) {
  if (CommState* s = Known(comm)) FinishOutstanding(s);
}

void SaveInPlaceInput(Pending& p) {
  if (p.sendbuf != MPI_IN_PLACE) return;
  const uint8_t* r = static_cast<const uint8_t*>(p.recvbuf);
  p.saved_input.assign(r, r + Bytes(p.type, p.count));
}

void NoteWritten(Pending& p, netfold_request_t request) {
  p.written = netfold_written_t{};
  p.knows_written =
      request == nullptr || netfold_request_written(request, &p.written) == NETFOLD_SUCCESS;
}

}  // namespace netfold::mpi

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) JoinFabric();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) JoinFabric();
  return rc;
}

int MPI_Finalize(void) {
  Global& g = G();
  if (g.initialized) {
    // Settle every communicator still known (all ranks are here), then
    // leave: finalize destroys the job and with it every group.
    // In the order the communicators were first used, which MPI's ordering
    // rules make the same on every rank that shares two of them.
    std::vector<std::pair<uint64_t, uintptr_t>> order;
    for (auto& [k, s] : g.comms) order.emplace_back(s->seq, k);
    std::sort(order.begin(), order.end());
    for (const auto& [seq, k] : order) {
      CommState* s = g.comms[k].get();
      FinishOutstanding(s);
      if (s->oob != MPI_COMM_NULL) {
        MPI_Comm c = MPI_COMM_NULL;
        std::memcpy(&c, &k, sizeof(c));
        ResyncAtEnd(c, s);
      }
    }
    if (g.config.stats) netfold::mpi::PrintStats();
    for (auto& [k, s] : g.comms) {
      if (s->oob != MPI_COMM_NULL) PMPI_Comm_free(&s->oob);
    }
    g.comms.clear();
    g.told.clear();
    netfold::mpi::ForgetSplits();  // MPI_Finalize frees their communicators
    if (g.ctx != nullptr) netfold_finalize(g.ctx);  // destroys the job and its groups
    g.ctx = nullptr;
    if (g.world_oob != MPI_COMM_NULL) PMPI_Comm_free(&g.world_oob);
    g.initialized = false;
  }
  return PMPI_Finalize();
}

int MPI_Comm_free(MPI_Comm* comm) {
  if (comm != nullptr && G().initialized) {
    // Its node hierarchy's communicators first: the leaders' holds a group.
    if (std::unique_ptr<netfold::mpi::NodeSplit> h = netfold::mpi::TakeSplit(*comm)) {
      if (h->leaders != MPI_COMM_NULL) MPI_Comm_free(&h->leaders);
      if (h->node != MPI_COMM_NULL) PMPI_Comm_free(&h->node);
    }
    ReleaseComm(*comm, /*destroy_group=*/true);
    ForgetComm(*comm);
  }
  return PMPI_Comm_free(comm);
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  if (const auto* h = netfold::mpi::HierarchyFor(comm, kAllreduce, type, op, count)) {
    return netfold::mpi::HierAllreduce(sendbuf, recvbuf, count, type, op, comm, *h);
  }
  CommState* s = Usable(comm, kAllreduce, type, op, count, true);
  if (s == nullptr) return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
  Pending p{kAllreduce, sendbuf, recvbuf, count, type, op, 0, {}};
  // Started and waited for as a request, which says after a failure what
  // the fabric wrote: the failover needs no copy of an in-place input.
  netfold_request_t request = nullptr;
  int rc = !OnFabric(s) ? kFailedEarlier
                       : netfold_allreduce_nb(s->group,
                                              sendbuf == MPI_IN_PLACE ? NETFOLD_IN_PLACE : sendbuf,
                                              recvbuf, static_cast<size_t>(count),
                                              *NetfoldDatatype(type), *NetfoldOp(op), &request);
  if (rc == NETFOLD_SUCCESS) rc = netfold_request_wait(request);
  if (rc != NETFOLD_SUCCESS) {
    const std::string why = netfold_last_error();
    NoteWritten(p, request);
    if (request != nullptr) netfold_request_free(request);
    return Recover(comm, s, p, rc, why);
  }
  netfold_request_free(request);
  Completed(s, p);
  return MPI_SUCCESS;
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
  if (const auto* h = netfold::mpi::HierarchyFor(comm, kReduce, type, op, count)) {
    return netfold::mpi::HierReduce(sendbuf, recvbuf, count, type, op, root, comm, *h);
  }
  CommState* s = Usable(comm, kReduce, type, op, count, true);
  if (s == nullptr) return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
  Pending p{kReduce, sendbuf, recvbuf, count, type, op, root, {}};
  SaveInPlaceInput(p);
  // Non-roots may pass a NULL recvbuf; the library only writes at the root.
  const int rc = !OnFabric(s) ? kFailedEarlier
                             : netfold_reduce(s->group,
                                              sendbuf == MPI_IN_PLACE ? NETFOLD_IN_PLACE : sendbuf,
                                              recvbuf, static_cast<size_t>(count),
                                              *NetfoldDatatype(type), *NetfoldOp(op), root);
  if (rc != NETFOLD_SUCCESS) return Recover(comm, s, p, rc);
  Completed(s, p);
  return MPI_SUCCESS;
}


int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  if (const auto* h = netfold::mpi::HierarchyFor(comm, kBcast, type, MPI_OP_NULL, count)) {
    return netfold::mpi::HierBcast(buffer, count, type, root, comm, *h);
  }
  CommState* s = Usable(comm, kBcast, type, MPI_OP_NULL, count, false);
  if (s == nullptr) return PMPI_Bcast(buffer, count, type, root, comm);
  // The fabric broadcasts bytes: the buffer itself when the data is
  // contiguous, else MPI's packed form, unpacked at the other ranks. Every
  // rank decides the same way (same type signature, same MPI library).
  int size = 0;
  PMPI_Type_size(type, &size);
  const int bytes = size * count;
  const bool contiguous = Contiguous(type, count);
  std::vector<uint8_t> packed;
  void* wire = buffer;
  if (!contiguous) {
    packed.resize(static_cast<size_t>(bytes));
    wire = packed.data();
    if (s->rank == root) {
      int position = 0;
      const int rc = PMPI_Pack(buffer, count, type, packed.data(), bytes, &position, comm);
      if (rc != MPI_SUCCESS) return rc;
    }
  }
  Pending p{kBcast, wire, wire, bytes, MPI_BYTE, MPI_OP_NULL, root, {}};
  const int rc = !OnFabric(s) ? kFailedEarlier
                             : netfold_bcast(s->group, wire, static_cast<size_t>(bytes),
                                             NETFOLD_DTYPE_UINT8, root);
  int result = MPI_SUCCESS;
  if (rc != NETFOLD_SUCCESS) {
    result = Recover(comm, s, p, rc);
  } else {
    Completed(s, p);
  }
  if (!contiguous && result == MPI_SUCCESS && s->rank != root) {
    int position = 0;
    result = PMPI_Unpack(packed.data(), bytes, &position, buffer, count, type, comm);
  }
  return result;
}

int MPI_Barrier(MPI_Comm comm) {
  if (const auto* h = netfold::mpi::HierarchyFor(comm, kBarrier, MPI_DATATYPE_NULL, MPI_OP_NULL, 0)) {
    return netfold::mpi::HierBarrier(comm, *h);
  }
  CommState* s = Usable(comm, kBarrier, MPI_DATATYPE_NULL, MPI_OP_NULL, 0, false);
  if (s == nullptr) return PMPI_Barrier(comm);
  Pending p{kBarrier, nullptr, nullptr, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, 0, {}};
  const int rc = OnFabric(s) ? netfold_barrier(s->group) : kFailedEarlier;
  if (rc != NETFOLD_SUCCESS) return Recover(comm, s, p, rc);
  Completed(s, p);
  return MPI_SUCCESS;
}

// For benchmarks and tools: this rank's libnetfold counters (docs/host.md),
// found with dlsym(RTLD_DEFAULT, "netfold_mpi_stats"). Returns 0, or -1 when
// the fabric is not in use.
int netfold_mpi_stats(netfold_stats_t* stats) {
  if (!G().fabric || G().ctx == nullptr || stats == nullptr) return -1;
  return netfold_get_stats(G().ctx, stats) == NETFOLD_SUCCESS ? 0 : -1;
}

// Nonblocking collectives: on the fabric through generalized requests
// (mpi_nonblocking.h), with the same eligibility as the blocking ones.
int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request* request) {
  CommState* s = Usable(comm, kAllreduce, type, op, count, true, /*nonblocking=*/true);
  if (s == nullptr) return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
  Pending p{kAllreduce, sendbuf, recvbuf, count, type, op, 0, {}};
  return StartNonblocking(comm, s, std::move(p), [&](netfold_request_t* r) {
    return netfold_allreduce_nb(s->group, sendbuf == MPI_IN_PLACE ? NETFOLD_IN_PLACE : sendbuf,
                                recvbuf, static_cast<size_t>(count), *NetfoldDatatype(type),
                                *NetfoldOp(op), r);
  }, request);
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
               MPI_Request* request) {
  // MPI_Bcast packs a non-contiguous type and unpacks it after the wait; a
  // nonblocking one would have to unpack at completion: MPI does it.
  if (!Contiguous(type, count)) {
    netfold::mpi::CallFallsBack(comm, kNonblocking, kBcast);
    return PMPI_Ibcast(buffer, count, type, root, comm, request);
  }
  CommState* s = Usable(comm, kBcast, type, MPI_OP_NULL, count, false, /*nonblocking=*/true);
  if (s == nullptr) return PMPI_Ibcast(buffer, count, type, root, comm, request);
  int size = 0;
  PMPI_Type_size(type, &size);
  const int bytes = size * count;
  Pending p{kBcast, buffer, buffer, bytes, MPI_BYTE, MPI_OP_NULL, root, {}};
  return StartNonblocking(comm, s, std::move(p), [&](netfold_request_t* r) {
    return netfold_bcast_nb(s->group, buffer, static_cast<size_t>(bytes), NETFOLD_DTYPE_UINT8,
                            root, r);
  }, request);
}

int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request* request) {
  CommState* s = Usable(comm, kReduce, type, op, count, true, /*nonblocking=*/true);
  if (s == nullptr) return PMPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, request);
  Pending p{kReduce, sendbuf, recvbuf, count, type, op, root, {}};
  SaveInPlaceInput(p);
  return StartNonblocking(comm, s, std::move(p), [&](netfold_request_t* r) {
    return netfold_reduce_nb(s->group, sendbuf == MPI_IN_PLACE ? NETFOLD_IN_PLACE : sendbuf,
                             recvbuf, static_cast<size_t>(count), *NetfoldDatatype(type),
                             *NetfoldOp(op), root, r);
  }, request);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  CommState* s = Usable(comm, kBarrier, MPI_DATATYPE_NULL, MPI_OP_NULL, 0, false,
                        /*nonblocking=*/true);
  if (s == nullptr) return PMPI_Ibarrier(comm, request);
  Pending p{kBarrier, nullptr, nullptr, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, 0, {}};
  return StartNonblocking(comm, s, std::move(p),
                          [&](netfold_request_t* r) { return netfold_barrier_nb(s->group, r); },
                          request);
}

}  // extern "C"
