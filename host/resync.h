// After the fabric fails under a group, its members may disagree on how
// many operations completed: the result of the last one may have reached
// some members and not others. This is the protocol that brings them back
// in step, written once for both users: a libnetfold group failing over to
// the host algorithms (host/group.cc) and the MPI interposer falling back
// to MPI itself (host/mpi/mpi_resync.cc). Each supplies the exchanges
// over whatever still works (ResyncExchange).
//
//   ResyncMember me{.rank = r, .size = n, .completed = completed};
//   me.current = ResyncOp{kAllreduce, 0};  me.current_result = recv;  // if in one
//   me.last = last_op;  me.last_result_bytes = n;                   // if any
//   me.last_result = KeptResult(last_result, num_slots, slot_bytes);
//   absl::StatusOr<ResyncOutcome> out = Resync(exchange, me);        // collective
//   // kCurrentCompleted: `current` is done (its result written);
//   // kInStep: no member completed `current`: run it again elsewhere.
//
// The protocol (collective over the members):
// 1. The members learn every member's count of completed operations; lo
//    and hi are the smallest and largest. Equal: in step. More than one
//    apart: FailedPrecondition (each member waits for an operation before
//    starting the next, so that cannot happen to a blocking caller).
// 2. Otherwise operation lo completed on the members "ahead" only. The
//    first of them shares its kind, root and result size.
// 3. Allreduce and bcast (allgather too): it shares what it kept of the
//    result, its last K x P bytes (KeptResult says why they suffice); the
//    members "behind" write them at the end of their current operation's
//    result, whose earlier bytes the fabric already wrote.
//    Reduce: if the root is behind, the members reduce again at the root
//    from their inputs (the ahead members kept theirs); reduce-scatter
//    (every member a root) always reduces again. Barrier: nothing.
// 4. The members behind count operation lo as completed.
//
// Thread-safety: none; one thread per member runs it. Header-only (see
// Resync below).
#ifndef NETFOLD_HOST_RESYNC_H_
#define NETFOLD_HOST_RESYNC_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/aggregation_header.h"

namespace netfold::host {

// The exchanges among the members, over anything but the failed fabric.
class ResyncExchange {
 public:
  virtual ~ResyncExchange() = default;
  // Every member's `mine`, in member order, into `all`.
  virtual absl::Status AllgatherCount(uint64_t mine, std::vector<uint64_t>* all) = 0;
  // Member `from`'s `bytes` to every member; every member passes a buffer
  // of the same size.
  virtual absl::Status Share(int from, std::span<uint8_t> bytes) = 0;
  // Reduces the operation in doubt again, at its root, from every member's
  // input: a member `behind` takes it from the operation it is in, a member
  // ahead from its record of its last operation.
  virtual absl::Status ReduceAgain(bool behind) = 0;
};

// The root of an operation in blocks, each rooted at its member
// (allgather: a bcast per block; reduce-scatter: a reduce per block).
inline constexpr uint32_t kEveryMember = UINT32_MAX;

// An operation as the protocol needs to know it.
struct ResyncOp {
  proto::CollectiveType collective = proto::CollectiveType::kBarrier;
  uint32_t root = 0;  // member rank (reduce, bcast), or kEveryMember
};

// One member's side.
struct ResyncMember {
  int rank = 0;
  int size = 1;
  uint64_t completed = 0;  // operations this member completed; updated
  // The operation this member is in (the first it did not complete), if
  // any, and where its result goes (allreduce, bcast).
  std::optional<ResyncOp> current;
  std::span<uint8_t> current_result;
  // This member's last completed operation, the size of its result
  // (allreduce, bcast) and the end of that result it kept (KeptResult):
  // what it gives members behind.
  ResyncOp last;
  size_t last_result_bytes = 0;
  std::span<const uint8_t> last_result;
};

// What a member keeps of each completed result for the members behind: its
// last K x P bytes (K slots of P bytes, the group's), not all of it. A
// member posts chunk s + K only after the result of every chunk up to s has
// landed in its buffer (host/group_engine.h). So when one member has
// completed an operation whose last chunk is L, every member posted L and
// already holds the results of every chunk up to L - K: what a member behind
// lacks is among the operation's last K chunks, and chunks follow the
// vector (blocks in order), so those are the last bytes of the result, at
// most K x P of them. A 16 MiB allreduce keeps 252 KiB (the default 64 x
// 4032) instead of a copy of 16 MiB. K and P may be any bound at least the
// group's (the job's quota); 0 for either keeps the whole result.
inline std::span<const uint8_t> KeptResult(std::span<const uint8_t> result, uint32_t num_slots,
                                           uint32_t slot_bytes) {
  const size_t window = size_t{num_slots} * slot_bytes;
  return window == 0 ? result : result.last(std::min(result.size(), window));
}

enum class ResyncOutcome {
  kInStep,            // no member is behind; `current` (if any) completed nowhere
  kCurrentCompleted,  // this member was behind: `current` is now complete
};

// Header-only, so that the MPI interposer, which links libnetfold.so and
// sees only its C API, runs the same code.
inline absl::StatusOr<ResyncOutcome> Resync(ResyncExchange& exchange, ResyncMember& member) {
  std::vector<uint64_t> all;
  NETFOLD_RETURN_IF_ERROR(exchange.AllgatherCount(member.completed, &all));
  if (all.size() != static_cast<size_t>(member.size)) {
    return absl::InternalError("resync: the exchange returned a count per member of another group");
  }
  const auto hi_it = std::max_element(all.begin(), all.end());  // the first member ahead
  const uint64_t lo = *std::min_element(all.begin(), all.end()), hi = *hi_it;
  if (hi == lo) return ResyncOutcome::kInStep;
  if (hi > lo + 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the members completed between %d and %d operations: only one operation apart can be "
        "recovered (wait for each operation before starting the next to fail over safely)",
        lo, hi));
  }
  // Operation lo completed on the members ahead only; the first of them
  // describes it.
  const int ahead = static_cast<int>(hi_it - all.begin());
  const bool behind = member.completed == lo;
  if (behind && !member.current) {
    return absl::InternalError("resync: this member is behind but in no operation");
  }
  uint64_t desc[4] = {static_cast<uint64_t>(member.last.collective), member.last.root,
                      member.last_result_bytes, member.last_result.size()};
  NETFOLD_RETURN_IF_ERROR(exchange.Share(
      ahead, std::span<uint8_t>(reinterpret_cast<uint8_t*>(desc), sizeof(desc))));
  const auto kind = static_cast<proto::CollectiveType>(desc[0]);
  const uint32_t root = static_cast<uint32_t>(desc[1]);
  if (behind && (member.current->collective != kind ||
                 ((kind == proto::CollectiveType::kReduce ||
                   kind == proto::CollectiveType::kBcast) &&
                  member.current->root != root))) {
    return absl::InternalError(
        "resync: the members ahead completed another operation than the one this member is in");
  }
  if (kind == proto::CollectiveType::kAllreduce || kind == proto::CollectiveType::kBcast) {
    const uint64_t whole = desc[2], kept = desc[3];
    if (kept > whole) {  // every member sees it
      return absl::InternalError(absl::StrFormat(
          "resync: the member ahead kept %d bytes of a %d-byte result", kept, whole));
    }
    std::vector<uint8_t> tail(kept, 0);
    if (member.rank == ahead) {
      std::copy(member.last_result.begin(), member.last_result.end(), tail.begin());
    }
    NETFOLD_RETURN_IF_ERROR(exchange.Share(ahead, tail));
    // Checked after the share, which every member takes part in.
    if (behind && whole != member.current_result.size()) {
      return absl::InternalError(absl::StrFormat(
          "resync: the members ahead completed a %d-byte result, this member is in one of %d bytes",
          whole, member.current_result.size()));
    }
    if (behind && !tail.empty()) {
      std::memcpy(member.current_result.data() + (whole - kept), tail.data(), tail.size());
    }
  } else if (kind == proto::CollectiveType::kReduce) {
    // A reduce-scatter's roots are every member, some of them behind.
    if (root == kEveryMember) {
      NETFOLD_RETURN_IF_ERROR(exchange.ReduceAgain(behind));
    } else if (root >= all.size()) {
      return absl::InternalError("resync: the reduce's root is no member");
    } else if (all[root] == lo) {
      NETFOLD_RETURN_IF_ERROR(exchange.ReduceAgain(behind));
    }
  }
  if (!behind) return ResyncOutcome::kInStep;
  member.completed = hi;
  return ResyncOutcome::kCurrentCompleted;
}


}  // namespace netfold::host

#endif  // NETFOLD_HOST_RESYNC_H_
