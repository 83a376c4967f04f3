// The per-job integrity tag of aggregation messages (docs/security.md,
// "An opt-in integrity tag per job"): 16 bytes of keyed BLAKE2b
// (libsodium's crypto_generichash) over the 40-byte header and the
// elements, appended after the elements, flagged by has_tag in the header.
// The key is 32 random bytes the manager draws per job and hands to the
// job's ranks and switches; without it nobody can make a tag a member
// accepts, whatever address and port it sends from.
//
//   AggregationKey key = NewAggregationKey();                 // the manager
//   h.has_tag = true;
//   size_t n = *EncodeAggregationMessage(h, elements, buffer);
//   n = *AppendAggregationTag(key, buffer, n);                // n + 16 bytes
//   ...
//   if (h.has_tag && VerifyAggregationTag(key, message)) { fold it } else { count, drop }
//
// All functions are thread-safe and allocate nothing (but error messages).
#ifndef NETFOLD_PROTO_AGGREGATION_TAG_H_
#define NETFOLD_PROTO_AGGREGATION_TAG_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "proto/aggregation_header.h"

namespace netfold::proto {

inline constexpr size_t kAggregationKeySize = 32;
using AggregationKey = std::array<uint8_t, kAggregationKeySize>;
using AggregationTag = std::array<uint8_t, kAggregationTagSize>;

// A new random key (libsodium's crypto_generichash_keygen).
AggregationKey NewAggregationKey();

// The key as the control plane carries it (32 raw bytes), and back.
std::string AggregationKeyBytes(const AggregationKey& key);
// InvalidArgument unless `bytes` holds exactly 32 bytes.
absl::StatusOr<AggregationKey> AggregationKeyFromBytes(std::string_view bytes);

// The tag of a message whose header and elements are `header_and_elements`
// (one buffer), or `header` and `elements` (two: a host's request, whose
// elements stay in the caller's buffer). The bytes are hashed as they are:
// the header's has_tag bit must already be set.
AggregationTag ComputeAggregationTag(const AggregationKey& key,
                                     std::span<const uint8_t> header_and_elements);
AggregationTag ComputeAggregationTag(const AggregationKey& key, std::span<const uint8_t> header,
                                     std::span<const uint8_t> elements);

// Writes the tag of `buffer[0, length)` at buffer[length] and returns
// length + 16; OutOfRange if `buffer` has no room for it.
absl::StatusOr<size_t> AppendAggregationTag(const AggregationKey& key, std::span<uint8_t> buffer,
                                            size_t length);

// True if `message` (header, elements, then the tag, as ParseAggregationMessage
// accepted it with has_tag) ends with the right tag for `key`. Compared in
// constant time. False for anything shorter than a header and a tag.
bool VerifyAggregationTag(const AggregationKey& key, std::span<const uint8_t> message);

}  // namespace netfold::proto

#endif  // NETFOLD_PROTO_AGGREGATION_TAG_H_
