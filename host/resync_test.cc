// The failover's resync (host/resync.h) among members run as threads over
// an in-memory exchange: a member behind ends with the whole result from
// the end the members ahead kept, and what does not fit is refused.
#include "host/resync.h"

#include <numeric>
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
  absl::Status AllgatherCount(uint64_t mine, std::vector<uint64_t>* all) override {
    all->assign(size_, 0);
    return oob_.Allgather(member_, {reinterpret_cast<const uint8_t*>(&mine), sizeof(mine)},
                          {reinterpret_cast<uint8_t*>(all->data()), size_ * sizeof(uint64_t)});
  }
  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    std::vector<uint8_t> all(size_ * bytes.size());
    NETFOLD_RETURN_IF_ERROR(oob_.Allgather(member_, bytes, all));
    const auto theirs = std::span<const uint8_t>(all).subspan(
        static_cast<size_t>(from) * bytes.size(), bytes.size());
    std::copy(theirs.begin(), theirs.end(), bytes.begin());
    return absl::OkStatus();
  }
  absl::Status ReduceAgain(bool) override { return absl::UnimplementedError("not here"); }

 private:
  algorithms::ThreadOob& oob_;
  const uint32_t member_;
  const size_t size_;
};

// Runs Resync at every member at once; their outcomes, in member order.
std::vector<absl::StatusOr<ResyncOutcome>> RunAll(std::vector<ResyncMember>& members) {
  algorithms::ThreadOob oob(static_cast<uint32_t>(members.size()));
  std::vector<absl::StatusOr<ResyncOutcome>> out(members.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      ThreadExchange exchange(oob, static_cast<int>(i), static_cast<int>(members.size()));
      out[i] = Resync(exchange, members[i]);
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

}  // namespace
}  // namespace netfold::host
