#include "host/link/verbs_address.h"

#include <arpa/inet.h>

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::host {
namespace {

using ::testing::HasSubstr;

TEST(VerbsAddress, Ipv4MappedGidRoundTrips) {
  const Gid g = Ipv4MappedGid(0x0a000102);
  EXPECT_EQ(FormatGid(g), "::ffff:10.0.1.2");
  ASSERT_TRUE(Ipv4FromGid(g).has_value());
  EXPECT_EQ(*Ipv4FromGid(g), 0x0a000102u);
  // The multicast group of a switch maps the same way.
  EXPECT_EQ(FormatGid(Ipv4MappedGid(0xef010203)), "::ffff:239.1.2.3");
}

TEST(VerbsAddress, NonMappedGidsHaveNoIpv4) {
  absl::StatusOr<Gid> link_local = ParseGid("fe80::5054:ff:fe12:3456");
  ASSERT_TRUE(link_local.ok());
  EXPECT_FALSE(Ipv4FromGid(*link_local).has_value());
  absl::StatusOr<Gid> compat = ParseGid("::10.0.0.1");  // IPv4-compatible, not mapped
  ASSERT_TRUE(compat.ok());
  EXPECT_FALSE(Ipv4FromGid(*compat).has_value());
}

TEST(VerbsAddress, ParseGidTakesIpv6AndIpv4) {
  absl::StatusOr<Gid> a = ParseGid("::ffff:192.168.1.7");
  absl::StatusOr<Gid> b = ParseGid("192.168.1.7");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(ParseGid("10.0.0").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseGid("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ParseGid("rxe0").status().message()), HasSubstr("'rxe0'"));
}

// A Soft-RoCE port's table as the kernel fills it: per address a RoCE v1
// and a RoCE v2 entry, link-local IPv6 first.
std::vector<GidEntry> RxeTable() {
  std::vector<GidEntry> t;
  auto add = [&](uint32_t index, const char* text, GidType type) {
    GidEntry e;
    e.index = index;
    e.gid = *ParseGid(text);
    e.type = type;
    t.push_back(e);
  };
  add(0, "fe80::5054:ff:fe12:3456", GidType::kRoceV1);
  add(1, "fe80::5054:ff:fe12:3456", GidType::kRoceV2);
  add(2, "::ffff:10.0.0.1", GidType::kRoceV1);
  add(3, "::ffff:10.0.0.1", GidType::kRoceV2);
  return t;
}

TEST(VerbsAddress, SelectsTheRoceV2EntryOfTheAddress) {
  absl::StatusOr<uint32_t> index = SelectGidIndex(RxeTable(), 0x0a000001, std::nullopt);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(*index, 3u);  // not 2, the RoCE v1 entry of the same address
}

TEST(VerbsAddress, AnAddressNotInTheTableIsNotFoundAndTheTableIsListed) {
  absl::StatusOr<uint32_t> index = SelectGidIndex(RxeTable(), 0x0a000002, std::nullopt);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("10.0.0.2"));
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("[3] ::ffff:10.0.0.1 RoCE v2"));
  EXPECT_EQ(SelectGidIndex({}, 0x0a000001, std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(VerbsAddress, AForcedIndexMustExistAndBeRoceV2) {
  EXPECT_EQ(*SelectGidIndex(RxeTable(), 0x0a000001, 1u), 1u);  // forced wins over the address
  absl::StatusOr<uint32_t> v1 = SelectGidIndex(RxeTable(), 0x0a000001, 2u);
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(v1.status().message()), HasSubstr("RoCE v1"));
  EXPECT_EQ(SelectGidIndex(RxeTable(), 0x0a000001, 9u).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(VerbsAddress, PkeyIndexFollowsTheIbtaMatchingRules) {
  const std::vector<uint16_t> roce = {htons(0xffff)};  // a RoCE port: the default only
  EXPECT_EQ(*FindPkeyIndex(roce, 0xffff), 0u);
  EXPECT_EQ(*FindPkeyIndex(roce, 0x7fff), 0u);  // limited member of the default partition
  absl::StatusOr<uint16_t> job = FindPkeyIndex(roce, 0x8001);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("default_partition"));

  const std::vector<uint16_t> ib = {htons(0xffff), 0, htons(0x0005), htons(0x8007)};
  EXPECT_EQ(*FindPkeyIndex(ib, 0x8007), 3u);
  EXPECT_EQ(*FindPkeyIndex(ib, 0x0007), 3u);  // limited joins a full member
  // A full member cannot use a table entry that is only a limited member.
  EXPECT_EQ(FindPkeyIndex(ib, 0x8005).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*FindPkeyIndex(ib, 0x0005), 2u);
}

}  // namespace
}  // namespace netfold::host
