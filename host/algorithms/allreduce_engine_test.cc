// The host algorithms end to end: p ranks on an in-memory network (one
// thread, fake clock), each result compared bit for bit with the reference
// computed in the documented association order.
#include "host/algorithms/allreduce_engine.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/algorithms/testing/allreduce_test_util.h"

namespace netfold::host::algorithms {
namespace {

// Every algorithm x dtype x op, spread over p = 2..16 and sizes 0, 1, p-1,
// p+1, 3p+2 (not divisible by p), 97 and 257 (many 64-byte fragments), in
// place or not; up to four operations queued at once on the same channels.
TEST(AllreduceEngineTest, EveryAlgorithmDtypeOpRankCountAndSizeMatchesTheReference) {
  struct Combo {
    Algorithm algorithm;
    DataType dtype;
    ReduceOp op;
  };
  std::vector<Combo> combos;
  for (Algorithm a : kHostAlgorithms) {
    for (DataType t : proto::kAllDataTypes) {
      for (ReduceOp op : proto::kAllReduceOps) {
        if (proto::IsOpAllowed(t, op)) combos.push_back({a, t, op});
      }
    }
  }
  ASSERT_EQ(combos.size(), 4u * 106u);
  std::map<uint32_t, std::vector<Job>> by_ranks;
  for (size_t i = 0; i < combos.size(); ++i) {
    const uint32_t p = 2 + static_cast<uint32_t>(i % 15);
    const size_t sizes[] = {0, 1, p - 1u, p + 1u, 3u * p + 2u, 97, 257};
    Job job;
    job.algorithm = combos[i].algorithm;
    job.dtype = combos[i].dtype;
    job.op = combos[i].op;
    job.count = sizes[(i / 15) % 7];
    job.in_place = (i / 7) % 2 == 1;
    job.seed = i + 1;
    by_ranks[p].push_back(std::move(job));
  }
  std::map<std::pair<uint32_t, Algorithm>, int> covered;
  for (auto& [p, jobs] : by_ranks) {
    LoopbackRanks ranks({.num_ranks = p, .engine = {.fragment_bytes = 64}});
    ASSERT_TRUE(ranks.status().ok()) << ranks.status();
    for (size_t first = 0; first < jobs.size(); first += 4) {
      const size_t last = std::min(jobs.size(), first + 4);
      for (size_t j = first; j < last; ++j) ASSERT_NO_FATAL_FAILURE(Launch(ranks, jobs[j]));
      for (size_t j = first; j < last; ++j) {
        ASSERT_TRUE(ranks.RunUntilDone(jobs[j].ids)) << "p=" << p << " " << jobs[j].Name();
        ASSERT_NO_FATAL_FAILURE(Check(ranks, jobs[j])) << "p=" << p;
        ++covered[{p, jobs[j].algorithm}];
      }
    }
  }
  EXPECT_EQ(covered.size(), 15u * 4u);  // every algorithm ran at every p
}

TEST(AllreduceEngineTest, LargeVectorsPipelineThroughFragments) {
  for (Algorithm a : kHostAlgorithms) {
    LoopbackRanks ranks({.num_ranks = 5, .engine = {.fragment_bytes = 1024}});
    ASSERT_TRUE(ranks.status().ok());
    Job job{.algorithm = a, .dtype = DataType::kFp32, .op = ReduceOp::kSum, .count = 5 * 4000};
    ASSERT_NO_FATAL_FAILURE(Launch(ranks, job));
    ASSERT_TRUE(ranks.RunUntilDone(job.ids));
    ASSERT_NO_FATAL_FAILURE(Check(ranks, job));
  }
}

TEST(AllreduceEngineTest, RingMovesTwoPMinusOneOverPOfTheVector) {
  const uint32_t p = 6;
  LoopbackRanks ranks({.num_ranks = p, .engine = {.fragment_bytes = 4096}});
  ASSERT_TRUE(ranks.status().ok());
  const size_t n = p * 1000;
  std::vector<std::vector<float>> data(p, std::vector<float>(n, 1.0f));
  std::vector<OpId> ids(p);
  std::vector<AllreduceArgs> args(p);
  for (uint32_t r = 0; r < p; ++r) {
    args[r] = {.algorithm = Algorithm::kRing, .send = data[r].data(), .recv = data[r].data(),
               .count = n};
  }
  ids = ranks.StartOnEveryRank(args);
  ASSERT_TRUE(ranks.RunUntilDone(ids));
  for (uint32_t r = 0; r < p; ++r) {
    OpStats stats;
    ASSERT_TRUE(ranks.engine(r).Finish(ids[r], &stats).ok());
    EXPECT_EQ(stats.bytes_sent, 2 * (p - 1) * n * sizeof(float) / p);
    EXPECT_EQ(stats.bytes_received, 2 * (p - 1) * n * sizeof(float) / p);
    EXPECT_EQ(data[r][0], 6.0f);
    // And the transport carried no more payload than that plus headers.
    uint64_t qp_bytes = 0;
    for (uint32_t q = 0; q < p; ++q) {
      if (q != r) qp_bytes += ranks.channels(r).qp(q)->counters().bytes_sent.load();
    }
    EXPECT_EQ(qp_bytes, stats.bytes_sent + stats.header_bytes_sent);
  }
}

// A rank that starts seconds after the others (its transport still running)
// is not mistaken for a dead one, however much its peers already sent it.
TEST(AllreduceEngineTest, ALateRankIsWaitedFor) {
  const uint32_t p = 3;
  LoopbackRanks ranks({.num_ranks = p, .engine = {.fragment_bytes = 256}});
  ASSERT_TRUE(ranks.status().ok());
  for (Algorithm a : kHostAlgorithms) {
    Job job{.algorithm = a, .dtype = DataType::kFp64, .op = ReduceOp::kSum, .count = 30000};
    job.inputs = MakeInputs(job.dtype, job.op, job.count, p, 5);
    job.recv = job.inputs;
    job.ids.assign(p, 0);
    for (uint32_t r = 0; r + 1 < p; ++r) {
      job.ids[r] = *ranks.engine(r).Start({.algorithm = a, .dtype = job.dtype,
                                           .send = job.recv[r].data(),
                                           .recv = job.recv[r].data(), .count = job.count});
    }
    const int64_t late = ranks.clock().NowNanos() + absl::ToInt64Nanoseconds(absl::Seconds(3));
    while (ranks.clock().NowNanos() < late) ranks.Step();
    job.ids[p - 1] = *ranks.engine(p - 1).Start({.algorithm = a, .dtype = job.dtype,
                                                 .send = job.recv[p - 1].data(),
                                                 .recv = job.recv[p - 1].data(),
                                                 .count = job.count});
    job.in_place = true;
    ASSERT_TRUE(ranks.RunUntilDone(job.ids));
    ASSERT_NO_FATAL_FAILURE(Check(ranks, job)) << AlgorithmName(a);
  }
  uint64_t backlogged = 0;
  for (uint32_t r = 0; r < p; ++r) backlogged += ranks.channels(r).messages_backlogged();
  EXPECT_GT(backlogged, 0u);
}

TEST(AllreduceEngineTest, OneRankCopies) {
  LoopbackRanks ranks({.num_ranks = 1});
  ASSERT_TRUE(ranks.status().ok());
  for (Algorithm a : kHostAlgorithms) {
    Job job{.algorithm = a, .dtype = DataType::kInt64, .op = ReduceOp::kProd, .count = 33};
    ASSERT_NO_FATAL_FAILURE(Launch(ranks, job));
    ASSERT_TRUE(ranks.RunUntilDone(job.ids));
    ASSERT_NO_FATAL_FAILURE(Check(ranks, job));
  }
}

TEST(AllreduceEngineTest, ZeroElementsIsABarrier) {
  // Rank 2 starts late: nobody may finish before it started.
  LoopbackRanks ranks({.num_ranks = 4});
  ASSERT_TRUE(ranks.status().ok());
  std::vector<OpId> ids(4, 0);
  for (uint32_t r = 0; r < 4; ++r) {
    if (r == 2) continue;
    ids[r] = *ranks.engine(r).Start({.algorithm = Algorithm::kRing, .count = 0});
  }
  for (int i = 0; i < 500; ++i) ranks.Step();
  for (uint32_t r = 0; r < 4; ++r) {
    if (r != 2) {
      EXPECT_FALSE(ranks.engine(r).Done(ids[r])) << r;
    }
  }
  ids[2] = *ranks.engine(2).Start({.algorithm = Algorithm::kRing, .count = 0});
  ASSERT_TRUE(ranks.RunUntilDone(ids));
  for (uint32_t r = 0; r < 4; ++r) EXPECT_TRUE(ranks.engine(r).Finish(ids[r]).ok());
}

TEST(AllreduceEngineTest, StartRejectsBadArguments) {
  LoopbackRanks ranks({.num_ranks = 2});
  ASSERT_TRUE(ranks.status().ok());
  AllreduceEngine& e = ranks.engine(0);
  std::vector<float> a(8), b(8);
  auto code = [&](const AllreduceArgs& args) { return e.Start(args).status().code(); };
  EXPECT_EQ(code({.algorithm = Algorithm::kInNetwork, .send = a.data(), .recv = b.data(),
                  .count = 8}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.op = ReduceOp::kBand, .send = a.data(), .recv = b.data(), .count = 8}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.send = nullptr, .recv = b.data(), .count = 8}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({.send = a.data(), .recv = a.data() + 1, .count = 4}),
            absl::StatusCode::kInvalidArgument);
  const TreeSpec missing_rank{{{-1}}};
  EXPECT_EQ(code({.algorithm = Algorithm::kTree, .send = a.data(), .recv = b.data(), .count = 8,
                  .tree = &missing_rank}),
            absl::StatusCode::kInvalidArgument);
  // None of them consumed a sequence number: a good pair still works.
  std::vector<float> c(8, 1.0f), d(8, 2.0f);
  std::vector<AllreduceArgs> args = {{.send = c.data(), .recv = c.data(), .count = 8},
                                     {.send = d.data(), .recv = d.data(), .count = 8}};
  auto ids = ranks.StartOnEveryRank(args);
  ASSERT_TRUE(ranks.RunUntilDone(ids));
  EXPECT_TRUE(ranks.engine(0).Finish(ids[0]).ok());
  EXPECT_EQ(c[7], 3.0f);
  EXPECT_EQ(ranks.engine(0).Finish(ids[0]).code(), absl::StatusCode::kNotFound);
}

TEST(AllreduceEngineTest, CreateChecksFragmentAgainstChannels) {
  LoopbackRanks ranks({.num_ranks = 2});
  ASSERT_TRUE(ranks.status().ok());
  EXPECT_FALSE(AllreduceEngine::Create(&ranks.channels(0), {.fragment_bytes = 8}).ok());
  EXPECT_FALSE(AllreduceEngine::Create(&ranks.channels(0), {.fragment_bytes = 1 << 20}).ok());
  EXPECT_FALSE(AllreduceEngine::Create(nullptr, {}).ok());
}

TEST(AllreduceEngineTest, RanksThatDisagreeFailEverywhere) {
  const uint32_t p = 4;
  LoopbackRanks ranks({.num_ranks = p, .engine = {.op_timeout = absl::Seconds(2)}});
  ASSERT_TRUE(ranks.status().ok());
  std::vector<std::vector<int32_t>> data(p, std::vector<int32_t>(40, 1));
  std::vector<AllreduceArgs> args(p);
  for (uint32_t r = 0; r < p; ++r) {
    args[r] = {.algorithm = Algorithm::kRing, .dtype = DataType::kInt32,
               .send = data[r].data(), .recv = data[r].data(), .count = r == 2 ? 39u : 40u};
  }
  const int64_t start = ranks.clock().NowNanos();
  auto ids = ranks.StartOnEveryRank(args);
  ASSERT_TRUE(ranks.RunUntilDone(ids));
  EXPECT_LT(ranks.clock().NowNanos() - start, absl::ToInt64Nanoseconds(absl::Seconds(2)));
  int invalid = 0;
  for (uint32_t r = 0; r < p; ++r) {
    absl::Status s = ranks.engine(r).Finish(ids[r]);
    EXPECT_FALSE(s.ok()) << r;
    invalid += absl::IsInvalidArgument(s);
    EXPECT_NE(s.message().find("must start the same allreduces"), std::string::npos) << s;
  }
  EXPECT_EQ(invalid, static_cast<int>(p));  // the abort carries the code
  // The engines are done for: nothing new starts.
  EXPECT_EQ(ranks.engine(0).Start({.send = data[0].data(), .recv = data[0].data(), .count = 4})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(AllreduceEngineTest, ARankThatNeverStartsMeansDeadlineExceeded) {
  const uint32_t p = 4;
  LoopbackRanks ranks({.num_ranks = p, .engine = {.op_timeout = absl::Milliseconds(300)}});
  ASSERT_TRUE(ranks.status().ok());
  std::vector<std::vector<float>> data(p, std::vector<float>(100, 1.0f));
  std::vector<OpId> ids(p, 0);
  std::vector<OpId> queued(p, 0);
  for (uint32_t r = 0; r < 3; ++r) {
    ids[r] = *ranks.engine(r).Start({.algorithm = Algorithm::kTree, .send = data[r].data(),
                                     .recv = data[r].data(), .count = 100});
    queued[r] = *ranks.engine(r).Start({.send = data[r].data(), .recv = data[r].data(),
                                        .count = 100});
  }
  const int64_t start = ranks.clock().NowNanos();
  ASSERT_TRUE(ranks.RunUntilDone(queued));
  const int64_t took = ranks.clock().NowNanos() - start;
  EXPECT_GE(took, absl::ToInt64Nanoseconds(absl::Milliseconds(300)));
  EXPECT_LT(took, absl::ToInt64Nanoseconds(absl::Milliseconds(400)));
  for (uint32_t r = 0; r < 3; ++r) {
    absl::Status s = ranks.engine(r).Finish(ids[r]);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << r << ": " << s;
    EXPECT_NE(s.message().find("rank"), std::string::npos) << s;
    EXPECT_TRUE(absl::IsFailedPrecondition(ranks.engine(r).Finish(queued[r]))) << r;
  }
}

}  // namespace
}  // namespace netfold::host::algorithms
