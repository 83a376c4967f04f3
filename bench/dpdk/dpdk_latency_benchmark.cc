// RC ping-pong latency and idle CPU: the DPDK port (net_af_packet on a veth)
// against the kernel-socket backend (UdpPort on a veth), measured in the
// same run on the same machine.
//
//   sudo build/bench/dpdk/dpdk_latency_benchmark [--rounds=R] [--iterations=N] [--size=BYTES]
//
// Topology (all inside namespaces this program makes and removes):
//   host ns  h0 (UdpPort 198.18.0.1) --veth-- root end: DPDK port 198.18.0.254
//   host ns  h1 (UdpPort 198.18.1.1) --veth-- switch ns s1: UdpPort 198.18.1.254
// A host thread posts one RC message, the switch thread echoes it, the host
// times the round trip. Printed: p50/p90/p99/mean RTT per backend and the
// ratio to the socket backend, then the CPU one idle receive loop burns.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "tests/netns/netns.h"
#include "transport/dpdk/dpdk_port.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::transport::dpdk {
namespace {

using netfold::testing::NetnsTestbed;

struct Stats {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

Stats Summarize(std::vector<double> us) {
  Stats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  double sum = 0;
  for (double v : us) sum += v;
  s.mean = sum / static_cast<double>(us.size());
  return s;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Connect(RcQueuePair* a, const Ipv4Endpoint& a_remote, RcQueuePair* b,
             const Ipv4Endpoint& b_remote) {
  RcQpAttributes attrs;
  attrs.path_mtu = 4096;
  attrs.timeout = absl::Milliseconds(20);
  attrs.remote = a_remote;
  attrs.remote_qpn = b->qpn();
  for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
    if (!a->Modify(s, attrs).ok()) std::abort();
  }
  attrs.remote = b_remote;
  attrs.remote_qpn = a->qpn();
  for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
    if (!b->Modify(s, attrs).ok()) std::abort();
  }
}

// Runs the ping-pong; returns the round trips in microseconds.
std::vector<double> PingPong(RoceEndpoint& host, RoceEndpoint& sw, int warmup, int iterations,
                             size_t size) {
  RcQueuePair* qh = *host.CreateRcQp();
  RcQueuePair* qs = *sw.CreateRcQp();
  Connect(qh, sw.local(), qs, host.local());
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    SendCompletion c;
    while (!stop.load(std::memory_order_relaxed)) {
      sw.Progress(absl::Milliseconds(1));
      RecvMessage m;
      while (qs->PeekRecv(&m)) {
        std::vector<uint8_t> copy(m.data.begin(), m.data.end());
        qs->PopRecv();
        (void)qs->PostSend(copy, 0);
      }
      while (qs->PollSendCompletion(&c)) {
      }
      sw.Flush();
    }
  });
  std::vector<double> rtts;
  const std::vector<uint8_t> message(size, 0x3c);
  SendCompletion c;
  for (int i = 0; i < warmup + iterations; ++i) {
    const absl::Time t0 = absl::Now();
    if (!qh->PostSend(message, static_cast<uint64_t>(i)).ok()) break;
    host.Flush();
    RecvMessage m;
    const absl::Time deadline = t0 + absl::Seconds(2);
    bool got = false;
    while (!got && absl::Now() < deadline) {
      host.Progress(absl::Milliseconds(1));
      if (qh->PeekRecv(&m)) {
        got = true;
        qh->PopRecv();
      }
    }
    const absl::Time t1 = absl::Now();
    while (qh->PollSendCompletion(&c)) {
    }
    if (!got) {
      std::fprintf(stderr, "round trip %d timed out\n", i);
      break;
    }
    if (i >= warmup) rtts.push_back(absl::ToDoubleMicroseconds(t1 - t0));
  }
  stop = true;
  echo.join();
  return rtts;
}

// CPU one thread spends in RecvBurst loops on an idle port for `wall`.
double IdleCpuPercent(Port& port, absl::Duration wall) {
  PacketBuffer* rx[32];
  const double cpu0 = ThreadCpuSeconds();
  const absl::Time end = absl::Now() + wall;
  while (absl::Now() < end) {
    PacketPool::FreeBurst({rx, port.RecvBurst(rx, absl::Milliseconds(10))});
  }
  return 100.0 * (ThreadCpuSeconds() - cpu0) / absl::ToDoubleSeconds(wall);
}

std::unique_ptr<UdpPort> UdpPortIn(NetnsTestbed& bed, const std::string& ns, uint32_t ip) {
  std::unique_ptr<UdpPort> port;
  absl::Status s = bed.RunIn(ns, [&] {
    auto p = UdpPort::Create({.local = {ip, kDefaultRocePort}});
    if (p.ok()) port = *std::move(p);
  });
  if (!s.ok() || port == nullptr) {
    std::fprintf(stderr, "cannot open a UdpPort in %s\n", ns.c_str());
    std::exit(1);
  }
  return port;
}

std::unique_ptr<FramePort> DpdkPortOn(const std::string& root_if, uint32_t ip, bool busy) {
  static int vdev = 0;
  DpdkPortConfig config;
  config.port.local = {ip, kDefaultRocePort};
  config.port.busy_poll = busy;
  config.link_options.num_mbufs = 1023;
  config.link_options.mbuf_data_size = 8192;
  config.links.push_back({.device = absl::StrFormat(
                              "net_af_packet%d,iface=%s,blocksz=8192,framesz=8192,framecnt=256",
                              vdev++, root_if)});
  auto port = CreateDpdkPort(config);
  if (!port.ok()) {
    std::fprintf(stderr, "%s\n", port.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(port);
}

int Main(int argc, char** argv) {
  int iterations = 1000;
  int rounds = 3;
  size_t size = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--iterations=", 0) == 0) iterations = std::atoi(a.c_str() + 13);
    if (a.rfind("--rounds=", 0) == 0) rounds = std::atoi(a.c_str() + 9);
    if (a.rfind("--size=", 0) == 0) size = static_cast<size_t>(std::atol(a.c_str() + 7));
  }
  const int warmup = std::max(50, iterations / 10);
  if (std::string why = netfold::testing::NetnsUnavailableReason(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  auto rt = DpdkRuntime::Initialize({"--no-huge", "--no-shconf", "--no-pci", "-m", "256", "-l",
                                     "0", "--no-telemetry", "--log-level=*:warning"});
  if (!rt.ok()) {
    std::printf("skipped: %s\n", rt.status().ToString().c_str());
    return 77;
  }
  NetnsTestbed bed("nb");
  const std::string h0 = *bed.AddNamespace();  // host of the idle-policy DPDK port
  const std::string h1 = *bed.AddNamespace();  // host of the socket switch
  const std::string h2 = *bed.AddNamespace();  // host of the busy-polling DPDK port
  const std::string s1 = *bed.AddNamespace();  // the socket switch
  const auto v0 = *bed.AddVeth(h0, "198.18.0.1/24", 4200);
  const auto v1 = *bed.AddVeth(h1, "198.18.1.1/24", 4200);
  const auto v2 = *bed.AddVeth(h2, "198.18.2.1/24", 4200);
  // The socket switch sits on the other end of h1's veth, moved into s1.
  const auto cmd = absl::StrFormat(
      "ip link set %s netns %s && ip -n %s addr add 198.18.1.254/24 dev %s && "
      "ip -n %s link set %s up",
      v1.root_if, s1, s1, v1.root_if, s1, v1.root_if);
  if (netfold::testing::RunCommand(cmd).exit_code != 0) {
    std::fprintf(stderr, "cannot build the socket topology\n");
    return 1;
  }

  struct Setup {
    const char* name;
    std::unique_ptr<RoceEndpoint> host;
    std::unique_ptr<RoceEndpoint> sw;
    Port* switch_port;
    std::vector<double> rtts;
  };
  std::vector<Setup> setups;
  {
    auto udp = UdpPortIn(bed, s1, 0xc61201fe);
    Port* raw = udp.get();
    setups.push_back({"UdpPort (kernel sockets, epoll)",
                      std::make_unique<RoceEndpoint>(UdpPortIn(bed, h1, 0xc6120101), RealClock()),
                      std::make_unique<RoceEndpoint>(std::move(udp), RealClock()), raw, {}});
  }
  for (bool busy : {false, true}) {
    auto port = DpdkPortOn(busy ? v2.root_if : v0.root_if, busy ? 0xc61202fe : 0xc61200fe, busy);
    Port* raw = port.get();
    setups.push_back({busy ? "DpdkPort af_packet, busy_poll" : "DpdkPort af_packet, idle policy",
                      std::make_unique<RoceEndpoint>(
                          UdpPortIn(bed, busy ? h2 : h0, busy ? 0xc6120201 : 0xc6120001),
                          RealClock()),
                      std::make_unique<RoceEndpoint>(std::move(port), RealClock()), raw, {}});
  }
  // Rounds interleave the backends so that load from elsewhere on the
  // machine falls on all of them alike.
  for (int r = 0; r < rounds; ++r) {
    for (Setup& s : setups) {
      std::vector<double> rtts = PingPong(*s.host, *s.sw, warmup, iterations, size);
      s.rtts.insert(s.rtts.end(), rtts.begin(), rtts.end());
    }
  }

  std::printf("RC ping-pong, %zu-byte messages, %d rounds x %d round trips per backend, "
              "one veth hop\n",
              size, rounds, iterations);
  std::printf("%-34s %9s %9s %9s %9s %9s\n", "switch side", "p50 us", "p90 us", "p99 us",
              "mean us", "p50 ratio");
  const Stats base = Summarize(setups[0].rtts);
  for (const Setup& s : setups) {
    const Stats st = Summarize(s.rtts);
    std::printf("%-34s %9.1f %9.1f %9.1f %9.1f %9.2f\n", s.name, st.p50, st.p90, st.p99, st.mean,
                st.p50 / base.p50);
  }
  std::printf("\nCPU of one idle receive loop (RecvBurst with 10 ms timeouts, 1 s):\n");
  for (const Setup& s : setups) {
    std::printf("  %-34s %5.1f %%\n", s.name, IdleCpuPercent(*s.switch_port, absl::Seconds(1)));
  }
  return 0;
}

}  // namespace
}  // namespace netfold::transport::dpdk

int main(int argc, char** argv) { return netfold::transport::dpdk::Main(argc, argv); }
