// Byte vectors whose storage starts at a chosen offset from a cache line.
//
//   // 40 bytes of header, then elements on a 64-byte boundary:
//   LineOffsetVector<64 - 40> message(40 + 4096);
//   // 64-byte aligned rows:
//   LineOffsetVector<0> rows(8 * 4096);
//
// A message built as header + elements puts the elements at data() + 40; when
// the vector itself is 16-byte aligned (what malloc gives), every 64-byte
// vector load or store of those elements straddles two cache lines. Reduction
// kernels run measurably slower on such buffers, so buffers that hold
// elements for reduce/ use this allocator with the offset that puts the
// elements on a line.
#ifndef NETFOLD_BASE_ALIGNED_BUFFER_H_
#define NETFOLD_BASE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace netfold {

inline constexpr size_t kCacheLine = 64;

// Allocates with `kOffset` (< kCacheLine) bytes past a cache-line boundary.
template <typename T, size_t kOffset>
struct LineOffsetAllocator {
  static_assert(kOffset < kCacheLine && kOffset % alignof(T) == 0);
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = LineOffsetAllocator<U, kOffset>;
  };

  LineOffsetAllocator() = default;
  template <typename U>
  LineOffsetAllocator(const LineOffsetAllocator<U, kOffset>&) {}

  T* allocate(size_t n) {
    auto* base = static_cast<uint8_t*>(
        ::operator new(n * sizeof(T) + kOffset, std::align_val_t{kCacheLine}));
    return reinterpret_cast<T*>(base + kOffset);
  }
  void deallocate(T* p, size_t) {
    ::operator delete(reinterpret_cast<uint8_t*>(p) - kOffset, std::align_val_t{kCacheLine});
  }
  template <typename U>
  bool operator==(const LineOffsetAllocator<U, kOffset>&) const {
    return true;
  }
  // resize() leaves new bytes uninitialized (default-initialization) rather
  // than zeroing bytes that the caller overwrites next; value-taking
  // constructs (assign(n, v), resize(n, v)) set them as usual. Note that a
  // non-standard allocator makes vector copy element by element: append
  // with resize + memcpy, not insert.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <size_t kOffset>
using LineOffsetVector = std::vector<uint8_t, LineOffsetAllocator<uint8_t, kOffset>>;

}  // namespace netfold

#endif  // NETFOLD_BASE_ALIGNED_BUFFER_H_
