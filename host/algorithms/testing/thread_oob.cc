#include "host/algorithms/testing/thread_oob.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace netfold::host::algorithms {

absl::Status ThreadOob::Allgather(uint32_t rank, std::span<const uint8_t> mine,
                                  std::span<uint8_t> all) {
  const size_t bytes = mine.size();
  if (rank >= num_ranks_ || all.size() != bytes * num_ranks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "thread OOB allgather: rank %d of %d, %d bytes into %d", rank, num_ranks_, bytes,
        all.size()));
  }
  absl::MutexLock lock(&mu_);
  const uint64_t generation = generation_;
  if (arrived_ == 0) data_.assign(bytes * num_ranks_, 0);
  if (data_.size() != bytes * num_ranks_) {
    return absl::InvalidArgumentError("thread OOB allgather: ranks contribute different sizes");
  }
  if (bytes > 0) std::memcpy(data_.data() + rank * bytes, mine.data(), bytes);
  if (++arrived_ == num_ranks_) {
    result_ = data_;
    arrived_ = 0;
    ++generation_;
    cv_.SignalAll();
  } else {
    const absl::Time deadline = absl::Now() + timeout_;
    while (generation_ == generation) {
      if (cv_.WaitWithDeadline(&mu_, deadline) && generation_ == generation) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "thread OOB allgather: rank %d waited %s for the others", rank,
            absl::FormatDuration(timeout_)));
      }
    }
  }
  if (bytes > 0) std::memcpy(all.data(), result_.data(), all.size());
  return absl::OkStatus();
}

absl::Status ThreadOob::Barrier(uint32_t rank) {
  std::vector<uint8_t> none(0);
  std::vector<uint8_t> all(0);
  return Allgather(rank, none, std::span<uint8_t>(all));
}

OobCallbacks ThreadOob::For(uint32_t rank) {
  return {.allgather = [this, rank](std::span<const uint8_t> mine,
                                    std::span<uint8_t> all) { return Allgather(rank, mine, all); },
          .barrier = [this, rank] { return Barrier(rank); }};
}

}  // namespace netfold::host::algorithms
