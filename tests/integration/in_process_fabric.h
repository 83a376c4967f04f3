// A whole fabric in one process, for tests and benchmarks: switch data
// planes and simulated hosts on an in-memory network, every port behind a
// seeded impairment stage, time driven by a FakeClock. The harness plays the
// manager's part: it creates and connects the QPs and installs the groups.
//
//   InProcessFabric fabric(TreeShape::TwoLevel(2, 4), {.faults = "drop=0.05,seed=3"});
//   fabric.CreateGroup(/*group_id=*/1, {.num_slots = 8, .slot_bytes = 1024});
//   auto ops = fabric.StartOnEveryRank(1, args_per_rank);
//   ASSERT_TRUE(fabric.RunUntilDone(1, ops));
#ifndef NETFOLD_TESTS_INTEGRATION_IN_PROCESS_FABRIC_H_
#define NETFOLD_TESTS_INTEGRATION_IN_PROCESS_FABRIC_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "host/group_engine.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "switch/switch_data_plane.h"
#include "transport/impaired_port.h"
#include "transport/link_impairment.h"
#include "transport/memory_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::testing {

// Each switch lists its children: switches (>= 0, index) or hosts (-1 - rank).
struct TreeShape {
  std::vector<std::vector<int>> children;  // [0] is the root

  static TreeShape OneLevel(int hosts);
  static TreeShape TwoLevel(int leaves, int hosts_per_leaf);
  // Root -> 2 -> 4 leaves with 3, 1, 2, 4 hosts: deliberately asymmetric.
  static TreeShape ThreeLevel();
  int num_hosts() const;
  int num_switches() const { return static_cast<int>(children.size()); }
  // The ranks below `node` (a switch index or -1 - rank).
  std::vector<uint32_t> RanksBelow(int node) const;
};

struct FabricOptions {
  std::string faults = "none";  // on every port, both directions (seeds vary per port)
  uint64_t seed = 1;
  uint16_t pkey = 0x8001;
  uint32_t qkey = 0x5eed;
  absl::Duration step = absl::Microseconds(20);  // clock advance per step
};

struct GroupOptions {
  uint32_t num_slots = 8;
  uint32_t slot_bytes = 1024;
  proto::DeliveryMode delivery = proto::DeliveryMode::kMulticast;
  host::ReduceData reduce_data = host::ReduceData::kAuto;  // GroupParams::reduce_data
  absl::Duration repair_after = absl::Milliseconds(2);
  absl::Duration op_timeout = absl::Seconds(10);
  // The job's integrity key on every switch and rank of the group
  // (docs/security.md); nullopt: no tags.
  std::optional<proto::AggregationKey> integrity_key;
};

class InProcessFabric {
 public:
  InProcessFabric(const TreeShape& shape, const FabricOptions& options = {});
  ~InProcessFabric();

  // Installs group `group_id` over every rank on every switch of the tree
  // (the whole tree: this harness does not trim) and starts an engine per rank.
  void CreateGroup(uint32_t group_id, const GroupOptions& options);
  void RemoveGroup(uint32_t group_id);

  // Starts `args[r]` on rank r; returns the op ids.
  std::vector<host::OpId> StartOnEveryRank(uint32_t group_id,
                                           const std::vector<host::CollectiveArgs>& args);
  // Steps until every op is done or `max_steps` passed; false on timeout.
  bool RunUntilDone(uint32_t group_id, const std::vector<host::OpId>& ops,
                    int max_steps = 5000000);
  // One step: every switch and host runs once, then time moves on.
  void Step();

  host::GroupEngine& engine(uint32_t group_id, uint32_t rank);
  sw::SwitchDataPlane& switch_plane(int index) { return *switches_[index].plane; }
  transport::RoceEndpoint& host_endpoint(uint32_t rank);
  transport::RcQueuePair& host_qp(uint32_t rank);
  transport::ImpairedPort& host_port(uint32_t rank);
  transport::ImpairedPort& switch_port(int index) { return *switches_[index].port; }
  const TreeShape& shape() const { return shape_; }
  FakeClock& clock() { return clock_; }
  // The in-memory network, e.g. for a port of a forger's own.
  transport::MemoryNetwork& network() { return net_; }
  int num_hosts() const { return static_cast<int>(hosts_.size()); }
  // Sends raw bytes as an RC message from rank `rank` to its leaf switch.
  absl::Status SendRaw(uint32_t rank, std::span<const uint8_t> message);

 private:
  struct SwitchNode {
    transport::ImpairedPort* port = nullptr;
    std::unique_ptr<sw::SwitchDataPlane> plane;
    uint32_t parent_qpn = 0;            // this switch's QP toward its parent
    std::map<int, uint32_t> child_qpn;  // child (switch index or -1 - rank) -> local QP
  };
  struct SimHost;

  FakeClock clock_{absl::Seconds(1)};
  TreeShape shape_;
  FabricOptions options_;
  transport::MemoryNetwork net_;
  std::vector<SwitchNode> switches_;
  std::vector<std::unique_ptr<SimHost>> hosts_;
  std::vector<int> leaf_of_;  // rank -> switch index
  std::map<uint32_t, transport::Ipv4Endpoint> groups_;  // group -> multicast address
};

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_INTEGRATION_IN_PROCESS_FABRIC_H_
