// gtest helpers shared by the host algorithm tests: launch one allreduce on
// every rank of a LoopbackRanks and check it against the reference.
#ifndef NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_TEST_UTIL_H_
#define NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_TEST_UTIL_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/testing/allreduce_reference.h"
#include "host/algorithms/testing/loopback_ranks.h"

namespace netfold::host::algorithms {

using proto::DataType;
using proto::ReduceOp;

struct Job {
  Algorithm algorithm = Algorithm::kRing;
  DataType dtype = DataType::kFp32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
  bool in_place = false;
  const TreeSpec* tree = nullptr;
  uint64_t seed = 1;
  // Filled by Launch.
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<std::vector<uint8_t>> send;
  std::vector<std::vector<uint8_t>> recv;
  std::vector<OpId> ids;

  std::string Name() const {
    return absl::StrFormat("%s %s %s count=%d %s", AlgorithmName(algorithm),
                           proto::DataTypeName(dtype), proto::ReduceOpName(op), count,
                           in_place ? "in place" : "out of place");
  }
};

inline void Launch(LoopbackRanks& ranks, Job& job) {
  const uint32_t p = ranks.num_ranks();
  const size_t bytes = job.count * proto::DataTypeSize(job.dtype);
  job.inputs = MakeInputs(job.dtype, job.op, job.count, p, job.seed);
  job.send = job.inputs;
  job.recv.assign(p, std::vector<uint8_t>(bytes, 0xAB));
  std::vector<AllreduceArgs> args(p);
  for (uint32_t r = 0; r < p; ++r) {
    if (job.in_place) job.recv[r] = job.inputs[r];
    args[r] = {.algorithm = job.algorithm,
               .dtype = job.dtype,
               .op = job.op,
               .send = job.in_place ? job.recv[r].data() : job.send[r].data(),
               .recv = job.recv[r].data(),
               .count = job.count,
               .tree = job.tree};
  }
  job.ids = ranks.StartOnEveryRank(args);
  for (uint32_t r = 0; r < p; ++r) ASSERT_TRUE(ranks.start_errors()[r].ok()) << ranks.start_errors()[r];
}

// Checks results, status and bytes on the wire of a finished job.
inline void Check(LoopbackRanks& ranks, Job& job, uint32_t tree_degree = 2) {
  SCOPED_TRACE(job.Name());
  const uint32_t p = ranks.num_ranks();
  const size_t e = proto::DataTypeSize(job.dtype);
  const std::vector<uint8_t> want = ReferenceAllreduce(job.algorithm, job.tree, tree_degree,
                                                       job.dtype, job.op, job.inputs, job.count);
  for (uint32_t r = 0; r < p; ++r) {
    OpStats stats;
    ASSERT_TRUE(ranks.engine(r).Done(job.ids[r])) << "rank " << r;
    absl::Status s = ranks.engine(r).Finish(job.ids[r], &stats);
    ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s;
    EXPECT_EQ(CompareBytes(job.recv[r], want, e), "") << "rank " << r;
    if (!job.in_place) {
      EXPECT_EQ(job.send[r], job.inputs[r]) << "rank " << r << " send written";
    }
    // Bytes on the wire: what the schedule says (docs/algorithms.md cost model).
    auto schedule = BuildSchedule({.algorithm = job.algorithm,
                                   .rank = r,
                                   .num_ranks = p,
                                   .count = job.count,
                                   .fragment_elements = std::max<uint64_t>(
                                       1, ranks.engine(r).options().fragment_bytes / e),
                                   .tree = job.tree,
                                   .tree_degree = tree_degree});
    ASSERT_TRUE(schedule.ok());
    EXPECT_EQ(stats.bytes_sent, schedule->ElementsSent() * e) << "rank " << r;
    EXPECT_EQ(stats.bytes_received, schedule->ElementsReceived() * e) << "rank " << r;
    EXPECT_EQ(stats.header_bytes_sent, stats.messages_sent * kMessageHeaderBytes);
    if (job.algorithm == Algorithm::kRing && p > 1) {
      auto seg = [&](uint32_t i) {
        return PartStart(job.count, p, i + 1) - PartStart(job.count, p, i);
      };
      EXPECT_EQ(stats.bytes_sent, (2 * job.count - seg(r) - seg((r + 1) % p)) * e);
    }
  }
}

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_TEST_UTIL_H_
