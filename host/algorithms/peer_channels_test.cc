#include "host/algorithms/peer_channels.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/testing/loopback_ranks.h"
#include "host/algorithms/testing/thread_oob.h"
#include "transport/udp_port.h"

namespace netfold::host::algorithms {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

TEST(RcPeerChannelsTest, MessagesArriveOnceAndInOrderPerPeer) {
  LoopbackRanks ranks({.num_ranks = 3, .faults = "drop=0.1,dup=0.05,reorder=0.1", .seed = 4});
  ASSERT_TRUE(ranks.status().ok()) << ranks.status();
  const std::vector<size_t> sizes = {0, 1, 100, 4096, 4097, 20000,
                                     ranks.channels(0).max_message_bytes()};
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(ranks.channels(0).Send(1, Bytes(sizes[i], static_cast<uint8_t>(i))).ok());
    ASSERT_TRUE(ranks.channels(2).Send(1, Bytes(sizes[i], static_cast<uint8_t>(i + 50))).ok());
  }
  std::vector<size_t> got(3, 0);
  for (int round = 0; round < 100000 && (got[0] < sizes.size() || got[2] < sizes.size());
       ++round) {
    ranks.Step();
    for (uint32_t from : {0u, 2u}) {
      std::span<const uint8_t> m;
      while (ranks.channels(1).Peek(from, &m)) {
        const size_t i = got[from];
        ASSERT_LT(i, sizes.size());
        EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()),
                  Bytes(sizes[i], static_cast<uint8_t>(i + (from == 2 ? 50 : 0))))
            << "message " << i << " from " << from;
        ranks.channels(1).Pop(from);
        ++got[from];
      }
    }
  }
  EXPECT_EQ(got[0], sizes.size());
  EXPECT_EQ(got[2], sizes.size());
  std::span<const uint8_t> m;
  EXPECT_FALSE(ranks.channels(1).Peek(0, &m));
}

TEST(RcPeerChannelsTest, SendChecksItsArguments) {
  LoopbackRanks ranks({.num_ranks = 2, .channels = {.queue_depth = 4}});
  ASSERT_TRUE(ranks.status().ok());
  RcPeerChannels& c = ranks.channels(0);
  EXPECT_EQ(c.Send(0, Bytes(1, 0)).code(), absl::StatusCode::kInvalidArgument);  // oneself
  EXPECT_EQ(c.Send(2, Bytes(1, 0)).code(), absl::StatusCode::kInvalidArgument);  // no such rank
  EXPECT_EQ(c.Send(1, Bytes(c.max_message_bytes() + 1, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.Send(1, Bytes(10, 0)).ok());
  EXPECT_EQ(c.Send(1, Bytes(10, 0)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(c.PeerStatus(1).ok());
}

TEST(RcPeerChannelsTest, ConnectRejectsForeignRecords) {
  transport::MemoryNetwork net;
  FakeClock clock;
  auto port = *net.CreatePort({.local = {0x0a000001, 4791}});
  transport::RoceEndpoint endpoint(std::move(port), clock);
  auto c = *RcPeerChannels::Create(&endpoint, 0, 2, {});
  std::vector<uint8_t> mine = c->LocalRecord();
  EXPECT_EQ(mine.size(), RcPeerChannels::ConnectionRecordBytes(2));
  std::vector<uint8_t> all = mine;
  all.insert(all.end(), mine.begin(), mine.end());  // rank 0's record twice
  absl::Status s = c->Connect(all);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("record 1 is not rank 1's"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument(c->Connect(mine)));
  EXPECT_FALSE(c->connected());
  EXPECT_FALSE(RcPeerChannels::Create(&endpoint, 2, 2, {}).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c->ConnectWithOob({})));
}

// A rank waiting on a peer that died (and to which it sends nothing) finds
// out through its keepalive probes and the RC retry budget.
TEST(RcPeerChannelsTest, KeepalivesDetectADeadPeer) {
  LoopbackRanks ranks({.num_ranks = 2});
  ASSERT_TRUE(ranks.status().ok());
  ranks.Kill(0);
  const int64_t start = ranks.clock().NowNanos();
  std::span<const uint8_t> m;
  while (ranks.channels(1).PeerStatus(0).ok() &&
         ranks.clock().NowNanos() - start < absl::ToInt64Nanoseconds(absl::Seconds(10))) {
    EXPECT_FALSE(ranks.channels(1).Peek(0, &m));
    ranks.Step();
  }
  absl::Status s = ranks.channels(1).PeerStatus(0);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("rank 0 is unavailable"), std::string::npos) << s;
  // keepalive 20 ms + 191 x the 1 ms ACK timeout: about 0.2 s.
  EXPECT_LT(ranks.clock().NowNanos() - start, absl::ToInt64Nanoseconds(absl::Seconds(1)));
  EXPECT_GE(ranks.channels(1).keepalives_sent(), 1u);
  EXPECT_TRUE(absl::IsUnavailable(ranks.channels(1).Send(0, Bytes(1, 0))));
}

TEST(RcPeerChannelsTest, KeepalivesAreInvisibleToALivePeer) {
  LoopbackRanks ranks({.num_ranks = 2});
  ASSERT_TRUE(ranks.status().ok());
  std::span<const uint8_t> m;
  for (int i = 0; i < 2000; ++i) {  // rank 1 waits on a silent but live rank 0
    EXPECT_FALSE(ranks.channels(1).Peek(0, &m));
    EXPECT_FALSE(ranks.channels(0).Peek(1, &m));  // and rank 0 on rank 1
    ranks.Step();
  }
  EXPECT_GE(ranks.channels(1).keepalives_sent(), 5u);
  EXPECT_TRUE(ranks.channels(1).PeerStatus(0).ok());
  ASSERT_TRUE(ranks.channels(0).Send(1, Bytes(3, 9)).ok());
  for (int i = 0; i < 100 && !ranks.channels(1).Peek(0, &m); ++i) ranks.Step();
  ASSERT_TRUE(ranks.channels(1).Peek(0, &m));
  EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), Bytes(3, 9));
}

// A failover's announcement reaches every peer, keepalives do not count as
// one, and the engine never sees it: the peer's messages after it arrive as
// before. A message alone (no announcement) counts too.
TEST(RcPeerChannelsTest, AnAnnouncedFailoverIsSeenByEveryPeerAndNotByTheirEngines) {
  LoopbackRanks ranks({.num_ranks = 3, .faults = "drop=0.1,dup=0.05", .seed = 8});
  ASSERT_TRUE(ranks.status().ok());
  std::span<const uint8_t> m;
  for (int i = 0; i < 2000; ++i) {  // keepalives flow: rank 1 waits on a silent rank 0
    EXPECT_FALSE(ranks.channels(1).Peek(0, &m));
    ranks.Step();
  }
  ASSERT_GE(ranks.channels(1).keepalives_sent(), 1u);
  for (uint32_t r = 0; r < 3; ++r) EXPECT_FALSE(ranks.channels(r).PeerOnHosts().has_value()) << r;
  ranks.channels(2).AnnounceOnHosts();
  ASSERT_TRUE(ranks.channels(2).Send(0, Bytes(5, 1)).ok());
  for (int i = 0; i < 2000 && !(ranks.channels(0).PeerOnHosts() && ranks.channels(1).PeerOnHosts());
       ++i) {
    ranks.Step();
  }
  EXPECT_EQ(ranks.channels(0).PeerOnHosts(), std::optional<uint32_t>(2));
  EXPECT_EQ(ranks.channels(1).PeerOnHosts(), std::optional<uint32_t>(2));
  EXPECT_FALSE(ranks.channels(2).PeerOnHosts().has_value());
  for (int i = 0; i < 100 && !ranks.channels(0).Peek(2, &m); ++i) ranks.Step();
  ASSERT_TRUE(ranks.channels(0).Peek(2, &m));
  EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), Bytes(5, 1));
  EXPECT_FALSE(ranks.channels(1).Peek(2, &m));
  // Rank 1 hears from rank 0 without an announcement: a message is enough.
  ASSERT_TRUE(ranks.channels(0).Send(1, Bytes(2, 3)).ok());
  for (int i = 0; i < 2000 && ranks.channels(1).PeerOnHosts() != std::optional<uint32_t>(0); ++i) {
    ranks.Step();
  }
  EXPECT_EQ(ranks.channels(1).PeerOnHosts(), std::optional<uint32_t>(0));
  ASSERT_TRUE(ranks.channels(1).Peek(0, &m));
  EXPECT_EQ(std::vector<uint8_t>(m.begin(), m.end()), Bytes(2, 3));
}

// Ranks as threads on real UDP sockets and real time, connected through the
// OOB callbacks, as processes would be.
TEST(RcPeerChannelsTest, ThreadsOverUdpConnectThroughOobAndReduce) {
  const uint32_t p = 3;
  ThreadOob oob(p);
  std::vector<absl::Status> results(p);
  std::vector<std::vector<double>> data(p);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        auto port = transport::UdpPort::Create({.local = {0x7f000001, 0}});
        if (!port.ok()) return port.status();
        transport::RoceEndpoint endpoint(std::move(*port), RealClock());
        auto channels = RcPeerChannels::Create(&endpoint, r, p, {});
        if (!channels.ok()) return channels.status();
        absl::Status s = (*channels)->ConnectWithOob(oob.For(r));
        if (!s.ok()) return s;
        auto engine = AllreduceEngine::Create(channels->get(), {.op_timeout = absl::Seconds(20)});
        if (!engine.ok()) return engine.status();
        data[r].assign(100000, r + 1.0);
        for (Algorithm a : kHostAlgorithms) {
          s = RunAllreduce(**engine, {.algorithm = a, .dtype = proto::DataType::kFp64,
                                      .send = data[r].data(), .recv = data[r].data(),
                                      .count = data[r].size()});
          if (!s.ok()) return s;
        }
        // Drain the last acknowledgements before the endpoint goes away.
        s = oob.Barrier(r);
        for (int i = 0; i < 20; ++i) (*channels)->Progress(absl::Milliseconds(1));
        return s;
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < p; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    // 1+2+3 = 6, then tripled by each of the three other algorithms: 162.
    EXPECT_EQ(data[r][0], 162.0);
    EXPECT_EQ(data[r][99999], 162.0);
  }
}

}  // namespace
}  // namespace netfold::host::algorithms
