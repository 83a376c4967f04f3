// What fabric_rank's scenarios share (tests/host/fabric_rank.cc): the
// rank's identity, its first failure, order-free inputs and their
// reference, and checked streams of operations (one group, several in
// turn, one per application thread, until the test releases them).
//
//   g_rank = oob.rank(); g_size = oob.size();
//   StreamResult r = Stream(group, 100, /*stop_at_error=*/false);
//   Check(r.ok == 100, "the stream");
//
// Thread-safety: CheckedOperation and StreamOnAThreadUntilReleased touch
// no global but stdout; everything else is for the main thread.
#ifndef NETFOLD_TESTS_HOST_FABRIC_RANK_STREAMS_H_
#define NETFOLD_TESTS_HOST_FABRIC_RANK_STREAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "host/oob.h"
#include "netfold/netfold.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::fabric_rank {

// This rank and the job's size (from the OOB), and the first failure a
// check recorded ("" while none: the rank then prints "ok").
extern int g_rank, g_size;
extern std::string g_failure;

// Records `what` as the failure unless one is recorded already.
void Check(bool ok, const std::string& what);
// The same for a netfold return code, with its name and the last error.
void CheckRc(int rc, const std::string& what);

// `count` elements of rank `rank`'s input for (t, op): order-free (exact
// in any association), a function of `seed`.
std::vector<uint8_t> Input(proto::DataType t, proto::ReduceOp op, int rank, size_t count,
                           uint64_t seed);
// Every rank's Input folded (reduce/'s scalar reference).
std::vector<uint8_t> Reference(proto::DataType t, proto::ReduceOp op, size_t count, uint64_t seed);

// One checked operation (an allreduce, reduce-scatter or allgather, by
// k); the netfold code, *wrong set if the result differed.
int CheckedOperation(netfold_group_t g, uint64_t k, bool* wrong);
// NETFOLD_TEST_HOLD_AT (fabric_rank.cc's header), after operation `done`.
void MaybeHold(int done);

struct StreamResult {
  int ok = 0, errors = 0, wrong = 0;
  std::string first_error;
};

// Checked operations on `groups` in turn until $NETFOLD_TEST_RELEASE
// exists, the ranks agreeing out of band every 20; prints "streaming"
// after the first, the tally at the end.
void StreamUntilReleased(host::Oob& oob, const std::vector<netfold_group_t>& groups);
// One application thread's share of threads_until, on `g`.
void StreamOnAThreadUntilReleased(int thread, netfold_group_t g, StreamResult* r);
// `n` checked operations on `g` (each after `lag_us`).
StreamResult Stream(netfold_group_t g, int n, bool stop_at_error, int lag_us = 0);
// `n` fp32 sums whose bits show the association order; their digest.
std::string FloatDigest(netfold_group_t g, int n, int* errors);

}  // namespace netfold::fabric_rank

#endif  // NETFOLD_TESTS_HOST_FABRIC_RANK_STREAMS_H_
