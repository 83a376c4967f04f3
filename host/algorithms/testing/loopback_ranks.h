// Test harness: p ranks of a group in one process, each a RoceEndpoint on
// an in-memory network behind a seeded impairment stage, with RcPeerChannels
// and an AllreduceEngine, stepped round-robin from one thread on a FakeClock.
//
//   LoopbackRanks ranks({.num_ranks = 5, .faults = "drop=0.05,seed=3"});
//   ASSERT_TRUE(ranks.status().ok());
//   std::vector<OpId> ops = ranks.StartOnEveryRank(args_per_rank);
//   ASSERT_TRUE(ranks.RunUntilDone(ops));
//
// Time moves by `step` per round, and jumps to the next timer (RC
// retransmission, keepalive, deadline; at most `max_idle_jump` ahead) when a
// round moved nothing, so waits of seconds cost few rounds. Not thread-safe.
#ifndef NETFOLD_HOST_ALGORITHMS_TESTING_LOOPBACK_RANKS_H_
#define NETFOLD_HOST_ALGORITHMS_TESTING_LOOPBACK_RANKS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/clock.h"
#include "host/algorithms/allreduce_engine.h"
#include "host/algorithms/peer_channels.h"
#include "transport/impaired_port.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::host::algorithms {

struct LoopbackOptions {
  uint32_t num_ranks = 4;
  std::string faults = "none";  // every port, both directions (seeds vary per port)
  uint64_t seed = 1;
  RcPeerChannelsOptions channels = {.ack_timeout = absl::Milliseconds(1),
                                    .keepalive_interval = absl::Milliseconds(20),
                                    .psn_seed = 1};
  EngineOptions engine = {.fragment_bytes = 256, .op_timeout = absl::Seconds(10)};
  absl::Duration step = absl::Microseconds(20);
  absl::Duration max_idle_jump = absl::Milliseconds(1);
};

class LoopbackRanks {
 public:
  explicit LoopbackRanks(const LoopbackOptions& options);
  ~LoopbackRanks();

  // Whether setup (ports, channels, connection, engines) succeeded.
  const absl::Status& status() const { return status_; }
  uint32_t num_ranks() const { return options_.num_ranks; }
  AllreduceEngine& engine(uint32_t r) { return *ranks_[r].engine; }
  RcPeerChannels& channels(uint32_t r) { return *ranks_[r].channels; }
  transport::ImpairedPort& port(uint32_t r) { return *ranks_[r].port; }
  FakeClock& clock() { return clock_; }
  bool alive(uint32_t r) const { return ranks_[r].engine != nullptr; }

  // Destroys rank r's engine, channels and endpoint, as if its process died.
  void Kill(uint32_t r);

  // Starts args[r] on every live rank; 0 for a dead rank or a Start error
  // (the error is in start_errors()[r]).
  std::vector<OpId> StartOnEveryRank(const std::vector<AllreduceArgs>& args);
  const std::vector<absl::Status>& start_errors() const { return start_errors_; }
  // Rounds until every live rank's op is done; false after max_rounds.
  bool RunUntilDone(const std::vector<OpId>& ops, int max_rounds = 1000000);
  // One round over the live ranks, then time moves on.
  void Step();

 private:
  struct Rank {
    transport::ImpairedPort* port = nullptr;  // owned by endpoint
    std::unique_ptr<transport::RoceEndpoint> endpoint;
    std::unique_ptr<RcPeerChannels> channels;
    std::unique_ptr<AllreduceEngine> engine;
  };
  uint64_t Activity() const;

  LoopbackOptions options_;
  FakeClock clock_{absl::Seconds(1)};
  transport::MemoryNetwork net_;
  std::vector<Rank> ranks_;
  absl::Status status_;
  std::vector<absl::Status> start_errors_;
};

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_TESTING_LOOPBACK_RANKS_H_
