// UdpPort's placed reads (udp_port_read.cc): payloads of datagrams to a
// joined group read straight into the places a placer predicts, wrong
// guesses copied back whole, reads short of buffers, and batches that find
// every batch buffer held. Split from udp_port_test.cc.
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "transport/testing/udp_port_test_util.h"
#include "transport/udp_port.h"

namespace netfold::transport {
namespace {

// Payloads of datagrams to a joined group go straight into the places the
// placer guessed for them, in a segmentation batch or alone, the packet
// keeping its head and tail; a guess that was wrong (two packets crossed)
// is copied back into its packet before RecvBurst returns, whole and
// right, though the other's place was written over; a batch cut at
// another size than guessed comes out whole too; unicast is never placed,
// nor anything when the placer has no guess.
TEST(UdpPort, MulticastPayloadsLandInTheirPlacesAndWrongGuessesComeBackWhole) {
  for (const bool gro : {true, false}) {
    SCOPED_TRACE(gro ? "with UDP_GSO and UDP_GRO" : "without offloads");
    UdpPortConfig config;
    config.gro = gro;
    config.gso = gro;  // without: each datagram alone, identification 0
    auto sender = MakePort(config);
    auto receiver = MakePort(config);
    ASSERT_TRUE(sender && receiver);
    const Ipv4Endpoint g = TestGroup(*sender, gro ? 1 : 2);
    ASSERT_TRUE(receiver->JoinMulticast(g).ok());
    TagPlacer placer;
    constexpr uint32_t kLen = 4088;
    placer.SizeFor(kLen, 8);
    receiver->SetReceivePlacer(&placer);
    auto send = [&](std::vector<uint32_t> tags, uint32_t len, const Ipv4Endpoint& to) {
      std::vector<PacketBuffer*> tx;
      std::map<uint32_t, std::vector<uint8_t>> sent;
      for (uint32_t t : tags) {
        PacketBuffer* p = RocePacket(*sender, to, t, len);
        for (uint32_t k = 4; k + proto::kIcrcSize < len; ++k) {
          p->data()[k] = static_cast<uint8_t>(t * 31 + k);
        }
        StoreRoceIcrc(*sender, to, p, len);
        sent[t].assign(p->data(), p->data() + len - proto::kIcrcSize);
        tx.push_back(p);
      }
      EXPECT_EQ(sender->SendBurst(tx), tx.size());
      return sent;
    };
    // Right guesses: every payload in its place, the packet's own bytes
    // around it.
    placer.guesses = {0, 1, 2, 3, 4};
    auto sent = send({0, 1, 2, 3, 4}, kLen, g);
    Arrived got = ReceiveWhole(*receiver, 5);
    for (uint32_t t = 0; t < 5; ++t) {
      EXPECT_EQ(got.bytes[t], sent[t]) << "packet " << t;
      EXPECT_EQ(got.external[t], placer.arena.data() + t * placer.stride) << "packet " << t;
      EXPECT_TRUE(std::equal(placer.arena.begin() + t * placer.stride,
                             placer.arena.begin() + (t + 1) * placer.stride,
                             sent[t].begin() + placer.head))
          << "place " << t;
    }
    EXPECT_EQ(receiver->counters().rx_placed, 5u);
    EXPECT_EQ(receiver->counters().rx_place_missed, 0u);
    // Two packets crossed: 5 went where 6 was guessed and 6 where 5 was.
    placer.guesses = {6, 5, 7};
    sent = send({5, 6, 7}, kLen, g);
    got = ReceiveWhole(*receiver, 3);
    for (uint32_t t = 5; t < 8; ++t) EXPECT_EQ(got.bytes[t], sent[t]) << "packet " << t;
    EXPECT_EQ(got.external[5], nullptr);
    EXPECT_EQ(got.external[6], nullptr);
    EXPECT_EQ(got.external[7], placer.arena.data() + 2 * placer.stride);
    EXPECT_EQ(receiver->counters().rx_placed, 6u);
    EXPECT_EQ(receiver->counters().rx_place_missed, 2u);
    // Cut at another size than guessed: copied out, whole.
    placer.guesses = {8, 9, 10};
    sent = send({8, 9, 10}, 1000, g);
    got = ReceiveWhole(*receiver, 3);
    for (uint32_t t = 8; t < 11; ++t) {
      EXPECT_EQ(got.bytes[t], sent[t]) << "packet " << t;
      EXPECT_EQ(got.external[t], nullptr) << "packet " << t;
    }
    EXPECT_EQ(receiver->counters().rx_placed, 6u);
    // Unicast: the placer is not asked.
    const int predictions = placer.predictions;
    placer.guesses = {11};
    sent = send({11}, kLen, receiver->local());
    got = ReceiveWhole(*receiver, 1);
    EXPECT_EQ(got.bytes[11], sent[11]);
    EXPECT_EQ(got.external[11], nullptr);
    EXPECT_EQ(placer.predictions, predictions);
    // No guesses (a drained socket before): read as usual, every time.
    for (uint32_t t = 12; t < 14; ++t) {
      sent = send({t}, kLen, g);
      got = ReceiveWhole(*receiver, 1);
      EXPECT_EQ(got.bytes[t], sent[t]);
      EXPECT_EQ(got.external[t], nullptr);
    }
    EXPECT_EQ(receiver->counters().rx_placed, 6u);
    receiver->SetReceivePlacer(nullptr);
    EXPECT_EQ(sender->pool().num_in_use(), 0u);
    EXPECT_EQ(receiver->pool().num_in_use(), 0u);
  }
}

// A placed read needs a free packet buffer for each packet a batch may
// hold; with fewer (a small pool, or buffers held elsewhere) the socket is
// read as usual instead of not at all, and nothing counts as dropped.
TEST(UdpPort, APlacedReadShortOfBuffersReadsAsUsual) {
  UdpPortConfig config;
  config.pool.num_buffers = 12;  // fewer than a batch of 4088-byte packets may hold (16)
  auto sender = MakePort();
  auto receiver = MakePort(config);
  ASSERT_TRUE(sender && receiver);
  const Ipv4Endpoint g = TestGroup(*sender, 3);
  ASSERT_TRUE(receiver->JoinMulticast(g).ok());
  TagPlacer placer;
  constexpr uint32_t kLen = 4088;
  placer.SizeFor(kLen, 4);
  placer.guesses = {1, 2, 3, 4};  // not the packet's: offered again and again
  placer.repeat = true;
  receiver->SetReceivePlacer(&placer);
  PacketBuffer* p = RocePacket(*sender, g, 0, kLen);
  const std::vector<uint8_t> sent(p->data(), p->data() + kLen - proto::kIcrcSize);
  PacketBuffer* tx[1] = {p};
  ASSERT_EQ(sender->SendBurst(tx), 1u);
  Arrived got = ReceiveWhole(*receiver, 1);
  EXPECT_EQ(got.bytes[0], sent);
  EXPECT_EQ(receiver->counters().rx_no_buffer, 0u);
  receiver->SetReceivePlacer(nullptr);
  EXPECT_EQ(receiver->pool().num_in_use(), 0u);
}

// Packets held past the next receive hold the batch buffer they are views
// of. Once every batch buffer is held, the packets of further batches are
// copied out of the batch (counted in rx_batch_copied), whole and in
// order; freed, every buffer goes back.
TEST(UdpPort, BatchesThatFindEveryBatchBufferHeldAreCopiedAndCounted) {
  auto a = MakePort();
  auto b = MakePort();
  ASSERT_TRUE(a && b);
  constexpr uint32_t kBatches = 40;  // more than the port's 32 batch buffers
  std::vector<PacketBuffer*> held;
  std::vector<uint32_t> tags;
  for (uint32_t i = 0; i < kBatches; ++i) {
    std::vector<PacketBuffer*> tx = {RocePacket(*a, b->local(), 2 * i, 4088),
                                     RocePacket(*a, b->local(), 2 * i + 1, 4088)};
    ASSERT_EQ(a->SendBurst(tx), tx.size());
    Deadline deadline(RealClock(), absl::Seconds(5));
    PacketBuffer* rx[4];
    size_t got = 0;
    while (got < 2 && !deadline.Expired()) {
      got += b->RecvBurst({rx + got, 4 - got}, absl::Milliseconds(50));
    }
    ASSERT_EQ(got, 2u) << "batch " << i;
    for (size_t k = 0; k < got; ++k) {
      tags.push_back(Tag(rx[k]));
      EXPECT_TRUE(IcrcHolds(rx[k])) << "packet " << Tag(rx[k]);
      held.push_back(rx[k]);  // each batch stays held
    }
  }
  std::vector<uint32_t> want(2 * kBatches);
  std::iota(want.begin(), want.end(), 0u);
  EXPECT_EQ(tags, want);
  EXPECT_EQ(b->counters().rx_batched, 2u * kBatches);
  EXPECT_EQ(b->counters().rx_batch_copied, 2u * (kBatches - 32));
  PacketPool::FreeBurst(held);
  EXPECT_EQ(b->pool().num_in_use(), 0u);
}

}  // namespace
}  // namespace netfold::transport
