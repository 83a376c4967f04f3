#include "manager/rate_limiter.h"

#include <algorithm>
#include <vector>

namespace netfold::manager {

RateLimiter::RateLimiter(const Clock& clock, double per_second, double burst, size_t max_peers)
    : clock_(&clock),
      per_second_(per_second),
      burst_(std::max(1.0, burst)),
      max_peers_(std::max<size_t>(1, max_peers)) {}

bool RateLimiter::Allow(std::string_view peer, absl::Duration* retry_after) {
  if (per_second_ <= 0) return true;
  const absl::Duration now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto refill = [&](Bucket& b) {
    b.tokens = std::min(burst_, b.tokens + absl::ToDoubleSeconds(now - b.last) * per_second_);
    b.last = now;
  };
  auto it = buckets_.find(std::string(peer));
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_peers_) {
      std::vector<std::string> idle;
      for (auto& [key, b] : buckets_) {
        refill(b);
        if (b.tokens >= burst_) idle.push_back(key);
      }
      for (const std::string& key : idle) buckets_.erase(key);
      if (buckets_.size() >= max_peers_) {  // a flood of distinct peers
        if (retry_after != nullptr) *retry_after = absl::Seconds(1);
        return false;
      }
    }
    it = buckets_.emplace(std::string(peer), Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  refill(b);
  if (b.tokens < 1.0) {
    if (retry_after != nullptr) {
      *retry_after = std::max(absl::Milliseconds(1), absl::Seconds((1.0 - b.tokens) / per_second_));
    }
    return false;
  }
  b.tokens -= 1.0;
  return true;
}

}  // namespace netfold::manager
