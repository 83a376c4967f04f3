// Test helper: manager books (FabricState) over an example topology, with
// a fake clock, for the unit tests of the pieces that read or change them
// without a whole manager (liveness, admin reports, recovery, failures...):
// empty, or with one job and its group (AddJobWithGroup).
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

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/status_macros.h"
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

  // For two_level.yaml: every switch up, job 1 with rank 0 on leaf0 and
  // rank 1 on leaf1 (attached, leaf QPs 0x100 and 0x101), and its group 5
  // over both, ready, its links' QPs in place (0x200 + child at the
  // parent, 0x300 + child at the child).
  absl::Status AddJobWithGroup() {
    if (SwitchIndex("leaf0") < 0 || SwitchIndex("leaf1") < 0) {
      return absl::InvalidArgumentError("AddJobWithGroup needs two_level.yaml's leaf0 and leaf1");
    }
    for (int sw = 0; sw < topo.num_switches(); ++sw) state.SetSwitchState(sw, SwitchState::kUp, "");
    Job& job = state.jobs[1];
    job.id = 1;
    for (uint32_t r : {0u, 1u}) {
      Rank& rank = job.ranks[r];
      rank.rank = r;
      rank.leaf = SwitchIndex(r == 0 ? "leaf0" : "leaf1");
      rank.attached = true;
      rank.leaf_qpn = 0x100 + r;
    }
    NETFOLD_RETURN_IF_ERROR(
        state.alloc.ReserveQps({{job.ranks[0].leaf, 1}, {job.ranks[1].leaf, 1}}, nullptr));
    GroupRequest req;
    req.members = {{0, job.ranks[0].leaf}, {1, job.ranks[1].leaf}};
    req.num_slots = 4;
    req.slot_bytes = 1024;
    NETFOLD_ASSIGN_OR_RETURN(Placement p, state.alloc.PlanGroup(req, nullptr));
    NETFOLD_RETURN_IF_ERROR(state.alloc.Reserve(p));
    for (int child : p.new_links) {
      state.OpenLink(p.tree_id(), child);
      control::QpCreated parent_qp, child_qp;
      parent_qp.set_qpn(0x200 + child);
      child_qp.set_qpn(0x300 + child);
      state.LinkConnected(p.tree_id(), child, parent_qp, child_qp);
    }
    p.new_links.clear();
    Group& g = state.groups[5];
    g.id = 5;
    g.job_id = 1;
    g.ranks = {0, 1};
    g.placement = std::move(p);
    g.multicast_index = state.AllocateMulticast(g.id);
    g.state = GroupState::kReady;
    job.groups.insert(5);
    return absl::OkStatus();
  }

  const Topology topo;
  ManagerOptions options;  // the books read it: change it before using them
  FakeClock clock{absl::Seconds(100)};
  FabricState state;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_TEST_BOOKS_H_
