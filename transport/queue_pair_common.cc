#include "transport/queue_pair_common.h"

namespace netfold::transport {

std::string_view QpStateName(QpState state) {
  switch (state) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kError: return "ERROR";
  }
  return "INVALID";
}

bool PkeyMatches(uint16_t a, uint16_t b) {
  if ((a & 0x7fff) == 0 || (b & 0x7fff) == 0) return false;
  return (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000) != 0;
}

absl::Duration RnrTimerDelay(uint8_t code) {
  // IBTA Vol. 1, table 45, in units of 10 microseconds.
  static constexpr uint32_t kTensOfMicros[32] = {
      65536, 1,    2,    3,    4,    6,    8,    12,   16,   24,   32,
      48,    64,   96,   128,  192,  256,  384,  512,  768,  1024, 1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return absl::Microseconds(10) * kTensOfMicros[code & 0x1f];
}

std::string_view QpDropReasonName(QpDropReason reason) {
  switch (reason) {
    case QpDropReason::kUnknownQp: return "unknown_qp";
    case QpDropReason::kWrongPkey: return "wrong_pkey";
    case QpDropReason::kWrongQkey: return "wrong_qkey";
    case QpDropReason::kWrongTransport: return "wrong_transport";
    case QpDropReason::kWrongSource: return "wrong_source";
    case QpDropReason::kBadState: return "bad_state";
    case QpDropReason::kOutOfSequence: return "out_of_sequence";
    case QpDropReason::kDuplicate: return "duplicate";
    case QpDropReason::kBadOpcodeSequence: return "bad_opcode_sequence";
    case QpDropReason::kUnsupportedOpcode: return "unsupported_opcode";
    case QpDropReason::kBadLength: return "bad_length";
    case QpDropReason::kReceiveQueueFull: return "receive_queue_full";
    case QpDropReason::kUnexpectedAck: return "unexpected_ack";
    case QpDropReason::kNoBuffer: return "no_buffer";
    case QpDropReason::kNumReasons: break;
  }
  return "invalid";
}

uint64_t QpDropCounters::Total() const {
  uint64_t total = 0;
  for (const auto& c : by_reason) total += c.load(std::memory_order_relaxed);
  return total;
}

void QpDropCounters::AddTo(QpDropCounters& into) const {
  for (size_t r = 0; r < by_reason.size(); ++r) {
    into.by_reason[r].fetch_add(by_reason[r].load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
  }
}

}  // namespace netfold::transport
