// Packet buffers and the fixed-size pool they come from.
//
//   PacketPool pool({.num_buffers = 1024, .buffer_size = 4200});
//   PacketBuffer* p = pool.Alloc();          // nullptr when exhausted
//   std::memcpy(p->data(), bytes, n); p->set_len(n);
//   ...
//   PacketPool::Free(p);                      // back to its own pool
//
// A PacketBuffer holds one UDP payload (for RoCEv2: BTH onwards) with
// headroom in front for backends that prepend Ethernet/IPv4/UDP headers in
// place. All memory is allocated once when the pool is built; nothing is
// allocated per packet. Every buffer is owned by exactly one party at a time:
// the pool, a port, an impairment stage, a queue pair, or the caller that
// holds the pointer; whoever holds it frees it or hands it on.
//
// Thread-safety: a pool and its buffers belong to one thread (the data-plane
// loop that owns them). Not thread-safe, with one exception: a pool made
// with `returns_from_any_thread` takes its buffers back from any thread
// (Free pushes them on a lock-free list that Alloc drains), so that a
// receive thread can hand what it read to another thread, which frees it
// when done (transport/multi_queue_udp_port.h). Everything else about
// such a pool stays with its owner thread, and a buffer belongs to
// whichever thread holds it.
#ifndef NETFOLD_TRANSPORT_PACKET_POOL_H_
#define NETFOLD_TRANSPORT_PACKET_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/ipv4_endpoint.h"

namespace netfold::transport {

class PacketPool;

class PacketBuffer {
 public:
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  uint32_t len() const { return len_; }
  uint32_t capacity() const { return capacity_; }
  // Sets the payload length; `n` must be <= capacity() (checked).
  void set_len(uint32_t n);
  std::span<uint8_t> bytes() { return {data_, len_}; }
  std::span<const uint8_t> bytes() const { return {data_, len_}; }
  // Bytes available in front of data() for headers a backend prepends.
  uint8_t* headroom_start() { return data_ - headroom_; }
  uint32_t headroom() const { return headroom_; }

  // For a received packet: `src` is the sender, `dst` the address it was sent
  // to (the local endpoint or a multicast group). For a packet to send: `dst`
  // is where it goes; the port fills `src`.
  Ipv4Endpoint src;
  Ipv4Endpoint dst;
  // When the packet may leave an impairment stage (delay); nanoseconds on the
  // stage's clock. Free for other uses outside a stage.
  int64_t due_ns = 0;
  // For a received packet: the IPv4 identification the port knows it had
  // (its index in a UDP GSO batch that arrived whole, UdpPortConfig::gro;
  // else 0), for the ICRC check of ports that do not see the IPv4 header.
  uint16_t ip_id = 0;

  // A packet to send whose bytes [external_at(), external_at() +
  // external().size()) are not in data() but where its sender keeps them:
  // a queue pair that sends a message from the caller's memory instead of
  // copying it (RcQueuePair::PostSendGatherReferencing), as a NIC reads a
  // send from registered memory. data() has room for them; what it holds
  // there is stale. Valid only until the SendBurst that takes the packet
  // returns: a port sends them from where they are (UdpPort: one more
  // piece of the datagram) or calls Materialize() first, as must anything
  // that reads the packet's bytes or keeps it longer (an impairment stage,
  // a port's backlog). Only a queue pair whose port says it takes such
  // packets (Port::TakesExternalBytes) makes them.
  // A received packet has them when its port wrote its payload straight
  // into a ReceivePlacer's memory (Port::SetReceivePlacer): they stay
  // there, and whatever reads the packet's bytes where they would be
  // (a fan-out copy, an impairment stage, a queue pair that does not take
  // them) calls Materialize() first. Empty otherwise.
  std::span<const uint8_t> external() const { return {external_, external_len_}; }
  uint32_t external_at() const { return external_at_; }
  // Aborts if [at, at + bytes.size()) is not inside len().
  void SetExternal(uint32_t at, std::span<const uint8_t> bytes);
  // Copies the external bytes into their place in data(): the packet is
  // whole from then on (nothing to do for a packet that is).
  void Materialize() {
    if (external_len_ != 0) MaterializeExternal();
  }

  // The pool it came from; nullptr for a heap buffer (NewHeapBuffer).
  PacketPool* pool() const { return pool_; }
  // A view (PacketPool::AllocView) shows part of another buffer, which
  // stays in use until every view of it is freed.
  bool is_view() const { return parent_ != nullptr; }
  // Views of this buffer not freed yet.
  uint32_t num_views() const { return views_; }

 private:
  friend class PacketPool;
  void MaterializeExternal();
  void ClearExternal() {
    external_ = nullptr;
    external_at_ = external_len_ = 0;
  }

  uint8_t* data_ = nullptr;
  const uint8_t* external_ = nullptr;
  uint32_t external_at_ = 0;
  uint32_t external_len_ = 0;
  uint32_t len_ = 0;
  uint32_t capacity_ = 0;
  uint32_t headroom_ = 0;
  PacketPool* pool_ = nullptr;
  bool in_pool_ = true;
  bool prefaulted_ = false;         // Prefault wrote its memory (it stays resident)
  PacketBuffer* parent_ = nullptr;  // views: the buffer shown
  uint32_t views_ = 0;              // buffers: live views of it
  bool freed_with_views_ = false;   // freed, back in the pool with its last view
  PacketBuffer* returned_next_ = nullptr;  // returns_from_any_thread: the list
};

struct PacketPoolConfig {
  uint32_t num_buffers = 1024;
  uint32_t buffer_size = 4096 + 256;  // a 4096-byte MTU payload plus headers
  uint32_t headroom = 64;             // room for Ethernet + IPv4 + UDP
  uint32_t num_views = 0;             // view headers (AllocView)
  // Buffers may be freed on any thread (see Thread-safety above); the pool
  // must have no view headers (num_views 0).
  bool returns_from_any_thread = false;
};

class PacketPool {
 public:
  explicit PacketPool(const PacketPoolConfig& config);
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;
  ~PacketPool();

  // A buffer with len() 0 and cleared addresses, or nullptr if every buffer is
  // in use (counted in num_alloc_failures()).
  PacketBuffer* Alloc();
  // Fills `out` with up to out.size() buffers; returns how many.
  size_t AllocBurst(std::span<PacketBuffer*> out);
  // A buffer showing `len` bytes of `parent` from `offset` (no copy; no
  // headroom, capacity `len`): the bytes of one packet of a batch that was
  // read whole. Freeing `parent` (of any pool) while views of it live puts
  // it back in its pool only when the last view is freed. nullptr if no
  // view header is free (num_views) or the range is outside the parent.
  PacketBuffer* AllocView(PacketBuffer* parent, uint32_t offset, uint32_t len);
  // A buffer of `capacity` bytes of its own memory, outside every pool (no
  // headroom): for a sender that keeps a message laid out as packets in it
  // and sends views of them (AllocView of any pool) without copying.
  // Free deletes it, or, while views of it live, the last of them does.
  static PacketBuffer* NewHeapBuffer(uint32_t capacity);
  // Returns `p` to the pool it came from (a heap buffer: deletes it). nullptr
  // is ignored. Freeing a buffer twice is a broken invariant and aborts.
  static void Free(PacketBuffer* p);
  static void FreeBurst(std::span<PacketBuffer* const> packets);

  uint32_t buffer_size() const { return config_.buffer_size; }
  bool returns_from_any_thread() const { return config_.returns_from_any_thread; }
  uint32_t num_buffers() const { return config_.num_buffers; }
  // Owner thread only. With returns_from_any_thread, buffers freed on
  // other threads count once Alloc or Reclaim has taken them back.
  uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  // Writes the memory of the `n` free buffers Alloc hands out next (at
  // most every free one), so that their first use takes no page fault.
  // A buffer is written once: the pool's memory is never given back, so
  // a later call passes over it (a switch asks again at every group).
  void Prefault(uint32_t n);
  // With returns_from_any_thread: takes back what other threads freed.
  void Reclaim();
  uint32_t num_free_views() const { return static_cast<uint32_t>(free_views_.size()); }
  uint32_t num_in_use() const { return num_buffers() - num_free(); }
  uint64_t num_alloc_failures() const { return alloc_failures_; }

 private:
  void Release(PacketBuffer* p);
  // Back on the free list (returns_from_any_thread: on the shared one).
  void PutBack(PacketBuffer* p);

  PacketPoolConfig config_;
  std::unique_ptr<uint8_t[]> memory_;
  std::vector<PacketBuffer> buffers_;
  std::vector<PacketBuffer*> free_;
  std::vector<PacketBuffer> views_;
  std::vector<PacketBuffer*> free_views_;
  uint64_t alloc_failures_ = 0;
  std::atomic<PacketBuffer*> returned_{nullptr};  // freed, not yet reclaimed
};

// Frees every buffer it holds when it goes out of scope, so that early
// returns cannot leak buffers.
class PacketBatch {
 public:
  PacketBatch() = default;
  PacketBatch(const PacketBatch&) = delete;
  PacketBatch& operator=(const PacketBatch&) = delete;
  ~PacketBatch() { Clear(); }
  void Push(PacketBuffer* p) { packets_.push_back(p); }
  std::span<PacketBuffer*> span() { return packets_; }
  size_t size() const { return packets_.size(); }
  bool empty() const { return packets_.empty(); }
  PacketBuffer* operator[](size_t i) const { return packets_[i]; }
  // Forgets the first `n` buffers (someone else took them) and keeps the rest.
  void Consume(size_t n);
  // Frees every buffer still held.
  void Clear();

 private:
  std::vector<PacketBuffer*> packets_;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_PACKET_POOL_H_
