#include "transport/packet_pool.h"

#include <cstdlib>

#include "base/log.h"

namespace netfold::transport {

void PacketBuffer::set_len(uint32_t n) {
  if (n > capacity_) {
    NETFOLD_LOG(kError) << "PacketBuffer::set_len(" << n << ") beyond capacity " << capacity_;
    std::abort();
  }
  len_ = n;
}

PacketPool::PacketPool(const PacketPoolConfig& config) : config_(config) {
  const size_t stride = static_cast<size_t>(config_.headroom) + config_.buffer_size;
  // Round each buffer up to a cache line so buffers never share one.
  const size_t aligned_stride = (stride + 63) / 64 * 64;
  memory_.reset(new uint8_t[aligned_stride * config_.num_buffers + 64]);
  uint8_t* base = memory_.get();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  buffers_.resize(config_.num_buffers);
  free_.reserve(config_.num_buffers);
  for (uint32_t i = 0; i < config_.num_buffers; ++i) {
    PacketBuffer& b = buffers_[i];
    b.headroom_ = config_.headroom;
    b.data_ = base + aligned_stride * i + config_.headroom;
    b.capacity_ = config_.buffer_size;
    b.pool_ = this;
    b.in_pool_ = true;
    free_.push_back(&b);
  }
}

PacketPool::~PacketPool() {
  if (num_in_use() != 0) {
    NETFOLD_LOG(kWarning) << "PacketPool destroyed with " << num_in_use()
                          << " buffers still in use (leak)";
  }
}

PacketBuffer* PacketPool::Alloc() {
  if (free_.empty()) {
    ++alloc_failures_;
    return nullptr;
  }
  PacketBuffer* p = free_.back();
  free_.pop_back();
  p->in_pool_ = false;
  p->len_ = 0;
  p->src = {};
  p->dst = {};
  p->due_ns = 0;
  p->ip_id = 0;
  return p;
}

size_t PacketPool::AllocBurst(std::span<PacketBuffer*> out) {
  size_t n = 0;
  while (n < out.size()) {
    PacketBuffer* p = Alloc();
    if (p == nullptr) break;
    out[n++] = p;
  }
  return n;
}

void PacketPool::Release(PacketBuffer* p) {
  if (p->in_pool_) {
    NETFOLD_LOG(kError) << "PacketBuffer freed twice";
    std::abort();
  }
  p->in_pool_ = true;
  free_.push_back(p);
}

void PacketPool::Free(PacketBuffer* p) {
  if (p != nullptr) p->pool_->Release(p);
}

void PacketPool::FreeBurst(std::span<PacketBuffer* const> packets) {
  for (PacketBuffer* p : packets) Free(p);
}

void PacketBatch::Consume(size_t n) {
  if (n >= packets_.size()) {
    packets_.clear();
  } else {
    packets_.erase(packets_.begin(), packets_.begin() + static_cast<ptrdiff_t>(n));
  }
}

void PacketBatch::Clear() {
  PacketPool::FreeBurst(packets_);
  packets_.clear();
}

}  // namespace netfold::transport
