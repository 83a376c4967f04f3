// An unreliable-datagram (UD) queue pair: SEND_ONLY datagrams with a DETH,
// unicast or to a multicast group, Q_Key checked on receive.
//
//   UdQueuePair* ud = *endpoint.CreateUdQp({.qkey = job_qkey, .pkey = job_pkey});
//   endpoint.AttachMulticast(ud, group);                      // ibv_attach_mcast
//   ud->PostSend(group, kMulticastQpn, job_qkey, result);      // to every member
//   UdDatagram d;  while (ud->PeekRecv(&d)) { use(d.data); ud->PopRecv(); }
//
// A datagram is one packet: it must fit the MTU. Received datagrams are kept
// in the packet buffer they arrived in (no copy) until PopRecv(); when
// `max_recv_queue` are waiting, new ones are dropped and counted, as a UD QP
// without posted receives drops them.
//
// The P_Key and Q_Key travel in clear: anyone who sees one datagram can
// forge the next. A QP created with `filter_sources` therefore takes a
// datagram only from the sender AllowSource() named for its destination
// (address and UDP port: a host names the switch that multicasts a group's
// results), and drops the rest as wrong_source:
//
//   ud->AllowSource(group, root_switch_data_address);
//
// Thread-safety: belongs to the thread that runs its endpoint.
#ifndef NETFOLD_TRANSPORT_UD_QUEUE_PAIR_H_
#define NETFOLD_TRANSPORT_UD_QUEUE_PAIR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/roce_packet.h"
#include "transport/ipv4_endpoint.h"
#include "transport/queue_pair_common.h"

namespace netfold::transport {

struct UdQpConfig {
  uint32_t qkey = 0;         // datagrams to this QP must carry it
  uint16_t pkey = 0xFFFF;
  uint32_t mtu = 4096;       // largest datagram payload
  uint32_t max_recv_queue = 1024;
  uint32_t max_send_queue = 1024;  // packets built and not yet handed to the port
  // true: datagrams are taken only from the source AllowSource() gave for
  // their destination; every other one is dropped as wrong_source.
  bool filter_sources = false;
  // true: a datagram whose payload a port placed in its owner's memory
  // (Port::SetReceivePlacer) stays there, and UdDatagram::placed says
  // where; false: it is copied into the packet first, and `data` is whole.
  bool keeps_placed = false;
};

struct UdDatagram {
  Ipv4Endpoint src;          // sender's address
  Ipv4Endpoint dst;          // our address, or the multicast group it was sent to
  uint32_t src_qpn = 0;      // from the DETH
  std::optional<uint32_t> imm;
  std::span<const uint8_t> data;  // valid until PopRecv()
  // With UdQpConfig::keeps_placed: bytes [placed_at, placed_at +
  // placed.size()) of `data` are not there but in `placed`, where the
  // port's receive placer had them written (empty: `data` is whole).
  std::span<const uint8_t> placed;
  size_t placed_at = 0;
};

struct UdQpCounters {
  std::atomic<uint64_t> datagrams_sent{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> datagrams_received{0};
  std::atomic<uint64_t> bytes_received{0};
  QpDropCounters drops;
};

class UdQueuePair {
 public:
  // `pool` supplies send buffers; `local` is the address datagrams leave from
  // (for the ICRC). Both must outlive the QP.
  UdQueuePair(uint32_t qpn, const UdQpConfig& config, PacketPool* pool, Ipv4Endpoint local);
  UdQueuePair(const UdQueuePair&) = delete;
  UdQueuePair& operator=(const UdQueuePair&) = delete;
  ~UdQueuePair();

  // Builds a datagram to `dst` (QP `dst_qpn`, kMulticastQpn for a group) with
  // Q_Key `qkey` and queues it for the next Poll(). InvalidArgument for a
  // payload over the MTU or a bad QPN; ResourceExhausted when the send queue
  // or the packet pool is full (UD is unreliable: the caller may drop it).
  absl::Status PostSend(const Ipv4Endpoint& dst, uint32_t dst_qpn, uint32_t qkey,
                        std::span<const uint8_t> payload,
                        std::optional<uint32_t> imm = std::nullopt);

  // Takes `buffer` (whose parsed view is `packet`) if the datagram is for
  // this QP and there is room; returns false (buffer still the caller's) if
  // it was dropped, with the reason counted.
  bool OnPacket(const proto::RocePacketView& packet, PacketBuffer* buffer);

  // With `filter_sources`: datagrams sent to `dst` (a multicast group, or
  // the QP's own address) are taken from `source` (IPv4 address and UDP
  // port) only. A second call for the same `dst` replaces the source.
  void AllowSource(const Ipv4Endpoint& dst, const Ipv4Endpoint& source);
  // Forgets `dst`'s source: datagrams to it are dropped again.
  void ForgetSource(const Ipv4Endpoint& dst);

  // Moves the datagrams built by PostSend to `out`.
  void Poll(std::vector<PacketBuffer*>* out);
  bool HasWork() const { return !send_queue_.empty(); }

  bool PeekRecv(UdDatagram* out) const;
  void PopRecv();
  size_t num_recv_queued() const { return recv_queue_.size(); }

  uint32_t qpn() const { return qpn_; }
  const UdQpConfig& config() const { return config_; }
  const UdQpCounters& counters() const { return counters_; }

 private:
  bool SourceAllowed(const Ipv4Endpoint& dst, const Ipv4Endpoint& src) const;

  struct Received {
    PacketBuffer* buffer;
    UdDatagram datagram;
  };

  const uint32_t qpn_;
  const UdQpConfig config_;
  PacketPool* pool_;
  const Ipv4Endpoint local_;
  uint32_t next_psn_ = 0;
  std::deque<PacketBuffer*> send_queue_;
  std::deque<Received> recv_queue_;
  // (destination, the one source taken for it); a few entries, one per
  // group the QP is attached to.
  std::vector<std::pair<Ipv4Endpoint, Ipv4Endpoint>> allowed_sources_;
  UdQpCounters counters_;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_UD_QUEUE_PAIR_H_
