#include "transport/memory_port.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::transport {

MemoryPort::MemoryPort(MemoryNetwork* net, const MemoryPortConfig& config)
    : net_(net), config_(config), pool_(config.pool) {
  ring_.resize(std::max<size_t>(config_.rx_queue_limit, 1));
  for (Frame& f : ring_) f.bytes.reserve(config_.pool.buffer_size);
}

MemoryPort::~MemoryPort() { net_->Remove(this); }

void MemoryPort::Deliver(const PacketBuffer& p, const Ipv4Endpoint& dst) {
  if (count_ == ring_.size() || p.len() > config_.pool.buffer_size) {
    counters_.Add(counters_.rx_no_buffer);
    return;
  }
  Frame& f = ring_[(head_ + count_) % ring_.size()];
  f.bytes.assign(p.data(), p.data() + p.len());
  f.src = p.src;
  f.dst = dst;
  ++count_;
}

void MemoryPort::ReserveReceive(size_t bytes) {
  reserved_receive_bytes_ = std::max(reserved_receive_bytes_, bytes);
  const size_t per_buffer = std::max<size_t>(pool_.buffer_size(), 1);
  const size_t buffers = (bytes + per_buffer - 1) / per_buffer;
  pool_.Prefault(static_cast<uint32_t>(std::min<size_t>(buffers, UINT32_MAX)));
}

size_t MemoryPort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  absl::MutexLock lock(&net_->mu_);
  if (count_ == 0 && timeout > absl::ZeroDuration()) {
    const absl::Time deadline = absl::Now() + timeout;
    while (count_ == 0 && !net_->arrived_.WaitWithDeadline(&net_->mu_, deadline)) {
    }
  }
  size_t n = 0;
  while (n < out.size() && count_ > 0) {
    PacketBuffer* p = pool_.Alloc();
    if (p == nullptr) {
      counters_.Add(counters_.rx_no_buffer);
      break;
    }
    Frame& f = ring_[head_];
    std::memcpy(p->data(), f.bytes.data(), f.bytes.size());
    p->set_len(static_cast<uint32_t>(f.bytes.size()));
    p->src = f.src;
    p->dst = f.dst;
    head_ = (head_ + 1) % ring_.size();
    --count_;
    counters_.Add(counters_.rx_packets);
    counters_.Add(counters_.rx_bytes, p->len());
    out[n++] = p;
  }
  return n;
}

size_t MemoryPort::SendBurst(std::span<PacketBuffer* const> packets) {
  // The network copies what it delivers: the bytes must be in the packets.
  for (PacketBuffer* p : packets) p->Materialize();
  net_->Route(packets, config_.local);
  for (PacketBuffer* p : packets) {
    counters_.Add(counters_.tx_packets);
    counters_.Add(counters_.tx_bytes, p->len());
    PacketPool::Free(p);
  }
  return packets.size();
}

absl::Status MemoryPort::JoinMulticast(const Ipv4Endpoint& group) {
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a multicast address (224.0.0.0/4)", group.ToString()));
  }
  absl::MutexLock lock(&net_->mu_);
  auto& members = net_->groups_[group];
  if (std::find(members.begin(), members.end(), this) != members.end()) {
    return absl::AlreadyExistsError(absl::StrFormat("already joined %s", group.ToString()));
  }
  members.push_back(this);
  return absl::OkStatus();
}

absl::Status MemoryPort::LeaveMulticast(const Ipv4Endpoint& group) {
  absl::MutexLock lock(&net_->mu_);
  auto it = net_->groups_.find(group);
  if (it != net_->groups_.end()) {
    auto& members = it->second;
    auto pos = std::find(members.begin(), members.end(), this);
    if (pos != members.end()) {
      members.erase(pos);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrFormat("not a member of %s", group.ToString()));
}

MemoryNetwork::~MemoryNetwork() = default;

absl::StatusOr<std::unique_ptr<MemoryPort>> MemoryNetwork::CreatePort(
    const MemoryPortConfig& config) {
  if (config.local.IsMulticast()) {
    return absl::InvalidArgumentError("a port's own address cannot be a multicast address");
  }
  absl::MutexLock lock(&mu_);
  if (ports_.contains(config.local)) {
    return absl::AlreadyExistsError(
        absl::StrFormat("address %s is taken on this network", config.local.ToString()));
  }
  std::unique_ptr<MemoryPort> port(new MemoryPort(this, config));
  ports_[config.local] = port.get();
  return port;
}

void MemoryNetwork::Remove(MemoryPort* port) {
  absl::MutexLock lock(&mu_);
  ports_.erase(port->config_.local);
  for (auto& [group, members] : groups_) {
    members.erase(std::remove(members.begin(), members.end(), port), members.end());
  }
}

void MemoryNetwork::Route(std::span<PacketBuffer* const> packets, const Ipv4Endpoint& src) {
  absl::MutexLock lock(&mu_);
  for (PacketBuffer* p : packets) {
    p->src = src;
    if (p->dst.IsMulticast()) {
      auto it = groups_.find(p->dst);
      if (it == groups_.end() || it->second.empty()) {
        ++unroutable_;
        continue;
      }
      for (MemoryPort* member : it->second) member->Deliver(*p, p->dst);
    } else {
      auto it = ports_.find(p->dst);
      if (it == ports_.end()) {
        ++unroutable_;
        continue;
      }
      it->second->Deliver(*p, p->dst);
    }
  }
  arrived_.SignalAll();
}

uint64_t MemoryNetwork::num_unroutable() const {
  absl::MutexLock lock(&mu_);
  return unroutable_;
}

}  // namespace netfold::transport
