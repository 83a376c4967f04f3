// Test helper: empty manager books (FabricState) over an example topology,
// with a fake clock, for the unit tests of the pieces that read or change
// them without a whole manager (liveness, admin reports, recovery...).
//
//   TestBooks books("two_level.yaml");
//   books.state.SetSwitchState(books.SwitchIndex("leaf0"), SwitchState::kUp, "");
//   LivenessSweep due = SweepLiveness(books.state, books.clock.Now());
//
// A broken example topology fails the test program at construction.
// Single-threaded, as the tests are.
#ifndef NETFOLD_MANAGER_TESTING_TEST_BOOKS_H_
#define NETFOLD_MANAGER_TESTING_TEST_BOOKS_H_

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "base/clock.h"
#include "manager/fabric_state.h"
#include "manager/journal.h"
#include "manager/manager_options.h"
#include "manager/testing/test_topologies.h"
#include "manager/topology.h"

namespace netfold::manager {

struct TestBooks {
  // `journal` (may be null) must outlive the books.
  explicit TestBooks(const std::string& topology_file, ManagerOptions manager_options = {},
                     Journal* journal = nullptr)
      : topo(LoadExampleTopology(topology_file).value()),
        options(std::move(manager_options)),
        state(topo, options, clock, journal, /*incarnation=*/1) {}

  int SwitchIndex(const std::string& name) const { return topo.FindSwitch(name); }

  const Topology topo;
  ManagerOptions options;  // the books read it: change it before using them
  FakeClock clock{absl::Seconds(100)};
  FabricState state;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_TEST_BOOKS_H_
