// The endpoint's order of work: a pass over its queue pairs goes in QPN
// order, whatever order they were created in. Split from
// roce_endpoint_test.cc.
#include <algorithm>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/roce_packet.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::transport {
namespace {

constexpr Ipv4Endpoint kAddrA{0x0a000001, 4791};
constexpr Ipv4Endpoint kAddrB{0x0a000002, 4791};
constexpr uint16_t kPkey = 0x8123;

// Seeded link faults drop the n-th packet of a stage, so the same seed
// gives the same faults only if the packets leave in the same order in
// every process: the endpoint polls its QPs in QPN order, whatever order
// they were created in and whatever the hash tables' per-process seed.
// (In hash order, in_process_fabric_test's seeded fault runs differed from
// one process to the next and some missed their deadlines.)
TEST(RoceEndpoint, PollsItsQueuePairsInQpnOrder) {
  FakeClock clock;
  MemoryNetwork net;
  RoceEndpoint a(*net.CreatePort({.local = kAddrA}), clock);
  std::unique_ptr<MemoryPort> b = *net.CreatePort({.local = kAddrB});
  std::vector<uint32_t> created;
  for (uint32_t i = 0; i < 40; ++i) {
    const uint32_t qpn = 0x200 + (i * 37) % 101;  // scrambled, distinct
    RcQueuePair* qp = *a.CreateRcQpWithQpn(qpn);
    RcQpAttributes attrs;
    attrs.pkey = kPkey;
    attrs.remote = kAddrB;
    attrs.remote_qpn = qpn;  // the packet names the QP that sent it
    for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
      ASSERT_TRUE(qp->Modify(s, attrs).ok());
    }
    created.push_back(qpn);
  }
  // Some go and their QPNs come back later.
  for (size_t i = 0; i < created.size(); i += 5) ASSERT_TRUE(a.DestroyQp(created[i]).ok());
  for (size_t i = 0; i < created.size(); i += 10) {
    RcQueuePair* qp = *a.CreateRcQpWithQpn(created[i]);
    RcQpAttributes attrs;
    attrs.pkey = kPkey;
    attrs.remote = kAddrB;
    attrs.remote_qpn = created[i];
    for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
      ASSERT_TRUE(qp->Modify(s, attrs).ok());
    }
  }
  std::vector<uint32_t> expected;
  for (size_t i = 0; i < created.size(); ++i) {
    if (i % 5 != 0 || i % 10 == 0) expected.push_back(created[i]);
    ASSERT_EQ(a.FindRcQp(created[i]) != nullptr, i % 5 != 0 || i % 10 == 0);
  }
  std::sort(expected.begin(), expected.end());
  const std::vector<uint8_t> message(8, 0x5a);
  for (uint32_t qpn : created) {
    if (RcQueuePair* qp = a.FindRcQp(qpn)) {
      ASSERT_TRUE(qp->PostSend(message, qpn).ok());
    }
  }
  a.Flush();
  std::vector<uint32_t> order;
  PacketBuffer* rx[64];
  const size_t n = b->RecvBurst(rx, absl::ZeroDuration());
  for (size_t i = 0; i < n; ++i) {
    auto v = proto::DecodeRocePacket(rx[i]->bytes(), nullptr);
    ASSERT_TRUE(v.ok()) << v.status();
    order.push_back(v->bth.dest_qp);
  }
  PacketPool::FreeBurst({rx, n});
  EXPECT_EQ(order, expected);
}

}  // namespace
}  // namespace netfold::transport
