#include "proto/roce_headers.h"

namespace netfold::proto {

std::string_view BthOpcodeName(BthOpcode op) {
  switch (op) {
    case BthOpcode::kRcSendFirst:
      return "RC_SEND_FIRST";
    case BthOpcode::kRcSendMiddle:
      return "RC_SEND_MIDDLE";
    case BthOpcode::kRcSendLast:
      return "RC_SEND_LAST";
    case BthOpcode::kRcSendLastWithImmediate:
      return "RC_SEND_LAST_WITH_IMMEDIATE";
    case BthOpcode::kRcSendOnly:
      return "RC_SEND_ONLY";
    case BthOpcode::kRcSendOnlyWithImmediate:
      return "RC_SEND_ONLY_WITH_IMMEDIATE";
    case BthOpcode::kRcAcknowledge:
      return "RC_ACKNOWLEDGE";
    case BthOpcode::kUdSendOnly:
      return "UD_SEND_ONLY";
    case BthOpcode::kUdSendOnlyWithImmediate:
      return "UD_SEND_ONLY_WITH_IMMEDIATE";
  }
  return "UNKNOWN";
}

std::string_view AethTypeName(AethType type) {
  switch (type) {
    case AethType::kAck:
      return "ack";
    case AethType::kRnrNak:
      return "rnr_nak";
    case AethType::kReserved:
      return "reserved";
    case AethType::kNak:
      return "nak";
  }
  return "unknown";
}

std::string_view NakCodeName(NakCode code) {
  switch (code) {
    case NakCode::kPsnSequenceError:
      return "psn_sequence_error";
    case NakCode::kInvalidRequest:
      return "invalid_request";
    case NakCode::kRemoteAccessError:
      return "remote_access_error";
    case NakCode::kRemoteOperationalError:
      return "remote_operational_error";
    case NakCode::kInvalidRdRequest:
      return "invalid_rd_request";
  }
  return "unknown";
}

BthWire EncodeBth(const Bth& bth) {
  BthWire wire{};
  wire.opcode = static_cast<uint8_t>(bth.opcode);
  wire.se_m_pad_tver = static_cast<uint8_t>((bth.solicited_event ? 0x80 : 0) |
                                            (bth.mig_req ? 0x40 : 0) |
                                            ((bth.pad_count & 0x3) << 4) |
                                            (bth.transport_version & 0xF));
  wire.pkey.set(bth.pkey);
  wire.fecn_becn_resv6 = static_cast<uint8_t>((bth.fecn ? 0x80 : 0) | (bth.becn ? 0x40 : 0));
  wire.dest_qp.set(bth.dest_qp);
  wire.ack_req_resv7 = bth.ack_req ? 0x80 : 0;
  wire.psn.set(bth.psn);
  return wire;
}

Bth DecodeBth(const BthWire& wire) {
  Bth bth;
  bth.opcode = static_cast<BthOpcode>(wire.opcode);
  bth.solicited_event = (wire.se_m_pad_tver & 0x80) != 0;
  bth.mig_req = (wire.se_m_pad_tver & 0x40) != 0;
  bth.pad_count = (wire.se_m_pad_tver >> 4) & 0x3;
  bth.transport_version = wire.se_m_pad_tver & 0xF;
  bth.pkey = wire.pkey.get();
  bth.fecn = (wire.fecn_becn_resv6 & 0x80) != 0;
  bth.becn = (wire.fecn_becn_resv6 & 0x40) != 0;
  bth.dest_qp = wire.dest_qp.get();
  bth.ack_req = (wire.ack_req_resv7 & 0x80) != 0;
  bth.psn = wire.psn.get();
  return bth;
}

DethWire EncodeDeth(const Deth& deth) {
  DethWire wire{};
  wire.qkey.set(deth.qkey);
  wire.reserved = 0;
  wire.src_qp.set(deth.src_qp);
  return wire;
}

Deth DecodeDeth(const DethWire& wire) { return Deth{wire.qkey.get(), wire.src_qp.get()}; }

AethWire EncodeAeth(const Aeth& aeth) {
  AethWire wire{};
  wire.syndrome = aeth.syndrome;
  wire.msn.set(aeth.msn);
  return wire;
}

Aeth DecodeAeth(const AethWire& wire) { return Aeth{wire.syndrome, wire.msn.get()}; }

ImmDtWire EncodeImmDt(uint32_t imm) {
  ImmDtWire wire{};
  wire.imm.set(imm);
  return wire;
}

uint32_t DecodeImmDt(const ImmDtWire& wire) { return wire.imm.get(); }

}  // namespace netfold::proto
