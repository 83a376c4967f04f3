// The attributes of every verbs queue-pair transition the `verbs` leaf link
// makes, built as plain structs so that they are checked without a device:
// RC RESET -> INIT -> RTR -> RTS as libibverbs/examples/rc_pingpong.c does
// it with a global route (RoCE), and the UD QP for multicast results. Also
// the encodings verbs uses for the path MTU and the local ACK timeout.
//
//   QpTransition t = RcToRtr({.port = 1, .path_mtu = IBV_MTU_1024, ...});
//   ibv_modify_qp(qp, &t.attr, t.mask);
//
// Pure functions; thread-safe.
#ifndef NETFOLD_HOST_LINK_VERBS_ATTRIBUTES_H_
#define NETFOLD_HOST_LINK_VERBS_ATTRIBUTES_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/link/verbs_address.h"

namespace netfold::host {

// 256, 512, 1024, 2048, 4096 bytes <-> IBV_MTU_*. InvalidArgument for any
// other size.
absl::StatusOr<ibv_mtu> MtuFromBytes(uint32_t bytes);
// The size of `mtu` in bytes; 0 for a value outside the enum.
uint32_t MtuBytes(ibv_mtu mtu);

// The local ACK timeout exponent n of IBTA (a wait of 4.096 us x 2^n): the
// smallest n in 1..31 whose wait is at least `timeout` (31 if none is).
uint8_t AckTimeoutExponent(absl::Duration timeout);
// The wait an exponent stands for; n = 0 means "wait forever" in verbs and
// gives InfiniteDuration.
absl::Duration AckTimeoutOf(uint8_t exponent);

// One ibv_modify_qp call: the attributes and the mask naming the fields set.
struct QpTransition {
  ibv_qp_attr attr{};
  int mask = 0;
};

// RESET -> INIT for an RC QP that only sends and receives (no RDMA access).
QpTransition RcToInit(uint8_t port, uint16_t pkey_index);

struct RcRtrParams {
  uint8_t port = 1;
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint32_t dest_qpn = 0;  // the switch's QPN
  uint32_t rq_psn = 0;    // the switch's first PSN
  Gid dgid{};             // ::ffff:<the switch's IPv4>
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint8_t min_rnr_timer = 12;  // 0.64 ms, what netfold's switch asks for too
};
// INIT -> RTR toward the switch (RoCE: a global route, no LID).
QpTransition RcToRtr(const RcRtrParams& p);

struct RcRtsParams {
  uint32_t sq_psn = 0;
  uint8_t timeout_exponent = 14;  // 67 ms: the switch ACKs once per pass
  // 6, not 7: IBTA gives 7 no special meaning for transport retries, but
  // rdma_rxe treats it as "retry forever", so a dead switch would never be
  // reported (seen in the Soft-RoCE VM test).
  uint8_t retry_count = 6;
  uint8_t rnr_retry = 7;          // 7: retry forever on RNR NAKs
};
// RTR -> RTS.
QpTransition RcToRts(const RcRtsParams& p);

// The UD QP: RESET -> INIT (P_Key index, Q_Key), -> RTR, -> RTS.
QpTransition UdToInit(uint8_t port, uint16_t pkey_index, uint32_t qkey);
QpTransition UdToRtr();
QpTransition UdToRts(uint32_t sq_psn);

// Bytes before the payload in every UD receive buffer: the 40-byte GRH
// slot (for RoCEv2 over IPv4 the IPv4 header sits in its last 20 bytes).
inline constexpr size_t kUdReceivePrefix = 40;

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_ATTRIBUTES_H_
