// The result an aggregation tree computes, for tests that check a fabric
// bit for bit: each leaf folds its members in child order
// (GroupMember.child_index), the group root folds the leaves in topology
// order; a group on one leaf is that leaf's fold. Header-only.
#ifndef NETFOLD_TESTS_SWITCH_TREE_REFERENCE_H_
#define NETFOLD_TESTS_SWITCH_TREE_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/control/netfold_control.pb.h"
#include "proto/data_type.h"
#include "proto/reduce_op.h"
#include "reduce/reduce.h"

namespace netfold::testing {

// `parts` folded in order by the scalar reference.
inline std::vector<uint8_t> Fold(proto::DataType type, proto::ReduceOp op, size_t count,
                                 const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<const void*> ptrs;
  for (const auto& p : parts) ptrs.push_back(p.data());
  std::vector<uint8_t> out(count * proto::DataTypeSize(type));
  absl::Status s = reduce::FoldScalarReference(type, op, out.data(), ptrs, count);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// `leaves`: the leaf switches in topology order; `inputs` by rank.
inline std::vector<uint8_t> TreeReference(const control::GroupInfo& g,
                                          const std::vector<std::string>& leaves,
                                          proto::DataType type, proto::ReduceOp op, size_t count,
                                          const std::map<uint32_t, std::vector<uint8_t>>& inputs) {
  std::map<std::string, std::map<uint32_t, uint32_t>> by_leaf;  // leaf -> child index -> rank
  for (const control::GroupMember& m : g.members()) {
    by_leaf[m.leaf_switch()][m.child_index()] = m.rank();
  }
  std::vector<std::vector<uint8_t>> partials;
  for (const std::string& leaf : leaves) {
    auto it = by_leaf.find(leaf);
    if (it == by_leaf.end()) continue;
    std::vector<std::vector<uint8_t>> parts;
    for (const auto& [index, rank] : it->second) parts.push_back(inputs.at(rank));
    partials.push_back(Fold(type, op, count, parts));
  }
  if (partials.size() == 1) return partials[0];
  return Fold(type, op, count, partials);
}

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_SWITCH_TREE_REFERENCE_H_
