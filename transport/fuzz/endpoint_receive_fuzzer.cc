// libFuzzer target: the endpoint's whole receive path (parse, demultiplex,
// RC responder and requester state machines, UD and multicast delivery) on
// sequences of arbitrary datagrams.
//
// Input: frames of [flags:1][length:2, little-endian][bytes:length]. Flags:
//   bits 0-1  rewrite BTH.DestQP to: 0 the RC QP, 1 the UD QP, 2 the
//             multicast QPN (and send to the group), 3 keep as is
//   bit 2     send from the connected peer (else from a stranger)
//   bit 3     recompute the ICRC so the packet passes the check
//   bits 4-7  advance the fake clock by that many milliseconds afterwards
// The endpoint checks ICRCs, so frames without bit 3 exercise the drop path.
//
// Properties beyond "no crash" (ASan/UBSan in the fuzzing build):
//   - every datagram is either delivered or counted as a drop, or is a
//     legitimate RC duplicate/ACK (accounted by the QP counters);
//   - no packet buffer leaks: all are back in their pools at the end;
//   - QPs only move to ERROR with a reason.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "proto/fuzz/fuzz_check.h"
#include "proto/roce_packet.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"

namespace {

using namespace ::netfold::transport;  // NOLINT: a fuzz target, not library code

constexpr Ipv4Endpoint kLocal{0x0a000001, 4791};
constexpr Ipv4Endpoint kPeer{0x0a000002, 4791};
constexpr Ipv4Endpoint kStranger{0x0a000003, 4791};
constexpr Ipv4Endpoint kGroup{0xe0000007, 4791};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  netfold::SetLogLevel(netfold::LogLevel::kError);
  netfold::FakeClock clock(absl::Seconds(1));
  MemoryNetwork net;
  const PacketPoolConfig small{.num_buffers = 64, .buffer_size = 4096 + 128};
  auto local_port = *net.CreatePort({.local = kLocal, .pool = small, .rx_queue_limit = 64});
  auto peer = *net.CreatePort({.local = kPeer, .pool = small, .rx_queue_limit = 64});
  auto stranger = *net.CreatePort({.local = kStranger, .pool = small, .rx_queue_limit = 64});
  {
    RoceEndpoint ep(std::move(local_port), clock);
    RcQpConfig rc_config;
    rc_config.max_recv_queue = 4;
    rc_config.max_message_size = 16384;
    RcQueuePair* rc = *ep.CreateRcQp(rc_config);
    RcQpAttributes attrs;
    attrs.pkey = 0x8001;
    attrs.remote = kPeer;
    attrs.remote_qpn = 0x300;
    attrs.rq_psn = 0;
    attrs.sq_psn = 0;
    attrs.path_mtu = 1024;
    attrs.timeout = absl::Milliseconds(1);
    attrs.retry_count = 2;
    FUZZ_CHECK(rc->Modify(QpState::kInit, attrs).ok());
    FUZZ_CHECK(rc->Modify(QpState::kRtr, attrs).ok());
    FUZZ_CHECK(rc->Modify(QpState::kRts, attrs).ok());
    // Something in flight so that ACKs and NAKs have a target.
    std::vector<uint8_t> msg(3000, 0x5a);
    FUZZ_CHECK(rc->PostSend(msg, 1).ok());
    UdQueuePair* ud = *ep.CreateUdQp({.qkey = 0x1234, .pkey = 0x8001, .max_recv_queue = 4});
    FUZZ_CHECK(ep.AttachMulticast(ud->qpn(), kGroup).ok());

    size_t pos = 0;
    while (pos + 3 <= size) {
      const uint8_t flags = data[pos];
      const size_t len = std::min<size_t>(data[pos + 1] | (data[pos + 2] << 8), size - pos - 3);
      pos += 3;
      MemoryPort& from = (flags & 4) ? *peer : *stranger;
      PacketBuffer* p = from.pool().Alloc();
      if (p == nullptr) break;
      const size_t n = std::min<size_t>(len, p->capacity());
      std::memcpy(p->data(), data + pos, n);
      pos += len;
      p->set_len(static_cast<uint32_t>(n));
      p->dst = kLocal;
      if (n >= 8) {
        uint32_t qpn = 0;
        switch (flags & 3) {
          case 0: qpn = rc->qpn(); break;
          case 1: qpn = ud->qpn(); break;
          case 2: qpn = kMulticastQpn; p->dst = kGroup; break;
          default: qpn = (p->data()[5] << 16) | (p->data()[6] << 8) | p->data()[7]; break;
        }
        p->data()[5] = static_cast<uint8_t>(qpn >> 16);
        p->data()[6] = static_cast<uint8_t>(qpn >> 8);
        p->data()[7] = static_cast<uint8_t>(qpn);
      }
      if ((flags & 8) && n >= netfold::proto::kBthSize + netfold::proto::kIcrcSize) {
        const Ipv4Endpoint src = from.local();
        const netfold::proto::IcrcAddresses addrs{src.ip, p->dst.ip, src.port, p->dst.port};
        FUZZ_CHECK(netfold::proto::RewriteIcrc(addrs, p->bytes()).ok());
      }
      from.SendBurst({&p, 1});
      ep.Progress(absl::ZeroDuration());
      clock.Advance(absl::Milliseconds(flags >> 4));
      ep.Progress(absl::ZeroDuration());
      // Drain what was delivered so the queues do not just fill up.
      RecvMessage m;
      if (rc->PeekRecv(&m)) {
        FUZZ_CHECK(m.data.size() <= rc_config.max_message_size);
        rc->PopRecv();
      }
      UdDatagram d;
      if (ud->PeekRecv(&d)) {
        FUZZ_CHECK(d.data.size() <= 4096);
        ud->PopRecv();
      }
      if (rc->state() == QpState::kError) FUZZ_CHECK(!rc->error().ok());
      // Replies to the peer and stranger are read and discarded.
      PacketBuffer* rx[16];
      for (MemoryPort* port : {peer.get(), stranger.get()}) {
        size_t got = port->RecvBurst(rx, absl::ZeroDuration());
        PacketPool::FreeBurst({rx, got});
      }
    }
    SendCompletion sc;
    while (rc->PollSendCompletion(&sc)) {
    }
    FUZZ_CHECK(ep.DestroyQp(rc->qpn()).ok());
    FUZZ_CHECK(ep.DestroyQp(ud->qpn()).ok());
    FUZZ_CHECK(ep.port().pool().num_in_use() == 0);
  }
  FUZZ_CHECK(peer->pool().num_in_use() == 0);
  FUZZ_CHECK(stranger->pool().num_in_use() == 0);
  return 0;
}
