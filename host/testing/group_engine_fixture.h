// The scripted leaf and the fixture of the group engine's tests
// (host/group_engine_test.cc, group_engine_repair_test.cc,
// group_engine_blocks_test.cc): a
// RequestSender that records every request (or refuses the next ones),
// and a fixture with small parameters, a fake clock and Answer(), which
// answers a recorded request as the switches would.
#ifndef NETFOLD_HOST_TESTING_GROUP_ENGINE_FIXTURE_H_
#define NETFOLD_HOST_TESTING_GROUP_ENGINE_FIXTURE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "host/group_engine.h"
#include "proto/aggregation_header.h"

namespace netfold::host::testing {

struct FakeLeaf : RequestSender {
  std::vector<std::vector<uint8_t>> sent;
  // What the engine told it to let go of (ReleaseElements), in order.
  std::vector<std::span<const uint8_t>> released;
  int refuse_next = 0;
  void ReleaseElements(std::span<const uint8_t> memory) override { released.push_back(memory); }
  absl::Status SendRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                           std::span<const uint8_t> tag) override {
    if (refuse_next > 0) {
      --refuse_next;
      return absl::ResourceExhaustedError("send queue full");
    }
    sent.emplace_back(header.begin(), header.end());
    sent.back().insert(sent.back().end(), elements.begin(), elements.end());
    sent.back().insert(sent.back().end(), tag.begin(), tag.end());
    return absl::OkStatus();
  }
  proto::AggregationHeader Header(size_t i) const {
    return *proto::DecodeAggregationMessage(sent.at(i));
  }
  // Request `i` asks for chunk `seq` again.
  ::testing::AssertionResult IsRepairOf(size_t i, uint64_t seq) const {
    const proto::AggregationHeader h = Header(i);
    if (h.type != proto::AggregationMessageType::kRepairRequest) {
      return ::testing::AssertionFailure() << "request " << i << " is not a repair";
    }
    if (h.seq != seq) {
      return ::testing::AssertionFailure() << "request " << i << " repairs seq " << h.seq
                                           << ", not " << seq;
    }
    return ::testing::AssertionSuccess();
  }
};

class GroupEngineTest : public ::testing::Test {
 protected:
  GroupParams Params() {
    GroupParams p;
    p.tree_id = 1;
    p.group_id = 9;
    p.epoch = 2;
    p.rank = 3;
    p.num_slots = 2;
    p.slot_bytes = 16;  // four int32 per chunk
    p.repair_after = absl::Milliseconds(10);
    p.op_timeout = absl::Seconds(1);
    return p;
  }
  // Answers request `i` with `values` (or with an error status); with
  // `arrived_ns`, the time the caller read for its arrival.
  void Answer(GroupEngine& e, size_t i, std::vector<int32_t> values,
              proto::AggregationStatus status = proto::AggregationStatus::kOk,
              std::optional<int64_t> arrived_ns = std::nullopt) {
    proto::AggregationHeader h = leaf_.Header(i);
    h.type = proto::AggregationMessageType::kResult;
    h.status = status;
    h.has_data = status == proto::AggregationStatus::kOk && !values.empty();
    e.OnMessage(h,
                {reinterpret_cast<const uint8_t*>(values.data()),
                 h.has_data ? values.size() * 4 : 0},
                {}, arrived_ns);
  }
  FakeClock clock_;
  FakeLeaf leaf_;
};

}  // namespace netfold::host::testing

#endif  // NETFOLD_HOST_TESTING_GROUP_ENGINE_FIXTURE_H_
