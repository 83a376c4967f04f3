// Tests of the aggregation header: golden bytes written by hand from the
// layout table (docs/protocol.md), round trips over every dtype x op, and
// every rejection of the decoder, table-driven.
#include "proto/aggregation_header.h"

#include <cstddef>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/proto_test_util.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::FromHex;
using ::netfold::proto::testing::MessageContains;
using ::netfold::proto::testing::ToHex;

AggregationHeader AllreduceRequest() {
  AggregationHeader h;
  h.type = AggregationMessageType::kRequest;
  h.collective = CollectiveType::kAllreduce;
  h.dtype = DataType::kFp32;
  h.op = ReduceOp::kSum;
  h.delivery = DeliveryMode::kMulticast;
  h.has_data = true;
  h.tree_id = 3;
  h.group_id = 0x102;
  h.epoch = 7;
  h.count = 4;
  h.seq = 42;
  return h;
}

AggregationHeader Barrier() {
  AggregationHeader h;
  h.collective = CollectiveType::kBarrier;
  h.tree_id = 1;
  h.group_id = 9;
  h.epoch = 1;
  h.seq = 1;
  return h;
}

std::string EncodeHex(const AggregationHeader& h) {
  std::vector<uint8_t> out(kAggregationHeaderSize + 3, 0xEE);
  absl::StatusOr<size_t> n = EncodeAggregationHeader(h, out);
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok()) return "";
  EXPECT_EQ(*n, kAggregationHeaderSize);
  EXPECT_EQ(out[40], 0xEE);  // nothing written past the header
  return ToHex(std::span<const uint8_t>(out).first(*n));
}

TEST(AggregationHeader, WireStructMatchesTheTable) {
  EXPECT_EQ(offsetof(AggregationHeaderWire, tree_id), 8u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, group_id), 12u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, epoch), 16u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, root_rank), 20u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, count), 24u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, repeat), 28u);
  EXPECT_EQ(offsetof(AggregationHeaderWire, seq), 32u);
}

TEST(AggregationHeader, GoldenBytes) {
  struct Case {
    std::string name;
    AggregationHeader header;
    std::string hex;  // ver type coll dtype op deliv status flags | tree resv | ...
  };
  std::vector<Case> cases;
  cases.push_back({"allreduce fp32 sum request", AllreduceRequest(),
                   "01 01 01 0b 01 01 00 01  0003 0000  00000102  00000007  00000000  "
                   "00000004  00000000  000000000000002a"});
  {
    AggregationHeader h = AllreduceRequest();
    h.type = AggregationMessageType::kResult;
    h.dtype = DataType::kInt64;
    h.op = ReduceOp::kMax;
    h.delivery = DeliveryMode::kRcTree;
    h.status = AggregationStatus::kMismatch;
    h.has_data = false;
    h.tree_id = 0xBEEF;
    h.group_id = 0xDEADBEEF;
    h.epoch = 0xFFFFFFFF;
    h.root_rank = 0x01020304;
    h.count = kMaxAggregationCount;
    h.seq = 0x0102030405060708;
    cases.push_back({"int64 max result, mismatch", h,
                     "01 02 01 04 04 02 01 00  beef 0000  deadbeef  ffffffff  01020304  "
                     "10000000  00000000  0102030405060708"});
  }
  cases.push_back({"barrier", Barrier(),
                   "01 01 04 00 00 01 00 00  0001 0000  00000009  00000001  00000000  "
                   "00000000  00000000  0000000000000001"});
  {
    AggregationHeader h = AllreduceRequest();
    h.type = AggregationMessageType::kRepairRequest;
    h.has_data = false;
    cases.push_back({"repair request", h,
                     "01 03 01 0b 01 01 00 00  0003 0000  00000102  00000007  00000000  "
                     "00000004  00000000  000000000000002a"});
  }
  {
    AggregationHeader h = AllreduceRequest();
    h.type = AggregationMessageType::kAbort;
    h.status = AggregationStatus::kAborted;
    h.has_data = false;
    cases.push_back({"abort", h,
                     "01 04 01 0b 01 01 03 00  0003 0000  00000102  00000007  00000000  "
                     "00000004  00000000  000000000000002a"});
  }
  {
    AggregationHeader h = AllreduceRequest();
    h.collective = CollectiveType::kReduce;
    h.dtype = DataType::kUint8;
    h.op = ReduceOp::kBxor;
    h.delivery = DeliveryMode::kToRoot;
    h.root_rank = 3;
    h.count = 5;
    h.seq = 0xFFFFFFFF00000001;
    cases.push_back({"reduce to root", h,
                     "01 01 02 05 07 03 00 01  0003 0000  00000102  00000007  00000003  "
                     "00000005  00000000  ffffffff00000001"});
    h.delivery = DeliveryMode::kRootData;
    h.type = AggregationMessageType::kResult;
    h.has_data = false;
    cases.push_back({"reduce result header, data to the root", h,
                     "01 02 02 05 07 04 00 00  0003 0000  00000102  00000007  00000003  "
                     "00000005  00000000  ffffffff00000001"});
  }
  {
    AggregationHeader h = AllreduceRequest();
    h.collective = CollectiveType::kBcast;
    h.dtype = DataType::kFp16;
    h.op = kNoReduceOp;
    h.delivery = DeliveryMode::kRcTree;
    h.status = AggregationStatus::kInternal;
    h.root_rank = 1;
    cases.push_back({"bcast", h,
                     "01 01 03 09 00 02 06 01  0003 0000  00000102  00000007  00000001  "
                     "00000004  00000000  000000000000002a"});
  }
  {
    // A bcast rank without the data stands for seq 42 and the 15 after it.
    AggregationHeader h = AllreduceRequest();
    h.collective = CollectiveType::kBcast;
    h.op = kNoReduceOp;
    h.has_data = false;
    h.root_rank = 2;
    h.repeat = 15;
    cases.push_back({"bcast request standing for 16 operations", h,
                     "01 01 03 0b 00 01 00 00  0003 0000  00000102  00000007  00000002  "
                     "00000004  0000000f  000000000000002a"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> golden = FromHex(c.hex);
    ASSERT_EQ(golden.size(), kAggregationHeaderSize);
    EXPECT_EQ(EncodeHex(c.header), ToHex(golden));
    AggregationHeader parsed;
    ASSERT_EQ(ParseAggregationHeader(golden, &parsed), AggregationParseResult::kOk);
    EXPECT_EQ(parsed, c.header);
  }
}

TEST(AggregationHeader, MessageRoundTripsEveryDataTypeAndOp) {
  int allowed = 0;
  for (CollectiveType coll : {CollectiveType::kAllreduce, CollectiveType::kReduce}) {
    for (DataType dtype : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        AggregationHeader h = AllreduceRequest();
        h.collective = coll;
        h.delivery = coll == CollectiveType::kReduce ? DeliveryMode::kToRoot
                                                     : DeliveryMode::kMulticast;
        h.dtype = dtype;
        h.op = op;
        h.count = 3;
        std::vector<uint8_t> elements(3 * DataTypeSize(dtype));
        for (size_t i = 0; i < elements.size(); ++i) elements[i] = static_cast<uint8_t>(i * 7);
        std::vector<uint8_t> out(200);
        absl::StatusOr<size_t> n = EncodeAggregationMessage(h, elements, out);
        if (!IsOpAllowed(dtype, op)) {
          EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(ValidateAggregationHeader(h), AggregationParseResult::kOpNotAllowed);
          continue;
        }
        ++allowed;
        ASSERT_TRUE(n.ok()) << n.status();
        ASSERT_EQ(*n, kAggregationHeaderSize + elements.size());
        out.resize(*n);
        AggregationHeader parsed;
        std::span<const uint8_t> parsed_elements;
        ASSERT_EQ(ParseAggregationMessage(out, &parsed, &parsed_elements),
                  AggregationParseResult::kOk);
        EXPECT_EQ(parsed, h);
        EXPECT_EQ(ToHex(parsed_elements), ToHex(elements));
        EXPECT_EQ(parsed_elements.data(), out.data() + kAggregationHeaderSize);
        absl::StatusOr<AggregationHeader> decoded = DecodeAggregationMessage(out);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        EXPECT_EQ(*decoded, h);
      }
    }
  }
  EXPECT_GT(allowed, 2 * 17);
}

TEST(AggregationHeader, ElementsAreCopiedInHostOrder) {
  AggregationHeader h = AllreduceRequest();
  h.dtype = DataType::kUint32;
  h.count = 2;
  const uint32_t values[2] = {0x11223344, 0xA0B0C0D0};
  std::vector<uint8_t> out(48);
  ASSERT_TRUE(EncodeAggregationMessage(
                  h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values), 8), out)
                  .ok());
  uint32_t back[2];
  std::memcpy(back, out.data() + kAggregationHeaderSize, sizeof(back));
  EXPECT_EQ(back[0], values[0]);
  EXPECT_EQ(back[1], values[1]);
}

// A valid message (AllreduceRequest + 16 bytes of fp32) to be broken.
std::vector<uint8_t> ValidMessage(const AggregationHeader& h = AllreduceRequest()) {
  std::vector<uint8_t> out(kAggregationHeaderSize + AggregationPayloadSize(h));
  std::vector<uint8_t> elements(AggregationPayloadSize(h), 0x3F);
  absl::StatusOr<size_t> n = EncodeAggregationMessage(h, elements, out);
  EXPECT_TRUE(n.ok()) << n.status();
  return out;
}

std::vector<uint8_t> WithByte(std::vector<uint8_t> m, size_t offset, uint8_t value) {
  m[offset] = value;
  return m;
}

std::vector<uint8_t> Resized(std::vector<uint8_t> m, size_t size) {
  m.resize(size);
  return m;
}

TEST(AggregationHeader, DecoderRejectsEveryBrokenRule) {
  using R = AggregationParseResult;
  AggregationHeader barrier_with_data = Barrier();
  barrier_with_data.has_data = true;
  AggregationHeader no_data = AllreduceRequest();
  no_data.has_data = false;
  AggregationHeader bcast = AllreduceRequest();
  bcast.collective = CollectiveType::kBcast;
  bcast.op = kNoReduceOp;
  AggregationHeader bare_bcast = bcast;
  bare_bcast.has_data = false;
  AggregationHeader bare_bcast_result = bare_bcast;
  bare_bcast_result.type = AggregationMessageType::kResult;
  AggregationHeader bare_bcast_repair = bare_bcast;
  bare_bcast_repair.type = AggregationMessageType::kRepairRequest;
  AggregationHeader last_seq = bare_bcast;
  last_seq.seq = UINT64_MAX - 1;

  struct Case {
    std::string name;
    std::vector<uint8_t> message;
    R expected;
  };
  const std::vector<Case> cases = {
      {"valid", ValidMessage(), R::kOk},
      {"valid barrier", ValidMessage(Barrier()), R::kOk},
      {"barrier with has_data and no elements", ValidMessage(barrier_with_data), R::kOk},
      {"barrier with a dtype and op", WithByte(WithByte(ValidMessage(Barrier()), 3, 11), 4, 1),
       R::kOk},
      {"bcast without op", ValidMessage(bcast), R::kOk},
      {"bcast with an op", WithByte(ValidMessage(bcast), 4, 5), R::kOk},
      {"empty", {}, R::kTruncated},
      {"39 bytes", Resized(ValidMessage(), 39), R::kTruncated},
      {"version 0", WithByte(ValidMessage(), 0, 0), R::kBadVersion},
      {"version 2", WithByte(ValidMessage(), 0, 2), R::kBadVersion},
      {"type 0", WithByte(ValidMessage(), 1, 0), R::kBadType},
      {"type 5", WithByte(ValidMessage(), 1, 5), R::kBadType},
      {"collective 0", WithByte(ValidMessage(), 2, 0), R::kBadCollective},
      {"collective 5", WithByte(ValidMessage(), 2, 5), R::kBadCollective},
      {"allreduce without dtype", WithByte(ValidMessage(), 3, 0), R::kBadDataType},
      {"bcast without dtype", WithByte(ValidMessage(bcast), 3, 0), R::kBadDataType},
      {"dtype 18", WithByte(ValidMessage(), 3, 18), R::kBadDataType},
      {"barrier with dtype 200", WithByte(ValidMessage(Barrier()), 3, 200), R::kBadDataType},
      {"allreduce without op", WithByte(ValidMessage(), 4, 0), R::kBadReduceOp},
      {"reduce without op", WithByte(WithByte(ValidMessage(), 2, 2), 4, 0), R::kBadReduceOp},
      {"op 13", WithByte(ValidMessage(), 4, 13), R::kBadReduceOp},
      {"bcast with op 13", WithByte(ValidMessage(bcast), 4, 13), R::kBadReduceOp},
      {"fp32 band", WithByte(ValidMessage(), 4, 5), R::kOpNotAllowed},
      {"fp32 minloc", WithByte(ValidMessage(), 4, 11), R::kOpNotAllowed},
      {"reduce fp32 lxor", WithByte(WithByte(ValidMessage(), 2, 2), 4, 10), R::kOpNotAllowed},
      {"delivery 0", WithByte(ValidMessage(), 5, 0), R::kBadDelivery},
      {"delivery 5", WithByte(WithByte(ValidMessage(), 2, 2), 5, 5), R::kBadDelivery},
      {"allreduce to_root", WithByte(ValidMessage(), 5, 3), R::kBadDelivery},
      {"barrier to_root", WithByte(ValidMessage(Barrier()), 5, 3), R::kBadDelivery},
      {"allreduce root_data", WithByte(ValidMessage(), 5, 4), R::kBadDelivery},
      {"bcast root_data", WithByte(ValidMessage(bcast), 5, 4), R::kBadDelivery},
      {"reduce root_data", WithByte(WithByte(ValidMessage(), 2, 2), 5, 4), R::kOk},
      {"status 7", WithByte(ValidMessage(), 6, 7), R::kBadStatus},
      {"status 255", WithByte(ValidMessage(), 6, 255), R::kBadStatus},
      {"flags 0x07", WithByte(ValidMessage(), 7, 0x07), R::kBadFlags},
      {"flag 0x04", WithByte(ValidMessage(no_data), 7, 0x04), R::kBadFlags},
      {"has_tag and 16 bytes after the elements",
       WithByte(Resized(ValidMessage(), 56 + kAggregationTagSize), 7, 0x03), R::kOk},
      {"has_tag, no tag", WithByte(ValidMessage(), 7, 0x03), R::kBadPayloadLength},
      {"has_tag, a tag one byte short",
       WithByte(Resized(ValidMessage(), 55 + kAggregationTagSize), 7, 0x03),
       R::kBadPayloadLength},
      {"a tag without has_tag", Resized(ValidMessage(), 56 + kAggregationTagSize),
       R::kBadPayloadLength},
      {"flag 0x80", WithByte(ValidMessage(no_data), 7, 0x80), R::kBadFlags},
      {"reserved byte 10", WithByte(ValidMessage(), 10, 1), R::kReservedNotZero},
      {"reserved byte 11", WithByte(ValidMessage(), 11, 0x80), R::kReservedNotZero},
      {"repeat on a bcast request without data", WithByte(ValidMessage(bare_bcast), 31, 7),
       R::kOk},
      {"repeat 65535", WithByte(WithByte(ValidMessage(bare_bcast), 30, 0xFF), 31, 0xFF),
       R::kOk},
      {"repeat 65536", WithByte(ValidMessage(bare_bcast), 29, 1), R::kBadRepeat},
      {"repeat reaching the last seq", WithByte(ValidMessage(last_seq), 31, 1), R::kOk},
      {"repeat past the last seq", WithByte(ValidMessage(last_seq), 31, 2), R::kBadRepeat},
      {"repeat on an allreduce", WithByte(ValidMessage(no_data), 31, 1), R::kBadRepeat},
      {"repeat on a bcast with data", WithByte(ValidMessage(bcast), 31, 1), R::kBadRepeat},
      {"repeat on a bcast result", WithByte(ValidMessage(bare_bcast_result), 31, 1),
       R::kBadRepeat},
      {"repeat on a repair request", WithByte(ValidMessage(bare_bcast_repair), 28, 1),
       R::kBadRepeat},
      {"repeat on a barrier", WithByte(ValidMessage(Barrier()), 31, 1), R::kBadRepeat},
      {"barrier with count 1", WithByte(ValidMessage(Barrier()), 27, 1), R::kBarrierWithCount},
      {"count 2^28 + 1",
       WithByte(WithByte(ValidMessage(no_data), 24, 0x10), 27, 0x01), R::kCountTooLarge},
      {"count 2^32 - 1 with data",
       WithByte(WithByte(WithByte(WithByte(ValidMessage(), 24, 0xFF), 25, 0xFF), 26, 0xFF), 27,
                0xFF),
       R::kCountTooLarge},
      {"one element byte missing", Resized(ValidMessage(), 55), R::kBadPayloadLength},
      {"one element byte too many", Resized(ValidMessage(), 57), R::kBadPayloadLength},
      {"elements without has_data", WithByte(ValidMessage(), 7, 0), R::kBadPayloadLength},
      {"has_data without elements", WithByte(ValidMessage(no_data), 7, 1), R::kBadPayloadLength},
      {"count disagrees with elements", WithByte(ValidMessage(), 27, 5), R::kBadPayloadLength},
      {"dtype disagrees with elements", WithByte(ValidMessage(), 3, 12), R::kBadPayloadLength},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AggregationHeader header;
    std::span<const uint8_t> elements;
    EXPECT_EQ(ParseAggregationMessage(c.message, &header, &elements), c.expected);
    const absl::StatusOr<AggregationHeader> decoded = DecodeAggregationMessage(c.message);
    if (c.expected == R::kOk) {
      EXPECT_TRUE(decoded.ok()) << decoded.status();
      continue;
    }
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageContains(decoded.status(), AggregationParseResultName(c.expected)))
        << decoded.status();
    // The header alone passes exactly when only the payload length is wrong.
    const R header_only = ParseAggregationHeader(c.message, &header);
    EXPECT_EQ(header_only, c.expected == R::kBadPayloadLength ? R::kOk : c.expected);
  }
}

TEST(AggregationHeader, HeaderParseIgnoresWhatFollows) {
  std::vector<uint8_t> first_packet = ValidMessage();
  first_packet.resize(kAggregationHeaderSize + 6);  // the rest comes in later packets
  AggregationHeader h;
  EXPECT_EQ(ParseAggregationHeader(first_packet, &h), AggregationParseResult::kOk);
  EXPECT_EQ(h, AllreduceRequest());
  EXPECT_EQ(AggregationPayloadSize(h), 16u);
  EXPECT_EQ(ParseAggregationMessage(first_packet, &h, nullptr),
            AggregationParseResult::kBadPayloadLength);
}

TEST(AggregationHeader, EncoderRejectsInvalidHeadersAndShortBuffers) {
  AggregationHeader bad = AllreduceRequest();
  bad.op = ReduceOp::kBand;
  std::vector<uint8_t> out(100);
  absl::StatusOr<size_t> n = EncodeAggregationHeader(bad, out);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(n.status(), "op_not_allowed")) << n.status();

  AggregationHeader versions = AllreduceRequest();
  versions.version = 2;
  EXPECT_EQ(ValidateAggregationHeader(versions), AggregationParseResult::kBadVersion);
  AggregationHeader barrier = Barrier();
  barrier.count = 1;
  EXPECT_EQ(ValidateAggregationHeader(barrier), AggregationParseResult::kBarrierWithCount);
  AggregationHeader huge = AllreduceRequest();
  huge.count = kMaxAggregationCount + 1;
  EXPECT_EQ(ValidateAggregationHeader(huge), AggregationParseResult::kCountTooLarge);
  AggregationHeader odd_enum = AllreduceRequest();
  odd_enum.status = static_cast<AggregationStatus>(9);
  EXPECT_EQ(ValidateAggregationHeader(odd_enum), AggregationParseResult::kBadStatus);
  AggregationHeader repeated_allreduce = AllreduceRequest();
  repeated_allreduce.repeat = 3;
  EXPECT_EQ(ValidateAggregationHeader(repeated_allreduce), AggregationParseResult::kBadRepeat);
  EXPECT_EQ(EncodeAggregationHeader(repeated_allreduce, out).status().code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<uint8_t> small(39);
  EXPECT_EQ(EncodeAggregationHeader(AllreduceRequest(), small).status().code(),
            absl::StatusCode::kOutOfRange);
  const std::vector<uint8_t> elements(16);
  EXPECT_EQ(EncodeAggregationMessage(AllreduceRequest(), std::span(elements).first(12), out)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> short_out(55);
  EXPECT_EQ(EncodeAggregationMessage(AllreduceRequest(), elements, short_out).status().code(),
            absl::StatusCode::kOutOfRange);
  short_out.push_back(0);
  EXPECT_TRUE(EncodeAggregationMessage(AllreduceRequest(), elements, short_out).ok());
}

TEST(AggregationHeader, NamesAreDistinct) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kNumAggregationParseResults; ++i) {
    const std::string_view name =
        AggregationParseResultName(static_cast<AggregationParseResult>(i));
    EXPECT_NE(name, "invalid");
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_EQ(AggregationParseResultName(
                static_cast<AggregationParseResult>(kNumAggregationParseResults)),
            "invalid");
  EXPECT_EQ(AggregationMessageTypeName(AggregationMessageType::kRepairRequest), "repair_request");
  EXPECT_EQ(CollectiveTypeName(CollectiveType::kBarrier), "barrier");
  EXPECT_EQ(DeliveryModeName(DeliveryMode::kRcTree), "rc_tree");
  EXPECT_EQ(DeliveryModeName(DeliveryMode::kRootData), "root_data");
  EXPECT_EQ(DeliveryModeName(static_cast<DeliveryMode>(5)), "invalid");
  EXPECT_EQ(AggregationStatusName(AggregationStatus::kResultGone), "result_gone");
  EXPECT_EQ(AggregationStatusName(static_cast<AggregationStatus>(7)), "invalid");
  EXPECT_EQ(CollectiveTypeName(static_cast<CollectiveType>(0)), "invalid");
}

}  // namespace
}  // namespace netfold::proto
