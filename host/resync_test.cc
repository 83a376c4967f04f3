// The failover's resync (host/resync.h) among members run as threads over
// an in-memory exchange: a member behind ends with the whole result from
// the end the members ahead kept, and what does not fit is refused.
#include "host/resync.h"

#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "host/algorithms/testing/thread_oob.h"

namespace netfold::host {
namespace {

using proto::CollectiveType;

// The exchanges over ThreadOob (host/algorithms/testing): every wait has
// its deadline there.
class ThreadExchange : public ResyncExchange {
 public:
  ThreadExchange(algorithms::ThreadOob& oob, int member, int size)
      : oob_(oob), member_(static_cast<uint32_t>(member)), size_(static_cast<size_t>(size)) {}
  absl::Status AllgatherCounts(std::span<const uint64_t> mine,
                               std::vector<uint64_t>* all) override {
    all->assign(size_ * mine.size(), 0);
    return oob_.Allgather(member_, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size_bytes()},
                          {reinterpret_cast<uint8_t*>(all->data()), all->size() * sizeof(uint64_t)});
  }
  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    std::vector<uint8_t> all(size_ * bytes.size());
    NETFOLD_RETURN_IF_ERROR(oob_.Allgather(member_, bytes, all));
    const auto theirs = std::span<const uint8_t>(all).subspan(
        static_cast<size_t>(from) * bytes.size(), bytes.size());
    std::copy(theirs.begin(), theirs.end(), bytes.begin());
    return absl::OkStatus();
  }
  absl::Status OrAll(std::span<uint8_t> bytes) override {
    std::vector<uint8_t> all(size_ * bytes.size());
    NETFOLD_RETURN_IF_ERROR(oob_.Allgather(member_, bytes, all));
    for (size_t m = 0; m < size_; ++m) {
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] |= all[m * bytes.size() + i];
    }
    ++or_calls;
    return absl::OkStatus();
  }
  // An int32 sum, in member order.
  absl::Status AllreduceAgain(const uint8_t* in, uint8_t* out, size_t bytes) override {
    std::vector<uint8_t> all(size_ * bytes);
    NETFOLD_RETURN_IF_ERROR(oob_.Allgather(member_, {in, bytes}, all));
    std::vector<int32_t> sum(bytes / 4, 0);
    for (size_t m = 0; m < size_; ++m) {
      for (size_t i = 0; i < sum.size(); ++i) {
        int32_t v;
        std::memcpy(&v, all.data() + m * bytes + 4 * i, 4);
        sum[i] += v;
      }
    }
    std::memcpy(out, sum.data(), bytes);
    reduced_bytes += bytes;
    return absl::OkStatus();
  }
  // An int32 sum at member `reduce_root` of every member's input from
  // `from` on: the whole input behind (reduce_input), the kept end ahead
  // (reduce_kept), written into reduce_out + from at the root.
  absl::Status ReduceAgain(bool behind, size_t from) override {
    std::span<const uint8_t> in = behind ? reduce_input : reduce_kept;
    const size_t whole = behind ? reduce_input.size() : reduce_whole;
    if (from > whole || in.size() < whole - from) return absl::InternalError("no such bytes");
    in = in.last(whole - from);
    reduce_from = from;
    reduced_bytes += in.size();
    std::vector<uint8_t> all(size_ * in.size());
    NETFOLD_RETURN_IF_ERROR(oob_.Allgather(member_, in, all));
    if (member_ != reduce_root) return absl::OkStatus();
    for (size_t i = 0; i < in.size() / 4; ++i) {
      int32_t sum = 0;
      for (size_t m = 0; m < size_; ++m) {
        int32_t v;
        std::memcpy(&v, all.data() + m * in.size() + 4 * i, 4);
        sum += v;
      }
      std::memcpy(reduce_out + from + 4 * i, &sum, 4);
    }
    return absl::OkStatus();
  }

  int or_calls = 0;
  size_t reduced_bytes = 0;  // what AllreduceAgain or ReduceAgain reduced
  uint32_t reduce_root = 0;
  std::span<const uint8_t> reduce_input, reduce_kept;
  size_t reduce_whole = 0;
  uint8_t* reduce_out = nullptr;
  std::optional<size_t> reduce_from;

 private:
  algorithms::ThreadOob& oob_;
  const uint32_t member_;
  const size_t size_;
};

// Runs Resync at every member at once; their outcomes, in member order.
// `reduced`, if given: the bytes each member's exchange reduced again.
// `setup`, if given: prepares each member's exchange (its reduce's inputs).
std::vector<absl::StatusOr<ResyncOutcome>> RunAll(
    std::vector<ResyncMember>& members, std::vector<size_t>* reduced = nullptr,
    const std::function<void(size_t, ThreadExchange&)>& setup = nullptr) {
  algorithms::ThreadOob oob(static_cast<uint32_t>(members.size()));
  std::vector<absl::StatusOr<ResyncOutcome>> out(members.size(), absl::UnknownError("not run"));
  if (reduced != nullptr) reduced->assign(members.size(), 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      ThreadExchange exchange(oob, static_cast<int>(i), static_cast<int>(members.size()));
      if (setup) setup(i, exchange);
      out[i] = Resync(exchange, members[i]);
      if (reduced != nullptr) (*reduced)[i] = exchange.reduced_bytes;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

constexpr uint32_t kSlots = 4, kSlotBytes = 64;  // a window of 256 bytes

// `completed.size()` members whose last operation was `kind` with
// `result`, each keeping its end; member `behind` is in that operation,
// its result going to `behind_buffer`.
std::vector<ResyncMember> Members(const std::vector<uint64_t>& completed, CollectiveType kind,
                                  std::span<const uint8_t> result, int behind,
                                  std::span<uint8_t> behind_buffer) {
  std::vector<ResyncMember> m(completed.size());
  for (size_t i = 0; i < m.size(); ++i) {
    m[i].rank = static_cast<int>(i);
    m[i].size = static_cast<int>(m.size());
    m[i].completed = completed[i];
    m[i].last = {kind, 0};
    m[i].last_result_bytes = result.size();
    m[i].last_result = KeptResult(result, kSlots, kSlotBytes);
  }
  m[static_cast<size_t>(behind)].current = ResyncOp{kind, 0};
  m[static_cast<size_t>(behind)].current_result = behind_buffer;
  return m;
}

TEST(KeptResult, IsTheLastWindowOfTheResultOrAllOfIt) {
  std::vector<uint8_t> r(1000);
  std::iota(r.begin(), r.end(), 0);
  const auto kept = KeptResult(r, kSlots, kSlotBytes);
  ASSERT_EQ(kept.size(), 256u);
  EXPECT_EQ(kept.data(), r.data() + 744);
  EXPECT_EQ(KeptResult({r.data(), 100}, kSlots, kSlotBytes).size(), 100u);
  EXPECT_EQ(KeptResult(r, 0, kSlotBytes).size(), 1000u) << "an unknown window keeps it all";
}

TEST(KeptInput, IsTheLastTwoWindowsInWholeElementsOrAllOfIt) {
  std::vector<uint8_t> in(2000);
  EXPECT_EQ(KeptInput(in, kSlots, kSlotBytes, 4).size(), 512u);
  EXPECT_EQ(KeptInput(in, kSlots, kSlotBytes, 4).data(), in.data() + 1488);
  EXPECT_EQ(KeptInput(in, kSlots, kSlotBytes, 12).size(), 516u) << "rounded up to an element";
  EXPECT_EQ(KeptInput({in.data(), 300}, kSlots, kSlotBytes, 4).size(), 300u);
  EXPECT_EQ(KeptInput(in, 0, kSlotBytes, 4).size(), 2000u) << "an unknown window keeps it all";
}

// A reduce whose root is behind: the members ahead returned once their
// input had left and kept only its end (KeptInput); the root holds the
// fabric's results before its last 2K chunks, garbage after. Only the kept
// end is reduced again, and the root ends with the whole exact result.
TEST(Resync, AReduceWhoseRootIsBehindIsReducedAgainFromTheEndTheOthersKept) {
  constexpr size_t kMembers = 4, kCount = 300, kBytes = 4 * kCount;
  std::vector<std::vector<int32_t>> inputs(kMembers, std::vector<int32_t>(kCount));
  std::vector<int32_t> sum(kCount, 0);
  for (size_t m = 0; m < kMembers; ++m) {
    for (size_t i = 0; i < kCount; ++i) {
      inputs[m][i] = static_cast<int32_t>((m + 1) * 1000 + i);
      sum[i] += inputs[m][i];
    }
  }
  auto bytes = [&](size_t m) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(inputs[m].data()), kBytes);
  };
  const size_t kept = KeptInput(bytes(0), kSlots, kSlotBytes, 4).size();
  ASSERT_EQ(kept, 512u);
  std::vector<int32_t> root_buffer = sum;  // the fabric's results up to the kept end
  std::fill(root_buffer.end() - static_cast<ptrdiff_t>(kept / 4), root_buffer.end(), -1);
  std::vector<ResyncMember> m(kMembers);
  for (size_t i = 0; i < kMembers; ++i) {
    m[i].rank = static_cast<int>(i);
    m[i].size = kMembers;
    m[i].completed = i == 0 ? 5 : 6;
    m[i].last = {CollectiveType::kReduce, 0};
    m[i].last_input_bytes = kBytes;
    m[i].last_input_kept = kept;
  }
  m[0].current = ResyncOp{CollectiveType::kReduce, 0};
  std::vector<size_t> reduced;
  const auto out = RunAll(m, &reduced, [&](size_t i, ThreadExchange& e) {
    e.reduce_input = bytes(i);
    e.reduce_kept = KeptInput(bytes(i), kSlots, kSlotBytes, 4);
    e.reduce_whole = kBytes;
    e.reduce_out = reinterpret_cast<uint8_t*>(root_buffer.data());
  });
  for (size_t i = 0; i < kMembers; ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    EXPECT_EQ(reduced[i], kept) << "member " << i << " reduced more than the kept end";
  }
  EXPECT_EQ(*out[0], ResyncOutcome::kCurrentCompleted);
  EXPECT_EQ(m[0].completed, 6u);
  EXPECT_EQ(*out[1], ResyncOutcome::kInStep);
  EXPECT_EQ(root_buffer, sum);
}

// A reduce whose root is ahead (it holds every result) while a member is
// behind (it failed before counting its input as gone): the root kept
// nothing of its input (the MPI interposer and Group keep nothing at a
// reduce's root) and is the first member ahead, so its description says
// so; nobody reduces again, and the member behind counts the reduce done.
TEST(Resync, AReduceWhoseRootIsAheadNeedsNoInputKeptAtTheRoot) {
  constexpr size_t kMembers = 4, kBytes = 1200;
  std::vector<ResyncMember> m(kMembers);
  for (size_t i = 0; i < kMembers; ++i) {
    m[i].rank = static_cast<int>(i);
    m[i].size = kMembers;
    m[i].completed = i == 1 ? 5 : 6;
    m[i].last = {CollectiveType::kReduce, 0};
    m[i].last_input_bytes = kBytes;
    m[i].last_input_kept = i == 0 ? 0 : 512;
  }
  m[1].current = ResyncOp{CollectiveType::kReduce, 0};
  std::vector<uint8_t> nothing;
  std::vector<size_t> reduced;
  const auto out = RunAll(m, &reduced, [&](size_t, ThreadExchange& e) {
    e.reduce_whole = kBytes;
    e.reduce_out = nothing.data();
  });
  for (size_t i = 0; i < kMembers; ++i) {
    ASSERT_TRUE(out[i].ok()) << "member " << i << ": " << out[i].status();
    EXPECT_EQ(reduced[i], 0u) << "member " << i;
    EXPECT_EQ(*out[i], i == 1 ? ResyncOutcome::kCurrentCompleted : ResyncOutcome::kInStep);
    EXPECT_EQ(m[i].completed, 6u);
  }
}

// The member behind holds the fabric's results up to its last K chunks
// (what the window guarantees) and garbage after: it ends with the whole
// result, taken from the end the members ahead kept.
TEST(Resync, AMemberBehindGetsTheEndTheOthersKeptAndEndsWithTheWholeResult) {
  std::vector<uint8_t> result(1000);
  std::iota(result.begin(), result.end(), 7);
  std::vector<uint8_t> behind_buffer = result;
  std::fill(behind_buffer.end() - 256, behind_buffer.end(), 0xee);
  std::vector<ResyncMember> m =
      Members({5, 4, 5}, CollectiveType::kAllreduce, result, 1, behind_buffer);
  const auto out = RunAll(m);
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  EXPECT_EQ(*out[1], ResyncOutcome::kCurrentCompleted);
  EXPECT_EQ(m[1].completed, 5u);
  EXPECT_EQ(behind_buffer, result);
  for (int i : {0, 2}) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    EXPECT_EQ(*out[i], ResyncOutcome::kInStep);
  }
}

// Members that start an operation before the last completes (the MPI
// interposer's nonblocking ones) learn how many any member started, the
// ones ahead and behind alike.
TEST(Resync, EveryMemberLearnsTheMostOperationsAnyMemberStarted) {
  std::vector<uint8_t> result(100, 3), behind_buffer(100, 0);
  std::vector<ResyncMember> m =
      Members({5, 4, 5}, CollectiveType::kAllreduce, result, 1, behind_buffer);
  m[0].started = 6;
  m[1].started = 5;
  m[2].started = 8;
  const auto out = RunAll(m);
  for (size_t i = 0; i < m.size(); ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    EXPECT_EQ(m[i].most_started, 8u) << "member " << i;
  }
}

// A bcast rooted at member 2: only the root keeps the end of the result
// (BcastRootKeeps); members 0 and 3, ahead as well, kept nothing, and the
// member behind gets what it lacks from the root.
TEST(Resync, ABcastMemberBehindGetsTheEndFromTheRootAlone) {
  std::vector<uint8_t> result(1000);
  std::iota(result.begin(), result.end(), 3);
  std::vector<uint8_t> behind_buffer = result;
  std::fill(behind_buffer.end() - 256, behind_buffer.end(), 0xee);
  std::vector<ResyncMember> m(4);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = {.rank = static_cast<int>(i), .size = 4, .completed = 8};
    m[i].last = {CollectiveType::kBcast, 2};
    m[i].last_result_bytes = result.size();
    if (BcastRootKeeps(2, static_cast<uint32_t>(i))) {
      m[i].last_result = KeptResult(result, kSlots, kSlotBytes);
    }
  }
  EXPECT_TRUE(m[0].last_result.empty());
  EXPECT_EQ(m[2].last_result.size(), 256u);
  m[1].completed = 7;
  m[1].current = ResyncOp{CollectiveType::kBcast, 2};
  m[1].current_result = behind_buffer;
  const auto out = RunAll(m);
  for (int i : {0, 1, 2, 3}) ASSERT_TRUE(out[i].ok()) << i << ": " << out[i].status();
  EXPECT_EQ(*out[1], ResyncOutcome::kCurrentCompleted);
  EXPECT_EQ(m[1].completed, 8u);
  EXPECT_EQ(behind_buffer, result);
}

// The root of that bcast behind as well (it never saw its own data come
// back): the members ahead kept nothing, and the root gives the member
// behind its buffer, which holds its input whole.
TEST(Resync, ABcastRootBehindGivesItsBufferToTheMembersBehind) {
  std::vector<uint8_t> result(1000);
  std::iota(result.begin(), result.end(), 5);
  std::vector<uint8_t> root_buffer = result, behind_buffer = result;
  std::fill(behind_buffer.end() - 256, behind_buffer.end(), 0xee);
  std::vector<ResyncMember> m(3);
  for (size_t i = 0; i < m.size(); ++i) m[i] = {.rank = static_cast<int>(i), .size = 3};
  m[0].completed = 4;
  m[0].current = ResyncOp{CollectiveType::kBcast, 0};
  m[0].current_result = root_buffer;
  m[1].completed = 5;
  m[1].last = {CollectiveType::kBcast, 0};
  m[1].last_result_bytes = result.size();  // kept nothing: not the root
  m[2].completed = 4;
  m[2].current = ResyncOp{CollectiveType::kBcast, 0};
  m[2].current_result = behind_buffer;
  const auto out = RunAll(m);
  for (int i : {0, 1, 2}) ASSERT_TRUE(out[i].ok()) << i << ": " << out[i].status();
  EXPECT_EQ(*out[0], ResyncOutcome::kCurrentCompleted);
  EXPECT_EQ(*out[2], ResyncOutcome::kCurrentCompleted);
  EXPECT_EQ(*out[1], ResyncOutcome::kInStep);
  EXPECT_EQ(behind_buffer, result);
  EXPECT_EQ(root_buffer, result);
  EXPECT_EQ(m[0].completed, 5u);
}

TEST(Resync, AResultOfAnotherSizeIsRefusedNotWrittenInPart) {
  std::vector<uint8_t> result(1000, 1), behind_buffer(900, 0);
  std::vector<ResyncMember> m =
      Members({1, 2}, CollectiveType::kBcast, result, 0, behind_buffer);
  const auto out = RunAll(m);
  ASSERT_FALSE(out[0].ok());
  EXPECT_NE(out[0].status().message().find("a 1000-byte result, this member is in one of 900"),
            std::string::npos)
      << out[0].status();
  EXPECT_TRUE(out[1].ok()) << "the member ahead took part in every exchange: " << out[1].status();
  EXPECT_EQ(behind_buffer, std::vector<uint8_t>(900, 0));
}

// An allreduce no member completed, in place, 4 members, int32 elements
// in chunks of 4 (16 bytes), 38 elements (the last chunk 2). What the
// fabric wrote is its result, marked here as the sum + 1000 so that a
// chunk handed on can be told from one reduced again.
struct ChunkedAllreduce {
  static constexpr size_t kCount = 38, kChunk = 16;
  static int32_t Input(size_t member, size_t i) {
    return static_cast<int32_t>(member * 100 + i);
  }
  static int32_t Sum(size_t i) {
    int32_t s = 0;
    for (size_t m = 0; m < 4; ++m) s += Input(m, i);
    return s;
  }
  static int32_t Fabric(size_t i) { return Sum(i) + 1000; }

  // Member m's buffer holds the fabric's result for the chunks in
  // written[m] (first_missing, window) and its input elsewhere.
  explicit ChunkedAllreduce(const std::vector<WrittenChunks>& written) {
    buffers.assign(4, std::vector<int32_t>(kCount));
    members.resize(4);
    for (size_t m = 0; m < 4; ++m) {
      for (size_t i = 0; i < kCount; ++i) {
        buffers[m][i] = written[m].Has(i * 4 / kChunk) ? Fabric(i) : Input(m, i);
      }
      ResyncMember& me = members[m];
      me.rank = static_cast<int>(m);
      me.size = 4;
      me.completed = 9;
      me.current = ResyncOp{CollectiveType::kAllreduce, 0};
      me.current_result = {reinterpret_cast<uint8_t*>(buffers[m].data()), kCount * 4};
      me.current_input = me.current_result;
      me.current_written = written[m];
    }
  }
  std::vector<std::vector<int32_t>> buffers;
  std::vector<ResyncMember> members;
};

WrittenChunks Written(size_t first_missing, std::vector<bool> window,
                      size_t chunk_bytes = ChunkedAllreduce::kChunk) {
  return {.chunk_bytes = chunk_bytes, .first_missing = first_missing, .window = std::move(window)};
}

// Chunks 0-2 reached everyone; 3 reached members 0 and 3, 4 member 1, 6
// member 0; 5, 7, 8 and 9 no one. Every member ends with the fabric's
// result where it reached anyone and the sum of the inputs elsewhere, and
// only the chunks no member had were reduced again.
TEST(Resync, AnAllreduceNoMemberCompletedIsCompletedChunkByChunk) {
  ChunkedAllreduce a({Written(4, {false, false, true}), Written(3, {false, true}), Written(3, {}),
                      Written(4, {})});
  std::vector<size_t> reduced;
  const auto out = RunAll(a.members, &reduced);
  for (size_t m = 0; m < 4; ++m) {
    ASSERT_TRUE(out[m].ok()) << out[m].status();
    EXPECT_EQ(*out[m], ResyncOutcome::kCurrentCompleted);
    EXPECT_EQ(a.members[m].completed, 10u);
    for (size_t i = 0; i < ChunkedAllreduce::kCount; ++i) {
      const size_t chunk = i / 4;
      const bool somewhere = chunk <= 4 || chunk == 6;
      EXPECT_EQ(a.buffers[m][i], somewhere ? ChunkedAllreduce::Fabric(i) : ChunkedAllreduce::Sum(i))
          << "member " << m << " element " << i;
    }
    // Chunk 5 (16 bytes) and 7-9 (16 + 16 + 8): 56 bytes, not all 152.
    EXPECT_EQ(reduced[m], 56u);
    EXPECT_EQ(a.members[m].reduced_again, std::optional<size_t>(56));
  }
}

// Nothing written anywhere (the fabric failed before any result): the
// whole vector is reduced again; a member not in place reads its input
// from its own buffer.
TEST(Resync, AnAllreduceWithNothingWrittenIsReducedAgainWhole) {
  ChunkedAllreduce a({Written(0, {}, 0), Written(0, {}), Written(0, {}), Written(0, {}, 0)});
  std::vector<int32_t> input(ChunkedAllreduce::kCount);
  for (size_t i = 0; i < input.size(); ++i) input[i] = ChunkedAllreduce::Input(2, i);
  std::fill(a.buffers[2].begin(), a.buffers[2].end(), -1);
  a.members[2].current_input = {reinterpret_cast<const uint8_t*>(input.data()), input.size() * 4};
  const auto out = RunAll(a.members);
  for (size_t m = 0; m < 4; ++m) {
    ASSERT_TRUE(out[m].ok()) << out[m].status();
    for (size_t i = 0; i < ChunkedAllreduce::kCount; ++i) {
      EXPECT_EQ(a.buffers[m][i], ChunkedAllreduce::Sum(i)) << "member " << m << " element " << i;
    }
  }
}

// A member that cannot say what the fabric wrote of its buffer, while it
// wrote at others: no member runs it again from inputs some overwrote.
TEST(Resync, AnAllreducePartlyWrittenWhereAMemberCannotSayIsRefusedEverywhere) {
  ChunkedAllreduce a({Written(2, {}), Written(2, {}), Written(2, {}), Written(2, {})});
  a.members[1].current_written.reset();
  const std::vector<std::vector<int32_t>> before = a.buffers;
  const auto out = RunAll(a.members);
  for (size_t m = 0; m < 4; ++m) {
    ASSERT_FALSE(out[m].ok()) << "member " << m;
    EXPECT_TRUE(absl::IsFailedPrecondition(out[m].status())) << out[m].status();
  }
  EXPECT_EQ(a.buffers, before);
}

// Nothing written anywhere that the members know of, but one member is in
// place and cannot say what the fabric wrote of its buffer: refused.
TEST(Resync, AnInPlaceMemberUnsureOfItsBufferIsNotRunAgainFromIt) {
  ChunkedAllreduce a({Written(0, {}), Written(0, {}), Written(0, {}), Written(0, {})});
  for (ResyncMember& m : a.members) m.current_written.reset();
  a.members[3].current_input_unsure = true;
  const auto out = RunAll(a.members);
  for (size_t m = 0; m < 4; ++m) {
    EXPECT_TRUE(absl::IsFailedPrecondition(out[m].status())) << "member " << m;
  }
  a.members[3].current_input_unsure = false;
  for (const auto& o : RunAll(a.members)) {
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(*o, ResyncOutcome::kInStep) << "no member wrote: the callers run it again";
  }
}

// Members 1-3 completed operation 9 and stand in an allreduce the fabric
// wrote in part; member 0 missed 9's end. The members ahead cannot run
// their allreduce again from its input: refused, unless the caller runs a
// second round (then every member is told so).
TEST(Resync, AMemberAheadInAPartlyWrittenAllreduceNeedsASecondRound) {
  for (const bool second_round : {false, true}) {
    SCOPED_TRACE(second_round);
    ChunkedAllreduce a({Written(1, {}), Written(1, {}), Written(1, {}), Written(1, {})});
    std::vector<uint8_t> last(40, 5);
    for (size_t m = 0; m < 4; ++m) {
      ResyncMember& me = a.members[m];
      me.second_round = second_round;
      me.last = {CollectiveType::kAllreduce, 0};
      me.last_result_bytes = last.size();
      me.last_result = last;
      me.completed = m == 0 ? 9 : 10;
    }
    std::vector<uint8_t> behind(40, 0);
    a.members[0].current_written.reset();
    a.members[0].current_result = behind;
    a.members[0].current_input = behind;
    const auto out = RunAll(a.members);
    ASSERT_TRUE(out[0].ok()) << out[0].status();
    EXPECT_EQ(*out[0], ResyncOutcome::kCurrentCompleted);
    EXPECT_EQ(behind, last);
    for (size_t m = 0; m < 4; ++m) {
      EXPECT_TRUE(a.members[m].another_round) << "member " << m;
      if (m == 0) continue;
      if (second_round) {
        ASSERT_TRUE(out[m].ok()) << out[m].status();
        EXPECT_EQ(*out[m], ResyncOutcome::kInStep);
      } else {
        EXPECT_TRUE(absl::IsFailedPrecondition(out[m].status())) << "member " << m;
      }
    }
  }
}

}  // namespace
}  // namespace netfold::host
