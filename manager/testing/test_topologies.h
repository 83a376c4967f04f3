// Test helper: loads the example topologies shipped in deploy/topologies/.
//
//   Topology topo = LoadExampleTopology("fat_tree.yaml");
//
// NETFOLD_TOPOLOGY_DIR is set by the meson.build of each test. Aborts the test
// (gtest fatal failure via the returned empty topology) if a file is broken.
#ifndef NETFOLD_MANAGER_TESTING_TEST_TOPOLOGIES_H_
#define NETFOLD_MANAGER_TESTING_TEST_TOPOLOGIES_H_

#include <string>

#include "absl/status/statusor.h"
#include "manager/topology.h"

namespace netfold::manager {

inline std::string ExampleTopologyPath(const std::string& file) {
  return std::string(NETFOLD_TOPOLOGY_DIR) + "/" + file;
}

inline absl::StatusOr<Topology> LoadExampleTopology(const std::string& file) {
  return Topology::LoadFile(ExampleTopologyPath(file));
}

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_TEST_TOPOLOGIES_H_
