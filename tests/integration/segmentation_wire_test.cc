// UDP segmentation batches on a real wire: a sender's batch cut by the
// kernel (a veth end that segments in software, as a NIC without UDP
// segmentation offload makes it) leaves as datagrams whose IPv4
// identifications are 0, 1, 2, ...; each datagram's ICRC is right against
// its real IPv4 header, which is what a RoCE NIC and Wireshark check; and
// a netfold receiver, which cannot see the header, accepts every one.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"
#include "tests/netns/netns.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold {
namespace {

using testing::NetnsTestbed;
using transport::Ipv4Endpoint;
using transport::PacketBuffer;

constexpr uint32_t kSenderIp = 0xC6124D01;    // 198.18.77.1
constexpr uint32_t kReceiverIp = 0xC6124D02;  // 198.18.77.2
constexpr size_t kPackets = 6;
constexpr size_t kPayload = 2000;

// A UD SEND_ONLY of kPayload bytes to QP 0x4242, ICRC for identification 0.
PacketBuffer* UdPacket(transport::Port& port, const Ipv4Endpoint& dst, uint32_t psn) {
  PacketBuffer* p = port.pool().Alloc();
  proto::RocePacketSpec spec;
  spec.bth.opcode = proto::BthOpcode::kUdSendOnly;
  spec.bth.dest_qp = 0x4242;
  spec.bth.psn = psn;
  spec.deth = proto::Deth{.qkey = 0x1234, .src_qp = 0x99};
  std::vector<uint8_t> message(kPayload, static_cast<uint8_t>(psn));
  const proto::IcrcAddresses addrs{port.local().ip, dst.ip, port.local().port, dst.port};
  auto n = proto::BuildRocePacket(spec, message, addrs, {p->data(), p->capacity()});
  EXPECT_TRUE(n.ok()) << n.status();
  p->set_len(static_cast<uint32_t>(n.ok() ? *n : 0));
  p->dst = dst;
  return p;
}

TEST(SegmentationOnTheWire, EverySegmentCarriesItsIdentificationAndARightIcrc) {
  if (std::string why = testing::NetnsUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  NetnsTestbed bed("sg");
  absl::StatusOr<std::string> ns = bed.AddNamespace();
  ASSERT_TRUE(ns.ok()) << ns.status();
  absl::StatusOr<NetnsTestbed::Veth> veth = bed.AddVeth(*ns, "198.18.77.2/24", 4200);
  ASSERT_TRUE(veth.ok()) << veth.status();
  // The sender's end cuts batches itself (gso_max_segs 1), as a device
  // without segmentation offload makes the kernel do.
  for (const std::string& cmd :
       {"ip addr add 198.18.77.1/24 dev " + veth->root_if,
        "ip link set dev " + veth->root_if + " gso_max_segs 1"}) {
    testing::CommandResult r = testing::RunCommand(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
  }

  int raw = -1;
  std::unique_ptr<transport::UdpPort> receiver;
  std::unique_ptr<transport::RoceEndpoint> endpoint;
  ASSERT_TRUE(bed.RunIn(*ns, [&] {
    raw = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_IP);
    ll.sll_ifindex = static_cast<int>(if_nametoindex(veth->ns_if.c_str()));
    if (raw >= 0 && bind(raw, reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) != 0) {
      close(raw);
      raw = -1;
    }
    auto port = transport::UdpPort::Create({.local = {kReceiverIp, 0}});
    if (port.ok()) receiver = std::move(*port);
  }).ok());
  ASSERT_GE(raw, 0) << "no packet socket in the namespace";
  ASSERT_NE(receiver, nullptr);
  const Ipv4Endpoint to = receiver->local();
  transport::UdpPort* receiver_port = receiver.get();
  endpoint = std::make_unique<transport::RoceEndpoint>(std::move(receiver), RealClock());

  auto sender = transport::UdpPort::Create({.local = {kSenderIp, 0}});
  ASSERT_TRUE(sender.ok()) << sender.status();
  std::vector<PacketBuffer*> batch;
  for (uint32_t i = 0; i < kPackets; ++i) batch.push_back(UdPacket(**sender, to, 100 + i));
  // The first send may wait for ARP: repeat until the wire shows a batch.
  std::vector<std::vector<uint8_t>> frames;
  Deadline deadline(RealClock(), absl::Seconds(10));
  while (frames.size() < kPackets && !deadline.Expired()) {
    if (frames.empty() && batch.empty()) {
      for (uint32_t i = 0; i < kPackets; ++i) batch.push_back(UdPacket(**sender, to, 100 + i));
    }
    if (!batch.empty()) {
      ASSERT_EQ((*sender)->SendBurst(batch), batch.size());
      batch.clear();
    }
    pollfd pfd{raw, POLLIN, 0};
    while (frames.size() < kPackets && poll(&pfd, 1, 200) > 0) {
      uint8_t frame[9000];
      const ssize_t n = recv(raw, frame, sizeof(frame), 0);
      // Ethernet + IPv4 + UDP to the receiver's port.
      if (n < 42 || frame[14 + 9] != IPPROTO_UDP) continue;
      if ((frame[14 + 22] << 8 | frame[14 + 23]) != to.port) continue;
      frames.emplace_back(frame, frame + n);
    }
    if (frames.size() < kPackets) frames.clear();  // a partial batch: ARP ate some
  }
  close(raw);
  ASSERT_EQ(frames.size(), kPackets) << "the batch never showed on the wire";
  EXPECT_EQ((*sender)->counters().tx_batched % kPackets, 0u);
  EXPECT_GE((*sender)->counters().tx_batched, kPackets);
  for (size_t i = 0; i < kPackets; ++i) {
    const std::vector<uint8_t>& f = frames[i];
    const std::span<const uint8_t> ip(f.data() + 14, proto::kIpv4HeaderSize);
    const std::span<const uint8_t> udp(f.data() + 14 + 20, proto::kUdpHeaderSize);
    const std::span<const uint8_t> payload(f.data() + 42, f.size() - 42);
    ASSERT_GT(payload.size(), proto::kIcrcSize);
    EXPECT_EQ(ip[4] << 8 | ip[5], static_cast<int>(i)) << "identification of segment " << i;
    EXPECT_EQ(ip[6] << 8 | ip[7], 0x4000) << "DF, no fragment offset";
    const uint32_t icrc = proto::LoadIcrc(payload.last<proto::kIcrcSize>());
    EXPECT_EQ(proto::ComputeIcrcIpv4(ip.first<proto::kIpv4HeaderSize>(),
                                     udp.first<proto::kUdpHeaderSize>(),
                                     payload.first(payload.size() - proto::kIcrcSize)),
              icrc)
        << "segment " << i << ": the ICRC a RoCE NIC computes over the real header";
  }
  // The netfold receiver (no IPv4 header in sight) accepts every segment
  // of every batch that reached it: none is dropped for its ICRC.
  Deadline settle(RealClock(), absl::Seconds(5));
  while (endpoint->counters().rx_packets.load() < kPackets && !settle.Expired()) {
    endpoint->Progress(absl::Milliseconds(50));
  }
  EXPECT_GE(endpoint->counters().rx_packets.load(), kPackets);
  EXPECT_EQ(endpoint->counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 0u);
  EXPECT_GE(endpoint->counters().ip_identification_solved.load() +
                receiver_port->counters().rx_batched.load(),
            kPackets - 1);
}

}  // namespace
}  // namespace netfold
