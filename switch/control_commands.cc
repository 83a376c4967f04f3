#include "switch/control_commands.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "proto/aggregation_tag.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::sw {
namespace {

using transport::QpState;

constexpr uint64_t kMaxHeaderGroupId = 0xFFFFFFFFull;  // aggregation header: 32 bits
constexpr uint32_t kMaxHeaderTreeId = 0xFFFF;          // aggregation header: 16 bits

control::CommandResult Result(const absl::Status& s) {
  control::CommandResult r;
  r.set_code(static_cast<int32_t>(s.code()));
  if (!s.ok()) r.set_message(std::string(s.message()));
  return r;
}

absl::Status Error(absl::StatusCode code, std::string message) {
  return absl::Status(code, message);
}

absl::StatusOr<transport::Ipv4Endpoint> ParseRemote(const control::Endpoint& e,
                                                    std::string_view what) {
  absl::StatusOr<transport::Ipv4Endpoint> addr = transport::ParseIpv4Endpoint(e.address());
  if (!addr.ok() || addr->ip == 0 || addr->port == 0 || addr->IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s address '%s' is not a unicast ip:port", what, e.address()));
  }
  if (e.qpn() < 2 || e.qpn() >= transport::kMulticastQpn) {
    return absl::InvalidArgumentError(absl::StrFormat("%s QPN %d is not 2..0xfffffe", what, e.qpn()));
  }
  if (e.psn() > 0xffffff) {
    return absl::InvalidArgumentError(absl::StrFormat("%s PSN %d is not 24-bit", what, e.psn()));
  }
  return *addr;
}

absl::StatusOr<QpCreated> CreateQp(SwitchDataPlane& dp, const control::CreateQp& cmd) {
  QpRequest req;
  if (cmd.peer().has_host()) {
    req.job_id = cmd.peer().host().job_id();
    req.rank = cmd.peer().host().rank();
    req.peer = absl::StrFormat("job %d rank %d", cmd.peer().host().job_id(),
                               cmd.peer().host().rank());
    if (req.job_id == 0) return absl::InvalidArgumentError("a host QP needs a job id");
    if (cmd.pkey() > 0xffff || (cmd.pkey() & 0x7fff) == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("P_Key 0x%x of job %d is not a valid partition", cmd.pkey(), req.job_id));
    }
    req.pkey = static_cast<uint16_t>(cmd.pkey());
  } else if (cmd.peer().has_switch_peer()) {
    req.job_id = 0;
    req.pkey = 0xFFFF;
    req.peer = absl::StrFormat("%s (tree %d)", cmd.peer().switch_peer().name(),
                               cmd.peer().switch_peer().tree_id());
  } else {
    return absl::InvalidArgumentError("create_qp without a peer (host or switch)");
  }
  if (cmd.has_remote()) {
    absl::StatusOr<transport::Ipv4Endpoint> remote = ParseRemote(cmd.remote(), "remote");
    if (!remote.ok()) return remote.status();
    req.remote = *remote;
    req.remote_qpn = cmd.remote().qpn();
    req.remote_psn = cmd.remote().psn();
  }
  return dp.CreateQp(req);
}

absl::Status ConnectQp(SwitchDataPlane& dp, const control::ConnectQp& cmd) {
  transport::RcQueuePair* rc = dp.endpoint().FindRcQp(cmd.qpn());
  if (rc == nullptr) {
    return absl::NotFoundError(absl::StrFormat("switch %s: no QP 0x%06x", dp.config().name, cmd.qpn()));
  }
  if (rc->state() != QpState::kInit) {
    return absl::FailedPreconditionError(
        absl::StrFormat("switch %s: QP 0x%06x is %s, not waiting in INIT for a connect",
                        dp.config().name, cmd.qpn(), transport::QpStateName(rc->state())));
  }
  absl::StatusOr<transport::Ipv4Endpoint> remote = ParseRemote(cmd.remote(), "remote");
  if (!remote.ok()) return remote.status();
  return dp.ConnectQp(cmd.qpn(), *remote, cmd.remote().qpn(), cmd.remote().psn());
}

// Removes every group whose node uses `qpn` (as a child or the parent).
void RemoveGroupsUsing(SwitchDataPlane& dp, uint32_t qpn) {
  std::vector<std::tuple<uint16_t, uint32_t, uint32_t>> using_it;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode&) {
    bool uses = g.parent_qpn == qpn;
    for (const GroupChildSpec& c : g.children) uses = uses || c.qpn == qpn;
    if (uses) using_it.emplace_back(g.tree_id, g.group_id, g.epoch);
  });
  for (const auto& [tree, group, epoch] : using_it) {
    NETFOLD_LOG(kWarning) << absl::StrFormat(
        "switch %s: QP 0x%06x is destroyed while group %d (tree %d) uses it: removing the group",
        dp.config().name, qpn, group, tree);
    (void)dp.RemoveGroup(tree, group, epoch);
  }
}

absl::Status DestroyQp(SwitchDataPlane& dp, const control::DestroyQp& cmd) {
  if (dp.endpoint().FindRcQp(cmd.qpn()) == nullptr) {
    return absl::NotFoundError(absl::StrFormat("switch %s: no QP 0x%06x", dp.config().name, cmd.qpn()));
  }
  RemoveGroupsUsing(dp, cmd.qpn());
  return dp.DestroyQp(cmd.qpn());
}

absl::Status CheckConnected(SwitchDataPlane& dp, uint32_t qpn, std::string_view what) {
  transport::RcQueuePair* rc = qpn == 0 ? nullptr : dp.endpoint().FindRcQp(qpn);
  if (rc == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("switch %s: %s QP 0x%06x does not exist", dp.config().name, what, qpn));
  }
  if (rc->state() != QpState::kRts) {
    return absl::FailedPreconditionError(absl::StrFormat("switch %s: %s QP 0x%06x is %s, not connected",
                                                         dp.config().name, what, qpn,
                                                         transport::QpStateName(rc->state())));
  }
  return absl::OkStatus();
}

absl::Status InstallGroup(SwitchDataPlane& dp, const control::InstallGroup& ig,
                          const CommandLimits& limits) {
  const std::string& name = dp.config().name;
  if (ig.group_id() == 0 || ig.group_id() > kMaxHeaderGroupId) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch %s: group id %d does not fit the aggregation header's 32-bit group_id (1..%d)",
        name, ig.group_id(), kMaxHeaderGroupId));
  }
  if (ig.tree_id() > kMaxHeaderTreeId) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch %s: tree id %d does not fit the aggregation header's 16-bit tree_id (0..%d)", name,
        ig.tree_id(), kMaxHeaderTreeId));
  }
  if (ig.pkey() > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch %s: P_Key 0x%x is not 16-bit", name, ig.pkey()));
  }
  if (ig.num_slots() == 0 || ig.slot_bytes() == 0 || ig.slot_bytes() % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch %s: group %d: K=%d slots of P=%d bytes (both positive, P a multiple of 16)", name,
        ig.group_id(), ig.num_slots(), ig.slot_bytes()));
  }
  if (ig.slot_bytes() > dp.config().max_slot_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch %s: group %d asks for %d-byte slots; this switch has at most %d", name,
        ig.group_id(), ig.slot_bytes(), dp.config().max_slot_bytes));
  }
  if (ig.children_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch %s: group %d has no children", name, ig.group_id()));
  }

  // The same group id on any tree: same epoch = done, older = refused,
  // newer = replaced (maybe on another tree).
  const GroupSpec* existing = FindGroupById(dp, ig.group_id());
  if (existing != nullptr) {
    if (existing->epoch > ig.epoch()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("switch %s: group %d already has epoch %d, newer than %d", name,
                          ig.group_id(), existing->epoch, ig.epoch()));
    }
    if (existing->epoch == ig.epoch() && existing->tree_id == ig.tree_id()) return absl::OkStatus();
  }

  GroupSpec spec;
  spec.job_id = ig.job_id();
  spec.tree_id = static_cast<uint16_t>(ig.tree_id());
  spec.group_id = static_cast<uint32_t>(ig.group_id());
  spec.epoch = ig.epoch();
  spec.pkey = static_cast<uint16_t>(ig.pkey());
  spec.qkey = ig.qkey();
  spec.num_slots = ig.num_slots();
  spec.slot_bytes = ig.slot_bytes();
  if (!ig.integrity_key().empty()) {
    absl::StatusOr<proto::AggregationKey> key = proto::AggregationKeyFromBytes(ig.integrity_key());
    if (!key.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("switch %s: group %d: %s", name,
                                                        ig.group_id(), key.status().message()));
    }
    spec.integrity_key = *key;
  }
  for (int i = 0; i < ig.children_size(); ++i) {
    const control::GroupChild& c = ig.children(i);
    GroupChildSpec child;
    child.qpn = c.qpn();
    child.ranks.assign(c.subtree_ranks().begin(), c.subtree_ranks().end());
    if (c.child_case() == control::GroupChild::kRank) {
      if (child.ranks.empty()) child.ranks = {c.rank()};
    } else if (c.child_case() == control::GroupChild::kSwitchName) {
      if (child.ranks.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "switch %s: group %d: child switch %s comes without subtree_ranks (a manager older "
            "than this switch?)",
            name, ig.group_id(), c.switch_name()));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "switch %s: group %d: child %d is neither a rank nor a switch", name, ig.group_id(), i));
    }
    std::sort(child.ranks.begin(), child.ranks.end());
    if (absl::Status s = CheckConnected(dp, child.qpn, absl::StrFormat("child %d", i)); !s.ok()) {
      return s;
    }
    spec.children.push_back(std::move(child));
  }
  if (!ig.is_root()) {
    if (absl::Status s = CheckConnected(dp, ig.parent_qpn(), "parent"); !s.ok()) return s;
    spec.parent_qpn = ig.parent_qpn();
  }
  const bool multicast = ig.delivery() == control::DELIVERY_MULTICAST ||
                         ig.delivery() == control::DELIVERY_MODE_UNSPECIFIED;
  if (ig.is_root() && multicast) {
    absl::StatusOr<transport::Ipv4Endpoint> group =
        transport::ParseIpv4Endpoint(ig.multicast_address());
    if (!group.ok() || !group->IsMulticast()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("switch %s: group %d: multicast address '%s' is not a multicast ip:port",
                          name, ig.group_id(), ig.multicast_address()));
    }
    spec.multicast = *group;
  }

  // Trees: a new tree needs room among the trees this switch serves.
  std::set<uint16_t> trees;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode&) {
    if (g.group_id != spec.group_id) trees.insert(g.tree_id);
  });
  if (!trees.count(spec.tree_id) && trees.size() + 1 > limits.max_trees) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: group %d would be on a %dth tree; this switch serves at most %d", name,
        ig.group_id(), trees.size() + 1, limits.max_trees));
  }

  if (existing != nullptr && existing->tree_id != spec.tree_id) {
    // Re-planned onto another tree: the old node goes first.
    (void)dp.RemoveGroup(existing->tree_id, existing->group_id, 0);
  }
  return dp.InstallGroup(spec);
}

absl::Status RemoveGroup(SwitchDataPlane& dp, const control::RemoveGroup& cmd) {
  const GroupSpec* g = FindGroupById(dp, cmd.group_id());
  if (g == nullptr || (cmd.epoch() != 0 && g->epoch != cmd.epoch())) return absl::OkStatus();
  return dp.RemoveGroup(g->tree_id, g->group_id, g->epoch);
}

}  // namespace

const GroupSpec* FindGroupById(const SwitchDataPlane& dp, uint64_t group_id) {
  const GroupSpec* found = nullptr;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode&) {
    if (g.group_id == group_id) found = &g;
  });
  return found;
}

control::CommandResult ExecuteCommand(SwitchDataPlane& dp, const control::ManagerMessage& m,
                                      const CommandLimits& limits) {
  control::CommandResult r;
  switch (m.msg_case()) {
    case control::ManagerMessage::kCreateQp: {
      absl::StatusOr<QpCreated> qp = CreateQp(dp, m.create_qp());
      r = Result(qp.status());
      if (qp.ok()) {
        r.mutable_qp()->set_qpn(qp->qpn);
        r.mutable_qp()->set_psn(qp->psn);
      }
      break;
    }
    case control::ManagerMessage::kConnectQp:
      r = Result(ConnectQp(dp, m.connect_qp()));
      break;
    case control::ManagerMessage::kDestroyQp:
      r = Result(DestroyQp(dp, m.destroy_qp()));
      break;
    case control::ManagerMessage::kInstallGroup:
      r = Result(InstallGroup(dp, m.install_group(), limits));
      break;
    case control::ManagerMessage::kRemoveGroup:
      r = Result(RemoveGroup(dp, m.remove_group()));
      break;
    case control::ManagerMessage::kWelcome:
      r = Result(absl::OkStatus());  // not a command; nothing to do
      break;
    default:
      r = Result(Error(absl::StatusCode::kInvalidArgument,
                       absl::StrFormat("switch %s: unknown command", dp.config().name)));
      break;
  }
  if (r.code() != 0) {
    NETFOLD_LOG(kInfo) << "switch " << dp.config().name << ": command " << m.command_id()
                       << " refused: " << r.message();
  }
  r.set_command_id(m.command_id());
  return r;
}

void FillHeldState(const SwitchDataPlane& dp, control::RegisterSwitch* reg) {
  std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> groups;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode&) {
    groups.emplace_back(g.group_id, g.epoch, g.tree_id);
  });
  std::sort(groups.begin(), groups.end());
  for (const auto& [id, epoch, tree] : groups) {
    control::InstalledGroup* ig = reg->add_installed_groups();
    ig->set_group_id(id);
    ig->set_epoch(epoch);
    ig->set_tree_id(tree);
  }
  std::vector<uint32_t> qpns;
  dp.ForEachQp([&](const std::string&, const transport::RcQueuePair& qp) {
    qpns.push_back(qp.qpn());
  });
  std::sort(qpns.begin(), qpns.end());
  for (uint32_t q : qpns) reg->add_qpns(q);
}

control::ResourceUsage UsageOf(const SwitchDataPlane& dp) {
  control::ResourceUsage u;
  u.set_groups(static_cast<uint32_t>(dp.num_groups()));
  u.set_slots(dp.num_slots_used());
  u.set_qps(static_cast<uint32_t>(dp.num_qps()));
  return u;
}

control::SwitchCapacity CapacityOf(const SwitchConfig& config, uint32_t max_trees) {
  control::SwitchCapacity c;
  c.set_max_trees(max_trees);
  c.set_max_groups(config.max_groups);
  c.set_num_slots(config.max_slots);
  c.set_slot_bytes(config.max_slot_bytes);
  c.set_max_qps(config.max_qps);
  return c;
}

}  // namespace netfold::sw
