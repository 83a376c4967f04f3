#include "switch/switch_data_plane.h"

#include <algorithm>
#include <memory>
#include <tuple>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace netfold::sw {

using transport::Ipv4Endpoint;
using transport::QpState;

std::string_view SwitchDropReasonName(SwitchDropReason reason) {
  switch (reason) {
    case SwitchDropReason::kUnknownGroup: return "unknown_group";
    case SwitchDropReason::kNotAMember: return "not_a_member";
    case SwitchDropReason::kQpFailed: return "qp_failed";
    case SwitchDropReason::kNumReasons: break;
  }
  return "invalid";
}

struct SwitchDataPlane::Qp {
  transport::RcQueuePair* rc = nullptr;
  uint64_t job_id = 0;
  uint32_t rank = 0;  // a host QP's job rank
  uint32_t local_psn = 0;
  std::string peer;
  std::deque<std::vector<uint8_t>> backlog;
  // The groups using this QP: group key -> child index, or -1 for the parent.
  absl::flat_hash_map<uint64_t, int> roles;
  bool failure_reported = false;
  // An in-process link: the switch at the other end and its QP (SwitchConfig::
  // in_process_links); null: RC through the socket, for good once it fell back.
  SwitchDataPlane* in_process = nullptr;
  uint32_t in_process_qpn = 0;
};

struct SwitchDataPlane::Group {
  GroupSpec spec;
  std::unique_ptr<Output> output;
  std::unique_ptr<AggregationNode> node;
};

class SwitchDataPlane::Output : public NodeOutput {
 public:
  Output(SwitchDataPlane* dp, const GroupSpec* spec) : dp_(dp), spec_(spec) {}
  void SendToParent(std::span<const uint8_t> message) override {
    if (spec_->parent_qpn) dp_->Send(*spec_->parent_qpn, message);
  }
  void SendToChild(size_t child, std::span<const uint8_t> message) override {
    dp_->Send(spec_->children[child].qpn, message);
  }
  void Multicast(std::span<const uint8_t> message) override {
    auto it = dp_->multicast_qps_.find(spec_->job_id);
    if (it == dp_->multicast_qps_.end() || !spec_->multicast) return;
    absl::Status s = it->second->PostSend(*spec_->multicast, transport::kMulticastQpn,
                                          spec_->qkey, message);
    if (!s.ok()) {
      // UD is unreliable by design: the hosts repair a lost result.
      NETFOLD_LOG(kDebug) << "multicast of group " << spec_->group_id << " dropped: " << s;
      return;
    }
    dp_->counters_.multicasts_sent.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  SwitchDataPlane* dp_;
  const GroupSpec* spec_;
};

SwitchDataPlane::SwitchDataPlane(std::unique_ptr<transport::Port> port, const Clock& clock,
                                 const SwitchConfig& config)
    : config_(config), clock_(clock), node_clock_(clock, 16), endpoint_(std::move(port), clock,
                transport::RoceEndpointConfig{
                    .solve_ip_identification = config.solve_ip_identification}) {
  impaired_port_ = dynamic_cast<transport::ImpairedPort*>(&endpoint_.port());
  // Kept messages hold receive buffers (and the batch each came in): three
  // quarters of the pool stay for receiving, so the contributions the kept
  // ones wait for can always come in.
  max_kept_ = endpoint_.port().pool().num_buffers() / 4;
  if (config_.psn_seed != 0) {
    psn_state_ = config_.psn_seed;
  } else {
    absl::BitGen gen;
    psn_state_ = absl::Uniform<uint64_t>(gen);
  }
}

SwitchDataPlane::~SwitchDataPlane() {
  groups_.clear();  // nodes reference QPs and outputs
}

void SwitchDataPlane::SetJobQuota(uint64_t job_id, const JobQuota& quota) {
  quotas_[job_id] = quota;
}

JobQuota SwitchDataPlane::QuotaOf(uint64_t job) const {
  auto it = quotas_.find(job);
  return it == quotas_.end() ? config_.default_quota : it->second;
}

absl::StatusOr<QpCreated> SwitchDataPlane::CreateQp(const QpRequest& request) {
  if (qps_.size() >= config_.max_qps) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: all %d QPs are in use", config_.name, config_.max_qps));
  }
  if (request.job_id != 0) {
    const JobQuota quota = QuotaOf(request.job_id);
    if (usage_[request.job_id].qps >= quota.max_qps) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "switch %s: job %d already has its quota of %d QPs", config_.name, request.job_id,
          quota.max_qps));
    }
  }
  if (request.psn && *request.psn > 0xffffff) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch %s: PSN 0x%x is not 24-bit", config_.name, *request.psn));
  }
  transport::RcQpConfig rc_config;
  rc_config.max_send_queue = 1024;
  rc_config.max_recv_queue = 1024;
  rc_config.max_message_size = 64 * 1024;
  rc_config.ack_delay = std::min(config_.ack_delay, config_.ack_timeout / 4);
  rc_config.min_failure_time = config_.min_failure_time;
  // Requests of one packet are folded straight from the packet buffer they
  // arrived in (RunOnce pops every message a receive brought before the
  // next, or a node keeps it to fold later: KeepCurrent); a longer one is
  // copied with its elements (after the 40-byte header) on a cache line.
  rc_config.zero_copy_receive = true;
  rc_config.recv_line_offset = kCacheLine - proto::kAggregationHeaderSize;
  NETFOLD_ASSIGN_OR_RETURN(transport::RcQueuePair * rc,
                           request.qpn ? endpoint_.CreateRcQpWithQpn(*request.qpn, rc_config)
                                       : endpoint_.CreateRcQp(rc_config));
  transport::RcQpAttributes attrs;
  attrs.pkey = request.pkey;
  if (absl::Status s = rc->Modify(QpState::kInit, attrs); !s.ok()) {
    (void)endpoint_.DestroyQp(rc->qpn());
    return s;
  }
  auto qp = std::make_unique<Qp>();
  qp->rc = rc;
  qp->job_id = request.job_id;
  qp->rank = request.rank;
  qp->peer = request.peer;
  // splitmix64: a fresh, well-spread 24-bit PSN per QP.
  psn_state_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = psn_state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  qp->local_psn = request.psn ? *request.psn : static_cast<uint32_t>((z ^ (z >> 31)) & 0xffffff);
  const QpCreated created{rc->qpn(), qp->local_psn};
  auto order = [](const Qp* q) {
    return std::make_tuple(q->job_id == 0, q->job_id, q->rank, q->rc->qpn());
  };
  qps_in_order_.insert(std::upper_bound(qps_in_order_.begin(), qps_in_order_.end(), qp.get(),
                                        [&](const Qp* a, const Qp* b) {
                                          return order(a) < order(b);
                                        }),
                       qp.get());
  qps_[rc->qpn()] = std::move(qp);
  if (request.job_id != 0) ++usage_[request.job_id].qps;
  if (request.remote) {
    if (absl::Status s = ConnectQp(created.qpn, *request.remote, request.remote_qpn,
                                   request.remote_psn);
        !s.ok()) {
      (void)DestroyQp(created.qpn);
      return s;
    }
  }
  NETFOLD_LOG(kDebug) << absl::StrFormat("switch %s: QP 0x%06x for %s", config_.name,
                                         created.qpn, request.peer);
  return created;
}

absl::Status SwitchDataPlane::ConnectQp(uint32_t qpn, const Ipv4Endpoint& remote,
                                        uint32_t remote_qpn, uint32_t remote_psn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) {
    return absl::NotFoundError(absl::StrFormat("switch %s: no QP 0x%06x", config_.name, qpn));
  }
  Qp& qp = *it->second;
  transport::RcQpAttributes attrs = qp.rc->attributes();
  attrs.remote = remote;
  attrs.remote_qpn = remote_qpn;
  attrs.rq_psn = remote_psn;
  attrs.path_mtu = config_.path_mtu;
  attrs.sq_psn = qp.local_psn;
  attrs.timeout = qp.job_id != 0 ? config_.host_ack_timeout : config_.ack_timeout;
  attrs.retry_count = config_.retry_count;
  NETFOLD_RETURN_IF_ERROR(qp.rc->Modify(QpState::kRtr, attrs));
  NETFOLD_RETURN_IF_ERROR(qp.rc->Modify(QpState::kRts, attrs));
  qp.in_process = nullptr;
  if (config_.in_process_links) {
    for (SwitchDataPlane* peer : in_process_peers_) {
      if (peer->local() == remote && peer->config_.in_process_links &&
          peer->qps_.contains(remote_qpn)) {
        qp.in_process = peer;
        qp.in_process_qpn = remote_qpn;
        NETFOLD_LOG(kDebug) << absl::StrFormat(
            "switch %s: QP 0x%06x to %s (%s) is in process", config_.name, qpn,
            peer->config_.name, remote.ToString());
        break;
      }
    }
  }
  return absl::OkStatus();
}

void SwitchDataPlane::SetInProcessPeers(const std::vector<SwitchDataPlane*>& peers) {
  in_process_peers_.clear();
  for (SwitchDataPlane* p : peers) {
    if (p != this) in_process_peers_.push_back(p);
  }
  for (Qp* qp : qps_in_order_) {
    if (qp->in_process != nullptr &&
        std::find(in_process_peers_.begin(), in_process_peers_.end(), qp->in_process) ==
            in_process_peers_.end()) {
      qp->in_process = nullptr;  // that switch is gone: RC finds out
    }
  }
}

bool SwitchDataPlane::InProcessLinkUsable(const Qp& qp) const {
  const SwitchDataPlane& peer = *qp.in_process;
  auto faulty = [](const SwitchDataPlane& dp) {
    return dp.impaired_port_ != nullptr && dp.impaired_port_->ever_impaired();
  };
  if (faulty(*this) || faulty(peer) || qp.rc->state() == QpState::kError) return false;
  // The peer's QP must still be there and, once connected, connected to
  // this one: else RC finds out (a QP that times out is reported).
  auto it = peer.qps_.find(qp.in_process_qpn);
  if (it == peer.qps_.end()) return false;
  const transport::RcQueuePair& theirs = *it->second->rc;
  if (theirs.state() == QpState::kError) return false;
  if (theirs.state() == QpState::kRts || theirs.state() == QpState::kRtr) {
    return theirs.attributes().remote_qpn == qp.rc->qpn() && theirs.attributes().remote == local();
  }
  return true;
}

void SwitchDataPlane::Deliver(uint32_t qpn, std::span<const uint8_t> message) {
  std::vector<uint8_t> bytes;
  if (!spare_buffers_.empty()) {
    bytes = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
  bytes.assign(message.begin(), message.end());
  inbox_.push_back({qpn, std::move(bytes)});
}

void* SwitchDataPlane::KeepCurrent() {
  if (handled_taken_) return nullptr;
  transport::PacketBuffer* packet = nullptr;
  if (handling_inbox_ == nullptr) {
    if (handling_ == nullptr || kept_ >= max_kept_) return nullptr;
    packet = handling_->rc->TakeRecv();
    if (packet == nullptr) return nullptr;  // a message of several packets: copied
    ++kept_;
  }
  std::unique_ptr<Kept> kept;
  if (!spare_kept_.empty()) {
    kept = std::move(spare_kept_.back());
    spare_kept_.pop_back();
  } else {
    kept = std::make_unique<Kept>();
  }
  kept->packet = packet;
  // An inbox buffer's storage moves with it: the node's span stays valid.
  if (packet == nullptr) kept->bytes = std::move(handling_inbox_->bytes);
  handled_taken_ = true;
  return kept.release();
}

void SwitchDataPlane::Release(void* handle) {
  std::unique_ptr<Kept> kept(static_cast<Kept*>(handle));
  if (kept->packet != nullptr) {
    transport::PacketPool::Free(kept->packet);
    kept->packet = nullptr;
    --kept_;
  } else if (spare_buffers_.size() < kMaxSpareBuffers) {
    spare_buffers_.push_back(std::move(kept->bytes));
  }
  kept->bytes = {};
  if (spare_kept_.size() < 1024) spare_kept_.push_back(std::move(kept));
}

void SwitchDataPlane::HandleInbox() {
  // Only what is here now: what handling sends to this switch's own
  // in-process peers waits for their turn, and anything sent back to this
  // one for the next pass.
  for (size_t n = inbox_.size(); n > 0; --n) {
    InboxMessage m = std::move(inbox_.front());
    inbox_.pop_front();
    auto it = qps_.find(m.qpn);
    if (it == qps_.end() || it->second->rc->state() == QpState::kError) {
      counters_.drops[static_cast<size_t>(SwitchDropReason::kQpFailed)].fetch_add(
          1, std::memory_order_relaxed);
    } else {
      handling_inbox_ = &m;
      handled_taken_ = false;
      HandleMessage(*it->second, m.bytes);
      handling_inbox_ = nullptr;
    }
    // (Empty when a node kept it: Release gives it back.)
    if (spare_buffers_.size() < 1024 && !m.bytes.empty()) spare_buffers_.push_back(std::move(m.bytes));
  }
}

absl::Status SwitchDataPlane::DestroyQp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) {
    return absl::NotFoundError(absl::StrFormat("switch %s: no QP 0x%06x", config_.name, qpn));
  }
  if (!it->second->roles.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "switch %s: QP 0x%06x is still used by %d group(s)", config_.name, qpn,
        it->second->roles.size()));
  }
  const uint64_t job = it->second->job_id;
  if (job != 0 && usage_[job].qps > 0) --usage_[job].qps;
  it->second->rc->counters().AddTo(destroyed_qp_counters_);
  qps_in_order_.erase(std::find(qps_in_order_.begin(), qps_in_order_.end(), it->second.get()));
  qps_.erase(it);
  with_backlog_.erase(std::remove(with_backlog_.begin(), with_backlog_.end(), qpn),
                      with_backlog_.end());
  return endpoint_.DestroyQp(qpn);
}

absl::StatusOr<transport::UdQueuePair*> SwitchDataPlane::MulticastQp(uint64_t job_id,
                                                                     uint16_t pkey,
                                                                     uint32_t qkey) {
  auto it = multicast_qps_.find(job_id);
  if (it != multicast_qps_.end()) return it->second;
  NETFOLD_ASSIGN_OR_RETURN(transport::UdQueuePair * ud,
                           endpoint_.CreateUdQp({.qkey = qkey, .pkey = pkey}));
  multicast_qps_[job_id] = ud;
  return ud;
}

absl::Status SwitchDataPlane::InstallGroup(const GroupSpec& spec) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "switch %s: group %d (tree %d, epoch %d): %s", config_.name, spec.group_id,
        spec.tree_id, spec.epoch, why));
  };
  if (spec.children.empty()) return invalid("no children");
  if (spec.num_slots == 0 || spec.slot_bytes == 0 || spec.slot_bytes % 16 != 0) {
    return invalid("slots and slot bytes must be positive, slot bytes a multiple of 16");
  }
  if (spec.slot_bytes > config_.max_slot_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: group %d asks for %d-byte slots; this switch has at most %d",
        config_.name, spec.group_id, spec.slot_bytes, config_.max_slot_bytes));
  }
  if (spec.multicast && !spec.multicast->IsMulticast()) {
    return invalid(absl::StrFormat("%s is not a multicast address", spec.multicast->ToString()));
  }
  if (spec.integrity_key && spec.slot_bytes <= proto::kAggregationTagSize) {
    return invalid("with integrity a slot must hold more than the 16-byte tag");
  }
  auto check_qp = [&](uint32_t qpn, std::string_view what) -> absl::Status {
    auto it = qps_.find(qpn);
    if (it == qps_.end()) return invalid(absl::StrFormat("%s QP 0x%06x does not exist", what, qpn));
    if (it->second->job_id != 0 && it->second->job_id != spec.job_id) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "switch %s: group %d of job %d cannot use QP 0x%06x of job %d", config_.name,
          spec.group_id, spec.job_id, qpn, it->second->job_id));
    }
    return absl::OkStatus();
  };
  std::vector<uint32_t> seen;
  for (const GroupChildSpec& c : spec.children) {
    NETFOLD_RETURN_IF_ERROR(check_qp(c.qpn, "child"));
    seen.push_back(c.qpn);
  }
  if (spec.parent_qpn) {
    NETFOLD_RETURN_IF_ERROR(check_qp(*spec.parent_qpn, "parent"));
    seen.push_back(*spec.parent_qpn);
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    return invalid("a QP appears twice among the children and the parent");
  }

  const uint64_t key = GroupKey(spec.tree_id, spec.group_id);
  if (auto it = groups_.find(key); it != groups_.end()) {
    if (it->second->spec.epoch == spec.epoch) return absl::OkStatus();  // re-push: already there
    if (it->second->spec.epoch > spec.epoch) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "switch %s: group %d already has epoch %d, newer than %d", config_.name,
          spec.group_id, it->second->spec.epoch, spec.epoch));
    }
    RemoveGroupAt(key);
  }
  const JobQuota quota = QuotaOf(spec.job_id);
  JobUsage& used = usage_[spec.job_id];
  if (used.groups + 1 > quota.max_groups) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: job %d already has its quota of %d groups", config_.name, spec.job_id,
        quota.max_groups));
  }
  if (used.slots + spec.num_slots > quota.max_slots) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: job %d would hold %d slots, its quota is %d", config_.name, spec.job_id,
        used.slots + spec.num_slots, quota.max_slots));
  }
  if (groups_.size() + 1 > config_.max_groups || slots_used_ + spec.num_slots > config_.max_slots) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "switch %s: out of capacity (%d/%d groups, %d/%d slots in use)", config_.name,
        groups_.size(), config_.max_groups, slots_used_, config_.max_slots));
  }
  if (spec.multicast) {
    NETFOLD_RETURN_IF_ERROR(MulticastQp(spec.job_id, spec.pkey, spec.qkey).status());
  }

  auto group = std::make_unique<Group>();
  group->spec = spec;
  group->output = std::make_unique<Output>(this, &group->spec);
  AggregationNodeConfig node_config;
  node_config.tree_id = spec.tree_id;
  node_config.group_id = spec.group_id;
  node_config.epoch = spec.epoch;
  node_config.num_slots = spec.num_slots;
  node_config.slot_bytes = spec.slot_bytes;
  node_config.has_parent = spec.parent_qpn.has_value();
  node_config.multicast = spec.multicast.has_value();
  node_config.integrity_key = spec.integrity_key;
  for (const GroupChildSpec& c : spec.children) node_config.children.push_back({c.ranks});
  NETFOLD_ASSIGN_OR_RETURN(group->node,
                           AggregationNode::Create(node_config, group->output.get(), node_clock_));
  group->node->SetKeeper(this);
  for (size_t c = 0; c < spec.children.size(); ++c) {
    qps_[spec.children[c].qpn]->roles[key] = static_cast<int>(c);
  }
  if (spec.parent_qpn) qps_[*spec.parent_qpn]->roles[key] = -1;
  ++used.groups;
  used.slots += spec.num_slots;
  slots_used_ += spec.num_slots;
  groups_[key] = std::move(group);
  ReserveBuffers(spec);
  NETFOLD_LOG(kInfo) << absl::StrFormat(
      "switch %s: installed group %d tree %d epoch %d (%d children, %s, K=%d P=%d)",
      config_.name, spec.group_id, spec.tree_id, spec.epoch, spec.children.size(),
      spec.parent_qpn ? "has parent" : "root", spec.num_slots, spec.slot_bytes);
  return absl::OkStatus();
}

void SwitchDataPlane::ReserveBuffers(const GroupSpec& spec) {
  // A message: header, up to P bytes of elements, the tag if any; a packet
  // adds ~40 bytes of BTH, ICRC and room (the host's kResultOverhead).
  const size_t message = proto::kAggregationHeaderSize + spec.slot_bytes +
                         (spec.integrity_key ? proto::kAggregationTagSize : 0);
  constexpr size_t kPacketOverhead = 40;
  // Each neighbour sends up to K messages at once: contributions from a
  // child, results from the parent.
  size_t over_port = 0, in_process = 0;
  auto count = [&](uint32_t qpn) {
    if (qps_.at(qpn)->in_process != nullptr) {
      ++in_process;
    } else {
      ++over_port;
    }
  };
  for (const GroupChildSpec& c : spec.children) count(c.qpn);
  if (spec.parent_qpn) count(*spec.parent_qpn);
  reserved_receive_bytes_ += over_port * spec.num_slots * (message + kPacketOverhead);
  endpoint_.port().ReserveReceive(reserved_receive_bytes_);
  const size_t want = std::min(kMaxSpareBuffers, spare_buffers_.size() + in_process * spec.num_slots);
  while (spare_buffers_.size() < want) {
    std::vector<uint8_t> bytes(message);  // written: resident
    bytes.clear();                        // the capacity stays
    spare_buffers_.push_back(std::move(bytes));
  }
  // The group root's results leave in packets of the port's pool: up to K
  // at once.
  if (spec.multicast) endpoint_.port().pool().Prefault(spec.num_slots);
  if (spec.parent_qpn) {
    const Qp& parent = *qps_.at(*spec.parent_qpn);
    if (parent.in_process == nullptr && parent.rc->state() == QpState::kRts) {
      (void)parent.rc->ReserveSends(spec.num_slots);  // best effort, as all of this
    }
  }
}

size_t SwitchDataPlane::num_spare_inbox_buffers(size_t min_capacity) const {
  return static_cast<size_t>(std::count_if(
      spare_buffers_.begin(), spare_buffers_.end(),
      [min_capacity](const std::vector<uint8_t>& b) { return b.capacity() >= min_capacity; }));
}

void SwitchDataPlane::RemoveGroupAt(uint64_t key) {
  auto it = groups_.find(key);
  if (it == groups_.end()) return;
  Group& g = *it->second;
  // Hosts may wait for a result even where this node's slots are free (a
  // multicast from the root): every child hears that the group is gone.
  g.node->Abort(proto::AggregationStatus::kAborted);
  for (const GroupChildSpec& c : g.spec.children) {
    if (auto q = qps_.find(c.qpn); q != qps_.end()) q->second->roles.erase(key);
  }
  if (g.spec.parent_qpn) {
    if (auto q = qps_.find(*g.spec.parent_qpn); q != qps_.end()) q->second->roles.erase(key);
  }
  JobUsage& used = usage_[g.spec.job_id];
  used.groups -= std::min(used.groups, 1u);
  used.slots -= std::min(used.slots, g.spec.num_slots);
  slots_used_ -= std::min(slots_used_, g.spec.num_slots);
  const uint64_t job = g.spec.job_id;
  counters_.bad_tags_of_removed_groups.fetch_add(g.node->counters().Drops(NodeDropReason::kBadTag),
                                                 std::memory_order_relaxed);
  groups_.erase(it);
  if (usage_[job].groups == 0) {
    if (auto ud = multicast_qps_.find(job); ud != multicast_qps_.end()) {
      endpoint_.Flush();  // let a last multicast leave first
      (void)endpoint_.DestroyQp(ud->second->qpn());
      multicast_qps_.erase(ud);
    }
  }
}

absl::Status SwitchDataPlane::RemoveGroup(uint16_t tree_id, uint32_t group_id, uint32_t epoch) {
  const uint64_t key = GroupKey(tree_id, group_id);
  auto it = groups_.find(key);
  if (it == groups_.end() || (epoch != 0 && it->second->spec.epoch != epoch)) {
    return absl::NotFoundError(absl::StrFormat("switch %s: no group %d (tree %d, epoch %d)",
                                               config_.name, group_id, tree_id, epoch));
  }
  RemoveGroupAt(key);
  endpoint_.Flush();
  return absl::OkStatus();
}

void SwitchDataPlane::Send(uint32_t qpn, std::span<const uint8_t> message) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) {
    NETFOLD_LOG(kError) << "switch " << config_.name << ": send to missing QP " << qpn;
    return;
  }
  Qp& qp = *it->second;
  counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
  if (qp.job_id == 0) counters_.messages_to_switches.fetch_add(1, std::memory_order_relaxed);
  if (qp.in_process != nullptr) {
    if (InProcessLinkUsable(qp)) {
      qp.in_process->Deliver(qp.in_process_qpn, message);
      counters_.in_process_messages.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // A link fault was set on either side, or the peer's QP is gone: the
    // packets must cross the port. The peer handles its inbox before it
    // receives, so what was handed over stays ahead of what follows over RC.
    qp.in_process = nullptr;
  }
  if (qp.backlog.empty()) {
    absl::Status s = qp.rc->PostSend(message, 0);
    if (s.ok()) return;
    if (!absl::IsResourceExhausted(s)) {
      // The QP failed: its peer is gone; the manager hears of it.
      counters_.drops[static_cast<size_t>(SwitchDropReason::kQpFailed)].fetch_add(
          1, std::memory_order_relaxed);
      return;
    }
    with_backlog_.push_back(qpn);
  }
  counters_.backlogged.fetch_add(1, std::memory_order_relaxed);
  qp.backlog.emplace_back(message.begin(), message.end());
}

void SwitchDataPlane::FlushBacklogs() {
  for (size_t i = 0; i < with_backlog_.size();) {
    auto it = qps_.find(with_backlog_[i]);
    if (it == qps_.end()) {
      with_backlog_.erase(with_backlog_.begin() + static_cast<ptrdiff_t>(i));
      continue;
    }
    Qp& qp = *it->second;
    while (!qp.backlog.empty()) {
      absl::Status s = qp.rc->PostSend(qp.backlog.front(), 0);
      if (absl::IsResourceExhausted(s)) break;
      qp.backlog.pop_front();  // sent, or the QP failed (counted below)
    }
    if (qp.backlog.empty()) {
      with_backlog_.erase(with_backlog_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

void SwitchDataPlane::HandleMessage(Qp& qp, std::span<const uint8_t> message) {
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  proto::AggregationHeader h;
  std::span<const uint8_t> elements;
  const proto::AggregationParseResult r = proto::ParseAggregationMessage(message, &h, &elements);
  if (r != proto::AggregationParseResult::kOk) {
    counters_.parse_drops[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t key = GroupKey(h.tree_id, h.group_id);
  auto g = groups_.find(key);
  if (g == groups_.end()) {
    // A removed group's node tells its children it is gone (RemoveGroupAt):
    // a child switch whose own node went first has nothing left to abort,
    // and a job's orderly end is not a drop.
    if (h.type != proto::AggregationMessageType::kAbort || qp.job_id != 0) {
      counters_.drops[static_cast<size_t>(SwitchDropReason::kUnknownGroup)].fetch_add(
          1, std::memory_order_relaxed);
    }
    return;
  }
  auto role = qp.roles.find(key);
  if (role == qp.roles.end()) {
    counters_.drops[static_cast<size_t>(SwitchDropReason::kNotAMember)].fetch_add(
        1, std::memory_order_relaxed);
    return;
  }
  if (role->second >= 0) {
    g->second->node->OnChildMessage(static_cast<size_t>(role->second), h, elements, message);
  } else {
    g->second->node->OnParentMessage(h, elements, message);
  }
}

void SwitchDataPlane::CheckQpErrors() {
  for (Qp* qp : qps_in_order_) {
    const uint32_t qpn = qp->rc->qpn();
    if (qp->rc->state() == QpState::kError && !qp->failure_reported) {
      qp->failure_reported = true;
      qp->backlog.clear();
      NETFOLD_LOG(kWarning) << absl::StrFormat("switch %s: QP 0x%06x (%s) failed: %s",
                                               config_.name, qpn, qp->peer,
                                               qp->rc->error().ToString());
      failures_.push_back({qpn, qp->peer, qp->rc->error()});
    }
  }
}

void SwitchDataPlane::RunOnce(absl::Duration timeout, bool read_port) {
  node_clock_.Refresh();  // and again after a wait in Receive
  // Messages from switches of this process first: they were sent before
  // anything the same QP sends over RC later (Send).
  if (!inbox_.empty()) {
    HandleInbox();
    timeout = absl::ZeroDuration();
  }
  // The ACKs of what arrives leave with the messages it causes (Flush below).
  if (read_port) {
    endpoint_.Receive(timeout);
    node_clock_.Refresh();
  }
  for (Qp* qp : qps_in_order_) {
    transport::RecvMessage m;
    while (qp->rc->PeekRecv(&m)) {
      handling_ = qp;
      handled_taken_ = false;
      HandleMessage(*qp, m.data);
      handling_ = nullptr;
      if (!handled_taken_) qp->rc->PopRecv();
    }
    transport::SendCompletion sc;
    while (qp->rc->PollSendCompletion(&sc)) {
    }
  }
  FlushBacklogs();
  endpoint_.Flush();
  CheckQpErrors();

  std::deque<std::function<void(SwitchDataPlane&)>> commands;
  {
    absl::MutexLock lock(&commands_mu_);
    commands.swap(commands_);
  }
  for (auto& command : commands) command(*this);
  if (!commands.empty()) endpoint_.Flush();
}

void SwitchDataPlane::Post(std::function<void(SwitchDataPlane&)> command) {
  {
    absl::MutexLock lock(&commands_mu_);
    commands_.push_back(std::move(command));
  }
  Wake();  // runs at the end of the current pass, or of the next one at once
}

bool SwitchDataPlane::PostAndWait(std::function<void(SwitchDataPlane&)> command,
                                  absl::Duration timeout) {
  // Shared: the command may outlive a wait that timed out.
  auto done = std::make_shared<absl::Notification>();
  Post([done, command = std::move(command)](SwitchDataPlane& plane) {
    command(plane);
    done->Notify();
  });
  return done->WaitForNotificationWithTimeout(timeout);
}

std::vector<QpFailure> SwitchDataPlane::TakeQpFailures() {
  std::vector<QpFailure> out;
  out.swap(failures_);
  return out;
}

size_t SwitchDataPlane::num_busy_slots() const {
  size_t busy = 0;
  for (const auto& [key, g] : groups_) busy += g->node->num_busy_slots();
  return busy;
}

uint64_t SwitchDataPlane::num_bad_tags() const {
  uint64_t n = counters_.bad_tags_of_removed_groups.load(std::memory_order_relaxed);
  for (const auto& [key, g] : groups_) n += g->node->counters().Drops(NodeDropReason::kBadTag);
  return n;
}

void SwitchDataPlane::ForEachNode(
    const std::function<void(const GroupSpec&, const AggregationNode&)>& fn) const {
  for (const auto& [key, g] : groups_) fn(g->spec, *g->node);
}

void SwitchDataPlane::ForEachQp(
    const std::function<void(const std::string&, const transport::RcQueuePair&)>& fn) const {
  for (const Qp* qp : qps_in_order_) fn(qp->peer, *qp->rc);
}

uint64_t SwitchDataPlane::QpJobId(uint32_t qpn) const {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? 0 : it->second->job_id;
}

void SwitchDataPlane::SumQpCounters(transport::RcQpCounters& into) const {
  destroyed_qp_counters_.AddTo(into);
  for (const auto& [qpn, qp] : qps_) qp->rc->counters().AddTo(into);
}

}  // namespace netfold::sw
