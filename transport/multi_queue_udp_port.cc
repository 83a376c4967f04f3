#include "transport/multi_queue_udp_port.h"

#include <pthread.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace netfold::transport {
namespace {

constexpr int kMaxQueues = 16;
// How long a queue thread sleeps in epoll before it looks at stop_ again
// (the destructor wakes it sooner).
constexpr absl::Duration kQueueWait = absl::Milliseconds(100);
// How long it waits for buffers when its pool is empty (everything it read
// is still held by the owner): doubling from the first to the last, so that
// a queue starved for long looks a thousand times a second, not twenty
// thousand. What arrives meanwhile waits in the socket's buffer.
constexpr absl::Duration kFirstNoBufferWait = absl::Microseconds(50);
constexpr absl::Duration kLastNoBufferWait = absl::Milliseconds(1);
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
  // The inner socket gets what the program steers nowhere (datagrams too
  // short for it) and multicast, if the owner joins groups: no GRO, whose
  // batch buffers would wait for nothing.
  UdpPortConfig inner = config.port;
  inner.reuse_port = true;
  inner.steer_queues = 0;
  inner.gro = false;
  NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<UdpPort> first, UdpPort::Create(inner));
  std::unique_ptr<MultiQueueUdpPort> port(new MultiQueueUdpPort(std::move(first)));
  // Bound after the first, in order: queue i is the group's socket i + 1,
  // where the program steers senders whose port is i modulo the queues. The
  // last one attaches the program: until then the kernel spreads by hash,
  // and a packet that reaches the inner socket is read on the owner's
  // thread, as any other.
  for (int i = 0; i < config.queues; ++i) {
    UdpPortConfig qc = config.port;
    qc.local = port->inner_->local();
    qc.reuse_port = true;
    qc.steer_queues = i + 1 == config.queues ? config.queues : 0;
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
    // Named here, not by the thread, so that it has its name once Create
    // returns (top -H, the tests).
    pthread_setname_np(q->thread.native_handle(), "netfold-rxq");
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
    for (PacketBuffer* p : q->ready) PacketPool::Free(p);
    q->ready.clear();
  }
}

void MultiQueueUdpPort::Run(Queue* q) {
  PacketPool& pool = q->port->pool();
  PacketBuffer* burst[kQueueBurst];
  absl::Duration no_buffer_wait = kFirstNoBufferWait;
  while (!stop_.load(std::memory_order_relaxed)) {
    if (pool.num_free() == 0) pool.Reclaim();
    if (pool.num_free() == 0) {
      if (no_buffer_wait == kFirstNoBufferWait) {
        q->starved.fetch_add(1, std::memory_order_relaxed);
      }
      absl::SleepFor(no_buffer_wait);
      no_buffer_wait = std::min(2 * no_buffer_wait, kLastNoBufferWait);
      continue;
    }
    no_buffer_wait = kFirstNoBufferWait;
    const size_t n = q->port->RecvBurst(burst, kQueueWait);
    if (n == 0) continue;
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
    const auto end = q.ready.begin() + static_cast<ptrdiff_t>(take);
    std::copy(q.ready.begin(), end, out.begin() + static_cast<ptrdiff_t>(n));
    q.ready.erase(q.ready.begin(), end);
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
  return n;
}

size_t MultiQueueUdpPort::SendBurst(std::span<PacketBuffer* const> packets) {
  return inner_->SendBurst(packets);
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

void MultiQueueUdpPort::ForEachCounter(
    const std::function<void(std::string_view, uint64_t)>& fn) const {
  for (size_t i = 0; i < queues_.size(); ++i) {
    fn(absl::StrFormat("rx_queue.%d.packets", i), queue_packets(static_cast<int>(i)));
    fn(absl::StrFormat("rx_queue.%d.starved", i),
       queues_[i]->starved.load(std::memory_order_relaxed));
  }
}

const PortCounters& MultiQueueUdpPort::counters() const {
  SumCounters();
  return counters_;
}

void MultiQueueUdpPort::SumCounters() const {
  uint64_t starved = 0;
  for (const auto& q : queues_) starved += q->starved.load(std::memory_order_relaxed);
  auto sum = [&](std::atomic<uint64_t> PortCounters::*field, uint64_t extra = 0) {
    uint64_t total = (inner_->counters().*field).load(std::memory_order_relaxed) + extra;
    for (const auto& q : queues_) {
      total += (q->port->counters().*field).load(std::memory_order_relaxed);
    }
    (counters_.*field).store(total, std::memory_order_relaxed);
  };
  sum(&PortCounters::rx_packets);
  sum(&PortCounters::rx_bytes);
  sum(&PortCounters::tx_packets);
  sum(&PortCounters::tx_bytes);
  sum(&PortCounters::rx_no_buffer, starved);
  sum(&PortCounters::rx_truncated);
  sum(&PortCounters::rx_errors);
  sum(&PortCounters::tx_errors);
  sum(&PortCounters::tx_batched);
  sum(&PortCounters::rx_batched);
  sum(&PortCounters::rx_batch_copied);
  sum(&PortCounters::rx_empty_reads);
}

}  // namespace netfold::transport
