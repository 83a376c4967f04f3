// The state libnetfold_mpi's pieces share (an internal header of the
// library; nothing outside host/mpi includes it): the knobs, what the
// interposer keeps per communicator, why a collective went to PMPI, and the
// process-wide counters. mpi_interposer.cc owns it (eligibility, verbose
// reporting, the MPI entry points); mpi_resync.cc reads and updates it when
// the fabric fails (docs/mpi.md).
//
//   Global& g = G();
//   CommState* s = g.comms[Key(comm)].get();
//   ++g.fallbacks[kFabricError];
//   Tell(comm, kFabricError, kAllreduce, [&] { return s->pmpi_detail; });
//
// Thread safety (MPI_THREAD_MULTIPLE): Global::mu guards the maps of
// communicators and what was told, the counters are atomics, and a
// CommState is touched by the thread calling a collective on its
// communicator (MPI makes the application order calls on one
// communicator), and by any thread completing one of its nonblocking
// operations: that one holds CommState::nb_mu, and so does Usable while
// it decides. MPI_Init* and MPI_Finalize run alone.
#ifndef NETFOLD_HOST_MPI_INTERPOSER_STATE_H_
#define NETFOLD_HOST_MPI_INTERPOSER_STATE_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "netfold/netfold.h"

namespace netfold::mpi {

enum class Enable { kOff, kOn, kTry };
enum class Hierarchy { kAuto, kFlat, kNode };

// Why a collective went to PMPI. Printed at finalize with NETFOLD_MPI_STATS=1.
enum Reason {
  kDisabled = 0,     // NETFOLD_MPI_ENABLE=0
  kNoFabric,         // netfold_init failed (try mode)
  kCommTooSmall,     // fewer ranks than NETFOLD_MPI_MIN_COMM_SIZE
  kInterComm,        // inter-communicators are not offloaded
  kUserOp,           // a user-defined reduction op
  kUnsupportedType,  // a derived datatype or one netfold lacks
  kOpNotAllowed,     // an op MPI does not define on the type
  kGroupFailed,      // the fabric refused a group (no resources, ...)
  kFabricError,      // the fabric failed during an operation (re-run on PMPI)
  kAfterFailure,     // a call after the operations the failover recovered
  kNonblocking,      // a nonblocking bcast of a non-contiguous datatype
  kHugeCount,        // count * size over 2^31 bytes
  kNonContiguous,    // allgather of a datatype that is not contiguous
  kUnpacked,         // allgatherv whose blocks leave gaps or are out of rank order
  kNumReasons
};
inline constexpr const char* kReasonNames[kNumReasons] = {
    "disabled (NETFOLD_MPI_ENABLE=0)", "no fabric (netfold_init failed)",
    "communicator too small", "inter-communicator", "user-defined op",
    "unsupported datatype", "op not allowed on type", "group not created",
    "fabric error (re-run on PMPI)", "on MPI after a fabric failure",
    "nonblocking bcast of a non-contiguous datatype",
    "message too large", "allgather of a non-contiguous datatype",
    "allgatherv with gaps or blocks out of rank order"};

enum Kind : int32_t {
  kAllreduce = 1,
  kReduce = 2,
  kBcast = 3,
  kBarrier = 4,
  kAllgather = 5,      // moves bytes: type MPI_BYTE, count the whole result's bytes
  kReduceScatter = 6,  // count: the whole input's elements
  kNumKinds = 7
};
inline constexpr const char* kKindNames[kNumKinds] = {
    "", "allreduce", "reduce", "bcast", "barrier", "allgather", "reduce_scatter"};

struct Config {
  Enable enable = Enable::kTry;
  int min_comm_size = 3;
  bool stats = false;
  bool verbose = false;
  Hierarchy hierarchy = Hierarchy::kAuto;
  // How long a rank waits for the others to join a recovery (mpi_resync.cc)
  // before it aborts the job.
  int resync_timeout_s = 600;
  // After a failover, the calls on MPI before the ranks try the fabric
  // again (NETFOLD_MPI_RETRY_AFTER; 0: never).
  int retry_after = 1000;
};

// The last operation a communicator completed on the fabric, kept so that
// ranks behind can be given its outcome if the fabric fails (Resync).
struct LastOp {
  Kind kind = kBarrier;
  int root = 0;
  size_t result_bytes = 0;      // allreduce/bcast/allgather: the result's size
  std::vector<uint8_t> result;  // and its end (KeptResult, host/resync.h)
  size_t input_bytes = 0;       // reduce/reduce-scatter: this rank's input's size
  std::vector<uint8_t> input;   // and its end (KeptInput, host/resync.h; a reduce-scatter's all)
};

// An operation in progress, described enough to re-run it on PMPI.
struct Pending {
  Kind kind;
  const void* sendbuf;  // MPI_IN_PLACE possible
  void* recvbuf;        // bcast: the buffer
  int count;
  MPI_Datatype type;
  MPI_Op op;
  int root;
  std::vector<uint8_t> saved_input;  // in-place input, saved before the fabric wrote over it
  // Allgather: each rank's bytes; reduce-scatter: each rank's elements.
  std::vector<int> counts;
  // An allreduce that failed: which chunks of its result the fabric wrote
  // (NoteWritten); the failover runs again only the others, so no input is
  // saved for it.
  bool knows_written = false;
  netfold_written_t written{};
};

struct NbOp;  // a nonblocking operation on the fabric (mpi_nonblocking.h)

struct CommState {
  enum class Mode { kUnknown, kFabric, kPmpi };
  // Atomic: read without a lock (OnFabric) while another thread completing
  // the communicator's nonblocking operations may meet a failure (Recover,
  // then under nb_mu, which also guards the decision in Usable).
  std::atomic<Mode> mode = Mode::kUnknown;
  uint64_t seq = 0;  // creation order: the order in which finalize settles communicators
  Reason pmpi_reason = kFabricError;  // why mode is kPmpi
  std::string pmpi_detail;            // the fabric's words for it (kGroupFailed, kFabricError)
  MPI_Comm oob = MPI_COMM_NULL;  // our private duplicate for out-of-band collectives
  netfold_group_t group = nullptr;
  int rank = 0, size = 0;
  // The communicator's operations in the order every rank starts them
  // (blocking or not): how many this rank started on the fabric (or, after
  // a failure, on its way: below), and how many of those completed, which
  // the failover compares across ranks (Resync).
  uint64_t started = 0, completed = 0;
  // After the fabric failed under the communicator (kFabricError): the
  // most operations any rank had started when the ranks first met in a
  // resync, which every rank learns there. Each operation up to it was
  // started on the fabric somewhere, so at every rank it goes the fabric's
  // way (failing at once, without touching the fabric) and is recovered in
  // its turn by a resync, however far each rank had got; every later one
  // goes to MPI at once, blocking or not, and is not counted.
  std::optional<uint64_t> last_to_recover;
  LastOp last;
  // Calls to a recovery (mpi_resync.cc, CallTheOthers): whether this rank
  // sent its own to the other members (`completed` then, the message), and
  // what each member's said, once received.
  bool called = false;
  uint64_t completed_when_called = 0;
  std::vector<MPI_Request> calls_sent;
  std::vector<std::optional<uint64_t>> calls;
  // True while this rank is in a resync of the communicator: a wait there
  // does not answer calls on it again (AnswerCalls).
  bool in_recovery = false;
  // After a failover: the calls that went to MPI since it (or since the
  // last try), and how many the ranks let go there before they try the
  // fabric again (ReturnToTheFabric; doubles at each try).
  uint64_t calls_on_mpi = 0, next_try = 0;
  // Nonblocking operations Usable let through (started on the fabric, or
  // failed at once after a failure) and not completed yet, in start order
  // (they complete in that order: Completed keeps `completed` and `last` in
  // step with the other ranks). Under nb_mu: MPI lets several threads
  // complete requests of one communicator at once.
  std::mutex nb_mu;
  std::deque<NbOp*> outstanding;
};

struct Global {
  Config config;
  bool initialized = false;
  bool fabric = false;
  netfold_context_t ctx = nullptr;
  netfold_caps_t caps = {};  // the job's K and P bound every group's (Completed)
  MPI_Comm world_oob = MPI_COMM_NULL;
  int world_rank = 0;
  // Below MPI_THREAD_MULTIPLE: no other thread is in a communicator while
  // this one waits in a recovery, so the wait may join another's
  // (mpi_resync.cc, AnswerCalls).
  bool one_thread = true;
  std::atomic<uint64_t> offloaded[kNumKinds] = {};
  std::atomic<uint64_t> fallbacks[kNumReasons] = {};
  // Collectives that went through the node hierarchy (mpi_hierarchy.h), at
  // every rank; the leaders' share of them is also counted in `offloaded`.
  std::atomic<uint64_t> hierarchical[kNumKinds] = {};
  // Allreduces the failover completed chunk by chunk (host/resync.h): the
  // bytes whose result the fabric had delivered somewhere, and the bytes
  // reduced again on MPI.
  std::atomic<uint64_t> recovered_bytes{0}, reduced_again_bytes{0};
  // Recoveries this rank joined, called, while it waited in another's
  // (mpi_resync.cc, AnswerCalls).
  std::atomic<uint64_t> recoveries_joined{0};
  // Tries to go back to the fabric after a failover, and those that did.
  std::atomic<uint64_t> tries{0}, returned{0};
  // Private duplicates of communicators made (CreateGroup): one per group
  // the manager made, none for a kept group given again.
  std::atomic<uint64_t> duplicates{0};
  std::mutex mu;  // guards the three below (several threads under MPI_THREAD_MULTIPLE)
  std::unordered_map<uintptr_t, std::unique_ptr<CommState>> comms;
  uint64_t next_seq = 0;
  // NETFOLD_MPI_VERBOSE: per communicator, what was already said (bit r:
  // reason r; bit kNumReasons: "offloaded"), so that each line comes once.
  std::unordered_map<uintptr_t, uint32_t> told;
  // The generalized requests of nonblocking operations on the fabric, by
  // MPI_Request handle, until MPI frees them.
  std::unordered_map<uintptr_t, NbOp*> requests;
  std::atomic<int> num_requests{0};  // requests.size(), read without mu
};
static_assert(kNumReasons < 29, "Global::told holds a bit per reason, and three more");

// The process's one Global, made on first use and never destroyed.
// Defined in mpi_interposer.cc.
Global& G();

// An MPI handle (a pointer or an integer, depending on the MPI library) as
// the key of Global::comms and Global::told.
template <typename Handle>
uintptr_t Key(Handle h) {
  uintptr_t k = 0;
  static_assert(sizeof(Handle) <= sizeof(uintptr_t));
  std::memcpy(&k, &h, sizeof(Handle));
  return k;
}

// The bytes `count` elements of `type` span in a buffer (by extent).
inline size_t Bytes(MPI_Datatype type, int count) {
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  return static_cast<size_t>(extent) * static_cast<size_t>(count);
}

// Counts `p` offloaded and keeps it as the communicator's last operation
// (for Resync). Defined in mpi_interposer.cc.
void Completed(CommState* s, const Pending& p);

// The state of `comm` if this collective goes the fabric's way; nullptr
// (with the reason counted) if it goes to PMPI. `count` elements of `type`
// (the whole vector). A blocking collective first completes the
// communicator's nonblocking operations (which may send it to PMPI).
// Defined in mpi_interposer.cc.
CommState* Usable(MPI_Comm comm, Kind kind, MPI_Datatype type, MPI_Op op, int count, bool has_op,
                  bool nonblocking = false);
// A blocking collective on `comm` that goes through the node hierarchy
// (over other communicators): completes `comm`'s own outstanding
// nonblocking operations first, as one Usable lets through does. A rank
// whose operation failed may be recovering it already (MPI_Test completes
// too), and waits for this rank in that resync. Defined in
// mpi_interposer.cc.
void FinishFlatOperations(MPI_Comm comm);
// Whether an operation Usable let through starts on the fabric. Not after
// the fabric failed under the communicator: it is one of those to recover
// (CommState::last_to_recover), which fails at once with kFailedEarlier,
// and Recover completes it.
inline bool OnFabric(const CommState* s) { return s->mode == CommState::Mode::kFabric; }
inline constexpr int kFailedEarlier = NETFOLD_ERR_ABORTED;
// An in-place input (Bytes(p.type, p.count) of p.recvbuf), kept before the
// fabric writes the result over it: the failover re-runs from it. (Not for
// an allreduce: NoteWritten.)
void SaveInPlaceInput(Pending& p);
// After an allreduce failed (rc, not SUCCESS): what the fabric wrote of its
// result, from `request` (null: the operation never started, so nothing).
void NoteWritten(Pending& p, netfold_request_t request);

// Tell's bits for "offloaded to the fabric" and "through the node
// hierarchy" (the other bits are Reasons).
constexpr int kOffloadedBit = kNumReasons;
constexpr int kHierarchyBit = kNumReasons + 1;
constexpr int kReturnedBit = kNumReasons + 2;  // "offloaded to the fabric again"

// At MPI_Finalize with NETFOLD_MPI_STATS=1, at every rank (collective over
// MPI_COMM_WORLD): rank 0 prints the job's counts summed over the ranks
// (mpi_stats.cc).
void PrintStats();

// --- A communicator's group (mpi_groups.cc) ---

// libnetfold's out-of-band exchanges over `*comm` (read at every exchange).
netfold_oob_t Oob(MPI_Comm* comm);

// The state of `comm` if a collective on it went through Usable, else null.
CommState* Known(MPI_Comm comm);

// Every member of `comm` is in this call: creates the communicator's group
// (collective; every member gets the same outcome). NETFOLD_SUCCESS or
// libnetfold's code, with netfold_last_error() saying why.
int CreateGroup(MPI_Comm comm, CommState* s);

// At MPI_Comm_free (every member is there): settles the communicator's
// operations and its failover, then destroys its group (if
// `destroy_group`), handing the group the private communicator to keep, or
// frees that communicator; forgets the state.
void ReleaseComm(MPI_Comm comm, bool destroy_group);

// MPI may give a freed communicator's handle to a new one: what was told
// about the old one is forgotten with it.
void ForgetComm(MPI_Comm comm);

// With NETFOLD_MPI_VERBOSE=1, the communicator's rank 0 says once per
// (communicator, bit) what was decided: `bit` is a Reason, or kOffloadedBit.
// `detail` (called only when something is printed) adds the particulars.
// Defined in mpi_interposer.cc.
void Tell(MPI_Comm comm, int bit, Kind kind, absl::FunctionRef<std::string()> detail);
inline void Tell(MPI_Comm comm, int bit, Kind kind) {
  Tell(comm, bit, kind, [] { return std::string(); });
}

// A call that goes to PMPI for a reason of its own (its datatype, layout or
// form; Usable counts the others): counted and told, when the fabric is in
// use. Defined in mpi_interposer.cc.
void CallFallsBack(MPI_Comm comm, Reason why, Kind kind);

}  // namespace netfold::mpi

#endif  // NETFOLD_HOST_MPI_INTERPOSER_STATE_H_
