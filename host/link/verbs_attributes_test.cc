#include "host/link/verbs_attributes.h"

#include <cstring>

#include "gtest/gtest.h"

namespace netfold::host {
namespace {

TEST(VerbsAttributes, MtuMapsBothWays) {
  for (uint32_t bytes : {256u, 512u, 1024u, 2048u, 4096u}) {
    absl::StatusOr<ibv_mtu> mtu = MtuFromBytes(bytes);
    ASSERT_TRUE(mtu.ok()) << bytes;
    EXPECT_EQ(MtuBytes(*mtu), bytes);
  }
  EXPECT_EQ(*MtuFromBytes(1024), IBV_MTU_1024);
  for (uint32_t bad : {0u, 1500u, 9000u, 8192u}) {
    EXPECT_EQ(MtuFromBytes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(MtuBytes(static_cast<ibv_mtu>(9)), 0u);
}

TEST(VerbsAttributes, AckTimeoutRoundsUpToTheNextExponent) {
  EXPECT_EQ(AckTimeoutExponent(absl::ZeroDuration()), 1);  // 0 would mean "forever"
  EXPECT_EQ(AckTimeoutExponent(absl::Nanoseconds(8192)), 1);
  EXPECT_EQ(AckTimeoutExponent(absl::Nanoseconds(8193)), 2);
  EXPECT_EQ(AckTimeoutExponent(absl::Milliseconds(4)), 10);   // 4.19 ms
  EXPECT_EQ(AckTimeoutExponent(absl::Milliseconds(67)), 14);  // 67.1 ms
  EXPECT_EQ(AckTimeoutExponent(absl::Hours(10)), 31);
  for (uint8_t n = 1; n <= 31; ++n) {
    EXPECT_EQ(AckTimeoutExponent(AckTimeoutOf(n)), n);
    EXPECT_GE(AckTimeoutOf(AckTimeoutExponent(absl::Microseconds(n * 997))),
              absl::Microseconds(n * 997));
  }
  EXPECT_EQ(AckTimeoutOf(0), absl::InfiniteDuration());
}

TEST(VerbsAttributes, RcInitGrantsNoRemoteAccess) {
  QpTransition t = RcToInit(2, 5);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(t.attr.port_num, 2);
  EXPECT_EQ(t.attr.pkey_index, 5);
  EXPECT_EQ(t.attr.qp_access_flags, 0u);
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

TEST(VerbsAttributes, RcRtrUsesAGlobalRouteToTheSwitch) {
  RcRtrParams p;
  p.port = 1;
  p.path_mtu = IBV_MTU_2048;
  p.dest_qpn = 0x1000123;  // 25 bits: the QPN is masked to 24
  p.rq_psn = 0xabcdef;
  p.dgid = Ipv4MappedGid(0x0a000063);
  p.sgid_index = 3;
  QpTransition t = RcToRtr(p);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(t.attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(t.attr.dest_qp_num, 0x000123u);
  EXPECT_EQ(t.attr.rq_psn, 0xabcdefu);
  EXPECT_EQ(t.attr.ah_attr.is_global, 1);
  EXPECT_EQ(t.attr.ah_attr.dlid, 0);
  EXPECT_EQ(t.attr.ah_attr.port_num, 1);
  EXPECT_EQ(t.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(t.attr.ah_attr.grh.hop_limit, 64);
  EXPECT_EQ(std::memcmp(t.attr.ah_attr.grh.dgid.raw, p.dgid.data(), 16), 0);
  EXPECT_EQ(t.attr.min_rnr_timer, 12);
  // Every attribute IBTA requires for INIT -> RTR on RC, and nothing else.
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

TEST(VerbsAttributes, RcRtsClampsRetriesToThreeBits) {
  QpTransition t = RcToRts({.sq_psn = 0x1ffffff, .timeout_exponent = 14, .retry_count = 9,
                            .rnr_retry = 7});
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(t.attr.sq_psn, 0xffffffu);
  EXPECT_EQ(t.attr.timeout, 14);
  EXPECT_EQ(t.attr.retry_cnt, 7);
  EXPECT_EQ(t.attr.rnr_retry, 7);
  EXPECT_EQ(RcToRts({}).attr.retry_cnt, 6);  // 7 means "forever" to rdma_rxe
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

TEST(VerbsAttributes, UdTransitionsCarryTheJobsQkey) {
  QpTransition init = UdToInit(1, 0, 0x1234567);
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.attr.qkey, 0x1234567u);
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  EXPECT_EQ(UdToRtr().mask, IBV_QP_STATE);
  QpTransition rts = UdToRts(7);
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, 7u);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

}  // namespace
}  // namespace netfold::host
