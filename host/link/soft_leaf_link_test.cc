// The soft leaf link over real UDP sockets on loopback, against a bare
// RoCEv2 endpoint standing for the leaf switch: whether a Progress left
// packets behind (MayHoldMore), which is when the data path reads again
// at once instead of going on to its repair timers; and that what another
// reader of the shared endpoint took is delivered without a wait.
#include "host/link/soft_leaf_link.h"

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "transport/impaired_port.h"
#include "transport/queue_pair_common.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::host {
namespace {

using transport::QpState;

constexpr uint32_t kLoopback = 0x7f000001;

std::unique_ptr<transport::UdpPort> Loopback() {
  auto port = transport::UdpPort::Create({.local = {kLoopback, 0}});
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? std::move(*port) : nullptr;
}

class SoftLeafLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rank_udp = Loopback();
    auto switch_udp = Loopback();
    ASSERT_TRUE(rank_udp && switch_udp);
    rank_port_ = new transport::ImpairedPort(std::move(rank_udp), RealClock());
    rank_ = std::make_unique<transport::RoceEndpoint>(
        std::unique_ptr<transport::Port>(rank_port_), RealClock());
    auto link = SoftLeafLink::Create(rank_.get(), rank_port_);
    ASSERT_TRUE(link.ok()) << link.status();
    link_ = std::move(*link);
    switch_ = std::make_unique<transport::RoceEndpoint>(std::move(switch_udp), RealClock());
    auto qp = switch_->CreateRcQp({.max_send_queue = 1024});
    ASSERT_TRUE(qp.ok()) << qp.status();
    qp_ = *qp;
    transport::RcQpAttributes attrs;
    attrs.remote = rank_->local();
    attrs.remote_qpn = link_->qpn();
    attrs.rq_psn = 200;
    attrs.sq_psn = 100;
    attrs.timeout = absl::Seconds(10);  // no retransmission while a test holds its ACKs
    for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
      ASSERT_TRUE(qp_->Modify(s, attrs).ok());
    }
    LeafPeer peer;
    peer.remote = switch_->local();
    peer.remote_qpn = qp_->qpn();
    peer.rq_psn = 100;
    peer.sq_psn = 200;
    peer.qkey = 0x11;
    ASSERT_TRUE(link_->Connect(peer).ok());
  }

  // The switch sends `n` results of 64 bytes over RC, all of them now (it
  // reads nothing meanwhile, so none is acknowledged or sent again).
  void SwitchSends(int n) {
    const uint32_t target = qp_->num_outstanding() + static_cast<uint32_t>(n);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(qp_->PostSend(std::vector<uint8_t>(64, static_cast<uint8_t>(i)), i).ok());
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (qp_->num_outstanding() < target && absl::Now() < deadline) {
      switch_->Progress(absl::ZeroDuration());
    }
    ASSERT_EQ(qp_->num_outstanding(), target) << "sent, not acknowledged: the switch reads nothing";
  }

  // Progress(timeout) once; how many messages it delivered.
  int ProgressOnce(absl::Duration timeout) {
    int delivered = 0;
    link_->Progress(timeout, [&](const LinkMessage&) { ++delivered; });
    return delivered;
  }

  transport::ImpairedPort* rank_port_ = nullptr;  // owned by rank_
  std::unique_ptr<transport::RoceEndpoint> rank_;
  std::unique_ptr<SoftLeafLink> link_;
  std::unique_ptr<transport::RoceEndpoint> switch_;
  transport::RcQueuePair* qp_ = nullptr;
};

TEST_F(SoftLeafLinkTest, SaysWhetherAProgressLeftPacketsBehind) {
  // Fewer packets than a read takes: one Progress takes them all.
  ASSERT_NO_FATAL_FAILURE(SwitchSends(3));
  EXPECT_EQ(ProgressOnce(absl::Seconds(5)), 3);
  EXPECT_FALSE(link_->MayHoldMore()) << "three results, all read";

  // More than a read takes (the endpoint's burst is 32): the first
  // Progress leaves some, and says so until the last one is read.
  ASSERT_NO_FATAL_FAILURE(SwitchSends(200));
  int delivered = ProgressOnce(absl::Seconds(5));
  EXPECT_GT(delivered, 0);
  EXPECT_LT(delivered, 200);
  EXPECT_TRUE(link_->MayHoldMore()) << delivered << " of 200 read";
  for (int reads = 0; reads < 100 && delivered < 200; ++reads) {
    delivered += ProgressOnce(absl::ZeroDuration());
    if (delivered < 200) {
      EXPECT_TRUE(link_->MayHoldMore()) << delivered << " of 200 read";
    }
  }
  EXPECT_EQ(delivered, 200);
  EXPECT_FALSE(link_->MayHoldMore());
  EXPECT_EQ(ProgressOnce(absl::ZeroDuration()), 0);
}

// Another reader of the shared endpoint (the host algorithms' channels
// progress it too) takes the link's packets into its queue pairs: the
// link's next Progress hands them over without first waiting for more.
TEST_F(SoftLeafLinkTest, DeliversWhatAnotherReaderTookWithoutWaiting) {
  ASSERT_NO_FATAL_FAILURE(SwitchSends(1));
  // Waits for the packet and dispatches it to the link's RC queue pair;
  // then its ACK leaves (no timer of the link's is left to end a wait).
  ASSERT_EQ(rank_->Progress(absl::Seconds(5)), 1u);
  const absl::Time acked = absl::Now() + absl::Seconds(5);
  while (qp_->num_outstanding() > 0 && absl::Now() < acked) {
    rank_->Progress(absl::Milliseconds(1));
    switch_->Progress(absl::ZeroDuration());
  }
  ASSERT_EQ(qp_->num_outstanding(), 0u) << "the rank's ACK did not reach the switch";
  const absl::Time start = absl::Now();
  EXPECT_EQ(ProgressOnce(absl::Seconds(5)), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "waited with a message in hand";
}

// The same for a multicast result (the case that stalled torch's calls:
// docs/performance.md, "Results another reader took"): read by another
// reader into the link's UD queue pair, delivered without a wait.
TEST_F(SoftLeafLinkTest, DeliversAMulticastResultAnotherReaderTookWithoutWaiting) {
  const transport::Ipv4Endpoint group{
      0xef4f0000u | ((static_cast<uint32_t>(getpid()) * 7 + 9) & 0xffff), switch_->local().port};
  ASSERT_TRUE(link_->AttachMulticast(group, switch_->local()).ok());
  auto ud = switch_->CreateUdQp({.qkey = 0x11});
  ASSERT_TRUE(ud.ok()) << ud.status();
  ASSERT_TRUE((*ud)->PostSend(group, transport::kMulticastQpn, 0x11,
                              std::vector<uint8_t>(64, 7)).ok());
  switch_->Progress(absl::ZeroDuration());
  ASSERT_EQ(rank_->Progress(absl::Seconds(5)), 1u);
  const absl::Time start = absl::Now();
  EXPECT_EQ(ProgressOnce(absl::Seconds(5)), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "waited with a result in hand";
}

}  // namespace
}  // namespace netfold::host
