// A UdpPort whose receiving is spread over threads, the way a NIC spreads
// flows over receive queues (RSS): each queue is a socket bound to the
// port's address in one SO_REUSEPORT group, read by a thread of its own
// into a pool of its own, and the packets it reads wait in the queue until
// the port's owner takes them in RecvBurst. A program on the group steers
// each datagram by its sender's port (UdpPortConfig::steer_queues), so a
// sender's packets, and each of its QPs', always go through the same queue,
// in order; RC, the ICRC
// check and everything after it stay on the owner's thread. What the
// threads take off that thread is the kernel's receive: the system calls
// and the copy of every datagram (docs/switch.md, "Receive queues").
//
//   auto port = MultiQueueUdpPort::Create({.port = {.local = addr}, .queues = 2});
//   size_t n = (*port)->RecvBurst(rx, absl::Milliseconds(10));  // as any Port
//
// Sending, multicast groups, Wake, wait_fd and the pool senders allocate
// from are the inner UdpPort's (the group's first socket, to which the
// program steers nothing; the multicast groups it joins are sockets of its
// own, read on the owner's thread, without GRO). A queue reads without GRO: a
// GSO batch arrives as its datagrams, each then with ip_id 0, which the
// endpoint's ICRC check accepts by the segment identifications.
//
// Thread-safety: as for every Port, one thread polls it; the queue threads
// are its own and stop in the destructor. Buffers read by a queue come from
// its pool (PacketPoolConfig::returns_from_any_thread) and may be freed on
// any thread.
#ifndef NETFOLD_TRANSPORT_MULTI_QUEUE_UDP_PORT_H_
#define NETFOLD_TRANSPORT_MULTI_QUEUE_UDP_PORT_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/udp_port.h"

namespace netfold::transport {

struct MultiQueueUdpPortConfig {
  // The port: address, pool (each queue gets a pool of the same size),
  // socket buffers (each queue's socket too) and GSO. gro, reuse_port and
  // steer_queues are set here.
  UdpPortConfig port;
  int queues = 2;  // receive threads, 1..16
};

class MultiQueueUdpPort : public Port {
 public:
  // Binds the inner socket and then each queue's, in that order (the
  // program's numbering), attaches the steering program from the last one,
  // so that it holds only once every socket it names exists, and starts the
  // queue threads, named "netfold-rxq".
  static absl::StatusOr<std::unique_ptr<MultiQueueUdpPort>> Create(
      const MultiQueueUdpPortConfig& config);
  // Stops the queue threads and frees what waits in the queues. Buffers
  // still held elsewhere must have been freed first (as for any port's
  // pool).
  ~MultiQueueUdpPort() override;

  // What the queues hold first, then the inner port's own socket; waits up
  // to `timeout` only when neither has anything (a queue that gets a
  // packet wakes the wait).
  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  bool TakesExternalBytes() const override { return inner_->TakesExternalBytes(); }
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override;
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override;
  Ipv4Endpoint local() const override { return inner_->local(); }
  PacketPool& pool() override { return inner_->pool(); }
  // The inner port's and every queue's, summed when asked. rx_no_buffer
  // also counts each stretch a queue waited for buffers (its pool empty,
  // everything it read still held).
  const PortCounters& counters() const override;
  void Wake() override { inner_->Wake(); }
  bool CanWake() const override { return true; }
  int wait_fd() const override { return inner_->wait_fd(); }
  absl::Duration SleepBound(absl::Duration limit) override;

  int num_queues() const { return static_cast<int>(queues_.size()); }
  // Packets a queue has read (all of them, owner thread or not).
  uint64_t queue_packets(int queue) const;
  // Each queue's "rx_queue.<i>.packets" and "rx_queue.<i>.starved" (the
  // stretches it waited for buffers), for the switch's admin API. Any
  // thread.
  void ForEachCounter(const std::function<void(std::string_view, uint64_t)>& fn) const;

 private:
  struct Queue {
    std::unique_ptr<UdpPort> port;  // its socket of the group, its pool
    std::thread thread;
    absl::Mutex mu;
    std::deque<PacketBuffer*> ready ABSL_GUARDED_BY(mu);  // read, not yet taken
    std::atomic<bool> has_ready{false};
    std::atomic<uint64_t> starved{0};  // stretches with an empty pool
  };

  explicit MultiQueueUdpPort(std::unique_ptr<UdpPort> inner) : inner_(std::move(inner)) {}
  void Run(Queue* q);
  // Moves what the queues hold into `out`, round robin; returns how many.
  size_t TakeReady(std::span<PacketBuffer*> out);
  void SumCounters() const;

  std::unique_ptr<UdpPort> inner_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::atomic<bool> stop_{false};
  size_t next_queue_ = 0;
  mutable PortCounters counters_;  // the sums, refreshed by counters()
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_MULTI_QUEUE_UDP_PORT_H_
