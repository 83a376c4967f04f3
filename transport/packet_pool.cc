#include "transport/packet_pool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/log.h"

namespace netfold::transport {

void PacketBuffer::set_len(uint32_t n) {
  if (n > capacity_) {
    NETFOLD_LOG(kError) << "PacketBuffer::set_len(" << n << ") beyond capacity " << capacity_;
    std::abort();
  }
  len_ = n;
}

void PacketBuffer::SetExternal(uint32_t at, std::span<const uint8_t> bytes) {
  if (at > len_ || bytes.size() > len_ - at) {
    NETFOLD_LOG(kError) << "PacketBuffer::SetExternal(" << at << ", " << bytes.size()
                        << " bytes) beyond length " << len_;
    std::abort();
  }
  external_ = bytes.data();
  external_at_ = at;
  external_len_ = static_cast<uint32_t>(bytes.size());
}

void PacketBuffer::MaterializeExternal() {
  std::memcpy(data_ + external_at_, external_, external_len_);
  ClearExternal();
}

PacketPool::PacketPool(const PacketPoolConfig& config) : config_(config) {
  if (config_.returns_from_any_thread && config_.num_views != 0) {
    NETFOLD_LOG(kError) << "a PacketPool with returns_from_any_thread has no view headers";
    std::abort();
  }
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
  views_.resize(config_.num_views);
  free_views_.reserve(config_.num_views);
  for (PacketBuffer& v : views_) {
    v.pool_ = this;
    v.in_pool_ = true;
    free_views_.push_back(&v);
  }
}

PacketPool::~PacketPool() {
  Reclaim();
  if (num_in_use() != 0 || free_views_.size() != views_.size()) {
    NETFOLD_LOG(kWarning) << "PacketPool destroyed with " << num_in_use()
                          << " buffers still in use (leak)";
  }
}

void PacketPool::Reclaim() {
  if (!config_.returns_from_any_thread) return;
  // The whole list at once: no ABA, whatever other threads push meanwhile.
  PacketBuffer* p = returned_.exchange(nullptr, std::memory_order_acquire);
  while (p != nullptr) {
    PacketBuffer* next = p->returned_next_;
    p->returned_next_ = nullptr;
    free_.push_back(p);
    p = next;
  }
}

void PacketPool::PutBack(PacketBuffer* p) {
  if (!config_.returns_from_any_thread) {
    free_.push_back(p);
    return;
  }
  PacketBuffer* head = returned_.load(std::memory_order_relaxed);
  do {
    p->returned_next_ = head;
  } while (!returned_.compare_exchange_weak(head, p, std::memory_order_release,
                                            std::memory_order_relaxed));
}

void PacketPool::Prefault(uint32_t n) {
  n = std::min<uint32_t>(n, num_free());
  for (uint32_t i = 0; i < n; ++i) {
    PacketBuffer* b = free_[free_.size() - 1 - i];
    if (b->prefaulted_) continue;
    std::memset(b->data_ - b->headroom_, 0, size_t{b->headroom_} + b->capacity_);
    b->prefaulted_ = true;
  }
}

PacketBuffer* PacketPool::Alloc() {
  if (free_.empty()) Reclaim();
  if (free_.empty()) {
    ++alloc_failures_;
    return nullptr;
  }
  PacketBuffer* p = free_.back();
  free_.pop_back();
  p->in_pool_ = false;
  p->len_ = 0;
  p->ClearExternal();
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

PacketBuffer* PacketPool::AllocView(PacketBuffer* parent, uint32_t offset, uint32_t len) {
  if (free_views_.empty() || parent == nullptr || parent->is_view() ||
      static_cast<uint64_t>(offset) + len > parent->len()) {
    ++alloc_failures_;
    return nullptr;
  }
  PacketBuffer* v = free_views_.back();
  free_views_.pop_back();
  v->in_pool_ = false;
  v->data_ = parent->data() + offset;
  v->len_ = len;
  v->capacity_ = len;
  v->headroom_ = 0;
  v->ClearExternal();
  v->src = {};
  v->dst = {};
  v->due_ns = 0;
  v->ip_id = 0;
  v->parent_ = parent;
  ++parent->views_;
  return v;
}

PacketBuffer* PacketPool::NewHeapBuffer(uint32_t capacity) {
  auto* b = new PacketBuffer;
  b->data_ = static_cast<uint8_t*>(::operator new[](capacity, std::align_val_t{64}));
  b->capacity_ = capacity;
  b->in_pool_ = false;
  return b;
}

namespace {

void DeleteHeapBuffer(PacketBuffer* b) {
  ::operator delete[](b->data(), std::align_val_t{64});
  delete b;
}

}  // namespace

void PacketPool::Release(PacketBuffer* p) {
  if (p->in_pool_) {
    NETFOLD_LOG(kError) << "PacketBuffer freed twice";
    std::abort();
  }
  p->in_pool_ = true;
  p->ClearExternal();
  if (PacketBuffer* parent = p->parent_) {
    p->parent_ = nullptr;
    p->data_ = nullptr;
    free_views_.push_back(p);
    if (--parent->views_ == 0 && parent->freed_with_views_) {
      parent->freed_with_views_ = false;
      if (parent->pool_ == nullptr) {
        DeleteHeapBuffer(parent);
      } else {
        parent->pool_->PutBack(parent);
      }
    }
    return;
  }
  if (p->views_ != 0) {
    // Its views hold it: it goes back when the last one is freed.
    p->freed_with_views_ = true;
    return;
  }
  PutBack(p);
}

void PacketPool::Free(PacketBuffer* p) {
  if (p == nullptr) return;
  if (p->pool_ != nullptr) {
    p->pool_->Release(p);
    return;
  }
  // A heap buffer: deleted now, or by its last view.
  if (p->in_pool_) {
    NETFOLD_LOG(kError) << "PacketBuffer freed twice";
    std::abort();
  }
  p->in_pool_ = true;
  if (p->views_ != 0) {
    p->freed_with_views_ = true;
    return;
  }
  DeleteHeapBuffer(p);
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
