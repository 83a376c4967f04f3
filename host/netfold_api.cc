// The C API (host/include/netfold/netfold.h) over host::Context and host::Group.
// Every entry point validates its arguments, converts absl::Status to a
// netfold_status_t and records the message for netfold_last_error().
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "host/context.h"
#include "host/error_codes.h"
#include "reduce/reduce.h"
#include "netfold/netfold.h"

using netfold::host::CallbackOob;
using netfold::host::CollectiveArgs;
using netfold::host::Context;
using netfold::host::ContextOptions;
using netfold::host::Group;
using netfold::host::OpId;
using netfold::host::ToErrorCode;

struct netfold_context {
  std::unique_ptr<Context> impl;
  std::unique_ptr<CallbackOob> world;
  pid_t pid = getpid();  // the process whose threads serve it
};

struct netfold_group {
  netfold_context* ctx;
  std::unique_ptr<Group> impl;
  std::unique_ptr<CallbackOob> oob;
  pid_t pid = getpid();
};

struct netfold_request {
  netfold_group* group;
  OpId id;
  bool done;
  int result;
  // An allreduce's chunks the fabric wrote (netfold_request_written).
  std::optional<netfold::host::WrittenChunks> written = std::nullopt;
};

namespace {

thread_local std::string g_last_error;

int Fail(const absl::Status& s) {
  g_last_error = std::string(s.message());
  const int code = ToErrorCode(s);
  NETFOLD_LOG(kDebug) << "netfold: " << netfold::host::ErrorCodeName(code) << ": " << s.message();
  return code;
}

// A context belongs to the process that made it: its threads (progress,
// control) do not exist in a child of fork(), whose copy must not be used.
int ForkedChild(pid_t owner) {
  if (getpid() == owner) return NETFOLD_SUCCESS;
  g_last_error =
      "this process is a fork() child of the one that created the netfold context; only that "
      "process may use it (a child may create a context of its own)";
  return NETFOLD_ERR_UNAVAILABLE;
}

int Invalid(const std::string& what) {
  g_last_error = what;
  return NETFOLD_ERR_INVALID_ARGUMENT;
}

int Ok() {
  g_last_error.clear();
  return NETFOLD_SUCCESS;
}

bool ValidDtype(int d) {
  return netfold::proto::IsValidDataType(static_cast<uint8_t>(d > 0 && d < 256 ? d : 0));
}
bool ValidOp(int o) {
  return netfold::proto::IsValidReduceOp(static_cast<uint8_t>(o > 0 && o < 256 ? o : 0));
}

// Checks the arguments common to every data-carrying collective.
int CheckData(netfold_group_t group, const void* send, const void* recv, size_t count, int dtype,
              bool needs_send) {
  if (group == nullptr || group->impl == nullptr) return Invalid("group is NULL or destroyed");
  if (int rc = ForkedChild(group->pid); rc != NETFOLD_SUCCESS) return rc;
  if (!ValidDtype(dtype)) return Invalid(absl::StrFormat("unknown data type %d", dtype));
  const size_t size = netfold::proto::DataTypeSize(static_cast<netfold::proto::DataType>(dtype));
  if (count > std::numeric_limits<size_t>::max() / size || count > UINT32_MAX * size_t{64}) {
    return Invalid(absl::StrFormat("count %d is too large", count));
  }
  if (count > 0 && (recv == nullptr || (needs_send && send == nullptr))) {
    return Invalid("a buffer is NULL while count > 0");
  }
  return NETFOLD_SUCCESS;
}

int Start(netfold_group_t group, CollectiveArgs args, netfold_request_t* request) {
  if (request == nullptr) return Invalid("request is NULL");
  *request = nullptr;
  auto id = group->impl->Start(args);
  if (!id.ok()) return Fail(id.status());
  *request = new netfold_request{group, *id, false, NETFOLD_SUCCESS};
  return Ok();
}

int Blocking(netfold_group_t group, CollectiveArgs args) {
  auto id = group->impl->Start(args);
  if (!id.ok()) return Fail(id.status());
  absl::Status s = group->impl->Wait(*id);
  return s.ok() ? Ok() : Fail(s);
}

const void* SendBuffer(const void* sendbuf, void* recvbuf) {
  return sendbuf == NETFOLD_IN_PLACE ? recvbuf : sendbuf;
}

// Allgather (kBcast) and reduce-scatter (kReduce) as operations in blocks,
// one per group rank: `counts[r]` elements, or `count` each when counts is
// NULL. Blocking when `request` is null.
int StartBlocked(netfold_group_t group, netfold::proto::CollectiveType collective,
                 const void* sendbuf, void* recvbuf, const size_t* counts, size_t count,
                 int dtype, int op, netfold_request_t* request) {
  if (group == nullptr || group->impl == nullptr) return Invalid("group is NULL or destroyed");
  const int size = group->impl->size(), rank = group->impl->rank();
  std::vector<size_t> blocks(static_cast<size_t>(size), count);
  if (counts != nullptr) blocks.assign(counts, counts + size);
  size_t total = 0, before = 0;
  for (int r = 0; r < size; ++r) {
    if (blocks[r] > UINT32_MAX * size_t{64} - total) {
      return Invalid(absl::StrFormat("the blocks' counts add up to too many elements"));
    }
    if (r == rank) before = total;
    total += blocks[r];
  }
  const bool allgather = collective == netfold::proto::CollectiveType::kBcast;
  const size_t mine = blocks[static_cast<size_t>(rank)];
  if (sendbuf == NETFOLD_IN_PLACE) {
    // Allgather: this rank's block is already in place in recvbuf.
    // Reduce-scatter: recvbuf holds the whole input, the result goes to
    // its first elements (MPI_Reduce_scatter's MPI_IN_PLACE).
    if (!allgather || recvbuf == nullptr) {
      sendbuf = recvbuf;
    } else {
      const size_t elem = ValidDtype(dtype) ? netfold::proto::DataTypeSize(
                                                  static_cast<netfold::proto::DataType>(dtype))
                                            : 0;
      sendbuf = static_cast<const uint8_t*>(recvbuf) + before * elem;
    }
  }
  // The whole vector lives in recvbuf (allgather) or sendbuf (reduce-scatter).
  if (int rc = CheckData(group, allgather ? recvbuf : sendbuf, allgather ? recvbuf : sendbuf,
                         total, dtype, false);
      rc != NETFOLD_SUCCESS) {
    return rc;
  }
  if (mine > 0 && (allgather ? sendbuf : recvbuf) == nullptr) {
    return Invalid("a buffer is NULL while this rank's block is not empty");
  }
  if (!allgather && !ValidOp(op)) return Invalid(absl::StrFormat("unknown reduction op %d", op));
  CollectiveArgs a{.collective = collective,
                   .dtype = static_cast<netfold::proto::DataType>(dtype),
                   .op = allgather ? netfold::proto::ReduceOp::kSum  // unused
                                   : static_cast<netfold::proto::ReduceOp>(op),
                   .send = sendbuf,
                   .recv = recvbuf,
                   .count = total,
                   .blocks = std::move(blocks)};
  return request != nullptr ? Start(group, std::move(a), request) : Blocking(group, std::move(a));
}

}  // namespace

extern "C" {

int netfold_init(const netfold_init_spec_t* spec, netfold_context_t* ctx) {
  if (ctx == nullptr) return Invalid("ctx is NULL");
  *ctx = nullptr;
  if (spec == nullptr) return Invalid("spec is NULL");
  // Callers built before `integrity` existed pass the struct up to timeout_ms.
  if (spec->struct_size < offsetof(netfold_init_spec_t, integrity)) {
    return Invalid("spec->struct_size is wrong: initialise it with NETFOLD_INIT_SPEC_INITIALIZER");
  }
  if (absl::Status s = CallbackOob::Check(spec->oob); !s.ok()) return Fail(s);
  ContextOptions o;
  o.rank = spec->rank;
  o.world_size = spec->world_size;
  o.manager = spec->manager ? spec->manager : "";
  o.host_name = spec->host_name ? spec->host_name : "";
  if (spec->job_name) o.job_name = spec->job_name;
  if (spec->timeout_ms < 0) return Invalid("timeout_ms must not be negative");
  if (spec->struct_size >= sizeof(netfold_init_spec_t) && spec->integrity != 0) {
    o.integrity = true;
  }
  if (absl::Status s = netfold::host::ApplyEnvironment(&o); !s.ok()) return Fail(s);
  // These two have defaults of their own, which ApplyEnvironment replaces
  // with the environment's: the spec's are set after it, to win.
  if (spec->local_address) o.local_address = spec->local_address;
  if (spec->timeout_ms > 0) o.timeout = absl::Milliseconds(spec->timeout_ms);
  auto c = std::make_unique<netfold_context>();
  c->world = std::make_unique<CallbackOob>(spec->oob, spec->rank, spec->world_size);
  auto impl = Context::Create(o, *c->world);
  if (!impl.ok()) return Fail(impl.status());
  c->impl = std::move(*impl);
  *ctx = c.release();
  return Ok();
}

int netfold_finalize(netfold_context_t ctx) {
  if (ctx == nullptr) return Invalid("ctx is NULL");
  // In a fork() child the context's threads are gone: leave it alone
  // (its destructor would wait for them).
  if (int rc = ForkedChild(ctx->pid); rc != NETFOLD_SUCCESS) return rc;
  absl::Status s = ctx->impl->Finalize(*ctx->world);
  delete ctx;
  return s.ok() ? Ok() : Fail(s);
}

int netfold_query_caps(netfold_context_t ctx, netfold_caps_t* caps) {
  if (ctx == nullptr || caps == nullptr) return Invalid("ctx or caps is NULL");
  std::memset(caps, 0, sizeof(*caps));
  // Chunks in flight per group: K of each of its channels (what a
  // failover's record must cover, host/resync.h).
  caps->num_slots = ctx->impl->num_slots() * ctx->impl->channels();
  caps->slot_bytes = ctx->impl->slot_bytes();
  caps->max_groups = ctx->impl->max_groups();
  for (auto t : netfold::proto::kAllDataTypes) caps->dtype_mask |= uint64_t{1} << static_cast<int>(t);
  for (auto o : netfold::proto::kAllReduceOps) caps->op_mask |= 1u << static_cast<int>(o);
  caps->max_count = UINT32_MAX;
  return Ok();
}

int netfold_op_supported(netfold_dtype_t dtype, netfold_op_t op) {
  if (!ValidDtype(dtype) || !ValidOp(op)) return 0;
  return netfold::proto::IsOpAllowed(static_cast<netfold::proto::DataType>(dtype),
                                     static_cast<netfold::proto::ReduceOp>(op))
             ? 1
             : 0;
}

int netfold_group_create(netfold_context_t ctx, const netfold_group_spec_t* spec,
                         netfold_group_t* group) {
  if (group == nullptr) return Invalid("group is NULL");
  *group = nullptr;
  if (ctx == nullptr || spec == nullptr) return Invalid("ctx or spec is NULL");
  if (int rc = ForkedChild(ctx->pid); rc != NETFOLD_SUCCESS) return rc;
  if (spec->struct_size < sizeof(netfold_group_spec_t)) {
    return Invalid("spec->struct_size is wrong: initialise it with NETFOLD_GROUP_SPEC_INITIALIZER");
  }
  if (spec->size <= 0 || spec->rank < 0 || spec->rank >= spec->size) {
    return Invalid(absl::StrFormat("group rank %d of %d is not valid", spec->rank, spec->size));
  }
  if (absl::Status s = CallbackOob::Check(spec->oob); !s.ok()) return Fail(s);
  std::vector<int> world_ranks(static_cast<size_t>(spec->size));
  for (int i = 0; i < spec->size; ++i) world_ranks[i] = spec->world_ranks ? spec->world_ranks[i] : i;
  auto g = std::make_unique<netfold_group>();
  g->ctx = ctx;
  g->oob = std::make_unique<CallbackOob>(spec->oob, spec->rank, spec->size);
  auto impl = ctx->impl->CreateGroup(*g->oob, world_ranks);
  if (!impl.ok()) return Fail(impl.status());
  g->impl = std::move(*impl);
  *group = g.release();
  return Ok();
}

int netfold_group_destroy(netfold_group_t group) {
  if (group == nullptr) return Invalid("group is NULL");
  if (int rc = ForkedChild(group->pid); rc != NETFOLD_SUCCESS) return rc;
  // A group that outlived its context (netfold_finalize first) has nothing
  // left to release, and its context is gone.
  absl::Status s = group->impl == nullptr || group->impl->orphaned()
                       ? absl::OkStatus()
                       : group->ctx->impl->DestroyGroup(std::move(group->impl), *group->oob);
  delete group;
  return s.ok() ? Ok() : Fail(s);
}

int netfold_group_keep_data(netfold_group_t group, void* data, void (*release)(void* data)) {
  if (group == nullptr) return Invalid("group is NULL");
  if (group->impl == nullptr) return Invalid("the group is not valid");
  group->impl->KeepData(data, release);
  return Ok();
}

void* netfold_group_take_data(netfold_group_t group) {
  if (group == nullptr || group->impl == nullptr) return nullptr;
  return group->impl->TakeData();
}

int netfold_allreduce_nb(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                         netfold_dtype_t dtype, netfold_op_t op, netfold_request_t* request) {
  if (int rc = CheckData(group, sendbuf, recvbuf, count, dtype, true); rc != 0) return rc;
  if (!ValidOp(op)) return Invalid(absl::StrFormat("unknown reduction op %d", op));
  CollectiveArgs a{.collective = netfold::proto::CollectiveType::kAllreduce,
                   .dtype = static_cast<netfold::proto::DataType>(dtype),
                   .op = static_cast<netfold::proto::ReduceOp>(op),
                   .send = SendBuffer(sendbuf, recvbuf), .recv = recvbuf, .count = count};
  return Start(group, a, request);
}

int netfold_allreduce(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype, netfold_op_t op) {
  if (int rc = CheckData(group, sendbuf, recvbuf, count, dtype, true); rc != 0) return rc;
  if (!ValidOp(op)) return Invalid(absl::StrFormat("unknown reduction op %d", op));
  return Blocking(group, {.collective = netfold::proto::CollectiveType::kAllreduce,
                          .dtype = static_cast<netfold::proto::DataType>(dtype),
                          .op = static_cast<netfold::proto::ReduceOp>(op),
                          .send = SendBuffer(sendbuf, recvbuf), .recv = recvbuf, .count = count});
}

int netfold_reduce_nb(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype, netfold_op_t op, int root,
                      netfold_request_t* request) {
  // Non-root ranks need no receive buffer; give the engine the send buffer.
  if (recvbuf == nullptr && group != nullptr && group->impl && root != group->impl->rank()) {
    recvbuf = const_cast<void*>(sendbuf);
  }
  if (int rc = CheckData(group, sendbuf, recvbuf, count, dtype, true); rc != 0) return rc;
  if (!ValidOp(op)) return Invalid(absl::StrFormat("unknown reduction op %d", op));
  if (root < 0) return Invalid("root must not be negative");
  CollectiveArgs a{.collective = netfold::proto::CollectiveType::kReduce,
                   .dtype = static_cast<netfold::proto::DataType>(dtype),
                   .op = static_cast<netfold::proto::ReduceOp>(op),
                   .root = static_cast<uint32_t>(root),
                   .send = SendBuffer(sendbuf, recvbuf), .recv = recvbuf, .count = count};
  return Start(group, a, request);
}

int netfold_reduce(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                   netfold_dtype_t dtype, netfold_op_t op, int root) {
  netfold_request_t req = nullptr;
  int rc = netfold_reduce_nb(group, sendbuf, recvbuf, count, dtype, op, root, &req);
  if (rc != NETFOLD_SUCCESS) return rc;
  rc = netfold_request_wait(req);
  const std::string message = g_last_error;
  netfold_request_free(req);
  g_last_error = message;
  return rc;
}

int netfold_bcast_nb(netfold_group_t group, void* buf, size_t count, netfold_dtype_t dtype,
                     int root, netfold_request_t* request) {
  if (int rc = CheckData(group, buf, buf, count, dtype, true); rc != 0) return rc;
  if (root < 0) return Invalid("root must not be negative");
  CollectiveArgs a{.collective = netfold::proto::CollectiveType::kBcast,
                   .dtype = static_cast<netfold::proto::DataType>(dtype),
                   .root = static_cast<uint32_t>(root), .send = buf, .recv = buf,
                   .count = count};
  return Start(group, a, request);
}

int netfold_bcast(netfold_group_t group, void* buf, size_t count, netfold_dtype_t dtype,
                  int root) {
  netfold_request_t req = nullptr;
  int rc = netfold_bcast_nb(group, buf, count, dtype, root, &req);
  if (rc != NETFOLD_SUCCESS) return rc;
  rc = netfold_request_wait(req);
  const std::string message = g_last_error;
  netfold_request_free(req);
  g_last_error = message;
  return rc;
}

int netfold_barrier_nb(netfold_group_t group, netfold_request_t* request) {
  if (group == nullptr || group->impl == nullptr) return Invalid("group is NULL or destroyed");
  if (int rc = ForkedChild(group->pid); rc != NETFOLD_SUCCESS) return rc;
  return Start(group, {.collective = netfold::proto::CollectiveType::kBarrier}, request);
}

int netfold_barrier(netfold_group_t group) {
  if (group == nullptr || group->impl == nullptr) return Invalid("group is NULL or destroyed");
  if (int rc = ForkedChild(group->pid); rc != NETFOLD_SUCCESS) return rc;
  return Blocking(group, {.collective = netfold::proto::CollectiveType::kBarrier});
}

int netfold_allgather_nb(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                         netfold_dtype_t dtype, netfold_request_t* request) {
  if (request == nullptr) return Invalid("request is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kBcast, sendbuf, recvbuf, nullptr,
                      count, dtype, 0, request);
}

int netfold_allgather(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype) {
  return StartBlocked(group, netfold::proto::CollectiveType::kBcast, sendbuf, recvbuf, nullptr,
                      count, dtype, 0, nullptr);
}

int netfold_allgatherv_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                          const size_t* counts, netfold_dtype_t dtype,
                          netfold_request_t* request) {
  if (request == nullptr) return Invalid("request is NULL");
  if (counts == nullptr) return Invalid("counts is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kBcast, sendbuf, recvbuf, counts, 0,
                      dtype, 0, request);
}

int netfold_allgatherv(netfold_group_t group, const void* sendbuf, void* recvbuf,
                       const size_t* counts, netfold_dtype_t dtype) {
  if (counts == nullptr) return Invalid("counts is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kBcast, sendbuf, recvbuf, counts, 0,
                      dtype, 0, nullptr);
}

int netfold_reduce_scatter_block_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                                    size_t recvcount, netfold_dtype_t dtype, netfold_op_t op,
                                    netfold_request_t* request) {
  if (request == nullptr) return Invalid("request is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kReduce, sendbuf, recvbuf, nullptr,
                      recvcount, dtype, op, request);
}

int netfold_reduce_scatter_block(netfold_group_t group, const void* sendbuf, void* recvbuf,
                                 size_t recvcount, netfold_dtype_t dtype, netfold_op_t op) {
  return StartBlocked(group, netfold::proto::CollectiveType::kReduce, sendbuf, recvbuf, nullptr,
                      recvcount, dtype, op, nullptr);
}

int netfold_reduce_scatter_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                              const size_t* recvcounts, netfold_dtype_t dtype, netfold_op_t op,
                              netfold_request_t* request) {
  if (request == nullptr) return Invalid("request is NULL");
  if (recvcounts == nullptr) return Invalid("recvcounts is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kReduce, sendbuf, recvbuf, recvcounts,
                      0, dtype, op, request);
}

int netfold_reduce_scatter(netfold_group_t group, const void* sendbuf, void* recvbuf,
                           const size_t* recvcounts, netfold_dtype_t dtype, netfold_op_t op) {
  if (recvcounts == nullptr) return Invalid("recvcounts is NULL");
  return StartBlocked(group, netfold::proto::CollectiveType::kReduce, sendbuf, recvbuf, recvcounts,
                      0, dtype, op, nullptr);
}

int netfold_request_test(netfold_request_t request) {
  if (request == nullptr) return Invalid("request is NULL");
  if (request->done) return request->result;
  if (int rc = ForkedChild(request->group->pid); rc != NETFOLD_SUCCESS) return rc;
  if (!request->group->impl->Test(request->id)) return NETFOLD_ERR_IN_PROGRESS;
  absl::Status s = request->group->impl->Wait(request->id, &request->written);  // done: collects it
  request->done = true;
  request->result = s.ok() ? Ok() : Fail(s);
  return request->result;
}

int netfold_request_wait(netfold_request_t request) {
  if (request == nullptr) return Invalid("request is NULL");
  if (request->done) return request->result;
  if (int rc = ForkedChild(request->group->pid); rc != NETFOLD_SUCCESS) return rc;
  absl::Status s = request->group->impl->Wait(request->id, &request->written);
  request->done = true;
  request->result = s.ok() ? Ok() : Fail(s);
  return request->result;
}

int netfold_progress(netfold_context_t ctx, int timeout_us) {
  if (ctx == nullptr) return Invalid("ctx is NULL");
  if (timeout_us < 0 || timeout_us > 1000000) {
    return Invalid(absl::StrFormat("timeout_us %d is not within 0..1000000", timeout_us));
  }
  if (int rc = ForkedChild(ctx->pid); rc != NETFOLD_SUCCESS) return rc;
  ctx->impl->DriveFor(absl::Microseconds(timeout_us));
  return Ok();
}

int netfold_request_free(netfold_request_t request) {
  if (request == nullptr) return Invalid("request is NULL");
  int rc = NETFOLD_SUCCESS;
  if (!request->done) rc = netfold_request_wait(request);
  delete request;
  return rc;
}

int netfold_request_written(netfold_request_t request, netfold_written_t* written) {
  if (request == nullptr || written == nullptr) return Invalid("request or written is NULL");
  if (!request->done) return Invalid("the request has not completed");
  if (!request->written) {
    return Invalid("the request is not an allreduce whose chunks the fabric knows");
  }
  const netfold::host::WrittenChunks& w = *request->written;
  if (w.window.size() > NETFOLD_WRITTEN_WINDOW) {
    g_last_error = absl::StrFormat("chunks were written up to %d past the first missing one",
                                   w.window.size());
    return NETFOLD_ERR_NOT_SUPPORTED;
  }
  *written = netfold_written_t{};
  written->chunk_bytes = w.chunk_bytes;
  written->first_missing = w.first_missing;
  for (size_t i = 0; i < w.window.size(); ++i) {
    if (w.window[i]) written->window[i / 64] |= uint64_t{1} << (i % 64);
  }
  return Ok();
}

int netfold_reduce_local(const void* const* inputs, int num_inputs, void* out, size_t count,
                         netfold_dtype_t dtype, netfold_op_t op) {
  if (inputs == nullptr || num_inputs < 1) return Invalid("no inputs");
  if (!ValidDtype(dtype)) return Invalid(absl::StrFormat("unknown data type %d", dtype));
  if (!ValidOp(op)) return Invalid(absl::StrFormat("unknown reduction op %d", op));
  const auto type = static_cast<netfold::proto::DataType>(dtype);
  const auto rop = static_cast<netfold::proto::ReduceOp>(op);
  if (!netfold::proto::IsOpAllowed(type, rop)) {
    g_last_error = "the op is not defined on the data type";
    return NETFOLD_ERR_NOT_SUPPORTED;
  }
  absl::Status s = netfold::reduce::Fold(
      type, rop, out, std::span<const void* const>(inputs, static_cast<size_t>(num_inputs)), count);
  return s.ok() ? Ok() : Invalid(std::string(s.message()));
}

const char* netfold_strerror(int code) { return netfold::host::ErrorCodeName(code); }

const char* netfold_last_error(void) { return g_last_error.c_str(); }

namespace {

void FillStats(const netfold::host::ContextStats& s, netfold_stats_t* stats) {
  stats->ops_completed = s.engines.ops_completed;
  stats->ops_failed = s.engines.ops_failed;
  stats->chunks_posted = s.engines.chunks_posted;
  stats->repairs_sent = s.engines.repairs_sent;
  stats->bytes_sent = s.engines.bytes_sent;
  stats->bytes_received = s.engines.bytes_received;
  stats->link_tx_bytes = s.link_tx_bytes;
  stats->link_rx_bytes = s.link_rx_bytes;
  stats->retransmissions = s.retransmissions;
  stats->packets_dropped = s.packets_dropped;
  stats->foreign_packets_dropped = s.foreign_packets_dropped;
  stats->host_ops = s.host_ops;
  stats->failovers = s.failovers;
}

}  // namespace

int netfold_get_stats(netfold_context_t ctx, netfold_stats_t* stats) {
  if (ctx == nullptr || stats == nullptr) return Invalid("ctx or stats is NULL");
  if (int rc = ForkedChild(ctx->pid); rc != NETFOLD_SUCCESS) return rc;
  FillStats(ctx->impl->stats(), stats);
  return Ok();
}

int netfold_get_counter(netfold_context_t ctx, const char* name, uint64_t* value) {
  if (ctx == nullptr || name == nullptr || value == nullptr) {
    return Invalid("ctx, name or value is NULL");
  }
  if (int rc = ForkedChild(ctx->pid); rc != NETFOLD_SUCCESS) return rc;
  const netfold::host::ContextStats s = ctx->impl->stats();
  netfold_stats_t stats;
  FillStats(s, &stats);
  static constexpr struct {
    const char* name;
    uint64_t netfold_stats_t::*field;
  } kFields[] = {
      {"ops_completed", &netfold_stats_t::ops_completed},
      {"ops_failed", &netfold_stats_t::ops_failed},
      {"chunks_posted", &netfold_stats_t::chunks_posted},
      {"repairs_sent", &netfold_stats_t::repairs_sent},
      {"bytes_sent", &netfold_stats_t::bytes_sent},
      {"bytes_received", &netfold_stats_t::bytes_received},
      {"link_tx_bytes", &netfold_stats_t::link_tx_bytes},
      {"link_rx_bytes", &netfold_stats_t::link_rx_bytes},
      {"retransmissions", &netfold_stats_t::retransmissions},
      {"packets_dropped", &netfold_stats_t::packets_dropped},
      {"host_ops", &netfold_stats_t::host_ops},
      {"failovers", &netfold_stats_t::failovers},
      {"foreign_packets_dropped", &netfold_stats_t::foreign_packets_dropped},
  };
  const std::string_view wanted(name);
  for (const auto& f : kFields) {
    if (wanted == f.name) {
      *value = stats.*f.field;
      return Ok();
    }
  }
  // Counters added since netfold_stats_t's layout was fixed.
  const std::pair<std::string_view, uint64_t> kLater[] = {
      {"results_placed", s.results_placed},
      {"results_place_missed", s.results_place_missed},
      {"groups_requested", s.groups_requested},
      {"groups_reused", s.groups_reused},
      {"groups_kept", s.groups_kept},
  };
  for (const auto& [counter, v] : kLater) {
    if (wanted == counter) {
      *value = v;
      return Ok();
    }
  }
  return Invalid(absl::StrFormat("no counter named '%s'", name));
}

}  // extern "C"
