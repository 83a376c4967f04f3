// The verbs leaf link's own behaviour. Without an RDMA device only the
// refusals run (bad options, no device: the reason); the device test runs
// where an RDMA NIC or Soft-RoCE port holds an IPv4 RoCE v2 GID and skips
// with the reason elsewhere.
#include "host/link/verbs_leaf_link.h"

#include <infiniband/verbs.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/link/verbs_address.h"
#include "host/link/verbs_resources.h"

namespace netfold::host {
namespace {

using ::testing::HasSubstr;

int NumDevices() {
  int n = 0;
  VerbsDeviceList list(ibv_get_device_list(&n));
  return list ? n : 0;
}

// The IPv4 address of the first RoCE v2 GID of any active port.
std::optional<std::string> FindRoceV2Address() {
  int n = 0;
  VerbsDeviceList list(ibv_get_device_list(&n));
  for (int d = 0; list && d < n; ++d) {
    VerbsContext ctx(ibv_open_device(list.get()[d]));
    if (!ctx) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx.get(), &attr) != 0) continue;
    for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
      ibv_port_attr pattr{};
      if (ibv_query_port(ctx.get(), port, &pattr) != 0 || pattr.state != IBV_PORT_ACTIVE) continue;
      for (int i = 0; i < pattr.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx.get(), port, static_cast<uint32_t>(i), &e, 0) != 0) continue;
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        Gid g;
        std::memcpy(g.data(), e.gid.raw, g.size());
        if (std::optional<uint32_t> ip = Ipv4FromGid(g)) {
          return absl::StrFormat("%d.%d.%d.%d", *ip >> 24, (*ip >> 16) & 0xff, (*ip >> 8) & 0xff,
                                 *ip & 0xff);
        }
      }
    }
  }
  return std::nullopt;
}

TEST(VerbsLeafLink, BadOptionsAreRefusedBeforeADeviceIsTouched) {
  VerbsLinkOptions o;
  o.local_address = "rxe0";
  EXPECT_EQ(VerbsLeafLink::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.local_address = "10.0.0.1";
  o.send_queue = 0;
  EXPECT_EQ(VerbsLeafLink::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VerbsLeafLink, WithoutAnRdmaDeviceCreateSaysWhy) {
  if (NumDevices() > 0) GTEST_SKIP() << "this host has an RDMA device";
  VerbsLinkOptions o;
  o.local_address = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<VerbsLeafLink>> link = VerbsLeafLink::Create(o);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(link.status().message()), HasSubstr("no RDMA device"));
  EXPECT_THAT(std::string(link.status().message()), HasSubstr("docs/verbs.md"));
}

// On a device: the QPs reach RTS toward a peer that never answers (this
// host's own address, a QPN nobody has), a multicast group attaches, and
// the request that gets no ACK fails the link after the NIC's retries, as
// Unavailable, "stopped acknowledging"; later requests are refused.
TEST(VerbsLeafLink, OnADeviceAnUnansweredRequestFailsTheLinkWithTheReason) {
  std::optional<std::string> address = FindRoceV2Address();
  if (!address) {
    GTEST_SKIP() << "no RDMA device with an active port and an IPv4 RoCE v2 GID (found "
                 << NumDevices() << " devices); Soft-RoCE gives one: modprobe rdma_rxe && rdma "
                 << "link add rxe0 type rxe netdev IFACE (docs/verbs.md)";
  }
  VerbsLinkOptions o;
  o.local_address = *address;
  o.ack_timeout = absl::Milliseconds(1);
  absl::StatusOr<std::unique_ptr<VerbsLeafLink>> created = VerbsLeafLink::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  VerbsLeafLink& link = **created;
  EXPECT_EQ(link.address(), *address + ":4791");
  EXPECT_GE(link.max_datagram_payload(), 256u);
  EXPECT_LE(link.max_datagram_payload(), 4096u);
  EXPECT_NE(link.qpn(), 0u);

  LeafPeer peer;
  peer.remote = {*transport::ParseIpv4Address(*address), 4791};
  peer.remote_qpn = 0xfffff0;
  peer.rq_psn = 100;
  peer.sq_psn = 200;
  peer.pkey = 0xffff;
  peer.qkey = 0x11;
  peer.ack_timeout = absl::Milliseconds(1);
  ASSERT_TRUE(link.Connect(peer).ok());
  EXPECT_EQ(link.Connect(peer).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(link.AttachMulticast({0xefff0707, 4791}, peer.remote).ok());
  EXPECT_EQ(link.AttachMulticast({0x0a000001, 4791}, peer.remote).code(),
            absl::StatusCode::kInvalidArgument);

  std::vector<uint8_t> request(64, 0x5a);
  ASSERT_TRUE(link.PostRequest(request, {}, {}).ok());
  std::vector<uint8_t> too_big(o.max_message + 1);
  EXPECT_EQ(link.PostRequest(too_big, {}, {}).code(), absl::StatusCode::kInvalidArgument);
  int delivered = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (link.status().ok() && absl::Now() < deadline) {
    link.Progress(absl::Milliseconds(50), [&](const LinkMessage&) { ++delivered; });
  }
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(link.status().message()), HasSubstr("stopped acknowledging"));
  EXPECT_EQ(link.PostRequest(request, {}, {}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(link.stats().tx_bytes, 64u);
}

}  // namespace
}  // namespace netfold::host
