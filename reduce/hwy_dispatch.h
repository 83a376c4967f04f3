// Internal: where a Highway target's function sits in an HWY_EXPORT table.
//
// HWY_DYNAMIC_DISPATCH only ever calls the best target. The ALU also needs
// every other compiled target (tests prove they agree bit for bit, the
// benchmark compares them), without touching Highway's process-wide chosen
// target, which other threads may be reading. This computes the index the
// same way hwy::ChosenTarget::GetIndex does.
#ifndef NETFOLD_REDUCE_HWY_DISPATCH_H_
#define NETFOLD_REDUCE_HWY_DISPATCH_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/base.h"
#include "hwy/targets.h"

namespace netfold::reduce::internal {

inline constexpr size_t kNoDispatchIndex = std::numeric_limits<size_t>::max();

// Index of `target` (one HWY_* bit) in a table made by HWY_EXPORT, or
// kNoDispatchIndex if the table has no slot for it on this architecture.
inline size_t DispatchTableIndex(int64_t target) {
  if (target == HWY_SCALAR || target == HWY_EMU128) return HWY_MAX_DYNAMIC_TARGETS + 1;
  const int64_t shifted = HWY_CHOSEN_TARGET_SHIFT(target);
  if (shifted == 0) return kNoDispatchIndex;
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<uint64_t>(shifted));
}

// The entry of `target` in `table` (an HWY_DISPATCH_TABLE), or nullptr if
// that target was not compiled. A single-entry table (only one target
// compiled) holds HWY_STATIC_TARGET.
template <typename Fn, size_t kSize>
Fn FunctionForTarget(Fn const (&table)[kSize], int64_t target) {
  if constexpr (kSize == 1) {
    return target == HWY_STATIC_TARGET ? table[0] : nullptr;
  } else {
    const size_t index = DispatchTableIndex(target);
    return index < kSize ? table[index] : nullptr;
  }
}

}  // namespace netfold::reduce::internal

#endif  // NETFOLD_REDUCE_HWY_DISPATCH_H_
