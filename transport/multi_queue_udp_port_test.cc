// MultiQueueUdpPort over real sockets on loopback: every datagram arrives
// once, each sender's in order, through the queue its port steers it to
// (IPv4 options or not);
// buffers freed on the owner's thread go back to the queues' pools; a
// queue whose buffers are all held waits for them and counts the wait
// once; a queue's packet wakes an owner asleep in RecvBurst; the port stops
// with packets still queued.
#include "transport/multi_queue_udp_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "transport/testing/port_test_util.h"

namespace netfold::transport {
namespace {

constexpr uint32_t kLoopback = 0x7f000001;

std::unique_ptr<UdpPort> Sender() {
  auto port = UdpPort::Create({.local = {kLoopback, 0}});
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? std::move(*port) : nullptr;
}

// `num_buffers` 0: the pool's default size (each queue's pool too).
std::unique_ptr<MultiQueueUdpPort> Receiver(int queues, uint32_t num_buffers = 0) {
  MultiQueueUdpPortConfig c;
  c.port.local = {kLoopback, 0};
  if (num_buffers > 0) c.port.pool.num_buffers = num_buffers;
  c.queues = queues;
  auto port = MultiQueueUdpPort::Create(c);
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? std::move(*port) : nullptr;
}

// Receives tags `next`, next + 1, ... up to `end` in order, freeing each;
// returns the tag it expects next (`end` when all came, in order).
uint32_t ReceiveInOrder(Port& rx, uint32_t next, uint32_t end, const Deadline& deadline) {
  PacketBuffer* burst[32];
  while (next < end && !deadline.Expired()) {
    const size_t n = rx.RecvBurst(burst, absl::Milliseconds(50));
    bool in_order = true;
    for (size_t i = 0; i < n; ++i) {
      in_order = in_order && Tag(burst[i]) == next;
      EXPECT_EQ(Tag(burst[i]), next);
      if (in_order) ++next;
    }
    PacketPool::FreeBurst({burst, n});
    if (!in_order) break;
  }
  return next;
}

// Sends every packet, retrying what the socket did not take yet.
void SendAll(Port& port, std::vector<PacketBuffer*> tx) {
  Deadline deadline(RealClock(), absl::Seconds(5));
  size_t at = 0;
  while (at < tx.size() && !deadline.Expired()) {
    at += port.SendBurst(std::span<PacketBuffer* const>(tx).subspan(at));
  }
  ASSERT_EQ(at, tx.size());
}

// The tag is sender << 16 | sequence; the packet is 1000 bytes, so that a
// burst to one destination leaves as GSO batches.
uint32_t TagOf(int sender, uint32_t seq) { return static_cast<uint32_t>(sender) << 16 | seq; }

TEST(MultiQueueUdpPort, EachSendersPacketsArriveOnceInOrderThroughTheQueueItsPortSteersThemTo) {
  constexpr int kQueues = 2;
  constexpr uint32_t kPerSender = 600;
  auto rx = Receiver(kQueues);
  ASSERT_NE(rx, nullptr);
  ASSERT_EQ(rx->num_queues(), kQueues);
  // Senders on even and odd ports: the program gives port % 2 to queue
  // port % 2.
  std::vector<std::unique_ptr<UdpPort>> senders;
  uint64_t per_queue[kQueues] = {};
  std::vector<std::unique_ptr<UdpPort>> spare;
  int even = 0, odd = 0;
  while ((even < 2 || odd < 2) && spare.size() < 64) {
    auto s = Sender();
    ASSERT_NE(s, nullptr);
    const bool is_even = s->local().port % 2 == 0;
    if ((is_even && even < 2) || (!is_even && odd < 2)) {
      (is_even ? even : odd)++;
      per_queue[s->local().port % kQueues] += kPerSender;
      senders.push_back(std::move(s));
    } else {
      spare.push_back(std::move(s));
    }
  }
  ASSERT_EQ(senders.size(), 4u) << "no two even and two odd ports among 64";
  std::vector<std::thread> threads;
  for (size_t i = 0; i < senders.size(); ++i) {
    threads.emplace_back([&, i] {
      for (uint32_t seq = 0; seq < kPerSender; seq += 50) {
        std::vector<PacketBuffer*> tx;
        for (uint32_t k = seq; k < seq + 50; ++k) {
          tx.push_back(TaggedPacket(*senders[i], rx->local(), TagOf(static_cast<int>(i), k), 1000));
        }
        SendAll(*senders[i], std::move(tx));
        // Paced, so the kernel's socket buffers never overflow.
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  std::map<int, uint32_t> next;  // sender -> next sequence
  size_t received = 0;
  Deadline deadline(RealClock(), absl::Seconds(10));
  PacketBuffer* burst[32];
  while (received < senders.size() * kPerSender && !deadline.Expired()) {
    const size_t n = rx->RecvBurst(burst, absl::Milliseconds(50));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t tag = Tag(burst[i]);
      const int sender = static_cast<int>(tag >> 16);
      EXPECT_EQ(tag & 0xffff, next[sender]) << "sender " << sender << " out of order";
      next[sender] = (tag & 0xffff) + 1;
      EXPECT_EQ(burst[i]->len(), 1000u);
      EXPECT_EQ(burst[i]->src, senders[static_cast<size_t>(sender)]->local());
    }
    received += n;
    PacketPool::FreeBurst({burst, n});
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(received, senders.size() * kPerSender);
  for (int q = 0; q < kQueues; ++q) {
    EXPECT_EQ(rx->queue_packets(q), per_queue[q]) << "queue " << q;
  }
  // Nothing reached the owner's own socket, and the counters add up.
  EXPECT_EQ(rx->counters().rx_packets.load(), senders.size() * kPerSender);
  // Nothing more comes.
  EXPECT_EQ(rx->RecvBurst(burst, absl::Milliseconds(20)), 0u);
}

// A datagram whose IPv4 header carries options (24 bytes, not 20) is
// steered by its sender's port too: the program reads the header's length.
TEST(MultiQueueUdpPort, ADatagramWithIpOptionsIsSteeredByItsSendersPort) {
  constexpr int kQueues = 2;
  auto rx = Receiver(kQueues);
  ASSERT_NE(rx, nullptr);
  // A plain socket on an even port, with three no-ops and an end of list:
  // a program that took the header for 20 bytes would read the options
  // (0x0101, odd) as the port and pick queue 1.
  int fd = -1;
  for (int tries = 0; tries < 64 && fd < 0; ++tries) {
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(kLoopback);
    socklen_t len = sizeof(sa);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
    if (ntohs(sa.sin_port) % 2 != 0) {
      close(fd);
      fd = -1;
    }
  }
  ASSERT_GE(fd, 0) << "no even port among 64";
  const uint8_t options[4] = {IPOPT_NOOP, IPOPT_NOOP, IPOPT_NOOP, IPOPT_END};
  ASSERT_EQ(setsockopt(fd, IPPROTO_IP, IP_OPTIONS, options, sizeof(options)), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(rx->local().ip);
  to.sin_port = htons(rx->local().port);
  constexpr int kDatagrams = 20;
  const uint8_t payload[64] = {};
  for (int i = 0; i < kDatagrams; ++i) {
    ASSERT_EQ(sendto(fd, payload, sizeof(payload), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(sizeof(payload)));
  }
  close(fd);
  size_t received = 0;
  PacketBuffer* burst[32];
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (received < kDatagrams && !deadline.Expired()) {
    const size_t n = rx->RecvBurst(burst, absl::Milliseconds(50));
    received += n;
    PacketPool::FreeBurst({burst, n});
  }
  EXPECT_EQ(received, static_cast<size_t>(kDatagrams));
  EXPECT_EQ(rx->queue_packets(0), static_cast<uint64_t>(kDatagrams));
  EXPECT_EQ(rx->queue_packets(1), 0u);
}

TEST(MultiQueueUdpPort, BuffersFreedByTheOwnerAreReadIntoAgain) {
  // A queue pool of 256 buffers, 2000 packets through it: they can only
  // all arrive if the owner's frees reach the queue's pool.
  auto rx = Receiver(1, 256);
  auto tx = Sender();
  ASSERT_TRUE(rx && tx);
  std::thread sender([&] {
    for (uint32_t seq = 0; seq < 2000; seq += 40) {
      std::vector<PacketBuffer*> burst;
      for (uint32_t k = seq; k < seq + 40; ++k) {
        burst.push_back(TaggedPacket(*tx, rx->local(), k, 200));
      }
      SendAll(*tx, std::move(burst));
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  const uint32_t next = ReceiveInOrder(*rx, 0, 2000, Deadline(RealClock(), absl::Seconds(10)));
  sender.join();
  // In order and complete. (When the queue outran the owner it found its
  // pool empty and left datagrams in the socket until buffers came back:
  // rx_no_buffer counts those waits, under load it is not 0.)
  EXPECT_EQ(next, 2000u);
}

// A queue whose every buffer the owner holds waits for them, without
// reading, and counts the wait once however long it lasts; the datagrams
// wait in the socket and all arrive, in order, once the owner frees.
TEST(MultiQueueUdpPort, AStarvedQueueWaitsForBuffersAndCountsTheWaitOnce) {
  auto rx = Receiver(1, 8);
  auto tx = Sender();
  ASSERT_TRUE(rx && tx);
  std::vector<PacketBuffer*> burst;
  for (uint32_t k = 0; k < 48; ++k) burst.push_back(TaggedPacket(*tx, rx->local(), k, 200));
  SendAll(*tx, std::move(burst));
  std::vector<PacketBuffer*> held;
  PacketBuffer* got[8];
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (held.size() < 8 && !deadline.Expired()) {
    const size_t n = rx->RecvBurst({got, 8 - held.size()}, absl::Milliseconds(50));
    held.insert(held.end(), got, got + n);
  }
  ASSERT_EQ(held.size(), 8u);
  // Long enough for thousands of looks at a 50 us interval.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::map<std::string, uint64_t> counts;
  rx->ForEachCounter([&](std::string_view name, uint64_t n) { counts[std::string(name)] = n; });
  EXPECT_EQ(counts["rx_queue.0.packets"], 8u) << "read with no buffer";
  EXPECT_EQ(counts["rx_queue.0.starved"], 1u);
  EXPECT_EQ(rx->counters().rx_no_buffer.load(), 1u);
  EXPECT_EQ(rx->RecvBurst(got, absl::Milliseconds(10)), 0u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(Tag(held[i]), i);
  PacketPool::FreeBurst(held);
  EXPECT_EQ(ReceiveInOrder(*rx, 8, 48, deadline), 48u);
}

TEST(MultiQueueUdpPort, AQueuesPacketWakesAnOwnerAsleepInRecvBurst) {
  auto rx = Receiver(2);
  auto tx = Sender();
  ASSERT_TRUE(rx && tx);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    SendAll(*tx, {TaggedPacket(*tx, rx->local(), 42, 64)});
  });
  PacketBuffer* burst[4];
  const int64_t start = RealClock().NowNanos();
  size_t n = 0;
  // One RecvBurst with a long timeout: the packet ends it, not the timeout.
  n = rx->RecvBurst(burst, absl::Seconds(5));
  const absl::Duration waited = absl::Nanoseconds(RealClock().NowNanos() - start);
  late.join();
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(Tag(burst[0]), 42u);
  EXPECT_LT(waited, absl::Seconds(2));
  PacketPool::FreeBurst({burst, n});
}

TEST(MultiQueueUdpPort, StopsWithPacketsStillQueued) {
  auto rx = Receiver(2);
  auto tx = Sender();
  ASSERT_TRUE(rx && tx);
  std::vector<PacketBuffer*> burst;
  for (uint32_t k = 0; k < 100; ++k) burst.push_back(TaggedPacket(*tx, rx->local(), k, 100));
  SendAll(*tx, std::move(burst));
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (rx->counters().rx_packets.load() < 100 && !deadline.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // counters() takes no packet
  }
  EXPECT_EQ(rx->counters().rx_packets.load(), 100u);
  EXPECT_EQ(rx->SleepBound(absl::Seconds(1)), absl::ZeroDuration()) << "packets wait";
  rx.reset();  // the destructor frees them into their pools: no leak report, no crash
}

TEST(MultiQueueUdpPort, RejectsBadQueueCountsAndSpinning) {
  MultiQueueUdpPortConfig c;
  c.port.local = {kLoopback, 0};
  c.queues = 0;
  EXPECT_EQ(MultiQueueUdpPort::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.queues = 17;
  EXPECT_EQ(MultiQueueUdpPort::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.queues = 2;
  c.port.poll_window = absl::Microseconds(100);
  EXPECT_EQ(MultiQueueUdpPort::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace netfold::transport
