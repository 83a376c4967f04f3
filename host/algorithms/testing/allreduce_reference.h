// Test support: inputs for every (dtype, op), and the expected allreduce
// result of each host algorithm computed directly from the association
// order docs/algorithms.md specifies, with reduce::FoldScalarReference.
// Written independently of schedule.cc: it knows the orders, not the
// messages.
//
//   auto in = MakeInputs(DataType::kFp32, ReduceOp::kSum, count, /*ranks=*/5, /*seed=*/7);
//   std::vector<uint8_t> want = ReferenceAllreduce(Algorithm::kRing, nullptr, 2,
//                                                  DataType::kFp32, ReduceOp::kSum, in, count);
#ifndef NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_REFERENCE_H_
#define NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "host/algorithms/algorithm.h"
#include "host/algorithms/tree_spec.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"

namespace netfold::host::algorithms {

// One input vector per rank, count elements each. Values are chosen so that
// the association order shows in the bits: floats of mixed magnitudes and
// signs (finite), integers with zeros (logical ops), pair values with ties
// (MINLOC/MAXLOC index rule); padding bytes are zero.
std::vector<std::vector<uint8_t>> MakeInputs(proto::DataType dtype, proto::ReduceOp op,
                                             size_t count, uint32_t num_ranks, uint64_t seed);

// The result every rank must hold. `tree` for kTree/kTreeScatter (nullptr:
// TreeSpec::KAry(num_ranks, tree_degree)). kInNetwork: the tree order, as
// the aggregation nodes compute it.
std::vector<uint8_t> ReferenceAllreduce(Algorithm algorithm, const TreeSpec* tree,
                                        uint32_t tree_degree, proto::DataType dtype,
                                        proto::ReduceOp op,
                                        const std::vector<std::vector<uint8_t>>& inputs,
                                        size_t count);

// The value of `tree` for the inputs: every switch folds its children in
// order, recursively (what switch/aggregation_node does).
std::vector<uint8_t> ReferenceTreeOrder(const TreeSpec& tree, proto::DataType dtype,
                                        proto::ReduceOp op,
                                        const std::vector<std::vector<uint8_t>>& inputs,
                                        size_t count);

// "" if equal, else where the first differing element is (and how many).
std::string CompareBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                         size_t element_size);

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_TESTING_ALLREDUCE_REFERENCE_H_
