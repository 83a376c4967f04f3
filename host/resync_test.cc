// The failover's resync (host/resync.h) among members run as threads over
// an in-memory exchange: a member behind ends with the whole result from
// the end the members ahead kept, and what does not fit is refused.
#include "host/resync.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace netfold::host {
namespace {

using proto::CollectiveType;

// Every member's bytes to every member, one round at a time.
class Board {
 public:
  explicit Board(int members) : posted_(static_cast<size_t>(members)) {}

  // Empty when the others did not all come within 30 s.
  std::optional<std::vector<std::vector<uint8_t>>> Exchange(int member,
                                                            std::span<const uint8_t> mine) {
    constexpr auto kDeadline = std::chrono::seconds(30);
    std::unique_lock<std::mutex> lock(mu_);
    // The last round's readers are done.
    if (!cv_.wait_for(lock, kDeadline, [&] { return !reading_; })) return std::nullopt;
    posted_[static_cast<size_t>(member)].assign(mine.begin(), mine.end());
    if (++arrived_ == static_cast<int>(posted_.size())) {
      reading_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, kDeadline, [&] { return reading_; })) {
      --arrived_;
      return std::nullopt;
    }
    std::vector<std::vector<uint8_t>> all = posted_;
    if (--arrived_ == 0) {
      reading_ = false;
      cv_.notify_all();
    }
    return all;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<uint8_t>> posted_;
  int arrived_ = 0;
  bool reading_ = false;
};

class BoardExchange : public ResyncExchange {
 public:
  BoardExchange(Board& board, int member) : board_(board), member_(member) {}
  absl::Status AllgatherCount(uint64_t mine, std::vector<uint64_t>* all) override {
    all->clear();
    const auto round = board_.Exchange(member_, {reinterpret_cast<uint8_t*>(&mine), 8});
    if (!round) return absl::DeadlineExceededError("the other members did not come");
    for (const auto& b : *round) {
      uint64_t v = 0;
      std::memcpy(&v, b.data(), 8);
      all->push_back(v);
    }
    return absl::OkStatus();
  }
  absl::Status Share(int from, std::span<uint8_t> bytes) override {
    const auto all = board_.Exchange(member_, bytes);
    if (!all) return absl::DeadlineExceededError("the other members did not come");
    const auto& theirs = all->at(static_cast<size_t>(from));
    if (theirs.size() != bytes.size()) return absl::InternalError("sizes differ");
    std::copy(theirs.begin(), theirs.end(), bytes.begin());
    return absl::OkStatus();
  }
  absl::Status ReduceAgain(bool) override { return absl::UnimplementedError("not here"); }

 private:
  Board& board_;
  int member_;
};

// Runs Resync at every member at once; their outcomes, in member order.
std::vector<absl::StatusOr<ResyncOutcome>> RunAll(std::vector<ResyncMember>& members) {
  Board board(static_cast<int>(members.size()));
  std::vector<absl::StatusOr<ResyncOutcome>> out(members.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      BoardExchange exchange(board, static_cast<int>(i));
      out[i] = Resync(exchange, members[i]);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

constexpr uint32_t kSlots = 4, kSlotBytes = 64;  // a window of 256 bytes

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
  std::vector<ResyncMember> m(3);
  for (int i = 0; i < 3; ++i) {
    m[i].rank = i;
    m[i].size = 3;
    m[i].completed = i == 1 ? 4 : 5;
    m[i].last = {CollectiveType::kAllreduce, 0};
    m[i].last_result_bytes = result.size();
    m[i].last_result = KeptResult(result, kSlots, kSlotBytes);
  }
  m[1].current = ResyncOp{CollectiveType::kAllreduce, 0};
  m[1].current_result = behind_buffer;
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
  std::vector<ResyncMember> m(2);
  for (int i = 0; i < 2; ++i) {
    m[i].rank = i;
    m[i].size = 2;
    m[i].completed = i == 0 ? 1 : 2;
    m[i].last = {CollectiveType::kBcast, 0};
    m[i].last_result_bytes = result.size();
    m[i].last_result = KeptResult(result, kSlots, kSlotBytes);
  }
  m[0].current = ResyncOp{CollectiveType::kBcast, 0};
  m[0].current_result = behind_buffer;
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
