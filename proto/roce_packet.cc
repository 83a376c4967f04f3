#include "proto/roce_packet.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "proto/big_endian.h"

namespace netfold::proto {
namespace {

// Checks that an extended header is present exactly when the opcode has it.
absl::Status CheckPresence(bool present, bool wanted, std::string_view header,
                           BthOpcode op) {
  if (present == wanted) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s %s %s", BthOpcodeName(op), wanted ? "needs" : "has no", header));
}

absl::Status CheckWidth24(uint32_t value, std::string_view field) {
  if (value <= kMax24) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s 0x%x does not fit in 24 bits", field, value));
}

// Writes headers, pad and ICRC around a payload already in place, or, with
// `part`, in place but for payload bytes [part_at, part_at + part.size()),
// which are read from `part`.
size_t WriteAroundPayload(const RocePacketSpec& spec, size_t payload_size,
                          const IcrcAddresses& addrs, std::span<uint8_t> packet,
                          size_t part_at = 0, std::span<const uint8_t> part = {}) {
  const BthOpcode op = spec.bth.opcode;
  const uint8_t pad = RocePadCount(payload_size);
  uint8_t* p = packet.data();

  Bth bth = spec.bth;
  bth.pad_count = pad;
  const BthWire bth_wire = EncodeBth(bth);
  std::memcpy(p, &bth_wire, sizeof(bth_wire));
  p += sizeof(bth_wire);
  if (OpcodeHasDeth(op)) {
    const DethWire wire = EncodeDeth(*spec.deth);
    std::memcpy(p, &wire, sizeof(wire));
    p += sizeof(wire);
  }
  if (OpcodeHasAeth(op)) {
    const AethWire wire = EncodeAeth(*spec.aeth);
    std::memcpy(p, &wire, sizeof(wire));
    p += sizeof(wire);
  }
  if (OpcodeHasImm(op)) {
    const ImmDtWire wire = EncodeImmDt(*spec.imm);
    std::memcpy(p, &wire, sizeof(wire));
    p += sizeof(wire);
  }
  p += payload_size;
  std::memset(p, 0, pad);
  p += pad;

  const size_t covered = static_cast<size_t>(p - packet.data());
  const uint32_t icrc =
      part.empty() ? ComputeIcrc(addrs, packet.first(covered))
                   : ComputeIcrcWithPart(addrs, packet.first(covered),
                                         RoceHeadersSize(op) + part_at, part);
  StoreIcrc(icrc, packet.subspan(covered).first<kIcrcSize>());
  return covered + kIcrcSize;
}

// Everything after the ICRC check: the structure of the packet.
RoceParseResult ParseStructure(std::span<const uint8_t> udp_payload, RocePacketView* out) {
  BthWire bth_wire;
  std::memcpy(&bth_wire, udp_payload.data(), sizeof(bth_wire));
  const Bth bth = DecodeBth(bth_wire);
  if (bth.transport_version != 0) return RoceParseResult::kBadTransportVersion;
  if (!IsSupportedBthOpcode(bth_wire.opcode)) return RoceParseResult::kUnknownOpcode;
  const BthOpcode op = bth.opcode;

  const size_t headers = RoceHeadersSize(op);
  if (udp_payload.size() < headers + kIcrcSize) return RoceParseResult::kTruncated;
  if (udp_payload.size() % 4 != 0) return RoceParseResult::kBadLength;

  // Payload and pad together; a multiple of 4 since the headers are.
  const size_t data_size = udp_payload.size() - headers - kIcrcSize;
  if (OpcodeHasAeth(op)) {
    if (bth.pad_count != 0) return RoceParseResult::kBadPadCount;
    if (data_size != 0) return RoceParseResult::kBadLength;
  }
  if (OpcodeIsFirst(op) || OpcodeIsMiddle(op)) {
    if (bth.pad_count != 0) return RoceParseResult::kBadPadCount;
    if (data_size == 0) return RoceParseResult::kBadLength;
  }
  if (bth.pad_count > 0 && data_size == 0) return RoceParseResult::kBadPadCount;

  out->bth = bth;
  out->deth.reset();
  out->aeth.reset();
  out->imm.reset();
  const uint8_t* p = udp_payload.data() + kBthSize;
  if (OpcodeHasDeth(op)) {
    DethWire wire;
    std::memcpy(&wire, p, sizeof(wire));
    out->deth = DecodeDeth(wire);
    p += sizeof(wire);
  }
  if (OpcodeHasAeth(op)) {
    AethWire wire;
    std::memcpy(&wire, p, sizeof(wire));
    if (!IsValidAethSyndrome(wire.syndrome)) return RoceParseResult::kBadAeth;
    out->aeth = DecodeAeth(wire);
    p += sizeof(wire);
  }
  if (OpcodeHasImm(op)) {
    ImmDtWire wire;
    std::memcpy(&wire, p, sizeof(wire));
    out->imm = DecodeImmDt(wire);
    p += sizeof(wire);
  }
  out->payload = udp_payload.subspan(headers, data_size - bth.pad_count);
  out->icrc = LoadIcrc(udp_payload.last<kIcrcSize>());
  return RoceParseResult::kOk;
}

}  // namespace

absl::Status ValidateRocePacketSpec(const RocePacketSpec& spec, size_t payload_size) {
  const Bth& bth = spec.bth;
  const BthOpcode op = bth.opcode;
  if (!IsSupportedBthOpcode(static_cast<uint8_t>(op))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unsupported BTH opcode 0x%02x", static_cast<unsigned>(op)));
  }
  if (bth.transport_version != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BTH transport version %d, only 0 exists", bth.transport_version));
  }
  if (absl::Status s = CheckWidth24(bth.dest_qp, "dest QP"); !s.ok()) return s;
  if (absl::Status s = CheckWidth24(bth.psn, "PSN"); !s.ok()) return s;
  if (absl::Status s = CheckPresence(spec.deth.has_value(), OpcodeHasDeth(op), "DETH", op);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPresence(spec.aeth.has_value(), OpcodeHasAeth(op), "AETH", op);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckPresence(spec.imm.has_value(), OpcodeHasImm(op), "immediate data", op);
      !s.ok()) {
    return s;
  }
  if (spec.deth.has_value()) {
    if (absl::Status s = CheckWidth24(spec.deth->src_qp, "source QP"); !s.ok()) return s;
  }
  if (spec.aeth.has_value()) {
    if (absl::Status s = CheckWidth24(spec.aeth->msn, "MSN"); !s.ok()) return s;
    if (!IsValidAethSyndrome(spec.aeth->syndrome)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("invalid AETH syndrome 0x%02x", spec.aeth->syndrome));
    }
    if (payload_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("an ACK carries no payload, got %d bytes", payload_size));
    }
  }
  if ((OpcodeIsFirst(op) || OpcodeIsMiddle(op)) &&
      (payload_size == 0 || payload_size % 4 != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s needs a non-empty payload that is a multiple of 4 bytes, got %d bytes",
        BthOpcodeName(op), payload_size));
  }
  if (payload_size > kMaxRoceUdpPayload ||
      RocePacketSize(op, payload_size) > kMaxRoceUdpPayload) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a %d-byte payload does not fit in one UDP datagram", payload_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> FinishRocePacketInPlace(const RocePacketSpec& spec, size_t payload_size,
                                               const IcrcAddresses& addrs,
                                               std::span<uint8_t> packet) {
  return FinishRocePacketAroundPart(spec, payload_size, addrs, packet, 0, {});
}

absl::StatusOr<size_t> FinishRocePacketAroundPart(const RocePacketSpec& spec,
                                                  size_t payload_size,
                                                  const IcrcAddresses& addrs,
                                                  std::span<uint8_t> packet, size_t part_at,
                                                  std::span<const uint8_t> part) {
  if (absl::Status s = ValidateRocePacketSpec(spec, payload_size); !s.ok()) return s;
  const size_t size = RocePacketSize(spec.bth.opcode, payload_size);
  if (packet.size() < size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "buffer holds %d bytes, the %s packet needs %d", packet.size(),
        BthOpcodeName(spec.bth.opcode), size));
  }
  if (part_at > payload_size || part.size() > payload_size - part_at) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a part of %d bytes at %d is not inside a %d-byte payload", part.size(), part_at,
        payload_size));
  }
  return WriteAroundPayload(spec, payload_size, addrs, packet, part_at, part);
}

absl::StatusOr<size_t> BuildRocePacket(const RocePacketSpec& spec,
                                       std::span<const uint8_t> payload,
                                       const IcrcAddresses& addrs, std::span<uint8_t> out) {
  if (absl::Status s = ValidateRocePacketSpec(spec, payload.size()); !s.ok()) return s;
  const size_t size = RocePacketSize(spec.bth.opcode, payload.size());
  if (out.size() < size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "buffer holds %d bytes, the %s packet needs %d", out.size(),
        BthOpcodeName(spec.bth.opcode), size));
  }
  if (!payload.empty()) {
    std::memmove(out.data() + RoceHeadersSize(spec.bth.opcode), payload.data(), payload.size());
  }
  return WriteAroundPayload(spec, payload.size(), addrs, out);
}

absl::Status RewriteIcrc(const IcrcAddresses& addrs, std::span<uint8_t> udp_payload) {
  if (udp_payload.size() < kBthSize + kIcrcSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a %d-byte buffer is no RoCE packet", udp_payload.size()));
  }
  const size_t covered = udp_payload.size() - kIcrcSize;
  StoreIcrc(ComputeIcrc(addrs, udp_payload.first(covered)), udp_payload.last<kIcrcSize>());
  return absl::OkStatus();
}

std::string_view RoceParseResultName(RoceParseResult result) {
  switch (result) {
    case RoceParseResult::kOk:
      return "ok";
    case RoceParseResult::kTruncated:
      return "truncated";
    case RoceParseResult::kBadIcrc:
      return "bad_icrc";
    case RoceParseResult::kBadTransportVersion:
      return "bad_transport_version";
    case RoceParseResult::kUnknownOpcode:
      return "unknown_opcode";
    case RoceParseResult::kBadLength:
      return "bad_length";
    case RoceParseResult::kBadPadCount:
      return "bad_pad_count";
    case RoceParseResult::kBadAeth:
      return "bad_aeth";
  }
  return "invalid";
}

RoceParseResult ParseRocePacket(std::span<const uint8_t> udp_payload,
                                const IcrcAddresses* addrs, RocePacketView* out) {
  if (udp_payload.size() < kBthSize + kIcrcSize) return RoceParseResult::kTruncated;
  if (addrs != nullptr) {
    const size_t covered = udp_payload.size() - kIcrcSize;
    if (ComputeIcrc(*addrs, udp_payload.first(covered)) !=
        LoadIcrc(udp_payload.last<kIcrcSize>())) {
      return RoceParseResult::kBadIcrc;
    }
  }
  return ParseStructure(udp_payload, out);
}

RoceParseResult ParseRocePacketIpv4(std::span<const uint8_t, kIpv4HeaderSize> ipv4_header,
                                    std::span<const uint8_t, kUdpHeaderSize> udp_header,
                                    std::span<const uint8_t> udp_payload, RocePacketView* out) {
  if (udp_payload.size() < kBthSize + kIcrcSize) return RoceParseResult::kTruncated;
  const size_t covered = udp_payload.size() - kIcrcSize;
  if (ComputeIcrcIpv4(ipv4_header, udp_header, udp_payload.first(covered)) !=
      LoadIcrc(udp_payload.last<kIcrcSize>())) {
    return RoceParseResult::kBadIcrc;
  }
  return ParseStructure(udp_payload, out);
}

absl::StatusOr<RocePacketView> DecodeRocePacket(std::span<const uint8_t> udp_payload,
                                                const IcrcAddresses* addrs) {
  RocePacketView view;
  const RoceParseResult result = ParseRocePacket(udp_payload, addrs, &view);
  if (result == RoceParseResult::kOk) return view;
  const std::string message =
      absl::StrFormat("RoCE packet of %d bytes dropped: %s", udp_payload.size(),
                      RoceParseResultName(result));
  if (result == RoceParseResult::kBadIcrc) return absl::DataLossError(message);
  return absl::InvalidArgumentError(message);
}

}  // namespace netfold::proto
