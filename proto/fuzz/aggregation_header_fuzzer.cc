// libFuzzer target: the aggregation header and message decoders.
//
// Properties, beyond "no crash, no out-of-bounds read" (ASan/UBSan):
//   - the message parser fails exactly where the header parser fails, or
//     with kBadPayloadLength after the header passed;
//   - an accepted header is valid and re-encodes to the same 40 bytes (the
//     format has no ignored bits), an accepted message to the same message;
//   - DecodeAggregationMessage agrees with ParseAggregationMessage.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "proto/aggregation_header.h"
#include "proto/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ::netfold::proto;  // NOLINT: a fuzz target, not library code
  const std::span<const uint8_t> input(data, size);

  AggregationHeader header;
  const AggregationParseResult header_result = ParseAggregationHeader(input, &header);
  AggregationHeader message_header;
  std::span<const uint8_t> elements;
  const AggregationParseResult message_result =
      ParseAggregationMessage(input, &message_header, &elements);
  FUZZ_CHECK(static_cast<size_t>(message_result) < kNumAggregationParseResults);
  FUZZ_CHECK(message_result == header_result ||
             (header_result == AggregationParseResult::kOk &&
              message_result == AggregationParseResult::kBadPayloadLength));
  FUZZ_CHECK(DecodeAggregationMessage(input).ok() ==
             (message_result == AggregationParseResult::kOk));

  if (header_result == AggregationParseResult::kOk) {
    FUZZ_CHECK(ValidateAggregationHeader(header) == AggregationParseResult::kOk);
    uint8_t encoded[kAggregationHeaderSize];
    const absl::StatusOr<size_t> n = EncodeAggregationHeader(header, encoded);
    FUZZ_CHECK(n.ok() && *n == kAggregationHeaderSize);
    FUZZ_CHECK(std::memcmp(encoded, data, kAggregationHeaderSize) == 0);
  }
  if (message_result == AggregationParseResult::kOk) {
    FUZZ_CHECK(message_header == header);
    FUZZ_CHECK(elements.size() == AggregationPayloadSize(header));
    // With has_tag the integrity tag follows the elements; the encoder
    // writes header and elements, and the caller appends the tag.
    const size_t tag = header.has_tag ? kAggregationTagSize : 0;
    FUZZ_CHECK(elements.size() + kAggregationHeaderSize + tag == size);
    std::vector<uint8_t> encoded(size - tag);
    const absl::StatusOr<size_t> n = EncodeAggregationMessage(header, elements, encoded);
    FUZZ_CHECK(n.ok() && *n == size - tag);
    FUZZ_CHECK(std::memcmp(encoded.data(), data, size - tag) == 0);
  }
  return 0;
}
