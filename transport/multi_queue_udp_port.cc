#include "transport/multi_queue_udp_port.h"

#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace netfold::transport {
namespace {

constexpr int kMaxQueues = 16;
// How long a queue thread sleeps in epoll before it looks at stop_ again
// (the destructor wakes it sooner), and how long it waits for buffers when
// its pool is empty (everything it read is still held by the owner).
constexpr absl::Duration kQueueWait = absl::Milliseconds(100);
constexpr absl::Duration kNoBufferWait = absl::Microseconds(50);
constexpr size_t kQueueBurst = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<MultiQueueUdpPort>> MultiQueueUdpPort::Create(
    const MultiQueueUdpPortConfig& config) {
  if (config.queues < 1 || config.queues > kMaxQueues) {
    return absl::InvalidArgumentError(
        absl::StrFormat("receive queues: %d; from 1 to %d", config.queues, kMaxQueues));
  }
  if (config.port.busy_poll || config.port.poll_window > absl::ZeroDuration()) {
    return absl::InvalidArgumentError("receive queues sleep in epoll: no busy_poll or poll window");
  }
  UdpPortConfig inner = config.port;
  inner.reuse_port = true;
  inner.steer_queues = config.queues;
  NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<UdpPort> first, UdpPort::Create(inner));
  std::unique_ptr<MultiQueueUdpPort> port(new MultiQueueUdpPort(std::move(first)));
  // Bound after the first, in order: queue i is the group's socket i + 1,
  // where the program steers senders whose port is i modulo the queues.
  for (int i = 0; i < config.queues; ++i) {
    UdpPortConfig qc = config.port;
    qc.local = port->inner_->local();
    qc.reuse_port = true;
    qc.steer_queues = 0;
    qc.gro = false;
    qc.pool.num_views = 0;
    qc.pool.returns_from_any_thread = true;
    auto q = std::make_unique<Queue>();
    absl::StatusOr<std::unique_ptr<UdpPort>> qport = UdpPort::Create(qc);
    if (!qport.ok()) {
      return absl::Status(qport.status().code(),
                          absl::StrFormat("receive queue %d: %s", i, qport.status().message()));
    }
    q->port = std::move(*qport);
    port->queues_.push_back(std::move(q));
  }
  for (auto& q : port->queues_) {
    Queue* raw = q.get();
    q->thread = std::thread([p = port.get(), raw] { p->Run(raw); });
  }
  return port;
}

MultiQueueUdpPort::~MultiQueueUdpPort() {
  stop_.store(true, std::memory_order_relaxed);
  for (auto& q : queues_) q->port->Wake();
  for (auto& q : queues_) {
    if (q->thread.joinable()) q->thread.join();
  }
  for (auto& q : queues_) {
    absl::MutexLock lock(&q->mu);
    PacketPool::FreeBurst(q->ready);
    q->ready.clear();
  }
}

void MultiQueueUdpPort::Run(Queue* q) {
  pthread_setname_np(pthread_self(), "netfold-rxq");  // for top -H and the tests
  PacketBuffer* burst[kQueueBurst];
  while (!stop_.load(std::memory_order_relaxed)) {
    const size_t n = q->port->RecvBurst(burst, kQueueWait);
    if (n == 0) {
      // Nothing, or no buffer to read into: what it read is still held.
      q->port->pool().Reclaim();
      if (q->port->pool().num_free() == 0) absl::SleepFor(kNoBufferWait);
      continue;
    }
    bool was_empty;
    {
      absl::MutexLock lock(&q->mu);
      was_empty = q->ready.empty();
      q->ready.insert(q->ready.end(), burst, burst + n);
      q->has_ready.store(true, std::memory_order_release);
    }
    // Only the first burst of a batch the owner has not taken: a later one
    // finds it awake, or woken already.
    if (was_empty) inner_->Wake();
  }
}

size_t MultiQueueUdpPort::TakeReady(std::span<PacketBuffer*> out) {
  size_t n = 0;
  for (size_t k = 0; k < queues_.size() && n < out.size(); ++k) {
    Queue& q = *queues_[(next_queue_ + k) % queues_.size()];
    if (!q.has_ready.load(std::memory_order_acquire)) continue;
    absl::MutexLock lock(&q.mu);
    const size_t take = std::min(out.size() - n, q.ready.size());
    std::copy_n(q.ready.begin(), take, out.begin() + static_cast<ptrdiff_t>(n));
    q.ready.erase(q.ready.begin(), q.ready.begin() + static_cast<ptrdiff_t>(take));
    q.has_ready.store(!q.ready.empty(), std::memory_order_relaxed);
    n += take;
  }
  next_queue_ = (next_queue_ + 1) % queues_.size();
  return n;
}

size_t MultiQueueUdpPort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  if (out.empty()) return 0;
  size_t n = TakeReady(out);
  if (n < out.size()) {
    n += inner_->RecvBurst(out.subspan(n), n > 0 ? absl::ZeroDuration() : timeout);
  }
  // A queue that got packets while the inner port waited woke it.
  if (n < out.size()) n += TakeReady(out.subspan(n));
  SumCounters();
  return n;
}

size_t MultiQueueUdpPort::SendBurst(std::span<PacketBuffer* const> packets) {
  const size_t n = inner_->SendBurst(packets);
  SumCounters();
  return n;
}

absl::Status MultiQueueUdpPort::JoinMulticast(const Ipv4Endpoint& group) {
  return inner_->JoinMulticast(group);
}

absl::Status MultiQueueUdpPort::LeaveMulticast(const Ipv4Endpoint& group) {
  return inner_->LeaveMulticast(group);
}

absl::Duration MultiQueueUdpPort::SleepBound(absl::Duration limit) {
  for (const auto& q : queues_) {
    if (q->has_ready.load(std::memory_order_acquire)) return absl::ZeroDuration();
  }
  return inner_->SleepBound(limit);
}

uint64_t MultiQueueUdpPort::queue_packets(int queue) const {
  return queues_[static_cast<size_t>(queue)]->port->counters().rx_packets.load(
      std::memory_order_relaxed);
}

void MultiQueueUdpPort::SumCounters() {
  auto sum = [&](std::atomic<uint64_t> PortCounters::*field) {
    uint64_t total = (inner_->counters().*field).load(std::memory_order_relaxed);
    for (const auto& q : queues_) {
      total += (q->port->counters().*field).load(std::memory_order_relaxed);
    }
    (counters_.*field).store(total, std::memory_order_relaxed);
  };
  sum(&PortCounters::rx_packets);
  sum(&PortCounters::rx_bytes);
  sum(&PortCounters::tx_packets);
  sum(&PortCounters::tx_bytes);
  sum(&PortCounters::rx_no_buffer);
  sum(&PortCounters::rx_truncated);
  sum(&PortCounters::rx_errors);
  sum(&PortCounters::tx_errors);
  sum(&PortCounters::tx_batched);
  sum(&PortCounters::rx_batched);
}

}  // namespace netfold::transport
