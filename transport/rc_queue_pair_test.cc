// RC queue pairs between two endpoints on an in-memory network with a fake
// clock: exactly-once in-order delivery under seeded loss, duplication,
// reordering and corruption; PSN wrap; retry exhaustion; RNR; NAKs.
#include "transport/rc_queue_pair.h"

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/psn.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"
#include "transport/testing/rc_pair.h"

namespace netfold::transport {
namespace {

const std::vector<size_t> kSizes = {1, 0, 3, 4, 100, 1023, 1024, 1025, 4095, 4096, 4097,
                                    8192, 10000, 65536, 2, 65535, 17, 30000};

TEST(RcQueuePair, DeliversEveryMessageOnceInOrderOnAPerfectLink) {
  RcPair pair;
  ExpectExactlyOnceInOrder(Transfer(pair, kSizes), kSizes);
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_EQ(pair.qb_->counters().drops.Total(), 0u);
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
  // 64 KiB at MTU 4096 is 16 packets; every message but the empty one is counted.
  EXPECT_GT(pair.qa_->counters().packets_sent, kSizes.size());
}

TEST(RcQueuePair, AGatheredMessageArrivesAsItsPiecesInOrder) {
  RcPair pair;
  // Pieces that straddle the 4096-byte MTU, an empty one among them; the
  // pieces' memory is reused before the message is delivered.
  const std::vector<uint8_t> whole = Message(7, 40 + 4056 + 5000);
  std::vector<uint8_t> a(whole.begin(), whole.begin() + 40);
  std::vector<uint8_t> b(whole.begin() + 40, whole.begin() + 4096);
  std::vector<uint8_t> c(whole.begin() + 4096, whole.end());
  const std::span<const uint8_t> pieces[] = {a, {}, b, c};
  ASSERT_TRUE(pair.qa_->PostSendGather(pieces, 1).ok());
  std::fill(a.begin(), a.end(), 0);
  std::fill(c.begin(), c.end(), 0);
  RecvMessage rm;
  for (int step = 0; step < 100 && !pair.qb_->PeekRecv(&rm); ++step) pair.Step();
  ASSERT_TRUE(pair.qb_->PeekRecv(&rm));
  EXPECT_EQ(std::vector<uint8_t>(rm.data.begin(), rm.data.end()), whole);
  EXPECT_EQ(pair.qa_->counters().packets_sent, 3u);
  RcQpConfig small;
  small.max_message_size = 100;
  RcPair limited({}, small);
  const std::span<const uint8_t> over[] = {a, b};  // 40 + 4056 > 100 in all
  EXPECT_EQ(limited.qa_->PostSendGather(over, 2).code(), absl::StatusCode::kInvalidArgument);
}

class RcUnderFaults : public ::testing::TestWithParam<uint64_t> {};

// These links lose about one packet in five each way (drop, and corrupt
// on the first test), so the eight round trips of a probe and its ACK
// that retry_count 7 allows all fail about once in five thousand stalls
// (0.34^8), and a test of thousands of packets
// meets one for some orders of events (seed 3 did when the endpoint's reads
// moved). That is the QP failing as specified, not the exactly-once these
// tests check: they keep retrying at the capped backoff for a while
// (RcQpConfig::min_failure_time, as the ranks' QPs do) before the QP may
// give up.
RcQpConfig Persistent() {
  RcQpConfig config;
  config.min_failure_time = absl::Seconds(10);
  return config;
}

// Two endpoints whose links lose, duplicate, reorder, corrupt and delay
// packets (seeded), with a 1 ms ACK timeout.
std::unique_ptr<RcPair> FaultyPair(uint64_t seed) {
  ImpairmentConfig faults =
      *ParseImpairment("drop=0.1,dup=0.05,reorder=0.1:300us,corrupt=0.01,delay=20us");
  faults.seed = seed;
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  return std::make_unique<RcPair>(faults, Persistent(), attrs);
}

// kSizes four times over.
std::vector<size_t> FourRounds() {
  std::vector<size_t> sizes;
  for (int round = 0; round < 4; ++round) sizes.insert(sizes.end(), kSizes.begin(), kSizes.end());
  return sizes;
}

TEST_P(RcUnderFaults, ExactlyOnceInOrderUnderLossDuplicationReorderAndCorruption) {
  std::unique_ptr<RcPair> faulty = FaultyPair(GetParam());
  RcPair& pair = *faulty;
  const std::vector<size_t> sizes = FourRounds();
  ExpectExactlyOnceInOrder(Transfer(pair, sizes), sizes);
  // The faults really happened and were survived.
  EXPECT_GT(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_GT(pair.a_port_->send_stage().counters().dropped_random, 0u);
  EXPECT_GT(pair.a_port_->send_stage().counters().duplicated, 0u);
  EXPECT_GT(pair.a_port_->send_stage().counters().reordered, 0u);
  const uint64_t bad_icrc = pair.a_->counters().ParseDrops(proto::RoceParseResult::kBadIcrc) +
                            pair.b_->counters().ParseDrops(proto::RoceParseResult::kBadIcrc);
  const uint64_t corrupted = pair.a_port_->send_stage().counters().corrupted +
                             pair.a_port_->receive_stage().counters().corrupted +
                             pair.b_port_->send_stage().counters().corrupted +
                             pair.b_port_->receive_stage().counters().corrupted;
  EXPECT_GT(corrupted, 0u);
  // A flipped bit is caught by the ICRC unless it hit a masked field, or it
  // made the packet unparsable some other way first; never delivered.
  EXPECT_GT(bad_icrc, 0u);
  EXPECT_GT(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
  EXPECT_EQ(pair.qb_->state(), QpState::kRts);
}

// The same with messages sent from the caller's memory: first
// transmissions carry it as external bytes (made whole by the stage that
// drops, duplicates, corrupts or delays them, or by the memory port), and
// retransmissions read it again.
TEST_P(RcUnderFaults, ReferencedMessagesArriveExactlyOnceInOrderUnderFaults) {
  std::unique_ptr<RcPair> faulty = FaultyPair(GetParam());
  RcPair& pair = *faulty;
  const std::vector<size_t> sizes = FourRounds();
  ExpectExactlyOnceInOrder(Transfer(pair, sizes, 2000000, /*reference=*/true), sizes);
  EXPECT_GT(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RcUnderFaults, ::testing::Values(1, 2, 3, 42, 1234));

TEST_P(RcUnderFaults, DelayedAcksKeepExactlyOnceInOrderUnderFaults) {
  ImpairmentConfig faults = *ParseImpairment("drop=0.1,dup=0.05,reorder=0.1:300us,delay=20us");
  faults.seed = GetParam();
  RcQpConfig config = Persistent();
  config.ack_delay = absl::Microseconds(300);
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  RcPair pair(faults, config, attrs);
  std::vector<size_t> sizes;
  for (int round = 0; round < 4; ++round) sizes.insert(sizes.end(), kSizes.begin(), kSizes.end());
  ExpectExactlyOnceInOrder(Transfer(pair, sizes), sizes);
  EXPECT_GT(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
  EXPECT_EQ(pair.qb_->state(), QpState::kRts);
}

// Posts one small message per step for `messages` steps, then steps until
// `until` has passed since the first; returns the number of completions.
size_t PostOnePerStep(RcPair& pair, int messages, absl::Duration until) {
  size_t completed = 0;
  const absl::Duration start = pair.clock_.Now();
  for (int i = 0; pair.clock_.Now() - start < until; ++i) {
    if (i < messages) {
      EXPECT_TRUE(pair.qa_->PostSend(Message(i, 64), i).ok());
    }
    pair.Step();
    SendCompletion sc;
    while (pair.qa_->PollSendCompletion(&sc)) ++completed;
  }
  return completed;
}

TEST(RcQueuePair, ReceivedMessagesStartAtTheConfiguredOffsetFromACacheLine) {
  for (uint32_t offset : {0u, 24u, 63u}) {
    RcQpConfig config;
    config.recv_line_offset = offset;
    RcPair pair(ImpairmentConfig{.seed = offset + 1, .drop = 0.05}, config);
    const std::vector<size_t> sizes = {40, 4136, 0, 9000, 1, 65536};
    size_t seen = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE(pair.qa_->PostSend(Message(static_cast<uint32_t>(i), sizes[i]), i).ok());
    }
    for (int step = 0; step < 100000 && seen < sizes.size(); ++step) {
      pair.Step();
      RecvMessage rm;
      while (pair.qb_->PeekRecv(&rm)) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(rm.data.data()) % kCacheLine, offset);
        const std::vector<uint8_t> want = Message(static_cast<uint32_t>(seen), sizes[seen]);
        EXPECT_TRUE(std::equal(rm.data.begin(), rm.data.end(), want.begin(), want.end()))
            << "offset " << offset << ", message " << seen;
        pair.qb_->PopRecv();
        ++seen;
      }
    }
    EXPECT_EQ(seen, sizes.size()) << "offset " << offset;
  }
}

// zero_copy_receive: a one-packet message is read in the packet buffer it
// arrived in (held until PopRecv), a longer one is copied as before; both
// exactly once and in order under loss, duplication and reordering, and
// every held buffer goes back to the pool on PopRecv and on a reset.
TEST(RcQueuePair, WithZeroCopyReceiveOnePacketMessagesStayInTheirBuffer) {
  RcQpConfig config;
  config.zero_copy_receive = true;
  config.recv_line_offset = 24;
  RcPair pair(*ParseImpairment("drop=0.05,dup=0.05,reorder=0.1:200us,delay=20us"), config);
  PacketPool& pool = pair.b_port_->pool();
  for (int step = 0; step < 10; ++step) pair.Step();
  const uint32_t idle = pool.num_in_use();
  const std::vector<size_t> sizes = {40, 4136, 0, 9000, 1, 4096, 65536, 17};
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(pair.qa_->PostSend(Message(static_cast<uint32_t>(i), sizes[i]), i).ok());
  }
  for (int step = 0; step < 100000 && pair.qb_->num_recv_queued() < sizes.size(); ++step) {
    pair.Step();
  }
  ASSERT_EQ(pair.qb_->num_recv_queued(), sizes.size());
  for (int step = 0; step < 100; ++step) pair.Step();  // duplicates drain, nothing queued moves
  // Five of the eight fit one packet: their buffers are the QP's.
  EXPECT_EQ(pool.num_in_use(), idle + 5);
  for (size_t i = 0; i < sizes.size(); ++i) {
    RecvMessage rm;
    ASSERT_TRUE(pair.qb_->PeekRecv(&rm));
    const std::vector<uint8_t> want = Message(static_cast<uint32_t>(i), sizes[i]);
    EXPECT_TRUE(std::equal(rm.data.begin(), rm.data.end(), want.begin(), want.end()))
        << "message " << i;
    if (sizes[i] > 4096) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(rm.data.data()) % kCacheLine, 24u) << "copied";
    }
    pair.qb_->PopRecv();
  }
  EXPECT_EQ(pool.num_in_use(), idle);
  // Held messages a reset discards go back to the pool too.
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 100), i).ok());
  for (int step = 0; step < 100000 && pair.qb_->num_recv_queued() < 3; ++step) pair.Step();
  ASSERT_EQ(pair.qb_->num_recv_queued(), 3u);
  for (int step = 0; step < 100; ++step) pair.Step();
  EXPECT_EQ(pool.num_in_use(), idle + 3);
  ASSERT_TRUE(pair.qb_->Modify(QpState::kReset, {}).ok());
  EXPECT_EQ(pair.qb_->num_recv_queued(), 0u);
  EXPECT_EQ(pool.num_in_use(), idle);
}

// TakeRecv: the owner keeps a one-packet message's buffer past the pop
// (the switch keeps a contribution that came before its turn); the bytes
// stay valid after later messages arrive and are popped, and the buffer
// goes back to the pool when the owner frees it. A message of several
// packets is not held in one: TakeRecv leaves it for PopRecv.
TEST(RcQueuePair, TakeRecvHandsOverTheBufferOfAOnePacketMessage) {
  RcQpConfig config;
  config.zero_copy_receive = true;
  RcPair pair(*ParseImpairment("reorder=0.1:200us"), config);
  PacketPool& pool = pair.b_port_->pool();
  for (int step = 0; step < 10; ++step) pair.Step();
  const uint32_t idle = pool.num_in_use();
  const std::vector<size_t> sizes = {100, 9000, 200, 300};
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(pair.qa_->PostSend(Message(static_cast<uint32_t>(i), sizes[i]), i).ok());
  }
  for (int step = 0; step < 100000 && pair.qb_->num_recv_queued() < sizes.size(); ++step) {
    pair.Step();
  }
  ASSERT_EQ(pair.qb_->num_recv_queued(), sizes.size());
  RecvMessage first;
  ASSERT_TRUE(pair.qb_->PeekRecv(&first));
  PacketBuffer* kept = pair.qb_->TakeRecv();
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(pair.qb_->num_recv_queued(), 3u);
  RecvMessage rm;
  ASSERT_TRUE(pair.qb_->PeekRecv(&rm));
  EXPECT_EQ(rm.data.size(), 9000u);
  EXPECT_EQ(pair.qb_->TakeRecv(), nullptr) << "a copied message has no buffer to hand over";
  EXPECT_EQ(pair.qb_->num_recv_queued(), 3u);
  pair.qb_->PopRecv();
  PacketBuffer* second = pair.qb_->TakeRecv();
  ASSERT_NE(second, nullptr);
  pair.qb_->PopRecv();
  EXPECT_EQ(pair.qb_->num_recv_queued(), 0u);
  EXPECT_EQ(pair.qb_->TakeRecv(), nullptr);
  // More traffic through the pool: the kept bytes do not move.
  for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(10 + i, 500), i).ok());
  for (int step = 0; step < 100000 && pair.qb_->num_recv_queued() < 8; ++step) pair.Step();
  while (pair.qb_->PeekRecv(&rm)) pair.qb_->PopRecv();
  const std::vector<uint8_t> want = Message(0, 100);
  EXPECT_TRUE(std::equal(first.data.begin(), first.data.end(), want.begin(), want.end()));
  for (int step = 0; step < 100; ++step) pair.Step();
  EXPECT_EQ(pool.num_in_use(), idle + 2);
  PacketPool::Free(kept);
  PacketPool::Free(second);
  EXPECT_EQ(pool.num_in_use(), idle);
}

TEST(RcQueuePair, AnOffsetOfACacheLineOrMoreIsRefused) {
  FakeClock clock;
  MemoryNetwork net;
  RoceEndpoint endpoint(*net.CreatePort({.local = kAddrA}), clock);
  RcQpConfig config;
  config.recv_line_offset = kCacheLine;
  absl::StatusOr<RcQueuePair*> qp = endpoint.CreateRcQp(config);
  EXPECT_TRUE(absl::IsInvalidArgument(qp.status())) << qp.status();
  EXPECT_NE(qp.status().message().find("recv_line_offset"), std::string::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(endpoint.CreateRcQpWithQpn(0x300, config).status()));
}

TEST(RcQueuePair, AnAckThatArrivedWhileTheOwnerWasAwayIsReadBeforeTheTimerFires) {
  RcPair pair;
  ASSERT_TRUE(pair.qa_->PostSend(Message(0, 100), 0).ok());
  pair.a_->Flush();                          // the request goes out
  pair.b_->Progress(absl::ZeroDuration());   // b receives it and ACKs at once
  ASSERT_EQ(pair.qb_->counters().acks_sent, 1u);
  // a was busy elsewhere past its ACK timeout; the ACK waits in its port.
  pair.clock_.Advance(absl::Milliseconds(10));
  pair.a_->Flush();
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_EQ(pair.qa_->counters().timeouts, 0u);
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
  SendCompletion sc;
  ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc));
  EXPECT_TRUE(sc.status.ok()) << sc.status;
}

TEST(RcQueuePair, DelayedAckCoversTheMessagesThatArriveWhileItWaits) {
  RcQpConfig config;
  config.ack_delay = absl::Milliseconds(1);
  RcPair pair({}, config);
  // Five messages 50 us apart: all delivered at once, none ACKed before
  // the delay of the first has passed.
  EXPECT_EQ(PostOnePerStep(pair, 5, absl::Microseconds(900)), 0u);
  EXPECT_EQ(pair.qb_->counters().messages_received, 5u);
  EXPECT_EQ(pair.qb_->counters().acks_sent, 0u);
  ASSERT_TRUE(pair.qb_->NextTimerNs().has_value());
  // Then one ACK covers all five.
  EXPECT_EQ(PostOnePerStep(pair, 0, absl::Microseconds(300)), 5u);
  EXPECT_EQ(pair.qb_->counters().acks_sent, 1u);
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 0u);
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
}

TEST(RcQueuePair, WithoutAckDelayEveryStepIsAcknowledged) {
  RcPair pair;
  EXPECT_EQ(PostOnePerStep(pair, 5, absl::Microseconds(500)), 5u);
  EXPECT_EQ(pair.qb_->counters().acks_sent, 5u);
}

TEST(RcQueuePair, ADuplicateIsReAckedAtOnceEvenWithAnAckDelay) {
  // A requester whose timeout is shorter than the responder's delay
  // retransmits; the responder answers the duplicate at once instead of
  // letting it retry until the delay has passed.
  RcQpConfig config;
  config.ack_delay = absl::Milliseconds(50);
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  RcPair pair({}, config, attrs);
  EXPECT_EQ(PostOnePerStep(pair, 1, absl::Milliseconds(3)), 1u);
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 1u);
  EXPECT_GT(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 0u);
  EXPECT_EQ(pair.qb_->counters().messages_received, 1u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
}

// A keepalive is answered and changes nothing else: before any message, and
// after some (its PSN is then behind the acknowledged ones), the responder
// answers a duplicate, delivers nothing and keeps its sequence; the
// requester's next message goes through. Outside RTS it is refused, and a
// reset forgets one not sent yet and the answer to the last.
TEST(RcQueuePair, AKeepaliveIsAnsweredAndDeliversNothing) {
  RcPair pair;
  EXPECT_FALSE(pair.qa_->keepalive_answered());
  EXPECT_TRUE(pair.qa_->SendKeepalive().ok());
  for (int step = 0; step < 10; ++step) pair.Step();
  EXPECT_TRUE(pair.qa_->keepalive_answered());
  EXPECT_EQ(pair.qa_->counters().acks_received, 1u);
  EXPECT_EQ(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 1u);
  EXPECT_EQ(pair.qb_->num_recv_queued(), 0u);
  EXPECT_EQ(pair.qa_->counters().packets_sent, 0u) << "a keepalive is not a packet of a message";

  ExpectExactlyOnceInOrder(Transfer(pair, {100, 5000}), {100, 5000});
  const uint64_t acks = pair.qa_->counters().acks_received;
  EXPECT_TRUE(pair.qa_->SendKeepalive().ok());
  for (int step = 0; step < 10; ++step) pair.Step();
  EXPECT_EQ(pair.qa_->counters().acks_received, acks + 1);
  EXPECT_EQ(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 2u);
  EXPECT_EQ(pair.qb_->counters().messages_received, 2u);
  EXPECT_EQ(pair.qa_->counters().drops.Get(QpDropReason::kUnexpectedAck), 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
  EXPECT_EQ(pair.qb_->state(), QpState::kRts);
  ASSERT_TRUE(pair.qa_->PostSend(Message(7, 10), 7).ok());
  for (int step = 0; step < 100 && pair.qb_->num_recv_queued() < 3; ++step) pair.Step();
  EXPECT_EQ(pair.qb_->counters().messages_received, 3u);

  // Reset with one queued: connected again, nothing goes out until asked.
  ASSERT_TRUE(pair.qa_->SendKeepalive().ok());
  ASSERT_TRUE(pair.qa_->Modify(QpState::kReset, {}).ok());
  EXPECT_FALSE(pair.qa_->keepalive_answered());
  EXPECT_TRUE(absl::IsFailedPrecondition(pair.qa_->SendKeepalive()));
  // As a host attaching again: both ends new, the requester's PSN another.
  ASSERT_TRUE(pair.qb_->Modify(QpState::kReset, {}).ok());
  RcPair::Connect(pair.qb_, kAddrA, pair.qa_->qpn(), {}, 0, 0x5000);
  RcPair::Connect(pair.qa_, kAddrB, pair.qb_->qpn(), {}, 0x5000, 0);
  for (int step = 0; step < 10; ++step) pair.Step();
  EXPECT_EQ(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 2u);
  EXPECT_FALSE(pair.qa_->keepalive_answered());
  ASSERT_TRUE(pair.qa_->SendKeepalive().ok());
  for (int step = 0; step < 10; ++step) pair.Step();
  EXPECT_TRUE(pair.qa_->keepalive_answered());
  ExpectExactlyOnceInOrder(Transfer(pair, {300}), {300});
}

// A keepalive the link loses is not answered, however long the requester
// waits (it is not retransmitted: the caller sends another).
TEST(RcQueuePair, AKeepaliveTheLinkLosesIsNotAnswered) {
  RcPair pair(*ParseImpairment("down=1"));
  ASSERT_TRUE(pair.qa_->SendKeepalive().ok());
  for (int step = 0; step < 1000; ++step) pair.Step();
  EXPECT_FALSE(pair.qa_->keepalive_answered());
  EXPECT_EQ(pair.qb_->counters().drops.Get(QpDropReason::kDuplicate), 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
}

TEST(RcQueuePair, WhenOneDelayedAckIsDueTheEndpointSendsEveryWaitingAck) {
  RcQpConfig config;
  config.ack_delay = absl::Milliseconds(1);
  RcPair pair({}, config);
  // A second connection between the same two endpoints.
  RcQueuePair* qa2 = *pair.a_->CreateRcQp(config);
  RcQueuePair* qb2 = *pair.b_->CreateRcQp(config);
  RcPair::Connect(qa2, kAddrB, qb2->qpn(), {}, 0, 0);
  RcPair::Connect(qb2, kAddrA, qa2->qpn(), {}, 0, 0);
  ASSERT_TRUE(pair.qa_->PostSend(Message(0, 64), 0).ok());
  for (int i = 0; i < 8; ++i) pair.Step();  // 400 us
  ASSERT_TRUE(qa2->PostSend(Message(1, 64), 1).ok());
  for (int i = 0; i < 14; ++i) pair.Step();  // 1.1 ms after the first
  // The first ACK was due; the second (due at 1.4 ms) went with it.
  EXPECT_EQ(pair.qb_->counters().acks_sent, 1u);
  EXPECT_EQ(qb2->counters().acks_sent, 1u);
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
  EXPECT_EQ(qa2->num_outstanding(), 0u);
}

TEST(RcQueuePair, AckCoalescingIsBoundedInPackets) {
  // 64 KiB is 16 packets at MTU 4096. With at most 4 packets per ACK it is
  // ACKed as soon as it arrives; with 1000 it waits for the 1 s delay.
  for (uint32_t limit : {4u, 1000u}) {
    RcQpConfig config;
    config.ack_delay = absl::Seconds(1);
    config.ack_coalesce_packets = limit;
    RcPair pair({}, config);
    ASSERT_TRUE(pair.qa_->PostSend(Message(0, 65536), 0).ok());
    EXPECT_EQ(PostOnePerStep(pair, 0, absl::Milliseconds(1)), limit == 4 ? 1u : 0u) << limit;
    EXPECT_EQ(pair.qb_->counters().messages_received, 1u);
  }
}

TEST(RcQueuePair, BidirectionalTrafficUnderFaults) {
  ImpairmentConfig faults = *ParseImpairment("drop=0.05,dup=0.02,reorder=0.05,seed=9");
  RcPair pair(faults);
  const size_t n = 200;
  size_t a_recv = 0, b_recv = 0, a_post = 0, b_post = 0;
  for (int step = 0; step < 200000 && (a_recv < n || b_recv < n); ++step) {
    if (a_post < n && pair.qa_->PostSend(Message(static_cast<uint32_t>(a_post), 700), a_post).ok()) ++a_post;
    if (b_post < n && pair.qb_->PostSend(Message(static_cast<uint32_t>(b_post + 1000), 5000), b_post).ok()) ++b_post;
    pair.Step();
    RecvMessage m;
    while (pair.qb_->PeekRecv(&m)) {
      ASSERT_EQ(std::vector<uint8_t>(m.data.begin(), m.data.end()), Message(static_cast<uint32_t>(b_recv), 700));
      ++b_recv;
      pair.qb_->PopRecv();
    }
    while (pair.qa_->PeekRecv(&m)) {
      ASSERT_EQ(std::vector<uint8_t>(m.data.begin(), m.data.end()), Message(static_cast<uint32_t>(a_recv + 1000), 5000));
      ++a_recv;
      pair.qa_->PopRecv();
    }
  }
  EXPECT_EQ(a_recv, n);
  EXPECT_EQ(b_recv, n);
}

TEST(RcQueuePair, PsnWrapsAround) {
  RcQpAttributes attrs;
  attrs.sq_psn = 0xFFFFF0;
  attrs.rq_psn = 0xFFFFF0;
  ImpairmentConfig faults = *ParseImpairment("drop=0.05,seed=5");
  RcPair pair(faults, {}, attrs);
  std::vector<size_t> sizes(40, 4096 * 2 + 1);  // 3 packets each: 120 PSNs
  ExpectExactlyOnceInOrder(Transfer(pair, sizes), sizes);
  // The next PSN has wrapped past 0xFFFFFF.
  EXPECT_LT(proto::PsnAdd(0xFFFFF0, 120), 0xFFFFF0u);
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
}

TEST(RcQueuePair, WindowBoundsOutstandingPackets) {
  RcQpConfig config;
  config.max_outstanding_packets = 8;
  RcPair pair(*ParseImpairment("delay=1ms"), config);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 4096), i).ok());
  uint32_t max_seen = 0;
  for (int step = 0; step < 2000; ++step) {
    pair.Step();
    max_seen = std::max(max_seen, pair.qa_->num_outstanding());
    RecvMessage m;
    while (pair.qb_->PeekRecv(&m)) pair.qb_->PopRecv();
  }
  EXPECT_EQ(max_seen, 8u);
  EXPECT_EQ(pair.qb_->counters().messages_received, 20u);
}

TEST(RcQueuePair, RetryExhaustionReachesErrorWithinItsBound) {
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(2);
  attrs.retry_count = 3;
  RcPair pair(*ParseImpairment("down=1"), {}, attrs);
  ASSERT_TRUE(pair.qa_->PostSend(Message(1, 100), 11).ok());
  ASSERT_TRUE(pair.qa_->PostSend(Message(2, 100), 12).ok());
  // Timeouts back off: 2, 4, 8, 16 ms -> ERROR after 30 ms of silence.
  const absl::Duration bound = absl::Milliseconds(2 + 4 + 8 + 16 + 1);
  absl::Duration elapsed;
  while (pair.qa_->state() != QpState::kError && elapsed < absl::Seconds(10)) {
    pair.Step(absl::Microseconds(100));
    elapsed += absl::Microseconds(100);
  }
  ASSERT_EQ(pair.qa_->state(), QpState::kError);
  EXPECT_LE(elapsed, bound);
  EXPECT_GE(elapsed, absl::Milliseconds(2 + 4 + 8));
  EXPECT_EQ(pair.qa_->error().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(pair.qa_->error().message().find("retry count"), std::string_view::npos);
  SendCompletion sc;
  ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc));
  EXPECT_EQ(sc.wr_id, 11u);
  EXPECT_EQ(sc.status.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc));
  EXPECT_EQ(sc.wr_id, 12u);
  EXPECT_FALSE(pair.qa_->PollSendCompletion(&sc));
  absl::Status post = pair.qa_->PostSend(Message(3, 10), 13);
  EXPECT_EQ(post.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(post.message().find("retry count"), std::string_view::npos);
  EXPECT_EQ(pair.qa_->counters().timeouts, 4u);
}

// A peer that is a process on a shared machine may not run for a while:
// with min_failure_time the QP outlasts its retries (7 at 4 ms: 0.76 s)
// until it has gone that long without progress.
TEST(RcQueuePair, APeerThatDoesNotRunIsWaitedForTheMinimumFailureTime) {
  RcQpConfig config;
  config.min_failure_time = absl::Seconds(3);
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(4);
  attrs.retry_count = 7;
  RcPair pair({}, config, attrs);
  ASSERT_TRUE(pair.qa_->PostSend(Message(1, 100), 11).ok());
  // B does not run for 2 s.
  for (absl::Duration t; t < absl::Seconds(2); t += absl::Milliseconds(1)) {
    pair.a_->Progress(absl::ZeroDuration());
    pair.clock_.Advance(absl::Milliseconds(1));
  }
  EXPECT_EQ(pair.qa_->state(), QpState::kRts) << pair.qa_->error();
  EXPECT_GT(pair.qa_->counters().timeouts, 7u);
  // B runs again: the message arrives and completes.
  SendCompletion sc;
  bool done = false;
  for (int i = 0; i < 20000 && !done; ++i) {
    pair.Step(absl::Microseconds(100));
    done = pair.qa_->PollSendCompletion(&sc);
  }
  ASSERT_TRUE(done);
  EXPECT_TRUE(sc.status.ok()) << sc.status;
  EXPECT_EQ(pair.qb_->counters().messages_received, 1u);
}

TEST(RcQueuePair, ADownLinkFailsOnceTheMinimumFailureTimeHasPassed) {
  RcQpConfig config;
  config.min_failure_time = absl::Seconds(1);
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(2);
  attrs.retry_count = 3;  // alone: 30 ms
  RcPair pair(*ParseImpairment("down=1"), config, attrs);
  ASSERT_TRUE(pair.qa_->PostSend(Message(1, 100), 11).ok());
  absl::Duration elapsed;
  while (pair.qa_->state() != QpState::kError && elapsed < absl::Seconds(10)) {
    pair.Step(absl::Microseconds(500));
    elapsed += absl::Microseconds(500);
  }
  ASSERT_EQ(pair.qa_->state(), QpState::kError);
  // From the first timeout (2 ms): 1 s, then at most one capped backoff (128 ms).
  EXPECT_GE(elapsed, absl::Seconds(1));
  EXPECT_LE(elapsed, absl::Milliseconds(2 + 1000 + 128 + 1));
  EXPECT_NE(pair.qa_->error().message().find("retried for"), std::string_view::npos)
      << pair.qa_->error();
}

// A timeout resends the first unacknowledged packet alone, not the whole
// window: a receiver that is only slow (or whose socket is full) gets one
// duplicate per timeout instead of a window of them. The answer to that
// packet reopens the window, and everything arrives exactly once.
TEST(RcQueuePair, ATimeoutResendsOnePacketUntilTheReceiverAnswers) {
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  RcPair pair({}, {}, attrs);
  pair.b_port_->SetReceiveImpairment(*ParseImpairment("down=1"));
  constexpr int kMessages = 20;
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 4096), i).ok());
  // All 20 go out and are lost; then three timeouts (1, 2, 4 ms).
  for (int step = 0; step < 80 && pair.qa_->counters().timeouts < 3; ++step) {
    pair.Step(absl::Microseconds(100));
  }
  ASSERT_EQ(pair.qa_->counters().timeouts, 3u);
  EXPECT_EQ(pair.qa_->counters().packets_sent, static_cast<uint64_t>(kMessages));
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 3u) << "one packet per timeout";
  // The link comes back: the next probe is answered, the window reopens.
  pair.b_port_->SetReceiveImpairment({});
  for (int step = 0; step < 400 && pair.qb_->counters().messages_received < kMessages; ++step) {
    pair.Step(absl::Microseconds(100));
  }
  EXPECT_EQ(pair.qb_->counters().messages_received, static_cast<uint64_t>(kMessages));
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
  // The probe and then each lost packet once more.
  EXPECT_EQ(pair.qa_->counters().packets_retransmitted, 3u + kMessages);
  for (int step = 0; step < 100 && pair.qa_->num_outstanding() > 0; ++step) pair.Step();
  SendCompletion sc;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc)) << i;
    EXPECT_EQ(sc.wr_id, static_cast<uint64_t>(i));
    EXPECT_TRUE(sc.status.ok());
  }
}

// A receiver that is slow, not losing packets (a switch whose thread waits
// for a CPU): it does not run for 5 ms, with an ACK timeout of 1 ms, then
// takes its backlog a burst (32 packets) at a time, ACKing each. The
// timeouts send one probe each; the first answer acknowledges packets that
// were sent once, before the timeout, so the timeout was spurious and the
// requester does not send the rest of its window again (it used to: the
// 32 packets of the second burst, still on their way).
TEST(RcQueuePair, ASlowReceiverGetsProbesNotTheWindowAgain) {
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  RcPair pair({}, {}, attrs);
  constexpr int kMessages = 64;
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 4096), i).ok());
  for (int step = 0; step < 50; ++step) {  // 5 ms: only the requester runs
    pair.a_->Progress(absl::ZeroDuration());
    pair.clock_.Advance(absl::Microseconds(100));
  }
  const RcQpCounters& c = pair.qa_->counters();
  ASSERT_EQ(c.packets_sent, static_cast<uint64_t>(kMessages));
  ASSERT_GE(c.timeouts, 2u) << "the receiver was not slow enough to time out";
  ASSERT_EQ(c.packets_retransmitted, c.timeouts.load()) << "one probe per timeout";
  for (int step = 0; step < 200 && pair.qb_->counters().messages_received < kMessages; ++step) {
    pair.Step(absl::Microseconds(100));
    RecvMessage rm;
    while (pair.qb_->PeekRecv(&rm)) pair.qb_->PopRecv();
  }
  ASSERT_EQ(pair.qb_->counters().messages_received, static_cast<uint64_t>(kMessages));
  for (int step = 0; step < 100 && pair.qa_->num_outstanding() > 0; ++step) pair.Step();
  EXPECT_EQ(pair.qa_->num_outstanding(), 0u);
  EXPECT_EQ(c.spurious_timeouts, 1u);
  EXPECT_EQ(c.packets_retransmitted, c.timeouts.load()) << "only the probes went out again";
  EXPECT_EQ(pair.qa_->state(), QpState::kRts);
}

TEST(RcQueuePair, FullReceiveQueueIsRnrNakedAndRecovered) {
  RcQpConfig config;
  config.max_recv_queue = 4;
  config.min_rnr_timer = 1;  // 10 us
  RcPair pair({}, config);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 5000), i).ok());
  for (int step = 0; step < 100; ++step) pair.Step();
  EXPECT_EQ(pair.qb_->num_recv_queued(), 4u);
  EXPECT_GT(pair.qb_->counters().rnr_naks_sent, 0u);
  EXPECT_GT(pair.qa_->counters().rnr_naks_received, 0u);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts) << "unlimited RNR retries";
  int got = 0;
  for (int step = 0; step < 10000 && got < 10; ++step) {
    RecvMessage m;
    while (pair.qb_->PeekRecv(&m)) {
      EXPECT_EQ(std::vector<uint8_t>(m.data.begin(), m.data.end()), Message(got, 5000));
      ++got;
      pair.qb_->PopRecv();
    }
    pair.Step();
  }
  EXPECT_EQ(got, 10);
}

// An RNR NAK is an answer: a receiver that stays busy longer than the ACK
// timeout times the retry budget must not be declared dead.
TEST(RcQueuePair, RnrWaitsLongerThanTheAckTimeoutDoNotExhaustTheRetries) {
  RcQpConfig config;
  config.max_recv_queue = 1;
  config.min_rnr_timer = 18;  // 5.12 ms, longer than the 2 ms ACK timeout
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(2);
  attrs.retry_count = 2;  // 2 + 4 + 8 ms of silence would end it
  RcPair pair({}, config, attrs);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 100), i).ok());
  // The receiver holds its one slot for 200 ms.
  for (int step = 0; step < 2000; ++step) pair.Step(absl::Microseconds(100));
  ASSERT_EQ(pair.qa_->state(), QpState::kRts) << pair.qa_->error();
  EXPECT_GT(pair.qa_->counters().rnr_naks_received, 10u);
  int got = 0;
  for (int step = 0; step < 20000 && got < 3; ++step) {
    RecvMessage m;
    while (pair.qb_->PeekRecv(&m)) {
      EXPECT_EQ(std::vector<uint8_t>(m.data.begin(), m.data.end()), Message(got, 100));
      ++got;
      pair.qb_->PopRecv();
    }
    pair.Step(absl::Microseconds(100));
  }
  EXPECT_EQ(got, 3);
  EXPECT_EQ(pair.qa_->state(), QpState::kRts) << pair.qa_->error();
}

TEST(RcQueuePair, LimitedRnrRetriesEndInError) {
  RcQpConfig config;
  config.max_recv_queue = 1;
  config.min_rnr_timer = 1;
  RcQpAttributes attrs;
  attrs.rnr_retry = 2;
  RcPair pair({}, config, attrs);
  ASSERT_TRUE(pair.qa_->PostSend(Message(0, 10), 0).ok());
  ASSERT_TRUE(pair.qa_->PostSend(Message(1, 10), 1).ok());
  for (int step = 0; step < 1000 && pair.qa_->state() != QpState::kError; ++step) pair.Step();
  ASSERT_EQ(pair.qa_->state(), QpState::kError);
  EXPECT_EQ(pair.qa_->error().code(), absl::StatusCode::kUnavailable);
  SendCompletion sc;
  ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc));
  EXPECT_TRUE(sc.status.ok()) << "the first message was delivered";
  ASSERT_TRUE(pair.qa_->PollSendCompletion(&sc));
  EXPECT_FALSE(sc.status.ok());
}

}  // namespace
}  // namespace netfold::transport
