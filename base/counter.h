// Counters with one writer at a time and readers on any thread.
//
//   std::atomic<uint64_t> packets{0};
//   BumpCounter(packets);          // the owning thread (or whoever holds its lock)
//   packets.load(std::memory_order_relaxed);   // any thread
//
// A relaxed load and store instead of a locked read-modify-write: a
// `lock add` per packet drains the store buffer, and in perf it carried the
// cost of the copy before it (the aggregation node's counters were a third
// of its own time, the RC responder's a tenth of a switch's). Only for
// counters whose writers are serialized (the thread that runs an endpoint
// or data plane, or the holder of the data path's lock); two threads
// bumping at once without a lock would lose counts.
#ifndef NETFOLD_BASE_COUNTER_H_
#define NETFOLD_BASE_COUNTER_H_

#include <atomic>
#include <cstdint>

namespace netfold {

inline void BumpCounter(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace netfold

#endif  // NETFOLD_BASE_COUNTER_H_
