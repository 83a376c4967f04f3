#include "host/torch/store_oob.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::pytorch {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

// Runs `body(rank, oob)` on `size` threads, each with its own StoreOob on
// one in-memory store (as torch's ranks share a TCPStore).
template <typename Body>
void OnRanks(const c10::intrusive_ptr<c10d::Store>& store, int size, Body body,
             milliseconds timeout = milliseconds(10000)) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      StoreOob oob(store, "netfold/test", r, size, timeout);
      body(r, oob);
    });
  }
  for (std::thread& t : ranks) t.join();
}

TEST(StoreOob, AllgatherBcastAndBarrierAcrossThreads) {
  constexpr int kRanks = 5;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> failures(kRanks, 0);
  std::atomic<int> arrived{0};
  OnRanks(store, kRanks, [&](int r, StoreOob& oob) {
    for (int round = 0; round < 3; ++round) {
      int32_t mine = r * 10 + round;
      std::vector<int32_t> all(kRanks, -1);
      if (oob.Allgather(&mine, all.data(), sizeof(mine)) != 0) failures[r] = 1;
      for (int i = 0; i < kRanks; ++i) {
        if (all[i] != i * 10 + round) failures[r] = 2;
      }
    }
    std::vector<uint8_t> big(100000, r == 3 ? 0xab : 0);
    if (oob.Bcast(big.data(), big.size(), 3) != 0 || big != std::vector<uint8_t>(100000, 0xab)) {
      failures[r] = 3;
    }
    ++arrived;
    if (oob.Barrier() != 0) failures[r] = 4;
    if (arrived.load() != kRanks) failures[r] = 5;  // left the barrier before everyone came
    // Through the C callbacks, as libnetfold calls them.
    netfold_oob_t cb = oob.callbacks();
    int64_t v = r == 0 ? 42 : 0;
    if (cb.bcast(cb.ctx, &v, sizeof(v), 0) != 0 || v != 42) failures[r] = 6;
    if (cb.barrier(cb.ctx) != 0) failures[r] = 7;
    // Zero bytes are fine (libnetfold gathers empty status strings).
    if (cb.allgather(cb.ctx, nullptr, nullptr, 0) != 0) failures[r] = 8;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

// A root may run ahead through several broadcasts: its keys stay until a
// later allgather proves every rank read them.
TEST(StoreOob, ARootAheadDoesNotDeleteWhatOthersHaveNotRead) {
  constexpr int kRanks = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> failures(kRanks, 0);
  OnRanks(store, kRanks, [&](int r, StoreOob& oob) {
    if (r != 0) std::this_thread::sleep_for(milliseconds(200));  // the root runs ahead
    for (int i = 0; i < 4; ++i) {
      int32_t v = r == 0 ? 100 + i : -1;
      if (oob.Bcast(&v, sizeof(v), 0) != 0 || v != 100 + i) failures[r] = 1 + i;
    }
    if (oob.Barrier() != 0) failures[r] = 10;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST(StoreOob, TheStoreKeepsOnlyTheLastRoundsKeys) {
  constexpr int kRanks = 4;
  auto store = c10::make_intrusive<c10d::HashStore>();
  OnRanks(store, kRanks, [&](int r, StoreOob& oob) {
    for (int i = 0; i < 50; ++i) {
      int32_t x = r, all[kRanks];
      ASSERT_EQ(oob.Allgather(&x, all, sizeof(x)), 0);
      ASSERT_EQ(oob.Barrier(), 0);
    }
  });
  // Each rank's key of the last barrier; the earlier ones are gone.
  EXPECT_EQ(store->getNumKeys(), kRanks);
}

TEST(StoreOob, ARankThatNeverComesEndsTheCallAtTheDeadline) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> results(3, 0);
  std::vector<std::string> errors(3);
  const auto start = std::chrono::steady_clock::now();
  OnRanks(
      store, 3,
      [&](int r, StoreOob& oob) {
        if (r == 2) return;  // never joins
        int32_t x = r, all[3];
        results[r] = oob.Allgather(&x, all, sizeof(x));
        errors[r] = oob.last_error();
      },
      milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r], -1);
    EXPECT_THAT(errors[r], HasSubstr("allgather over the store failed: waited 300 ms"));
  }
}

TEST(StoreOob, RanksThatDisagreeOnTheSizeFail) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> results(2, 0);
  std::vector<std::string> errors(2);
  OnRanks(store, 2, [&](int r, StoreOob& oob) {
    uint8_t in[8] = {}, out[16] = {};
    results[r] = oob.Allgather(in, out, r == 0 ? 4 : 8);
    errors[r] = oob.last_error();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r], -1);
    EXPECT_THAT(errors[r], HasSubstr("bytes, this rank"));
  }
}

// Two groups on one store with different scopes (torch's PrefixStore per
// group) do not see each other's keys.
TEST(StoreOob, ScopesAreIndependent) {
  auto base = c10::make_intrusive<c10d::HashStore>();
  auto a = c10::make_intrusive<c10d::PrefixStore>("0", base);
  auto b = c10::make_intrusive<c10d::PrefixStore>("1", base);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      StoreOob oob(r < 2 ? a : b, "netfold/test", r % 2, 2, milliseconds(10000));
      int32_t x = r, all[2] = {-1, -1};
      if (oob.Allgather(&x, all, sizeof(x)) != 0) failures[r] = 1;
      const int first = r < 2 ? 0 : 2;
      if (all[0] != first || all[1] != first + 1) failures[r] = 2;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

// Two ranks, each one TCPStore client (as each process has), each running
// the exchanges of two groups on two threads, started in opposite orders:
// rank 0 group a first, rank 1 group b first. Had a wait held the client's
// connection (TCPStore's blocking wait()), each rank's second group could
// not have set the key the other rank's first group waits for.
TEST(StoreOob, GroupsOnSeveralThreadsOfOneTcpStoreClientDoNotWaitForEachOther) {
  c10d::TCPStoreOptions server_options;
  server_options.port = 0;
  server_options.isServer = true;
  server_options.waitWorkers = false;
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_options);
  std::vector<int> failures(4, 0);
  std::vector<std::thread> ranks;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      c10d::TCPStoreOptions o;
      o.port = server->getPort();
      auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
      std::vector<std::thread> groups;
      for (int g = 0; g < 2; ++g) {
        groups.emplace_back([&, g] {
          if (g != r) std::this_thread::sleep_for(milliseconds(100));  // the other group first
          auto store = c10::make_intrusive<c10d::PrefixStore>(g == 0 ? "a" : "b", client);
          StoreOob oob(store, "netfold/test", r, 2, milliseconds(5000));
          for (int i = 0; i < 3; ++i) {
            if (oob.Barrier() != 0) failures[2 * r + g] = 1;
          }
        });
      }
      for (std::thread& t : groups) t.join();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(failures[i], 0) << "rank " << i / 2 << " group " << i % 2;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

}  // namespace
}  // namespace netfold::pytorch
