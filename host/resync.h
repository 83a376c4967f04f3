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
//   me.current_input = send;  me.current_written = written;        // allreduce
//   me.last = last_op;  me.last_result_bytes = n;                   // if any
//   me.last_result = KeptResult(last_result, num_slots, slot_bytes);
//   absl::StatusOr<ResyncOutcome> out = Resync(exchange, me);        // collective
//   // kCurrentCompleted: `current` is done (its result written);
//   // kInStep: no member completed `current`: run it again elsewhere.
//
// The protocol (collective over the members):
// 1. The members learn every member's count of completed operations (and
//    of started ones, and what the fabric wrote of the allreduce each is
//    in); lo and hi are the smallest and largest count. More than one
//    apart: FailedPrecondition (each member waits for an operation before
//    starting the next, so that cannot happen to a blocking caller).
// 2. Equal, and every member in an allreduce whose written chunks it knows
//    (WrittenChunks): the members complete it chunk by chunk
//    (RecoverChunks): a chunk whose result reached some member is handed to
//    the others, and only the chunks whose result reached no member, whose
//    inputs are therefore still where the caller put them, are reduced
//    again. So an in-place allreduce needs no copy of its input. Equal
//    otherwise: in step; the callers run `current` again from its input.
// 3. Otherwise operation lo completed on the members "ahead" only. The
//    first of them shares its kind, root and result size.
// 4. Allreduce and allgather: it shares what it kept of the result, its
//    last K x P bytes (KeptResult says why they suffice); the members
//    "behind" write them at the end of their current operation's result,
//    whose earlier bytes the fabric already wrote. A bcast with one root:
//    the root shares them instead, the only member that keeps them
//    (BcastRootKeeps), or, when it is behind itself, all of its buffer.
//    Reduce: if the root is behind, the members reduce again at the root
//    the end of their inputs the root may lack (KeptInput: the members
//    ahead kept that much of theirs); reduce-scatter (every member a root)
//    always reduces again, all of it. Barrier: nothing.
// 5. The members behind count operation lo as completed. Every member now
//    stands at its next operation; a caller that can (ResyncMember::
//    second_round) runs the protocol again, as members in step.
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
  // Every member's `mine` (as many values at each member), member after
  // member, into `all`.
  virtual absl::Status AllgatherCounts(std::span<const uint64_t> mine,
                                       std::vector<uint64_t>* all) = 0;
  // Member `from`'s `bytes` to every member; every member passes a buffer
  // of the same size.
  virtual absl::Status Share(int from, std::span<uint8_t> bytes) = 0;
  // The bitwise OR of every member's `bytes` (the same size at each), into
  // `bytes`.
  virtual absl::Status OrAll(std::span<uint8_t> bytes) = 0;
  // The allreduce this member is in (its type and op), run again over
  // `bytes` bytes of its elements: from `in` into `out`; in == out is in
  // place. Every member passes the same size.
  virtual absl::Status AllreduceAgain(const uint8_t* in, uint8_t* out, size_t bytes) = 0;
  // Reduces the operation in doubt again, at its root, from every member's
  // input, its bytes from `from` to the end (the root already holds the
  // results before them; a multiple of the element size): a member
  // `behind` takes them from the operation it is in, a member ahead from
  // its record of its last operation (KeptInput).
  virtual absl::Status ReduceAgain(bool behind, size_t from) = 0;
};

// The root of an operation in blocks, each rooted at its member
// (allgather: a bcast per block; reduce-scatter: a reduce per block).
inline constexpr uint32_t kEveryMember = UINT32_MAX;

// An operation as the protocol needs to know it.
struct ResyncOp {
  proto::CollectiveType collective = proto::CollectiveType::kBarrier;
  uint32_t root = 0;  // member rank (reduce, bcast), or kEveryMember
};

// Which chunks of an allreduce's result the fabric had written into a
// member's buffer when it failed (GroupEngine::Written): chunk i is bytes
// [i x chunk_bytes, (i + 1) x chunk_bytes) of the vector (the last one
// shorter). Every chunk before first_missing was written, and chunk
// first_missing + i where window[i]. A chunk is written whole or not at all.
struct WrittenChunks {
  size_t chunk_bytes = 0;
  size_t first_missing = 0;
  std::vector<bool> window;

  bool Has(size_t chunk) const {
    return chunk < first_missing ||
           (chunk - first_missing < window.size() && window[chunk - first_missing]);
  }
  // One past the last chunk written (0: none).
  size_t End() const {
    size_t end = window.size();
    while (end > 0 && !window[end - 1]) --end;
    return end > 0 ? first_missing + end : first_missing;
  }
  // From one flag per chunk of the vector (written[i]: chunk i was).
  static WrittenChunks Of(const std::vector<bool>& written, size_t chunk_bytes) {
    WrittenChunks w;
    w.chunk_bytes = chunk_bytes;
    while (w.first_missing < written.size() && written[w.first_missing]) ++w.first_missing;
    size_t end = written.size();
    while (end > w.first_missing && !written[end - 1]) --end;
    w.window.assign(written.begin() + static_cast<std::ptrdiff_t>(w.first_missing),
                    written.begin() + static_cast<std::ptrdiff_t>(end));
    return w;
  }
};

// One member's side.
struct ResyncMember {
  int rank = 0;
  int size = 1;
  uint64_t completed = 0;  // operations this member completed; updated
  // Operations this member started (completed, in progress, and `current`),
  // for callers that start one before the last completes; Resync sets
  // most_started to the largest count of any member (step 1).
  uint64_t started = 0;
  uint64_t most_started = 0;
  // The operation this member is in (the first it did not complete), if
  // any, and where its result goes (allreduce, bcast).
  std::optional<ResyncOp> current;
  std::span<uint8_t> current_result;
  // An allreduce in `current`: where its input is (current_result itself
  // when in place) and which chunks the fabric wrote of its result. Without
  // them the caller must be able to run `current` again from its input.
  std::span<const uint8_t> current_input;
  std::optional<WrittenChunks> current_written;
  // Without current_written: whether the fabric may have written part of
  // `current`'s result over its input (in place), so that it cannot be run
  // again from it.
  bool current_input_unsure = false;
  // The caller runs Resync again when it sets another_round: Group::Failover
  // at once, at every member; the MPI interposer at the members ahead, whom
  // the others meet in that operation in their turn.
  bool second_round = false;
  // Set by Resync when some members were behind: every member now stands
  // at its next operation, which may have been written in part at some
  // members (nonblocking callers start one before the last completes); a
  // second round resolves it as members in step.
  bool another_round = false;
  // Set when `current` was completed chunk by chunk: the bytes reduced
  // again (the rest came from the fabric's results).
  std::optional<size_t> reduced_again;
  // This member's last completed operation, the size of its result
  // (allreduce, bcast) and the end of that result it kept (KeptResult):
  // what it gives members behind.
  ResyncOp last;
  size_t last_result_bytes = 0;
  std::span<const uint8_t> last_result;
  // A reduce: the size of its input and how many bytes of its end the
  // member kept (KeptInput; all of a reduce-scatter's).
  size_t last_input_bytes = 0;
  size_t last_input_kept = 0;
};

// What a member keeps of each completed result for the members behind: its
// last K x P bytes (K slots of P bytes, the group's), not all of it. A
// member posts chunk s + K only after the result of every chunk up to s has
// landed in its buffer (host/group_engine.h). So when one member has
// completed an operation whose last chunk is L, every member posted L and
// already holds the results of every chunk up to L - K: what a member behind
// lacks is among the operation's last K chunks, and chunks follow the
// vector (blocks in order), so those are the last bytes of the result, at
// most K x P of them. A 16 MiB allreduce keeps 504 KiB (the default 128 x
// 4032) instead of a copy of 16 MiB. K and P may be any bound at least the
// group's (the job's quota); 0 for either keeps the whole result.
inline std::span<const uint8_t> KeptResult(std::span<const uint8_t> result, uint32_t num_slots,
                                           uint32_t slot_bytes) {
  const size_t window = size_t{num_slots} * slot_bytes;
  return window == 0 ? result : result.last(std::min(result.size(), window));
}

// Whether a member keeps the end of a bcast it completed: only its root
// does. Every member's result is the root's input, which the root holds
// whole until it completes (the fabric writes nothing into a bcast root's
// buffer) and keeps the end of after (KeptResult): so when some members
// are behind, the root gives them what they lack, from its buffer if it is
// behind itself, from its record if not (Resync). The others would keep
// the same bytes for nothing: a copy of K x P bytes per bcast at every
// member but one. An allgather (a bcast per block, root kEveryMember)
// keeps everywhere.
inline bool BcastRootKeeps(uint32_t root, uint32_t member_rank) {
  return root == kEveryMember || root == member_rank;
}

// What a member keeps of a reduce's input for a root behind: its last
// 2K x P bytes, rounded up to whole elements of `element_bytes`. A rank
// other than the root may count a reduce complete once it posted the last
// chunk L (the MPI interposer returns then). It posted L only after the
// results of every chunk up to L - K reached it, so every member had posted
// L - K, the root among them, which then held the results of every chunk up
// to L - 2K: a root behind lacks only results among the last 2K chunks,
// each at most P bytes. The members reduce those bytes again (ReduceAgain
// from the input's size less what was kept); the root's buffer holds the
// fabric's results before them. K, P or element_bytes 0 keeps everything.
// The root itself need keep nothing: when it is behind its input is still
// its current operation's, and when it is ahead nobody reduces again.
inline std::span<const uint8_t> KeptInput(std::span<const uint8_t> input, uint32_t num_slots,
                                          uint32_t slot_bytes, size_t element_bytes) {
  if (num_slots == 0 || slot_bytes == 0 || element_bytes == 0) return input;
  const size_t window = 2 * size_t{num_slots} * slot_bytes;
  const size_t whole = (window + element_bytes - 1) / element_bytes * element_bytes;
  return input.last(std::min(input.size(), whole));
}

enum class ResyncOutcome {
  kInStep,            // no member is behind; `current` (if any) completed nowhere
  kCurrentCompleted,  // this member was behind: `current` is now complete
};

// What each member tells the others first (Resync, step 1).
struct ResyncCounts {
  static constexpr size_t kValues = 6;
  static constexpr uint64_t kUnknown = UINT64_MAX;  // no WrittenChunks
  uint64_t completed = 0;
  uint64_t first_missing = kUnknown;  // of current_written
  uint64_t end = 0;  // WrittenChunks::End; without them 1 if current_input_unsure
  uint64_t chunk_bytes = 0;
  uint64_t total_bytes = 0;  // of current_result
  uint64_t started = 0;

  static ResyncCounts Of(const ResyncMember& m) {
    ResyncCounts c{.completed = m.completed, .started = m.started};
    if (!m.current_written && m.current_input_unsure) c.end = 1;  // counts as written
    if (m.current_written) {
      c.first_missing = m.current_written->first_missing;
      c.end = m.current_written->End();
      c.chunk_bytes = m.current_written->chunk_bytes;
      c.total_bytes = m.current_result.size();
    }
    return c;
  }
  static ResyncCounts At(const std::vector<uint64_t>& all, size_t member) {
    const uint64_t* v = all.data() + member * kValues;
    return {v[0], v[1], v[2], v[3], v[4], v[5]};
  }
};

// Resync, step 2: every member is in the same allreduce and knows which of
// its chunks the fabric wrote. A chunk written anywhere was posted by every
// member; a member posts chunk c only after the results of every chunk up to
// c - K reached it (c - N x K with N channels: host/channels.h), so every
// chunk written anywhere lies below lo + K (lo + N x K), lo the smallest
// first_missing, and every member has the chunks below lo. The
// members OR together, for each chunk of [lo, hi) (hi: one past the last
// chunk written anywhere), a bit saying it was written and its bytes from
// those that have it (the same bits at each: the fabric's result is one);
// the chunks no member has still hold their inputs everywhere and are
// reduced again, those of [lo, hi) packed into one buffer, the rest of the
// vector in place.
inline absl::Status RecoverChunks(ResyncExchange& exchange, ResyncMember& member, size_t cb,
                                  uint64_t lo, uint64_t hi) {
  const WrittenChunks& mine = *member.current_written;
  const size_t total = member.current_result.size();
  const auto chunk = [&](size_t c) {
    const size_t off = std::min(total, c * cb);
    return std::pair<size_t, size_t>{off, std::min(cb, total - off)};
  };
  const size_t n = hi > lo ? static_cast<size_t>(hi - lo) : 0, flags = (n + 7) / 8;
  std::vector<uint8_t> shared(flags + n * cb, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!mine.Has(lo + i)) continue;
    shared[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    const auto [off, len] = chunk(lo + i);
    std::memcpy(shared.data() + flags + i * cb, member.current_result.data() + off, len);
  }
  if (n > 0) NETFOLD_RETURN_IF_ERROR(exchange.OrAll(shared));
  std::vector<size_t> nowhere;  // chunks of [lo, hi) no member has
  for (size_t i = 0; i < n; ++i) {
    const auto [off, len] = chunk(lo + i);
    if ((shared[i / 8] >> (i % 8) & 1) == 0) {
      nowhere.push_back(lo + i);
    } else if (!mine.Has(lo + i)) {
      std::memcpy(member.current_result.data() + off, shared.data() + flags + i * cb, len);
    }
  }
  if (!nowhere.empty()) {
    std::vector<uint8_t> packed;
    packed.reserve(nowhere.size() * cb);
    for (size_t c : nowhere) {
      const auto [off, len] = chunk(c);
      packed.insert(packed.end(), member.current_input.begin() + off,
                    member.current_input.begin() + off + len);
    }
    NETFOLD_RETURN_IF_ERROR(exchange.AllreduceAgain(packed.data(), packed.data(), packed.size()));
    size_t at = 0;
    for (size_t c : nowhere) {
      const auto [off, len] = chunk(c);
      std::memcpy(member.current_result.data() + off, packed.data() + at, len);
      at += len;
    }
  }
  const size_t rest = chunk(static_cast<size_t>(std::max(hi, lo))).first;
  if (rest < total) {
    NETFOLD_RETURN_IF_ERROR(exchange.AllreduceAgain(member.current_input.data() + rest,
                                                    member.current_result.data() + rest,
                                                    total - rest));
  }
  size_t again = total - rest;
  for (size_t c : nowhere) again += chunk(c).second;
  member.reduced_again = again;
  return absl::OkStatus();
}

// Header-only, so that the MPI interposer, which links libnetfold.so and
// sees only its C API, runs the same code.
inline absl::StatusOr<ResyncOutcome> Resync(ResyncExchange& exchange, ResyncMember& member) {
  if (member.current_written &&
      (!member.current || member.current->collective != proto::CollectiveType::kAllreduce ||
       (member.current_written->chunk_bytes == 0 && member.current_written->End() > 0) ||
       member.current_input.size() != member.current_result.size())) {
    member.current_written.reset();  // not usable: as if the caller had not said
  }
  const ResyncCounts counts = ResyncCounts::Of(member);
  const uint64_t mine[ResyncCounts::kValues] = {counts.completed,   counts.first_missing,
                                                counts.end,         counts.chunk_bytes,
                                                counts.total_bytes, counts.started};
  std::vector<uint64_t> values;
  NETFOLD_RETURN_IF_ERROR(exchange.AllgatherCounts(mine, &values));
  if (values.size() != static_cast<size_t>(member.size) * ResyncCounts::kValues) {
    return absl::InternalError("resync: the exchange returned a count per member of another group");
  }
  std::vector<uint64_t> all(static_cast<size_t>(member.size));
  bool all_know = true, written_somewhere = false, same_shape = true;
  uint64_t first_missing = UINT64_MAX, end = 0, chunk_bytes = 0;
  member.most_started = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const ResyncCounts c = ResyncCounts::At(values, i);
    all[i] = c.completed;
    member.most_started = std::max(member.most_started, c.started);
    if (c.first_missing == ResyncCounts::kUnknown) {
      all_know = false;
      written_somewhere = written_somewhere || c.end > 0;  // unsure
      continue;
    }
    first_missing = std::min(first_missing, c.first_missing);
    end = std::max(end, c.end);
    const ResyncCounts first = ResyncCounts::At(values, 0);  // known when all are
    same_shape = same_shape && c.total_bytes == first.total_bytes;
    if (c.end == 0) continue;  // nothing written: its chunk size need not be known
    same_shape = same_shape && (chunk_bytes == 0 || c.chunk_bytes == chunk_bytes);
    written_somewhere = true;
    chunk_bytes = c.chunk_bytes;
  }
  const auto hi_it = std::max_element(all.begin(), all.end());  // the first member ahead
  const uint64_t lo = *std::min_element(all.begin(), all.end()), hi = *hi_it;
  if (hi == lo) {
    if (all_know) {
      if (!same_shape) {
        return absl::FailedPreconditionError(
            "resync: the members are in allreduces of different sizes or chunks");
      }
      NETFOLD_RETURN_IF_ERROR(RecoverChunks(exchange, member, chunk_bytes, first_missing, end));
      ++member.completed;
      return ResyncOutcome::kCurrentCompleted;
    }
    if (written_somewhere) {
      return absl::FailedPreconditionError(
          "resync: the fabric wrote part of an allreduce's result at some members, and others "
          "cannot say what it wrote of theirs: it cannot be run again");
    }
    return ResyncOutcome::kInStep;
  }
  // Operation lo completed on the members ahead only; the first of them
  // describes it.
  const int ahead = static_cast<int>(hi_it - all.begin());
  const bool behind = member.completed == lo;
  if (behind && !member.current) {
    return absl::InternalError("resync: this member is behind but in no operation");
  }
  const bool last_reduce = member.last.collective == proto::CollectiveType::kReduce;
  uint64_t desc[4] = {static_cast<uint64_t>(member.last.collective), member.last.root,
                      last_reduce ? member.last_input_bytes : member.last_result_bytes,
                      last_reduce ? member.last_input_kept : member.last_result.size()};
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
    const uint64_t whole = desc[2];
    uint64_t kept = desc[3];
    // A bcast with one root: the root gives (BcastRootKeeps), from its
    // record when it is ahead, from its buffer, which holds its input
    // whole, when it is behind. Any other result: the first member ahead.
    const bool from_root = kind == proto::CollectiveType::kBcast && root != kEveryMember;
    if (from_root && root >= all.size()) {
      return absl::InternalError("resync: the bcast's root is no member");
    }
    const int giver = from_root ? static_cast<int>(root) : ahead;
    std::span<const uint8_t> given = member.last_result;
    if (from_root) {
      if (member.rank == giver && behind) given = member.current_result;
      uint64_t size = given.size();
      NETFOLD_RETURN_IF_ERROR(exchange.Share(
          giver, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&size), sizeof(size))));
      kept = size;
    }
    if (kept > whole) {  // every member sees it
      return absl::InternalError(absl::StrFormat(
          "resync: the member ahead kept %d bytes of a %d-byte result", kept, whole));
    }
    std::vector<uint8_t> tail(kept, 0);
    if (member.rank == giver) std::copy(given.end() - kept, given.end(), tail.begin());
    NETFOLD_RETURN_IF_ERROR(exchange.Share(giver, tail));
    // Checked after the share, which every member takes part in.
    if (behind && whole != member.current_result.size()) {
      return absl::InternalError(absl::StrFormat(
          "resync: the members ahead completed a %d-byte result, this member is in one of %d bytes",
          whole, member.current_result.size()));
    }
    // (A root behind gave its own buffer: nothing to write.)
    if (behind && !tail.empty() && member.rank != giver) {
      std::memcpy(member.current_result.data() + (whole - kept), tail.data(), tail.size());
    }
  } else if (kind == proto::CollectiveType::kReduce) {
    // The input's size and what the members ahead kept of its end
    // (KeptInput): the root behind holds every result before it.
    const uint64_t whole = desc[2], kept = desc[3];
    if (kept > whole) {  // every member sees it
      return absl::InternalError(absl::StrFormat(
          "resync: the member ahead kept %d bytes of a %d-byte reduce input", kept, whole));
    }
    // A reduce-scatter's roots are every member, some of them behind; its
    // members keep all of their input.
    if (root == kEveryMember) {
      NETFOLD_RETURN_IF_ERROR(exchange.ReduceAgain(behind, whole - kept));
    } else if (root >= all.size()) {
      return absl::InternalError("resync: the reduce's root is no member");
    } else if (all[root] == lo) {
      NETFOLD_RETURN_IF_ERROR(exchange.ReduceAgain(behind, whole - kept));
    }
  }
  member.another_round = true;
  if (!behind) {
    // Ahead, and already in the next operation: without a second round the
    // caller runs it again from its input, which must still be whole.
    if (!member.second_round && (member.current_written ? member.current_written->End() > 0
                                                        : member.current_input_unsure)) {
      return absl::FailedPreconditionError(
          "resync: this member's next allreduce was partly written by the fabric while other "
          "members had not completed the one before: it cannot be run again (wait for each "
          "operation before starting the next to fail over safely)");
    }
    return ResyncOutcome::kInStep;
  }
  member.completed = hi;
  return ResyncOutcome::kCurrentCompleted;
}


}  // namespace netfold::host

#endif  // NETFOLD_HOST_RESYNC_H_
