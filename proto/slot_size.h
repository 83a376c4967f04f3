// Slot sizes (P) that every configuration must respect: the topology's
// capacity.slot_bytes, the manager's default, a switch's static groups.
//
//   if (!proto::IsValidSlotBytes(p)) return InvalidArgument(...);
//
// A slot holds whole elements of every data type, so its size is a multiple
// of the largest element, 16 bytes (double_int, long_int), which every other
// element size divides; the switch's AggregationNode refuses any other. And
// a multicast result (the 40-byte aggregation header + the slot) must fit
// one packet of the largest RoCE path MTU, 4096 bytes.
#ifndef NETFOLD_PROTO_SLOT_SIZE_H_
#define NETFOLD_PROTO_SLOT_SIZE_H_

#include <cstdint>

#include "proto/aggregation_header.h"

namespace netfold::proto {

inline constexpr uint32_t kSlotAlignment = 16;
inline constexpr uint32_t kLargestPathMtu = 4096;
inline constexpr uint32_t kMaxSlotBytes =
    (kLargestPathMtu - kAggregationHeaderSize) / kSlotAlignment * kSlotAlignment;
static_assert(kMaxSlotBytes == 4048);

inline constexpr bool IsValidSlotBytes(uint64_t slot_bytes) {
  return slot_bytes > 0 && slot_bytes % kSlotAlignment == 0 && slot_bytes <= kMaxSlotBytes;
}

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_SLOT_SIZE_H_
