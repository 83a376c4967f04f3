// UdpPort over real sockets on loopback: unicast bursts, multicast to several
// receivers, timeouts, truncation, busy polling. Reads into the placer's
// places are udp_port_placed_test.cc.
#include "transport/udp_port.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <numeric>
#include <vector>

#include "base/clock.h"
#include "proto/icrc.h"
#include "gtest/gtest.h"
#include "transport/testing/port_test_util.h"
#include "transport/testing/udp_port_test_util.h"

namespace netfold::transport {
namespace {

TEST(UdpPort, BindsAFreePortAndRejectsMulticastLocal) {
  auto a = MakePort();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->local().ip, kLoopback);
  EXPECT_NE(a->local().port, 0);
  UdpPortConfig bad;
  bad.local = {0xe0000001, 0};
  EXPECT_EQ(UdpPort::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // The same address twice is refused with a clear error.
  UdpPortConfig same;
  same.local = a->local();
  auto dup = UdpPort::Create(same);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("bind"), std::string_view::npos);
}

TEST(UdpPort, UnicastBurstsArriveInOrder) {
  auto a = MakePort();
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  std::vector<PacketBuffer*> tx;
  for (uint32_t i = 0; i < 200; ++i) tx.push_back(Packet(*a, b->local(), i));
  size_t sent = 0;
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (sent < tx.size() && !deadline.Expired()) {
    sent += a->SendBurst(std::span<PacketBuffer* const>(tx).subspan(sent));
  }
  ASSERT_EQ(sent, 200u);
  auto tags = RecvTags(*b, 200);
  ASSERT_EQ(tags.size(), 200u);
  for (uint32_t i = 0; i < 200; ++i) EXPECT_EQ(tags[i], i);
  EXPECT_EQ(a->counters().tx_packets, 200u);
  EXPECT_EQ(b->counters().rx_packets, 200u);
  EXPECT_EQ(b->counters().rx_bytes, 200u * 64);
  EXPECT_EQ(a->pool().num_in_use(), 0u);
  EXPECT_EQ(b->pool().num_in_use(), 0u);
}

// What a RoCE NIC sees of our datagrams: DF set and identification 0, the
// IPv4 header the ICRC was computed over (a NIC checks the ICRC against the
// real header). Read back from the wire with a packet socket on lo.
TEST(UdpPort, DatagramsCarryDfAndIdentificationZero) {
  const int raw = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (raw < 0) GTEST_SKIP() << "no packet socket (needs CAP_NET_RAW): " << std::strerror(errno);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  ASSERT_EQ(bind(raw, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)), 0);
  const int buffer = 8 << 20;  // the socket sees all of lo's traffic (other tests')
  setsockopt(raw, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof(buffer));
  auto a = MakePort();
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  // One datagram at a time, sent again until the packet socket saw it: a
  // busy lo may overflow the packet socket's buffer.
  int seen = 0;
  uint32_t tag = 0xabc0;
  Deadline deadline(RealClock(), absl::Seconds(10));
  while (seen < 3 && !deadline.Expired()) {
    PacketBuffer* p = Packet(*a, b->local(), tag++, 200);
    ASSERT_EQ(a->SendBurst({&p, 1}), 1u);
    Deadline wait(RealClock(), absl::Milliseconds(200));
    bool found = false;
    while (!found && !wait.Expired()) {
      pollfd pfd{raw, POLLIN, 0};
      if (poll(&pfd, 1, 20) <= 0) continue;
      uint8_t frame[2048];
      const ssize_t n = recv(raw, frame, sizeof(frame), 0);
      if (n < 28 || frame[9] != IPPROTO_UDP) continue;
      const uint16_t dport = static_cast<uint16_t>(frame[22] << 8 | frame[23]);
      if (dport != b->local().port) continue;
      EXPECT_EQ(frame[4] << 8 | frame[5], 0) << "identification";
      EXPECT_EQ(frame[6] << 8 | frame[7], 0x4000) << "flags and fragment offset: DF only";
      found = true;
    }
    if (found) ++seen;
  }
  close(raw);
  EXPECT_EQ(seen, 3);
}

TEST(UdpPort, ReceiveTimesOutWithoutTraffic) {
  auto a = MakePort();
  ASSERT_NE(a, nullptr);
  PacketBuffer* rx[4];
  absl::Time start = absl::Now();
  EXPECT_EQ(a->RecvBurst(rx, absl::Milliseconds(30)), 0u);
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(29));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_EQ(a->RecvBurst(rx, absl::ZeroDuration()), 0u);
}

// Wake from another thread ends a long wait at once, in every wait mode,
// and a Wake with nobody waiting ends the next wait; traffic still flows.
TEST(UdpPort, WakeFromAnotherThreadEndsAWait) {
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    UdpPortConfig config;
    if (mode == 1) config.busy_poll = true;
    if (mode == 2) config.poll_window = absl::Seconds(60);
    auto a = MakePort(config);
    auto b = MakePort();
    ASSERT_TRUE(a && b);
    if (mode == 2) {  // open the poll window: a's wait spins
      PacketBuffer* out = Packet(*a, b->local(), 1);
      ASSERT_EQ(a->SendBurst({&out, 1}), 1u);
    }
    PacketBuffer* rx[4];
    std::thread waker([&] {
      absl::SleepFor(absl::Milliseconds(50));
      a->Wake();
    });
    const absl::Time start = absl::Now();
    EXPECT_EQ(a->RecvBurst(rx, absl::Seconds(20)), 0u);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    waker.join();
    a->Wake();  // nobody waits: the next wait returns at once
    const absl::Time again = absl::Now();
    EXPECT_EQ(a->RecvBurst(rx, absl::Seconds(20)), 0u);
    EXPECT_LT(absl::Now() - again, absl::Seconds(10));
    PacketBuffer* p = Packet(*b, a->local(), 42);
    b->SendBurst({&p, 1});
    EXPECT_EQ(RecvTags(*a, 1), std::vector<uint32_t>{42});
  }
}

// Consecutive packets of one size to one destination leave in one
// segmentation batch and arrive whole through UDP_GRO: split into the same
// packets, in order, packet i reporting identification i, every ICRC
// right for it (segment i leaves with identification i if the path cuts
// the batch). A packet of another size or destination starts a new batch.
TEST(UdpPort, SegmentationBatchesArriveAsTheirPacketsWithTheirIdentifications) {
  auto a = MakePort();
  auto b = MakePort();
  auto c = MakePort();
  ASSERT_TRUE(a && b && c);
  std::vector<PacketBuffer*> tx;
  for (uint32_t i = 0; i < 5; ++i) tx.push_back(RocePacket(*a, b->local(), i, 4088));
  tx.push_back(RocePacket(*a, b->local(), 5, 1000));   // shorter: ends the batch
  tx.push_back(RocePacket(*a, c->local(), 6, 4088));   // elsewhere
  tx.push_back(RocePacket(*a, b->local(), 7, 4088));
  tx.push_back(RocePacket(*a, b->local(), 8, 4088));
  ASSERT_EQ(a->SendBurst(tx), tx.size());
  EXPECT_EQ(a->counters().tx_batched, 8u);  // 0..5 and 7..8
  std::vector<uint16_t> ids;
  std::vector<uint32_t> tags;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[32];
  while (tags.size() < 8 && !deadline.Expired()) {
    const size_t got = b->RecvBurst(rx, absl::Milliseconds(50));
    for (size_t i = 0; i < got; ++i) {
      tags.push_back(Tag(rx[i]));
      ids.push_back(rx[i]->ip_id);
      EXPECT_TRUE(IcrcHolds(rx[i])) << "packet " << Tag(rx[i]);
    }
    PacketPool::FreeBurst({rx, got});
  }
  EXPECT_EQ(tags, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 7, 8}));
  EXPECT_EQ(ids, (std::vector<uint16_t>{0, 1, 2, 3, 4, 5, 0, 1}));
  EXPECT_EQ(b->counters().rx_batched, 8u);
  EXPECT_EQ(RecvTags(*c, 1), std::vector<uint32_t>{6});
  EXPECT_EQ(a->pool().num_in_use(), 0u);
  EXPECT_EQ(b->pool().num_in_use(), 0u);
}

// Packets whose middle bytes are external (PacketBuffer::external: a queue
// pair sending from the caller's memory) leave with those bytes in place,
// alone or in a segmentation batch (their ICRCs rewritten for their
// identifications), and what the packets hold in that place is not sent.
TEST(UdpPort, ExternalBytesLeaveInTheirPlaceInBatchesAndAlone) {
  auto a = MakePort();
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->TakesExternalBytes());
  constexpr uint32_t kLen = 4088, kAt = 16, kExternal = 4000;
  std::vector<std::vector<uint8_t>> external, expected;
  std::vector<PacketBuffer*> tx;
  for (uint32_t i = 0; i < 5; ++i) {
    const uint32_t len = i == 4 ? 1000 : kLen;  // the last shorter (it ends the batch)
    const uint32_t ext = i == 4 ? 900 : kExternal;
    PacketBuffer* p = Packet(*a, b->local(), i, len);
    external.emplace_back(ext);
    std::iota(external.back().begin(), external.back().end(), static_cast<uint8_t>(i * 7));
    std::memset(p->data() + kAt, 0xEE, ext);  // stale: must not be sent
    const proto::IcrcAddresses addrs{a->local().ip, b->local().ip, a->local().port,
                                     b->local().port};
    proto::StoreIcrc(proto::ComputeIcrcWithPart(addrs, p->bytes().first(len - proto::kIcrcSize),
                                                kAt, external.back()),
                     p->bytes().last<proto::kIcrcSize>());
    // Without the ICRC: segment k's is rewritten for identification k.
    std::vector<uint8_t> whole(p->data(), p->data() + len - proto::kIcrcSize);
    std::copy(external.back().begin(), external.back().end(), whole.begin() + kAt);
    expected.push_back(whole);
    p->SetExternal(kAt, external.back());
    tx.push_back(p);
  }
  // A lone one as well.
  PacketBuffer* alone = Packet(*a, b->local(), 5, 200);
  external.emplace_back(100, 0x33);
  const proto::IcrcAddresses addrs{a->local().ip, b->local().ip, a->local().port,
                                   b->local().port};
  proto::StoreIcrc(proto::ComputeIcrcWithPart(addrs, alone->bytes().first(200 - proto::kIcrcSize),
                                              kAt, external.back()),
                   alone->bytes().last<proto::kIcrcSize>());
  std::vector<uint8_t> whole(alone->data(), alone->data() + 200 - proto::kIcrcSize);
  std::fill(whole.begin() + kAt, whole.begin() + kAt + 100, 0x33);
  expected.push_back(whole);
  alone->SetExternal(kAt, external.back());
  ASSERT_EQ(a->SendBurst(tx), tx.size());
  ASSERT_EQ(a->SendBurst({&alone, 1}), 1u);
  EXPECT_EQ(a->counters().tx_batched, 5u);
  EXPECT_EQ(a->counters().tx_bytes, 4u * kLen + 1000u + 200u);
  std::vector<std::vector<uint8_t>> got;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[32];
  while (got.size() < 6 && !deadline.Expired()) {
    const size_t n = b->RecvBurst(rx, absl::Milliseconds(50));
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(IcrcHolds(rx[i])) << "packet " << Tag(rx[i]);
      got.emplace_back(rx[i]->data(), rx[i]->data() + rx[i]->len() - proto::kIcrcSize);
    }
    PacketPool::FreeBurst({rx, n});
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(a->pool().num_in_use(), 0u);
}

// For a loop that serves several ports on one thread: the epoll set turns
// readable with datagrams and with Wake, and packets split from a batch but
// not yet handed out make SleepBound zero (the fd no longer shows them).
TEST(UdpPort, TheWaitFdShowsDatagramsAndWakesAndSleepBoundWhatThePortHolds) {
  auto a = MakePort();
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  const int fd = b->wait_fd();
  ASSERT_GE(fd, 0);
  auto readable = [fd](int timeout_ms) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    return poll(&p, 1, timeout_ms) == 1;
  };
  EXPECT_FALSE(readable(0));
  std::vector<PacketBuffer*> tx;
  for (uint32_t i = 0; i < 5; ++i) tx.push_back(RocePacket(*a, b->local(), i, 4088));
  ASSERT_EQ(a->SendBurst(tx), tx.size());
  EXPECT_TRUE(readable(5000));
  EXPECT_EQ(b->SleepBound(absl::Seconds(30)), absl::Seconds(30));
  PacketBuffer* rx[2];
  size_t got = 0;
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (got == 0 && !deadline.Expired()) got = b->RecvBurst(rx, absl::Milliseconds(50));
  ASSERT_EQ(got, 2u);  // one batch of five: three held by the port
  PacketPool::FreeBurst({rx, got});
  EXPECT_EQ(b->SleepBound(absl::Seconds(30)), absl::ZeroDuration());
  EXPECT_EQ(RecvTags(*b, 3), (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(b->SleepBound(absl::Seconds(30)), absl::Seconds(30));
  EXPECT_FALSE(readable(0));
  b->Wake();
  EXPECT_TRUE(readable(0));
  // A port that spins inside RecvBurst cannot share a thread.
  EXPECT_EQ(MakePort({.poll_window = absl::Microseconds(50)})->wait_fd(), -1);
  EXPECT_EQ(MakePort({.busy_poll = true})->wait_fd(), -1);
}

// With gso off every packet is its own datagram, identification 0; a
// receiver without gro gets a batch cut into datagrams (the identification
// is then unknown to it: 0).
TEST(UdpPort, WithoutOffloadsEveryPacketIsADatagram) {
  UdpPortConfig plain;
  plain.gso = false;
  plain.gro = false;
  auto a = MakePort(plain);
  auto b = MakePort(plain);
  auto batcher = MakePort();
  ASSERT_TRUE(a && b && batcher);
  std::vector<PacketBuffer*> tx;
  for (uint32_t i = 0; i < 4; ++i) tx.push_back(RocePacket(*a, b->local(), i, 2000));
  ASSERT_EQ(a->SendBurst(tx), 4u);
  EXPECT_EQ(a->counters().tx_batched, 0u);
  PacketBuffer* rx[8];
  size_t got = 0;
  Deadline deadline(RealClock(), absl::Seconds(5));
  while (got < 4 && !deadline.Expired()) got += b->RecvBurst({rx + got, 8 - got}, absl::Milliseconds(50));
  ASSERT_EQ(got, 4u);
  for (size_t i = 0; i < got; ++i) {
    EXPECT_EQ(rx[i]->ip_id, 0);
    EXPECT_TRUE(IcrcHolds(rx[i]));
  }
  PacketPool::FreeBurst({rx, got});
  tx.clear();
  for (uint32_t i = 0; i < 4; ++i) tx.push_back(RocePacket(*batcher, b->local(), 10 + i, 2000));
  ASSERT_EQ(batcher->SendBurst(tx), 4u);
  EXPECT_EQ(RecvTags(*b, 4), (std::vector<uint32_t>{10, 11, 12, 13}));
  EXPECT_EQ(b->counters().rx_batched, 0u);
}

TEST(UdpPort, MulticastReachesEveryMemberAndOnlyMembers) {
  // A group address unlikely to collide with a parallel test run.
  const Ipv4Endpoint group{0xef4e0000u | static_cast<uint32_t>(getpid() & 0xffff), 0};
  auto sender = MakePort();
  ASSERT_NE(sender, nullptr);
  // Use the sender's port number for the group so it is free on this host.
  const Ipv4Endpoint g{group.ip, sender->local().port};
  std::vector<std::unique_ptr<UdpPort>> members;
  for (int i = 0; i < 4; ++i) {
    members.push_back(MakePort());
    ASSERT_NE(members.back(), nullptr);
    absl::Status s = members.back()->JoinMulticast(g);
    ASSERT_TRUE(s.ok()) << s;
  }
  auto outsider = MakePort();
  ASSERT_NE(outsider, nullptr);
  EXPECT_EQ(members[0]->JoinMulticast(g).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(members[0]->JoinMulticast({kLoopback, 1}).code(), absl::StatusCode::kInvalidArgument);

  for (uint32_t i = 0; i < 10; ++i) {
    PacketBuffer* p = Packet(*sender, g, i);
    ASSERT_EQ(sender->SendBurst({&p, 1}), 1u);
  }
  for (auto& m : members) {
    std::vector<Ipv4Endpoint> dsts;
    auto tags = RecvTags(*m, 10, &dsts);
    ASSERT_EQ(tags.size(), 10u);
    for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(tags[i], i);
    for (auto& d : dsts) EXPECT_EQ(d, g);
  }
  PacketBuffer* rx[4];
  EXPECT_EQ(outsider->RecvBurst(rx, absl::Milliseconds(20)), 0u);

  ASSERT_TRUE(members[1]->LeaveMulticast(g).ok());
  EXPECT_EQ(members[1]->LeaveMulticast(g).code(), absl::StatusCode::kNotFound);
  PacketBuffer* p = Packet(*sender, g, 99);
  sender->SendBurst({&p, 1});
  EXPECT_EQ(RecvTags(*members[0], 1), std::vector<uint32_t>{99});
  EXPECT_EQ(members[1]->RecvBurst(rx, absl::Milliseconds(20)), 0u);
}

// RecvBurst reads the sockets epoll reports ready: whatever is queued on
// any of them (unicast, several groups, more than one burst) comes out of
// calls that do not wait, however small the caller's array.
TEST(UdpPort, EverythingQueuedOnAnySocketIsReadWithoutWaiting) {
  auto sender = MakePort();
  auto receiver = MakePort();
  ASSERT_TRUE(sender && receiver);
  std::vector<Ipv4Endpoint> destinations = {receiver->local()};
  for (uint32_t k = 0; k < 3; ++k) {
    const Ipv4Endpoint g{0xef4f0000u | ((static_cast<uint32_t>(getpid()) & 0xfff) << 4) | k,
                         sender->local().port};
    ASSERT_TRUE(receiver->JoinMulticast(g).ok());
    destinations.push_back(g);
  }
  // 100 datagrams to the unicast socket (more than one 64-datagram burst),
  // 5 to each group.
  uint32_t tag = 0;
  for (size_t d = 0; d < destinations.size(); ++d) {
    for (int i = 0; i < (d == 0 ? 100 : 5); ++i) {
      PacketBuffer* p = Packet(*sender, destinations[d], tag++);
      ASSERT_EQ(sender->SendBurst({&p, 1}), 1u);
    }
  }
  // Loopback delivers during sendmmsg: all of it is queued now.
  std::vector<uint32_t> tags;
  PacketBuffer* rx[7];
  for (int call = 0; call < 1000 && tags.size() < tag; ++call) {
    const size_t got = receiver->RecvBurst(rx, absl::ZeroDuration());
    if (got == 0) break;
    for (size_t i = 0; i < got; ++i) tags.push_back(Tag(rx[i]));
    PacketPool::FreeBurst({rx, got});
  }
  std::sort(tags.begin(), tags.end());
  ASSERT_EQ(tags.size(), tag);
  for (uint32_t i = 0; i < tag; ++i) EXPECT_EQ(tags[i], i);
  EXPECT_EQ(receiver->RecvBurst(rx, absl::ZeroDuration()), 0u);
}

// A read that filled its burst may have left datagrams behind: the next
// RecvBurst reads that socket again at once, and only that one, and
// MayHoldMore says so until a read takes less than it could. The other
// sockets are asked through epoll; reading each of them was a system call
// that found nothing (counted in rx_empty_reads).
TEST(UdpPort, AFullReadRereadsOnlyTheSocketItFilled) {
  auto sender = MakePort();
  auto receiver = MakePort();
  ASSERT_TRUE(sender && receiver);
  for (uint32_t k = 0; k < 3; ++k) {
    const Ipv4Endpoint g{0xef4e0000u | ((static_cast<uint32_t>(getpid()) & 0xfff) << 4) | k,
                         sender->local().port};
    ASSERT_TRUE(receiver->JoinMulticast(g).ok());
  }
  constexpr uint32_t kDatagrams = 100;
  for (uint32_t tag = 0; tag < kDatagrams; ++tag) {
    PacketBuffer* p = Packet(*sender, receiver->local(), tag);
    ASSERT_EQ(sender->SendBurst({&p, 1}), 1u);
  }
  std::vector<uint32_t> tags;
  PacketBuffer* rx[7];
  int calls = 0;
  for (; calls < 1000 && tags.size() < kDatagrams; ++calls) {
    const size_t got = receiver->RecvBurst(rx, absl::ZeroDuration());
    if (got == 0) break;
    for (size_t i = 0; i < got; ++i) tags.push_back(Tag(rx[i]));
    PacketPool::FreeBurst({rx, got});
    if (tags.size() < kDatagrams) {
      EXPECT_TRUE(receiver->MayHoldMore()) << "after " << tags.size();
    }
  }
  ASSERT_EQ(tags.size(), kDatagrams);
  for (uint32_t i = 0; i < kDatagrams; ++i) EXPECT_EQ(tags[i], i);
  EXPECT_GT(calls, 10);
  // At most the unicast socket's last read, which a full burst before it
  // could not know was the last.
  EXPECT_LE(receiver->counters().rx_empty_reads, 1u);
  const uint64_t empty = receiver->counters().rx_empty_reads;
  EXPECT_EQ(receiver->RecvBurst(rx, absl::ZeroDuration()), 0u);
  EXPECT_EQ(receiver->counters().rx_empty_reads, empty + 1) << "an epoll that found nothing";
  EXPECT_FALSE(receiver->MayHoldMore()) << "everything was read";
  // A read of fewer datagrams than the burst takes took all there were.
  for (uint32_t tag = 0; tag < 3; ++tag) {
    PacketBuffer* p = Packet(*sender, receiver->local(), tag);
    ASSERT_EQ(sender->SendBurst({&p, 1}), 1u);
  }
  EXPECT_EQ(receiver->RecvBurst(rx, absl::ZeroDuration()), 3u);
  PacketPool::FreeBurst({rx, 3});
  EXPECT_FALSE(receiver->MayHoldMore());
}

TEST(UdpPort, OversizedDatagramIsCountedAsTruncated) {
  UdpPortConfig small;
  small.pool.buffer_size = 128;
  auto a = MakePort(small);
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  PacketBuffer* big = Packet(*b, a->local(), 1, 1000);
  PacketBuffer* ok = Packet(*b, a->local(), 2, 100);
  PacketBuffer* tx[2] = {big, ok};
  ASSERT_EQ(b->SendBurst(tx), 2u);
  auto tags = RecvTags(*a, 1);
  EXPECT_EQ(tags, std::vector<uint32_t>{2});
  EXPECT_EQ(a->counters().rx_truncated, 1u);
}

TEST(UdpPort, BusyPollingReceives) {
  UdpPortConfig config;
  config.busy_poll = true;
  auto a = MakePort(config);
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  PacketBuffer* rx[4];
  EXPECT_EQ(a->RecvBurst(rx, absl::Milliseconds(5)), 0u);
  PacketBuffer* p = Packet(*b, a->local(), 42);
  b->SendBurst({&p, 1});
  EXPECT_EQ(RecvTags(*a, 1), std::vector<uint32_t>{42});
}

int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

TEST(UdpPort, PollWindowReceivesAndKeepsTheTimeout) {
  UdpPortConfig config;
  config.poll_window = absl::Seconds(10);  // longer than any wait below
  auto a = MakePort(config);
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  // a sends: its window opens; a wait inside it spins, and still ends at
  // its timeout, not at the end of the window.
  PacketBuffer* out = Packet(*a, b->local(), 1);
  ASSERT_EQ(a->SendBurst({&out, 1}), 1u);
  PacketBuffer* rx[4];
  const absl::Time start = absl::Now();
  EXPECT_EQ(a->RecvBurst(rx, absl::Milliseconds(20)), 0u);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(19));
  EXPECT_LT(waited, absl::Seconds(2));
  PacketBuffer* p = Packet(*b, a->local(), 42);
  b->SendBurst({&p, 1});
  EXPECT_EQ(RecvTags(*a, 1), std::vector<uint32_t>{42});
}

TEST(UdpPort, PollWindowClosedSleeps) {
  UdpPortConfig config;
  config.poll_window = absl::Milliseconds(1);
  auto a = MakePort(config);
  ASSERT_TRUE(a);
  // Nothing sent or received yet: the window is closed and the wait sleeps
  // in epoll. Spinning for the 100 ms would show as CPU time of this thread.
  PacketBuffer* rx[4];
  const int64_t cpu = ThreadCpuNanos();
  const absl::Time start = absl::Now();
  EXPECT_EQ(a->RecvBurst(rx, absl::Milliseconds(100)), 0u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(99));
  EXPECT_LT(ThreadCpuNanos() - cpu, 30'000'000);
}

TEST(UdpPort, EmptyPoolLeavesDatagramsQueued) {
  UdpPortConfig tiny;
  tiny.pool.num_buffers = 2;
  auto a = MakePort(tiny);
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  for (uint32_t i = 0; i < 4; ++i) {
    PacketBuffer* p = Packet(*b, a->local(), i);
    b->SendBurst({&p, 1});
  }
  PacketBuffer* held[2];
  ASSERT_EQ(RecvTags(*a, 0).size(), 0u);
  Deadline deadline(RealClock(), absl::Seconds(5));
  size_t got = 0;
  while (got < 2 && !deadline.Expired()) got += a->RecvBurst({held + got, 2 - got}, absl::Milliseconds(50));
  ASSERT_EQ(got, 2u);
  PacketBuffer* more[2];
  EXPECT_EQ(a->RecvBurst(more, absl::ZeroDuration()), 0u);
  EXPECT_GE(a->counters().rx_no_buffer, 1u);
  PacketPool::FreeBurst(held);
  EXPECT_EQ(RecvTags(*a, 2), (std::vector<uint32_t>{2, 3}));
}

}  // namespace
}  // namespace netfold::transport
