#include "transport/ipv4_endpoint.h"

#include "gtest/gtest.h"

namespace netfold::transport {
namespace {

TEST(Ipv4Endpoint, ParsesAndFormats) {
  auto ep = ParseIpv4Endpoint("127.0.0.1:4791");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->ip, 0x7f000001u);
  EXPECT_EQ(ep->port, 4791);
  EXPECT_EQ(ep->ToString(), "127.0.0.1:4791");
  auto bare = ParseIpv4Endpoint("10.1.2.3", 99);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->port, 99);
  EXPECT_EQ(FormatIpv4Address(0xe0000101), "224.0.1.1");
  EXPECT_TRUE((Ipv4Endpoint{0xe0000101, 1}).IsMulticast());
  EXPECT_TRUE((Ipv4Endpoint{0xefffffff, 1}).IsMulticast());
  EXPECT_FALSE((Ipv4Endpoint{0x7f000001, 1}).IsMulticast());
}

TEST(Ipv4Endpoint, RejectsJunk) {
  for (const char* bad : {"", ":", "1.2.3:4", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:-1",
                          "1.2.3.4:12x", "host:80", "256.1.1.1:1", "01.2.3.4.5:1"}) {
    EXPECT_FALSE(ParseIpv4Endpoint(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace netfold::transport
