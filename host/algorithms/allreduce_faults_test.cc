// The host algorithms under seeded link faults (loss, duplication,
// reordering, corruption) and with a rank dying: exact bits, or a clean
// Unavailable naming the dead rank before the deadline.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/algorithms/testing/allreduce_test_util.h"

namespace netfold::host::algorithms {
namespace {

TEST(AllreduceFaultsTest, LossDuplicationReorderingAndCorruptionKeepTheBits) {
  uint64_t retransmitted = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (Algorithm a : kHostAlgorithms) {
      const uint32_t p = seed == 2 ? 8 : 5;
      SCOPED_TRACE(absl::StrFormat("seed %d, %s, p=%d", seed, AlgorithmName(a), p));
      LoopbackRanks ranks({.num_ranks = p,
                           .faults = "drop=0.05,dup=0.03,reorder=0.05:300us,corrupt=0.01",
                           .seed = seed,
                           .engine = {.fragment_bytes = 512}});
      ASSERT_TRUE(ranks.status().ok()) << ranks.status();
      std::vector<Job> jobs = {
          {.algorithm = a, .dtype = DataType::kFp32, .op = ReduceOp::kSum, .count = 2001,
           .in_place = true, .seed = seed},
          {.algorithm = a, .dtype = DataType::kBf16, .op = ReduceOp::kProd, .count = 777,
           .seed = seed + 10},
          {.algorithm = a, .dtype = DataType::kFloatInt, .op = ReduceOp::kMinloc, .count = 333,
           .seed = seed + 20},
      };
      for (Job& job : jobs) ASSERT_NO_FATAL_FAILURE(Launch(ranks, job));
      for (Job& job : jobs) {
        ASSERT_TRUE(ranks.RunUntilDone(job.ids)) << job.Name();
        ASSERT_NO_FATAL_FAILURE(Check(ranks, job));
      }
      for (uint32_t r = 0; r < p; ++r) {
        for (uint32_t q = 0; q < p; ++q) {
          if (q != r) retransmitted += ranks.channels(r).qp(q)->counters().packets_retransmitted;
        }
      }
    }
  }
  EXPECT_GT(retransmitted, 100u);  // the faults did bite
}

// A rank dies (its endpoint is destroyed) before or during an operation:
// every other rank fails with Unavailable naming it, well before the
// deadline, whichever algorithm runs.
TEST(AllreduceFaultsTest, ADeadRankFailsTheOthersWithUnavailable) {
  const absl::Duration timeout = absl::Seconds(5);
  for (Algorithm a : kHostAlgorithms) {
    for (bool during : {false, true}) {
      SCOPED_TRACE(absl::StrFormat("%s, killed %s the operation", AlgorithmName(a),
                                   during ? "during" : "before"));
      const uint32_t p = 6, dead = 3;
      LoopbackRanks ranks({.num_ranks = p,
                           .engine = {.fragment_bytes = 256, .op_timeout = timeout}});
      ASSERT_TRUE(ranks.status().ok());
      const size_t n = 50000;
      std::vector<std::vector<float>> data(p, std::vector<float>(n, 1.0f));
      std::vector<AllreduceArgs> args(p);
      for (uint32_t r = 0; r < p; ++r) {
        args[r] = {.algorithm = a, .send = data[r].data(), .recv = data[r].data(), .count = n};
      }
      if (!during) ranks.Kill(dead);
      const int64_t start = ranks.clock().NowNanos();
      std::vector<OpId> ids = ranks.StartOnEveryRank(args);
      if (during) {
        for (int i = 0; i < 5; ++i) ranks.Step();
        ranks.Kill(dead);
      }
      ASSERT_TRUE(ranks.RunUntilDone(ids));
      const int64_t took = ranks.clock().NowNanos() - start;
      EXPECT_LT(took, absl::ToInt64Nanoseconds(timeout / 2));
      for (uint32_t r = 0; r < p; ++r) {
        if (r == dead) continue;
        absl::Status s = ranks.engine(r).Finish(ids[r]);
        EXPECT_TRUE(absl::IsUnavailable(s)) << "rank " << r << ": " << s;
        EXPECT_NE(s.message().find("rank 3 is unavailable"), std::string::npos)
            << "rank " << r << ": " << s;
      }
    }
  }
}

}  // namespace
}  // namespace netfold::host::algorithms
