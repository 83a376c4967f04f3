#include "base/first_touch_cost.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace netfold {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kBytes = 4000;  // a packet's payload from each page

double WallMicros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Fresh anonymous pages, written by this process, without huge pages;
// unmapped when it goes.
class Pages {
 public:
  explicit Pages(size_t count) : bytes_(count * kPage) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<uint8_t*>(p);
    (void)madvise(data_, bytes_, MADV_NOHUGEPAGE);  // advice: a kernel without THP refuses it
    std::memset(data_, 1, bytes_);
  }
  ~Pages() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_ = nullptr;
};

class Pipe {
 public:
  Pipe() {
    if (pipe2(fds_.data(), O_CLOEXEC | O_NONBLOCK) != 0) fds_ = {-1, -1};
  }
  ~Pipe() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  bool ok() const { return fds_[0] >= 0; }

  // Passes kBytes from `from` to `to` through the pipe; false if either
  // side moved less (the pipe is empty before and after).
  bool Pass(const uint8_t* from, uint8_t* to) {
    return write(fds_[1], from, kBytes) == static_cast<ssize_t>(kBytes) &&
           read(fds_[0], to, kBytes) == static_cast<ssize_t>(kBytes);
  }

 private:
  std::array<int, 2> fds_{-1, -1};
};

}  // namespace

absl::StatusOr<FirstTouchCost> MeasureFirstTouchCost(int pages) {
  if (pages < 1) return absl::InvalidArgumentError("first-touch cost: pages must be >= 1");
  const size_t n = static_cast<size_t>(pages);
  Pipe pipe;
  Pages read_by_kernel(n), written_by_kernel(n);
  std::array<uint8_t, kBytes> scratch{};
  if (!pipe.ok() || read_by_kernel.data() == nullptr || written_by_kernel.data() == nullptr) {
    return absl::ResourceExhaustedError("first-touch cost: no pipe or no memory");
  }
  // Microseconds per page of one pass; negative if the pipe failed.
  auto pass = [&](bool kernel_reads) {
    const double start = WallMicros();
    for (size_t i = 0; i < n; ++i) {
      const bool ok = kernel_reads
                          ? pipe.Pass(read_by_kernel.data() + i * kPage, scratch.data())
                          : pipe.Pass(scratch.data(), written_by_kernel.data() + i * kPage);
      if (!ok) return -1.0;
    }
    return (WallMicros() - start) / static_cast<double>(n);
  };
  FirstTouchCost c;
  c.read_first_us = pass(true);
  c.read_again_us = pass(true);
  c.write_first_us = pass(false);
  c.write_again_us = pass(false);
  if (c.read_first_us < 0 || c.read_again_us < 0 || c.write_first_us < 0 ||
      c.write_again_us < 0) {
    return absl::InternalError("first-touch cost: the pipe moved less than a page's bytes");
  }
  return c;
}

}  // namespace netfold
