// The aggregation header: the first 40 bytes of the payload of every
// aggregation message (request, result, result-repair request, abort),
// followed by the elements. Layout (big-endian; docs/protocol.md):
//
//   off size field
//   0   1    version (kAggregationVersion = 1)
//   1   1    type        AggregationMessageType
//   2   1    collective  CollectiveType
//   3   1    dtype       DataType code; 0 (kNoDataType) only for barrier
//   4   1    op          ReduceOp code; 0 (kNoReduceOp) for barrier and bcast
//   5   1    delivery    DeliveryMode
//   6   1    status      AggregationStatus
//   7   1    flags       bit 0 kAggregationFlagHasData, bit 1 kAggregationFlagHasTag;
//                        other bits 0
//   8   2    tree_id
//   10  2    reserved (0)
//   12  4    group_id
//   16  4    epoch
//   20  4    root_rank
//   24  4    count (elements)
//   28  4    repeat: a header-only bcast request also stands for the
//            operations seq+1 .. seq+repeat (0 otherwise; below)
//   32  8    seq
//
// The elements are in the sender's memory order (little-endian on x86-64),
// never byte-swapped: every host and switch of a job has the same order.
// With has_tag, a 16-byte integrity tag follows the elements (jobs created
// with integrity; proto/aggregation_tag.h computes and checks it).
//
//   AggregationHeader h;
//   h.type = AggregationMessageType::kRequest;
//   h.collective = CollectiveType::kAllreduce;
//   h.dtype = DataType::kFp32;
//   h.op = ReduceOp::kSum;
//   h.has_data = true;
//   h.count = 256;
//   ...
//   absl::StatusOr<size_t> n = EncodeAggregationMessage(h, AsBytes(values), buffer);
//
//   AggregationHeader in;
//   std::span<const uint8_t> elements;
//   AggregationParseResult r = ParseAggregationMessage(payload, &in, &elements);
//   if (r != AggregationParseResult::kOk) { ++drops[static_cast<size_t>(r)]; ... }
//
// All functions are pure and thread-safe and allocate nothing (except the
// message of a returned error Status).
#ifndef NETFOLD_PROTO_AGGREGATION_HEADER_H_
#define NETFOLD_PROTO_AGGREGATION_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/data_type.h"
#include "proto/big_endian.h"
#include "proto/reduce_op.h"

namespace netfold::proto {

inline constexpr uint8_t kAggregationVersion = 1;
inline constexpr size_t kAggregationHeaderSize = 40;

// The most elements one operation may name (2^28). With the largest
// element (16 bytes) a message stays below 4 GiB, so count * size never
// overflows, even in 32-bit arithmetic of a peer.
inline constexpr uint32_t kMaxAggregationCount = 1u << 28;
// The most further operations one request may stand for (`repeat`). A
// switch accepts fewer: the run must fit the group's K slots.
inline constexpr uint32_t kMaxAggregationRepeat = 0xffff;

// Flag bits (byte 7).
inline constexpr uint8_t kAggregationFlagHasData = 0x01;
// A kAggregationTagSize-byte keyed tag follows the elements (docs/security.md).
inline constexpr uint8_t kAggregationFlagHasTag = 0x02;
inline constexpr uint8_t kAggregationKnownFlags = kAggregationFlagHasData | kAggregationFlagHasTag;
// The integrity tag's size: BLAKE2b with a 16-byte output.
inline constexpr size_t kAggregationTagSize = 16;

// dtype / op code 0: "none", where the table above allows it.
inline constexpr DataType kNoDataType = static_cast<DataType>(0);
inline constexpr ReduceOp kNoReduceOp = static_cast<ReduceOp>(0);

enum class AggregationMessageType : uint8_t {
  kRequest = 1,        // a contribution climbing the tree (host -> AN, AN -> parent)
  kResult = 2,         // the result going down (multicast, RC relay or to one rank)
  kRepairRequest = 3,  // a host that missed result `seq` asks the group root again
  kAbort = 4,          // the operation (or group) is abandoned; status says why
};

enum class CollectiveType : uint8_t {
  kAllreduce = 1,
  kReduce = 2,
  kBcast = 3,
  kBarrier = 4,
};

enum class DeliveryMode : uint8_t {
  kMulticast = 1,  // UD SEND_ONLY to the group's multicast address
  kRcTree = 2,     // relayed down the tree over RC
  kToRoot = 3,     // to root_rank only (reduce)
  // Reduce: the result's header to the group by multicast (every rank
  // learns its chunk is done), its data to root_rank alone, relayed down
  // the tree over RC. The other ranks do not receive data they would drop.
  kRootData = 4,
};

enum class AggregationStatus : uint8_t {
  kOk = 0,
  kMismatch = 1,        // children disagreed on collective/dtype/op/count/root for one seq
  kInvalidRequest = 2,  // a request the AN cannot serve (bad tree, group, slot, size)
  kAborted = 3,         // the group was revoked
  kStaleEpoch = 4,      // the sender's epoch is older than the group's
  kResultGone = 5,      // a repair asked for a seq no longer held
  kInternal = 6,        // a bug or resource failure in the AN
};

// Names for logs and counters: "request", "allreduce", "multicast",
// "mismatch", ...; "invalid" for values outside the enums.
std::string_view AggregationMessageTypeName(AggregationMessageType type);
std::string_view CollectiveTypeName(CollectiveType collective);
std::string_view DeliveryModeName(DeliveryMode delivery);
std::string_view AggregationStatusName(AggregationStatus status);

// The host-order view of the header.
struct AggregationHeader {
  uint8_t version = kAggregationVersion;
  AggregationMessageType type = AggregationMessageType::kRequest;
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = kNoDataType;
  ReduceOp op = kNoReduceOp;
  DeliveryMode delivery = DeliveryMode::kMulticast;
  AggregationStatus status = AggregationStatus::kOk;
  bool has_data = false;  // flags bit 0: `count` elements follow the header
  bool has_tag = false;   // flags bit 1: a 16-byte tag follows the elements
  uint16_t tree_id = 0;
  uint32_t group_id = 0;
  uint32_t epoch = 0;
  uint32_t root_rank = 0;  // reduce/bcast root; 0 otherwise by convention
  uint32_t count = 0;      // elements of the operation (0 for barrier)
  // A bcast rank that carries no data for a run of operations that look
  // alike (same count and root) says so in one request: it stands for seq
  // and the `repeat` operations after it. Only on a request of a bcast
  // without data; 0 on every other message.
  uint32_t repeat = 0;
  uint64_t seq = 0;        // operation sequence number within the group

  friend bool operator==(const AggregationHeader&, const AggregationHeader&) = default;
};

// The packed wire struct (exactly the table above).
struct AggregationHeaderWire {
  uint8_t version;
  uint8_t type;
  uint8_t collective;
  uint8_t dtype;
  uint8_t op;
  uint8_t delivery;
  uint8_t status;
  uint8_t flags;
  Be16 tree_id;
  Be16 reserved0;
  Be32 group_id;
  Be32 epoch;
  Be32 root_rank;
  Be32 count;
  Be32 repeat;
  Be64 seq;
};
static_assert(sizeof(AggregationHeaderWire) == kAggregationHeaderSize &&
              alignof(AggregationHeaderWire) == 1);

// Why a header or message was rejected; kOk if it was not. The values index
// counter arrays of size kNumAggregationParseResults and never change
// meaning. The checks run in this order; the first failure is reported.
enum class AggregationParseResult : uint8_t {
  kOk = 0,
  kTruncated,          // fewer than 40 bytes
  kBadVersion,         // version != 1
  kBadType,            // type not an AggregationMessageType
  kBadCollective,      // collective not a CollectiveType
  kBadDataType,        // dtype not a DataType (0 is one only for barrier)
  kBadReduceOp,        // op not a ReduceOp (0 is one only for barrier/bcast)
  kOpNotAllowed,       // allreduce/reduce: CheckOpAllowed(dtype, op) fails
  kBadDelivery,        // delivery not a DeliveryMode, or to_root/root_data but not reduce
  kBadStatus,          // status not an AggregationStatus
  kBadFlags,           // a flag bit other than has_data and has_tag is set
  kReservedNotZero,    // bytes 10..11 are not 0
  kBarrierWithCount,   // barrier with count != 0
  kCountTooLarge,      // count > kMaxAggregationCount
  kBadPayloadLength,   // message: bytes after the header != expected (below)
  kBadRepeat,          // repeat on a message other than a bcast request without
                       // data, above kMaxAggregationRepeat, or seq + repeat
                       // overflows (checked after count_too_large, before
                       // bad_payload_length: values keep their meaning)
};
inline constexpr size_t kNumAggregationParseResults = 16;

// "ok", "truncated", "bad_version", "bad_type", "bad_collective",
// "bad_dtype", "bad_op", "op_not_allowed", "bad_delivery", "bad_status",
// "bad_flags", "reserved_not_zero", "barrier_with_count", "count_too_large",
// "bad_payload_length", "bad_repeat"; "invalid" for other values.
std::string_view AggregationParseResultName(AggregationParseResult result);

// Checks every rule above except the payload length (and truncation) on a
// host-order header. Returns kOk or the first rule broken.
AggregationParseResult ValidateAggregationHeader(const AggregationHeader& header);

// Bytes of elements a message with `header` carries: count *
// DataTypeSize(dtype) if has_data, else 0. Meaningful for a header that
// ValidateAggregationHeader accepts.
size_t AggregationPayloadSize(const AggregationHeader& header);

// Writes the 40-byte header. Returns kAggregationHeaderSize, InvalidArgument
// naming the broken rule (ValidateAggregationHeader), or OutOfRange if
// `out` is shorter than 40 bytes. The caller owns `out`.
absl::StatusOr<size_t> EncodeAggregationHeader(const AggregationHeader& header,
                                               std::span<uint8_t> out);

// Writes the header and `elements` (copied as they are) into `out`. Returns
// the bytes written (40 + elements.size()); with has_tag the caller appends
// the tag after them (AppendAggregationTag). InvalidArgument if the header is
// invalid or elements.size() != AggregationPayloadSize(header), OutOfRange
// if `out` is too small. `elements` may overlap `out`.
absl::StatusOr<size_t> EncodeAggregationMessage(const AggregationHeader& header,
                                                std::span<const uint8_t> elements,
                                                std::span<uint8_t> out);

// Reads and validates the header at the start of `bytes` (anything after
// the first 40 bytes is ignored: use it on the first packet of a message
// split over several). On kOk fills `*out` (not null); otherwise `*out` is
// unspecified. Never reads outside `bytes`.
AggregationParseResult ParseAggregationHeader(std::span<const uint8_t> bytes,
                                              AggregationHeader* out);

// Parses a whole message: the header, then checks that exactly
// AggregationPayloadSize(header) bytes follow, plus kAggregationTagSize
// with has_tag (kBadPayloadLength otherwise). On kOk fills `*header` and,
// if `elements` is not null, points `*elements` at the element bytes inside
// `message` (without the tag). The tag is not checked here: that needs the
// job's key (VerifyAggregationTag).
AggregationParseResult ParseAggregationMessage(std::span<const uint8_t> message,
                                               AggregationHeader* header,
                                               std::span<const uint8_t>* elements);

// Status form of ParseAggregationMessage for control paths and tests: the
// header, or InvalidArgument whose message names the reason as
// AggregationParseResultName does.
absl::StatusOr<AggregationHeader> DecodeAggregationMessage(std::span<const uint8_t> message);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_AGGREGATION_HEADER_H_
