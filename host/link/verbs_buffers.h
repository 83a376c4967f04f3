// The buffer bookkeeping of the verbs transport: fixed-size slots cut from
// one registered region (receive buffers pre-posted, send buffers lent to a
// request until its completion) and the 64-bit work-request ids that say
// which queue and which slot a completion belongs to. Pure logic; no device.
//
//   BufferSlots sends(256, 4096);                 // 256 slots of 4 KiB
//   std::optional<uint32_t> i = sends.Acquire();  // nullopt: all in flight
//   memcpy(sends.Slot(*i).data(), msg, n);  post with wr_id = MakeWrId(WrKind::kRcSend, *i)
//   ... on the completion: sends.Release(DecodeWrId(wc.wr_id).index);
//
// Thread-safety: not thread-safe; the link's thread owns them.
#ifndef NETFOLD_HOST_LINK_VERBS_BUFFERS_H_
#define NETFOLD_HOST_LINK_VERBS_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace netfold::host {

enum class WrKind : uint8_t { kRcSend = 1, kRcRecv = 2, kUdRecv = 3 };

struct WrId {
  WrKind kind = WrKind::kRcSend;
  uint32_t index = 0;
};
// kind in the top byte, the slot index in the low 32 bits.
uint64_t MakeWrId(WrKind kind, uint32_t index);
// nullopt for an id this transport did not make (a corrupt completion).
std::optional<WrId> DecodeWrId(uint64_t wr_id);

class BufferSlots {
 public:
  // `count` slots of `slot_bytes` each (rounded up to 64 bytes, a cache line),
  // in one zeroed, 4096-aligned allocation.
  BufferSlots(uint32_t count, size_t slot_bytes);
  BufferSlots(const BufferSlots&) = delete;
  BufferSlots& operator=(const BufferSlots&) = delete;
  ~BufferSlots();

  // A free slot, or nullopt when every slot is lent out.
  std::optional<uint32_t> Acquire();
  // Returns a lent slot; false (and nothing changes) if `index` is out of
  // range or not lent: a duplicate or corrupt completion.
  bool Release(uint32_t index);

  std::span<uint8_t> Slot(uint32_t index) { return {base_ + index * stride_, slot_bytes_}; }
  uint8_t* base() { return base_; }
  size_t total_bytes() const { return stride_ * count_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint32_t count() const { return count_; }
  uint32_t num_lent() const { return count_ - static_cast<uint32_t>(free_.size()); }

 private:
  uint32_t count_;
  size_t slot_bytes_;
  size_t stride_;
  uint8_t* base_ = nullptr;
  std::vector<uint32_t> free_;  // a stack: the most recently freed slot is warm
  std::vector<bool> lent_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_BUFFERS_H_
