#include "transport/dpdk/frame_link.h"

#include <algorithm>
#include <cstring>

namespace netfold::transport::dpdk {

MemoryFrameLink::MemoryFrameLink(std::string name, const MacAddress& mac, size_t queue_limit)
    : name_(std::move(name)), mac_(mac), queue_limit_(queue_limit) {}

size_t MemoryFrameLink::RecvFrames(std::span<PacketBuffer* const> buffers,
                                   LinkCounters& counters) {
  polls_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  while (n < buffers.size() && !to_port_.empty()) {
    std::vector<uint8_t>& f = to_port_.front();
    PacketBuffer* p = buffers[n];
    if (f.size() > p->capacity()) {
      counters.Add(counters.rx_oversize);
    } else {
      std::memcpy(p->data(), f.data(), f.size());
      p->set_len(static_cast<uint32_t>(f.size()));
      ++n;
    }
    to_port_.pop_front();
  }
  return n;
}

size_t MemoryFrameLink::SendFrames(std::span<PacketBuffer* const> frames, LinkCounters&) {
  absl::MutexLock lock(&mu_);
  if (!accepting_) return 0;
  for (PacketBuffer* p : frames) {
    from_port_.emplace_back(p->data(), p->data() + p->len());
    PacketPool::Free(p);
  }
  return frames.size();
}

bool MemoryFrameLink::Inject(std::span<const uint8_t> frame) {
  absl::MutexLock lock(&mu_);
  if (to_port_.size() >= queue_limit_) return false;
  to_port_.emplace_back(frame.begin(), frame.end());
  return true;
}

std::vector<std::vector<uint8_t>> MemoryFrameLink::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<std::vector<uint8_t>> out;
  out.swap(from_port_);
  return out;
}

size_t MemoryFrameLink::num_sent() const {
  absl::MutexLock lock(&mu_);
  return from_port_.size();
}

void MemoryFrameLink::set_accepting(bool accepting) {
  absl::MutexLock lock(&mu_);
  accepting_ = accepting;
}

}  // namespace netfold::transport::dpdk
