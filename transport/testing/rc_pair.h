// Test helper for RC queue pair tests: two endpoints on an impaired
// in-memory link with a fake clock, and messages whose bytes a test can
// check.
//
//   RcPair pair;                                  // qa_ -> qb_, connected
//   ASSERT_TRUE(pair.qa_->PostSend(Message(1, 100), 1).ok());
//   pair.Step();                                  // both endpoints, then 50 us
//   ExpectExactlyOnceInOrder(Transfer(pair, sizes), sizes);
//
// For tests only (no library includes it). Not thread-safe.
#ifndef NETFOLD_TRANSPORT_TESTING_RC_PAIR_H_
#define NETFOLD_TRANSPORT_TESTING_RC_PAIR_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"
#include "transport/rc_queue_pair.h"
#include "transport/roce_endpoint.h"

namespace netfold::transport {

constexpr Ipv4Endpoint kAddrA{0x0a000001, 4791};
constexpr Ipv4Endpoint kAddrB{0x0a000002, 4791};

// Two endpoints joined by an impaired in-memory link, time driven by hand.
class RcPair {
 public:
  explicit RcPair(const ImpairmentConfig& faults = {}, RcQpConfig qp_config = {},
                  RcQpAttributes attrs = {}) {
    a_port_ = MakePort(kAddrA, faults, 1);
    b_port_ = MakePort(kAddrB, faults, 2);
    a_ = std::make_unique<RoceEndpoint>(std::unique_ptr<Port>(a_port_), clock_);
    b_ = std::make_unique<RoceEndpoint>(std::unique_ptr<Port>(b_port_), clock_,
                                        RoceEndpointConfig{.first_qpn = 0x200});
    qa_ = *a_->CreateRcQp(qp_config);
    qb_ = *b_->CreateRcQp(qp_config);
    Connect(qa_, kAddrB, qb_->qpn(), attrs, attrs.sq_psn, attrs.rq_psn);
    Connect(qb_, kAddrA, qa_->qpn(), attrs, attrs.rq_psn, attrs.sq_psn);
  }

  static void Connect(RcQueuePair* qp, Ipv4Endpoint remote, uint32_t remote_qpn,
                      RcQpAttributes attrs, uint32_t sq_psn, uint32_t rq_psn) {
    attrs.remote = remote;
    attrs.remote_qpn = remote_qpn;
    attrs.sq_psn = sq_psn;
    attrs.rq_psn = rq_psn;
    ASSERT_TRUE(qp->Modify(QpState::kInit, attrs).ok());
    ASSERT_TRUE(qp->Modify(QpState::kRtr, attrs).ok());
    ASSERT_TRUE(qp->Modify(QpState::kRts, attrs).ok());
  }

  // One step of both endpoints, then time moves on.
  void Step(absl::Duration dt = absl::Microseconds(50)) {
    a_->Progress(absl::ZeroDuration());
    b_->Progress(absl::ZeroDuration());
    clock_.Advance(dt);
  }

  ImpairedPort* MakePort(Ipv4Endpoint addr, ImpairmentConfig faults, uint64_t salt) {
    // With view headers: first transmissions go out as views of the send
    // queue's frames, through every impairment (held, duplicated, corrupted).
    auto port = *net_.CreatePort({.local = addr, .pool = {.num_buffers = 2048, .num_views = 2048}});
    ImpairmentConfig send = faults, receive = faults;
    send.seed = faults.seed * 4 + salt;
    receive.seed = faults.seed * 4 + salt + 2;
    return new ImpairedPort(std::move(port), send, receive, clock_);
  }

  FakeClock clock_;
  MemoryNetwork net_;
  ImpairedPort* a_port_;
  ImpairedPort* b_port_;
  std::unique_ptr<RoceEndpoint> a_, b_;
  RcQueuePair* qa_;
  RcQueuePair* qb_;
};

// `size` bytes of message `index`: seeded by it, and its first 4 bytes.
inline std::vector<uint8_t> Message(uint32_t index, size_t size) {
  std::vector<uint8_t> m(size);
  std::mt19937 gen(index);
  for (auto& b : m) b = static_cast<uint8_t>(gen());
  if (size >= 4) std::memcpy(m.data(), &index, 4);
  return m;
}

// Sends `sizes` from a to b (keeping the send queue full), returns what b
// received, in order, and checks every send completion. With `reference`,
// each message goes as a gather of its first 8 bytes (copied) and the rest,
// referenced (PostSendGatherReferencing) and kept unchanged until it
// completes.
inline std::vector<std::vector<uint8_t>> Transfer(RcPair& pair,
                                                  const std::vector<size_t>& sizes,
                                                  int max_steps = 2000000,
                                                  bool reference = false) {
  std::vector<std::vector<uint8_t>> received;
  std::vector<std::vector<uint8_t>> kept(sizes.size());
  size_t posted = 0, completed = 0;
  for (int step = 0;
       step < max_steps && (received.size() < sizes.size() || completed < sizes.size()); ++step) {
    while (posted < sizes.size()) {
      auto m = Message(static_cast<uint32_t>(posted), sizes[posted]);
      absl::Status s;
      if (reference) {
        kept[posted] = m;
        const std::span<const uint8_t> all(kept[posted]);
        const size_t head = std::min<size_t>(8, all.size());
        const std::span<const uint8_t> pieces[] = {all.first(head), all.subspan(head)};
        s = pair.qa_->PostSendGatherReferencing(pieces, 1, posted);
      } else {
        s = pair.qa_->PostSend(m, posted);
      }
      if (absl::IsResourceExhausted(s)) break;
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return received;
      ++posted;
    }
    pair.Step();
    SendCompletion sc;
    while (pair.qa_->PollSendCompletion(&sc)) {
      EXPECT_TRUE(sc.status.ok()) << sc.status;
      EXPECT_EQ(sc.wr_id, completed) << "completions come in posting order";
      // Completed: its memory is the caller's again (overwritten, as a
      // caller may).
      std::fill(kept[completed].begin(), kept[completed].end(), 0xCC);
      ++completed;
    }
    RecvMessage rm;
    while (pair.qb_->PeekRecv(&rm)) {
      received.emplace_back(rm.data.begin(), rm.data.end());
      pair.qb_->PopRecv();
    }
    if (pair.qa_->state() == QpState::kError) {
      ADD_FAILURE() << "requester failed: " << pair.qa_->error();
      break;
    }
  }
  EXPECT_EQ(completed, sizes.size());
  return received;
}

inline void ExpectExactlyOnceInOrder(const std::vector<std::vector<uint8_t>>& received,
                              const std::vector<size_t>& sizes) {
  ASSERT_EQ(received.size(), sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(received[i], Message(static_cast<uint32_t>(i), sizes[i])) << "message " << i;
  }
}

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_TESTING_RC_PAIR_H_
