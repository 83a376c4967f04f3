// The host-side allreduce algorithms against each other on the same
// transport: p ranks as threads, each with its own RoCEv2 endpoint on a UDP
// socket of 127.0.0.1, connected through the OOB allgather like processes.
// For each size it prints the time per allreduce, the algorithm bandwidth,
// the ratio to the ring measured in the same run, and the payload bytes each
// rank sent (against the ring's 2(p-1)V/p). The size thresholds of the auto
// selection (host/algorithms/selection.h) come from these ratios.
//
//   build/bench/algorithms/algorithms_bench                 # p = 4 and 8, 64 B .. 16 MiB
//   build/bench/algorithms/algorithms_bench --quick         # a few seconds (CI)
//   build/bench/algorithms/algorithms_bench --ranks=4 --sizes=1024,1048576 --fragment=65536
//
// Threads block in the endpoint's epoll with a timeout (no busy polling), as
// the default configuration does; on a machine with fewer cores than ranks
// the figures include scheduling.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/peer_channels.h"
#include "host/algorithms/testing/thread_oob.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::host::algorithms {
namespace {

struct Options {
  std::vector<uint32_t> ranks = {4, 8};
  std::vector<size_t> sizes = {64,        1024,       4096,        16 * 1024, 64 * 1024,
                               256 * 1024, 1024 * 1024, 4 << 20, 16 << 20};
  std::vector<Algorithm> algorithms = {Algorithm::kRing, Algorithm::kBidirRing, Algorithm::kTree,
                                       Algorithm::kTreeScatter};
  size_t fragment = 64 * 1024;
  absl::Duration ack_timeout = RcPeerChannelsOptions{}.ack_timeout;
  size_t bytes_per_point = 48 << 20;  // iterations = this / size, within [min, max]
  int min_iterations = 5;
  int max_iterations = 300;
};

struct Point {
  double us_per_op = 0;
  uint64_t bytes_sent_max = 0;  // the most any rank sent per operation
  uint64_t retransmitted = 0;   // packets, all ranks, per operation (rounded down)
  absl::Status status;
};

// Runs every (algorithm, size) for p ranks; results indexed [algorithm][size].
std::map<Algorithm, std::vector<Point>> RunRanks(uint32_t p, const Options& o) {
  ThreadOob oob(p, absl::Seconds(120));
  std::map<Algorithm, std::vector<Point>> results;
  for (Algorithm a : o.algorithms) results[a].resize(o.sizes.size());
  std::vector<std::vector<std::vector<uint64_t>>> sent(
      o.algorithms.size(), std::vector<std::vector<uint64_t>>(o.sizes.size(),
                                                              std::vector<uint64_t>(p, 0)));
  std::vector<std::vector<uint64_t>> retx(o.algorithms.size(),
                                          std::vector<uint64_t>(o.sizes.size(), 0));
  std::vector<std::vector<uint64_t>> retx_ops(o.algorithms.size(),
                                              std::vector<uint64_t>(o.sizes.size(), 1));
  absl::Mutex retx_mu;
  std::vector<std::thread> threads;
  std::vector<absl::Status> setup(p);
  for (uint32_t r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto port = transport::UdpPort::Create(
          {.local = {0x7f000001, 0}, .pool = {.num_buffers = 8192}});
      if (!port.ok()) {
        setup[r] = port.status();
        std::fprintf(stderr, "rank %u: %s\n", r, port.status().ToString().c_str());
        std::exit(1);
      }
      transport::RoceEndpoint endpoint(std::move(*port), RealClock());
      auto channels = RcPeerChannels::Create(
          &endpoint, r, p,
          {.max_message_bytes = static_cast<uint32_t>(o.fragment + 64),
           .ack_timeout = o.ack_timeout});
      absl::Status s = channels.ok() ? (*channels)->ConnectWithOob(oob.For(r)) : channels.status();
      std::unique_ptr<AllreduceEngine> engine;
      if (s.ok()) {
        auto e = AllreduceEngine::Create(channels->get(), {.fragment_bytes = o.fragment,
                                                           .op_timeout = absl::Seconds(60)});
        s = e.status();
        if (e.ok()) engine = std::move(*e);
      }
      if (!s.ok()) {
        std::fprintf(stderr, "rank %u: setup failed: %s\n", r, s.ToString().c_str());
        std::exit(1);
      }
      std::vector<float> buffer(o.sizes.back() / sizeof(float) + 1, 0.0f);
      // Sizes in turn; for each, the algorithms alternate over kRounds rounds,
      // so that a change in the machine's load hits them all alike.
      constexpr int kRounds = 3;
      for (size_t si = 0; si < o.sizes.size(); ++si) {
        const size_t count = std::max<size_t>(1, o.sizes[si] / sizeof(float));
        const int iterations = static_cast<int>(std::clamp<size_t>(
            o.bytes_per_point / o.sizes[si] / kRounds, o.min_iterations, o.max_iterations));
        std::vector<double> total_us(o.algorithms.size(), 0);
        for (int round = 0; round < kRounds; ++round) {
          for (size_t ai = 0; ai < o.algorithms.size(); ++ai) {
            AllreduceArgs args{.algorithm = o.algorithms[ai], .send = buffer.data(),
                               .recv = buffer.data(), .count = count};
            OpStats stats;
            absl::Status st;
            if (round == 0) {
              for (int i = 0; i < 2 && st.ok(); ++i) st = RunAllreduce(*engine, args, &stats);
            }
            auto retransmissions = [&] {
              uint64_t n = 0;
              for (uint32_t q = 0; q < p; ++q) {
                if (q != r) n += (*channels)->qp(q)->counters().packets_retransmitted.load();
              }
              return n;
            };
            (void)oob.Barrier(r);
            const uint64_t retx_before = retransmissions();
            const absl::Time start = absl::Now();
            for (int i = 0; i < iterations && st.ok(); ++i) {
              st = RunAllreduce(*engine, args, &stats);
            }
            total_us[ai] += absl::ToDoubleMicroseconds(absl::Now() - start);
            const uint64_t retx_during = retransmissions() - retx_before;
            (void)oob.Barrier(r);
            if (!st.ok()) {
              std::fprintf(stderr, "rank %u: %s\n", r, st.ToString().c_str());
              std::exit(1);
            }
            sent[ai][si][r] = stats.bytes_sent;
            absl::MutexLock lock(&retx_mu);
            retx[ai][si] += retx_during;
            if (r == 0 && round + 1 == kRounds) {
              Point& pt = results[o.algorithms[ai]][si];
              pt.us_per_op = total_us[ai] / (kRounds * iterations);
              pt.status = st;
            }
          }
        }
        if (r == 0) {
          absl::MutexLock lock(&retx_mu);
          for (size_t ai = 0; ai < o.algorithms.size(); ++ai) {
            retx_ops[ai][si] = static_cast<uint64_t>(kRounds) * iterations;
          }
        }
      }
      // Let the last acknowledgements out before the endpoint closes.
      (void)oob.Barrier(r);
      for (int i = 0; i < 10; ++i) (*channels)->Progress(absl::Milliseconds(1));
    });
  }
  for (auto& t : threads) t.join();
  for (size_t ai = 0; ai < o.algorithms.size(); ++ai) {
    for (size_t si = 0; si < o.sizes.size(); ++si) {
      results[o.algorithms[ai]][si].bytes_sent_max =
          *std::max_element(sent[ai][si].begin(), sent[ai][si].end());
      results[o.algorithms[ai]][si].retransmitted = retx[ai][si] / retx_ops[ai][si];
    }
  }
  return results;
}

std::string Size(size_t b) {
  if (b >= (1 << 20)) return absl::StrFormat("%d MiB", b >> 20);
  if (b >= 1024) return absl::StrFormat("%d KiB", b >> 10);
  return absl::StrFormat("%d B", b);
}

void Print(uint32_t p, const Options& o, const std::map<Algorithm, std::vector<Point>>& res) {
  std::printf("\n## %u ranks (fragment %s, ACK timeout %s)\n\n", p, Size(o.fragment).c_str(),
              absl::FormatDuration(o.ack_timeout).c_str());
  std::printf("| size | algorithm | us/op | algbw MB/s | time / ring | bytes sent per rank (max) | / 2(p-1)V/p | retransmitted packets/op |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (size_t si = 0; si < o.sizes.size(); ++si) {
    const size_t v = std::max<size_t>(sizeof(float), o.sizes[si] / sizeof(float) * sizeof(float));
    const double ring_us = res.at(Algorithm::kRing)[si].us_per_op;
    const double optimal = 2.0 * (p - 1) * v / p;
    for (Algorithm a : o.algorithms) {
      const Point& pt = res.at(a)[si];
      std::printf("| %s | %s | %.1f | %.1f | %.2f | %llu | %.2f | %llu |\n", Size(v).c_str(),
                  std::string(AlgorithmName(a)).c_str(), pt.us_per_op, v / pt.us_per_op,
                  pt.us_per_op / ring_us, static_cast<unsigned long long>(pt.bytes_sent_max),
                  pt.bytes_sent_max / optimal, static_cast<unsigned long long>(pt.retransmitted));
    }
  }
  // What the auto selection should use: the largest size where the tree is
  // fastest, the smallest from which bidir beats the ring.
  size_t tree_max = 0, bidir_min = 0;
  for (size_t si = 0; si < o.sizes.size(); ++si) {
    const double tree = res.at(Algorithm::kTree)[si].us_per_op;
    const double ring = res.at(Algorithm::kRing)[si].us_per_op;
    const double bidir = res.at(Algorithm::kBidirRing)[si].us_per_op;
    if (tree <= std::min(ring, bidir)) tree_max = o.sizes[si];
  }
  for (size_t si = o.sizes.size(); si-- > 0;) {
    if (res.at(Algorithm::kBidirRing)[si].us_per_op < res.at(Algorithm::kRing)[si].us_per_op) {
      bidir_min = o.sizes[si];
    } else {
      break;
    }
  }
  std::printf("\nmeasured: tree fastest up to %s; bidir faster than ring from %s\n",
              Size(tree_max).c_str(), bidir_min ? Size(bidir_min).c_str() : "(never)");
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      o.ranks = {4};
      o.sizes = {1024, 16 * 1024, 256 * 1024, 1 << 20};
      o.bytes_per_point = 4 << 20;
      o.min_iterations = 3;
      o.max_iterations = 50;
    } else if (arg.rfind("--ranks=", 0) == 0) {
      o.ranks.clear();
      for (absl::string_view v : absl::StrSplit(arg.substr(8), ',')) {
        uint32_t p = 0;
        if (!absl::SimpleAtoi(v, &p) || p < 2) {
          std::fprintf(stderr, "bad --ranks\n");
          return 2;
        }
        o.ranks.push_back(p);
      }
    } else if (arg.rfind("--fragment=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(11), &o.fragment) || o.fragment < 16) {
        std::fprintf(stderr, "bad --fragment\n");
        return 2;
      }
    } else if (arg.rfind("--ack-timeout-ms=", 0) == 0) {
      int ms = 0;
      if (!absl::SimpleAtoi(arg.substr(17), &ms) || ms <= 0) {
        std::fprintf(stderr, "bad --ack-timeout-ms\n");
        return 2;
      }
      o.ack_timeout = absl::Milliseconds(ms);
    } else if (arg.rfind("--sizes=", 0) == 0) {
      o.sizes.clear();
      for (absl::string_view v : absl::StrSplit(arg.substr(8), ',')) {
        size_t b = 0;
        if (!absl::SimpleAtoi(v, &b) || b == 0) {
          std::fprintf(stderr, "bad --sizes\n");
          return 2;
        }
        o.sizes.push_back(b);
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--ranks=4,8] [--sizes=BYTES,...] [--fragment=BYTES] "
                   "[--ack-timeout-ms=MS]\n",
                   argv[0]);
      return 2;
    }
  }
  std::sort(o.sizes.begin(), o.sizes.end());
  std::printf("# host allreduce algorithms, fp32 sum, in place, ranks as threads on UDP loopback\n");
  for (uint32_t p : o.ranks) Print(p, o, RunRanks(p, o));
  return 0;
}

}  // namespace
}  // namespace netfold::host::algorithms

int main(int argc, char** argv) { return netfold::host::algorithms::Main(argc, argv); }
