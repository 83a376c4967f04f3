#include "tools/demo.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "netfold/netfold.h"
#include "host/tcp_oob.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/reduce.h"
#include "tools/local_fabric.h"

namespace netfold::tools {
namespace {

using proto::DataType;
using proto::ReduceOp;

constexpr char kFaults[] = "drop=0.01,dup=0.005,reorder=0.01:200us,corrupt=0.001";
// A rank's exit status when every result it checked was right but the
// hosts ran some of them: the fabric failed and the library failed over.
constexpr int kRankFellBack = 4;

std::string Size(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return absl::StrFormat("%d MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return absl::StrFormat("%d KiB", bytes >> 10);
  return absl::StrFormat("%d B", bytes);
}

std::string Latency(absl::Duration d) {
  const double us = absl::ToDoubleMicroseconds(d);
  if (us < 1000) return absl::StrFormat("%.0f us", us);
  if (us < 1e6) return absl::StrFormat("%.2f ms", us / 1000);
  return absl::StrFormat("%.2f s", us / 1e6);
}

// Inputs whose reduction is exact in any association order, so the
// reference does not depend on the tree: integers wrap (exact anyway),
// floating sums add small integers, products multiply +-1 and +-2 (fp32/64)
// or +-1 (fp16/bf16), min/max and MINLOC/MAXLOC are order-free by nature.
void FillInput(DataType t, ReduceOp op, int rank, size_t count, uint64_t seed, uint8_t* out) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) * 7919 + 1);
  const size_t size = proto::DataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = out + i * size;
    const int small = static_cast<int>(rng() % 17) - 8;  // -8..8
    const int sign = rng() % 2 ? 1 : -1;
    const int factor = op == ReduceOp::kProd ? sign * static_cast<int>(1 + rng() % 2) : small;
    switch (t) {
      case DataType::kFp32: {
        float v = static_cast<float>(factor);
        std::memcpy(e, &v, 4);
        break;
      }
      case DataType::kFp64: {
        double v = factor;
        std::memcpy(e, &v, 8);
        break;
      }
      case DataType::kFp16:
      case DataType::kBf16: {
        const float f = op == ReduceOp::kProd ? static_cast<float>(sign) : static_cast<float>(small);
        const uint16_t v = t == DataType::kFp16 ? reduce::FloatToFp16(f) : reduce::FloatToBf16(f);
        std::memcpy(e, &v, 2);
        break;
      }
      default:
        for (size_t b = 0; b < size; ++b) e[b] = static_cast<uint8_t>(rng());
        if (proto::IsPairType(t)) {
          // A small value (ties happen) and the rank as the index, like MPI codes do.
          std::memset(e, 0, size);
          const size_t vs = proto::PairValueSize(t);
          if (t == DataType::kFloatInt) {
            float v = static_cast<float>(small);
            std::memcpy(e, &v, 4);
          } else if (t == DataType::kDoubleInt) {
            double v = small;
            std::memcpy(e, &v, 8);
          } else {
            int64_t v = small;
            std::memcpy(e, &v, vs);  // little-endian: the low bytes
          }
          const int32_t idx = rank;
          std::memcpy(e + proto::PairIndexOffset(t), &idx, 4);
        }
        break;
    }
  }
}

std::vector<uint8_t> Reference(DataType t, ReduceOp op, int ranks, size_t count, uint64_t seed) {
  const size_t bytes = count * proto::DataTypeSize(t);
  std::vector<std::vector<uint8_t>> inputs(static_cast<size_t>(ranks), std::vector<uint8_t>(bytes));
  std::vector<const void*> ptrs;
  for (int r = 0; r < ranks; ++r) {
    FillInput(t, op, r, count, seed, inputs[r].data());
    ptrs.push_back(inputs[r].data());
  }
  std::vector<uint8_t> out(bytes);
  if (count > 0) (void)reduce::FoldScalarReference(t, op, out.data(), ptrs, count);
  return out;
}

// Compares a result with the reference; for pair types only the value and
// index bytes count (the padding of a C struct is not data).
bool SameBits(DataType t, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (!proto::IsPairType(t)) return got == want;
  const size_t size = proto::DataTypeSize(t);
  const size_t vs = proto::PairValueSize(t), io = proto::PairIndexOffset(t);
  for (size_t i = 0; i < got.size(); i += size) {
    if (std::memcmp(&got[i], &want[i], vs) != 0 || std::memcmp(&got[i + io], &want[i + io], 4) != 0) {
      return false;
    }
  }
  return true;
}

struct Row {
  std::string operation, dtype, ops, size;
  absl::Duration latency;
  // A long operation's first call on fresh buffers, and the mean of the
  // `warmup_calls` after it, timed apart from `latency` (the calls after
  // those): they also pay for the buffers' pages, the first most
  // (docs/operations.md, "The demo").
  std::optional<absl::Duration> first;
  std::optional<absl::Duration> warmup;
  int warmup_calls = 0;
  double mbps = 0;
  int verified = 0;
  int ranks = 0;
  // Calls of this row the hosts ran (after the fabric failed and the
  // library failed over: docs/host.md, NETFOLD_ALGORITHM), over the ranks.
  int64_t host_ops = 0;
  std::string error;
};

class RankRunner {
 public:
  RankRunner(host::TcpOob& oob, netfold_context_t ctx, netfold_group_t group, bool quick)
      : oob_(oob), ctx_(ctx), group_(group), quick_(quick), rank_(oob.rank()), n_(oob.size()) {}

  // Runs `iters` times, measuring at every rank; returns the agreed row.
  // With `warmup` > 0, one more call comes first on the fresh buffers,
  // timed on its own, then `warmup` calls whose mean is kept apart (the
  // first op's: the next ops reuse the buffers), as OSU's benchmarks leave
  // their first iterations out.
  Row Allreduce(DataType t, const std::vector<ReduceOp>& ops, size_t count, uint64_t seed,
                int iters, int warmup = 0) {
    Row row;
    row.operation = "allreduce";
    row.dtype = std::string(proto::DataTypeName(t));
    for (ReduceOp op : ops) row.ops += (row.ops.empty() ? "" : " ") + std::string(proto::ReduceOpName(op));
    row.size = Size(count * proto::DataTypeSize(t));
    bool ok = true;  // every result so far right
    failed_ = false;
    host_ops_before_ = HostOps();
    absl::Duration total;
    const size_t bytes = count * proto::DataTypeSize(t);
    std::vector<uint8_t> in(bytes), out(bytes);
    for (size_t k = 0; k < ops.size(); ++k) {
      const ReduceOp op = ops[k];
      const uint64_t s = seed * 131 + k;
      FillInput(t, op, rank_, count, s, in.data());
      const std::vector<uint8_t> want = Reference(t, op, n_, count, s);
      // One call, timed alone (the result's check is not: its time is the
      // demo's, not the fabric's); false once the ranks stopped calling. A
      // wrong result is counted and the calls go on.
      absl::Duration took;
      auto call = [&] {
        if (!Step([&] {
              return netfold_allreduce(group_, in.data(), out.data(), count,
                                       static_cast<netfold_dtype_t>(t),
                                       static_cast<netfold_op_t>(op));
            }, &row, &took)) {
          return false;
        }
        if (!failed_ && !SameBits(t, out, want)) ok = false;
        return true;
      };
      bool calling = true;
      if (warmup > 0 && k == 0) {
        calling = call();
        row.first = took;
        absl::Duration warming;
        for (; row.warmup_calls < warmup && calling; ++row.warmup_calls) {
          calling = call();
          warming += took;
        }
        if (row.warmup_calls > 0) row.warmup = warming / row.warmup_calls;
      }
      absl::Duration sum;
      int made = 0;  // the mean is over the calls made
      for (; made < iters && calling && call(); ++made) sum += took;
      if (made > 0) total += sum / made;
    }
    row.latency = total / static_cast<double>(ops.size());
    return Agree(row, ok, bytes);
  }

  Row ReduceBcastBarrier(int which, size_t count, uint64_t seed, int iters) {
    Row row;
    const DataType t = DataType::kFp64;
    const int root = which == 0 ? 1 % n_ : n_ - 1;
    row.operation = which == 0 ? "reduce" : which == 1 ? "bcast" : "barrier";
    row.ops = which == 0   ? absl::StrFormat("sum, root %d", root)
              : which == 1 ? absl::StrFormat("root %d", root)
                           : "";
    row.dtype = which == 2 ? "-" : "fp64";
    row.size = which == 2 ? "0 B" : Size(count * 8);
    std::vector<uint8_t> in(count * 8), out(count * 8);
    bool ok = true;  // every result so far right; a wrong one is counted, the calls go on
    failed_ = false;
    host_ops_before_ = HostOps();
    absl::Duration sum, took;
    int made = 0;
    for (; made < iters; ++made) {
      const int i = made;
      if (which == 0) {
        FillInput(t, ReduceOp::kSum, rank_, count, seed + i, in.data());
        if (!Step([&] {
              return netfold_reduce(group_, in.data(), out.data(), count, NETFOLD_DTYPE_FP64,
                                    NETFOLD_OP_SUM, root);
            }, &row, &took)) {
          break;
        }
        if (!failed_ && rank_ == root &&
            !SameBits(t, out, Reference(t, ReduceOp::kSum, n_, count, seed + i))) {
          ok = false;
        }
      } else if (which == 1) {
        FillInput(t, ReduceOp::kSum, root, count, seed + i, in.data());
        std::vector<uint8_t> buf(count * 8, 0);
        if (rank_ == root) buf = in;
        auto bcast = [&] {
          return netfold_bcast(group_, buf.data(), count, NETFOLD_DTYPE_FP64, root);
        };
        if (!Step(bcast, &row, &took)) {
          break;
        }
        if (!failed_ && buf != in) ok = false;
      } else if (!Step([&] { return netfold_barrier(group_); }, &row, &took)) {
        break;
      }
      sum += took;
    }
    row.latency = made > 0 ? sum / made : absl::ZeroDuration();
    return Agree(row, ok, count * 8);
  }

 private:
  // One call of a collective (`call`, a netfold_* call), timed on this rank
  // after the ranks met: they first gather whether each still calls (the
  // rendezvous's Allgather, also the barrier before a timed call, as OSU's
  // benchmarks and `netfold bench` time a collective). False, and no call,
  // once one rank's call failed or the rendezvous did: every rank then
  // stops at the same call, and the rows after it start in step. A failed
  // call sets `failed_` and the row's error.
  template <typename Call>
  bool Step(Call call, Row* row, absl::Duration* took) {
    const uint8_t mine = failed_ ? 0 : 1;
    std::vector<uint8_t> all(static_cast<size_t>(n_));
    if (!oob_.Allgather(&mine, all.data(), 1).ok()) {
      if (row->error.empty()) row->error = "the rendezvous with the other ranks failed";
      failed_ = true;
      return false;
    }
    if (std::find(all.begin(), all.end(), 0) != all.end()) {
      if (row->error.empty()) row->error = "another rank's call failed";
      failed_ = true;
      return false;
    }
    const absl::Time start = absl::Now();
    const int rc = call();
    *took = absl::Now() - start;
    if (rc != NETFOLD_SUCCESS) {
      row->error = absl::StrFormat("%s: %s", netfold_strerror(rc), netfold_last_error());
      failed_ = true;
    }
    return true;
  }

  // Every rank's verdict, gathered so that rank 0 can print one row.
  // The times are the means over the ranks, as OSU's benchmarks and
  // `netfold bench` give them (a reduce's non-roots return early).
  Row Agree(Row row, bool ok, size_t bytes) {
    const int32_t mine = ok && !failed_ ? 1 : 0;
    std::vector<int32_t> all(static_cast<size_t>(n_));
    if (!oob_.Allgather(&mine, all.data(), 4).ok()) all.assign(all.size(), 0);
    row.ranks = n_;
    for (int32_t v : all) row.verified += v;
    const int64_t mine_now[4] = {
        absl::ToInt64Nanoseconds(row.latency),
        absl::ToInt64Nanoseconds(row.first.value_or(absl::ZeroDuration())),
        absl::ToInt64Nanoseconds(row.warmup.value_or(absl::ZeroDuration())),
        static_cast<int64_t>(HostOps() - host_ops_before_)};
    std::vector<int64_t> every(4 * static_cast<size_t>(n_));
    if (oob_.Allgather(mine_now, every.data(), sizeof(mine_now)).ok()) {
      int64_t sum[4] = {0, 0, 0, 0};
      for (size_t i = 0; i < every.size(); ++i) sum[i % 4] += every[i];
      row.latency = absl::Nanoseconds(sum[0] / n_);
      if (row.first) row.first = absl::Nanoseconds(sum[1] / n_);
      if (row.warmup) row.warmup = absl::Nanoseconds(sum[2] / n_);
      row.host_ops = sum[3];
    }
    const double secs = absl::ToDoubleSeconds(row.latency);
    row.mbps = secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0;
    return row;
  }

  // The operations this rank's hosts ran so far (netfold_stats_t).
  uint64_t HostOps() const {
    netfold_stats_t stats;
    return netfold_get_stats(ctx_, &stats) == NETFOLD_SUCCESS ? stats.host_ops : 0;
  }

  host::TcpOob& oob_;
  netfold_context_t ctx_;
  netfold_group_t group_;
  uint64_t host_ops_before_ = 0;  // HostOps() when the row started
  bool failed_ = false;  // a call of this row failed here, or the ranks stopped calling
  bool quick_;
  int rank_, n_;
};

void PrintRow(const Row& r) {
  // A row that some rank could not verify shows no times: its ranks made
  // different numbers of calls, or none.
  const bool verified = r.verified == r.ranks;
  std::printf("%-10s %-11s %-44s %8s %10s %11s  %s\n", r.operation.c_str(), r.dtype.c_str(),
              r.ops.c_str(), r.size.c_str(), verified ? Latency(r.latency).c_str() : "-",
              verified && r.mbps > 0 ? absl::StrFormat("%.1f MB/s", r.mbps).c_str() : "-",
              verified ? absl::StrFormat("yes (%d/%d)%s", r.verified, r.ranks,
                                         r.host_ops > 0 ? ", on the hosts" : "")
                             .c_str()
                       : absl::StrFormat("NO (%d/%d) %s", r.verified, r.ranks, r.error).c_str());
  if (verified && r.first) {
    std::printf("%-10s %-11s %-44s %8s %10s\n", "", "", "  its first call, on fresh buffers:", "",
                Latency(*r.first).c_str());
  }
  if (verified && r.warmup) {
    std::printf("%-10s %-11s %-44s %8s %10s\n", "", "",
                absl::StrFormat("  the next %d, warming up:", r.warmup_calls).c_str(), "",
                Latency(*r.warmup).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int RunDemoRank() {
  auto oob = host::TcpOob::FromEnvironment();
  if (!oob.ok()) {
    std::fprintf(stderr, "demo rank: %s\n", oob.status().ToString().c_str());
    return 2;
  }
  const int rank = (*oob)->rank(), n = (*oob)->size();
  const bool quick = std::getenv("NETFOLD_DEMO_QUICK") != nullptr;
  uint64_t seed = 1;
  if (const char* s = std::getenv("NETFOLD_DEMO_SEED")) (void)absl::SimpleAtoi(s, &seed);
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = rank;
  spec.world_size = n;
  spec.oob = (*oob)->callbacks();
  spec.job_name = "demo";
  netfold_context_t ctx = nullptr;
  int rc = netfold_init(&spec, &ctx);
  if (rc != NETFOLD_SUCCESS) {
    std::fprintf(stderr, "rank %d: netfold_init: %s: %s\n", rank, netfold_strerror(rc),
                 netfold_last_error());
    return 1;
  }
  netfold_group_spec_t gs = NETFOLD_GROUP_SPEC_INITIALIZER;
  gs.rank = rank;
  gs.size = n;
  gs.oob = spec.oob;
  netfold_group_t group = nullptr;
  rc = netfold_group_create(ctx, &gs, &group);
  if (rc != NETFOLD_SUCCESS) {
    std::fprintf(stderr, "rank %d: netfold_group_create: %s: %s\n", rank, netfold_strerror(rc),
                 netfold_last_error());
    netfold_finalize(ctx);
    return 1;
  }
  netfold_caps_t caps;
  netfold_query_caps(ctx, &caps);
  RankRunner runner(**oob, ctx, group, quick);
  std::vector<Row> rows;
  auto emit = [&](Row r) {
    if (rank == 0) PrintRow(r);
    rows.push_back(std::move(r));
  };
  if (rank == 0) {
    std::printf("%-10s %-11s %-44s %8s %10s %11s  %s\n", "operation", "dtype", "op(s)", "size",
                "latency", "bandwidth", "verified bitwise");
  }
  // Every data type with every op MPI allows on it, 4 KiB vectors.
  for (DataType t : proto::kAllDataTypes) {
    std::vector<ReduceOp> ops;
    for (ReduceOp o : proto::kAllReduceOps) {
      if (proto::IsOpAllowed(t, o)) ops.push_back(o);
    }
    const size_t count = 4096 / proto::DataTypeSize(t);
    emit(runner.Allreduce(t, ops, count, seed + static_cast<uint64_t>(t), quick ? 1 : 3));
  }
  // Sizes from 4 B to 16 MiB (fp32 sum).
  std::vector<size_t> sizes = {4, 4096, 65536, 1u << 20, 16u << 20};
  if (quick) sizes = {4, 4096, 65536, 1u << 20};
  for (size_t bytes : sizes) {
    if (rank == 0 && bytes >= (1u << 20)) {
      std::fprintf(stderr, "  ... allreduce of %s on %d ranks ...\n", Size(bytes).c_str(), n);
    }
    // The long ones: a first call on the fresh buffers and a few more that
    // still warm up, apart, then the rate.
    const int warmup = bytes >= (1u << 20) ? 4 : 0;
    const int iters = bytes <= 4096 ? (quick ? 20 : 100) : bytes <= 65536 ? 10 : 6;
    emit(runner.Allreduce(DataType::kFp32, {ReduceOp::kSum}, bytes / 4, seed + bytes, iters,
                          warmup));
  }
  emit(runner.ReduceBcastBarrier(0, 1024, seed + 7, quick ? 5 : 20));
  emit(runner.ReduceBcastBarrier(1, 1024, seed + 8, quick ? 5 : 20));
  emit(runner.ReduceBcastBarrier(2, 0, seed + 9, quick ? 20 : 100));

  int failed = 0;
  int64_t host_ops = 0;
  for (const Row& r : rows) {
    failed += r.verified != r.ranks;
    host_ops += r.host_ops;
  }
  netfold_stats_t stats;
  netfold_get_stats(ctx, &stats);
  if (rank == 0) {
    std::printf("\n%zu checks, %d failed. Group: K=%u slots of P=%u bytes. Rank 0: %llu operations, "
                "%llu repairs of lost multicast results, %llu RC retransmissions.\n",
                rows.size(), failed, caps.num_slots, caps.slot_bytes,
                static_cast<unsigned long long>(stats.ops_completed),
                static_cast<unsigned long long>(stats.repairs_sent),
                static_cast<unsigned long long>(stats.retransmissions));
    if (host_ops > 0) {
      std::printf("The fabric failed during the demo: the hosts ran the rows marked \"on the "
                  "hosts\" (%lld calls over the ranks; docs/host.md, NETFOLD_ALGORITHM).\n",
                  static_cast<long long>(host_ops));
    }
  }
  rc = netfold_group_destroy(group);
  if (rc != NETFOLD_SUCCESS && rank == 0) {
    std::fprintf(stderr, "netfold_group_destroy: %s\n", netfold_last_error());
  }
  rc = netfold_finalize(ctx);
  if (rc != NETFOLD_SUCCESS && rank == 0) {
    std::fprintf(stderr, "netfold_finalize: %s\n", netfold_last_error());
  }
  if (failed > 0) return 1;
  return host_ops > 0 ? kRankFellBack : 0;
}

int RunDemo(const DemoOptions& options) {
  std::printf("netfold demo: starting a local fabric (manager, switches root/leaf0/leaf1) with %d "
              "hosts on loopback%s...\n",
              options.hosts, options.faults ? ", seeded faults on every link" : "");
  std::fflush(stdout);
  LocalFabricOptions fo;
  fo.hosts = options.hosts;
  fo.log_level = options.log_level;
  if (options.faults) {
    fo.link_faults = absl::StrFormat("default/both/%s,seed=%d", kFaults, options.seed);
  }
  auto fabric = LocalFabric::Start(fo);
  if (!fabric.ok()) {
    std::fprintf(stderr, "netfold demo: could not start the fabric: %s\n",
                 fabric.status().ToString().c_str());
    return 2;
  }
  std::printf("fabric up: manager %s, state and logs in %s\n\n",
              (*fabric)->manager_address().c_str(), (*fabric)->state_dir().c_str());
  std::fflush(stdout);
  auto server = host::TcpOobServer::Start(options.hosts, "127.0.0.1:0", absl::Seconds(300));
  if (!server.ok()) {
    std::fprintf(stderr, "netfold demo: %s\n", server.status().ToString().c_str());
    return 2;
  }
  std::vector<pid_t> ranks;
  for (int r = 0; r < options.hosts; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      setenv("NETFOLD_MANAGER", (*fabric)->manager_address().c_str(), 1);
      setenv("NETFOLD_CREDENTIAL_FILE", (*fabric)->credential_file().c_str(), 1);
      setenv("NETFOLD_TLS_CA", (*fabric)->tls_ca_file().c_str(), 1);
      setenv("NETFOLD_OOB_ADDRESS", (*server)->address().c_str(), 1);
      setenv("NETFOLD_OOB_RANK", std::to_string(r).c_str(), 1);
      setenv("NETFOLD_OOB_SIZE", std::to_string(options.hosts).c_str(), 1);
      setenv("NETFOLD_HOST", absl::StrFormat("h%d", r).c_str(), 1);
      // The fabric, with failover: a host algorithm forced from the
      // caller's environment would make every row the hosts'.
      setenv("NETFOLD_ALGORITHM", "auto", 1);
      setenv("NETFOLD_LOG_LEVEL", options.log_level.c_str(), 1);
      setenv("NETFOLD_DEMO_SEED", std::to_string(options.seed).c_str(), 1);
      if (options.quick) setenv("NETFOLD_DEMO_QUICK", "1", 1);
      if (options.faults) {
        setenv("NETFOLD_FAULTS", absl::StrFormat("%s,seed=%d", kFaults, 100 + r).c_str(), 1);
      }
      if (r != 0) {
        // Only rank 0 prints the table; the others' messages go to a log,
        // a new file in the fabric's state directory (never through a
        // symlink, docs/security.md).
        const std::string log = absl::StrFormat("%s/rank%d.log", (*fabric)->state_dir(), r);
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(3);
        close(fd);
      }
      execl(options.self.c_str(), options.self.c_str(), "__demo-rank", nullptr);
      _exit(127);
    }
    ranks.push_back(pid);
  }
  // Every rank has a deadline of its own; this one only guards against a hang.
  const absl::Time deadline = absl::Now() + absl::Minutes(options.quick ? 5 : 15);
  int failures = static_cast<int>(options.hosts - ranks.size());
  int fell_back = 0;  // ranks whose results were right but partly the hosts' own
  for (pid_t pid : ranks) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        std::fprintf(stderr, "netfold demo: rank process %d did not finish in time; killing it\n", pid);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kRankFellBack) {
      ++fell_back;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failures;
    }
  }
  absl::Status stopped = (*fabric)->Stop();
  if (!stopped.ok()) std::fprintf(stderr, "netfold demo: %s\n", stopped.ToString().c_str());
  if (failures == 0 && fell_back == 0) {
    std::printf("\nall results verified on every rank; fabric stopped.\n");
    return 0;
  }
  (*fabric)->KeepStateDir();  // the logs say what went wrong
  if (failures == 0) {
    // Right results, but not all of them the fabric's: not what the demo
    // is there to show.
    std::printf("\nall results verified on every rank, but the fabric failed during the demo and "
                "the hosts ran the rows marked \"on the hosts\" (logs in %s).\n",
                (*fabric)->state_dir().c_str());
    return 1;
  }
  std::printf("\nFAILED: %d of %d rank processes reported errors (logs in %s).\n", failures,
              options.hosts, (*fabric)->state_dir().c_str());
  return 1;
}

}  // namespace netfold::tools
