// A token bucket per peer: at most `per_second` requests a second on
// average, `burst` at once.
//
//   RateLimiter limiter(RealClock(), /*per_second=*/200, /*burst=*/400);
//   if (!limiter.Allow(PeerHost(ctx->peer()))) return ResourceExhausted(...);
//
// Peers are whatever string the caller keys them by (the manager uses the
// job of an authenticated job request, else the peer's IP address,
// control_service.h). At most `max_peers` buckets are kept; idle (full)
// buckets are forgotten first. `per_second` 0 disables limiting.
// Thread-safe.
#ifndef NETFOLD_MANAGER_RATE_LIMITER_H_
#define NETFOLD_MANAGER_RATE_LIMITER_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace netfold::manager {

class RateLimiter {
 public:
  RateLimiter(const Clock& clock, double per_second, double burst, size_t max_peers = 4096);

  // Takes a token for `peer`; false if its bucket is empty, with
  // *retry_after (if given) set to when it holds a token again (at least
  // 1 ms; 1 s when refused because too many peers have buckets).
  bool Allow(std::string_view peer, absl::Duration* retry_after = nullptr);

  double per_second() const { return per_second_; }
  double burst() const { return burst_; }

 private:
  struct Bucket {
    double tokens = 0;
    absl::Duration last;
  };

  const Clock* clock_;
  const double per_second_;
  const double burst_;
  const size_t max_peers_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_RATE_LIMITER_H_
