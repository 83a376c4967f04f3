// Seeded link faults: the impairment stage every port end can put on its
// send and receive paths.
//
//   LinkImpairment stage(*ParseImpairment("drop=0.1,dup=0.05,reorder=0.1,seed=7"),
//                        RealClock());
//   std::vector<PacketBuffer*> out;
//   stage.Process(in, &out);   // takes `in`; emits what passes now into `out`
//   ...later...
//   stage.Release(&out);       // delayed/reordered packets whose time came
//
// Faults, applied in this order to each packet:
//   link down  -> dropped
//   multicast loss (mcast_drop: only packets to a multicast group)
//   random loss (drop) and bursty loss (Gilbert-Elliott: a good and a bad
//   state; each packet moves good->bad with p=burst_enter, bad->good with
//   p=burst_exit, and is lost with p=burst_drop in the bad state)
//   rate limit -> the packet leaves when a link of `rate_bps` would have sent
//                 it; beyond `rate_queue` of backlog it is dropped (tail drop)
//   corrupt    -> 1 to 3 random bits flipped (the ICRC must catch it)
//   duplicate  -> a copy follows the packet
//   delay      -> fixed `delay` plus uniform `jitter`
//   reorder    -> held back an extra `reorder_delay`, so later packets pass it
// The same seed and the same packet sequence give the same faults: the
// generator is a fixed algorithm (std::mt19937_64) with our own conversion to
// probabilities, not a library distribution.
//
// Thread-safety: Process/Release/NextDueNs belong to the data-plane thread;
// SetConfig and counters may be called from any thread.
#ifndef NETFOLD_TRANSPORT_LINK_IMPAIRMENT_H_
#define NETFOLD_TRANSPORT_LINK_IMPAIRMENT_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <queue>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "transport/packet_pool.h"

namespace netfold::transport {

struct ImpairmentConfig {
  uint64_t seed = 1;
  bool link_down = false;
  double drop = 0;          // independent loss probability
  double multicast_drop = 0;  // loss probability of packets to a multicast group only
  double burst_enter = 0;   // Gilbert-Elliott good -> bad
  double burst_exit = 0.5;  // Gilbert-Elliott bad -> good
  double burst_drop = 1.0;  // loss probability in the bad state
  double duplicate = 0;
  double corrupt = 0;
  double reorder = 0;
  absl::Duration reorder_delay = absl::Microseconds(500);
  absl::Duration delay = absl::ZeroDuration();
  absl::Duration jitter = absl::ZeroDuration();
  uint64_t rate_bps = 0;  // 0: unlimited
  absl::Duration rate_queue = absl::Milliseconds(20);

  // True if the stage changes nothing (packets pass straight through).
  bool IsIdentity() const;
  // "drop=0.1,dup=0.05,..." in the syntax ParseImpairment accepts; "none"
  // for the identity.
  std::string ToString() const;
};

// Parses a comma-separated list of key=value (spaces ignored):
//   seed=N  down=0|1  drop=P  mcast_drop=P  burst=ENTER:EXIT[:DROP]  dup=P  corrupt=P
//   reorder=P[:DELAY]  delay=DUR  jitter=DUR  rate=N[k|m|g]bit  queue=DUR
// P is a probability in [0,1]; DUR is a number with ns|us|ms|s. "" and "none"
// give the identity. InvalidArgument names the offending item.
absl::StatusOr<ImpairmentConfig> ParseImpairment(std::string_view text);

struct ImpairmentCounters {
  std::atomic<uint64_t> packets_in{0};
  std::atomic<uint64_t> packets_out{0};
  std::atomic<uint64_t> dropped_down{0};
  std::atomic<uint64_t> dropped_random{0};
  std::atomic<uint64_t> dropped_multicast{0};
  std::atomic<uint64_t> dropped_burst{0};
  std::atomic<uint64_t> dropped_rate{0};
  std::atomic<uint64_t> duplicated{0};
  std::atomic<uint64_t> corrupted{0};
  std::atomic<uint64_t> reordered{0};
  std::atomic<uint64_t> delayed{0};
};

class LinkImpairment {
 public:
  LinkImpairment(const ImpairmentConfig& config, const Clock& clock);
  ~LinkImpairment();
  LinkImpairment(const LinkImpairment&) = delete;
  LinkImpairment& operator=(const LinkImpairment&) = delete;

  // Replaces the configuration. A new seed restarts the generator; the same
  // seed keeps its state, so a changed probability continues the sequence.
  void SetConfig(const ImpairmentConfig& config);
  ImpairmentConfig config() const;

  // Takes ownership of every packet in `in`. Packets that pass now are
  // appended to `out` (caller owns them); delayed ones are held; dropped ones
  // are freed. Packets due earlier that were held are released first.
  void Process(std::span<PacketBuffer* const> in, std::vector<PacketBuffer*>* out);
  // Appends held packets that are due now to `out`.
  void Release(std::vector<PacketBuffer*>* out);
  // When the next held packet is due (clock nanoseconds), if any.
  std::optional<int64_t> NextDueNs() const;
  size_t num_held() const { return held_.size(); }
  // Frees every held packet (link reset / shutdown).
  void DropHeld();

  const ImpairmentCounters& counters() const { return counters_; }

 private:
  struct Held {
    int64_t due_ns;
    uint64_t order;  // FIFO among packets due at the same time
    PacketBuffer* packet;
    bool operator>(const Held& o) const {
      return due_ns != o.due_ns ? due_ns > o.due_ns : order > o.order;
    }
  };

  double Uniform();  // [0, 1)
  void Emit(PacketBuffer* p, int64_t due_ns, int64_t now_ns, std::vector<PacketBuffer*>* out);
  // Flips 1-3 bits of `p`, or of a copy of it if it is a view; returns the
  // packet to go on with (nullptr: dropped, no buffer for the copy).
  PacketBuffer* Corrupt(PacketBuffer* p);

  const Clock& clock_;
  mutable absl::Mutex mu_;
  ImpairmentConfig config_ ABSL_GUARDED_BY(mu_);
  // Set under mu_ by SetConfig; the data plane reads it without the lock
  // and takes the lock only when it is set (a Process per burst, even an
  // empty one, would otherwise lock a mutex). Cleared only under mu_, with
  // the copy of config_: cleared outside it, a SetConfig in between would
  // be lost.
  std::atomic<bool> config_changed_{false};
  ImpairmentConfig active_;  // data-plane copy, refreshed when changed
  std::mt19937_64 rng_;
  bool burst_bad_ = false;
  int64_t rate_free_at_ns_ = 0;  // when the emulated link is idle again
  uint64_t order_ = 0;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held_;
  ImpairmentCounters counters_;
};

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_LINK_IMPAIRMENT_H_
