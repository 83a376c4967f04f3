// Throughput of the reduction ALU against memory references measured in the
// same run: GB/s of input consumed by `dst op= src` (Reduce) and by an
// 8-input Fold, at an L1-, L2- and DRAM-sized vector, each next to a plain
// loop of the same element width (`a[i] += b[i]`, and
// `out[i] = in0[i] + ... + in7[i]` for the fold) and memcpy. After the
// Google Benchmark output it prints one table row per kernel: median GB/s,
// median reference GB/s, their ratio, and the goal of issue 3 where one
// applies (DRAM: sum/min/max on 32/64-bit types >= 0.9, fp16/bf16 >= 0.5).
//
//   reduce_benchmark                  # full run (a few minutes)
//   reduce_benchmark --short          # CI smoke run (seconds); also
//                                     # NETFOLD_BENCH_SHORT=1
//   reduce_benchmark --target=AVX2    # kernels of another SIMD target
//   reduce_benchmark --benchmark_filter=fp16   # any Google Benchmark flag
//
// "Input consumed" counts every operand read: Reduce reads dst and src
// (2 x vector bytes), the 8-input fold reads 8 vectors, the references the
// same, memcpy its source. Times are CPU time of the benchmark thread (the
// Google Benchmark default): on a shared machine, time spent descheduled
// would otherwise count against whichever row it hit. The vector sizes are per operand: 4 KiB (the
// fold's 9 vectors fit a 48 KiB L1d), 64 KiB (576 KiB, within a 1 MiB L2),
// and 64 MiB (beyond any L3).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/reduce.h"

namespace netfold::reduce {
namespace {

using proto::DataType;
using proto::ReduceOp;

constexpr size_t kFoldInputs = 8;
constexpr size_t kFoldOutput = kFoldInputs;       // buffer index of the Fold's output
constexpr size_t kReduceDst = kFoldInputs + 1;    // of Reduce's accumulator
constexpr size_t kNumBuffers = kFoldInputs + 2;

struct Size {
  std::string_view name;
  size_t bytes;  // per operand
};

// --------------------------------------------------------------- buffers

// kNumBuffers vectors of one size, 64-byte aligned, filled once with bytes
// that are normal finite numbers whether read as fp16, bf16, fp32 or fp64
// (every 16-bit half is 0x3Cxx), so no kernel slows down on subnormals or
// NaNs. Shared by every benchmark of that size: the Fold reads 0..7 and
// writes kFoldOutput, Reduce writes kReduceDst, so no benchmark changes
// another's inputs. Buffer i starts i * 4544 bytes into its allocation, so
// that the streams do not all map to the same cache sets and 4 KiB-alias
// each other (large allocations come back page-aligned), which real
// buffers would not do either.
//
// Products in place would still leave the normal range: dst *= ~2^-7 (the
// fp32 reading of the fill) falls through the subnormals to zero within a
// few dozen iterations, and a subnormal product costs an Intel core a
// microcode assist per vector (fp32 prod measured 0.27x of the reference at
// DRAM size, spread 20 %, before). So every Reduce row starts from the
// fill (copied into kReduceDst before it is timed), and prod rows take
// their source from ones(type): every element is one in that type, which
// keeps dst where it is and costs the multiplier what any normal operand
// does.
class Buffers {
 public:
  static Buffers& ForSize(size_t bytes) {
    static auto* all = new std::map<size_t, std::unique_ptr<Buffers>>();
    auto& slot = (*all)[bytes];
    if (!slot) slot.reset(new Buffers(bytes));
    return *slot;
  }
  uint8_t* at(size_t i) { return buffers_[i]; }
  const void* const* inputs() const { return inputs_; }
  const uint8_t* ones(DataType type) {
    auto& slot = ones_[type];
    if (slot == nullptr) {
      slot = Allocate(bytes_, kNumBuffers);
      const size_t size = proto::DataTypeSize(type);
      uint8_t one[8] = {1};  // integers: 1, little-endian
      if (type == DataType::kFp16) std::memcpy(one, "\x00\x3C", 2);
      if (type == DataType::kBf16) std::memcpy(one, "\x80\x3F", 2);
      if (type == DataType::kFp32) std::memcpy(one, "\x00\x00\x80\x3F", 4);
      if (type == DataType::kFp64) std::memcpy(one, "\x00\x00\x00\x00\x00\x00\xF0\x3F", 8);
      for (size_t b = 0; b + size <= bytes_; b += size) std::memcpy(slot + b, one, std::min<size_t>(size, 8));
    }
    return slot;
  }

 private:
  static constexpr size_t kStagger = 4096 + 448;

  // Buffer number i of `bytes`: i * kStagger bytes into a page-aligned block.
  static uint8_t* Allocate(size_t bytes, size_t i) {
    const size_t alloc = (bytes + (kNumBuffers + 1) * kStagger + 4095) / 4096 * 4096;
    auto* base = static_cast<uint8_t*>(std::aligned_alloc(4096, alloc));
    if (base == nullptr) {
      std::fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
      std::exit(1);
    }
    return base + i * kStagger;
  }

  explicit Buffers(size_t bytes) : bytes_(bytes) {
    uint32_t seed = 12345;
    for (size_t i = 0; i < kNumBuffers; ++i) {
      buffers_[i] = Allocate(bytes, i);
      for (size_t b = 0; b < bytes; b += 2) {
        seed = seed * 1664525u + 1013904223u;
        buffers_[i][b] = static_cast<uint8_t>(seed >> 24);
        buffers_[i][b + 1] = 0x3C;
      }
      if (i < kFoldInputs) inputs_[i] = buffers_[i];
    }
  }
  size_t bytes_;
  uint8_t* buffers_[kNumBuffers] = {};
  const void* inputs_[kFoldInputs] = {};
  std::map<DataType, uint8_t*> ones_;
};

// ---------------------------------------------------- memory references

// Compiled for the best ISA at run time (like the kernels) and at -O3
// (meson override), so the references are real vector loops.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NETFOLD_BENCH_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NETFOLD_BENCH_CLONES
#endif

template <typename T>
NETFOLD_BENCH_CLONES __attribute__((noinline)) void AddInPlace(T* __restrict a,
                                                               const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] + b[i]);
}

template <typename T>
NETFOLD_BENCH_CLONES __attribute__((noinline)) void AddEight(T* __restrict out,
                                                             const void* const* in, size_t n) {
  const T* __restrict i0 = static_cast<const T*>(in[0]);
  const T* __restrict i1 = static_cast<const T*>(in[1]);
  const T* __restrict i2 = static_cast<const T*>(in[2]);
  const T* __restrict i3 = static_cast<const T*>(in[3]);
  const T* __restrict i4 = static_cast<const T*>(in[4]);
  const T* __restrict i5 = static_cast<const T*>(in[5]);
  const T* __restrict i6 = static_cast<const T*>(in[6]);
  const T* __restrict i7 = static_cast<const T*>(in[7]);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(i0[i] + i1[i] + i2[i] + i3[i] + i4[i] + i5[i] + i6[i] + i7[i]);
  }
}

template <typename T>
void RunAddInPlace(uint8_t* a, const uint8_t* b, size_t bytes) {
  AddInPlace(reinterpret_cast<T*>(a), reinterpret_cast<const T*>(b), bytes / sizeof(T));
}
template <typename T>
void RunAddEight(uint8_t* out, const void* const* in, size_t bytes) {
  AddEight(reinterpret_cast<T*>(out), in, bytes / sizeof(T));
}

// ------------------------------------------------------------ benchmarks

enum class Kind { kReduce, kFold };

std::string_view KindName(Kind kind) { return kind == Kind::kReduce ? "reduce" : "fold8"; }

size_t InputBytes(Kind kind, size_t vector_bytes) {
  return (kind == Kind::kReduce ? 2 : kFoldInputs) * vector_bytes;
}

// The reference width for an element size: the same width, 8 bytes for the
// 16-byte pair types.
size_t ReferenceWidth(size_t element_size) { return std::min<size_t>(element_size, 8); }

std::string ReferenceName(Kind kind, size_t width, std::string_view size) {
  return absl::StrFormat("ref_%s/u%d/%s", kind == Kind::kReduce ? "add" : "add8", width * 8, size);
}

void KernelBenchmark(benchmark::State& state, Kernel kernel, DataType type, ReduceOp op, Kind kind,
                     size_t vector_bytes) {
  Buffers& buffers = Buffers::ForSize(vector_bytes);
  const size_t count = vector_bytes / kernel.element_size();
  const uint8_t* src = op == ReduceOp::kProd ? buffers.ones(type) : buffers.at(1);
  // Other rows leave any bits in the accumulator (the integer reference adds
  // to the fp bits): start from the fill, outside the timed loop.
  if (kind == Kind::kReduce) std::memcpy(buffers.at(kReduceDst), buffers.at(2), vector_bytes);
  for (auto _ : state) {
    if (kind == Kind::kReduce) {
      kernel.Reduce(buffers.at(kReduceDst), src, count);
    } else {
      kernel.Fold(buffers.at(kFoldOutput), {buffers.inputs(), kFoldInputs}, count);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(InputBytes(kind, vector_bytes)));
}

void ReferenceBenchmark(benchmark::State& state, Kind kind, size_t width, size_t vector_bytes) {
  Buffers& buffers = Buffers::ForSize(vector_bytes);
  using AddFn = void (*)(uint8_t*, const uint8_t*, size_t);
  using Add8Fn = void (*)(uint8_t*, const void* const*, size_t);
  AddFn add = width == 1 ? RunAddInPlace<uint8_t>
              : width == 2 ? RunAddInPlace<uint16_t>
              : width == 4 ? RunAddInPlace<uint32_t>
                           : RunAddInPlace<uint64_t>;
  Add8Fn add8 = width == 1 ? RunAddEight<uint8_t>
                : width == 2 ? RunAddEight<uint16_t>
                : width == 4 ? RunAddEight<uint32_t>
                             : RunAddEight<uint64_t>;
  for (auto _ : state) {
    if (kind == Kind::kReduce) {
      add(buffers.at(kReduceDst), buffers.at(1), vector_bytes);
    } else {
      add8(buffers.at(kFoldOutput), buffers.inputs(), vector_bytes);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(InputBytes(kind, vector_bytes)));
}

void MemcpyBenchmark(benchmark::State& state, size_t vector_bytes) {
  Buffers& buffers = Buffers::ForSize(vector_bytes);
  for (auto _ : state) {
    std::memcpy(buffers.at(kFoldOutput), buffers.at(0), vector_bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(vector_bytes));
}

// ------------------------------------------------------------- the table

struct Row {
  std::string name;       // benchmark name of the kernel
  std::string reference;  // benchmark name of its reference
  double goal = 0;        // minimum ratio, 0 if none
};

// Collects GB/s of every repetition of every benchmark, and prints the
// usual console output meanwhile.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  // Colors only on a terminal: meson and CI capture the output.
  CollectingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  // With --benchmark_report_aggregates_only the repetitions never reach a
  // reporter, only their aggregates: the table then takes the "median"
  // aggregate and has no spread.
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const auto it = run.counters.find("bytes_per_second");
      if (it == run.counters.end()) continue;
      const std::string& name = run.run_name.function_name;
      if (run.run_type == Run::RT_Iteration) {
        gbps_[name].push_back(it->second.value / 1e9);
      } else if (run.aggregate_name == "median") {
        aggregate_median_[name] = it->second.value / 1e9;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // Median over repetitions; 0 if the benchmark did not run.
  double Median(const std::string& name) const {
    auto it = gbps_.find(name);
    if (it == gbps_.end() || it->second.empty()) {
      auto agg = aggregate_median_.find(name);
      return agg == aggregate_median_.end() ? 0 : agg->second;
    }
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  // (max - min) / median over repetitions as a column of the table: "-"
  // with fewer than two repetitions seen.
  std::string Spread(const std::string& name) const {
    const double spread = SpreadFraction(name);
    return spread < 0 ? "-" : absl::StrFormat("%.0f%%", 100 * spread);
  }
  // The same as a fraction; -1 with fewer than two repetitions seen.
  double SpreadFraction(const std::string& name) const {
    auto it = gbps_.find(name);
    if (it == gbps_.end() || it->second.size() < 2) return -1;
    const auto [lo, hi] = std::minmax_element(it->second.begin(), it->second.end());
    const double median = Median(name);
    return median > 0 ? (*hi - *lo) / median : 0;
  }

 private:
  std::map<std::string, std::vector<double>> gbps_;
  std::map<std::string, double> aggregate_median_;
};

// A spread (max - min over the median) above which a goal row is flagged.
constexpr double kNoisySpread = 0.2;

void PrintTable(const CollectingReporter& reporter, const std::vector<Row>& rows,
                const std::vector<Size>& sizes, std::string_view target) {
  std::printf("\nreduce/ throughput (target %s): GB/s of input consumed (CPU time), median of repetitions;\n"
              "ratio = kernel / same-width reference measured in this run; spread = (max-min)/median\n\n",
              std::string(target).c_str());
  std::printf("%-34s %9s %7s  %-18s %9s %7s %7s  %s\n", "kernel", "GB/s", "spread", "reference",
              "ref GB/s", "spread", "ratio", "goal");
  for (const Row& row : rows) {
    const double got = reporter.Median(row.name);
    const double ref = reporter.Median(row.reference);
    if (got == 0) continue;
    const double ratio = ref > 0 ? got / ref : 0;
    std::string goal;
    if (row.goal > 0) {
      goal = absl::StrFormat(">= %.1f %s", row.goal, ratio >= row.goal ? "met" : "MISSED");
      // On a shared VM memory bandwidth moves between repetitions; a miss
      // measured through that noise says little (docs/performance.md).
      if (ratio < row.goal && std::max(reporter.SpreadFraction(row.name),
                                       reporter.SpreadFraction(row.reference)) > kNoisySpread) {
        goal += " (noisy: rerun with --benchmark_repetitions=9)";
      }
    }
    std::string ref_short = row.reference.substr(0, row.reference.rfind('/'));
    std::printf("%-34s %9.2f %7s  %-18s %9.2f %7s %7.2f  %s\n", row.name.c_str(), got,
                reporter.Spread(row.name).c_str(), ref_short.c_str(), ref,
                reporter.Spread(row.reference).c_str(), ratio, goal.c_str());
  }
  for (const Size& size : sizes) {
    const std::string name = absl::StrFormat("memcpy/%s", size.name);
    if (reporter.Median(name) == 0) continue;
    std::printf("%-34s %9.2f %7s\n", name.c_str(), reporter.Median(name),
                reporter.Spread(name).c_str());
  }
}

struct Case {
  DataType type;
  ReduceOp op;
};

// The goal of issue 3 for this (type, op), at DRAM size.
double GoalAtDram(DataType type, ReduceOp op) {
  const bool sum_min_max = op == ReduceOp::kSum || op == ReduceOp::kMin || op == ReduceOp::kMax;
  if (!sum_min_max) return 0;
  if (type == DataType::kFp16 || type == DataType::kBf16) return 0.5;
  const size_t size = proto::DataTypeSize(type);
  return (size == 4 || size == 8) && !proto::IsPairType(type) ? 0.9 : 0;
}

bool HasFlag(int argc, char** argv, std::string_view prefix) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).starts_with(prefix)) return true;
  }
  return false;
}

int Main(int argc, char** argv) {
  bool short_mode = std::getenv("NETFOLD_BENCH_SHORT") != nullptr &&
                    std::string_view(std::getenv("NETFOLD_BENCH_SHORT")) != "0";
  std::string target(ActiveTarget());
  // Our flags out, Google Benchmark's (and our defaults) in.
  std::vector<char*> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--short") {
      short_mode = true;
    } else if (arg.starts_with("--target=")) {
      target = std::string(arg.substr(9));
    } else {
      args.push_back(argv[i]);
    }
  }
  static char kRepetitions[] = "--benchmark_repetitions=3";
  static char kInterleave[] = "--benchmark_enable_random_interleaving=true";
  if (!short_mode && !HasFlag(argc, argv, "--benchmark_repetitions")) {
    args.push_back(kRepetitions);
    if (!HasFlag(argc, argv, "--benchmark_enable_random_interleaving")) args.push_back(kInterleave);
  }
  int new_argc = static_cast<int>(args.size());
  benchmark::Initialize(&new_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(new_argc, args.data())) return 1;

  const std::vector<Size> sizes = {{"L1", 4 << 10}, {"L2", 64 << 10}, {"L3", 2 << 20}, {"DRAM", 64 << 20}};
  std::vector<Case> cases;
  if (short_mode) {
    cases = {{DataType::kInt32, ReduceOp::kSum}, {DataType::kFp32, ReduceOp::kSum},
             {DataType::kFp16, ReduceOp::kSum}, {DataType::kBf16, ReduceOp::kSum}};
  } else {
    for (DataType type : {DataType::kInt32, DataType::kInt64, DataType::kFp32, DataType::kFp64,
                          DataType::kFp16, DataType::kBf16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) cases.push_back({type, op});
    }
    cases.push_back({DataType::kUint8, ReduceOp::kSum});
    cases.push_back({DataType::kInt32, ReduceOp::kProd});
    cases.push_back({DataType::kFp32, ReduceOp::kProd});
    cases.push_back({DataType::kInt64, ReduceOp::kLand});
    cases.push_back({DataType::k2Int, ReduceOp::kMinloc});
    cases.push_back({DataType::kDoubleInt, ReduceOp::kMaxloc});
  }
  const double min_time = short_mode ? 0.02 : 0.15;

  std::vector<Row> rows;
  std::map<std::string, bool> references;
  for (const Size& size : sizes) {
    for (Kind kind : {Kind::kReduce, Kind::kFold}) {
      for (const Case& c : cases) {
        absl::StatusOr<Kernel> kernel = GetKernelForTarget(c.type, c.op, target);
        if (!kernel.ok()) {
          std::fprintf(stderr, "%s\n", kernel.status().ToString().c_str());
          return 1;
        }
        const std::string name =
            absl::StrFormat("%s/%s/%s/%s", KindName(kind), proto::DataTypeName(c.type),
                            proto::ReduceOpName(c.op), size.name);
        const size_t width = ReferenceWidth(kernel->element_size());
        const std::string reference = ReferenceName(kind, width, size.name);
        benchmark::RegisterBenchmark(name.c_str(), KernelBenchmark, *kernel, c.type, c.op, kind,
                                     size.bytes)
            ->MinTime(min_time);
        if (!references[reference]) {
          references[reference] = true;
          benchmark::RegisterBenchmark(reference.c_str(), ReferenceBenchmark, kind, width, size.bytes)
              ->MinTime(min_time);
        }
        rows.push_back({name, reference, size.name == "DRAM" ? GoalAtDram(c.type, c.op) : 0});
      }
    }
    benchmark::RegisterBenchmark(absl::StrFormat("memcpy/%s", size.name).c_str(), MemcpyBenchmark,
                                 size.bytes)
        ->MinTime(min_time);
  }

  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  PrintTable(reporter, rows, sizes, target);
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace netfold::reduce

int main(int argc, char** argv) { return netfold::reduce::Main(argc, argv); }
