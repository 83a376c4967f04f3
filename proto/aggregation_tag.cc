#include "proto/aggregation_tag.h"

#include <sodium.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::proto {
namespace {

static_assert(kAggregationKeySize == crypto_generichash_KEYBYTES);
static_assert(kAggregationTagSize >= crypto_generichash_BYTES_MIN &&
              kAggregationTagSize <= crypto_generichash_BYTES_MAX);

// sodium_init picks the fastest BLAKE2b for this CPU (AVX2, SSSE3, ...)
// and seeds its random generator; once per process, thread-safe.
void EnsureSodium() {
  static const bool ready = [] { return sodium_init() >= 0; }();
  (void)ready;  // < 0 only if /dev/urandom is unusable: keygen then aborts in libsodium
}

}  // namespace

AggregationKey NewAggregationKey() {
  EnsureSodium();
  AggregationKey key;
  crypto_generichash_keygen(key.data());
  return key;
}

std::string AggregationKeyBytes(const AggregationKey& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

absl::StatusOr<AggregationKey> AggregationKeyFromBytes(std::string_view bytes) {
  if (bytes.size() != kAggregationKeySize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an integrity key has %d bytes, got %d", kAggregationKeySize, bytes.size()));
  }
  AggregationKey key;
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}

AggregationTag ComputeAggregationTag(const AggregationKey& key,
                                     std::span<const uint8_t> header_and_elements) {
  EnsureSodium();
  AggregationTag tag;
  crypto_generichash(tag.data(), tag.size(), header_and_elements.data(),
                     header_and_elements.size(), key.data(), key.size());
  return tag;
}

AggregationTag ComputeAggregationTag(const AggregationKey& key, std::span<const uint8_t> header,
                                     std::span<const uint8_t> elements) {
  EnsureSodium();
  crypto_generichash_state state;
  crypto_generichash_init(&state, key.data(), key.size(), kAggregationTagSize);
  crypto_generichash_update(&state, header.data(), header.size());
  if (!elements.empty()) crypto_generichash_update(&state, elements.data(), elements.size());
  AggregationTag tag;
  crypto_generichash_final(&state, tag.data(), tag.size());
  return tag;
}

absl::StatusOr<size_t> AppendAggregationTag(const AggregationKey& key, std::span<uint8_t> buffer,
                                            size_t length) {
  if (length > buffer.size() || buffer.size() - length < kAggregationTagSize) {
    return absl::OutOfRangeError(absl::StrFormat(
        "a buffer of %d bytes has no room for a tag after %d bytes", buffer.size(), length));
  }
  const AggregationTag tag = ComputeAggregationTag(key, buffer.first(length));
  std::memcpy(buffer.data() + length, tag.data(), tag.size());
  return length + kAggregationTagSize;
}

bool VerifyAggregationTag(const AggregationKey& key, std::span<const uint8_t> message) {
  if (message.size() < kAggregationHeaderSize + kAggregationTagSize) return false;
  const size_t signed_bytes = message.size() - kAggregationTagSize;
  const AggregationTag expected = ComputeAggregationTag(key, message.first(signed_bytes));
  return crypto_verify_16(expected.data(), message.data() + signed_bytes) == 0;
}

}  // namespace netfold::proto
