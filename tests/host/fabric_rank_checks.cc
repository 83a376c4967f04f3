// The one-group checks of fabric_rank (tests/host/fabric_rank.cc): every
// dtype x op, blocks of every size, nonblocking operations in flight,
// netfold_progress alone, results placed in the caller's buffer, reduces
// released at their non-roots. Each records its first failure with Check.
#include "tests/host/fabric_rank_checks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "netfold/netfold.h"
#include "host/tcp_oob.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/reduce.h"
#include "tests/host/fabric_rank_streams.h"
#include "tests/host/few_descriptors.h"

namespace netfold::fabric_rank {

namespace {

using proto::DataType;
using proto::ReduceOp;

bool SameData(DataType t, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (!netfold::proto::IsPairType(t)) return a == b;
  const size_t size = netfold::proto::DataTypeSize(t), vs = netfold::proto::PairValueSize(t),
               io = netfold::proto::PairIndexOffset(t);
  for (size_t i = 0; i < a.size(); i += size) {
    if (std::memcmp(&a[i], &b[i], vs) || std::memcmp(&a[i + io], &b[i + io], 4)) return false;
  }
  return true;
}

uint64_t Hash(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : v) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank must hold the same bits.
void CheckIdentical(netfold::host::Oob& oob, const std::vector<uint8_t>& v, const std::string& what) {
  uint64_t mine = Hash(v);
  std::vector<uint64_t> all(static_cast<size_t>(g_size));
  Check(oob.Allgather(&mine, all.data(), 8).ok(), "oob allgather");
  for (uint64_t h : all) Check(h == mine, what + ": ranks got different bits");
}

// Allgather(v) and reduce-scatter with blocks of every size (an empty one,
// several slots), in place and nonblocking; a reduce-scatter's block is
// bitwise the allreduce's, whatever the rounding.
void Blocks(netfold::host::Oob& oob, netfold_group_t g) {
  std::vector<size_t> counts(static_cast<size_t>(g_size));
  size_t total = 0, first = 0;
  for (int r = 0; r < g_size; ++r) {
    counts[r] = r == 1 ? 0 : 300 + 517 * static_cast<size_t>(r);
    if (r == g_rank) first = total;
    total += counts[r];
  }
  const size_t mine = counts[g_rank];
  std::vector<uint8_t> want;
  for (int r = 0; r < g_size; ++r) {
    std::vector<uint8_t> b = Input(DataType::kInt32, ReduceOp::kSum, r, counts[r], 7);
    want.insert(want.end(), b.begin(), b.end());
  }
  std::vector<uint8_t> all(total * 4, 0);
  std::vector<uint8_t> in = Input(DataType::kInt32, ReduceOp::kSum, g_rank, mine, 7);
  // Bad arguments: refused before anything reaches the fabric, on every rank alike.
  netfold_request_t none = nullptr;
  Check(netfold_allgatherv(g, in.data(), all.data(), nullptr, NETFOLD_DTYPE_INT32) ==
            NETFOLD_ERR_INVALID_ARGUMENT, "allgatherv without counts");
  Check(netfold_allgather(g, in.data(), nullptr, 5, NETFOLD_DTYPE_INT32) ==
            NETFOLD_ERR_INVALID_ARGUMENT, "allgather without a receive buffer");
  Check(netfold_allgather(g, in.data(), all.data(), SIZE_MAX / 2, NETFOLD_DTYPE_INT32) ==
            NETFOLD_ERR_INVALID_ARGUMENT, "allgather of too many elements");
  std::vector<float> one_each(static_cast<size_t>(g_size)), one(1);
  Check(netfold_reduce_scatter_block(g, one_each.data(), one.data(), 1, NETFOLD_DTYPE_FP32,
                                     NETFOLD_OP_BXOR) == NETFOLD_ERR_NOT_SUPPORTED,
        "reduce_scatter_block with an op the type does not have");
  Check(netfold_reduce_scatter_block(g, one_each.data(), one.data(), 1, NETFOLD_DTYPE_INT32,
                                     static_cast<netfold_op_t>(99)) == NETFOLD_ERR_INVALID_ARGUMENT,
        "reduce_scatter_block with an unknown op");
  Check(netfold_reduce_scatter_block_nb(g, one_each.data(), one.data(), 1, NETFOLD_DTYPE_INT32,
                                        NETFOLD_OP_SUM, nullptr) == NETFOLD_ERR_INVALID_ARGUMENT,
        "reduce_scatter_block_nb without a request");
  Check(netfold_allgather_nb(g, in.data(), all.data(), 1, static_cast<netfold_dtype_t>(200),
                             &none) == NETFOLD_ERR_INVALID_ARGUMENT && none == nullptr,
        "allgather_nb of an unknown type");
  CheckRc(netfold_allgatherv(g, in.data(), all.data(), counts.data(), NETFOLD_DTYPE_INT32),
          "allgatherv");
  Check(all == want, "allgatherv result");
  // In place: this rank's block is already where it goes.
  std::fill(all.begin(), all.end(), 0);
  std::memcpy(all.data() + first * 4, in.data(), in.size());
  CheckRc(netfold_allgatherv(g, NETFOLD_IN_PLACE, all.data(), counts.data(), NETFOLD_DTYPE_INT32),
          "allgatherv in place");
  Check(all == want, "allgatherv in place result");
  // Reduce-scatter in place: the input fills the buffer, the result its start.
  std::vector<uint8_t> buf = Input(DataType::kInt32, ReduceOp::kSum, g_rank, total, 8);
  const std::vector<uint8_t> sum = Reference(DataType::kInt32, ReduceOp::kSum, total, 8);
  CheckRc(netfold_reduce_scatter(g, NETFOLD_IN_PLACE, buf.data(), counts.data(),
                                 NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
          "reduce_scatter in place");
  Check(std::equal(buf.begin(), buf.begin() + mine * 4, sum.begin() + first * 4),
        "reduce_scatter in place result");
  // Random floats, nonblocking: the tree decides the rounding, and
  // reduce-scatter rounds as allreduce does.
  const size_t block = 3000;
  std::mt19937_64 rng(g_rank + 200);
  std::vector<float> f(block * g_size), reduced(f.size()), scattered(block);
  for (float& x : f) x = std::uniform_real_distribution<float>(-1e3, 1e3)(rng);
  CheckRc(netfold_allreduce(g, f.data(), reduced.data(), f.size(), NETFOLD_DTYPE_FP32,
                            NETFOLD_OP_SUM),
          "allreduce fp32");
  netfold_request_t rs = nullptr, ag = nullptr;
  CheckRc(netfold_reduce_scatter_block_nb(g, f.data(), scattered.data(), block,
                                          NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM, &rs),
          "reduce_scatter_block_nb");
  // In flight together: an allgather of what the reduce-scatter does not write.
  std::vector<float> gathered(f.size()), gathered_input(f.size() * g_size);
  CheckRc(netfold_allgather_nb(g, f.data(), gathered_input.data(), f.size(), NETFOLD_DTYPE_FP32,
                               &ag),
          "allgather_nb");
  if (rs != nullptr) CheckRc(netfold_request_wait(rs), "wait reduce_scatter_block_nb");
  if (ag != nullptr) CheckRc(netfold_request_wait(ag), "wait allgather_nb");
  CheckRc(netfold_allgather(g, scattered.data(), gathered.data(), block, NETFOLD_DTYPE_FP32),
          "allgather");
  Check(std::memcmp(gathered_input.data() + g_rank * f.size(), f.data(), f.size() * 4) == 0,
        "allgather_nb lost this rank's block");
  netfold_request_free(rs);
  netfold_request_free(ag);
  Check(std::memcmp(scattered.data(), reduced.data() + g_rank * block, block * 4) == 0,
        "reduce-scatter rounds differently from allreduce");
  Check(std::memcmp(gathered.data(), reduced.data(), f.size() * 4) == 0,
        "allgather of the scattered blocks is not the allreduce");
  std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(gathered.data()),
                             reinterpret_cast<uint8_t*>(gathered.data()) + gathered.size() * 4);
  CheckIdentical(oob, bytes, "gathered fp32 sums");
}

}  // namespace

void Sweep(netfold::host::Oob& oob, netfold_group_t g) {
  uint64_t seed = 1;
  for (DataType t : netfold::proto::kAllDataTypes) {
    for (ReduceOp op : netfold::proto::kAllReduceOps) {
      if (!netfold::proto::IsOpAllowed(t, op)) continue;
      const size_t count = 1 + (seed * 37) % 3000;  // 1 to 3 slots' worth, tails included
      ++seed;
      std::vector<uint8_t> in = Input(t, op, g_rank, count, seed), out(in.size());
      CheckRc(netfold_allreduce(g, in.data(), out.data(), count, static_cast<netfold_dtype_t>(t),
                                static_cast<netfold_op_t>(op)),
              "allreduce");
      Check(SameData(t, out, Reference(t, op, count, seed)),
            absl::StrFormat("allreduce %s %s differs from the reference",
                            netfold::proto::DataTypeName(t), netfold::proto::ReduceOpName(op)));
      // The same reduction, scattered: each rank gets its block of it.
      const size_t block = count / static_cast<size_t>(g_size), bytes = block * out.size() / count;
      std::vector<uint8_t> mine(bytes);
      CheckRc(netfold_reduce_scatter_block(g, in.data(), mine.data(), block,
                                           static_cast<netfold_dtype_t>(t),
                                           static_cast<netfold_op_t>(op)),
              "reduce_scatter_block");
      Check(SameData(t, mine, std::vector<uint8_t>(out.begin() + g_rank * bytes,
                                                   out.begin() + (g_rank + 1) * bytes)),
            absl::StrFormat("reduce-scatter %s %s differs from the allreduce's block",
                            netfold::proto::DataTypeName(t), netfold::proto::ReduceOpName(op)));
    }
  }
  Blocks(oob, g);
  // Random floats: the tree decides the rounding; every rank must agree.
  std::mt19937_64 rng(g_rank + 100);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> f(5000);
    for (float& x : f) x = std::uniform_real_distribution<float>(-1e3, 1e3)(rng);
    CheckRc(netfold_allreduce(g, NETFOLD_IN_PLACE, f.data(), f.size(), NETFOLD_DTYPE_FP32,
                              NETFOLD_OP_SUM),
            "allreduce fp32 in place");
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(f.data()),
                               reinterpret_cast<uint8_t*>(f.data()) + f.size() * 4);
    CheckIdentical(oob, bytes, "random fp32 sum");
  }
  // Reduce to every root, bcast from every root, barrier.
  for (int root = 0; root < g_size; ++root) {
    std::vector<uint8_t> in = Input(DataType::kInt32, ReduceOp::kSum, g_rank, 700, 99 + root);
    std::vector<uint8_t> out(in.size(), 0);
    CheckRc(netfold_reduce(g, in.data(), out.data(), 700, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM, root),
            "reduce");
    if (g_rank == root) {
      Check(out == Reference(DataType::kInt32, ReduceOp::kSum, 700, 99 + root), "reduce result");
    }
    std::vector<uint8_t> buf = g_rank == root ? in : std::vector<uint8_t>(in.size(), 0);
    std::vector<uint8_t> expect = Input(DataType::kInt32, ReduceOp::kSum, root, 700, 99 + root);
    CheckRc(netfold_bcast(g, buf.data(), 700, NETFOLD_DTYPE_INT32, root), "bcast");
    Check(buf == expect, "bcast result");
    CheckRc(netfold_barrier(g), "barrier");
  }
}

// Twenty nonblocking allreduces in flight on one group, completed by test.
void Nonblocking(netfold_group_t all) {
  std::vector<netfold_request_t> reqs;
  std::vector<std::vector<int64_t>> bufs;
  for (int k = 0; k < 20; ++k) {
    bufs.emplace_back(300, g_rank + k);
  }
  for (int k = 0; k < 20; ++k) {
    netfold_request_t r = nullptr;
    CheckRc(netfold_allreduce_nb(all, NETFOLD_IN_PLACE, bufs[k].data(), 300, NETFOLD_DTYPE_INT64,
                                 NETFOLD_OP_SUM, &r),
            "allreduce_nb");
    reqs.push_back(r);
  }
  int done = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (done < 20 && absl::Now() < deadline) {
    done = 0;
    for (auto r : reqs) {
      const int rc = netfold_request_test(r);
      if (rc == NETFOLD_SUCCESS) ++done;
      else if (rc != NETFOLD_ERR_IN_PROGRESS) CheckRc(rc, "request_test");
    }
    if (!g_failure.empty()) break;
  }
  Check(done == 20, "nonblocking operations did not all complete");
  for (auto r : reqs) netfold_request_free(r);
  for (int k = 0; k < 20; ++k) {
    const int64_t want = static_cast<int64_t>(g_size) * (g_size - 1) / 2 + static_cast<int64_t>(g_size) * k;
    Check(bufs[k][0] == want && bufs[k][299] == want, "nonblocking allreduce result");
  }
}


// netfold_progress moves an operation longer than the window to its end
// by itself: nothing else enters the library (the test turns the progress
// thread off) until the context's counter says it completed.
void Progressed(netfold_context_t ctx, netfold_group_t g) {
  Check(netfold_progress(ctx, -1) == NETFOLD_ERR_INVALID_ARGUMENT, "a negative timeout accepted");
  Check(netfold_progress(ctx, 1000001) == NETFOLD_ERR_INVALID_ARGUMENT, "a timeout over 1 s accepted");
  Check(netfold_progress(nullptr, 0) == NETFOLD_ERR_INVALID_ARGUMENT, "a NULL context accepted");
  const size_t n = (3u << 20) / 4;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i + g_rank) % 7);
  netfold_stats_t before{}, now{};
  CheckRc(netfold_get_stats(ctx, &before), "get_stats");
  netfold_request_t r = nullptr;
  CheckRc(netfold_allreduce_nb(g, NETFOLD_IN_PLACE, v.data(), n, NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM, &r),
          "allreduce_nb");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int calls = 0;
  do {
    CheckRc(netfold_progress(ctx, 2000), "progress");
    ++calls;
    CheckRc(netfold_get_stats(ctx, &now), "get_stats");
  } while (now.ops_completed == before.ops_completed && now.ops_failed == before.ops_failed &&
           absl::Now() < deadline && g_failure.empty());
  Check(now.ops_completed > before.ops_completed,
        absl::StrFormat("not completed by netfold_progress (%d calls)", calls));
  CheckRc(netfold_request_wait(r), "request_wait");
  netfold_request_free(r);
  for (size_t i = 0; i < n && g_failure.empty(); i += 4099) {
    float want = 0;
    for (int k = 0; k < g_size; ++k) want += static_cast<float>((i + k) % 7);
    Check(v[i] == want, absl::StrFormat("progressed allreduce element %d", i));
  }
}

// Results written straight into the caller's buffer (docs/host.md,
// "Results straight into the caller's buffer"): a non-in-place allreduce
// and a bcast a few windows long, every element checked, into a buffer
// filled with -1 first (a payload written into the wrong chunk's place and
// left there would show); the allreduce's input must come back unchanged.
void Placed(netfold_group_t g) {
  const size_t n = (3u << 20) / 4 + 123;  // not a whole number of chunks
  std::vector<float> in(n), out(n);
  auto first_wrong = [&](auto want) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != want(i)) return static_cast<long>(i);
    }
    return -1L;
  };
  for (int round = 0; round < 3 && g_failure.empty(); ++round) {
    auto input = [&](size_t i, int rank) { return static_cast<float>((i * 3 + rank + round) % 11); };
    for (size_t i = 0; i < n; ++i) in[i] = input(i, g_rank);
    std::fill(out.begin(), out.end(), -1.0f);
    CheckRc(netfold_allreduce(g, in.data(), out.data(), n, NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM),
            "placed allreduce");
    const long wrong = first_wrong([&](size_t i) {
      float sum = 0;
      for (int r = 0; r < g_size; ++r) sum += input(i, r);
      return sum;
    });
    Check(wrong < 0, absl::StrFormat("round %d: allreduce element %d", round, wrong));
    for (size_t i = 0; i < n && g_failure.empty(); ++i) {
      Check(in[i] == input(i, g_rank), absl::StrFormat("round %d: input element %d changed", round, i));
    }
    const int root = round % g_size;
    auto bcast = [&](size_t i) { return static_cast<float>((i * 5 + round) % 13); };
    for (size_t i = 0; i < n; ++i) out[i] = g_rank == root ? bcast(i) : -1.0f;
    CheckRc(netfold_bcast(g, out.data(), n, NETFOLD_DTYPE_FP32, root), "placed bcast");
    const long wrong_bcast = first_wrong(bcast);
    Check(wrong_bcast < 0, absl::StrFormat("round %d: bcast element %d", round, wrong_bcast));
  }
}

// Reduces released at their non-roots (host/group.h): a non-root returns
// before the root even started, may reuse its input at once, and a failure
// after the return reaches its next call.
void Released(netfold_group_t g) {
  // 1000 int32 (4 slots of the test fabric's 8 x 1 KiB) and 64 KiB (past the window).
  for (size_t count : {size_t{1000}, size_t{16384}}) {
    for (int root = 0; root < g_size; ++root) {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i % 97) * (g_rank + 1);
      if (g_rank == root) usleep(1500 * 1000);  // the others are long gone by now
      const absl::Time t0 = absl::Now();
      CheckRc(netfold_reduce(g, in.data(), out.data(), count, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM,
                             root),
              "released reduce");
      const absl::Duration took = absl::Now() - t0;
      if (g_rank != root && count == 1000) {
        Check(took < absl::Milliseconds(750),
              absl::StrFormat("a non-root's reduce of %d returned after %s, before the root's "
                              "1.5 s sleep was over: not released", count, absl::FormatDuration(took)));
      }
      if (g_rank != root) {
        // Past the window it returned once its last chunk was posted, after
        // the root began. Either way the caller's buffer is free again.
        std::fill(in.begin(), in.end(), -1000);
      } else {
        const int32_t ranks = g_size * (g_size + 1) / 2;
        for (size_t i = 0; i < count && g_failure.empty(); ++i) {
          Check(out[i] == static_cast<int32_t>(i % 97) * ranks,
                absl::StrFormat("released reduce of %d at root %d, element %d", count, root, i));
        }
      }
    }
  }
  // A root that disagrees with the others on the op, and starts late: it
  // hears of it from its reduce, the others from their next call, and the
  // group goes on.
  int32_t x = 1, y = 0;
  if (g_rank == 0) usleep(1500 * 1000);
  const int rc = netfold_reduce(g, &x, &y, 1, NETFOLD_DTYPE_INT32,
                                g_rank == 0 ? NETFOLD_OP_MAX : NETFOLD_OP_SUM, 0);
  if (g_rank == 0) {
    Check(rc == NETFOLD_ERR_MISMATCH, "the root of a mismatched reduce was not told");
    CheckRc(netfold_barrier(g), "barrier after the mismatch");
  } else {
    CheckRc(rc, "a non-root's mismatched reduce (released)");
    const int later = netfold_barrier(g);
    Check(later == NETFOLD_ERR_MISMATCH &&
              std::strstr(netfold_last_error(), "earlier reduce") != nullptr,
          absl::StrFormat("the next call after a released reduce failed returned %s: %s",
                          netfold_strerror(later), netfold_last_error()));
  }
  CheckRc(netfold_barrier(g), "barrier after the reported mismatch");
}

}  // namespace netfold::fabric_rank
