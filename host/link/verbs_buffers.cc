#include "host/link/verbs_buffers.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace netfold::host {

uint64_t MakeWrId(WrKind kind, uint32_t index) {
  return (uint64_t{static_cast<uint8_t>(kind)} << 56) | index;
}

std::optional<WrId> DecodeWrId(uint64_t wr_id) {
  const uint8_t kind = static_cast<uint8_t>(wr_id >> 56);
  if ((wr_id & 0x00ffffff00000000ull) != 0) return std::nullopt;
  if (kind < static_cast<uint8_t>(WrKind::kRcSend) || kind > static_cast<uint8_t>(WrKind::kUdRecv)) {
    return std::nullopt;
  }
  return WrId{static_cast<WrKind>(kind), static_cast<uint32_t>(wr_id)};
}

BufferSlots::BufferSlots(uint32_t count, size_t slot_bytes)
    : count_(count), slot_bytes_(slot_bytes), stride_((slot_bytes + 63) / 64 * 64) {
  if (stride_ == 0) stride_ = 64;
  const size_t total = (stride_ * count_ + 4095) / 4096 * 4096;
  if (total > 0) {
    base_ = static_cast<uint8_t*>(std::aligned_alloc(4096, total));
    if (base_ == nullptr) throw std::bad_alloc();
    std::memset(base_, 0, total);
  }
  free_.reserve(count_);
  for (uint32_t i = count_; i > 0; --i) free_.push_back(i - 1);
  lent_.assign(count_, false);
}

BufferSlots::~BufferSlots() { std::free(base_); }

std::optional<uint32_t> BufferSlots::Acquire() {
  if (free_.empty()) return std::nullopt;
  const uint32_t i = free_.back();
  free_.pop_back();
  lent_[i] = true;
  return i;
}

bool BufferSlots::Release(uint32_t index) {
  if (index >= count_ || !lent_[index]) return false;
  lent_[index] = false;
  free_.push_back(index);
  return true;
}

}  // namespace netfold::host
