#include "transport/memory_port.h"

#include <cstring>
#include <thread>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "transport/testing/port_test_util.h"

namespace netfold::transport {
namespace {

constexpr Ipv4Endpoint kA{0x0a000001, 4791};
constexpr Ipv4Endpoint kB{0x0a000002, 4791};
constexpr Ipv4Endpoint kC{0x0a000003, 4791};
constexpr Ipv4Endpoint kGroup{0xe0010203, 4791};

TEST(MemoryPort, UnicastMulticastAndUnroutable) {
  MemoryNetwork net;
  auto a = *net.CreatePort({.local = kA});
  auto b = *net.CreatePort({.local = kB});
  auto c = *net.CreatePort({.local = kC});
  EXPECT_EQ(net.CreatePort({.local = kA}).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(b->JoinMulticast(kGroup).ok());
  ASSERT_TRUE(c->JoinMulticast(kGroup).ok());
  EXPECT_EQ(c->JoinMulticast(kGroup).code(), absl::StatusCode::kAlreadyExists);

  PacketBuffer* tx[3] = {TaggedPacket(*a, kB, 1), TaggedPacket(*a, kGroup, 2),
                         TaggedPacket(*a, {0x0a000009, 1}, 3)};
  EXPECT_EQ(a->SendBurst(tx), 3u);
  EXPECT_EQ(net.num_unroutable(), 1u);

  PacketBuffer* rx[8];
  ASSERT_EQ(b->RecvBurst(rx, absl::ZeroDuration()), 2u);
  EXPECT_EQ(Tag(rx[0]), 1u);
  EXPECT_EQ(rx[0]->src, kA);
  EXPECT_EQ(rx[0]->dst, kB);
  EXPECT_EQ(Tag(rx[1]), 2u);
  EXPECT_EQ(rx[1]->dst, kGroup);
  PacketPool::FreeBurst({rx, 2});
  ASSERT_EQ(c->RecvBurst(rx, absl::ZeroDuration()), 1u);
  EXPECT_EQ(Tag(rx[0]), 2u);
  PacketPool::Free(rx[0]);

  ASSERT_TRUE(c->LeaveMulticast(kGroup).ok());
  EXPECT_EQ(c->LeaveMulticast(kGroup).code(), absl::StatusCode::kNotFound);
  PacketBuffer* again = TaggedPacket(*a, kGroup, 4);
  a->SendBurst({&again, 1});
  EXPECT_EQ(c->RecvBurst(rx, absl::ZeroDuration()), 0u);
  ASSERT_EQ(b->RecvBurst(rx, absl::ZeroDuration()), 1u);
  PacketPool::Free(rx[0]);
  for (auto* port : {a.get(), b.get(), c.get()}) EXPECT_EQ(port->pool().num_in_use(), 0u);
}

TEST(MemoryPort, FullQueueDropsAndCounts) {
  MemoryNetwork net;
  auto a = *net.CreatePort({.local = kA});
  auto b = *net.CreatePort({.local = kB, .rx_queue_limit = 4});
  for (uint32_t i = 0; i < 6; ++i) {
    PacketBuffer* p = TaggedPacket(*a, kB, i);
    a->SendBurst({&p, 1});
  }
  EXPECT_EQ(b->counters().rx_no_buffer, 2u);
  PacketBuffer* rx[8];
  ASSERT_EQ(b->RecvBurst(rx, absl::ZeroDuration()), 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(Tag(rx[i]), i);
  PacketPool::FreeBurst({rx, 4});
}

TEST(MemoryPort, RecvWaitsForAnotherThreadAndTimesOut) {
  MemoryNetwork net;
  auto a = *net.CreatePort({.local = kA});
  auto b = *net.CreatePort({.local = kB});
  PacketBuffer* rx[1];
  absl::Time start = absl::Now();
  EXPECT_EQ(b->RecvBurst(rx, absl::Milliseconds(20)), 0u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(19));
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(10));
    PacketBuffer* p = TaggedPacket(*a, kB, 9);
    a->SendBurst({&p, 1});
  });
  ASSERT_EQ(b->RecvBurst(rx, absl::Seconds(5)), 1u);
  EXPECT_EQ(Tag(rx[0]), 9u);
  PacketPool::Free(rx[0]);
  sender.join();
}

}  // namespace
}  // namespace netfold::transport
