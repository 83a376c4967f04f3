// Whole RoCEv2 packets as they sit in a UDP payload (port 4791):
//
//   BTH (12) | DETH (8, UD) | AETH (4, ACK) | ImmDt (4, *_WITH_IMMEDIATE)
//   | payload | pad (0..3 zero bytes) | ICRC (4)
//
// Building:
//
//   RocePacketSpec spec;
//   spec.bth.opcode = BthOpcode::kUdSendOnly;
//   spec.bth.pkey = job_pkey;
//   spec.bth.dest_qp = 0xFFFFFF;  // multicast QP
//   spec.bth.psn = psn;
//   spec.deth = Deth{.qkey = job_qkey, .src_qp = my_qp};
//   absl::StatusOr<size_t> n = BuildRocePacket(spec, message, addrs, buffer);
//
//   // Zero-copy: write the payload at buffer[RoceHeadersSize(opcode)] first,
//   // then put headers, pad and ICRC around it.
//   absl::StatusOr<size_t> n = FinishRocePacketInPlace(spec, message_size, addrs, buffer);
//
// Parsing (on the data path, per packet; counts drops per reason):
//
//   RocePacketView view;
//   RoceParseResult r = ParseRocePacket(datagram, &addrs, &view);
//   if (r != RoceParseResult::kOk) { ++drops[static_cast<size_t>(r)]; continue; }
//   Handle(view.bth, view.payload);
//
// The builder pads the payload to a multiple of 4 bytes and sets BTH.PadCnt;
// it ignores spec.bth.pad_count. The parser takes untrusted bytes: it never
// reads outside its input, and returns kOk only for a packet the builder
// could have produced, up to what IBTA says receivers ignore (reserved
// bits, the values of pad bytes). Both are thread-safe and allocate nothing
// (the Status forms allocate their error message).
#ifndef NETFOLD_PROTO_ROCE_PACKET_H_
#define NETFOLD_PROTO_ROCE_PACKET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/icrc.h"
#include "proto/roce_headers.h"

namespace netfold::proto {

// What to put in the headers of one packet. An extended header must be
// present exactly when the opcode has it (OpcodeHasDeth/HasAeth/HasImm).
struct RocePacketSpec {
  Bth bth;                      // pad_count is ignored: the builder sets it
  std::optional<Deth> deth;     // UD opcodes
  std::optional<Aeth> aeth;     // RC ACKNOWLEDGE
  std::optional<uint32_t> imm;  // *_WITH_IMMEDIATE opcodes
};

// Pad bytes after a payload of `payload_size` bytes: (4 - size % 4) % 4.
constexpr uint8_t RocePadCount(size_t payload_size) {
  return static_cast<uint8_t>((4 - payload_size % 4) % 4);
}

// Bytes of the whole packet (headers, payload, pad, ICRC) for `op` and a
// payload of `payload_size` bytes; 0 for an unsupported opcode.
constexpr size_t RocePacketSize(BthOpcode op, size_t payload_size) {
  const size_t headers = RoceHeadersSize(op);
  if (headers == 0) return 0;
  return headers + payload_size + RocePadCount(payload_size) + kIcrcSize;
}

// Checks `spec` for a payload of `payload_size` bytes. Returns OK, or
// InvalidArgument saying why:
//   - unsupported opcode, transport_version != 0, dest_qp/psn/src_qp/msn
//     wider than 24 bits;
//   - an extended header missing for the opcode, or present when the opcode
//     has none;
//   - an AETH syndrome that fails IsValidAethSyndrome;
//   - an ACK with a payload; a SEND_FIRST/MIDDLE whose payload is empty or
//     not a multiple of 4 bytes (those packets carry a full path MTU);
//   - a packet longer than kMaxRoceUdpPayload.
absl::Status ValidateRocePacketSpec(const RocePacketSpec& spec, size_t payload_size);

// Writes the packet for `spec` carrying `payload` into `out`, with its ICRC
// computed over the canonical headers of `addrs`. `payload` may overlap
// `out`. Returns the bytes written (RocePacketSize), InvalidArgument if
// ValidateRocePacketSpec fails, or OutOfRange if `out` is smaller than the
// packet. On error `out` may have been partly written. The caller owns both
// buffers; nothing is retained.
absl::StatusOr<size_t> BuildRocePacket(const RocePacketSpec& spec,
                                       std::span<const uint8_t> payload,
                                       const IcrcAddresses& addrs, std::span<uint8_t> out);

// The in-place form of BuildRocePacket, for building a message without
// copying it twice: the caller has already written the `payload_size` bytes
// of payload at packet[RoceHeadersSize(spec.bth.opcode)]; this writes the
// headers before it and the pad and ICRC after it. Same results as
// BuildRocePacket; `packet` must hold RocePacketSize(...) bytes.
absl::StatusOr<size_t> FinishRocePacketInPlace(const RocePacketSpec& spec, size_t payload_size,
                                               const IcrcAddresses& addrs,
                                               std::span<uint8_t> packet);

// FinishRocePacketInPlace for a payload of which bytes [part_at, part_at +
// part.size()) are not in `packet` but in `part` (a sender that sends them
// from where they are: PacketBuffer::external, transport/packet_pool.h):
// the ICRC covers `part` there; the rest of the payload is in place as for
// FinishRocePacketInPlace, and what `packet` holds where the part goes is
// neither read nor written. The packet's bytes on the wire are then
// `packet` with `part` in that place. InvalidArgument also for a part
// outside the payload. An empty part is FinishRocePacketInPlace.
absl::StatusOr<size_t> FinishRocePacketAroundPart(const RocePacketSpec& spec,
                                                  size_t payload_size,
                                                  const IcrcAddresses& addrs,
                                                  std::span<uint8_t> packet, size_t part_at,
                                                  std::span<const uint8_t> part);

// Recomputes the ICRC that ends `udp_payload` (a whole packet, e.g. after
// the caller rewrote a header field of a stored packet for retransmission).
// Returns InvalidArgument if it is shorter than kBthSize + kIcrcSize.
absl::Status RewriteIcrc(const IcrcAddresses& addrs, std::span<uint8_t> udp_payload);

// Why a packet was dropped; kOk if it was not. The values index counter
// arrays of size kNumRoceParseResults and never change meaning.
enum class RoceParseResult : uint8_t {
  kOk = 0,
  kTruncated,            // shorter than BTH + ICRC, or than the opcode's headers
  kBadIcrc,              // the ICRC does not match (checked before anything else)
  kBadTransportVersion,  // BTH.TVer != 0
  kUnknownOpcode,        // not a BthOpcode (RDMA READ/WRITE, UC, RD, CNP, ...)
  kBadLength,            // not a multiple of 4 bytes; ACK with payload; empty FIRST/MIDDLE
  kBadPadCount,          // pad count on FIRST/MIDDLE/ACK, or more pad than payload
  kBadAeth,              // the AETH syndrome fails IsValidAethSyndrome
};
inline constexpr size_t kNumRoceParseResults = 8;

// "ok", "truncated", "bad_icrc", "bad_transport_version", "unknown_opcode",
// "bad_length", "bad_pad_count", "bad_aeth"; "invalid" for other values.
std::string_view RoceParseResultName(RoceParseResult result);

// A decoded packet. `payload` points into the buffer given to the parser
// (without pad and ICRC) and is valid as long as that buffer is.
struct RocePacketView {
  Bth bth;
  std::optional<Deth> deth;
  std::optional<Aeth> aeth;
  std::optional<uint32_t> imm;
  std::span<const uint8_t> payload;
  uint32_t icrc = 0;  // the ICRC the packet carries (checked or not)
};

// Parses the UDP payload of one datagram. If `addrs` is not null the ICRC
// is checked against the canonical headers of `addrs`; if it is null the
// ICRC is not checked (e.g. a backend whose NIC checked it). On kOk fills
// `*out` (not null); on any other result `*out` is unspecified.
RoceParseResult ParseRocePacket(std::span<const uint8_t> udp_payload,
                                const IcrcAddresses* addrs, RocePacketView* out);

// As ParseRocePacket with the ICRC checked against the packet's real IPv4
// and UDP headers (ComputeIcrcIpv4), for backends that see whole frames.
RoceParseResult ParseRocePacketIpv4(std::span<const uint8_t, kIpv4HeaderSize> ipv4_header,
                                    std::span<const uint8_t, kUdpHeaderSize> udp_header,
                                    std::span<const uint8_t> udp_payload, RocePacketView* out);

// Status form of ParseRocePacket for control paths and tests: the view
// (its payload points into `udp_payload`, as above), or
// DataLoss (kBadIcrc) / InvalidArgument (any other reason) whose message
// names the reason as RoceParseResultName does.
absl::StatusOr<RocePacketView> DecodeRocePacket(std::span<const uint8_t> udp_payload,
                                                const IcrcAddresses* addrs);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_ROCE_PACKET_H_
