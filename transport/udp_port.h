// The kernel-socket backend: a Port over IPv4 UDP sockets.
//
//   absl::StatusOr<std::unique_ptr<UdpPort>> port =
//       UdpPort::Create({.local = *ParseIpv4Endpoint("127.0.0.1:0")});
//   (*port)->local();  // the bound address, with the kernel-chosen port
//
// One unicast socket bound to `local` (port 0 picks a free port), plus one
// socket per joined multicast group, bound to the group's address and port
// with SO_REUSEADDR and IP_MULTICAST_ALL off, so that several ports on one
// machine receive the same group and nothing else. Bursts use
// recvmmsg/sendmmsg. RecvBurst asks epoll which sockets hold datagrams,
// waiting up to its timeout (to the microsecond, epoll_pwait2) when none
// does, and reads only those; with `busy_poll` it spins on non-blocking
// reads of every socket instead (opt-in: it burns a core). With a
// `poll_window` it spins, yielding the CPU between reads, for that long
// after the port last sent or received, and only then sleeps in epoll: a
// port in the middle of an exchange is not put to sleep and woken again for
// every packet, an idle one sleeps (opt-in as well). Multicast is sent from
// the unicast socket with IP_MULTICAST_IF set to the local address,
// loopback on, TTL `multicast_ttl`.
//
// Thread-safety: as for every Port, one thread polls it; counters() may be
// read from anywhere.
//
// The reads (GRO batches, placed multicast results) are udp_port_read.cc;
// the rest, sends included, udp_port.cc.
#ifndef NETFOLD_TRANSPORT_UDP_PORT_H_
#define NETFOLD_TRANSPORT_UDP_PORT_H_

#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/icrc.h"
#include "transport/port.h"

struct epoll_event;

namespace netfold::transport {

struct UdpPortConfig {
  Ipv4Endpoint local{0x7f000001, kDefaultRocePort};
  PacketPoolConfig pool;
  bool busy_poll = false;
  // Read without sleeping this long after the last packet sent or received
  // (sched_yield between reads); zero: sleep in epoll at once.
  absl::Duration poll_window = absl::ZeroDuration();
  int multicast_ttl = 1;
  // Socket buffer sizes; large by default so bursts are not dropped by the
  // kernel (as root, beyond net.core.rmem_max).
  int socket_buffer_bytes = 4 << 20;
  // UDP segmentation offload: consecutive packets of a burst to one
  // destination, all of one size but the last (no larger), leave in one
  // sendmsg with UDP_SEGMENT; the kernel cuts them into datagrams where
  // they must be cut, and hands them over whole on loopback and veth. The
  // payloads are RoCEv2 packets: segment i of a batch gets the ICRC of IPv4
  // identification i, which is what the kernel writes into its header
  // (docs/transport.md, "Batched I/O"). Off: one datagram per packet.
  bool gso = true;
  // UDP receive offload (UDP_GRO): a batch that arrives whole is read in
  // one go and split here into its packets, packet i with ip_id i.
  bool gro = true;
  // SO_REUSEPORT on the unicast socket: other sockets of this user (the
  // kernel refuses other users) may bind the same address and share what
  // arrives (MultiQueueUdpPort's receive queues). With `steer_queues` N > 0
  // this socket attaches to its group a classic BPF program that gives each
  // datagram to the group's socket 1 + (the sender's UDP port mod N), in
  // the order they were bound: a sender's packets, and so each of its QPs',
  // always reach the same socket, in order, and the group's first socket
  // none. Attach it from the last socket bound: until then the kernel
  // spreads by a hash of the addresses.
  bool reuse_port = false;
  int steer_queues = 0;
};

class UdpPort : public Port {
 public:
  static absl::StatusOr<std::unique_ptr<UdpPort>> Create(const UdpPortConfig& config);
  ~UdpPort() override;

  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  // External bytes go as one more piece of the datagram (sendmmsg's iovec).
  bool TakesExternalBytes() const override { return true; }
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override;
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override;
  Ipv4Endpoint local() const override { return local_; }
  PacketPool& pool() override { return pool_; }
  const PortCounters& counters() const override { return counters_; }
  // An eventfd in the port's epoll set: a waiting RecvBurst returns.
  void Wake() override;
  bool CanWake() const override { return true; }
  // The port's epoll set (its sockets and the wake eventfd); not with
  // busy_poll or a poll_window, which spin inside RecvBurst.
  int wait_fd() const override;
  absl::Duration SleepBound(absl::Duration limit) override;
  // Pending packets, or a socket an earlier read left datagrams in.
  bool MayHoldMore() const override;
  // With GRO: the batch buffers `bytes` fill, and one more, from the top
  // of their free list (where reads take them).
  void ReserveReceive(size_t bytes) override;
  // Datagrams to a joined multicast group are read with their payloads
  // in the placer's places (one recvmsg per batch, an iovec triple per
  // packet), as long as it offers places; the rest as before.
  void SetReceivePlacer(ReceivePlacer* placer) override { placer_ = placer; }

 private:
  struct Socket {
    int fd = -1;
    Ipv4Endpoint bound;  // the address datagrams on this socket were sent to
    bool unread = false;  // may hold datagrams: its last read was full, or it was not reached
  };

  explicit UdpPort(const UdpPortConfig& config);
  absl::Status Open();
  // Non-blocking read of up to out.size() datagrams from `s`; notes in
  // s.unread whether it may have left some behind.
  size_t ReadSocket(Socket& s, std::span<PacketBuffer*> out);
  // ReadSocket without places.
  size_t ReadSocketUnplaced(Socket& s, std::span<PacketBuffer*> out);
  // Hands received packet `p` (segment k of a read of `count`, from `src`
  // to s.bound) out: to out[kept++], or to pending_ once `out` is full.
  void HandOut(PacketBuffer* p, const Ipv4Endpoint& src, const Socket& s, size_t k, size_t count,
               std::span<PacketBuffer*> out, size_t& kept);
  // Counts a read that returned `n`: an empty one, or an error.
  void CountRead(const Socket& s, int n);
  // Pending packets, then every socket in turn (busy polling).
  size_t ReadAll(std::span<PacketBuffer*> out);
  // Pending packets, then the sockets, or with `only_unread` only those an
  // earlier read left datagrams in.
  size_t ReadSockets(std::span<PacketBuffer*> out, bool only_unread);
  // Waits up to `timeout` for sockets with datagrams and reads those.
  size_t ReadReady(std::span<PacketBuffer*> out, absl::Duration timeout);
  // epoll_pwait2 (exact timeout), or epoll_wait in whole milliseconds.
  int Wait(epoll_event* events, absl::Duration timeout);
  // Notes the time of a receive of n > 0 packets for the poll window; returns n.
  size_t Received(size_t n);
  // With gro: reads whole batches from `s` into batch buffers and hands
  // their packets out as views of them, delivered to `out`, the rest to
  // pending_.
  size_t ReadSocketGro(Socket& s, std::span<PacketBuffer*> out);
  // Reads datagrams from multicast socket `s` into the placer's places,
  // up to out.size() of them, one batch (or datagram) per recvmsg; notes
  // in s.unread whether the socket may hold more, and in *out_of_places
  // whether it stopped because the placer's guesses ran out (or it had
  // none). Packets of a batch beyond its places are copied out.
  size_t ReadSocketPlaced(Socket& s, std::span<PacketBuffer*> out, bool* out_of_places);
  // Moves pending_ packets to `out`.
  size_t TakePending(std::span<PacketBuffer*> out);
  // Sends packets[0, n) as runs (see gso); returns how many were taken.
  size_t SendRuns(std::span<PacketBuffer* const> packets);
  // The pieces `p` goes out in (1 to 3: its external bytes from where they
  // are) written to `out`; returns how many.
  static size_t Pieces(PacketBuffer& p, iovec* out);

  UdpPortConfig config_;
  PacketPool pool_;
  PacketPool batch_pool_;  // whole batches (gro), 64 KiB each
  PortCounters counters_;
  Ipv4Endpoint local_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;                 // eventfd, in epoll_fd_
  std::atomic<bool> woken_{false};   // a Wake not yet seen by RecvBurst
  std::vector<Socket> sockets_;  // [0] is the unicast socket
  size_t next_socket_ = 0;       // round robin among sockets with data
  bool has_epoll_pwait2_ = true;
  int64_t last_activity_ns_ = 0;  // RealClock() of the last packet sent or received
  std::vector<uint8_t> scratch_;       // a batch read when no batch buffer is free
  ReceivePlacer* placer_ = nullptr;
  std::vector<ReceivePlace> places_;   // ReadSocketPlaced's guesses
  std::vector<uint8_t> spill_;         // what a placed read's places did not take
  std::vector<uint8_t> gathered_;      // a placed read that did not fit its places, whole
  std::deque<PacketBuffer*> pending_;  // split from a batch, not yet handed out
  proto::IcrcIdentificationTable icrc_ids_;
  bool gso_works_ = true;  // cleared when the kernel refuses UDP_SEGMENT
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_UDP_PORT_H_
