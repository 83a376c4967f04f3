// An in-process network for tests and benchmarks: ports that exchange packets
// through a shared hub instead of sockets (like DPDK's net_ring).
//
//   MemoryNetwork net;
//   auto a = net.CreatePort({.local = {0x0a000001, 4791}});
//   auto b = net.CreatePort({.local = {0x0a000002, 4791}});
//   ... a->SendBurst(...) to b's address; b->RecvBurst(...) ...
//
// Each port has its own pool; a packet crossing the hub is copied into the
// receiver's pool, as a wire would. A packet to an address nobody has is
// dropped and counted (num_unroutable). Multicast reaches every port that
// joined the group. Receive queues are bounded (`rx_queue_limit`); beyond it
// packets are dropped and counted as rx_no_buffer, like a full NIC ring.
//
// Thread-safety: the hub is thread-safe, so ports may be polled from
// different threads; each port still belongs to one thread. RecvBurst waits
// on a condition variable with real time.
#ifndef NETFOLD_TRANSPORT_MEMORY_PORT_H_
#define NETFOLD_TRANSPORT_MEMORY_PORT_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/port.h"

namespace netfold::transport {

class MemoryNetwork;

struct MemoryPortConfig {
  Ipv4Endpoint local{0x7f000001, kDefaultRocePort};
  PacketPoolConfig pool;
  size_t rx_queue_limit = 1024;
};

class MemoryPort : public Port {
 public:
  ~MemoryPort() override;

  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  // Taken and made whole at once (the network copies what it delivers).
  bool TakesExternalBytes() const override { return true; }
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override;
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override;
  Ipv4Endpoint local() const override { return config_.local; }
  PacketPool& pool() override { return pool_; }
  const PortCounters& counters() const override { return counters_; }
  // Prefaults the pool's buffers that `bytes` of packets fill, and keeps
  // the largest request (reserved_receive_bytes, for tests of callers).
  void ReserveReceive(size_t bytes) override;
  size_t reserved_receive_bytes() const { return reserved_receive_bytes_; }

 private:
  friend class MemoryNetwork;
  MemoryPort(MemoryNetwork* net, const MemoryPortConfig& config);
  // Called by the hub with its lock held: copies `p` into this port's queue.
  void Deliver(const PacketBuffer& p, const Ipv4Endpoint& dst);

  MemoryNetwork* net_;
  MemoryPortConfig config_;
  PacketPool pool_;  // only touched by the owning thread...
  PortCounters counters_;
  // ...except for the copies made on delivery, which go into this ring of
  // frames (allocated once) guarded by the hub's lock.
  struct Frame {
    std::vector<uint8_t> bytes;
    Ipv4Endpoint src, dst;
  };
  std::vector<Frame> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  size_t reserved_receive_bytes_ = 0;
};

class MemoryNetwork {
 public:
  MemoryNetwork() = default;
  MemoryNetwork(const MemoryNetwork&) = delete;
  MemoryNetwork& operator=(const MemoryNetwork&) = delete;
  ~MemoryNetwork();

  // AlreadyExists if another port has `config.local`. Port 0 is not assigned
  // automatically: give each port a distinct address. The network must
  // outlive its ports.
  absl::StatusOr<std::unique_ptr<MemoryPort>> CreatePort(const MemoryPortConfig& config);
  uint64_t num_unroutable() const;

 private:
  friend class MemoryPort;
  void Remove(MemoryPort* port);
  void Route(std::span<PacketBuffer* const> packets, const Ipv4Endpoint& src);

  mutable absl::Mutex mu_;
  absl::CondVar arrived_;
  absl::flat_hash_map<Ipv4Endpoint, MemoryPort*> ports_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Ipv4Endpoint, std::vector<MemoryPort*>> groups_ ABSL_GUARDED_BY(mu_);
  uint64_t unroutable_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_MEMORY_PORT_H_
