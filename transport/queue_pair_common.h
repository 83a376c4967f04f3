// What RC and UD queue pairs share: states, the packet sink they emit into,
// P_Key matching, the RNR timer table, and drop reasons.
#ifndef NETFOLD_TRANSPORT_QUEUE_PAIR_COMMON_H_
#define NETFOLD_TRANSPORT_QUEUE_PAIR_COMMON_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "base/counter.h"
#include "transport/packet_pool.h"

namespace netfold::transport {

// The verbs QP states netfold implements (no SQD/SQE).
enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kError };
std::string_view QpStateName(QpState state);

// Special QPNs: 0 and 1 are IB's SMI/GSI, 0xFFFFFF addresses a multicast
// group. Netfold never assigns them to a QP.
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;
inline constexpr uint32_t kFirstAssignableQpn = 2;

// IBTA P_Key matching: the low 15 bits are equal and at least one side is a
// full member (bit 15). 0x0000 and 0x8000 are invalid and match nothing.
bool PkeyMatches(uint16_t a, uint16_t b);

// The IBTA RNR NAK timer: the 5-bit code's minimum delay (code 0 is
// 655.36 ms; 1..31 go from 0.01 ms to 491.52 ms).
absl::Duration RnrTimerDelay(uint8_t code);

// Why a queue pair or endpoint dropped a packet. The values index counter
// arrays and never change meaning.
enum class QpDropReason : uint8_t {
  kUnknownQp = 0,       // no QP with the packet's destination QPN
  kWrongPkey,           // P_Key does not match the QP's
  kWrongQkey,           // UD: Q_Key does not match the QP's
  kWrongTransport,      // UD opcode to an RC QP or the reverse
  kWrongSource,         // RC: not from the connected peer's address and bound source port;
                        // UD with filter_sources: not from the destination's allowed source
  kBadState,            // the QP is not in a state that receives (RESET, INIT, ERROR)
  kOutOfSequence,       // RC: PSN ahead of the expected PSN (a NAK was sent)
  kDuplicate,           // RC: PSN already received (re-ACKed)
  kBadOpcodeSequence,   // RC: e.g. MIDDLE without FIRST (NAK invalid request)
  kBadLength,           // payload longer than the MTU or the message limit
  kReceiveQueueFull,    // RC: RNR NAK sent; UD: dropped
  kUnexpectedAck,       // ACK/NAK for a PSN that was never sent, or stale
  kNoBuffer,            // no packet buffer to build a reply
  kUnsupportedOpcode,   // RC: a request netfold does not implement, e.g. RDMA WRITE
                        // (dropped unanswered; the QP stays up)
  kNumReasons
};
inline constexpr size_t kNumQpDropReasons = static_cast<size_t>(QpDropReason::kNumReasons);
std::string_view QpDropReasonName(QpDropReason reason);

// Drop counters indexed by QpDropReason; readable from any thread.
struct QpDropCounters {
  std::array<std::atomic<uint64_t>, kNumQpDropReasons> by_reason{};
  void Count(QpDropReason r) {
    BumpCounter(by_reason[static_cast<size_t>(r)]);
  }
  uint64_t Get(QpDropReason r) const {
    return by_reason[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
  uint64_t Total() const;
  // Adds every reason's count to `into`'s.
  void AddTo(QpDropCounters& into) const;
};

// Where a queue pair puts the packets it wants sent: buffers from `pool`,
// built in place, appended to `out`. The caller (the endpoint) sends them.
struct PacketSink {
  PacketPool* pool;
  std::vector<PacketBuffer*>* out;
  // The port takes packets with external bytes (Port::TakesExternalBytes):
  // a message sent from the caller's memory goes out without a copy.
  bool takes_external = false;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_QUEUE_PAIR_COMMON_H_
