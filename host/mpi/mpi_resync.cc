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
#include <optional>
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
#include "host/mpi/mpi_nonblocking.h"
#include "host/resync.h"
#include "netfold/netfold.h"

namespace netfold::mpi {
namespace {

absl::Status FromMpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat("%s failed (MPI error %d)", what, rc));
}

// Calls to a recovery. A rank whose last operation on a communicator
// completed (the non-roots of a reduce return once their input has left)
// learns that the fabric failed under it only at its next operation
// there. If it first waits in another communicator for a rank that waits
// for it in this one's recovery, neither moves. So a rank entering a
// recovery calls the others to it: a message on the private duplicate
// with how many operations it had completed there. A rank waiting in any
// recovery (or in a communicator's last check) takes the calls on the
// other communicators, and joins a recovery if it started the operation a
// caller is in: at once with nothing outstanding there, else by
// completing its outstanding operations (AnswerCalls). A rank that has not
// started it does not: the others wait in that recovery for it to run the
// operation in doubt, which it reaches in its own order. The first
// exchange carries whether each rank called, so every call is received by
// its end (TakeCalls).
constexpr int kCallTag = 28262;  // on the private duplicates only, which carry no other message

// The communicator goes to MPI after a failure this rank met (`why`).
void LeaveTheFabric(CommState* s, const std::string& why) {
  s->pmpi_reason = kFabricError;
  s->pmpi_detail = why;
  s->calls_on_mpi = 0;
  if (s->next_try == 0) s->next_try = static_cast<uint64_t>(G().config.retry_after);
  s->mode = CommState::Mode::kPmpi;
}

void CallTheOthers(CommState* s) {
  if (s->called) return;
  s->called = true;
  s->completed_when_called = s->completed;
  s->calls_sent.reserve(static_cast<size_t>(s->size));
  for (int r = 0; r < s->size; ++r) {
    if (r == s->rank) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (PMPI_Isend(&s->completed_when_called, 1, MPI_UINT64_T, r, kCallTag, s->oob, &request) ==
        MPI_SUCCESS) {
      s->calls_sent.push_back(request);
    }
  }
}

void TakeCall(CommState* s, int from) {
  s->calls.resize(static_cast<size_t>(s->size));
  std::optional<uint64_t>& call = s->calls[static_cast<size_t>(from)];
  if (call) return;
  uint64_t completed = 0;
  PMPI_Recv(&completed, 1, MPI_UINT64_T, from, kCallTag, s->oob, MPI_STATUS_IGNORE);
  call = completed;
}

// After the first exchange: `callers[r]` is whether rank r called.
void TakeCalls(CommState* s, const std::vector<bool>& callers) {
  for (int r = 0; r < s->size; ++r) {
    if (callers[static_cast<size_t>(r)] && r != s->rank) TakeCall(s, r);
  }
  if (!s->calls_sent.empty()) {
    PMPI_Waitall(static_cast<int>(s->calls_sent.size()), s->calls_sent.data(),
                 MPI_STATUSES_IGNORE);
    s->calls_sent.clear();
  }
}

// A rank that called this one on `c` and is in an operation this rank
// started (completed, or outstanding), or -1.
int CallerBehind(CommState* c) {
  for (size_t r = 0; r < c->calls.size(); ++r) {
    if (c->calls[r] && *c->calls[r] < c->started) return static_cast<int>(r);
  }
  return -1;
}

// While this rank waits in the recovery of another communicator (and
// holds no communicator's state but those in recovery): takes the calls
// on each communicator it still counts on the fabric, and if a caller is
// in an operation this rank started there, joins the recovery: at once
// with nothing outstanding there (so it is in no operation on it), else by
// completing its outstanding operations. Not under MPI_THREAD_MULTIPLE,
// where another thread may be in the communicator. Joins nest: the joined recovery's
// wait answers calls too. Two ranks cannot nest two communicators in
// opposite orders (each ahead in the one the other recovers): each would
// have run the two communicators' operations in the other's order, which
// MPI's rule for collectives (no deadlock whether or not they
// synchronise) forbids.
void AnswerCalls() {
  Global& g = G();
  if (!g.one_thread) return;
  std::vector<std::pair<uintptr_t, CommState*>> comms;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (auto& [k, c] : g.comms) comms.emplace_back(k, c.get());
  }
  for (const auto& [k, c] : comms) {
    // Not where the ranks have met in a recovery already: a call kept
    // from it is over.
    if (c->group == nullptr || !OnFabric(c) || c->in_recovery || c->last_to_recover) continue;
    int behind = -1;
    bool outstanding = false;
    {
      std::unique_lock<std::mutex> lock(c->nb_mu, std::try_to_lock);
      if (!lock.owns_lock()) continue;
      // At most one call from each member (CallTheOthers sends once).
      for (int i = 0, called = 1; called && i < c->size; ++i) {
        MPI_Status status;
        if (PMPI_Iprobe(MPI_ANY_SOURCE, kCallTag, c->oob, &called, &status) != MPI_SUCCESS) break;
        if (called) TakeCall(c, status.MPI_SOURCE);
      }
      behind = CallerBehind(c);
      outstanding = !c->outstanding.empty();
    }
    if (behind < 0) continue;
    if (outstanding) {
      // This rank started the operation the caller is in: completing it
      // here (it failed, or completes) takes this rank into the recovery
      // as its own failure would.
      FinishOutstanding(c);
      continue;
    }
    ++g.recoveries_joined;
    NETFOLD_LOG(kInfo) << "netfold-mpi: rank " << g.world_rank << ": rank " << behind
                       << " of a communicator of " << c->size
                       << " met a fabric failure there; joining its recovery while waiting in "
                          "another communicator's";
    LeaveTheFabric(c, "another rank met a fabric failure");
    MPI_Comm comm = MPI_COMM_NULL;
    std::memcpy(&comm, &k, sizeof(comm));
    (void)Resync(comm, c, nullptr);  // a failure there is said there
  }
}

// Every exchange of a recovery is a nonblocking collective on the private
// duplicate, polled here with calls answered meanwhile (AnswerCalls): a
// rank away in a recovery it joined from this one's wait does not leave
// the others blocked in an exchange that answers nothing. A rank that has
// met a failure here waits at most NETFOLD_MPI_RESYNC_TIMEOUT_S for the
// others, then aborts the job, saying why: one that had completed the
// operation may wait for it where the interposer does not see (a
// point-to-point operation, a collective that does not go to the fabric).
// A rank that has met none (MPI_Comm_free, MPI_Finalize) waits as long as
// MPI's own collectives would (`with_deadline` false), as do the ranks
// meeting to try the fabric again (ReturnToTheFabric). (Nonblocking at
// every rank: MPI matches a nonblocking collective only with another.)
absl::Status Await(CommState* s, MPI_Request* request, const char* what,
                   bool with_deadline) {
  const int timeout_s = G().config.resync_timeout_s;
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  // Polls at most every 10 ms in a recovery, every 1 ms otherwise (the
  // ranks' last check of a communicator, at MPI_Comm_free).
  const useconds_t most = with_deadline ? 10000 : 1000;
  for (useconds_t pause = 20;; pause = std::min<useconds_t>(2 * pause, most)) {
    int done = 0;
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Test(request, &done, MPI_STATUS_IGNORE), what));
    if (done) return absl::OkStatus();
    AnswerCalls();
    if (with_deadline && absl::Now() > deadline) break;
    usleep(pause);
  }
  std::fprintf(stderr,
               "netfold-mpi: rank %d: the other ranks of a communicator of %d did not join "
               "the recovery from a fabric failure within %d s "
               "(NETFOLD_MPI_RESYNC_TIMEOUT_S): one that had completed the operation may be "
               "waiting for this rank outside the recoveries, in a point-to-point operation "
               "or a collective that does not go to the fabric (docs/mpi.md, \"When the "
               "fabric fails mid-run\"); aborting the job\n",
               G().world_rank, s->size, timeout_s);
  PMPI_Abort(MPI_COMM_WORLD, 1);
  return absl::DeadlineExceededError("resync: the other ranks did not join");
}

// Re-runs `p` on MPI itself, on `s`'s private duplicate (Await).
absl::Status RunOnPmpi(CommState* s, Pending& p) {
  MPI_Comm comm = s->oob;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  std::vector<int> displs;
  switch (p.kind) {
    case kAllreduce:
      // No member knows of a chunk the fabric wrote (host/resync.h): the
      // buffers are as the callers passed them.
      rc = PMPI_Iallreduce(p.sendbuf, p.recvbuf, p.count, p.type, p.op, comm, &request);
      break;
    case kReduce:
      if (p.sendbuf == MPI_IN_PLACE) {
        std::memcpy(p.recvbuf, p.saved_input.data(), p.saved_input.size());
      }
      rc = PMPI_Ireduce(p.sendbuf, p.recvbuf, p.count, p.type, p.op, p.root, comm, &request);
      break;
    case kBcast:
      rc = PMPI_Ibcast(p.recvbuf, p.count, p.type, p.root, comm, &request);
      break;
    case kAllgather:
      // Contiguous buffers packed in rank order (the fabric took no other),
      // moved as bytes.
      displs.assign(p.counts.size(), 0);
      for (size_t r = 1; r < displs.size(); ++r) displs[r] = displs[r - 1] + p.counts[r - 1];
      rc = PMPI_Iallgatherv(p.sendbuf, p.counts.at(static_cast<size_t>(s->rank)), MPI_BYTE,
                            p.recvbuf, p.counts.data(), displs.data(), MPI_BYTE, comm, &request);
      break;
    case kReduceScatter:
      if (p.sendbuf == MPI_IN_PLACE) {
        std::memcpy(p.recvbuf, p.saved_input.data(), p.saved_input.size());
      }
      rc = PMPI_Ireduce_scatter(p.sendbuf, p.recvbuf, p.counts.data(), p.type, p.op, comm,
                                &request);
      break;
    case kBarrier:
    default:
      rc = PMPI_Ibarrier(comm, &request);
      break;
  }
  NETFOLD_RETURN_IF_ERROR(FromMpi(rc, "the re-run"));
  return Await(s, &request, "the re-run", !OnFabric(s));
}

// The failover's exchanges (host/resync.h), over MPI itself on the
// communicator's private duplicate.
class MpiResyncExchange : public netfold::host::ResyncExchange {
 public:
  MpiResyncExchange(CommState* s, Pending* current) : s_(s), current_(current) {}

  // The first exchange, where a rank waits for the others to reach the
  // recovery, which they do when they meet the failure themselves or
  // answer this rank's call (AnswerCalls), as it answers theirs while it
  // waits (Await).
  absl::Status AllgatherCounts(std::span<const uint64_t> mine,
                               std::vector<uint64_t>* all) override {
    // Each rank's counts, then whether it called the others.
    const size_t n = mine.size() + 1;
    std::vector<uint64_t> sent(mine.begin(), mine.end());
    sent.push_back(s_->called ? 1 : 0);
    std::vector<uint64_t> got(static_cast<size_t>(s_->size) * n, 0);
    MPI_Request request = MPI_REQUEST_NULL;
    NETFOLD_RETURN_IF_ERROR(FromMpi(
        PMPI_Iallgather(sent.data(), static_cast<int>(n), MPI_UINT64_T, got.data(),
                        static_cast<int>(n), MPI_UINT64_T, s_->oob, &request),
        "MPI_Iallgather"));
    NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Iallgather"));
    all->clear();
    std::vector<bool> callers(static_cast<size_t>(s_->size));
    for (size_t r = 0; r < callers.size(); ++r) {
      all->insert(all->end(), got.begin() + r * n, got.begin() + r * n + mine.size());
      callers[r] = got[r * n + mine.size()] != 0;
    }
    TakeCalls(s_, callers);
    return absl::OkStatus();
  }

  absl::Status OrAll(std::span<uint8_t> bytes) override {
    for (size_t done = 0; done < bytes.size();) {
      const int n = static_cast<int>(std::min<size_t>(bytes.size() - done, INT32_MAX));
      MPI_Request request = MPI_REQUEST_NULL;
      NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Iallreduce(MPI_IN_PLACE, bytes.data() + done, n,
                                                      MPI_BYTE, MPI_BOR, s_->oob, &request),
                                      "MPI_Iallreduce"));
      NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Iallreduce"));
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
      MPI_Request request = MPI_REQUEST_NULL;
      NETFOLD_RETURN_IF_ERROR(FromMpi(
          PMPI_Iallreduce(from, out + done, static_cast<int>(part / elem), current_->type,
                          current_->op, s_->oob, &request),
          "MPI_Iallreduce"));
      NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Iallreduce"));
      done += part;
    }
    return absl::OkStatus();
  }

  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    for (size_t done = 0; done < bytes.size();) {
      const int n = static_cast<int>(std::min<size_t>(bytes.size() - done, INT32_MAX));
      MPI_Request request = MPI_REQUEST_NULL;
      NETFOLD_RETURN_IF_ERROR(FromMpi(
          PMPI_Ibcast(bytes.data() + done, n, MPI_BYTE, from, s_->oob, &request), "MPI_Ibcast"));
      NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Ibcast"));
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
    MPI_Request request = MPI_REQUEST_NULL;
    NETFOLD_RETURN_IF_ERROR(FromMpi(
        PMPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, s_->oob, &request),
        "MPI_Igather"));
    NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Igather"));
    std::vector<int> displs(static_cast<size_t>(s_->size), 0);
    int total = 0;
    for (int r = 0; r < s_->size; ++r) {
      displs[r] = total;
      total += sizes[r];
    }
    std::vector<uint8_t> gathered(s_->rank == root ? static_cast<size_t>(total) : 0);
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Igatherv(in.data(), n, MPI_BYTE, gathered.data(),
                                                  sizes.data(), displs.data(), MPI_BYTE, root,
                                                  s_->oob, &request),
                                    "MPI_Igatherv"));
    NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Igatherv"));
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
  // Await, with the deadline once this rank has met a failure here.
  absl::Status Wait(MPI_Request* request, const char* what) {
    return Await(s_, request, what, !OnFabric(s_));
  }

  absl::Status ReduceScatterAgain(std::span<const uint8_t> in, bool behind) {
    const int n = static_cast<int>(in.size());
    std::vector<int> sizes(static_cast<size_t>(s_->size));
    MPI_Request request = MPI_REQUEST_NULL;
    NETFOLD_RETURN_IF_ERROR(FromMpi(
        PMPI_Iallgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, s_->oob, &request),
        "MPI_Iallgather"));
    NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Iallgather"));
    std::vector<int> displs(static_cast<size_t>(s_->size), 0);
    int total = 0;
    for (int r = 0; r < s_->size; ++r) {
      displs[r] = total;
      total += sizes[r];
    }
    std::vector<uint8_t> gathered(static_cast<size_t>(total));
    NETFOLD_RETURN_IF_ERROR(FromMpi(PMPI_Iallgatherv(in.data(), n, MPI_BYTE, gathered.data(),
                                                     sizes.data(), displs.data(), MPI_BYTE,
                                                     s_->oob, &request),
                                    "MPI_Iallgatherv"));
    NETFOLD_RETURN_IF_ERROR(Wait(&request, "MPI_Iallgatherv"));
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

int ResyncOnce(MPI_Comm comm, CommState* s, Pending* current) {
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
  const absl::Status rerun = RunOnPmpi(s, *current);
  if (!rerun.ok()) return MPI_ERR_OTHER;
  ++s->completed;
  return MPI_SUCCESS;
}

}  // namespace

int Resync(MPI_Comm comm, CommState* s, Pending* current) {
  // A rank that has met a failure here calls the others to the recovery.
  if (!OnFabric(s)) CallTheOthers(s);
  s->in_recovery = true;
  const int rc = ResyncOnce(comm, s, current);
  s->in_recovery = false;
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
    LeaveTheFabric(s, absl::StrFormat("%s failed: %s: %s", kKindNames[p.kind],
                                      netfold_strerror(netfold_rc), why));
    Tell(comm, kFabricError, p.kind, [&] { return s->pmpi_detail; });
    // Every rank's own line, at info: NETFOLD_MPI_VERBOSE's line above is
    // rank 0's, once per communicator.
    NETFOLD_LOG(kInfo) << "netfold-mpi: rank " << g.world_rank << ": " << kKindNames[p.kind]
                       << " failed on the fabric (" << netfold_strerror(netfold_rc) << ": "
                       << why << "); re-running on MPI";
  }
  return Resync(comm, s, &p);
}

bool ReturnToTheFabric(MPI_Comm comm, CommState* s, bool nonblocking) {
  Global& g = G();
  if (s->next_try == 0) return false;
  if (s->calls_on_mpi < s->next_try) ++s->calls_on_mpi;
  // At a blocking call only: a nonblocking one must not wait for the
  // others. MPI matches blocking calls with blocking ones, so every rank
  // tries in the same call.
  if (s->calls_on_mpi < s->next_try || nonblocking) return false;
  ++g.tries;
  const uint64_t after = s->next_try;
  s->calls_on_mpi = 0;
  s->next_try = std::min<uint64_t>(2 * s->next_try, uint64_t{1} << 40);
  // The ranks meet first, answering calls meanwhile: one may be needed in
  // another communicator's recovery before it can come here.
  MPI_Request request = MPI_REQUEST_NULL;
  if (!FromMpi(PMPI_Ibarrier(s->oob, &request), "MPI_Ibarrier").ok() ||
      !Await(s, &request, "MPI_Ibarrier", /*with_deadline=*/false).ok()) {
    return false;
  }
  FinishOutstanding(s);  // operations up to the last to recover, failed early
  {
    std::lock_guard<std::mutex> lock(s->nb_mu);
    if (s->group != nullptr) netfold_group_destroy(s->group);
    s->group = nullptr;
    s->started = s->completed = 0;
    s->last = LastOp{};
    s->called = false;
    s->calls.clear();
    // No operation goes the fabric's way until the new group is made.
    s->last_to_recover = 0;
  }
  if (CreateGroup(comm, s) != NETFOLD_SUCCESS) {
    s->group = nullptr;
    s->pmpi_detail = absl::StrFormat("no group after %llu calls on MPI: %s",
                                     static_cast<unsigned long long>(after),
                                     netfold_last_error());
    NETFOLD_LOG(kInfo) << "netfold-mpi: rank " << g.world_rank << ": a communicator of "
                       << s->size << " stays on MPI: " << s->pmpi_detail;
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(s->nb_mu);
    s->last_to_recover.reset();
    s->mode = CommState::Mode::kFabric;
  }
  ++g.returned;
  Tell(comm, kReturnedBit, kAllreduce, [&] {
    return absl::StrFormat("after %llu calls on MPI", static_cast<unsigned long long>(after));
  });
  NETFOLD_LOG(kInfo) << "netfold-mpi: rank " << g.world_rank << ": a communicator of " << s->size
                     << " is back on the fabric after " << after << " calls on MPI";
  return true;
}

}  // namespace netfold::mpi
