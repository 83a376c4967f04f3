// Test helpers for UdpPort's tests (udp_port_test.cc,
// udp_port_placed_test.cc): ports on loopback, tagged and RoCE-shaped
// packets, receiving by tag, a placer that places by tag, and a multicast
// group of the test's own.
//
//   std::unique_ptr<UdpPort> a = MakePort(), b = MakePort();
//   PacketBuffer* p = RocePacket(*a, b->local(), /*tag=*/7, /*len=*/200);
//   ASSERT_EQ(a->SendBurst({&p, 1}), 1u);
//   EXPECT_EQ(RecvTags(*b, 1), std::vector<uint32_t>{7});
//
// For tests only (no library includes it). Not thread-safe.
#ifndef NETFOLD_TRANSPORT_TESTING_UDP_PORT_TEST_UTIL_H_
#define NETFOLD_TRANSPORT_TESTING_UDP_PORT_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "transport/testing/port_test_util.h"
#include "transport/udp_port.h"

namespace netfold::transport {

constexpr uint32_t kLoopback = 0x7f000001;

inline std::unique_ptr<UdpPort> MakePort(UdpPortConfig config = {}) {
  config.local = {kLoopback, 0};
  auto port = UdpPort::Create(config);
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? std::move(*port) : nullptr;
}

// The datagrams of these tests: 64 bytes unless a test says otherwise.
inline PacketBuffer* Packet(Port& port, const Ipv4Endpoint& dst, uint32_t tag, uint32_t len = 64) {
  return TaggedPacket(port, dst, tag, len);
}

// Receives until `n` packets arrived or 5 s passed; returns their tags.
inline std::vector<uint32_t> RecvTags(Port& port, size_t n,
                                      std::vector<Ipv4Endpoint>* dsts = nullptr) {
  std::vector<uint32_t> tags;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[32];
  while (tags.size() < n && !deadline.Expired()) {
    size_t got = port.RecvBurst(rx, absl::Milliseconds(50));
    for (size_t i = 0; i < got; ++i) {
      tags.push_back(Tag(rx[i]));
      if (dsts) dsts->push_back(rx[i]->dst);
    }
    PacketPool::FreeBurst({rx, got});
  }
  return tags;
}

// A RoCEv2-shaped payload of `len` bytes: a tag, filler, and the ICRC of
// `addrs` (identification 0, as a queue pair builds it).
// (Again) the ICRC of `p`'s first `len` bytes, sent by `port` to `dst`.
inline void StoreRoceIcrc(const Port& port, const Ipv4Endpoint& dst, PacketBuffer* p,
                          uint32_t len) {
  const proto::IcrcAddresses addrs{port.local().ip, dst.ip, port.local().port, dst.port};
  proto::StoreIcrc(proto::ComputeIcrc(addrs, p->bytes().first(len - proto::kIcrcSize)),
                   p->bytes().last<proto::kIcrcSize>());
}

inline PacketBuffer* RocePacket(Port& port, const Ipv4Endpoint& dst, uint32_t tag, uint32_t len) {
  PacketBuffer* p = Packet(port, dst, tag, len);
  StoreRoceIcrc(port, dst, p, len);
  return p;
}

// The ICRC of a received packet against the identification the port
// reports for it.
inline bool IcrcHolds(const PacketBuffer* p) {
  const proto::IcrcAddresses addrs{p->src.ip, p->dst.ip, p->src.port, p->dst.port, p->ip_id};
  return proto::ComputeIcrc(addrs, p->bytes().first(p->len() - proto::kIcrcSize)) ==
         proto::LoadIcrc(p->bytes().last<proto::kIcrcSize>());
}

// A receive placer for the tests: places in `arena`, one per tag in
// `guesses` (place i at i * stride), claimed by the packet whose tag (its
// first 4 bytes) is the place's. A guess is made once, or with `repeat`
// every time until claimed (as a group engine offers a chunk its place).
struct TagPlacer : ReceivePlacer {
  std::vector<uint8_t> arena;
  std::vector<uint32_t> guesses;
  uint32_t head = 16, len = 0, tail = proto::kIcrcSize, stride = 0;
  bool repeat = false;
  int predictions = 0;
  // Places for the payloads of `places` packets of `packet_len` bytes.
  void SizeFor(uint32_t packet_len, size_t places) {
    len = packet_len - head - tail;
    stride = len;
    arena.assign(places * stride, 0);
  }
  size_t PredictPlaces(const Ipv4Endpoint& group, std::span<ReceivePlace> out) override {
    (void)group;
    ++predictions;
    size_t n = 0;
    for (; n < out.size() && n < guesses.size(); ++n) {
      out[n] = {.at = arena.data() + n * stride, .len = len, .head = head, .tail = tail,
                .id = guesses[n]};
    }
    if (!repeat) guesses.erase(guesses.begin(), guesses.begin() + static_cast<long>(n));
    return n;
  }
  bool ClaimPlace(const ReceivePlace& place, std::span<const uint8_t> bytes) override {
    uint32_t tag;
    std::memcpy(&tag, bytes.data(), 4);
    return tag == place.id;
  }
};

// A multicast group for one test; its port is `sender`'s, free on this host.
inline Ipv4Endpoint TestGroup(const UdpPort& sender, uint32_t salt) {
  return {0xef4f0000u | ((static_cast<uint32_t>(getpid()) * 7 + salt) & 0xffff),
          sender.local().port};
}

// What came: each packet's bytes made whole (but its ICRC, checked), by
// tag; `external[tag]` says
// where its external bytes were (nullptr: it had none).
struct Arrived {
  std::map<uint32_t, std::vector<uint8_t>> bytes;
  std::map<uint32_t, const uint8_t*> external;
};
inline Arrived ReceiveWhole(Port& port, size_t n) {
  Arrived a;
  Deadline deadline(RealClock(), absl::Seconds(5));
  PacketBuffer* rx[32];
  while (a.bytes.size() < n && !deadline.Expired()) {
    const size_t got = port.RecvBurst(rx, absl::Milliseconds(50));
    for (size_t i = 0; i < got; ++i) {
      a.external[Tag(rx[i])] = rx[i]->external().empty() ? nullptr : rx[i]->external().data();
      rx[i]->Materialize();
      EXPECT_TRUE(IcrcHolds(rx[i])) << "packet " << Tag(rx[i]);
      // Without the ICRC: a batch's segment k carries identification k's.
      a.bytes[Tag(rx[i])].assign(rx[i]->data(), rx[i]->data() + rx[i]->len() - proto::kIcrcSize);
    }
    PacketPool::FreeBurst({rx, got});
  }
  return a;
}

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_TESTING_UDP_PORT_TEST_UTIL_H_
