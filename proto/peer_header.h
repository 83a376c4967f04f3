// The header of every message the host algorithms (host/algorithms/) send
// between ranks over their RC peer channels: 32 bytes, little-endian, then
// the elements (a data message) or the sender's status (an abort).
// docs/algorithms.md, "Wire format":
//
//   off size field
//   0   1    version (kPeerVersion = 1)
//   1   1    type: PeerMessageType (1 data, 2 abort)
//   2   1    algorithm (host::algorithms::Algorithm: 1 ring, 2 bidir, 3 tree, 4 treescatter)
//   3   1    dtype (DataType code)
//   4   1    op (ReduceOp code)
//   5   3    zero
//   8   4    seq: the operation's sequence number on these channels
//   12  4    index: the message's index from this sender to this receiver in the operation
//   16  8    offset: the first element carried
//   24  8    count: the operation's element count
//
// An abort's body: the sender's absl::StatusCode (4 bytes, little-endian),
// then its message (not terminated).
//
//   PeerHeader h{.type = PeerMessageType::kData, .algorithm = 1, ...};
//   EncodePeerHeader(h, message.data());
//   PeerHeader in = DecodePeerHeader(received.data());   // received.size() >= kPeerHeaderSize
//
// The fields are not validated here: the receiver compares every field
// with what its own schedule expects from that sender. Pure functions,
// thread-safe.
#ifndef NETFOLD_PROTO_PEER_HEADER_H_
#define NETFOLD_PROTO_PEER_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace netfold::proto {

inline constexpr uint8_t kPeerVersion = 1;
inline constexpr size_t kPeerHeaderSize = 32;

enum class PeerMessageType : uint8_t {
  kData = 1,
  kAbort = 2,
};

struct PeerHeader {
  uint8_t version = kPeerVersion;
  PeerMessageType type = PeerMessageType::kData;
  uint8_t algorithm = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint32_t seq = 0;
  uint32_t index = 0;
  uint64_t offset = 0;
  uint64_t count = 0;

  friend bool operator==(const PeerHeader&, const PeerHeader&) = default;
};

// Writes the header into out[0, kPeerHeaderSize).
void EncodePeerHeader(const PeerHeader& h, uint8_t* out);
// Reads the header from in[0, kPeerHeaderSize); the caller checked the size.
PeerHeader DecodePeerHeader(const uint8_t* in);

// A whole abort message: `h` (its type set to kAbort), `code`, then
// `message` cut to fit `max_bytes` in all.
std::vector<uint8_t> EncodePeerAbort(PeerHeader h, uint32_t code, std::string_view message,
                                     size_t max_bytes);
// An abort's body (what follows the header): false if it is shorter than
// the code.
bool DecodePeerAbortBody(std::span<const uint8_t> body, uint32_t* code, std::string* message);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_PEER_HEADER_H_
