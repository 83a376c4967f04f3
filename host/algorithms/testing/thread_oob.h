// Out-of-band collectives between threads of one process, for tests and
// benchmarks that run ranks as threads: OobCallbacks backed by a shared
// buffer under a mutex.
//
//   ThreadOob oob(num_ranks);
//   // in rank r's thread:
//   NETFOLD_RETURN_IF_ERROR(channels->ConnectWithOob(oob.For(r)));
//
// Thread-safe. Every wait gives up after `timeout` (DeadlineExceeded).
#ifndef NETFOLD_HOST_ALGORITHMS_TESTING_THREAD_OOB_H_
#define NETFOLD_HOST_ALGORITHMS_TESTING_THREAD_OOB_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "host/algorithms/peer_channels.h"

namespace netfold::host::algorithms {

class ThreadOob {
 public:
  explicit ThreadOob(uint32_t num_ranks, absl::Duration timeout = absl::Seconds(30))
      : num_ranks_(num_ranks), timeout_(timeout) {}

  // Every rank contributes `mine` (the same size on each); `all` receives
  // num_ranks * mine.size() bytes in rank order.
  absl::Status Allgather(uint32_t rank, std::span<const uint8_t> mine, std::span<uint8_t> all);
  absl::Status Barrier(uint32_t rank);
  // Callbacks for rank `rank`'s thread; `this` must outlive them.
  OobCallbacks For(uint32_t rank);

 private:
  const uint32_t num_ranks_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> data_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_TESTING_THREAD_OOB_H_
