#include "host/link/verbs_buffers.h"

#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace netfold::host {
namespace {

TEST(VerbsBuffers, WrIdsRoundTripAndForeignIdsAreRejected) {
  for (WrKind k : {WrKind::kRcSend, WrKind::kRcRecv, WrKind::kUdRecv}) {
    for (uint32_t i : {0u, 1u, 255u, 0xffffffffu}) {
      std::optional<WrId> id = DecodeWrId(MakeWrId(k, i));
      ASSERT_TRUE(id.has_value());
      EXPECT_EQ(id->kind, k);
      EXPECT_EQ(id->index, i);
    }
  }
  EXPECT_FALSE(DecodeWrId(0).has_value());              // kind 0
  EXPECT_FALSE(DecodeWrId(uint64_t{9} << 56).has_value());  // unknown kind
  EXPECT_FALSE(DecodeWrId(MakeWrId(WrKind::kRcSend, 1) | (uint64_t{1} << 40)).has_value());
}

TEST(VerbsBuffers, SlotsAreDistinctAlignedAndInsideTheRegion) {
  BufferSlots slots(8, 4136);  // 40 + 4096: not a multiple of 64
  EXPECT_EQ(slots.count(), 8u);
  EXPECT_EQ(slots.slot_bytes(), 4136u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots.base()) % 4096, 0u);
  std::set<uintptr_t> seen;
  for (uint32_t i = 0; i < 8; ++i) {
    std::span<uint8_t> s = slots.Slot(i);
    EXPECT_EQ(s.size(), 4136u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % 64, 0u);
    EXPECT_GE(s.data(), slots.base());
    EXPECT_LE(s.data() + s.size(), slots.base() + slots.total_bytes());
    seen.insert(reinterpret_cast<uintptr_t>(s.data()));
    if (i > 0) {
      EXPECT_GE(s.data(), slots.Slot(i - 1).data() + 4136);  // no overlap
    }
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(VerbsBuffers, AcquireUntilEmptyThenReleaseMakesRoom) {
  BufferSlots slots(3, 64);
  std::set<uint32_t> lent;
  for (int i = 0; i < 3; ++i) {
    std::optional<uint32_t> s = slots.Acquire();
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(lent.insert(*s).second);
  }
  EXPECT_EQ(slots.num_lent(), 3u);
  EXPECT_FALSE(slots.Acquire().has_value());
  EXPECT_TRUE(slots.Release(1));
  EXPECT_EQ(slots.Acquire(), 1u);
}

TEST(VerbsBuffers, ReleasingASlotNotLentChangesNothing) {
  BufferSlots slots(2, 64);
  EXPECT_FALSE(slots.Release(0));  // never lent
  EXPECT_FALSE(slots.Release(7));  // out of range
  std::optional<uint32_t> s = slots.Acquire();
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(slots.Release(*s));
  EXPECT_FALSE(slots.Release(*s));  // a duplicate completion
  EXPECT_EQ(slots.num_lent(), 0u);
  EXPECT_TRUE(slots.Acquire().has_value());
  EXPECT_TRUE(slots.Acquire().has_value());
  EXPECT_FALSE(slots.Acquire().has_value());
}

}  // namespace
}  // namespace netfold::host
