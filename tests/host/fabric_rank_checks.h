// The one-group checks of fabric_rank (tests/host/fabric_rank.cc), each a
// scenario or part of one; failures are recorded with Check
// (fabric_rank_streams.h).
//
//   Sweep(oob, group);   // every dtype x op, blocks, bitwise identity
//   Nonblocking(group);  // twenty allreduces in flight
#ifndef NETFOLD_TESTS_HOST_FABRIC_RANK_CHECKS_H_
#define NETFOLD_TESTS_HOST_FABRIC_RANK_CHECKS_H_

#include "host/oob.h"
#include "netfold/netfold.h"

namespace netfold::fabric_rank {

// Allreduce of every dtype x op (order-free inputs checked against the
// reference), random fp32/fp64 sums checked identical on every rank,
// reduce, bcast, barrier, and allgather and reduce-scatter blocks.
void Sweep(host::Oob& oob, netfold_group_t g);
// Twenty nonblocking allreduces in flight on one group, completed by test.
void Nonblocking(netfold_group_t all);
// netfold_progress alone moves a 3 MiB allreduce to its end (the test
// turns the progress thread off); bad timeouts are refused.
void Progressed(netfold_context_t ctx, netfold_group_t g);
// Multicast results read straight into the caller's buffer.
void Placed(netfold_group_t g);
// Reduces at non-roots return before their root starts; a mismatch after
// the return reaches the next call.
void Released(netfold_group_t g);

}  // namespace netfold::fabric_rank

#endif  // NETFOLD_TESTS_HOST_FABRIC_RANK_CHECKS_H_
