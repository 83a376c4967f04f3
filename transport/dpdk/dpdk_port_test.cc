// The DPDK backend on real DPDK ports: net_af_packet on the root-side ends
// of veth pairs whose other ends sit in network namespaces, where kernel
// sockets play the hosts. ARP both ways, ICMP to the switch, RoCE RC
// between a kernel-socket host and the DPDK port (ICRC checked on both
// sides), multicast out of every link, ping and TCP between namespaces
// through the bridge, link faults on a DPDK link, and the errors a user
// sees for bad devices.
//
// Needs root, iproute2 and DPDK's EAL; every test skips with the reason
// otherwise. The EAL is initialised once for the whole process (DPDK allows
// nothing else); each test hot-plugs its own af_packet devices and removes
// them. Namespaces and veths are per test and always cleaned up
// (tests/netns/netns.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rte_dev.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "tests/netns/netns.h"
#include "transport/dpdk/dpdk_link.h"
#include "transport/dpdk/dpdk_port.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::transport::dpdk {
namespace {

using netfold::testing::CommandResult;
using netfold::testing::NetnsTestbed;

constexpr uint32_t kSwitchIp = 0xc61200fe;  // 198.18.0.254 (RFC 2544 benchmark range)
constexpr Ipv4Endpoint kGroup{0xef4e0203, 4791};  // 239.78.2.3
constexpr int kMtu = 4200;                      // room for 4096-byte RoCE payloads
// af_packet ring geometry for frames up to kMtu + 14: the frame size must
// divide the block size (the PMD assumes frames are contiguous).
constexpr char kAfPacketArgs[] = "blocksz=8192,framesz=8192,framecnt=256";

uint32_t HostIp(int i) { return 0xc6120001 + static_cast<uint32_t>(i); }

// What the whole binary needs, checked once: root, namespaces, the EAL.
const std::string& SkipReason() {
  static const std::string* reason = [] {
    std::string why = netfold::testing::NetnsUnavailableReason();
    if (why.empty()) {
      // A modest EAL: no hugepages, no PCI scan, 256 MB, one lcore.
      absl::StatusOr<DpdkRuntime*> rt = DpdkRuntime::Initialize(
          {"--no-huge", "--no-shconf", "--no-pci", "-m", "256", "-l", "0", "--no-telemetry",
           "--log-level=*:warning"});
      if (!rt.ok()) why = "DPDK EAL unavailable: " + rt.status().ToString();
    }
    return new std::string(why);
  }();
  return *reason;
}

// Polls a port on a thread of its own (the port belongs to it meanwhile),
// keeping what it receives.
class Poller {
 public:
  explicit Poller(Port& port) : port_(port), thread_([this] { Run(); }) {}
  ~Poller() { Stop(); }
  void Stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  struct Datagram {
    Ipv4Endpoint src;
    Ipv4Endpoint dst;
    std::vector<uint8_t> bytes;
  };
  // What was received so far (the poller freed the buffers).
  std::vector<Datagram> Received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

 private:
  void Run() {
    PacketBuffer* rx[32];
    while (!stop_) {
      const size_t n = port_.RecvBurst(rx, absl::Milliseconds(2));
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < n; ++i) {
        received_.push_back(
            {rx[i]->src, rx[i]->dst,
             std::vector<uint8_t>(rx[i]->data(), rx[i]->data() + rx[i]->len())});
        PacketPool::Free(rx[i]);
      }
    }
  }

  Port& port_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<Datagram> received_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

PacketBuffer* Datagram(Port& port, const Ipv4Endpoint& dst, uint32_t tag, size_t len = 64) {
  PacketBuffer* p = port.pool().Alloc();
  std::memset(p->data(), 0x5a, len);
  std::memcpy(p->data(), &tag, 4);
  p->set_len(static_cast<uint32_t>(len));
  p->dst = dst;
  return p;
}

uint32_t Tag(const uint8_t* data) {
  uint32_t t;
  std::memcpy(&t, data, 4);
  return t;
}

// Host namespaces h0..h(n-1) at 198.18.0.(i+1)/24, each behind a veth whose
// root end is link i of a DPDK port at 198.18.0.254.
class DpdkPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    bed_ = std::make_unique<NetnsTestbed>("nd");
  }

  void TearDown() override {
    // On failure, what the switch saw.
    if (HasFailure() && admin_ != nullptr) {
      admin_->ForEachCounter([](std::string_view name, uint64_t value) {
        if (value != 0) std::printf("  %.*s = %lu\n", static_cast<int>(name.size()), name.data(),
                                    static_cast<unsigned long>(value));
      });
      for (size_t i = 0; i < veths_.size(); ++i) {
        std::printf("%s", netfold::testing::RunCommand("ip -s link show " + veths_[i].root_if).output.c_str());
        std::printf("%s", Exec(static_cast<int>(i), "ip -s link show " + veths_[i].ns_if + "; ip neigh").output.c_str());
      }
    }
  }

  void MakeFabric(int num_hosts) {
    DpdkPortConfig config;
    config.port.local = {kSwitchIp, kDefaultRocePort};
    config.link_options.num_mbufs = 1023;
    config.link_options.mbuf_data_size = 8192;  // af_packet: >= framesz - 32
    for (int i = 0; i < num_hosts; ++i) {
      absl::StatusOr<std::string> ns = bed_->AddNamespace();
      ASSERT_TRUE(ns.ok()) << ns.status();
      absl::StatusOr<NetnsTestbed::Veth> v =
          bed_->AddVeth(*ns, absl::StrFormat("%s/24", FormatIpv4Address(HostIp(i))), kMtu);
      ASSERT_TRUE(v.ok()) << v.status();
      hosts_.push_back(*ns);
      veths_.push_back(*v);
      config.links.push_back(
          {.device = absl::StrFormat("net_af_packet%d,iface=%s,%s", next_vdev_++, v->root_if,
                                     kAfPacketArgs)});
    }
    absl::StatusOr<std::unique_ptr<FramePort>> port = CreateDpdkPort(config);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *std::move(port);
    admin_ = port_.get();
  }

  // A UdpPort (kernel sockets) living in host namespace i.
  std::unique_ptr<UdpPort> HostPort(int i) {
    std::unique_ptr<UdpPort> port;
    absl::Status s = bed_->RunIn(hosts_[i], [&] {
      auto p = UdpPort::Create({.local = {HostIp(i), kDefaultRocePort}});
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) port = *std::move(p);
    });
    EXPECT_TRUE(s.ok()) << s;
    return port;
  }

  // ICMP echo from host namespace `host`; the number of replies.
  int Ping(int host, const std::string& dst, int count, absl::Duration wait = absl::Seconds(2)) {
    absl::StatusOr<int> r = bed_->Ping(hosts_[host], dst, count, wait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }

  CommandResult Exec(int host, const std::string& command) {
    return bed_->Exec(hosts_[host], command, absl::Seconds(20));
  }

  std::unique_ptr<NetnsTestbed> bed_;
  std::vector<std::string> hosts_;
  std::vector<NetnsTestbed::Veth> veths_;
  std::unique_ptr<FramePort> port_;
  std::unique_ptr<RoceEndpoint> sw_;  // when a test runs RoCE over port_
  FramePort* admin_ = nullptr;        // port_, or the port inside sw_
  static int next_vdev_;
};

int DpdkPortTest::next_vdev_ = 0;

// Receives datagrams on a kernel-socket port until `n` arrived or 5 s.
std::vector<uint32_t> HostTags(Port& port, size_t n, const Ipv4Endpoint* want_src = nullptr,
                               std::vector<Ipv4Endpoint>* dsts = nullptr) {
  std::vector<uint32_t> tags;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[16];
  while (tags.size() < n && !deadline.Expired()) {
    const size_t got = port.RecvBurst(rx, absl::Milliseconds(20));
    for (size_t i = 0; i < got; ++i) {
      if (want_src == nullptr || rx[i]->src == *want_src) {
        tags.push_back(Tag(rx[i]->data()));
        if (dsts) dsts->push_back(rx[i]->dst);
      }
    }
    PacketPool::FreeBurst({rx, got});
  }
  return tags;
}

TEST_F(DpdkPortTest, ResolvesArpBothWays) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(1));
  {
    // The host asks for the switch (and pings it).
    Poller poller(*port_);
    EXPECT_EQ(Ping(0, "198.18.0.254", 2), 2);
    CommandResult r = Exec(0, "ip neigh show 198.18.0.254");
    EXPECT_NE(r.output.find(admin_->mac().ToString()), std::string::npos)
        << "neighbour table: " << r.output << " switch MAC " << admin_->mac().ToString();
  }
  EXPECT_GE(admin_->frame_counters().arp_requests_received, 1u);
  EXPECT_GE(admin_->frame_counters().arp_replies_sent, 1u);
  EXPECT_GE(admin_->frame_counters().icmp_echo_replies, 2u);

  // The switch asks for a host it has not heard from: flush what it
  // learned by sending to a second address on the host's link.
  ASSERT_EQ(Exec(0, "ip addr add 198.18.0.77/24 dev " + veths_[0].ns_if).exit_code, 0);
  std::unique_ptr<UdpPort> host;
  ASSERT_TRUE(bed_->RunIn(hosts_[0], [&] {
                auto p = UdpPort::Create({.local = {0xc612004d, kDefaultRocePort}});
                ASSERT_TRUE(p.ok()) << p.status();
                host = *std::move(p);
              }).ok());
  ASSERT_NE(host, nullptr);
  const uint64_t requests_before = admin_->frame_counters().arp_requests_sent;
  PacketBuffer* p = Datagram(*port_, host->local(), 42);
  ASSERT_EQ(port_->SendBurst({&p, 1}), 1u);
  std::vector<uint32_t> tags;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[8];
  const Ipv4Endpoint from_switch{kSwitchIp, kDefaultRocePort};
  while (tags.empty() && !deadline.Expired()) {
    PacketPool::FreeBurst({rx, port_->RecvBurst(rx, absl::Milliseconds(1))});
    const size_t n = host->RecvBurst(rx, absl::ZeroDuration());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(rx[i]->src, from_switch);
      tags.push_back(Tag(rx[i]->data()));
    }
    PacketPool::FreeBurst({rx, n});
  }
  EXPECT_EQ(tags, std::vector<uint32_t>{42});
  EXPECT_EQ(admin_->frame_counters().arp_requests_sent, requests_before + 1);
  EXPECT_GE(admin_->frame_counters().arp_replies_received, 1u);
}

// RC both ways between a host on kernel sockets (UdpPort + RoceEndpoint in
// its namespace) and a RoceEndpoint on the DPDK port; both check ICRCs.
void ExchangeRc(RoceEndpoint& host, RoceEndpoint& sw, int n, absl::Duration limit) {
  RcQueuePair* qh = *host.CreateRcQp();
  RcQueuePair* qs = *sw.CreateRcQp();
  RcQpAttributes attrs;
  attrs.path_mtu = 4096;
  attrs.timeout = absl::Milliseconds(8);
  attrs.remote = sw.local();
  attrs.remote_qpn = qs->qpn();
  ASSERT_TRUE(qh->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qh->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qh->Modify(QpState::kRts, attrs).ok());
  attrs.remote = host.local();
  attrs.remote_qpn = qh->qpn();
  ASSERT_TRUE(qs->Modify(QpState::kInit, attrs).ok());
  ASSERT_TRUE(qs->Modify(QpState::kRtr, attrs).ok());
  ASSERT_TRUE(qs->Modify(QpState::kRts, attrs).ok());

  auto size_s = [](int i) { return static_cast<size_t>(1 + (i * 4111) % 20000); };
  auto size_h = [](int i) { return static_cast<size_t>(3 + (i * 1999) % 9000); };
  int posted_s = 0, posted_h = 0, got_s = 0, got_h = 0;
  Deadline deadline(RealClock(), limit);
  while ((got_s < n || got_h < n) && !deadline.Expired()) {
    // The switch talks first, so it must resolve the host itself.
    while (posted_s < n &&
           qs->PostSend(std::vector<uint8_t>(size_s(posted_s), static_cast<uint8_t>(posted_s)),
                        posted_s).ok()) {
      ++posted_s;
    }
    while (posted_h < posted_s && posted_h < n &&
           qh->PostSend(std::vector<uint8_t>(size_h(posted_h), static_cast<uint8_t>(~posted_h)),
                        posted_h).ok()) {
      ++posted_h;
    }
    sw.Progress(absl::Milliseconds(1));
    host.Progress(absl::Milliseconds(1));
    RecvMessage m;
    while (qh->PeekRecv(&m)) {
      ASSERT_EQ(m.data.size(), size_s(got_h));
      ASSERT_EQ(m.data[0], static_cast<uint8_t>(got_h));
      ++got_h;
      qh->PopRecv();
    }
    while (qs->PeekRecv(&m)) {
      ASSERT_EQ(m.data.size(), size_h(got_s));
      ASSERT_EQ(m.data[m.data.size() - 1], static_cast<uint8_t>(~got_s));
      ++got_s;
      qs->PopRecv();
    }
  }
  EXPECT_EQ(got_h, n) << "switch -> host";
  EXPECT_EQ(got_s, n) << "host -> switch";
  EXPECT_EQ(qs->state(), QpState::kRts) << qs->error();
  EXPECT_EQ(qh->state(), QpState::kRts) << qh->error();
  SendCompletion c;
  int completed = 0;
  while (qs->PollSendCompletion(&c)) {
    EXPECT_TRUE(c.status.ok()) << c.status;
    ++completed;
  }
  EXPECT_GT(completed, 0);
}

TEST_F(DpdkPortTest, RcBothWaysWithKernelSocketHost) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(1));
  std::unique_ptr<UdpPort> host_port = HostPort(0);
  ASSERT_NE(host_port, nullptr);
  RoceEndpoint host(std::move(host_port), RealClock());
  sw_ = std::make_unique<RoceEndpoint>(std::move(port_), RealClock());
  RoceEndpoint& sw = *sw_;
  ASSERT_NO_FATAL_FAILURE(ExchangeRc(host, sw, 40, absl::Seconds(30)));
  // Every ICRC checked out on both sides: the DPDK port's frames carry
  // canonical headers, and the host's were accepted over their real ones.
  EXPECT_EQ(sw.counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 0u);
  EXPECT_EQ(host.counters().ParseDrops(proto::RoceParseResult::kBadIcrc), 0u);
  EXPECT_GT(sw.counters().rx_packets, 40u);
  EXPECT_GE(admin_->frame_counters().arp_requests_sent, 1u);
  std::printf("[          ] kernel frames needing ICRC translation: %lu of %lu\n",
              static_cast<unsigned long>(admin_->frame_counters().rx_icrc_normalized.load()),
              static_cast<unsigned long>(admin_->counters().rx_packets.load()));
}

TEST_F(DpdkPortTest, RcSurvivesLossOnTheDpdkLink) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(1));
  ASSERT_TRUE(admin_->SetLinkImpairment(0, *ParseImpairment("drop=0.05,dup=0.02,seed=5"),
                                        *ParseImpairment("drop=0.05,reorder=0.05,seed=6"))
                  .ok());
  std::unique_ptr<UdpPort> host_port = HostPort(0);
  ASSERT_NE(host_port, nullptr);
  RoceEndpoint host(std::move(host_port), RealClock());
  sw_ = std::make_unique<RoceEndpoint>(std::move(port_), RealClock());
  ASSERT_NO_FATAL_FAILURE(ExchangeRc(host, *sw_, 60, absl::Seconds(60)));
  EXPECT_GT(admin_->send_stage(0).counters().dropped_random, 0u);
  EXPECT_GT(admin_->receive_stage(0).counters().dropped_random, 0u);
}

TEST_F(DpdkPortTest, MulticastGoesOutOfEveryPortAndAcrossTheBridge) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(3));
  std::vector<std::unique_ptr<UdpPort>> hosts;
  for (int i = 0; i < 3; ++i) {
    hosts.push_back(HostPort(i));
    ASSERT_NE(hosts.back(), nullptr);
    // UdpPort opens a socket per group: in the host's namespace.
    absl::Status s;
    ASSERT_TRUE(bed_->RunIn(hosts_[i], [&] { s = hosts.back()->JoinMulticast(kGroup); }).ok());
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(port_->JoinMulticast(kGroup).ok());

  // From the switch: every host gets every datagram, addressed to the group.
  for (uint32_t t = 0; t < 5; ++t) {
    PacketBuffer* p = Datagram(*port_, kGroup, 100 + t);
    ASSERT_EQ(port_->SendBurst({&p, 1}), 1u);
  }
  const Ipv4Endpoint from_switch{kSwitchIp, kDefaultRocePort};
  for (int i = 0; i < 3; ++i) {
    std::vector<Ipv4Endpoint> dsts;
    EXPECT_EQ(HostTags(*hosts[i], 5, &from_switch, &dsts),
              (std::vector<uint32_t>{100, 101, 102, 103, 104}))
        << "host " << i;
    for (const Ipv4Endpoint& d : dsts) EXPECT_EQ(d, kGroup);
  }

  // From host 0: the switch (a member) receives it, and the bridge floods it
  // to hosts 1 and 2.
  {
    Poller poller(*port_);
    for (uint32_t t = 0; t < 5; ++t) {
      PacketBuffer* p = Datagram(*hosts[0], kGroup, 200 + t);
      ASSERT_EQ(hosts[0]->SendBurst({&p, 1}), 1u);
    }
    const Ipv4Endpoint from_host0{HostIp(0), kDefaultRocePort};
    for (int i = 1; i < 3; ++i) {
      EXPECT_EQ(HostTags(*hosts[i], 5, &from_host0), (std::vector<uint32_t>{200, 201, 202, 203, 204}))
          << "host " << i;
    }
    // (The switch also gets its own five back: it is a member, and
    // multicast loops back as with kernel sockets.)
    auto from_host0_only = [&] {
      std::vector<Poller::Datagram> out;
      for (auto& d : poller.Received()) {
        if (d.src == from_host0) out.push_back(d);
      }
      return out;
    };
    Deadline deadline(RealClock(), absl::Seconds(5));
    while (from_host0_only().size() < 5 && !deadline.Expired()) absl::SleepFor(absl::Milliseconds(5));
    poller.Stop();
    auto got = from_host0_only();
    ASSERT_EQ(got.size(), 5u);
    for (uint32_t t = 0; t < 5; ++t) {
      EXPECT_EQ(got[t].dst, kGroup);
      EXPECT_EQ(Tag(got[t].bytes.data()), 200 + t);
    }
    EXPECT_EQ(poller.Received().size(), 10u);
  }
  EXPECT_GE(admin_->bridge_counters().flooded_group, 5u);
  for (size_t l = 0; l < 3; ++l) EXPECT_GE(admin_->link_counters(l).tx_frames, 5u) << "link " << l;
}

// An af_packet socket takes every interface's frames until DPDK binds it
// to its own; on a busy host (a loopback flood while the port was made)
// they filled its 256-frame ring before anyone polled, and the host's next
// frames were dropped by the kernel. A link starts with its receive queue
// empty. Shown on a net_ring port, whose queue the test fills itself.
TEST_F(DpdkPortTest, FramesQueuedBeforeALinkStartedAreDiscarded) {
#ifndef NETFOLD_HAVE_NET_RING
  GTEST_SKIP() << "DPDK's net_ring driver (librte_net_ring) was not found at build time";
#else
  // Names of this run's own (a failed run leaves its objects behind).
  static int run = 0;
  const std::string name = absl::StrFormat("nf_ring%d", run++);
  rte_mempool* pool = rte_pktmbuf_pool_create((name + "_pool").c_str(), 63, 0, 0,
                                              RTE_PKTMBUF_HEADROOM + 256, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr);
  rte_ring* rx = rte_ring_create((name + "_rx").c_str(), 64, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* tx = rte_ring_create((name + "_tx").c_str(), 64, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(rx, nullptr);
  ASSERT_NE(tx, nullptr);
  const int port = rte_eth_from_rings(name.c_str(), &rx, 1, &tx, 1, SOCKET_ID_ANY);
  ASSERT_GE(port, 0);
  rte_eth_dev_info info;
  ASSERT_EQ(rte_eth_dev_info_get(static_cast<uint16_t>(port), &info), 0);
  absl::Cleanup release = [&] {
    rte_eth_dev_close(static_cast<uint16_t>(port));
    EXPECT_EQ(rte_dev_remove(info.device), 0);
    rte_ring_free(rx);
    rte_ring_free(tx);
    rte_mempool_free(pool);
  };
  auto enqueue = [&](int n) {
    for (int i = 0; i < n; ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(pool);
      ASSERT_NE(m, nullptr);
      std::memset(rte_pktmbuf_append(m, 60), i, 60);
      ASSERT_EQ(rte_ring_enqueue(rx, m), 0);
    }
  };
  ASSERT_NO_FATAL_FAILURE(enqueue(10));  // what a socket took before its bind
  {
    absl::StatusOr<std::unique_ptr<DpdkLink>> link = DpdkLink::Open("net_ring_" + name, {});
    ASSERT_TRUE(link.ok()) << link.status();
    uint64_t discarded = 0;
    (*link)->ForEachDeviceCounter([&](std::string_view name, uint64_t value) {
      if (name == "discarded_at_start") discarded = value;
    });
    EXPECT_EQ(discarded, 10u);
    PacketPool buffers({.num_buffers = 16, .buffer_size = 256});
    PacketBuffer* bufs[16];
    for (PacketBuffer*& b : bufs) b = buffers.Alloc();
    LinkCounters counters;
    EXPECT_EQ((*link)->RecvFrames(bufs, counters), 0u);
    ASSERT_NO_FATAL_FAILURE(enqueue(3));  // frames after the start are the link's
    EXPECT_EQ((*link)->RecvFrames(bufs, counters), 3u);
    PacketPool::FreeBurst(bufs);
  }
#endif
}

TEST_F(DpdkPortTest, PingAndTcpBetweenNamespacesThroughTheBridge) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(2));
  Poller poller(*port_);
  EXPECT_EQ(Ping(0, "198.18.0.2", 3), 3);
  EXPECT_GE(admin_->bridge_counters().learned, 2u);
  EXPECT_GE(admin_->bridge_counters().forwarded, 3u);

  // TCP (what MPI's out-of-band and BTL traffic uses): 1 MiB from h0 to h1.
  int listener = -1, client = -1;
  ASSERT_TRUE(bed_->RunIn(hosts_[1], [&] {
                listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                sockaddr_in sa{};
                sa.sin_family = AF_INET;
                sa.sin_addr.s_addr = htonl(HostIp(1));
                sa.sin_port = htons(5201);
                ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
                ASSERT_EQ(listen(listener, 1), 0);
              }).ok());
  ASSERT_TRUE(bed_->RunIn(hosts_[0], [&] {
                client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
              }).ok());
  ASSERT_GE(listener, 0);
  ASSERT_GE(client, 0);
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const size_t kBytes = 1 << 20;
  std::vector<uint8_t> sent(kBytes);
  for (size_t i = 0; i < kBytes; ++i) sent[i] = static_cast<uint8_t>(i * 31 + 7);
  std::vector<uint8_t> got;
  std::thread server([&] {
    pollfd pfd{listener, POLLIN, 0};
    if (poll(&pfd, 1, 5000) != 1) return;
    const int conn = accept(listener, nullptr, nullptr);
    if (conn < 0) return;
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t buf[65536];
    while (got.size() < kBytes) {
      const ssize_t n = recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.insert(got.end(), buf, buf + n);
    }
    close(conn);
  });
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(HostIp(1));
  to.sin_port = htons(5201);
  const bool connected = connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  EXPECT_TRUE(connected) << std::strerror(errno);
  size_t off = 0;
  while (connected && off < kBytes) {
    const ssize_t n = send(client, sent.data() + off, kBytes - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(client, SHUT_WR);
  server.join();
  close(client);
  close(listener);
  EXPECT_EQ(got.size(), kBytes);
  EXPECT_TRUE(got == sent) << "TCP payload corrupted across the bridge";
}

TEST_F(DpdkPortTest, LinkFaultsCutAndRestoreTraffic) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(2));
  Poller poller(*port_);
  ASSERT_EQ(Ping(0, "198.18.0.2", 1), 1);
  // Frames arriving on link 0 die: nothing from h0 gets anywhere.
  ASSERT_TRUE(admin_->SetLinkImpairment(0, {}, *ParseImpairment("down=1")).ok());
  EXPECT_EQ(Ping(0, "198.18.0.2", 2, absl::Milliseconds(300)), 0);
  EXPECT_GT(admin_->receive_stage(0).counters().dropped_down, 0u);
  // The send side of link 1 instead: h1 never hears h0.
  ASSERT_TRUE(admin_->SetLinkImpairment(0, {}, {}).ok());
  ASSERT_TRUE(admin_->SetLinkImpairment(1, *ParseImpairment("down=1"), {}).ok());
  EXPECT_EQ(Ping(0, "198.18.0.2", 2, absl::Milliseconds(300)), 0);
  EXPECT_GT(admin_->send_stage(1).counters().dropped_down, 0u);
  // Restored at run time.
  ASSERT_TRUE(admin_->SetLinkImpairment(1, {}, {}).ok());
  EXPECT_EQ(Ping(0, "198.18.0.2", 2), 2);
}

TEST_F(DpdkPortTest, CountersCoverDevicesAndLinks) {
  ASSERT_NO_FATAL_FAILURE(MakeFabric(1));
  {
    Poller poller(*port_);
    ASSERT_EQ(Ping(0, "198.18.0.254", 1), 1);
  }
  std::map<std::string, uint64_t> all;
  admin_->ForEachCounter([&](std::string_view n, uint64_t v) { all[std::string(n)] = v; });
  const std::string dev = "device." + admin_->link_name(0) + ".";
  const std::string link = "link." + admin_->link_name(0) + ".";
  EXPECT_GE(all.at(dev + "ipackets"), 2u);  // ARP request + echo request
  EXPECT_GE(all.at(dev + "opackets"), 2u);
  EXPECT_GE(all.at(link + "rx_frames"), 2u);
  EXPECT_GE(all.at(link + "tx_frames"), 2u);
  EXPECT_GE(all.at("frame.icmp_echo_replies"), 1u);
}

TEST_F(DpdkPortTest, ClearErrorsForBadDevices) {
  absl::StatusOr<std::unique_ptr<DpdkLink>> missing = DpdkLink::Open("0000:99:00.0", {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  absl::StatusOr<std::unique_ptr<DpdkLink>> no_iface =
      DpdkLink::Open(absl::StrFormat("net_af_packet%d,iface=nf-no-such-if", next_vdev_++), {});
  EXPECT_EQ(no_iface.status().code(), absl::StatusCode::kUnavailable) << no_iface.status();
  EXPECT_NE(no_iface.status().message().find("nf-no-such-if"), std::string_view::npos);

  ASSERT_NO_FATAL_FAILURE(MakeFabric(1));
  // The same device twice in one process.
  const std::string name = admin_->link_name(0);
  EXPECT_EQ(DpdkLink::Open(name, {}).status().code(), absl::StatusCode::kAlreadyExists);
  DpdkPortConfig empty;
  EXPECT_EQ(CreateDpdkPort(empty).status().code(), absl::StatusCode::kInvalidArgument);
  // Later EAL arguments are ignored: the runtime is process-global.
  absl::StatusOr<DpdkRuntime*> again = DpdkRuntime::Initialize({"--bogus"});
  EXPECT_TRUE(again.ok()) << again.status();
}

// net_tap instead of af_packet: the PMD creates a kernel tap interface,
// which the test moves into a host namespace.
TEST_F(DpdkPortTest, TapDeviceCarriesTraffic) {
  absl::StatusOr<std::string> ns = bed_->AddNamespace();
  ASSERT_TRUE(ns.ok()) << ns.status();
  hosts_.push_back(*ns);
  const std::string tap = bed_->prefix() + "t0";
  DpdkPortConfig config;
  config.port.local = {kSwitchIp, kDefaultRocePort};
  config.link_options.num_mbufs = 1023;
  config.links.push_back({.device = absl::StrFormat("net_tap%d,iface=%s", next_vdev_++, tap)});
  absl::StatusOr<std::unique_ptr<FramePort>> port = CreateDpdkPort(config);
  ASSERT_TRUE(port.ok()) << port.status();
  port_ = *std::move(port);
  admin_ = port_.get();
  CommandResult r = netfold::testing::RunCommand(absl::StrFormat(
      "ip link set %s netns %s && ip -n %s addr add 198.18.0.1/24 dev %s && ip -n %s link set %s up",
      tap, *ns, *ns, tap, *ns, tap));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Poller poller(*port_);
  EXPECT_EQ(Ping(0, "198.18.0.254", 3), 3);
  EXPECT_GE(admin_->frame_counters().icmp_echo_replies, 3u);
}

}  // namespace
}  // namespace netfold::transport::dpdk
