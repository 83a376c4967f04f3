#include "host/link/verbs_attributes.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::host {

absl::StatusOr<ibv_mtu> MtuFromBytes(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "path MTU %d is not one of 256, 512, 1024, 2048, 4096 bytes", bytes));
  }
}

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

namespace {
constexpr int64_t kTimeoutUnitNs = 4096;  // 4.096 us
}  // namespace

uint8_t AckTimeoutExponent(absl::Duration timeout) {
  const int64_t ns = absl::ToInt64Nanoseconds(timeout);
  for (uint8_t n = 1; n < 31; ++n) {
    if ((kTimeoutUnitNs << n) >= ns) return n;
  }
  return 31;
}

absl::Duration AckTimeoutOf(uint8_t exponent) {
  if (exponent == 0) return absl::InfiniteDuration();
  if (exponent > 31) exponent = 31;
  return absl::Nanoseconds(kTimeoutUnitNs << exponent);
}

QpTransition RcToInit(uint8_t port, uint16_t pkey_index) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = pkey_index;
  t.attr.port_num = port;
  t.attr.qp_access_flags = 0;  // SEND/RECV only: no RDMA READ/WRITE/atomics on our memory
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

QpTransition RcToRtr(const RcRtrParams& p) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTR;
  t.attr.path_mtu = p.path_mtu;
  t.attr.dest_qp_num = p.dest_qpn & 0xffffff;
  t.attr.rq_psn = p.rq_psn & 0xffffff;
  t.attr.max_dest_rd_atomic = 1;  // required in the mask; we grant no RDMA READ
  t.attr.min_rnr_timer = p.min_rnr_timer;
  t.attr.ah_attr.is_global = 1;
  t.attr.ah_attr.port_num = p.port;
  t.attr.ah_attr.dlid = 0;  // RoCE: no LIDs, the GRH routes
  t.attr.ah_attr.sl = 0;
  std::memcpy(t.attr.ah_attr.grh.dgid.raw, p.dgid.data(), p.dgid.size());
  t.attr.ah_attr.grh.sgid_index = p.sgid_index;
  t.attr.ah_attr.grh.hop_limit = p.hop_limit;
  t.attr.ah_attr.grh.traffic_class = p.traffic_class;
  t.attr.ah_attr.grh.flow_label = 0;
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition RcToRts(const RcRtsParams& p) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.sq_psn = p.sq_psn & 0xffffff;
  t.attr.timeout = p.timeout_exponent;
  t.attr.retry_cnt = p.retry_count > 7 ? 7 : p.retry_count;
  t.attr.rnr_retry = p.rnr_retry > 7 ? 7 : p.rnr_retry;
  t.attr.max_rd_atomic = 1;
  t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

QpTransition UdToInit(uint8_t port, uint16_t pkey_index, uint32_t qkey) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = pkey_index;
  t.attr.port_num = port;
  t.attr.qkey = qkey;
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
  return t;
}

QpTransition UdToRtr() {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTR;
  t.mask = IBV_QP_STATE;
  return t;
}

QpTransition UdToRts(uint32_t sq_psn) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.sq_psn = sq_psn & 0xffffff;
  t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  return t;
}

}  // namespace netfold::host
