#include "transport/impaired_port.h"

#include <algorithm>

namespace netfold::transport {

ImpairedPort::ImpairedPort(std::unique_ptr<Port> inner, const ImpairmentConfig& send,
                           const ImpairmentConfig& receive, const Clock& clock)
    : inner_(std::move(inner)), clock_(clock), send_(send, clock), receive_(receive, clock) {}

ImpairedPort::~ImpairedPort() {
  for (PacketBuffer* p : pending_tx_) PacketPool::Free(p);
  for (PacketBuffer* p : ready_rx_) PacketPool::Free(p);
  send_.DropHeld();
  receive_.DropHeld();
}

void ImpairedPort::TransmitPending() {
  while (!pending_tx_.empty()) {
    // Hand the inner port a contiguous burst.
    scratch_.assign(pending_tx_.begin(),
                    pending_tx_.begin() + static_cast<ptrdiff_t>(std::min<size_t>(pending_tx_.size(), 64)));
    const size_t taken = inner_->SendBurst(scratch_);
    pending_tx_.erase(pending_tx_.begin(), pending_tx_.begin() + static_cast<ptrdiff_t>(taken));
    if (taken < scratch_.size()) break;
  }
  scratch_.clear();
  while (pending_tx_.size() > kMaxPendingTx) {
    PacketPool::Free(pending_tx_.back());
    pending_tx_.pop_back();
    ++tx_overflow_;
  }
}

void ImpairedPort::Flush() {
  scratch_.clear();
  send_.Release(&scratch_);
  pending_tx_.insert(pending_tx_.end(), scratch_.begin(), scratch_.end());
  scratch_.clear();
  TransmitPending();
}

size_t ImpairedPort::SendBurst(std::span<PacketBuffer* const> packets) {
  scratch_.clear();
  send_.Process(packets, &scratch_);
  pending_tx_.insert(pending_tx_.end(), scratch_.begin(), scratch_.end());
  scratch_.clear();
  TransmitPending();
  return packets.size();  // the stage owns every packet now
}

size_t ImpairedPort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  Flush();
  const int64_t deadline_ns = clock_.NowNanos() + absl::ToInt64Nanoseconds(timeout);
  PacketBuffer* burst[64];
  std::vector<PacketBuffer*> passed;
  while (true) {
    if (!ready_rx_.empty()) break;
    // Wait for the network, but not past the moment a held packet (either
    // direction) becomes due.
    int64_t wait_until = deadline_ns;
    if (auto due = receive_.NextDueNs()) wait_until = std::min(wait_until, *due);
    if (auto due = send_.NextDueNs()) wait_until = std::min(wait_until, *due);
    const int64_t now = clock_.NowNanos();
    const absl::Duration wait = absl::Nanoseconds(std::max<int64_t>(0, wait_until - now));
    const size_t n = inner_->RecvBurst({burst, std::min<size_t>(64, std::max<size_t>(out.size(), 1))}, wait);
    passed.clear();
    receive_.Process({burst, n}, &passed);
    ready_rx_.insert(ready_rx_.end(), passed.begin(), passed.end());
    Flush();
    const int64_t after = clock_.NowNanos();
    // A clock that does not move (a FakeClock in a test) cannot reach the
    // deadline: give up after one empty pass instead of spinning.
    if (!ready_rx_.empty() || after >= deadline_ns || (n == 0 && after == now) ||
        woken_.exchange(false, std::memory_order_relaxed)) {
      break;
    }
  }
  size_t count = std::min(out.size(), ready_rx_.size());
  for (size_t i = 0; i < count; ++i) {
    out[i] = ready_rx_.front();
    ready_rx_.pop_front();
  }
  return count;
}

}  // namespace netfold::transport
