#include "manager/testing/fake_switch.h"

#include "absl/strings/str_format.h"
#include "auth/secrets.h"

namespace netfold::manager {

using auth::RandomU64;

namespace {

control::CommandResult Error(absl::StatusCode code, std::string message) {
  control::CommandResult r;
  r.set_code(static_cast<int32_t>(code));
  r.set_message(std::move(message));
  return r;
}

}  // namespace

control::SwitchCapacity ToProtoCapacity(const Capacity& c) {
  control::SwitchCapacity p;
  p.set_max_trees(c.trees);
  p.set_max_groups(c.groups);
  p.set_num_slots(c.slots);
  p.set_slot_bytes(c.slot_bytes);
  p.set_max_qps(c.qps);
  return p;
}

FakeSwitch::FakeSwitch(std::string name, std::string data_address, control::SwitchCapacity capacity)
    : name_(std::move(name)),
      data_address_(std::move(data_address)),
      capacity_(capacity),
      incarnation_(RandomU64()) {}

control::CommandResult FakeSwitch::Apply(const control::ManagerMessage& msg) {
  absl::MutexLock lock(&mu_);
  ++commands_applied_;
  control::CommandResult result;
  switch (msg.msg_case()) {
    case control::ManagerMessage::kCreateQp: {
      if (qps_.size() >= capacity_.max_qps()) {
        result = Error(absl::StatusCode::kResourceExhausted,
                       absl::StrFormat("all %d QPs in use", capacity_.max_qps()));
        break;
      }
      const uint32_t qpn = next_qpn_++;
      Qp qp;
      qp.peer = msg.create_qp().peer();
      qp.pkey = msg.create_qp().pkey();
      qp.psn = (qpn * 2654435761u) & 0xffffff;
      if (msg.create_qp().has_remote()) {
        qp.remote = msg.create_qp().remote();
        qp.connected = true;
      }
      qps_[qpn] = qp;
      result.mutable_qp()->set_qpn(qpn);
      result.mutable_qp()->set_psn(qp.psn);
      break;
    }
    case control::ManagerMessage::kConnectQp: {
      auto it = qps_.find(msg.connect_qp().qpn());
      if (it == qps_.end()) {
        result =
            Error(absl::StatusCode::kNotFound, absl::StrFormat("no QP %d", msg.connect_qp().qpn()));
      } else if (it->second.connected) {
        result = Error(absl::StatusCode::kFailedPrecondition,
                       absl::StrFormat("QP %d is already connected", msg.connect_qp().qpn()));
      } else {
        it->second.remote = msg.connect_qp().remote();
        it->second.connected = true;
      }
      break;
    }
    case control::ManagerMessage::kDestroyQp: {
      if (qps_.erase(msg.destroy_qp().qpn()) == 0) {
        result =
            Error(absl::StatusCode::kNotFound, absl::StrFormat("no QP %d", msg.destroy_qp().qpn()));
      }
      break;
    }
    case control::ManagerMessage::kInstallGroup: {
      const control::InstallGroup& ig = msg.install_group();
      if (fail_installs_) {
        result = Error(absl::StatusCode::kInternal, "injected install failure");
        break;
      }
      auto existing = groups_.find(ig.group_id());
      if (existing != groups_.end() && existing->second.epoch() > ig.epoch()) {
        result = Error(absl::StatusCode::kFailedPrecondition,
                       absl::StrFormat("group %d has newer epoch %d", ig.group_id(),
                                       existing->second.epoch()));
        break;
      }
      if (ig.num_slots() == 0 || ig.slot_bytes() == 0 || ig.slot_bytes() > capacity_.slot_bytes()) {
        result = Error(absl::StatusCode::kInvalidArgument,
                       absl::StrFormat("bad slots: K=%d P=%d", ig.num_slots(), ig.slot_bytes()));
        break;
      }
      uint64_t slots = ig.num_slots();
      for (const auto& [id, g] : groups_) {
        if (id != ig.group_id()) slots += g.num_slots();
      }
      if (existing == groups_.end() && groups_.size() >= capacity_.max_groups()) {
        result = Error(absl::StatusCode::kResourceExhausted, "no free group entry");
        break;
      }
      if (slots > capacity_.num_slots()) {
        result = Error(absl::StatusCode::kResourceExhausted,
                       absl::StrFormat("needs %d slots, has %d", slots, capacity_.num_slots()));
        break;
      }
      bool ok = ig.children_size() > 0;
      std::string why = ok ? "" : "no children";
      for (const control::GroupChild& c : ig.children()) {
        auto q = qps_.find(c.qpn());
        if (q == qps_.end() || !q->second.connected) {
          ok = false;
          why = absl::StrFormat("child QP %d is not connected", c.qpn());
        }
      }
      if (!ig.is_root()) {
        auto q = qps_.find(ig.parent_qpn());
        if (q == qps_.end() || !q->second.connected) {
          ok = false;
          why = absl::StrFormat("parent QP %d is not connected", ig.parent_qpn());
        }
      }
      if (!ok) {
        result = Error(absl::StatusCode::kFailedPrecondition, why);
        break;
      }
      groups_[ig.group_id()] = ig;
      break;
    }
    case control::ManagerMessage::kRemoveGroup: {
      auto it = groups_.find(msg.remove_group().group_id());
      if (it != groups_.end() &&
          (msg.remove_group().epoch() == 0 || msg.remove_group().epoch() == it->second.epoch())) {
        groups_.erase(it);
      }
      break;
    }
    default:
      result = Error(absl::StatusCode::kInvalidArgument, "unknown command");
      break;
  }
  result.set_command_id(msg.command_id());
  return result;
}

control::RegisterSwitch FakeSwitch::Registration() const {
  absl::MutexLock lock(&mu_);
  control::RegisterSwitch reg;
  reg.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
  reg.set_name(name_);
  reg.set_data_address(data_address_);
  *reg.mutable_capacity() = capacity_;
  reg.set_incarnation(incarnation_);
  for (const auto& [id, g] : groups_) {
    control::InstalledGroup* ig = reg.add_installed_groups();
    ig->set_group_id(id);
    ig->set_epoch(g.epoch());
    ig->set_tree_id(g.tree_id());
  }
  for (const auto& [qpn, qp] : qps_) reg.add_qpns(qpn);
  return reg;
}

control::ResourceUsage FakeSwitch::Usage() const {
  absl::MutexLock lock(&mu_);
  control::ResourceUsage u;
  u.set_groups(static_cast<uint32_t>(groups_.size()));
  uint32_t slots = 0;
  for (const auto& [id, g] : groups_) slots += g.num_slots();
  u.set_slots(slots);
  u.set_qps(static_cast<uint32_t>(qps_.size()));
  return u;
}

size_t FakeSwitch::num_qps() const {
  absl::MutexLock lock(&mu_);
  return qps_.size();
}

size_t FakeSwitch::num_groups() const {
  absl::MutexLock lock(&mu_);
  return groups_.size();
}

bool FakeSwitch::HasQp(uint32_t qpn) const {
  absl::MutexLock lock(&mu_);
  return qps_.count(qpn) > 0;
}

std::optional<FakeSwitch::Qp> FakeSwitch::GetQp(uint32_t qpn) const {
  absl::MutexLock lock(&mu_);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return std::nullopt;
  return it->second;
}

bool FakeSwitch::HasGroup(uint64_t group_id) const {
  absl::MutexLock lock(&mu_);
  return groups_.count(group_id) > 0;
}

std::optional<control::InstallGroup> FakeSwitch::GetGroup(uint64_t group_id) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return std::nullopt;
  return it->second;
}

uint64_t FakeSwitch::incarnation() const {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

int FakeSwitch::commands_applied() const {
  absl::MutexLock lock(&mu_);
  return commands_applied_;
}

void FakeSwitch::Restart() {
  absl::MutexLock lock(&mu_);
  qps_.clear();
  groups_.clear();
  incarnation_ = RandomU64();
  next_qpn_ += 0x1000;  // a new process would not reuse QPNs soon either
}

void FakeSwitch::set_fail_installs(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_installs_ = fail;
}

void FakeSwitch::InjectGroup(uint64_t group_id, uint32_t epoch) {
  absl::MutexLock lock(&mu_);
  control::InstallGroup ig;
  ig.set_group_id(group_id);
  ig.set_epoch(epoch);
  ig.set_num_slots(1);
  ig.set_slot_bytes(1);
  groups_[group_id] = ig;
}

uint32_t FakeSwitch::InjectQp() {
  absl::MutexLock lock(&mu_);
  uint32_t qpn = next_qpn_++;
  qps_[qpn] = Qp();
  return qpn;
}

FakeFabric::FakeFabric(const Topology& topo, int base_port) {
  for (int i = 0; i < topo.num_switches(); ++i) {
    const SwitchSpec& s = topo.switch_at(i);
    switches_[s.name] = std::make_unique<FakeSwitch>(
        s.name, absl::StrFormat("127.0.0.1:%d", base_port + i), ToProtoCapacity(s.capacity));
  }
}

FakeSwitch* FakeFabric::Get(const std::string& name) {
  auto it = switches_.find(name);
  return it == switches_.end() ? nullptr : it->second.get();
}

std::vector<FakeSwitch*> FakeFabric::All() {
  std::vector<FakeSwitch*> out;
  for (auto& [name, s] : switches_) out.push_back(s.get());
  return out;
}

void FakeFabric::SetConnected(const std::string& name, bool connected) {
  absl::MutexLock lock(&mu_);
  disconnected_[name] = !connected;
}

void FakeFabric::SetHung(const std::string& name, bool hung) {
  absl::MutexLock lock(&mu_);
  hung_[name] = hung;
}

std::vector<absl::StatusOr<control::CommandResult>> FakeFabric::Execute(
    const std::vector<SwitchCommand>& commands, absl::Duration) {
  std::vector<absl::StatusOr<control::CommandResult>> out;
  for (const SwitchCommand& c : commands) {
    bool down, hung;
    {
      absl::MutexLock lock(&mu_);
      down = disconnected_[c.switch_name];
      hung = hung_[c.switch_name];
    }
    FakeSwitch* s = Get(c.switch_name);
    if (s == nullptr || down) {
      out.push_back(absl::UnavailableError("not connected"));
    } else if (hung) {
      out.push_back(absl::DeadlineExceededError("no answer before the deadline"));
    } else {
      out.push_back(s->Apply(c.message));
    }
  }
  return out;
}

}  // namespace netfold::manager
