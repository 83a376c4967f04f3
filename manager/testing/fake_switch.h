// Test doubles for the switch side of the control plane.
//
//   FakeFabric fabric;
//   FakeSwitch* leaf = fabric.Add("leaf0", "127.0.0.1:5000", capacity);
//   AggregationManager am(topo, options, clock, &fabric, nullptr);
//   am.RegisterSwitch(leaf->Registration(), /*session=*/1);
//   ...
//   EXPECT_TRUE(leaf->HasGroup(7));
//
// FakeSwitch applies manager commands to in-memory state exactly as the
// switch contract of docs/control_plane.md requires (QP numbering, group
// install/replace/remove by epoch, capacity checks), so tests can check
// what the manager pushed and that it never over-commits a switch.
// FakeFabric is an in-process SwitchCommander over a set of FakeSwitches,
// with faults: a disconnected switch answers Unavailable, a hung one
// DeadlineExceeded. FakeSwitchAgent (fake_switch_agent.h) puts a
// FakeSwitch behind a real gRPC Connect stream. All classes thread-safe.
#ifndef NETFOLD_MANAGER_TESTING_FAKE_SWITCH_H_
#define NETFOLD_MANAGER_TESTING_FAKE_SWITCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "manager/switch_commander.h"
#include "manager/topology.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

control::SwitchCapacity ToProtoCapacity(const Capacity& c);

class FakeSwitch {
 public:
  FakeSwitch(std::string name, std::string data_address, control::SwitchCapacity capacity);

  const std::string& name() const { return name_; }
  const std::string& data_address() const { return data_address_; }

  // Executes one command and returns its result (command_id copied).
  control::CommandResult Apply(const control::ManagerMessage& message);

  // A registration reporting everything currently held.
  control::RegisterSwitch Registration() const;
  control::ResourceUsage Usage() const;

  struct Qp {
    control::QpPeer peer;
    control::Endpoint remote;
    bool connected = false;
    uint32_t psn = 0;
    uint32_t pkey = 0;
  };
  size_t num_qps() const;
  size_t num_groups() const;
  bool HasQp(uint32_t qpn) const;
  std::optional<Qp> GetQp(uint32_t qpn) const;
  bool HasGroup(uint64_t group_id) const;
  std::optional<control::InstallGroup> GetGroup(uint64_t group_id) const;
  uint64_t incarnation() const;
  int commands_applied() const;

  // Loses all state and picks a new incarnation (a process restart).
  void Restart();
  // Makes InstallGroup fail with INTERNAL (fault injection).
  void set_fail_installs(bool fail);
  // Adds state the manager does not know about (a stale leftover).
  void InjectGroup(uint64_t group_id, uint32_t epoch);
  uint32_t InjectQp();

 private:
  const std::string name_;
  const std::string data_address_;
  const control::SwitchCapacity capacity_;
  mutable absl::Mutex mu_;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_);
  uint32_t next_qpn_ ABSL_GUARDED_BY(mu_) = 0x100;
  std::map<uint32_t, Qp> qps_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, control::InstallGroup> groups_ ABSL_GUARDED_BY(mu_);
  bool fail_installs_ ABSL_GUARDED_BY(mu_) = false;
  int commands_applied_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeFabric : public SwitchCommander {
 public:
  // One FakeSwitch per topology switch, at 127.0.0.1:(base_port + index),
  // with the topology's capacities.
  explicit FakeFabric(const Topology& topo, int base_port = 20000);

  FakeSwitch* Get(const std::string& name);
  std::vector<FakeSwitch*> All();
  void SetConnected(const std::string& name, bool connected);
  void SetHung(const std::string& name, bool hung);

  std::vector<absl::StatusOr<control::CommandResult>> Execute(
      const std::vector<SwitchCommand>& commands, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FakeSwitch>> switches_;
  std::map<std::string, bool> disconnected_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> hung_ ABSL_GUARDED_BY(mu_);
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_FAKE_SWITCH_H_
