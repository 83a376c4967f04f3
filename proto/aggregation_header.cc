#include "proto/aggregation_header.h"

#include <cstring>
#include <string>

#include "absl/strings/str_format.h"

namespace netfold::proto {
namespace {

bool IsValidType(uint8_t code) {
  return code >= static_cast<uint8_t>(AggregationMessageType::kRequest) &&
         code <= static_cast<uint8_t>(AggregationMessageType::kAbort);
}

bool IsValidCollective(uint8_t code) {
  return code >= static_cast<uint8_t>(CollectiveType::kAllreduce) &&
         code <= static_cast<uint8_t>(CollectiveType::kBarrier);
}

bool IsValidDelivery(uint8_t code) {
  return code >= static_cast<uint8_t>(DeliveryMode::kMulticast) &&
         code <= static_cast<uint8_t>(DeliveryMode::kRootData);
}

uint8_t Flags(const AggregationHeader& h) {
  return static_cast<uint8_t>((h.has_data ? kAggregationFlagHasData : 0) |
                              (h.has_tag ? kAggregationFlagHasTag : 0));
}

bool IsValidStatus(uint8_t code) {
  return code <= static_cast<uint8_t>(AggregationStatus::kInternal);
}

// The field-level rules, on raw codes so that a value outside an enum is
// never materialised as that enum. `reserved_zero` covers bytes 10..11
// (always true for a host-order header).
AggregationParseResult Validate(uint8_t version, uint8_t type, uint8_t collective,
                                uint8_t dtype, uint8_t op, uint8_t delivery, uint8_t status,
                                uint8_t flags, bool reserved_zero, uint32_t count,
                                uint32_t repeat, uint64_t seq) {
  if (version != kAggregationVersion) return AggregationParseResult::kBadVersion;
  if (!IsValidType(type)) return AggregationParseResult::kBadType;
  if (!IsValidCollective(collective)) return AggregationParseResult::kBadCollective;
  const auto coll = static_cast<CollectiveType>(collective);
  const bool is_barrier = coll == CollectiveType::kBarrier;
  const bool is_reduction = coll == CollectiveType::kAllreduce || coll == CollectiveType::kReduce;
  if (dtype == 0 ? !is_barrier : !IsValidDataType(dtype)) {
    return AggregationParseResult::kBadDataType;
  }
  if (op == 0 ? is_reduction : !IsValidReduceOp(op)) return AggregationParseResult::kBadReduceOp;
  if (is_reduction && !IsOpAllowed(static_cast<DataType>(dtype), static_cast<ReduceOp>(op))) {
    return AggregationParseResult::kOpNotAllowed;
  }
  if (!IsValidDelivery(delivery) ||
      ((static_cast<DeliveryMode>(delivery) == DeliveryMode::kToRoot ||
        static_cast<DeliveryMode>(delivery) == DeliveryMode::kRootData) &&
       coll != CollectiveType::kReduce)) {
    return AggregationParseResult::kBadDelivery;
  }
  if (!IsValidStatus(status)) return AggregationParseResult::kBadStatus;
  if ((flags & ~kAggregationKnownFlags) != 0) return AggregationParseResult::kBadFlags;
  if (!reserved_zero) return AggregationParseResult::kReservedNotZero;
  if (is_barrier && count != 0) return AggregationParseResult::kBarrierWithCount;
  if (count > kMaxAggregationCount) return AggregationParseResult::kCountTooLarge;
  if (repeat != 0) {
    const bool bare_bcast_request = type == static_cast<uint8_t>(AggregationMessageType::kRequest) &&
                                    coll == CollectiveType::kBcast &&
                                    (flags & kAggregationFlagHasData) == 0;
    if (!bare_bcast_request || repeat > kMaxAggregationRepeat || seq > UINT64_MAX - repeat) {
      return AggregationParseResult::kBadRepeat;
    }
  }
  return AggregationParseResult::kOk;
}

absl::Status ToStatus(AggregationParseResult result, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s", what, AggregationParseResultName(result)));
}

}  // namespace

std::string_view AggregationMessageTypeName(AggregationMessageType type) {
  switch (type) {
    case AggregationMessageType::kRequest:
      return "request";
    case AggregationMessageType::kResult:
      return "result";
    case AggregationMessageType::kRepairRequest:
      return "repair_request";
    case AggregationMessageType::kAbort:
      return "abort";
  }
  return "invalid";
}

std::string_view CollectiveTypeName(CollectiveType collective) {
  switch (collective) {
    case CollectiveType::kAllreduce:
      return "allreduce";
    case CollectiveType::kReduce:
      return "reduce";
    case CollectiveType::kBcast:
      return "bcast";
    case CollectiveType::kBarrier:
      return "barrier";
  }
  return "invalid";
}

std::string_view DeliveryModeName(DeliveryMode delivery) {
  switch (delivery) {
    case DeliveryMode::kMulticast:
      return "multicast";
    case DeliveryMode::kRcTree:
      return "rc_tree";
    case DeliveryMode::kToRoot:
      return "to_root";
    case DeliveryMode::kRootData:
      return "root_data";
  }
  return "invalid";
}

std::string_view AggregationStatusName(AggregationStatus status) {
  switch (status) {
    case AggregationStatus::kOk:
      return "ok";
    case AggregationStatus::kMismatch:
      return "mismatch";
    case AggregationStatus::kInvalidRequest:
      return "invalid_request";
    case AggregationStatus::kAborted:
      return "aborted";
    case AggregationStatus::kStaleEpoch:
      return "stale_epoch";
    case AggregationStatus::kResultGone:
      return "result_gone";
    case AggregationStatus::kInternal:
      return "internal";
  }
  return "invalid";
}

std::string_view AggregationParseResultName(AggregationParseResult result) {
  switch (result) {
    case AggregationParseResult::kOk:
      return "ok";
    case AggregationParseResult::kTruncated:
      return "truncated";
    case AggregationParseResult::kBadVersion:
      return "bad_version";
    case AggregationParseResult::kBadType:
      return "bad_type";
    case AggregationParseResult::kBadCollective:
      return "bad_collective";
    case AggregationParseResult::kBadDataType:
      return "bad_dtype";
    case AggregationParseResult::kBadReduceOp:
      return "bad_op";
    case AggregationParseResult::kOpNotAllowed:
      return "op_not_allowed";
    case AggregationParseResult::kBadDelivery:
      return "bad_delivery";
    case AggregationParseResult::kBadStatus:
      return "bad_status";
    case AggregationParseResult::kBadFlags:
      return "bad_flags";
    case AggregationParseResult::kReservedNotZero:
      return "reserved_not_zero";
    case AggregationParseResult::kBarrierWithCount:
      return "barrier_with_count";
    case AggregationParseResult::kCountTooLarge:
      return "count_too_large";
    case AggregationParseResult::kBadPayloadLength:
      return "bad_payload_length";
    case AggregationParseResult::kBadRepeat:
      return "bad_repeat";
  }
  return "invalid";
}

AggregationParseResult ValidateAggregationHeader(const AggregationHeader& h) {
  return Validate(h.version, static_cast<uint8_t>(h.type), static_cast<uint8_t>(h.collective),
                  static_cast<uint8_t>(h.dtype), static_cast<uint8_t>(h.op),
                  static_cast<uint8_t>(h.delivery), static_cast<uint8_t>(h.status),
                  Flags(h), /*reserved_zero=*/true, h.count, h.repeat, h.seq);
}

size_t AggregationPayloadSize(const AggregationHeader& header) {
  if (!header.has_data) return 0;
  // count <= 2^28 and sizes <= 16 once validated; the product fits size_t.
  return static_cast<size_t>(header.count) * DataTypeSize(header.dtype);
}

absl::StatusOr<size_t> EncodeAggregationHeader(const AggregationHeader& h,
                                               std::span<uint8_t> out) {
  if (AggregationParseResult r = ValidateAggregationHeader(h); r != AggregationParseResult::kOk) {
    return ToStatus(r, "invalid aggregation header");
  }
  if (out.size() < kAggregationHeaderSize) {
    return absl::OutOfRangeError(absl::StrFormat(
        "buffer holds %d bytes, the aggregation header needs %d", out.size(),
        kAggregationHeaderSize));
  }
  AggregationHeaderWire wire{};
  wire.version = h.version;
  wire.type = static_cast<uint8_t>(h.type);
  wire.collective = static_cast<uint8_t>(h.collective);
  wire.dtype = static_cast<uint8_t>(h.dtype);
  wire.op = static_cast<uint8_t>(h.op);
  wire.delivery = static_cast<uint8_t>(h.delivery);
  wire.status = static_cast<uint8_t>(h.status);
  wire.flags = Flags(h);
  wire.tree_id.set(h.tree_id);
  wire.group_id.set(h.group_id);
  wire.epoch.set(h.epoch);
  wire.root_rank.set(h.root_rank);
  wire.count.set(h.count);
  wire.repeat.set(h.repeat);
  wire.seq.set(h.seq);
  std::memcpy(out.data(), &wire, sizeof(wire));
  return kAggregationHeaderSize;
}

absl::StatusOr<size_t> EncodeAggregationMessage(const AggregationHeader& header,
                                                std::span<const uint8_t> elements,
                                                std::span<uint8_t> out) {
  if (AggregationParseResult r = ValidateAggregationHeader(header);
      r != AggregationParseResult::kOk) {
    return ToStatus(r, "invalid aggregation header");
  }
  const size_t expected = AggregationPayloadSize(header);
  if (elements.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the header announces %d element bytes (%d x %s, has_data=%d), got %d", expected,
        header.count, DataTypeName(header.dtype), header.has_data, elements.size()));
  }
  const size_t size = kAggregationHeaderSize + expected;
  if (out.size() < size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "buffer holds %d bytes, the aggregation message needs %d", out.size(), size));
  }
  // Elements first: they may overlap the header's bytes of `out`.
  if (!elements.empty()) {
    std::memmove(out.data() + kAggregationHeaderSize, elements.data(), elements.size());
  }
  if (absl::StatusOr<size_t> n = EncodeAggregationHeader(header, out); !n.ok()) {
    return n.status();
  }
  return size;
}

AggregationParseResult ParseAggregationHeader(std::span<const uint8_t> bytes,
                                              AggregationHeader* out) {
  if (bytes.size() < kAggregationHeaderSize) return AggregationParseResult::kTruncated;
  AggregationHeaderWire wire;
  std::memcpy(&wire, bytes.data(), sizeof(wire));
  const bool reserved_zero = wire.reserved0.get() == 0;
  const AggregationParseResult result =
      Validate(wire.version, wire.type, wire.collective, wire.dtype, wire.op, wire.delivery,
               wire.status, wire.flags, reserved_zero, wire.count.get(), wire.repeat.get(),
               wire.seq.get());
  if (result != AggregationParseResult::kOk) return result;
  out->version = wire.version;
  out->type = static_cast<AggregationMessageType>(wire.type);
  out->collective = static_cast<CollectiveType>(wire.collective);
  out->dtype = static_cast<DataType>(wire.dtype);
  out->op = static_cast<ReduceOp>(wire.op);
  out->delivery = static_cast<DeliveryMode>(wire.delivery);
  out->status = static_cast<AggregationStatus>(wire.status);
  out->has_data = (wire.flags & kAggregationFlagHasData) != 0;
  out->has_tag = (wire.flags & kAggregationFlagHasTag) != 0;
  out->tree_id = wire.tree_id.get();
  out->group_id = wire.group_id.get();
  out->epoch = wire.epoch.get();
  out->root_rank = wire.root_rank.get();
  out->count = wire.count.get();
  out->repeat = wire.repeat.get();
  out->seq = wire.seq.get();
  return AggregationParseResult::kOk;
}

AggregationParseResult ParseAggregationMessage(std::span<const uint8_t> message,
                                               AggregationHeader* header,
                                               std::span<const uint8_t>* elements) {
  const AggregationParseResult result = ParseAggregationHeader(message, header);
  if (result != AggregationParseResult::kOk) return result;
  const size_t expected = AggregationPayloadSize(*header);
  const size_t tag = header->has_tag ? kAggregationTagSize : 0;
  if (message.size() - kAggregationHeaderSize != expected + tag) {
    return AggregationParseResult::kBadPayloadLength;
  }
  if (elements != nullptr) *elements = message.subspan(kAggregationHeaderSize, expected);
  return AggregationParseResult::kOk;
}

absl::StatusOr<AggregationHeader> DecodeAggregationMessage(std::span<const uint8_t> message) {
  AggregationHeader header;
  const AggregationParseResult result = ParseAggregationMessage(message, &header, nullptr);
  if (result != AggregationParseResult::kOk) {
    return ToStatus(result, absl::StrFormat("aggregation message of %d bytes rejected",
                                            message.size()));
  }
  return header;
}

}  // namespace netfold::proto
