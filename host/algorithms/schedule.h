// One rank's part of a host-side allreduce, as data: the messages it sends,
// to whom and when, and the in-order actions that fold or copy received
// messages into its buffer. Every algorithm of docs/algorithms.md is a
// function (rank, number of ranks, element count, fragment size, tree) ->
// Schedule, evaluated locally by each rank: one program for all ranks, no
// per-rank plan shipped around. AllreduceEngine executes schedules.
//
//   NETFOLD_ASSIGN_OR_RETURN(Schedule s, BuildSchedule({.algorithm = Algorithm::kRing,
//       .rank = 3, .num_ranks = 8, .count = n, .fragment_elements = 16384}));
//   uint64_t elements_on_the_wire = s.ElementsSent();   // 2(p-1)n/p for the ring
//
// The model (offsets and counts are in elements of the vector):
// - An action writes buffer[offset, offset+count) =
//     Fold(inputs[0], inputs[1], ...), left to right,
//   where an input is either kOwnInput (the range's current value) or a peer
//   rank (the next message from that peer, which carries exactly this range).
//   A single peer input is a copy. The actions of a lane run in order; lanes
//   run independently and write disjoint ranges; each peer's messages are
//   consumed by one lane only.
// - A send carries buffer[offset, offset+count) to a peer, with the value the
//   range has right after action `ready_after` (-1: the input). Sends to one
//   peer go out in the order listed.
// - For every pair of ranks (a, b), the sends of a to b, in order, carry the
//   same ranges as the inputs from a that b's actions consume, in order.
//   schedule_test.cc checks this and runs every schedule symbolically.
//
// Pure functions; thread-safe.
#ifndef NETFOLD_HOST_ALGORITHMS_SCHEDULE_H_
#define NETFOLD_HOST_ALGORITHMS_SCHEDULE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "host/algorithms/algorithm.h"
#include "host/algorithms/tree_spec.h"

namespace netfold::host::algorithms {

inline constexpr int32_t kOwnInput = -1;

struct ScheduleSend {
  uint32_t peer = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  int64_t ready_after = -1;  // index into Schedule::actions; -1: ready at the start
};

struct ScheduleAction {
  uint64_t offset = 0;
  uint64_t count = 0;
  uint32_t lane = 0;
  uint32_t first_input = 0;  // into Schedule::inputs
  uint32_t num_inputs = 0;
};

struct Schedule {
  Algorithm algorithm = Algorithm::kRing;
  uint32_t rank = 0;
  uint32_t num_ranks = 1;
  uint64_t count = 0;
  uint32_t num_lanes = 1;
  std::vector<ScheduleSend> sends;
  std::vector<ScheduleAction> actions;
  std::vector<int32_t> inputs;

  std::span<const int32_t> InputsOf(const ScheduleAction& a) const {
    return {inputs.data() + a.first_input, a.num_inputs};
  }
  // Payload elements this rank sends / receives in one run.
  uint64_t ElementsSent() const;
  uint64_t ElementsReceived() const;
  // The ranks this rank exchanges messages with, sorted.
  std::vector<uint32_t> Peers() const;
};

struct ScheduleParams {
  Algorithm algorithm = Algorithm::kRing;  // a host algorithm
  uint32_t rank = 0;
  uint32_t num_ranks = 1;
  uint64_t count = 0;              // elements; 0 makes the schedule a barrier
  uint64_t fragment_elements = 1;  // largest message payload, in elements (>= 1)
  // kTree / kTreeScatter follow this tree (validated); nullptr means
  // TreeSpec::KAry(num_ranks, tree_degree). Ignored by the rings, except for
  // count 0 (every algorithm's barrier is the tree's).
  const TreeSpec* tree = nullptr;
  uint32_t tree_degree = 2;
};

// The schedule of `params.rank`. InvalidArgument for a rank out of range, no
// ranks, a zero fragment, kInNetwork, or an invalid tree. One rank: no
// messages and no actions (the engine only copies send to recv).
absl::StatusOr<Schedule> BuildSchedule(const ScheduleParams& params);

// Where part i of [0, len) cut into `parts` near-equal parts starts:
// i*(len/parts) + min(i, len%parts); the first len%parts parts are one longer.
// PartStart(len, parts, parts) == len. Every split in docs/algorithms.md
// (ring segments, tree ranges) uses it.
uint64_t PartStart(uint64_t len, uint64_t parts, uint64_t i);

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_SCHEDULE_H_
