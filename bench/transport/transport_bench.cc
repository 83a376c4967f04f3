// The user-space RoCEv2 engine against raw UDP sockets, measured in the same
// run on the same loopback: ping-pong latency, small-message rate and
// large-message throughput. The ratio engine/raw is the cost of RoCEv2
// framing, ICRC, PSN/ACK bookkeeping and the go-back-N machinery.
//
//   build/bench/transport/transport_bench            # full run
//   build/bench/transport/transport_bench --quick    # a few seconds (CI)
//
// Both sides of each pair run in their own thread, blocking in the port with
// a timeout (no busy polling), as the default configuration does.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::transport {
namespace {

std::unique_ptr<UdpPort> MakeUdp() {
  UdpPortConfig config;
  config.local = {0x7f000001, 0};
  config.pool.num_buffers = 4096;
  auto port = UdpPort::Create(config);
  if (!port.ok()) {
    std::fprintf(stderr, "cannot open a UDP port: %s\n", port.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*port);
}

struct Result {
  double value;  // microseconds per round trip, or messages/s, or MB/s
};

// ---------------------------------------------------------------- raw UDP

// Ping-pong: A sends `size` bytes, B echoes, A waits. Returns us per round trip.
double RawPingPong(size_t size, int iterations) {
  auto a = MakeUdp();
  auto b = MakeUdp();
  const Ipv4Endpoint a_addr = a->local(), b_addr = b->local();
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    PacketBuffer* rx[32];
    while (!stop.load()) {
      size_t n = b->RecvBurst(rx, absl::Milliseconds(20));
      for (size_t i = 0; i < n; ++i) rx[i]->dst = a_addr;
      size_t sent = 0;
      while (sent < n) sent += b->SendBurst({rx + sent, n - sent});
    }
  });
  PacketBuffer* rx[32];
  absl::Time start;
  for (int i = -100; i < iterations; ++i) {  // 100 warm-up round trips
    if (i == 0) start = absl::Now();
    PacketBuffer* p = a->pool().Alloc();
    std::memset(p->data(), 1, size);
    p->set_len(static_cast<uint32_t>(size));
    p->dst = b_addr;
    while (a->SendBurst({&p, 1}) == 0) {
    }
    size_t n = 0;
    while (n == 0) n = a->RecvBurst(rx, absl::Seconds(1));
    PacketPool::FreeBurst({rx, n});
  }
  const double us = absl::ToDoubleMicroseconds(absl::Now() - start) / iterations;
  stop = true;
  echo.join();
  return us;
}

// Stream: A sends `count` datagrams of `size` bytes with at most `window`
// unacknowledged; B acknowledges every 32 with a tiny datagram. Returns
// messages/s.
double RawStream(size_t size, int count, int window) {
  auto a = MakeUdp();
  auto b = MakeUdp();
  const Ipv4Endpoint a_addr = a->local(), b_addr = b->local();
  std::atomic<bool> stop{false};
  std::thread sink([&] {
    PacketBuffer* rx[64];
    uint32_t received = 0;
    while (!stop.load()) {
      size_t n = b->RecvBurst(rx, absl::Milliseconds(20));
      PacketPool::FreeBurst({rx, n});
      const uint32_t before = received;
      received += static_cast<uint32_t>(n);
      if (n > 0 && received / 32 != before / 32) {
        PacketBuffer* ack = b->pool().Alloc();
        std::memcpy(ack->data(), &received, 4);
        ack->set_len(4);
        ack->dst = a_addr;
        while (b->SendBurst({&ack, 1}) == 0) {
        }
      }
    }
  });
  uint32_t acked = 0;
  int sent = 0;
  PacketBuffer* rx[64];
  const absl::Time start = absl::Now();
  Deadline deadline(RealClock(), absl::Seconds(60));
  // Loss on loopback is possible: stop waiting for acks once all are sent
  // and the last ack covers everything that can still be counted.
  while ((acked + 32 <= static_cast<uint32_t>(count)) && !deadline.Expired()) {
    std::vector<PacketBuffer*> burst;
    while (sent < count && sent - static_cast<int>(acked) < window && burst.size() < 32) {
      PacketBuffer* p = a->pool().Alloc();
      if (p == nullptr) break;
      std::memset(p->data(), 2, size);
      p->set_len(static_cast<uint32_t>(size));
      p->dst = b_addr;
      burst.push_back(p);
      ++sent;
    }
    size_t done = 0;
    while (done < burst.size()) done += a->SendBurst(std::span(burst).subspan(done));
    size_t n = a->RecvBurst(rx, sent - static_cast<int>(acked) >= window ? absl::Milliseconds(5)
                                                                         : absl::ZeroDuration());
    for (size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, rx[i]->data(), 4);
      acked = std::max(acked, v);
    }
    PacketPool::FreeBurst({rx, n});
    if (n == 0 && sent == count && sent - static_cast<int>(acked) < 32) break;
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  sink.join();
  return acked / secs;
}

// ---------------------------------------------------------------- RoCEv2 RC

struct RcLink {
  std::unique_ptr<RoceEndpoint> a, b;
  RcQueuePair* qa;
  RcQueuePair* qb;
};

constexpr int kQueueDepth = 1024;  // send and receive queue of each QP

RcLink MakeRcLink() {
  RcLink link;
  link.a = std::make_unique<RoceEndpoint>(MakeUdp(), RealClock());
  link.b = std::make_unique<RoceEndpoint>(MakeUdp(), RealClock());
  RcQpConfig config;
  config.max_send_queue = kQueueDepth;
  config.max_recv_queue = kQueueDepth;
  link.qa = *link.a->CreateRcQp(config);
  link.qb = *link.b->CreateRcQp(config);
  RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(20);
  attrs.remote = link.b->local();
  attrs.remote_qpn = link.qb->qpn();
  (void)link.qa->Modify(QpState::kInit, attrs);
  (void)link.qa->Modify(QpState::kRtr, attrs);
  (void)link.qa->Modify(QpState::kRts, attrs);
  attrs.remote = link.a->local();
  attrs.remote_qpn = link.qa->qpn();
  (void)link.qb->Modify(QpState::kInit, attrs);
  (void)link.qb->Modify(QpState::kRtr, attrs);
  (void)link.qb->Modify(QpState::kRts, attrs);
  return link;
}

double RcPingPong(size_t size, int iterations) {
  RcLink link = MakeRcLink();
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    while (!stop.load()) {
      link.b->Progress(absl::Milliseconds(20));
      RecvMessage m;
      while (link.qb->PeekRecv(&m)) {
        (void)link.qb->PostSend(m.data, 0);
        link.qb->PopRecv();
      }
      SendCompletion sc;
      while (link.qb->PollSendCompletion(&sc)) {
      }
    }
  });
  std::vector<uint8_t> msg(size, 3);
  absl::Time start;
  for (int i = -100; i < iterations; ++i) {
    if (i == 0) start = absl::Now();
    (void)link.qa->PostSend(msg, static_cast<uint64_t>(i));
    RecvMessage m;
    while (!link.qa->PeekRecv(&m)) link.a->Progress(absl::Seconds(1));
    link.qa->PopRecv();
    SendCompletion sc;
    while (link.qa->PollSendCompletion(&sc)) {
    }
  }
  const double us = absl::ToDoubleMicroseconds(absl::Now() - start) / iterations;
  stop = true;
  echo.join();
  return us;
}

// Streams `count` messages of `size` bytes a -> b; returns messages/s.
// An untimed warm-up first passes a message through every send and receive
// slot: a slot's buffer grows to the message size on its first use and keeps
// it, and on this VM touching fresh pages costs ~20 us each (64 KiB messages
// in 1024 + 1024 slots: 0.6 s, four times the steady-state run).
double RcStream(size_t size, int count) {
  RcLink link = MakeRcLink();
  const int warmup = 2 * kQueueDepth;
  std::atomic<int> received{0};
  std::atomic<bool> stop{false};
  std::thread sink([&] {
    while (!stop.load()) {
      link.b->Progress(absl::Milliseconds(20));
      RecvMessage m;
      while (link.qb->PeekRecv(&m)) {
        received.fetch_add(1);
        link.qb->PopRecv();
      }
    }
  });
  std::vector<uint8_t> msg(size, 4);
  // Posts `n` messages and waits for their completions; returns how many
  // completed before the deadline.
  const auto stream = [&](int n) {
    int posted = 0, completed = 0;
    Deadline deadline(RealClock(), absl::Seconds(60));
    while (completed < n && !deadline.Expired()) {
      while (posted < n && link.qa->PostSend(msg, static_cast<uint64_t>(posted)).ok()) ++posted;
      link.a->Progress(absl::Milliseconds(1));
      SendCompletion sc;
      while (link.qa->PollSendCompletion(&sc)) ++completed;
    }
    return completed;
  };
  int completed = 0;
  absl::Time start = absl::Now();
  if (stream(warmup) == warmup) {
    start = absl::Now();
    completed = stream(count);
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  sink.join();
  if (link.qa->state() == QpState::kError) {
    std::fprintf(stderr, "RC stream failed: %s\n", link.qa->error().ToString().c_str());
  }
  return completed / secs;
}

}  // namespace
}  // namespace netfold::transport

int main(int argc, char** argv) {
  using namespace netfold::transport;
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int pings = quick ? 500 : 5000;
  const int stream = quick ? 5000 : 50000;
  std::printf("netfold transport benchmark: RoCEv2 RC engine vs raw UDP, loopback, %s\n",
              quick ? "quick" : "full");
  std::printf("%-34s %14s %14s %8s\n", "measure", "raw UDP", "RoCEv2 RC", "ratio");
  for (size_t size : {8, 1024, 4096}) {
    const double raw = RawPingPong(size, pings);
    const double rc = RcPingPong(size, pings);
    std::printf("%-34s %11.1f us %11.1f us %7.2fx\n",
                absl::StrFormat("ping-pong RTT, %d B", size).c_str(), raw, rc, rc / raw);
  }
  for (size_t size : {8, 4096}) {
    const double raw = RawStream(size, stream, 256);
    const double rc = RcStream(size, stream);
    std::printf("%-34s %9.0f msg/s %9.0f msg/s %7.2fx\n",
                absl::StrFormat("message rate, %d B", size).c_str(), raw, rc, rc / raw);
  }
  {
    const size_t size = 65536;
    const double raw = RawStream(4096, stream, 256) * 4096 / 1e6;
    const double rc = RcStream(size, stream / 16) * size / 1e6;
    std::printf("%-34s %11.0f MB/s %9.0f MB/s %7.2fx\n", "throughput, 64 KiB messages", raw, rc,
                rc / raw);
  }
  std::printf("ratio: RoCEv2/raw (latency: >1 is slower; rate and throughput: <1 is slower)\n");
  return 0;
}
