// libnetfold_mpi's failover (docs/mpi.md; host/mpi/mpi_resync.h): the
// exchanges of host/resync.h over MPI itself, on the communicator's private
// duplicate, and the re-run on PMPI_ of an operation no rank completed.
#include "host/mpi/mpi_resync.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/resync.h"
#include "netfold/netfold.h"

namespace netfold::mpi {
namespace {

int RunOnPmpi(MPI_Comm comm, Pending& p) {
  switch (p.kind) {
    case kAllreduce:
      // No member knows of a chunk the fabric wrote (host/resync.h): the
      // buffers are as the callers passed them.
      return PMPI_Allreduce(p.sendbuf, p.recvbuf, p.count, p.type, p.op, comm);
    case kReduce:
      if (p.sendbuf == MPI_IN_PLACE) {
        std::memcpy(p.recvbuf, p.saved_input.data(), p.saved_input.size());
      }
      return PMPI_Reduce(p.sendbuf, p.recvbuf, p.count, p.type, p.op, p.root, comm);
    case kBcast:
      return PMPI_Bcast(p.recvbuf, p.count, p.type, p.root, comm);
    case kAllgather: {
      // Contiguous buffers packed in rank order (the fabric took no other),
      // moved as bytes.
      int rank = 0;
      PMPI_Comm_rank(comm, &rank);
      std::vector<int> displs(p.counts.size(), 0);
      for (size_t r = 1; r < displs.size(); ++r) displs[r] = displs[r - 1] + p.counts[r - 1];
      return PMPI_Allgatherv(p.sendbuf, p.counts.at(static_cast<size_t>(rank)), MPI_BYTE,
                             p.recvbuf, p.counts.data(), displs.data(), MPI_BYTE, comm);
    }
    case kReduceScatter:
      if (p.sendbuf == MPI_IN_PLACE) {
        std::memcpy(p.recvbuf, p.saved_input.data(), p.saved_input.size());
      }
      return PMPI_Reduce_scatter(p.sendbuf, p.recvbuf, p.counts.data(), p.type, p.op, comm);
    case kBarrier:
    default:
      return PMPI_Barrier(comm);
  }
}

absl::Status FromMpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat("%s failed (MPI error %d)", what, rc));
}

// The failover's exchanges (host/resync.h), over MPI itself on the
// communicator's private duplicate.
class MpiResyncExchange : public netfold::host::ResyncExchange {
 public:
  MpiResyncExchange(CommState* s, Pending* current) : s_(s), current_(current) {}

  // The first exchange, where a rank waits for the others to reach the
  // recovery, which they do only when they meet the failure themselves.
  // A rank that was ahead of this one, its operation complete (the
  // non-roots of a reduce return once their input has left), meets it at
  // its next operation on the communicator, which may come much later; or
  // never, if it waits first in another communicator for this rank. So
  // the wait has a deadline, NETFOLD_MPI_RESYNC_TIMEOUT_S, past which the
  // job is aborted with the reason rather than left hanging. Not at a
  // rank that has met no failure (MPI_Comm_free, MPI_Finalize): it waits
  // for the others as long as MPI's own collectives would. (Nonblocking
  // at every rank: MPI matches a nonblocking collective only with another.)
  absl::Status AllgatherCounts(std::span<const uint64_t> mine,
                               std::vector<uint64_t>* all) override {
    const int n = static_cast<int>(mine.size());
    all->assign(static_cast<size_t>(s_->size) * mine.size(), 0);
    MPI_Request request = MPI_REQUEST_NULL;
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Iallgather(mine.data(), n, MPI_UINT64_T, all->data(), n,
                                                    MPI_UINT64_T, s_->oob, &request),
                                    "MPI_Iallgather"));
    if (OnFabric(s_)) return FromMpi(PMPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    const int timeout_s = G().config.resync_timeout_s;
    const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
    for (useconds_t pause = 20;; pause = std::min<useconds_t>(2 * pause, 10000)) {
      int done = 0;
      NETFOLD_RETURN_IF_ERROR(
          FromMpi(PMPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
      if (done) return absl::OkStatus();
      if (absl::Now() > deadline) break;
      usleep(pause);
    }
    std::fprintf(stderr,
                 "netfold-mpi: rank %d: the other ranks of a communicator of %d did not join "
                 "the recovery from a fabric failure within %d s "
                 "(NETFOLD_MPI_RESYNC_TIMEOUT_S): one that had completed the operation may be "
                 "waiting for this rank in another communicator (docs/mpi.md, \"When the "
                 "fabric fails mid-run\"); aborting the job\n",
                 G().world_rank, s_->size, timeout_s);
    PMPI_Abort(MPI_COMM_WORLD, 1);
    return absl::DeadlineExceededError("resync: the other ranks did not join");
  }

  absl::Status OrAll(std::span<uint8_t> bytes) override {
    for (size_t done = 0; done < bytes.size();) {
      const int n = static_cast<int>(std::min<size_t>(bytes.size() - done, INT32_MAX));
      NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Allreduce(MPI_IN_PLACE, bytes.data() + done, n,
                                                     MPI_BYTE, MPI_BOR, s_->oob),
                                      "MPI_Allreduce"));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // On MPI itself, with the operation's type and op, in pieces MPI's int
  // count can hold.
  absl::Status AllreduceAgain(const uint8_t* in, uint8_t* out, size_t bytes) override {
    const size_t elem = Bytes(current_->type, 1);
    const size_t most = (size_t{INT32_MAX} / elem) * elem;
    for (size_t done = 0; done < bytes;) {
      const size_t part = std::min(bytes - done, most);
      const void* from = in == out ? MPI_IN_PLACE : static_cast<const void*>(in + done);
      NETFOLD_RETURN_IF_ERROR(FromMpi(
          PMPI_Allreduce(from, out + done, static_cast<int>(part / elem), current_->type,
                         current_->op, s_->oob),
          "MPI_Allreduce"));
      done += part;
    }
    return absl::OkStatus();
  }

  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    for (size_t done = 0; done < bytes.size();) {
      const int n = static_cast<int>(std::min<size_t>(bytes.size() - done, INT32_MAX));
      NETFOLD_RETURN_IF_ERROR(
          FromMpi(PMPI_Bcast(bytes.data() + done, n, MPI_BYTE, from, s_->oob), "MPI_Bcast"));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // The root gathers every rank's input from `from` on (the ranks ahead
  // kept that end of theirs) and reduces them itself, in rank order. A
  // reduce-scatter's roots are every rank: each gets every input and those
  // behind reduce their block.
  absl::Status ReduceAgain(bool behind, size_t from) override {
    std::span<const uint8_t> in;
    int root = s_->last.root;
    size_t whole = s_->last.input_bytes;
    if (behind) {
      root = current_->root;
      whole = Bytes(current_->type, current_->count);
      in = {static_cast<const uint8_t*>(current_->sendbuf == MPI_IN_PLACE
                                            ? current_->saved_input.data()
                                            : current_->sendbuf),
            whole};
    } else {
      in = s_->last.input;
    }
    const Kind kind = behind ? current_->kind : s_->last.kind;
    const size_t elem = behind ? Bytes(current_->type, 1) : 1;  // the root (behind) reduces
    if (from > whole || in.size() < whole - from || (behind && from % elem != 0) ||
        (from > 0 && kind == kReduceScatter)) {
      return absl::InternalError(absl::StrFormat(
          "resync: cannot reduce bytes %d.. of a %d-byte reduce from %d bytes of input", from,
          whole, in.size()));
    }
    in = in.last(whole - from);
    if (kind == kReduceScatter) return ReduceScatterAgain(in, behind);
    if (behind && s_->rank == root) {
      delivered = from;  // the fabric's results before `from` stand
      reduced = whole - from;
    }
    const int n = static_cast<int>(in.size());
    std::vector<int> sizes(static_cast<size_t>(s_->size));
    NETFOLD_RETURN_IF_ERROR(
        FromMpi(PMPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, s_->oob), "MPI_Gather"));
    std::vector<int> displs(static_cast<size_t>(s_->size), 0);
    int total = 0;
    for (int r = 0; r < s_->size; ++r) {
      displs[r] = total;
      total += sizes[r];
    }
    std::vector<uint8_t> gathered(s_->rank == root ? static_cast<size_t>(total) : 0);
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Gatherv(in.data(), n, MPI_BYTE, gathered.data(),
                                                 sizes.data(), displs.data(), MPI_BYTE, root,
                                                 s_->oob),
                                    "MPI_Gatherv"));
    if (s_->rank != root || current_ == nullptr) return absl::OkStatus();
    // acc = x_0 op (x_1 op (... op x_{n-1})): MPI_Reduce_local computes
    // inoutbuf = inbuf op inoutbuf.
    const size_t last = static_cast<size_t>(s_->size - 1);
    std::vector<uint8_t> acc(gathered.begin() + displs[last],
                             gathered.begin() + displs[last] + sizes[last]);
    const int count = static_cast<int>(in.size() / elem);
    for (int r = s_->size - 2; r >= 0; --r) {
      NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Reduce_local(gathered.data() + displs[r], acc.data(),
                                                        count, current_->type, current_->op),
                                      "MPI_Reduce_local"));
    }
    std::memcpy(static_cast<uint8_t*>(current_->recvbuf) + from, acc.data(), acc.size());
    return absl::OkStatus();
  }

  // At a reduce's root behind, after ReduceAgain: the bytes the fabric had
  // delivered and the bytes reduced again.
  size_t delivered = 0, reduced = 0;

 private:
  absl::Status ReduceScatterAgain(std::span<const uint8_t> in, bool behind) {
    const int n = static_cast<int>(in.size());
    std::vector<int> sizes(static_cast<size_t>(s_->size));
    NETFOLD_RETURN_IF_ERROR(FromMpi(
        PMPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, s_->oob), "MPI_Allgather"));
    std::vector<int> displs(static_cast<size_t>(s_->size), 0);
    int total = 0;
    for (int r = 0; r < s_->size; ++r) {
      displs[r] = total;
      total += sizes[r];
    }
    std::vector<uint8_t> gathered(static_cast<size_t>(total));
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Allgatherv(in.data(), n, MPI_BYTE, gathered.data(),
                                                    sizes.data(), displs.data(), MPI_BYTE,
                                                    s_->oob),
                                    "MPI_Allgatherv"));
    if (!behind) return absl::OkStatus();
    // This rank's block of every input, reduced in rank order as above.
    const std::vector<int>& counts = current_->counts;
    const size_t elem = Bytes(current_->type, 1);
    size_t first = 0;
    for (int r = 0; r < s_->rank; ++r) first += static_cast<size_t>(counts[r]) * elem;
    const size_t mine = static_cast<size_t>(counts[s_->rank]) * elem;
    const size_t last = static_cast<size_t>(s_->size - 1);
    if (mine == 0) return absl::OkStatus();
    std::vector<uint8_t> acc(gathered.begin() + displs[last] + first,
                             gathered.begin() + displs[last] + first + mine);
    for (int r = s_->size - 2; r >= 0; --r) {
      NETFOLD_RETURN_IF_ERROR(FromMpi(
          PMPI_Reduce_local(gathered.data() + displs[r] + first, acc.data(),
                            counts[s_->rank], current_->type, current_->op),
          "MPI_Reduce_local"));
    }
    std::memcpy(current_->recvbuf, acc.data(), acc.size());
    return absl::OkStatus();
  }

  CommState* s_;
  Pending* current_;
};

static_assert(static_cast<int>(netfold::proto::CollectiveType::kAllreduce) == kAllreduce &&
              static_cast<int>(netfold::proto::CollectiveType::kReduce) == kReduce &&
              static_cast<int>(netfold::proto::CollectiveType::kBcast) == kBcast &&
              static_cast<int>(netfold::proto::CollectiveType::kBarrier) == kBarrier);

// The operation as host/resync.h knows it: an allgather is a bcast and a
// reduce-scatter a reduce in blocks, each rooted at its member.
netfold::host::ResyncOp AsResyncOp(Kind kind, int root) {
  using netfold::proto::CollectiveType;
  switch (kind) {
    case kAllgather:
      return {CollectiveType::kBcast, netfold::host::kEveryMember};
    case kReduceScatter:
      return {CollectiveType::kReduce, netfold::host::kEveryMember};
    default:
      return {static_cast<CollectiveType>(kind), static_cast<uint32_t>(root)};
  }
}

}  // namespace

int Resync(MPI_Comm comm, CommState* s, Pending* current) {
  netfold::host::ResyncMember me{
      .rank = s->rank, .size = s->size, .completed = s->completed, .started = s->started};
  if (current != nullptr) {
    me.current = AsResyncOp(current->kind, current->root);
    if (current->kind == kAllreduce || current->kind == kBcast || current->kind == kAllgather) {
      me.current_result = {static_cast<uint8_t*>(current->recvbuf),
                           Bytes(current->type, current->count)};
    }
    // An in-place allreduce whose chunks libnetfold could not say may have
    // been written over: it must not be run again from its buffer.
    me.current_input_unsure = current->kind == kAllreduce && !current->knows_written &&
                              current->sendbuf == MPI_IN_PLACE;
    if (current->kind == kAllreduce && current->knows_written) {
      const netfold_written_t& w = current->written;
      netfold::host::WrittenChunks chunks{.chunk_bytes = w.chunk_bytes,
                                          .first_missing = w.first_missing};
      chunks.window.resize(NETFOLD_WRITTEN_WINDOW);
      for (size_t i = 0; i < chunks.window.size(); ++i) {
        chunks.window[i] = (w.window[i / 64] >> (i % 64) & 1) != 0;
      }
      me.current_written = std::move(chunks);
      me.current_input = current->sendbuf == MPI_IN_PLACE
                             ? std::span<const uint8_t>(me.current_result)
                             : std::span<const uint8_t>(
                                   static_cast<const uint8_t*>(current->sendbuf),
                                   me.current_result.size());
    }
  }
  me.last = AsResyncOp(s->last.kind, s->last.root);
  me.last_result_bytes = s->last.result_bytes;
  me.last_result = s->last.result;
  me.last_input_bytes = s->last.input_bytes;
  me.last_input_kept = s->last.input.size();
  // This rank may be ahead, in the operation after the one others have not
  // completed: it meets them again in it (below).
  me.second_round = current != nullptr;
  MpiResyncExchange exchange(s, current);
  absl::StatusOr<netfold::host::ResyncOutcome> outcome = netfold::host::Resync(exchange, me);
  // What any rank had started when the ranks first met here: those
  // operations are recovered in turn, every later one runs on MPI
  // (CommState::last_to_recover).
  if (outcome.ok() && !s->last_to_recover) s->last_to_recover = me.most_started;
  if (outcome.ok() && *outcome == netfold::host::ResyncOutcome::kInStep && me.another_round &&
      current != nullptr) {
    // Ahead: the others now stand where this rank does, in `current`,
    // which is among the operations to recover, so they reach this point
    // in it in their turn: the ranks resolve it as ranks in step.
    me.another_round = false;
    outcome = netfold::host::Resync(exchange, me);
  }
  if (!outcome.ok()) {
    std::fprintf(stderr, "netfold-mpi: rank %d: cannot recover from a fabric failure: %s\n",
                 G().world_rank, std::string(outcome.status().message()).c_str());
    // Ranks more than one operation apart (or disagreeing on it) cannot be
    // brought back in step; a failed MPI exchange is returned as such.
    if (!absl::IsUnavailable(outcome.status())) PMPI_Abort(comm, 1);
    return MPI_ERR_OTHER;
  }
  if (*outcome == netfold::host::ResyncOutcome::kCurrentCompleted) {
    if (me.reduced_again) {
      G().reduced_again_bytes += *me.reduced_again;
      G().recovered_bytes += me.current_result.size() - *me.reduced_again;
    }
    G().reduced_again_bytes += exchange.reduced;
    G().recovered_bytes += exchange.delivered;
    s->completed = me.completed;
    return MPI_SUCCESS;  // `current` was the operation some ranks missed, now complete
  }
  if (current == nullptr) return MPI_SUCCESS;
  // `current` is an operation no rank completed: every rank re-runs it, on
  // the private duplicate like the rest of the recovery, so that it cannot
  // cross the operations after the last to recover, which run on `comm`
  // itself and may start before it (nonblocking) at some ranks.
  const int rc = RunOnPmpi(s->oob, *current);
  if (rc == MPI_SUCCESS) ++s->completed;
  return rc;
}

void ResyncAtEnd(MPI_Comm comm, CommState* s) {
  if (s->group != nullptr && !s->last_to_recover) (void)Resync(comm, s, nullptr);
}

int Recover(MPI_Comm comm, CommState* s, Pending& p, int netfold_rc, const std::string& why) {
  Global& g = G();
  if (g.config.enable == Enable::kOn) {
    std::fprintf(stderr, "netfold-mpi: rank %d: %s failed on the fabric: %s: %s\n", g.world_rank,
                 kKindNames[p.kind], netfold_strerror(netfold_rc), why.c_str());
    // As MPI itself reports an error: through the communicator's error
    // handler (MPI_ERRORS_ARE_FATAL by default aborts the job), then the
    // code for handlers that return. A bare return code would let a
    // program that does not check it go on with a buffer the operation
    // never wrote.
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
  }
  ++g.fallbacks[kFabricError];
  if (OnFabric(s)) {  // the first failure this rank meets on the communicator
    s->pmpi_reason = kFabricError;
    s->pmpi_detail = absl::StrFormat("%s failed: %s: %s", kKindNames[p.kind],
                                     netfold_strerror(netfold_rc), why);
    Tell(comm, kFabricError, p.kind, [&] { return s->pmpi_detail; });
    // Every rank's own line, at info: NETFOLD_MPI_VERBOSE's line above is
    // rank 0's, once per communicator.
    NETFOLD_LOG(kInfo) << "netfold-mpi: rank " << g.world_rank << ": " << kKindNames[p.kind]
                       << " failed on the fabric (" << netfold_strerror(netfold_rc) << ": "
                       << why << "); re-running on MPI";
    s->mode = CommState::Mode::kPmpi;
  }
  return Resync(comm, s, &p);
}

}  // namespace netfold::mpi
