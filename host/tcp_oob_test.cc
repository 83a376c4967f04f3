#include "host/tcp_oob.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace netfold::host {
namespace {

TEST(TcpOob, AllgatherBcastBarrierAcrossThreads) {
  constexpr int kRanks = 5;
  auto server = TcpOobServer::Start(kRanks);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> ranks;
  std::vector<int> failures(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto oob = TcpOob::Connect((*server)->address(), r, kRanks, absl::Seconds(10));
      if (!oob.ok()) {
        failures[r] = 1;
        return;
      }
      // Allgather of each rank's id, three times to check ordering.
      for (int round = 0; round < 3; ++round) {
        int32_t mine = r * 10 + round;
        std::vector<int32_t> all(kRanks);
        if (!(*oob)->Allgather(&mine, all.data(), 4).ok()) failures[r] = 2;
        for (int i = 0; i < kRanks; ++i) {
          if (all[i] != i * 10 + round) failures[r] = 3;
        }
      }
      std::string s = r == 2 ? std::string(100000, 'x') : "";
      if (!(*oob)->BcastString(&s, 2).ok() || s != std::string(100000, 'x')) failures[r] = 4;
      if (!(*oob)->Barrier().ok()) failures[r] = 5;
      // The C callbacks work the same way.
      netfold_oob_t cb = (*oob)->callbacks();
      int64_t v = r == 0 ? 42 : 0;
      if (cb.bcast(cb.ctx, &v, sizeof(v), 0) != 0 || v != 42) failures[r] = 6;
      if (cb.barrier(cb.ctx) != 0) failures[r] = 7;
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
  EXPECT_TRUE((*server)->Wait(absl::Seconds(10)).ok());
}

TEST(TcpOob, DisagreementFailsEveryRankInsteadOfHanging) {
  auto server = TcpOobServer::Start(2);
  ASSERT_TRUE(server.ok());
  absl::Status s0, s1;
  std::thread a([&] {
    auto oob = TcpOob::Connect((*server)->address(), 0, 2);
    int32_t x = 1, all[2];
    s0 = (*oob)->Allgather(&x, all, 4);
  });
  std::thread b([&] {
    auto oob = TcpOob::Connect((*server)->address(), 1, 2);
    s1 = (*oob)->Barrier();
  });
  a.join();
  b.join();
  EXPECT_FALSE(s0.ok());
  EXPECT_FALSE(s1.ok());
  EXPECT_NE((*server)->Wait(absl::Seconds(5)).message().find("disagree"), std::string_view::npos);
}

TEST(TcpOob, MissingRankTimesOut) {
  auto server = TcpOobServer::Start(2, "127.0.0.1:0", absl::Milliseconds(300));
  ASSERT_TRUE(server.ok());
  auto oob = TcpOob::Connect((*server)->address(), 0, 2);
  ASSERT_TRUE(oob.ok());
  absl::Time start = absl::Now();
  EXPECT_FALSE((*oob)->Barrier().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(TcpOob, BadArgumentsAreRefused) {
  EXPECT_FALSE(TcpOobServer::Start(0).ok());
  EXPECT_FALSE(TcpOob::Connect("127.0.0.1:1", 3, 2).ok());
  EXPECT_FALSE(TcpOob::Connect("not an address", 0, 1).ok());
  EXPECT_FALSE(TcpOob::Connect("127.0.0.1:1", 0, 1, absl::Milliseconds(100)).ok());
}

}  // namespace
}  // namespace netfold::host
