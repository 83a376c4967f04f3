// RoCEv2 transport headers (InfiniBand Architecture Specification, Vol. 1,
// chapter 9 "Transport layer"): the opcodes netfold uses, the Base Transport
// Header (BTH), the Datagram (DETH) and ACK (AETH) extended transport headers
// and the immediate data (ImmDt), each as a packed big-endian wire struct and
// as a host-order view.
//
//   Bth bth;
//   bth.opcode = BthOpcode::kRcSendOnly;
//   bth.dest_qp = 0x000123;
//   bth.psn = 42;
//   bth.ack_req = true;
//   BthWire wire = EncodeBth(bth);            // 12 bytes, network order
//   Bth back = DecodeBth(wire);               // == bth
//
//   Aeth nak = MakeNak(/*msn=*/7, NakCode::kPsnSequenceError);
//   if (GetAethType(nak) == AethType::kNak) ...
//
// Whole packets (headers + payload + pad + ICRC) are built and parsed by
// proto/roce_packet.h; this file only knows single headers. Every function is
// pure and thread-safe; the structs are plain values.
#ifndef NETFOLD_PROTO_ROCE_HEADERS_H_
#define NETFOLD_PROTO_ROCE_HEADERS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/big_endian.h"

namespace netfold::proto {

// The UDP destination port of RoCEv2 (IANA).
inline constexpr uint16_t kRoceUdpPort = 4791;

// The default (full-membership) partition key.
inline constexpr uint16_t kDefaultPkey = 0xFFFF;

// Sizes on the wire, in bytes.
inline constexpr size_t kBthSize = 12;
inline constexpr size_t kDethSize = 8;
inline constexpr size_t kAethSize = 4;
inline constexpr size_t kImmDtSize = 4;
inline constexpr size_t kIcrcSize = 4;

// The BTH opcodes netfold sends and accepts: the upper three bits are the
// transport (000 RC, 011 UD), the lower five the operation. Any other opcode
// (RDMA WRITE/READ, atomics, UC, RD, CNP) is rejected by ParseRocePacket.
enum class BthOpcode : uint8_t {
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastWithImmediate = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyWithImmediate = 0x05,
  kRcAcknowledge = 0x11,
  kUdSendOnly = 0x64,
  kUdSendOnlyWithImmediate = 0x65,
};

// True if `code` is one of the BthOpcode values above.
constexpr bool IsSupportedBthOpcode(uint8_t code) {
  return code <= 0x05 || code == 0x11 || code == 0x64 || code == 0x65;
}

// Transport and position of an opcode. For an unsupported value every
// predicate returns false (except the transport bits of IsRc/IsUd, which
// only look at the upper three bits).
constexpr bool OpcodeIsRc(BthOpcode op) { return (static_cast<uint8_t>(op) & 0xE0) == 0x00; }
constexpr bool OpcodeIsUd(BthOpcode op) { return (static_cast<uint8_t>(op) & 0xE0) == 0x60; }
// A packet that opens a multi-packet message (SEND_FIRST).
constexpr bool OpcodeIsFirst(BthOpcode op) { return op == BthOpcode::kRcSendFirst; }
// A packet inside a multi-packet message (SEND_MIDDLE).
constexpr bool OpcodeIsMiddle(BthOpcode op) { return op == BthOpcode::kRcSendMiddle; }
// A packet that closes a multi-packet message (SEND_LAST[_WITH_IMMEDIATE]).
constexpr bool OpcodeIsLast(BthOpcode op) {
  return op == BthOpcode::kRcSendLast || op == BthOpcode::kRcSendLastWithImmediate;
}
// A single-packet message (RC or UD SEND_ONLY[_WITH_IMMEDIATE]).
constexpr bool OpcodeIsOnly(BthOpcode op) {
  return op == BthOpcode::kRcSendOnly || op == BthOpcode::kRcSendOnlyWithImmediate ||
         op == BthOpcode::kUdSendOnly || op == BthOpcode::kUdSendOnlyWithImmediate;
}
// A SEND of any kind (carries message payload; consumes a receive).
constexpr bool OpcodeIsSend(BthOpcode op) {
  return OpcodeIsFirst(op) || OpcodeIsMiddle(op) || OpcodeIsLast(op) || OpcodeIsOnly(op);
}
// Which extended headers follow the BTH, in this order: DETH, AETH, ImmDt.
constexpr bool OpcodeHasDeth(BthOpcode op) {
  return op == BthOpcode::kUdSendOnly || op == BthOpcode::kUdSendOnlyWithImmediate;
}
constexpr bool OpcodeHasAeth(BthOpcode op) { return op == BthOpcode::kRcAcknowledge; }
constexpr bool OpcodeHasImm(BthOpcode op) {
  return op == BthOpcode::kRcSendLastWithImmediate ||
         op == BthOpcode::kRcSendOnlyWithImmediate ||
         op == BthOpcode::kUdSendOnlyWithImmediate;
}

// Bytes of BTH plus the extended headers of `op`; 0 for an unsupported value.
constexpr size_t RoceHeadersSize(BthOpcode op) {
  if (!IsSupportedBthOpcode(static_cast<uint8_t>(op))) return 0;
  return kBthSize + (OpcodeHasDeth(op) ? kDethSize : 0) + (OpcodeHasAeth(op) ? kAethSize : 0) +
         (OpcodeHasImm(op) ? kImmDtSize : 0);
}

// IBTA-style name ("RC_SEND_ONLY", "UD_SEND_ONLY_WITH_IMMEDIATE", ...), as
// scapy and Wireshark spell them; "UNKNOWN" for an unsupported value.
std::string_view BthOpcodeName(BthOpcode op);

// ---------------------------------------------------------------------------
// Host-order views. Fields wider than the wire field (24-bit QPs, PSN, MSN;
// 2-bit pad count; 4-bit version) are truncated by the Encode* functions;
// BuildRocePacket rejects such values instead.

// Base Transport Header. Reserved bits (resv6, resv7) are not represented:
// they are sent as 0 and ignored on receive, as IBTA prescribes.
struct Bth {
  BthOpcode opcode = BthOpcode::kRcSendOnly;
  bool solicited_event = false;   // SE
  bool mig_req = false;           // M
  uint8_t pad_count = 0;          // PadCnt, 0..3: pad bytes before the ICRC
  uint8_t transport_version = 0;  // TVer, 0..15: must be 0
  uint16_t pkey = kDefaultPkey;   // P_Key: the partition (netfold: the job's)
  bool fecn = false;              // forward ECN (masked out of the ICRC)
  bool becn = false;              // backward ECN (masked out of the ICRC)
  uint32_t dest_qp = 0;           // DestQP, 24 bits
  bool ack_req = false;           // A: the responder should ACK this packet
  uint32_t psn = 0;               // PSN, 24 bits

  friend bool operator==(const Bth&, const Bth&) = default;
};

// Datagram Extended Transport Header (UD only).
struct Deth {
  uint32_t qkey = 0;    // Q_Key (netfold: the job's secret)
  uint32_t src_qp = 0;  // SrcQP, 24 bits

  friend bool operator==(const Deth&, const Deth&) = default;
};

// ACK Extended Transport Header. The syndrome is bit 7 reserved (0), bits
// 6..5 the type (AethType) and bits 4..0 a value whose meaning depends on
// the type: credit count (ACK), timer code (RNR NAK) or NakCode (NAK).
struct Aeth {
  uint8_t syndrome = 0x1F;  // an ACK with kAethUnlimitedCredits
  uint32_t msn = 0;         // MSN, 24 bits: messages completed by the responder

  friend bool operator==(const Aeth&, const Aeth&) = default;
};

enum class AethType : uint8_t {
  kAck = 0,
  kRnrNak = 1,
  kReserved = 2,  // never valid on the wire
  kNak = 3,
};

enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

// ACK credit count 0x1F: "invalid", i.e. no end-to-end credits are
// advertised (the requester is not flow-controlled by credits).
inline constexpr uint8_t kAethUnlimitedCredits = 0x1F;

// Returns an ACK / RNR NAK / NAK AETH. `msn` keeps its low 24 bits; the
// 5-bit `credits` / `timer` keep their low 5 bits.
constexpr Aeth MakeAck(uint32_t msn, uint8_t credits = kAethUnlimitedCredits) {
  return Aeth{static_cast<uint8_t>(credits & 0x1F), msn & kMax24};
}
constexpr Aeth MakeRnrNak(uint32_t msn, uint8_t timer) {
  return Aeth{static_cast<uint8_t>(0x20 | (timer & 0x1F)), msn & kMax24};
}
constexpr Aeth MakeNak(uint32_t msn, NakCode code) {
  return Aeth{static_cast<uint8_t>(0x60 | static_cast<uint8_t>(code)), msn & kMax24};
}

// The type bits of the syndrome.
constexpr AethType GetAethType(const Aeth& aeth) {
  return static_cast<AethType>((aeth.syndrome >> 5) & 0x3);
}
// The low five bits: credit count, RNR timer or NAK code.
constexpr uint8_t GetAethValue(const Aeth& aeth) { return aeth.syndrome & 0x1F; }

// True for a syndrome netfold accepts: bit 7 clear, type not reserved, and
// for a NAK one of the five NakCode values.
constexpr bool IsValidAethSyndrome(uint8_t syndrome) {
  if (syndrome & 0x80) return false;
  const uint8_t type = (syndrome >> 5) & 0x3;
  if (type == static_cast<uint8_t>(AethType::kReserved)) return false;
  if (type == static_cast<uint8_t>(AethType::kNak)) {
    return (syndrome & 0x1F) <= static_cast<uint8_t>(NakCode::kInvalidRdRequest);
  }
  return true;
}

// "ack", "rnr_nak", "reserved", "nak"; "psn_sequence_error", ...; "unknown"
// for values outside the enums.
std::string_view AethTypeName(AethType type);
std::string_view NakCodeName(NakCode code);

// ---------------------------------------------------------------------------
// Wire structs: packed (alignment 1), big-endian, exactly the IBTA layout.
// Copy them from/to packet buffers with memcpy.

struct BthWire {
  uint8_t opcode;
  uint8_t se_m_pad_tver;  // SE(7) M(6) PadCnt(5..4) TVer(3..0)
  Be16 pkey;
  uint8_t fecn_becn_resv6;  // FECN(7) BECN(6) resv6(5..0)
  Be24 dest_qp;
  uint8_t ack_req_resv7;  // AckReq(7) resv7(6..0)
  Be24 psn;
};
static_assert(sizeof(BthWire) == kBthSize && alignof(BthWire) == 1);

struct DethWire {
  Be32 qkey;
  uint8_t reserved;
  Be24 src_qp;
};
static_assert(sizeof(DethWire) == kDethSize && alignof(DethWire) == 1);

struct AethWire {
  uint8_t syndrome;
  Be24 msn;
};
static_assert(sizeof(AethWire) == kAethSize && alignof(AethWire) == 1);

struct ImmDtWire {
  Be32 imm;
};
static_assert(sizeof(ImmDtWire) == kImmDtSize && alignof(ImmDtWire) == 1);

// The byte offset of FECN/BECN/resv6 in the BTH: the byte the ICRC masks.
inline constexpr size_t kBthFecnByteOffset = 4;

// Conversions between views and wire structs. Encoding writes reserved bits
// as 0 and truncates over-wide values; decoding ignores reserved bits. They
// never fail: validation belongs to ParseRocePacket/BuildRocePacket.
BthWire EncodeBth(const Bth& bth);
Bth DecodeBth(const BthWire& wire);
DethWire EncodeDeth(const Deth& deth);
Deth DecodeDeth(const DethWire& wire);
AethWire EncodeAeth(const Aeth& aeth);
Aeth DecodeAeth(const AethWire& wire);
// ImmDt is opaque 32-bit data; netfold treats it as a big-endian integer.
ImmDtWire EncodeImmDt(uint32_t imm);
uint32_t DecodeImmDt(const ImmDtWire& wire);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_ROCE_HEADERS_H_
