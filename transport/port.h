// The I/O backend interface: a port moves bursts of packet buffers between
// the network and the data plane. Kernel UDP sockets (udp_port.h), an
// in-process pair for tests (memory_port.h), link impairment
// (impaired_port.h) and, later, DPDK implement it.
//
//   PacketBuffer* rx[32];
//   size_t n = port.RecvBurst(rx, absl::Milliseconds(10));
//   ... handle rx[0..n) ...
//   size_t sent = port.SendBurst(tx);            // port owns tx[0..sent)
//   PacketPool::FreeBurst(tx.subspan(sent));     // the rest is still ours
//
// Contract (the same for every backend):
// - RecvBurst fills out[0..n) with received packets, waiting up to `timeout`
//   for the first one (zero: do not wait). The caller owns the returned
//   buffers. Returning 0 means nothing arrived before the timeout (or no
//   buffer was free: counted in rx_no_buffer); it is never an error.
//   Each packet's `src` is the sender and `dst` the local or multicast
//   address it was sent to; data() starts at the UDP payload.
// - SendBurst sends packets[0..n) in order, each to its `dst`, and returns how
//   many it took (a prefix). The port owns and frees the packets it took;
//   the caller still owns the rest and retries or frees them. It does not
//   block waiting for the network.
// - A port, its pool and its buffers belong to one thread (the loop that
//   polls it). Counters may be read from any thread (relaxed atomics), and
//   Wake may be called from any thread: it makes a RecvBurst that is
//   waiting return soon (with what arrived, possibly nothing), or the next
//   one if none is waiting.
#ifndef NETFOLD_TRANSPORT_PORT_H_
#define NETFOLD_TRANSPORT_PORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/ipv4_endpoint.h"
#include "transport/packet_pool.h"

namespace netfold::transport {

// Plain counters, atomics so that an admin thread can read them while the
// data plane runs.
struct PortCounters {
  std::atomic<uint64_t> rx_packets{0};
  std::atomic<uint64_t> rx_bytes{0};
  std::atomic<uint64_t> tx_packets{0};
  std::atomic<uint64_t> tx_bytes{0};
  std::atomic<uint64_t> rx_no_buffer{0};  // pool empty when a packet could be read
  std::atomic<uint64_t> rx_truncated{0};  // datagram larger than a buffer
  std::atomic<uint64_t> rx_errors{0};     // socket errors on receive
  std::atomic<uint64_t> tx_errors{0};     // packets refused by the network (not retried)
  std::atomic<uint64_t> tx_batched{0};    // packets sent in a segmentation batch of 2 or more
  std::atomic<uint64_t> rx_batched{0};    // packets received in a batch that arrived whole
  // Of those, packets copied out of their batch because no batch buffer
  // was free (the packets of earlier batches still held them): the cost
  // of holding received packets long (a switch keeps early contributions).
  std::atomic<uint64_t> rx_batch_copied{0};
  // Looks that found nothing (udp backend: a recvmmsg that returned
  // EAGAIN, or an epoll asked without waiting that found no socket
  // ready): system calls that did no work.
  std::atomic<uint64_t> rx_empty_reads{0};
  // Datagrams whose payload the port wrote straight into a ReceivePlacer's
  // memory (rx_placed), and those read into a place that turned out not
  // to be theirs, whose payload was then copied back into the packet
  // (rx_place_missed): a wrong guess costs a copy, nothing else.
  std::atomic<uint64_t> rx_placed{0};
  std::atomic<uint64_t> rx_place_missed{0};

  void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
};

// Where a port may write the payload of a datagram it is about to read:
// memory of the port's owner, as a NIC writes a receive into the buffer
// posted for it. The datagram's first `head` bytes and its last `tail`
// (for RoCEv2: BTH, DETH and the aggregation header; pad and ICRC) stay
// in the packet buffer, and the packet comes up with its payload as
// external bytes (PacketBuffer::external) at `at`.
struct ReceivePlace {
  uint8_t* at = nullptr;
  uint32_t len = 0;
  uint32_t head = 0;
  uint32_t tail = 0;
  uint64_t id = 0;  // the placer's, handed back in ClaimPlace
};

// The owner's side of placed receives (Port::SetReceivePlacer). Called
// only inside RecvBurst, on the thread that polls the port.
class ReceivePlacer {
 public:
  virtual ~ReceivePlacer() = default;
  // Up to out.size() places for the next datagrams sent to multicast
  // `group`, the likeliest first; their memory must not overlap, and the
  // port may write any bytes into any of them (a datagram that was not
  // the one guessed, or a forged one). Returns how many it filled.
  virtual size_t PredictPlaces(const Ipv4Endpoint& group, std::span<ReceivePlace> out) = 0;
  // A datagram of place.head + place.len + place.tail bytes was read into
  // `place`; `head` is its first place.head bytes (not yet checked by
  // anyone: the ICRC comes later). True if it is the datagram the place
  // was guessed for: the packet then comes up with its payload in the
  // place, and the placer must not offer that memory again while the
  // packet may still be on its way up (it may be dropped below, unseen).
  // False: the port copies the payload into the packet before RecvBurst
  // returns, and the place's memory holds whatever was written there.
  virtual bool ClaimPlace(const ReceivePlace& place, std::span<const uint8_t> head) = 0;
};

class Port {
 public:
  virtual ~Port() = default;

  virtual size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) = 0;
  virtual size_t SendBurst(std::span<PacketBuffer* const> packets) = 0;
  // True if SendBurst takes packets with external bytes
  // (PacketBuffer::external): it sends them from where they are, or makes
  // the packet whole before it reads or keeps it. The default: no, and
  // queue pairs then copy every byte into the packet.
  virtual bool TakesExternalBytes() const { return false; }

  // Starts/stops receiving datagrams sent to multicast `group` (its ip and
  // port). Joining twice or leaving a group not joined is an error
  // (AlreadyExists / NotFound).
  virtual absl::Status JoinMulticast(const Ipv4Endpoint& group) = 0;
  virtual absl::Status LeaveMulticast(const Ipv4Endpoint& group) = 0;

  // The unicast address packets to this port are sent to.
  virtual Ipv4Endpoint local() const = 0;
  // The pool RecvBurst takes buffers from; senders may allocate from it too.
  virtual PacketPool& pool() = 0;
  virtual const PortCounters& counters() const = 0;

  // See the contract above. The default does nothing: for ports whose
  // RecvBurst never sleeps for long (in-memory, DPDK bursts).
  virtual void Wake() {}
  // True if Wake() cuts a waiting RecvBurst short: an owner may then wait
  // long when idle and rely on Wake for work from other threads.
  virtual bool CanWake() const { return false; }

  // For a loop that serves several ports on one thread (poll(2) over their
  // wait_fd()s, then RecvBurst with no timeout on each): a file descriptor
  // that turns readable when the network has something for RecvBurst or
  // Wake was called, -1 if the port has none (it cannot share a thread).
  virtual int wait_fd() const { return -1; }
  // How long such a loop may sleep on wait_fd() before this port needs
  // RecvBurst again, at most `limit`: zero when the port already holds
  // packets the fd does not announce (read and not yet handed out), or
  // until a packet it holds back (a delay) is due.
  virtual absl::Duration SleepBound(absl::Duration limit) { return limit; }
  // False only when the port knows its last RecvBurst took everything that
  // had arrived by then (nothing read was left over, no read filled its
  // burst): an owner that drains the network before judging a timer need
  // not ask again at once (that read would mostly find nothing). The
  // default: more may be waiting.
  virtual bool MayHoldMore() const { return true; }
  // Makes the memory that receiving `bytes` in flight will use ready now
  // (written once, so in memory), as a NIC's receive buffers are posted
  // before traffic comes. Best-effort; the default does nothing.
  virtual void ReserveReceive(size_t bytes) { (void)bytes; }
  // Payloads of datagrams sent to a multicast group this port joined may
  // go straight into `placer`'s memory (nullptr: never). Every packet of
  // a RecvBurst that claimed a place is handed out by that RecvBurst
  // (none is kept for the next), so the memory is written only while the
  // placer is asked. The default: the port never places, and the placer
  // is not called.
  virtual void SetReceivePlacer(ReceivePlacer* placer) { (void)placer; }
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_PORT_H_
