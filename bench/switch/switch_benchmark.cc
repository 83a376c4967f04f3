// The aggregation rate of the switch's node core without I/O, next to
// reduce/'s throughput for the same work measured in the same run.
//
// One AggregationNode with 8 children and 4 KiB slots is driven directly:
// per operation every child delivers a 4 KiB request (1024 fp32 or int32
// elements), the node folds them in child order and, as the group root,
// hands the result to a NodeOutput that only counts it (multicast), or, as
// an inner node, sends it to its parent. The references do the same
// arithmetic with reduce/ alone: one 8-input Kernel::Fold, and a copy plus
// seven chained Kernel::Reduce calls (what the node does with in-order
// arrivals). The ratio node/reference is the cost of the node's bookkeeping
// (slot window, validation, buffering, framing, the kept result for
// repair); the goal is >= 0.5x.
//
// A last table prices the per-job integrity tag (docs/security.md): the
// same node with and without the job's key, fed pre-tagged requests, so
// that the switch's own work (check 8 tags, tag the result) is measured,
// not the hosts'.
//
//   build/bench/switch/switch_benchmark            # full run (~20 s)
//   build/bench/switch/switch_benchmark --quick    # a second or two (CI)
//
// Times are CPU time of the benchmark thread (CLOCK_THREAD_CPUTIME_ID), the
// median of several repetitions: on a shared machine, time spent
// descheduled would otherwise count against whichever row it hit. "GB/s
// reduced" counts the input bytes folded: 8 x 4096 per operation.
#include <time.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/aligned_buffer.h"
#include "base/clock.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "reduce/reduce.h"
#include "switch/aggregation_node.h"

namespace netfold::sw {
namespace {

using proto::AggregationHeader;
using proto::DataType;
using proto::ReduceOp;

constexpr size_t kChildren = 8;  // the main table's fan-in
constexpr size_t kPayload = 4096;
constexpr uint32_t kSlots = 8;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs `batch` (which performs `ops_per_batch` operations) for `seconds` of
// CPU time; returns operations per second.
double OpsPerSecond(const std::function<void()>& batch, size_t ops_per_batch, double seconds) {
  size_t ops = 0;
  const double start = ThreadCpuSeconds();
  double now = start;
  while (now - start < seconds) {
    batch();
    ops += ops_per_batch;
    now = ThreadCpuSeconds();
  }
  return static_cast<double>(ops) / (now - start);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Counts what the node sends; reads one byte so nothing is optimized away.
class CountingOutput : public NodeOutput {
 public:
  void SendToParent(std::span<const uint8_t> m) override { Count(m); }
  void SendToChild(size_t, std::span<const uint8_t> m) override { Count(m); }
  void Multicast(std::span<const uint8_t> m) override { Count(m); }
  uint64_t messages = 0;
  uint64_t checksum = 0;

 private:
  void Count(std::span<const uint8_t> m) {
    ++messages;
    checksum += m.empty() ? 0 : m[m.size() - 1];
  }
};

// Input buffers that are normal finite numbers as fp32 and as int32, on a
// cache line each: where the switch's receive buffers put a request's
// elements (RcQpConfig::recv_line_offset), and the best case for the
// references.
std::vector<LineOffsetVector<0>> Inputs(size_t children) {
  std::vector<LineOffsetVector<0>> in(children, LineOffsetVector<0>(kPayload));
  uint32_t x = 12345;
  for (auto& buf : in) {
    for (size_t i = 0; i < kPayload; i += 4) {
      x = x * 1664525u + 1013904223u;
      const float f = 1.0f + static_cast<float>(x >> 9) * 1e-7f;
      std::memcpy(&buf[i], &f, 4);
    }
  }
  return in;
}

struct Row {
  std::string name;
  double node_ops = 0, fold_ops = 0, chain_ops = 0;  // medians
  double fold_ratio = 0, chain_ratio = 0;            // medians of per-repetition ratios
};

Row Measure(DataType type, bool root, bool reverse, size_t children, double seconds, int reps,
            uint32_t slots = kSlots) {
  const size_t count = kPayload / proto::DataTypeSize(type);
  const std::vector<LineOffsetVector<0>> in = Inputs(children);
  absl::StatusOr<reduce::Kernel> kernel = reduce::GetKernel(type, ReduceOp::kSum);
  if (!kernel.ok()) {
    std::fprintf(stderr, "no kernel: %s\n", kernel.status().ToString().c_str());
    std::exit(1);
  }

  CountingOutput out;
  AggregationNodeConfig config;
  config.tree_id = 1;
  config.group_id = 1;
  config.epoch = 1;
  config.num_slots = slots;
  config.slot_bytes = kPayload;
  for (uint32_t c = 0; c < children; ++c) config.children.push_back({{c}});
  config.has_parent = !root;
  config.multicast = true;
  absl::StatusOr<std::unique_ptr<AggregationNode>> node =
      AggregationNode::Create(config, &out, RealClock());
  if (!node.ok()) {
    std::fprintf(stderr, "node: %s\n", node.status().ToString().c_str());
    std::exit(1);
  }
  AggregationHeader h;
  h.tree_id = 1;
  h.group_id = 1;
  h.epoch = 1;
  h.dtype = type;
  h.op = ReduceOp::kSum;
  h.count = static_cast<uint32_t>(count);
  h.has_data = true;
  uint64_t seq = 0;
  constexpr size_t kBatch = 64;
  auto node_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i, ++seq) {
      h.seq = seq;
      for (size_t k = 0; k < children; ++k) {
        const size_t c = reverse ? children - 1 - k : k;
        (*node)->OnChildMessage(c, h, in[c]);
      }
    }
  };

  LineOffsetVector<0> acc(kPayload);
  std::vector<const void*> inputs(children);
  for (size_t c = 0; c < children; ++c) inputs[c] = in[c].data();
  uint64_t sink = 0;
  auto fold_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i) {
      kernel->Fold(acc.data(), inputs, count);
      sink += acc[i % kPayload];
    }
  };
  auto chain_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i) {
      std::memcpy(acc.data(), in[0].data(), kPayload);
      for (size_t c = 1; c < children; ++c) kernel->Reduce(acc.data(), in[c].data(), count);
      sink += acc[i % kPayload];
    }
  };

  Row row;
  row.name = absl::StrFormat("%s sum, %s%s%s", proto::DataTypeName(type),
                             root ? "root" : "inner", reverse ? ", reversed" : "",
                             slots != kSlots ? absl::StrFormat(", K=%d", slots) : "");
  // The three are interleaved within each repetition, so that a busy
  // neighbour on a shared machine slows all of them alike; the ratio is
  // taken per repetition.
  node_batch();  // warm-up: caches, first touch, kernel dispatch
  fold_batch();
  chain_batch();
  std::vector<double> node_rate, fold, chain, fold_ratio, chain_ratio;
  for (int r = 0; r < reps; ++r) {
    node_rate.push_back(OpsPerSecond(node_batch, kBatch, seconds));
    fold.push_back(OpsPerSecond(fold_batch, kBatch, seconds));
    chain.push_back(OpsPerSecond(chain_batch, kBatch, seconds));
    fold_ratio.push_back(node_rate.back() / fold.back());
    chain_ratio.push_back(node_rate.back() / chain.back());
  }
  row.node_ops = Median(node_rate);
  row.fold_ops = Median(fold);
  row.chain_ops = Median(chain);
  row.fold_ratio = Median(fold_ratio);
  row.chain_ratio = Median(chain_ratio);
  const uint64_t completed = (*node)->counters().operations_completed.load();
  if (completed != seq || out.messages != seq || (*node)->counters().TotalDrops() != 0) {
    std::fprintf(stderr, "%s: %llu operations, %llu completed, %llu sent, %llu drops\n",
                 row.name.c_str(), static_cast<unsigned long long>(seq),
                 static_cast<unsigned long long>(completed),
                 static_cast<unsigned long long>(out.messages),
                 static_cast<unsigned long long>((*node)->counters().TotalDrops()));
    std::exit(1);
  }
  if (sink == 42 && out.checksum == 42) std::printf(" ");  // keeps the results alive
  return row;
}

// The integrity tag at the node: fp32 sum, root, in order, `children`
// children, with and without the key, interleaved per repetition. With the
// key the requests carry tags computed beforehand for seqs 0..kTagged-1;
// every kTagged operations the node is reset (Abort) so that the seqs, and
// so the tags, come round again. Returns {plain ops/s, tagged ops/s, ratio,
// BLAKE2b GB/s over one 4 KiB request}.
struct IntegrityRow {
  double plain_ops = 0, tagged_ops = 0, ratio = 0, hash_gbps = 0;
};

IntegrityRow MeasureIntegrity(size_t children, double seconds, int reps) {
  constexpr uint64_t kTagged = 2048;
  constexpr size_t kHeader = proto::kAggregationHeaderSize;
  const size_t count = kPayload / sizeof(float);
  const std::vector<LineOffsetVector<0>> in = Inputs(children);
  const proto::AggregationKey key = proto::NewAggregationKey();
  AggregationHeader h;
  h.tree_id = 1;
  h.group_id = 1;
  h.epoch = 1;
  h.dtype = DataType::kFp32;
  h.op = ReduceOp::kSum;
  h.count = static_cast<uint32_t>(count);
  h.has_data = true;

  // Each child's request buffer: header, elements (on a cache line, as the
  // switch receives them), tag; and the header and tag of every seq.
  using Message = LineOffsetVector<kCacheLine - kHeader>;
  std::vector<Message> msg(children, Message(kHeader + kPayload + proto::kAggregationTagSize));
  std::vector<std::array<uint8_t, kHeader>> headers(kTagged);
  std::vector<proto::AggregationTag> tags(kTagged * children);
  for (size_t c = 0; c < children; ++c) std::memcpy(msg[c].data() + kHeader, in[c].data(), kPayload);
  for (uint64_t s = 0; s < kTagged; ++s) {
    AggregationHeader t = h;
    t.seq = s;
    t.has_tag = true;
    (void)proto::EncodeAggregationHeader(t, headers[s]);
    for (size_t c = 0; c < children; ++c) {
      std::memcpy(msg[c].data(), headers[s].data(), kHeader);
      tags[s * children + c] =
          proto::ComputeAggregationTag(key, {msg[c].data(), kHeader + kPayload});
    }
  }

  struct Side {
    CountingOutput out;
    std::unique_ptr<AggregationNode> node;
    uint64_t seq = 0;
  } plain, tagged;
  for (Side* side : {&plain, &tagged}) {
    AggregationNodeConfig config;
    config.tree_id = 1;
    config.group_id = 1;
    config.epoch = 1;
    config.num_slots = kSlots;
    config.slot_bytes = kPayload + proto::kAggregationTagSize;  // the same elements fit
    for (uint32_t c = 0; c < children; ++c) config.children.push_back({{c}});
    if (side == &tagged) config.integrity_key = key;
    side->node = std::move(*AggregationNode::Create(config, &side->out, RealClock()));
  }
  constexpr size_t kBatch = 64;
  auto plain_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i, ++plain.seq) {
      h.seq = plain.seq;
      for (size_t c = 0; c < children; ++c) plain.node->OnChildMessage(c, h, in[c]);
    }
  };
  AggregationHeader th = h;
  th.has_tag = true;
  auto tagged_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i, ++tagged.seq) {
      const uint64_t s = tagged.seq % kTagged;
      if (s == 0 && tagged.seq > 0) tagged.node->Abort(proto::AggregationStatus::kAborted);
      th.seq = s;
      for (size_t c = 0; c < children; ++c) {
        uint8_t* m = msg[c].data();
        std::memcpy(m, headers[s].data(), kHeader);
        std::memcpy(m + kHeader + kPayload, tags[s * children + c].data(), proto::kAggregationTagSize);
        tagged.node->OnChildMessage(c, th, {m + kHeader, kPayload},
                                    {m, kHeader + kPayload + proto::kAggregationTagSize});
      }
    }
  };
  uint64_t sink = 0;
  auto hash_batch = [&] {
    for (size_t i = 0; i < kBatch; ++i) {
      sink += proto::ComputeAggregationTag(key, {in[i % children].data(), kPayload})[0];
    }
  };
  plain_batch();
  tagged_batch();
  hash_batch();
  std::vector<double> p, t, ratio, hash;
  for (int r = 0; r < reps; ++r) {
    p.push_back(OpsPerSecond(plain_batch, kBatch, seconds));
    t.push_back(OpsPerSecond(tagged_batch, kBatch, seconds));
    hash.push_back(OpsPerSecond(hash_batch, kBatch, seconds) * kPayload * 1e-9);
    ratio.push_back(t.back() / p.back());
  }
  if (tagged.node->counters().TotalDrops() != 0 || plain.node->counters().TotalDrops() != 0) {
    std::fprintf(stderr, "integrity: %llu drops with the tag, %llu without\n",
                 static_cast<unsigned long long>(tagged.node->counters().TotalDrops()),
                 static_cast<unsigned long long>(plain.node->counters().TotalDrops()));
    std::exit(1);
  }
  if (sink == 42 && plain.out.checksum == 42 && tagged.out.checksum == 42) std::printf(" ");
  return {Median(p), Median(t), Median(ratio), Median(hash)};
}

int Main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  const double seconds = quick ? 0.03 : 0.3;
  const int reps = quick ? 3 : 5;
  std::printf("switch/: AggregationNode, %zu children x %zu B, K=%u, no I/O; reduce/ target %s\n",
              kChildren, kPayload, kSlots, std::string(reduce::ActiveTarget()).c_str());
  std::printf("CPU time of this thread; node, Fold and Reduce x7 interleaved, median of %d x %.2f s%s\n\n", reps, seconds,
              quick ? " (--quick: noisy)" : "");
  std::printf("%-30s %12s %9s | %9s %7s | %11s %7s | %s\n", "case", "node ops/s", "node GB/s",
              "Fold GB/s", "ratio", "Reduce x7", "ratio", "goal >= 0.5x (Fold / Reduce x7)");
  const double bytes = static_cast<double>(kChildren * kPayload);
  auto print = [&](const Row& r) {
    std::printf("%-30s %12.0f %9.2f | %9.2f %6.2fx | %11.2f %6.2fx |  %s / %s\n",
                r.name.c_str(), r.node_ops, r.node_ops * bytes * 1e-9, r.fold_ops * bytes * 1e-9,
                r.fold_ratio, r.chain_ops * bytes * 1e-9, r.chain_ratio,
                r.fold_ratio >= 0.5 ? "met" : "not met", r.chain_ratio >= 0.5 ? "met" : "not met");
  };
  for (DataType type : {DataType::kFp32, DataType::kInt32}) {
    for (auto [root, reverse] : {std::pair{true, false}, std::pair{false, false},
                                 std::pair{true, true}}) {
      print(Measure(type, root, reverse, kChildren, seconds, reps));
    }
  }
  // With the manager's default window (K = 64) a slot comes round every 64
  // operations: what it touches per operation is no longer in the cache
  // unless it is shared between slots.
  for (bool reverse : {false, true}) {
    print(Measure(DataType::kFp32, true, reverse, kChildren, seconds, reps, 64));
  }
  std::printf("\n\"reversed\": children arrive 7..0, so seven contributions wait (a copy each)\n"
              "before the in-order fold can start. K=64: the manager's default window.\n");
  // As the group grows: the fan-in of one node (its children: ranks on a
  // leaf, or child switches), fp32 sum at the group root, in order.
  std::printf("\nfan-in (children of one node), fp32 sum, root, in order:\n");
  std::printf("%-8s %12s %9s | %9s %7s | %11s %7s\n", "children", "node ops/s", "node GB/s",
              "Fold GB/s", "ratio", "chain GB/s", "ratio");
  for (size_t children : {2, 4, 8, 16, 32}) {
    const Row r = Measure(DataType::kFp32, true, false, children, seconds, reps);
    const double b = static_cast<double>(children * kPayload);
    std::printf("%-8zu %12.0f %9.2f | %9.2f %6.2fx | %11.2f %6.2fx\n", children, r.node_ops,
                r.node_ops * b * 1e-9, r.fold_ops * b * 1e-9, r.fold_ratio,
                r.chain_ops * b * 1e-9, r.chain_ratio);
  }
  // The integrity tag (docs/security.md): the node checks every child's
  // tag and tags its result; hosts tag and check their own messages.
  std::printf("\nintegrity tag (keyed BLAKE2b, 16 B), fp32 sum, root, in order:\n");
  std::printf("%-8s %14s %14s %7s | %s\n", "children", "plain ops/s", "tagged ops/s", "ratio",
              "BLAKE2b GB/s (4 KiB)");
  for (size_t children : {2, 8}) {
    const IntegrityRow r = MeasureIntegrity(children, seconds, reps);
    std::printf("%-8zu %14.0f %14.0f %6.2fx | %.2f\n", children, r.plain_ops, r.tagged_ops,
                r.ratio, r.hash_gbps);
  }
  // The goal is reported, not enforced: a loaded machine must not fail CI.
  return 0;
}

}  // namespace
}  // namespace netfold::sw

int main(int argc, char** argv) { return netfold::sw::Main(argc, argv); }
