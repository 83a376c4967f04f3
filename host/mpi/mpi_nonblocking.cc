#include "host/mpi/mpi_nonblocking.h"

#include <unistd.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/mpi/mpi_resync.h"

namespace netfold::mpi {

// One nonblocking operation on the fabric, owned by its generalized
// request: deleted when MPI frees the request (FreeRequest).
struct NbOp {
  MPI_Comm comm = MPI_COMM_NULL;
  CommState* s = nullptr;
  Pending p;
  netfold_request_t nr = nullptr;  // null once complete, or if it never started
  int start_rc = NETFOLD_SUCCESS;  // why it never started
  std::string start_error;         // and libnetfold's message
  MPI_Request req = MPI_REQUEST_NULL;
  std::atomic<bool> done{false};
  int error = MPI_SUCCESS;  // the outcome the request reports
};

namespace {

int QueryRequest(void* extra, MPI_Status* status) {
  const NbOp* op = static_cast<const NbOp*>(extra);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = op->error;
  return op->error;
}

int FreeRequest(void* extra) {
  NbOp* op = static_cast<NbOp*>(extra);
  Global& g = G();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.requests.erase(Key(op->req)) > 0) g.num_requests.fetch_sub(1);
  }
  if (op->nr != nullptr) netfold_request_free(op->nr);  // waits, if ever still running
  delete op;
  return MPI_SUCCESS;
}

int CancelRequest(void*, int) { return MPI_SUCCESS; }  // collectives cannot be cancelled

// The operation behind `request`, if it is one of ours.
NbOp* Ours(MPI_Request request) {
  Global& g = G();
  if (request == MPI_REQUEST_NULL || g.num_requests.load() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g.mu);
  auto it = g.requests.find(Key(request));
  return it == g.requests.end() ? nullptr : it->second;
}

// Completes `op`, the oldest outstanding operation of its communicator, if
// libnetfold is done with it (`wait`: waits until it is). False: running.
bool CompleteOldest(NbOp* op, bool wait) {
  int rc = op->start_rc;
  std::string why = op->start_rc == NETFOLD_SUCCESS ? "" : op->start_error;
  if (op->nr != nullptr) {
    rc = wait ? netfold_request_wait(op->nr) : netfold_request_test(op->nr);
    if (rc == NETFOLD_ERR_IN_PROGRESS) return false;
    if (rc != NETFOLD_SUCCESS) why = netfold_last_error();
    if (rc != NETFOLD_SUCCESS && op->p.kind == kAllreduce) NoteWritten(op->p, op->nr);
    netfold_request_free(op->nr);
    op->nr = nullptr;
  } else if (rc != NETFOLD_SUCCESS && op->p.kind == kAllreduce) {
    NoteWritten(op->p, nullptr);  // it never started: nothing written
  }
  op->s->outstanding.pop_front();
  op->done = true;
  if (rc == NETFOLD_SUCCESS) {
    Completed(op->s, op->p);
    // The fabric completed it here after this rank had met a failure under
    // the communicator: it is among the operations the ranks recover in
    // turn (CommState::last_to_recover), the others in a resync, which this
    // rank takes part in with it complete.
    if (!OnFabric(op->s)) op->error = Resync(op->comm, op->s, nullptr);
  } else {
    op->error = Recover(op->comm, op->s, op->p, rc, why);
  }
  PMPI_Grequest_complete(op->req);
  return true;
}

// Completes `op` and the operations of its communicator started before it
// (`wait`: waits for them). False if one is still running, or (not
// waiting) if another thread is completing the communicator's operations.
bool Finish(NbOp* op, bool wait) {
  std::unique_lock<std::mutex> lock(op->s->nb_mu, std::defer_lock);
  if (wait) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return false;
  }
  if (op->done) return true;
  std::deque<NbOp*>& outstanding = op->s->outstanding;
  while (!outstanding.empty()) {
    NbOp* oldest = outstanding.front();
    if (!CompleteOldest(oldest, wait)) return false;
    if (oldest == op) return true;
  }
  return op->done;
}

// Completes what is done among `requests` (ours; others are MPI's).
// Returns how many of ours are still running.
int TestOurs(int count, const MPI_Request* requests) {
  int running = 0;
  for (int i = 0; i < count; ++i) {
    if (NbOp* op = Ours(requests[i]); op != nullptr && !Finish(op, false)) ++running;
  }
  return running;
}

// When every live request of `requests` is ours: the first one still
// running (the caller may block on it: the fabric moves without MPI).
// Null if one is MPI's, or none of ours is running.
NbOp* FirstRunningIfAllOurs(int count, const MPI_Request* requests) {
  NbOp* first = nullptr;
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    NbOp* op = Ours(requests[i]);
    if (op == nullptr) return nullptr;
    if (first == nullptr && !op->done) first = op;
  }
  return first;
}

// Between two looks at a mix of our requests and MPI's.
void Pause() { usleep(100); }

}  // namespace

int StartNonblocking(MPI_Comm comm, CommState* s, Pending p,
                     absl::FunctionRef<int(netfold_request_t*)> start, MPI_Request* request) {
  auto op = std::make_unique<NbOp>();
  op->comm = comm;
  op->s = s;
  op->p = std::move(p);
  const bool on_fabric = OnFabric(s);
  const int rc = on_fabric ? start(&op->nr) : kFailedEarlier;
  if (rc != NETFOLD_SUCCESS && on_fabric) op->start_error = netfold_last_error();
  int err = PMPI_Grequest_start(QueryRequest, FreeRequest, CancelRequest, op.get(), request);
  if (err != MPI_SUCCESS) {
    if (rc == NETFOLD_SUCCESS) netfold_request_free(op->nr);  // waits for it
    return err;
  }
  op->req = *request;
  NbOp* raw = op.release();
  if (rc != NETFOLD_SUCCESS) {
    // Not started: recovered in its turn, after the operations started
    // before it (recovering it now would pair it, in the ranks' exchange,
    // with an earlier operation another rank is recovering).
    raw->nr = nullptr;
    raw->start_rc = rc;
  }
  {
    std::lock_guard<std::mutex> lock(s->nb_mu);
    s->outstanding.push_back(raw);
  }
  Global& g = G();
  std::lock_guard<std::mutex> lock(g.mu);
  g.requests[Key(raw->req)] = raw;
  g.num_requests.fetch_add(1);
  return MPI_SUCCESS;
}

void FinishOutstanding(CommState* s) {
  std::lock_guard<std::mutex> lock(s->nb_mu);
  while (!s->outstanding.empty()) CompleteOldest(s->outstanding.front(), /*wait=*/true);
}

}  // namespace netfold::mpi

using netfold::mpi::Finish;
using netfold::mpi::FirstRunningIfAllOurs;
using netfold::mpi::NbOp;
using netfold::mpi::Ours;
using netfold::mpi::Pause;
using netfold::mpi::TestOurs;

// The MPI_Wait/Test family: our requests are completed (or found still
// running) before MPI sees them; everything else is MPI's.
extern "C" {

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (NbOp* op = Ours(*request)) Finish(op, /*wait=*/true);
  return PMPI_Wait(request, status);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (NbOp* op = Ours(*request); op != nullptr && !Finish(op, /*wait=*/false)) {
    *flag = 0;
    return MPI_SUCCESS;
  }
  return PMPI_Test(request, flag, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  for (int i = 0; i < count; ++i) {
    if (NbOp* op = Ours(requests[i])) Finish(op, /*wait=*/true);
  }
  return PMPI_Waitall(count, requests, statuses);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (TestOurs(count, requests) > 0) {
    *flag = 0;  // not all complete: nothing changes, as MPI_Testall promises
    return MPI_SUCCESS;
  }
  return PMPI_Testall(count, requests, flag, statuses);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  TestOurs(count, requests);
  return PMPI_Testany(count, requests, index, flag, status);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  TestOurs(incount, requests);
  return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

// Ours complete only when looked at: look, let MPI look, until one is
// done. With only ours left, block on the first (libnetfold's deadline
// bounds it); with a mix, look again every 100 us.
int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  while (TestOurs(count, requests) > 0) {
    int flag = 0;
    const int rc = PMPI_Testany(count, requests, index, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    if (NbOp* op = FirstRunningIfAllOurs(count, requests)) {
      Finish(op, /*wait=*/true);
    } else {
      Pause();
    }
  }
  return PMPI_Waitany(count, requests, index, status);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  while (TestOurs(incount, requests) > 0) {
    const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    if (rc != MPI_SUCCESS || *outcount > 0) return rc;
    if (NbOp* op = FirstRunningIfAllOurs(incount, requests)) {
      Finish(op, /*wait=*/true);
    } else {
      Pause();
    }
  }
  return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  if (NbOp* op = Ours(request); op != nullptr && !Finish(op, /*wait=*/false)) {
    *flag = 0;
    return MPI_SUCCESS;
  }
  return PMPI_Request_get_status(request, flag, status);
}

int MPI_Request_free(MPI_Request* request) {
  // MPI frees an active request once it completes; ours complete only when
  // looked at, so complete it now.
  if (NbOp* op = Ours(*request)) Finish(op, /*wait=*/true);
  return PMPI_Request_free(request);
}

}  // extern "C"
