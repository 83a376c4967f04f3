// An RC queue pair's send queue and the memory it sends from: first
// transmissions are views of the queue's frames and never rewritten while
// queued, referenced pieces go out from the caller's memory until released
// (or are copied for a port that takes no external bytes), reserved send
// buffers, the queue's limit; and the verbs state machine. Two bare queue
// pairs and a wire carried by hand. Split from rc_queue_pair_test.cc.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/roce_packet.h"
#include "transport/rc_queue_pair.h"
#include "transport/testing/rc_pair.h"

namespace netfold::transport {
namespace {

// Two bare QPs and a hand-carried wire: what Poll emits is kept as long
// as the test likes before it is delivered (or never).
class BareRcPair {
 public:
  BareRcPair(uint32_t views) : pool_({.num_buffers = 64, .num_views = views}) {
    RcQpAttributes attrs;
    attrs.timeout = absl::Milliseconds(1);
    RcPair::Connect(&a_, kAddrB, b_.qpn(), attrs, 100, 200);
    RcPair::Connect(&b_, kAddrA, a_.qpn(), attrs, 200, 100);
  }
  ~BareRcPair() { PacketPool::FreeBurst(out_); }
  // What `qp` sends now (to a port that takes external bytes if
  // takes_external_).
  std::vector<PacketBuffer*> Poll(RcQueuePair& qp, Ipv4Endpoint local) {
    out_.clear();
    qp.Poll(local, {&pool_, &out_, takes_external_});
    std::vector<PacketBuffer*> sent = out_;
    out_.clear();
    return sent;
  }
  // Hands a copy of `p` (its ICRC checked) to `to`, as if it crossed the wire.
  void Deliver(const PacketBuffer& p, RcQueuePair& to, Ipv4Endpoint from, Ipv4Endpoint at) {
    PacketBuffer* copy = pool_.Alloc();
    ASSERT_NE(copy, nullptr);
    const std::vector<uint8_t> bytes = Whole(p);
    std::memcpy(copy->data(), bytes.data(), bytes.size());
    copy->set_len(p.len());
    copy->src = from;
    copy->dst = at;
    const proto::IcrcAddresses addrs{from.ip, at.ip, from.port, at.port};
    proto::RocePacketView view;
    ASSERT_EQ(proto::ParseRocePacket(copy->bytes(), &addrs, &view), proto::RoceParseResult::kOk);
    if (!to.OnPacket(view, copy)) PacketPool::Free(copy);
  }
  // Delivers `sent` to b and b's ACK back to a; frees neither.
  void DeliverAndAck(const std::vector<PacketBuffer*>& sent) {
    for (const PacketBuffer* p : sent) Deliver(*p, b_, kAddrA, kAddrB);
    clock_.Advance(absl::Microseconds(10));
    for (PacketBuffer* ack : Poll(b_, kAddrB)) {
      Deliver(*ack, a_, kAddrB, kAddrA);
      PacketPool::Free(ack);
    }
  }

  // The bytes `p` goes out with: its own, with its external ones in place.
  static std::vector<uint8_t> Whole(const PacketBuffer& p) {
    std::vector<uint8_t> bytes(p.data(), p.data() + p.len());
    std::copy(p.external().begin(), p.external().end(), bytes.begin() + p.external_at());
    return bytes;
  }

  FakeClock clock_;
  PacketPool pool_;
  bool takes_external_ = false;
  RcQueuePair a_{0x300, {}, clock_};
  RcQueuePair b_{0x400, {}, clock_};
  std::vector<PacketBuffer*> out_;
};

std::vector<uint8_t> Bytes(const PacketBuffer* p) { return {p->data(), p->data() + p->len()}; }

// The oldest message `qp` received, if any.
std::optional<std::vector<uint8_t>> Oldest(const RcQueuePair& qp) {
  RecvMessage m;
  if (!qp.PeekRecv(&m)) return std::nullopt;
  return std::vector<uint8_t>(m.data.begin(), m.data.end());
}

TEST(RcQueuePair, FirstTransmissionsAreViewsOfTheSendQueueAndNeverRewrittenWhileQueued) {
  BareRcPair pair(/*views=*/64);
  ASSERT_TRUE(pair.a_.PostSend(Message(1, 10000), 1).ok());
  std::vector<PacketBuffer*> first = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(first.size(), 3u);
  for (const PacketBuffer* p : first) EXPECT_TRUE(p->is_view());
  // Delivered and acknowledged while the views are still held (as a
  // delaying link holds them after a duplicate got through): the message
  // completes and its WQE is used again.
  pair.DeliverAndAck(first);
  SendCompletion sc;
  ASSERT_TRUE(pair.a_.PollSendCompletion(&sc));
  EXPECT_EQ(sc.wr_id, 1u);
  EXPECT_EQ(Oldest(pair.b_), Message(1, 10000));
  pair.b_.PopRecv();
  std::vector<std::vector<uint8_t>> held;
  for (const PacketBuffer* p : first) held.push_back(Bytes(p));
  ASSERT_TRUE(pair.a_.PostSend(Message(2, 10000), 2).ok());
  std::vector<PacketBuffer*> second = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(Bytes(first[i]), held[i]) << "a queued packet of message 1 was overwritten";
  }
  PacketPool::FreeBurst(first);  // the old frames go with their last view
  // Message 2 is lost: its retransmission is a copy (the views may still
  // be queued), and the receiver takes it whole.
  PacketPool::FreeBurst(second);
  pair.clock_.Advance(absl::Milliseconds(2));
  std::vector<PacketBuffer*> again = pair.Poll(pair.a_, kAddrA);
  ASSERT_FALSE(again.empty());
  for (const PacketBuffer* p : again) EXPECT_FALSE(p->is_view());
  // After a timeout the requester probes with one packet, then goes on.
  for (int round = 0; round < 10 && !Oldest(pair.b_); ++round) {
    pair.DeliverAndAck(again);
    PacketPool::FreeBurst(again);
    again = pair.Poll(pair.a_, kAddrA);
  }
  PacketPool::FreeBurst(again);
  EXPECT_EQ(Oldest(pair.b_), Message(2, 10000));
  EXPECT_GT(pair.a_.counters().packets_retransmitted, 0u);
}

TEST(RcQueuePair, WithoutViewHeadersEveryPacketIsACopy) {
  BareRcPair pair(/*views=*/0);
  ASSERT_TRUE(pair.a_.PostSend(Message(3, 5000), 3).ok());
  std::vector<PacketBuffer*> sent = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(sent.size(), 2u);
  for (const PacketBuffer* p : sent) EXPECT_FALSE(p->is_view());
  pair.DeliverAndAck(sent);
  PacketPool::FreeBurst(sent);
  EXPECT_EQ(Oldest(pair.b_), Message(3, 5000));
}

TEST(RcQueuePair, AReferencedPieceGoesOutFromTheCallersMemoryUntilReleased) {
  BareRcPair pair(/*views=*/64);
  pair.takes_external_ = true;
  const std::vector<uint8_t> whole = Message(9, 40 + 4000 + 16);
  std::vector<uint8_t> header(whole.begin(), whole.begin() + 40);
  std::vector<uint8_t> data(whole.begin() + 40, whole.begin() + 4040);
  std::vector<uint8_t> tag(whole.begin() + 4040, whole.end());
  const std::span<const uint8_t> pieces[] = {header, data, tag};
  ASSERT_TRUE(pair.a_.PostSendGatherReferencing(pieces, 1, 5).ok());
  // The pieces around it were copied: the caller may reuse them at once.
  std::fill(header.begin(), header.end(), 0);
  std::fill(tag.begin(), tag.end(), 0);
  std::vector<PacketBuffer*> sent = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0]->is_view());
  EXPECT_EQ(sent[0]->external().data(), data.data()) << "no copy: sent from where it is";
  EXPECT_EQ(sent[0]->external().size(), data.size());
  EXPECT_EQ(sent[0]->external_at(), proto::kBthSize + 40);
  // Lost. Until released, the retransmission reads the caller's memory
  // again (here changed, against the contract, to show where it reads).
  PacketPool::FreeBurst(sent);
  data[0] ^= 0xFF;
  pair.clock_.Advance(absl::Milliseconds(2));
  std::vector<PacketBuffer*> again = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0]->external().empty()) << "a retransmission is a copy";
  EXPECT_EQ(again[0]->data()[proto::kBthSize + 40], data[0]);
  PacketPool::FreeBurst(again);
  // Released: copied into the QP; the caller's memory is free.
  EXPECT_EQ(pair.a_.ReleaseReferences(data), data.size());
  EXPECT_EQ(pair.a_.ReleaseReferences(data), 0u) << "nothing referenced any more";
  const std::vector<uint8_t> released = data;
  std::fill(data.begin(), data.end(), 0x77);
  std::vector<uint8_t> expected = whole;
  std::copy(released.begin(), released.end(), expected.begin() + 40);
  for (int round = 0; round < 10 && !Oldest(pair.b_); ++round) {
    pair.clock_.Advance(absl::Milliseconds(5));
    again = pair.Poll(pair.a_, kAddrA);
    pair.DeliverAndAck(again);
    PacketPool::FreeBurst(again);
  }
  EXPECT_EQ(Oldest(pair.b_), expected);
  SendCompletion sc;
  ASSERT_TRUE(pair.a_.PollSendCompletion(&sc));
  EXPECT_EQ(sc.wr_id, 5u);
}

TEST(RcQueuePair, AReferencedPieceIsCopiedForAPortThatTakesNoExternalBytes) {
  BareRcPair pair(/*views=*/64);
  const std::vector<uint8_t> whole = Message(10, 3000);
  std::vector<uint8_t> head(whole.begin(), whole.begin() + 8);
  std::vector<uint8_t> rest(whole.begin() + 8, whole.end());
  const std::span<const uint8_t> pieces[] = {head, rest};
  ASSERT_TRUE(pair.a_.PostSendGatherReferencing(pieces, 1, 6).ok());
  std::vector<PacketBuffer*> sent = pair.Poll(pair.a_, kAddrA);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0]->external().empty());
  // Copied when it was built: nothing is referenced any more.
  EXPECT_EQ(pair.a_.ReleaseReferences(rest), 0u);
  std::fill(rest.begin(), rest.end(), 0);
  pair.DeliverAndAck(sent);
  PacketPool::FreeBurst(sent);
  EXPECT_EQ(Oldest(pair.b_), whole);
  // A message longer than a packet is copied whole when posted.
  const std::vector<uint8_t> longer = Message(11, 9000);
  const std::span<const uint8_t> parts[] = {std::span<const uint8_t>(longer).first(8),
                                            std::span<const uint8_t>(longer).subspan(8)};
  pair.takes_external_ = true;
  ASSERT_TRUE(pair.a_.PostSendGatherReferencing(parts, 1, 7).ok());
  EXPECT_EQ(pair.a_.ReleaseReferences(longer), 0u);
  EXPECT_EQ(pair.a_.PostSendGatherReferencing(parts, 2, 8).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RcQueuePair, ModifyFollowsTheVerbsStateMachine) {
  FakeClock clock;
  RcQueuePair qp(0x123, {}, clock);
  RcQpAttributes attrs;
  attrs.remote = kAddrB;
  attrs.remote_qpn = 0x456;
  EXPECT_EQ(qp.Modify(QpState::kRtr, attrs).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(qp.PostSend(Message(0, 1), 0).code(), absl::StatusCode::kFailedPrecondition);
  RcQpAttributes bad_pkey = attrs;
  bad_pkey.pkey = 0x8000;
  EXPECT_EQ(qp.Modify(QpState::kInit, bad_pkey).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(qp.Modify(QpState::kInit, attrs).ok());
  for (auto mutate : std::vector<std::function<void(RcQpAttributes&)>>{
           [](RcQpAttributes& a) { a.path_mtu = 1500; },
           [](RcQpAttributes& a) { a.remote_qpn = 0xFFFFFF; },
           [](RcQpAttributes& a) { a.remote_qpn = 1; },
           [](RcQpAttributes& a) { a.rq_psn = 0x1000000; },
           [](RcQpAttributes& a) { a.remote = {0xe0000001, 4791}; },
           [](RcQpAttributes& a) { a.remote.port = 0; }}) {
    RcQpAttributes bad = attrs;
    mutate(bad);
    EXPECT_EQ(qp.Modify(QpState::kRtr, bad).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(qp.state(), QpState::kInit);
  }
  ASSERT_TRUE(qp.Modify(QpState::kRtr, attrs).ok());
  RcQpAttributes bad_retry = attrs;
  bad_retry.retry_count = 8;
  EXPECT_EQ(qp.Modify(QpState::kRts, bad_retry).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(qp.Modify(QpState::kRts, attrs).ok());
  EXPECT_EQ(qp.Modify(QpState::kInit, attrs).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<uint8_t> too_big(RcQpConfig{}.max_message_size + 1);
  EXPECT_EQ(qp.PostSend(too_big, 0).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(qp.PostSend(Message(0, 1), 77).ok());
  ASSERT_TRUE(qp.Modify(QpState::kError, attrs).ok());
  SendCompletion sc;
  ASSERT_TRUE(qp.PollSendCompletion(&sc));
  EXPECT_EQ(sc.wr_id, 77u);
  EXPECT_EQ(sc.status.code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(qp.Modify(QpState::kReset, attrs).ok());
  EXPECT_EQ(qp.state(), QpState::kReset);
  EXPECT_TRUE(qp.error().ok());
}

// Buffers reserved before the first send are the ones the sends use: the
// queue does not grow while that many one-packet messages are in flight,
// and what arrives is what was posted.
TEST(RcQueuePair, ReservedSendBuffersServeTheSendsWithoutGrowing) {
  RcQpConfig config;
  config.max_send_queue = 64;
  RcPair pair({}, config);
  RcQueuePair* unconnected = *pair.a_->CreateRcQp(config);
  EXPECT_EQ(unconnected->ReserveSends(8).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pair.qa_->ReserveSends(40).ok());
  EXPECT_EQ(pair.qa_->num_send_buffers(), 40u);
  ASSERT_TRUE(pair.qa_->ReserveSends(1000).ok());
  EXPECT_EQ(pair.qa_->num_send_buffers(), 64u) << "at most max_send_queue";
  EXPECT_EQ(pair.qa_->num_send_frames_made(), 64u) << "each entry with its frame";
  std::vector<size_t> sizes(64, 4096);
  for (size_t i = 0; i < sizes.size(); i += 3) sizes[i] = i + 1;  // short ones too
  for (int round = 0; round < 3; ++round) {
    ExpectExactlyOnceInOrder(Transfer(pair, sizes), sizes);
  }
  EXPECT_EQ(pair.qa_->num_send_buffers(), 64u);
  EXPECT_EQ(pair.qa_->num_send_frames_made(), 64u) << "the sends used the reserved frames";
  ASSERT_TRUE(pair.qa_->ReserveSends(64).ok());  // again: nothing to add
  EXPECT_EQ(pair.qa_->num_send_buffers(), 64u);
  EXPECT_EQ(pair.qa_->num_send_frames_made(), 64u);
}

TEST(RcQueuePair, SendQueueLimitIsResourceExhausted) {
  RcQpConfig config;
  config.max_send_queue = 3;
  RcPair pair({}, config);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pair.qa_->PostSend(Message(i, 1), i).ok());
  EXPECT_EQ(pair.qa_->PostSend(Message(3, 1), 3).code(), absl::StatusCode::kResourceExhausted);
  for (int step = 0; step < 50; ++step) pair.Step();
  EXPECT_TRUE(pair.qa_->PostSend(Message(3, 1), 3).ok());
}

}  // namespace
}  // namespace netfold::transport
