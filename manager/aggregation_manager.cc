#include "manager/aggregation_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "manager/endpoint_address.h"
#include "manager/secrets.h"

namespace netfold::manager {
namespace {

constexpr uint32_t kProtocolVersion = control::PROTOCOL_VERSION_CURRENT;
constexpr uint32_t kDefaultPkey = 0xFFFF;  // the default partition: between switches, and
                                           // jobs that ask for it (RoCE NICs)
constexpr uint32_t kFabricPkey = kDefaultPkey;
constexpr uint32_t kMax24 = 0xFFFFFF;
constexpr size_t kJobKeyBytes = 16;
constexpr uint32_t kRocePort = 4791;
constexpr uint64_t kIdBlock = 64;  // ids reserved in the journal per counters record
constexpr uint32_t kMaxMulticastIndex = 65534;

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

std::string RanksText(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) {
    out += absl::StrFormat("%s%d", i == 0 ? "" : ",", ranks[i]);
  }
  if (ranks.size() > 16) out += absl::StrFormat(",... (%d ranks)", ranks.size());
  return out;
}

bool Ignorable(const absl::Status& s) {
  // Removing what is already gone is success for cleanup.
  return s.ok() || s.code() == absl::StatusCode::kNotFound;
}

}  // namespace

absl::Status CommandStatus(const std::string& switch_name,
                           const absl::StatusOr<control::CommandResult>& result) {
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrFormat("switch %s: %s", switch_name, result.status().message()));
  }
  if (result->code() == 0) return absl::OkStatus();
  int code = result->code();
  if (code < 0 || code > 16) code = static_cast<int>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrFormat("switch %s: %s", switch_name, result->message()));
}

// ---------------------------------------------------------------------------
// EventStream

std::optional<control::JobEvent> EventStream::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  control::JobEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool EventStream::Finished() const {
  absl::MutexLock lock(&mu_);
  return closed_ && queue_.empty();
}

void EventStream::Push(const control::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  // A watcher that never reads cannot make the manager hoard memory.
  if (queue_.size() >= 1024) queue_.pop_front();
  queue_.push_back(event);
}

void EventStream::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

// ---------------------------------------------------------------------------
// Construction, recovery

AggregationManager::AggregationManager(const Topology& topo, ManagerOptions options, Clock& clock,
                                       SwitchCommander* commander, Journal* journal)
    : topo_(&topo),
      options_(std::move(options)),
      clock_(&clock),
      commander_(commander),
      journal_(journal),
      incarnation_(RandomU64() | 1),
      alloc_(topo, PlanTrees(topo)),
      switches_(topo.num_switches()) {}

AggregationManager::~AggregationManager() { Shutdown(); }

void AggregationManager::SetWakeup(std::function<void()> wakeup) {
  absl::MutexLock lock(&mu_);
  wakeup_ = std::move(wakeup);
}

void AggregationManager::WakeUp() {
  // Called with mu_ held; the callback only signals a condition variable.
  if (wakeup_) wakeup_();
}

const Tree* AggregationManager::TreeByRoot(std::string_view root) const {
  for (const Tree& t : alloc_.trees()) {
    if (topo_->switch_at(t.root).name == root) return &t;
  }
  return nullptr;
}

absl::Status AggregationManager::Recover(const state::Snapshot& snap) {
  absl::MutexLock op(&op_mu_);
  absl::MutexLock lock(&mu_);
  if (!snap.topology_name().empty() && snap.topology_name() != topo_->name()) {
    NETFOLD_LOG(kWarning) << "state was written for topology '" << snap.topology_name()
                          << "', now running '" << topo_->name()
                          << "': objects are matched by switch and host names";
  }
  const absl::Duration now = clock_->Now();
  next_job_id_ = std::max<uint64_t>(1, snap.counters().job_id_limit());
  next_group_id_ = std::max<uint64_t>(1, snap.counters().group_id_limit());
  std::vector<state::JournalEntry> drops;
  std::set<int> holders;  // switches holding recovered state

  for (const state::JobRecord& rec : snap.jobs()) {
    Job job;
    job.id = rec.job_id();
    job.name = rec.name();
    job.key = rec.key();
    job.pkey = rec.pkey();
    job.qkey = rec.qkey();
    job.quota.set_max_groups(rec.max_groups());
    job.quota.set_num_slots(rec.num_slots());
    job.quota.set_slot_bytes(rec.slot_bytes());
    bool ok = job.key.size() == kJobKeyBytes;
    std::map<int, uint32_t> qps;
    for (const state::RankRecord& r : rec.ranks()) {
      int host = topo_->FindHost(r.host());
      if (host < 0) {
        NETFOLD_LOG(kWarning) << "recover: job " << job.id << " rank " << r.rank()
                              << " is on unknown host '" << r.host() << "'";
        ok = false;
        break;
      }
      Rank rank;
      rank.rank = r.rank();
      rank.host = r.host();
      rank.leaf = topo_->host_at(host).switch_index;
      rank.attached = r.attached();
      rank.host_endpoint.set_address(r.host_address());
      rank.host_endpoint.set_qpn(r.host_qpn());
      rank.host_endpoint.set_psn(r.host_psn());
      rank.leaf_qpn = r.leaf_qpn();
      rank.leaf_psn = r.leaf_psn();
      rank.last_seen = now;
      qps[rank.leaf] += 1;
      if (rank.attached) holders.insert(rank.leaf);
      job.ranks[rank.rank] = rank;
    }
    if (ok) {
      std::vector<std::pair<int, uint32_t>> per_leaf(qps.begin(), qps.end());
      absl::Status s = alloc_.ReserveQps(per_leaf, nullptr);
      if (!s.ok()) {
        NETFOLD_LOG(kWarning) << "recover: job " << job.id << ": " << s.message();
        ok = false;
      }
    }
    if (!ok) {
      NETFOLD_LOG(kWarning) << "recover: dropping job " << job.id;
      state::JournalEntry e;
      e.set_delete_job(job.id);
      drops.push_back(e);
      continue;
    }
    next_job_id_ = std::max(next_job_id_, job.id + 1);
    if (job.pkey != kDefaultPkey) pkeys_used_.insert(job.pkey);
    jobs_[job.id] = std::move(job);
  }

  for (const state::LinkRecord& rec : snap.links()) {
    const Tree* tree = TreeByRoot(rec.tree_root());
    int child = topo_->FindSwitch(rec.child());
    int parent = topo_->FindSwitch(rec.parent());
    if (tree == nullptr || child < 0 || parent < 0 || !tree->Contains(child) ||
        tree->parent[child] != parent || !alloc_.ReserveLink(tree->id, child).ok()) {
      NETFOLD_LOG(kWarning) << "recover: dropping link " << rec.child() << " -> " << rec.parent()
                            << " of tree " << rec.tree_root();
      state::JournalEntry e;
      *e.mutable_delete_link() = rec;
      drops.push_back(e);
      continue;
    }
    Link link;
    link.tree_id = tree->id;
    link.child = child;
    link.parent = parent;
    link.parent_qpn = rec.parent_qpn();
    link.parent_psn = rec.parent_psn();
    link.child_qpn = rec.child_qpn();
    link.child_psn = rec.child_psn();
    link.connected = true;
    links_[{tree->id, child}] = link;
    holders.insert(child);
    holders.insert(parent);
  }

  for (const state::GroupRecord& rec : snap.groups()) {
    auto job_it = jobs_.find(rec.job_id());
    const Tree* tree = TreeByRoot(rec.tree_root());
    bool ok = job_it != jobs_.end() && tree != nullptr && rec.nodes_size() > 0;
    Group g;
    g.id = rec.group_id();
    g.job_id = rec.job_id();
    g.epoch = rec.epoch();
    g.ranks.assign(rec.ranks().begin(), rec.ranks().end());
    g.delivery = static_cast<control::DeliveryMode>(rec.delivery());
    g.multicast_index = rec.multicast_index();
    g.tag = rec.tag();
    g.state = GroupState::kReady;
    if (ok) {
      g.placement.subtree.tree_id = tree->id;
      g.placement.num_slots = rec.num_slots();
      g.placement.slot_bytes = rec.slot_bytes();
      for (const state::NodeRecord& n : rec.nodes()) {
        SubtreeNode node;
        node.switch_index = topo_->FindSwitch(n.switch_name());
        node.parent = n.parent().empty() ? -1 : topo_->FindSwitch(n.parent());
        node.host_ranks.assign(n.host_ranks().begin(), n.host_ranks().end());
        for (const std::string& c : n.child_switches()) {
          node.child_switches.push_back(topo_->FindSwitch(c));
        }
        ok = ok && node.switch_index >= 0 && (n.parent().empty() || node.parent >= 0);
        for (int c : node.child_switches) ok = ok && c >= 0;
        for (uint32_t r : node.host_ranks) {
          auto rank_it = job_it->second.ranks.find(r);
          ok = ok && rank_it != job_it->second.ranks.end() && rank_it->second.attached &&
               rank_it->second.leaf == node.switch_index;
        }
        g.placement.subtree.nodes.push_back(std::move(node));
      }
    }
    if (ok) {
      Placement check = g.placement;
      std::optional<Shortfall> s = alloc_.CheckPlacement(&check, /*require_usable=*/false);
      ok = !s.has_value() && check.new_links.empty() && !multicast_used_.count(g.multicast_index);
      if (ok) ok = alloc_.Reserve(g.placement, /*require_usable=*/false).ok();
    }
    if (!ok) {
      NETFOLD_LOG(kWarning) << "recover: dropping group " << g.id << " of job " << g.job_id
                            << " (it no longer fits the topology or its links)";
      state::JournalEntry e;
      e.set_delete_group(g.id);
      drops.push_back(e);
      continue;
    }
    for (const SubtreeNode& n : g.placement.subtree.nodes) holders.insert(n.switch_index);
    next_group_id_ = std::max(next_group_id_, g.id + 1);
    multicast_used_.insert(g.multicast_index);
    job_it->second.groups.insert(g.id);
    groups_[g.id] = std::move(g);
  }

  job_id_limit_ = next_job_id_;
  group_id_limit_ = next_group_id_;
  const absl::Duration grace = std::max(options_.switch_timeout, 2 * options_.heartbeat_interval);
  for (int sw : holders) switches_[sw].grace_until = now + grace;

  for (const state::JournalEntry& e : drops) NETFOLD_RETURN_IF_ERROR(JournalLocked(e));
  if (journal_ != nullptr) NETFOLD_RETURN_IF_ERROR(journal_->WriteSnapshot(SnapshotLocked()));
  NETFOLD_LOG(kInfo) << "recovered " << jobs_.size() << " jobs, " << groups_.size() << " groups, "
                     << links_.size() << " tree links; waiting for " << holders.size()
                     << " switches to re-register";
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Durability

state::JobRecord AggregationManager::JobRecordLocked(const Job& job) const {
  state::JobRecord rec;
  rec.set_job_id(job.id);
  rec.set_name(job.name);
  rec.set_key(job.key);
  rec.set_pkey(job.pkey);
  rec.set_qkey(job.qkey);
  rec.set_max_groups(job.quota.max_groups());
  rec.set_num_slots(job.quota.num_slots());
  rec.set_slot_bytes(job.quota.slot_bytes());
  for (const auto& [id, r] : job.ranks) {
    state::RankRecord* rr = rec.add_ranks();
    rr->set_rank(r.rank);
    rr->set_host(r.host);
    rr->set_attached(r.attached);
    rr->set_host_address(r.host_endpoint.address());
    rr->set_host_qpn(r.host_endpoint.qpn());
    rr->set_host_psn(r.host_endpoint.psn());
    rr->set_leaf_qpn(r.leaf_qpn);
    rr->set_leaf_psn(r.leaf_psn);
  }
  return rec;
}

state::GroupRecord AggregationManager::GroupRecordLocked(const Group& g) const {
  state::GroupRecord rec;
  rec.set_group_id(g.id);
  rec.set_job_id(g.job_id);
  rec.set_epoch(g.epoch);
  rec.set_tree_root(topo_->switch_at(alloc_.trees()[g.placement.tree_id()].root).name);
  for (uint32_t r : g.ranks) rec.add_ranks(r);
  rec.set_num_slots(g.placement.num_slots);
  rec.set_slot_bytes(g.placement.slot_bytes);
  rec.set_delivery(static_cast<uint32_t>(g.delivery));
  rec.set_multicast_index(g.multicast_index);
  rec.set_tag(g.tag);
  for (const SubtreeNode& n : g.placement.subtree.nodes) {
    state::NodeRecord* nr = rec.add_nodes();
    nr->set_switch_name(topo_->switch_at(n.switch_index).name);
    if (n.parent >= 0) nr->set_parent(topo_->switch_at(n.parent).name);
    for (uint32_t r : n.host_ranks) nr->add_host_ranks(r);
    for (int c : n.child_switches) nr->add_child_switches(topo_->switch_at(c).name);
  }
  return rec;
}

state::LinkRecord AggregationManager::LinkRecordLocked(const Link& l) const {
  state::LinkRecord rec;
  rec.set_tree_root(topo_->switch_at(alloc_.trees()[l.tree_id].root).name);
  rec.set_child(topo_->switch_at(l.child).name);
  rec.set_parent(topo_->switch_at(l.parent).name);
  rec.set_parent_qpn(l.parent_qpn);
  rec.set_parent_psn(l.parent_psn);
  rec.set_child_qpn(l.child_qpn);
  rec.set_child_psn(l.child_psn);
  return rec;
}

state::Snapshot AggregationManager::SnapshotLocked() const {
  state::Snapshot snap;
  snap.set_topology_name(topo_->name());
  snap.mutable_counters()->set_job_id_limit(job_id_limit_);
  snap.mutable_counters()->set_group_id_limit(group_id_limit_);
  for (const auto& [id, job] : jobs_) *snap.add_jobs() = JobRecordLocked(job);
  for (const auto& [id, g] : groups_) {
    if (g.state == GroupState::kReady) *snap.add_groups() = GroupRecordLocked(g);
  }
  for (const auto& [key, l] : links_) {
    if (l.connected) *snap.add_links() = LinkRecordLocked(l);
  }
  return snap;
}

absl::Status AggregationManager::JournalLocked(const state::JournalEntry& entry) {
  if (journal_ == nullptr) return absl::OkStatus();
  absl::Status s = journal_->Append(entry);
  if (!s.ok()) {
    NETFOLD_LOG(kError) << "journal write failed: " << s.message();
    return absl::UnavailableError(
        absl::StrFormat("cannot write the manager journal: %s", s.message()));
  }
  return absl::OkStatus();
}

void AggregationManager::MaybeSnapshotLocked() {
  if (journal_ == nullptr || journal_->records_since_snapshot() < options_.snapshot_every) return;
  absl::Status s = journal_->WriteSnapshot(SnapshotLocked());
  if (!s.ok()) NETFOLD_LOG(kError) << "snapshot failed: " << s.message();
}

absl::Status AggregationManager::WriteCountersLocked() {
  state::JournalEntry e;
  e.mutable_counters()->set_job_id_limit(job_id_limit_);
  e.mutable_counters()->set_group_id_limit(group_id_limit_);
  return JournalLocked(e);
}

absl::StatusOr<uint64_t> AggregationManager::NextJobIdLocked() {
  if (next_job_id_ >= job_id_limit_) {
    job_id_limit_ = next_job_id_ + kIdBlock;
    NETFOLD_RETURN_IF_ERROR(WriteCountersLocked());
  }
  return next_job_id_++;
}

absl::StatusOr<uint64_t> AggregationManager::NextGroupIdLocked() {
  if (next_group_id_ > kMaxGroupId) {
    // The aggregation header carries 32 bits of group id: a larger id could
    // not be told apart on the wire.
    return absl::ResourceExhaustedError(absl::StrFormat(
        "group ids are exhausted: the aggregation header carries %d bits (ids 1..%d)", 32,
        kMaxGroupId));
  }
  if (next_group_id_ >= group_id_limit_) {
    group_id_limit_ = next_group_id_ + kIdBlock;
    NETFOLD_RETURN_IF_ERROR(WriteCountersLocked());
  }
  return next_group_id_++;
}

// ---------------------------------------------------------------------------
// Switches

void AggregationManager::SetSwitchStateLocked(int sw, SwitchState state,
                                              const std::string& reason) {
  Switch& s = switches_[sw];
  if (s.state != state) {
    NETFOLD_LOG(kInfo) << "switch " << topo_->switch_at(sw).name << ": state "
                       << static_cast<int>(s.state) << " -> " << static_cast<int>(state)
                       << (reason.empty() ? "" : " (") << reason << (reason.empty() ? "" : ")");
  }
  s.state = state;
  alloc_.SetSwitchUsable(sw, state == SwitchState::kUp,
                         state == SwitchState::kDead          ? "dead: " + reason
                         : state == SwitchState::kReconciling ? "reconciling after registration"
                                                              : "not registered");
}

absl::Status AggregationManager::ValidateRegistration(const control::RegisterSwitch& req) const {
  if (req.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("protocol version %d is not supported (this manager speaks %d)",
                        req.protocol_version(), kProtocolVersion));
  }
  const int sw = topo_->FindSwitch(req.name());
  if (sw < 0) {
    return absl::NotFoundError(absl::StrFormat("switch '%s' is not in topology '%s'",
                                               req.name().substr(0, 64), topo_->name()));
  }
  if (!options_.switch_secret.empty() &&
      !ConstantTimeEquals(req.secret(), options_.switch_secret)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("switch %s: wrong or missing fabric secret", req.name()));
  }
  NETFOLD_RETURN_IF_ERROR(CheckEndpointAddress(
      req.data_address(), absl::StrFormat("switch %s data_address", req.name())));
  if (!req.admin_address().empty()) {
    NETFOLD_RETURN_IF_ERROR(CheckEndpointAddress(
        req.admin_address(), absl::StrFormat("switch %s admin_address", req.name())));
  }
  const Capacity& want = topo_->switch_at(sw).capacity;
  const control::SwitchCapacity& have = req.capacity();
  struct Cmp {
    const char* what;
    uint32_t have, want;
  };
  for (Cmp c :
       {Cmp{"trees", have.max_trees(), want.trees}, Cmp{"groups", have.max_groups(), want.groups},
        Cmp{"slots", have.num_slots(), want.slots},
        Cmp{"slot_bytes", have.slot_bytes(), want.slot_bytes},
        Cmp{"qps", have.max_qps(), want.qps}}) {
    if (c.have < c.want) {
      return absl::FailedPreconditionError(
          absl::StrFormat("switch %s offers %s=%d but topology '%s' declares %d", req.name(),
                          c.what, c.have, topo_->name(), c.want));
    }
  }
  if (req.qpns_size() > 1 << 20 || req.installed_groups_size() > 1 << 20) {
    return absl::InvalidArgumentError("registration reports too much state");
  }
  return absl::OkStatus();
}

absl::StatusOr<control::RegisterReply> AggregationManager::RegisterSwitch(
    const control::RegisterSwitch& req, uint64_t session) {
  NETFOLD_RETURN_IF_ERROR(ValidateRegistration(req));
  const int sw = topo_->FindSwitch(req.name());
  absl::MutexLock lock(&mu_);
  Switch& s = switches_[sw];
  if (s.session == session) {
    return absl::FailedPreconditionError(
        absl::StrFormat("switch %s registered twice on one stream", req.name()));
  }
  if (s.session != 0) {
    NETFOLD_LOG(kInfo) << "switch " << req.name() << " registers again; replacing session "
                       << s.session;
  }
  s.session = session;
  s.incarnation = req.incarnation();
  s.data_address = req.data_address();
  s.admin_address = req.admin_address();
  s.last_heartbeat = clock_->Now();
  s.reported = control::ResourceUsage();
  s.reported_groups.clear();
  for (const control::InstalledGroup& g : req.installed_groups()) {
    s.reported_groups.emplace(g.group_id(), g.epoch());
  }
  s.reported_qpns = std::set<uint32_t>(req.qpns().begin(), req.qpns().end());
  s.death_pending = false;
  s.dead_reason.clear();
  SetSwitchStateLocked(sw, SwitchState::kReconciling, "");
  WakeUp();

  control::RegisterReply reply;
  reply.set_heartbeat_interval_ms(static_cast<uint32_t>(Ms(options_.heartbeat_interval)));
  reply.set_heartbeat_timeout_ms(static_cast<uint32_t>(Ms(options_.switch_timeout)));
  reply.set_manager_incarnation(incarnation_);
  return reply;
}

void AggregationManager::SwitchHeartbeat(std::string_view name, uint64_t session,
                                         const control::SwitchHeartbeat& hb) {
  const int sw = topo_->FindSwitch(name);
  if (sw < 0) return;
  absl::MutexLock lock(&mu_);
  Switch& s = switches_[sw];
  if (s.session != session) return;
  s.last_heartbeat = clock_->Now();
  s.reported = hb.usage();
}

void AggregationManager::SwitchDisconnected(std::string_view name, uint64_t session) {
  const int sw = topo_->FindSwitch(name);
  if (sw < 0) return;
  absl::MutexLock lock(&mu_);
  Switch& s = switches_[sw];
  if (s.session != session) return;
  s.session = 0;
  if (s.state == SwitchState::kUp || s.state == SwitchState::kReconciling) {
    s.death_pending = true;
    s.dead_reason = "lost its control connection";
    WakeUp();
  }
}

void AggregationManager::ReportQpError(std::string_view name, uint64_t session,
                                       const control::QpErrorReport& report) {
  const int sw = topo_->FindSwitch(name);
  if (sw < 0) return;
  absl::MutexLock lock(&mu_);
  if (switches_[sw].session != session) return;
  if (qp_failures_.size() < 4096) {
    qp_failures_.push_back({sw, report.qpn(), report.reason().substr(0, 200)});
  }
  WakeUp();
}

// ---------------------------------------------------------------------------
// Events

void AggregationManager::PublishLocked(Job& job, control::JobEvent event,
                                       std::vector<uint32_t> ranks) {
  event.set_sequence(job.next_event_sequence++);
  event.set_job_id(job.id);
  event.set_manager_incarnation(incarnation_);
  for (const auto& [rank, stream] : job.watchers) {
    if (ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      stream->Push(event);
    }
  }
  job.events.emplace_back(std::move(event), std::move(ranks));
  while (job.events.size() > options_.events_per_job) job.events.pop_front();
}

// ---------------------------------------------------------------------------
// Jobs

absl::StatusOr<AggregationManager::Job*> AggregationManager::AuthJobLocked(
    const control::JobCredentials& creds) {
  if (creds.job_key().empty()) {
    return absl::UnauthenticatedError("missing job key (JobCredentials.job_key)");
  }
  auto it = jobs_.find(creds.job_id());
  // Same answer for an unknown job and a wrong key: nothing to probe.
  if (it == jobs_.end() || !ConstantTimeEquals(creds.job_key(), it->second.key)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("job %d: unknown job or wrong job key", creds.job_id()));
  }
  return &it->second;
}

absl::Status AggregationManager::CheckJobRequestLocked(
    const control::CreateJobRequest& req, control::JobQuota* quota,
    std::vector<std::pair<int, uint32_t>>* qps_per_leaf, std::vector<Shortfall>* shortfalls) const {
  if (req.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("protocol version %d is not supported (this manager speaks %d)",
                        req.protocol_version(), kProtocolVersion));
  }
  if (!req.name().empty() && !IsValidName(req.name())) {
    return absl::InvalidArgumentError("job name must be 1..64 of [A-Za-z0-9._-]");
  }
  const JobLimits& lim = options_.limits;
  auto quota_short = [&](std::string reason, uint64_t needed, uint64_t limit) {
    Shortfall s;
    s.resource = "quota";
    s.needed = needed;
    s.free = limit;
    s.capacity = limit;
    s.reason = std::move(reason);
    shortfalls->push_back(std::move(s));
  };
  const int n = req.ranks_size();
  if (n == 0) return absl::InvalidArgumentError("a job needs at least one rank");
  if (static_cast<uint32_t>(n) > lim.max_ranks_per_job) {
    quota_short(
        absl::StrFormat("%d ranks exceed the per-job limit of %d", n, lim.max_ranks_per_job), n,
        lim.max_ranks_per_job);
    return absl::OkStatus();
  }
  std::vector<bool> seen(n, false);
  std::map<int, uint32_t> per_leaf;
  std::map<int, uint32_t> first_rank_on;
  for (const control::RankSpec& r : req.ranks()) {
    if (r.rank() >= static_cast<uint32_t>(n)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d is out of range: a job of %d ranks has ranks 0..%d", r.rank(), n, n - 1));
    }
    if (seen[r.rank()]) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is listed twice", r.rank()));
    }
    seen[r.rank()] = true;
    int host = topo_->FindHost(r.host());
    if (host < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d: host '%s' is not in topology '%s'", r.rank(),
                          r.host().substr(0, 64), topo_->name()));
    }
    int leaf = topo_->host_at(host).switch_index;
    per_leaf[leaf] += 1;
    first_rank_on.emplace(leaf, r.rank());
  }

  *quota = req.quota();
  if (quota->max_groups() == 0) quota->set_max_groups(lim.default_groups_per_job);
  if (quota->num_slots() == 0) quota->set_num_slots(lim.default_slots_per_group);
  if (quota->slot_bytes() == 0) quota->set_slot_bytes(lim.default_slot_bytes);
  if (quota->max_groups() > lim.max_groups_per_job) {
    quota_short(absl::StrFormat("max_groups %d exceeds the per-job limit of %d",
                                quota->max_groups(), lim.max_groups_per_job),
                quota->max_groups(), lim.max_groups_per_job);
  }
  if (quota->num_slots() > lim.max_slots_per_group) {
    quota_short(absl::StrFormat("num_slots %d exceeds the per-group limit of %d",
                                quota->num_slots(), lim.max_slots_per_group),
                quota->num_slots(), lim.max_slots_per_group);
  }
  if (quota->slot_bytes() > lim.max_slot_bytes) {
    quota_short(absl::StrFormat("slot_bytes %d exceeds the limit of %d", quota->slot_bytes(),
                                lim.max_slot_bytes),
                quota->slot_bytes(), lim.max_slot_bytes);
  }
  if (jobs_.size() >= lim.max_jobs) {
    quota_short(absl::StrFormat("the manager already runs %d jobs (its limit)", jobs_.size()), 1,
                0);
  }

  for (const auto& [leaf_index, count] : per_leaf) {
    // A copy: clang 14 cannot capture a structured binding in a lambda.
    const auto leaf = leaf_index;
    const SwitchSpec& spec = topo_->switch_at(leaf);
    auto add = [&](std::string resource, uint64_t needed, uint64_t free, uint64_t cap,
                   std::string reason) {
      Shortfall s;
      s.switch_index = leaf;
      s.switch_name = spec.name;
      s.resource = std::move(resource);
      s.needed = needed;
      s.free = free;
      s.capacity = cap;
      s.reason = std::move(reason);
      shortfalls->push_back(std::move(s));
    };
    if (!alloc_.SwitchUsable(leaf)) {
      const Switch& s = switches_[leaf];
      add("switch", 1, 0, 1,
          absl::StrFormat("switch %s (leaf of rank %d) is unusable: %s", spec.name,
                          first_rank_on[leaf],
                          s.state == SwitchState::kDead          ? "dead: " + s.dead_reason
                          : s.state == SwitchState::kReconciling ? std::string("reconciling")
                                                                 : std::string("not registered")));
      continue;
    }
    if (quota->slot_bytes() > spec.capacity.slot_bytes) {
      add("slot_bytes", quota->slot_bytes(), spec.capacity.slot_bytes, spec.capacity.slot_bytes,
          absl::StrFormat("switch %s holds at most %d bytes per slot, the job asks %d", spec.name,
                          spec.capacity.slot_bytes, quota->slot_bytes()));
    }
    if (quota->num_slots() > spec.capacity.slots) {
      add("slots", quota->num_slots(), spec.capacity.slots, spec.capacity.slots,
          absl::StrFormat("switch %s has %d slots in all, the job asks %d per group", spec.name,
                          spec.capacity.slots, quota->num_slots()));
    }
    const uint32_t used = alloc_.used(leaf).qps;
    const uint32_t free = spec.capacity.qps - std::min(spec.capacity.qps, used);
    if (count > free) {
      add("qps", count, free, spec.capacity.qps,
          absl::StrFormat("switch %s has %d of %d QPs free, needs %d for this job's ranks",
                          spec.name, free, spec.capacity.qps, count));
    }
    qps_per_leaf->emplace_back(leaf, count);
  }
  return absl::OkStatus();
}

absl::StatusOr<control::CreateJobResponse> AggregationManager::CreateJob(
    const control::CreateJobRequest& req) {
  absl::MutexLock op(&op_mu_);
  absl::MutexLock lock(&mu_);
  control::JobQuota quota;
  std::vector<std::pair<int, uint32_t>> qps;
  std::vector<Shortfall> why;
  NETFOLD_RETURN_IF_ERROR(CheckJobRequestLocked(req, &quota, &qps, &why));
  if (!why.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("job not admitted: %s", JoinShortfalls(why)));
  }
  NETFOLD_RETURN_IF_ERROR(alloc_.ReserveQps(qps, nullptr));
  absl::StatusOr<uint64_t> id = NextJobIdLocked();
  if (!id.ok()) {
    alloc_.ReleaseQps(qps);
    return id.status();
  }
  Job job;
  job.id = *id;
  job.name = req.name().empty() ? absl::StrFormat("job-%d", job.id) : req.name();
  job.key = RandomBytes(kJobKeyBytes);
  if (req.default_partition()) {
    job.pkey = kDefaultPkey;  // shared by every such job; never in pkeys_used_
  } else {
    do {
      job.pkey = 0x8000u | static_cast<uint32_t>(RandomU64() & 0x7fff);
    } while (job.pkey == 0x8000u || job.pkey == kDefaultPkey || pkeys_used_.count(job.pkey) > 0);
  }
  job.qkey = static_cast<uint32_t>(RandomU64() & 0x7fffffffu) | 1u;  // high bit: privileged
  job.quota = quota;
  const absl::Duration now = clock_->Now();
  for (const control::RankSpec& r : req.ranks()) {
    Rank rank;
    rank.rank = r.rank();
    rank.host = r.host();
    rank.leaf = topo_->host_at(topo_->FindHost(r.host())).switch_index;
    rank.last_seen = now;
    job.ranks[rank.rank] = rank;
  }
  state::JournalEntry e;
  *e.mutable_put_job() = JobRecordLocked(job);
  if (absl::Status s = JournalLocked(e); !s.ok()) {
    alloc_.ReleaseQps(qps);
    return s;
  }
  if (job.pkey != kDefaultPkey) pkeys_used_.insert(job.pkey);
  control::CreateJobResponse resp;
  resp.set_job_id(job.id);
  resp.set_job_key(job.key);
  resp.set_pkey(job.pkey);
  resp.set_qkey(job.qkey);
  *resp.mutable_quota() = quota;
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(Ms(options_.heartbeat_interval)));
  resp.set_heartbeat_timeout_ms(static_cast<uint32_t>(Ms(options_.host_timeout)));
  NETFOLD_LOG(kInfo) << "job " << job.id << " (" << job.name << "): " << job.ranks.size()
                     << " ranks, quota " << quota.max_groups() << " groups x " << quota.num_slots()
                     << " slots x " << quota.slot_bytes() << " B";
  jobs_[job.id] = std::move(job);
  MaybeSnapshotLocked();
  return resp;
}

absl::Status AggregationManager::DestroyJob(const control::DestroyJobRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
    DestroyJobLocked(*job, "the job was destroyed", &out);
  }
  SendBestEffort(std::move(out), "destroy job");
  return absl::OkStatus();
}

void AggregationManager::DestroyJobLocked(Job& job, const std::string& reason, Outbox* out) {
  const uint64_t id = job.id;
  std::vector<uint64_t> groups(job.groups.begin(), job.groups.end());
  for (uint64_t g : groups) {
    ReleaseGroupLocked(groups_.at(g), out);
    EraseGroupLocked(g, "", /*notify=*/false);
  }
  std::map<int, uint32_t> qps;
  for (auto& [r, rank] : job.ranks) {
    qps[rank.leaf] += 1;
    const SwitchState st = switches_[rank.leaf].state;
    if (rank.attached && (st == SwitchState::kUp || st == SwitchState::kReconciling)) {
      control::ManagerMessage m;
      m.mutable_destroy_qp()->set_qpn(rank.leaf_qpn);
      out->Add(topo_->switch_at(rank.leaf).name, std::move(m));
    }
  }
  alloc_.ReleaseQps(std::vector<std::pair<int, uint32_t>>(qps.begin(), qps.end()));
  if (job.pkey != kDefaultPkey) pkeys_used_.erase(job.pkey);
  control::JobEvent ev;
  ev.set_kind(control::JobEvent::JOB_DESTROYED);
  ev.set_reason(reason);
  PublishLocked(job, ev, {});
  for (auto& [r, w] : job.watchers) w->Close();
  jobs_.erase(id);  // `job` is gone from here on
  state::JournalEntry e;
  e.set_delete_job(id);
  absl::Status s = JournalLocked(e);
  if (!s.ok()) NETFOLD_LOG(kError) << "job " << id << " destroyed but not journaled";
  NETFOLD_LOG(kInfo) << "job " << id << " destroyed: " << reason;
  MaybeSnapshotLocked();
}

absl::StatusOr<control::AttachResponse> AggregationManager::Attach(
    const control::AttachRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  std::vector<uint64_t> revoked;
  std::string leaf_name;
  std::string reason;
  control::ManagerMessage create;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
    auto it = job->ranks.find(req.rank());
    if (it == job->ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
    }
    Rank& rank = it->second;
    const control::Endpoint& ep = req.endpoint();
    NETFOLD_RETURN_IF_ERROR(CheckEndpointAddress(
        ep.address(), absl::StrFormat("rank %d endpoint address", req.rank())));
    if (ep.qpn() < 2 || ep.qpn() > kMax24) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d: QPN %d is out of range (2..0xffffff)", req.rank(), ep.qpn()));
    }
    if (ep.psn() > kMax24) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d: PSN %d does not fit 24 bits", req.rank(), ep.psn()));
    }
    leaf_name = topo_->switch_at(rank.leaf).name;
    if (switches_[rank.leaf].state != SwitchState::kUp) {
      return absl::UnavailableError(absl::StrFormat(
          "leaf switch %s of rank %d is not up (%s)", leaf_name, req.rank(),
          switches_[rank.leaf].state == SwitchState::kDead ? switches_[rank.leaf].dead_reason
                                                           : "not registered or reconciling"));
    }
    if (rank.attached) {
      reason = absl::StrFormat("rank %d of job %d attached again", rank.rank, job->id);
      revoked = DetachRanksLocked(*job, {rank.rank}, reason, /*destroy_qp=*/true, &out);
    }
    create.mutable_create_qp()->mutable_peer()->mutable_host()->set_job_id(job->id);
    create.mutable_create_qp()->mutable_peer()->mutable_host()->set_rank(rank.rank);
    *create.mutable_create_qp()->mutable_remote() = ep;
    create.mutable_create_qp()->set_pkey(job->pkey);
  }
  SendBestEffort(std::move(out), "detach before re-attach");
  FailGroups(revoked, reason);

  std::vector<absl::StatusOr<control::CommandResult>> results =
      commander_->Execute({{leaf_name, create}}, options_.command_timeout);
  absl::Status s = CommandStatus(leaf_name, results[0]);
  if (!s.ok()) {
    return absl::Status(s.code() == absl::StatusCode::kResourceExhausted
                            ? s.code()
                            : absl::StatusCode::kUnavailable,
                        absl::StrFormat("rank %d could not attach: %s", req.rank(), s.message()));
  }
  const control::QpCreated qp = results[0]->qp();
  control::AttachResponse resp;
  absl::Status journaled;
  {
    absl::MutexLock lock(&mu_);
    Job& job = jobs_.at(req.job().job_id());  // op_mu_ held: the job is still there
    Rank& rank = job.ranks.at(req.rank());
    rank.attached = true;
    rank.host_endpoint = req.endpoint();
    rank.leaf_qpn = qp.qpn();
    rank.leaf_psn = qp.psn();
    rank.last_seen = clock_->Now();
    state::JournalEntry e;
    *e.mutable_put_job() = JobRecordLocked(job);
    journaled = JournalLocked(e);
    if (journaled.ok()) {
      resp.set_leaf_switch(leaf_name);
      resp.mutable_switch_endpoint()->set_address(switches_[rank.leaf].data_address);
      resp.mutable_switch_endpoint()->set_qpn(qp.qpn());
      resp.mutable_switch_endpoint()->set_psn(qp.psn());
      resp.set_pkey(job.pkey);
      resp.set_qkey(job.qkey);
      MaybeSnapshotLocked();
    } else {
      rank.attached = false;
      rank.leaf_qpn = 0;
      rank.leaf_psn = 0;
    }
  }
  if (!journaled.ok()) {
    Outbox undo;
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(qp.qpn());
    undo.Add(leaf_name, std::move(m));
    SendBestEffort(std::move(undo), "undo attach");
    return journaled;
  }
  return resp;
}

absl::StatusOr<control::HostHeartbeatResponse> AggregationManager::HostHeartbeat(
    const control::HostHeartbeatRequest& req) {
  absl::MutexLock lock(&mu_);
  NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
  auto it = job->ranks.find(req.rank());
  if (it == job->ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
  }
  it->second.last_seen = clock_->Now();
  control::HostHeartbeatResponse resp;
  resp.set_manager_incarnation(incarnation_);
  return resp;
}

absl::StatusOr<std::shared_ptr<EventStream>> AggregationManager::WatchEvents(
    const control::WatchEventsRequest& req) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("the manager is shutting down");
  NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
  if (!job->ranks.count(req.rank())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
  }
  auto stream = std::make_shared<EventStream>(job->id, req.rank());
  control::JobEvent hello;
  hello.set_kind(control::JobEvent::WATCH_STARTED);
  hello.set_job_id(job->id);
  hello.set_manager_incarnation(incarnation_);
  hello.set_reason(absl::StrFormat("watching job %d rank %d", job->id, req.rank()));
  stream->Push(hello);
  if (req.after_sequence() > 0) {
    for (const auto& [ev, ranks] : job->events) {
      if (ev.sequence() <= req.after_sequence()) continue;
      if (ranks.empty() || std::find(ranks.begin(), ranks.end(), req.rank()) != ranks.end()) {
        stream->Push(ev);
      }
    }
  }
  auto& slot = job->watchers[req.rank()];
  if (slot != nullptr) slot->Close();
  slot = stream;
  return stream;
}

// ---------------------------------------------------------------------------
// Groups

absl::Status AggregationManager::CheckGroupRequestLocked(const Job& job,
                                                         const std::vector<uint32_t>& ranks,
                                                         uint32_t num_slots, uint32_t slot_bytes,
                                                         GroupRequest* out,
                                                         std::vector<Shortfall>* shortfalls) const {
  if (ranks.empty()) return absl::InvalidArgumentError("a group needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!job.ranks.count(ranks[i])) {
      return absl::InvalidArgumentError(absl::StrFormat("job %d has no rank %d", job.id, ranks[i]));
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is listed twice", ranks[i]));
    }
  }
  auto quota_short = [&](std::string reason, uint64_t needed, uint64_t limit) {
    Shortfall s;
    s.resource = "quota";
    s.needed = needed;
    s.free = limit;
    s.capacity = limit;
    s.reason = std::move(reason);
    shortfalls->push_back(std::move(s));
  };
  out->num_slots = num_slots == 0 ? job.quota.num_slots() : num_slots;
  out->slot_bytes = slot_bytes == 0 ? job.quota.slot_bytes() : slot_bytes;
  if (out->num_slots > job.quota.num_slots()) {
    quota_short(absl::StrFormat("K=%d slots exceeds job %d's quota of %d per group", out->num_slots,
                                job.id, job.quota.num_slots()),
                out->num_slots, job.quota.num_slots());
  }
  if (out->slot_bytes > job.quota.slot_bytes()) {
    quota_short(absl::StrFormat("P=%d bytes exceeds job %d's quota of %d per slot", out->slot_bytes,
                                job.id, job.quota.slot_bytes()),
                out->slot_bytes, job.quota.slot_bytes());
  }
  if (job.groups.size() >= job.quota.max_groups()) {
    quota_short(absl::StrFormat("job %d has %d of %d groups (its quota)", job.id, job.groups.size(),
                                job.quota.max_groups()),
                1, 0);
  }
  out->members.clear();
  for (uint32_t r : ranks) {
    const Rank& rank = job.ranks.at(r);
    if (!rank.attached) {
      return absl::FailedPreconditionError(
          absl::StrFormat("rank %d of job %d is not attached (call Attach first)", r, job.id));
    }
    out->members.emplace_back(r, rank.leaf);
  }
  return absl::OkStatus();
}

std::string AggregationManager::MulticastAddress(uint32_t index) const {
  return absl::StrFormat("%s.%d.%d:%d", options_.multicast_prefix, index >> 8, index & 0xff,
                         kRocePort);
}

uint32_t AggregationManager::AllocateMulticastLocked() {
  for (uint32_t i = 1; i <= kMaxMulticastIndex; ++i) {
    if ((i & 0xff) == 0 || (i & 0xff) == 0xff) continue;
    if (!multicast_used_.count(i)) {
      multicast_used_.insert(i);
      return i;
    }
  }
  return 0;
}

control::GroupInfo AggregationManager::GroupInfoLocked(const Group& g) const {
  control::GroupInfo info;
  info.set_group_id(g.id);
  info.set_tree_id(g.placement.tree_id());
  info.set_epoch(g.epoch);
  info.set_num_slots(g.placement.num_slots);
  info.set_slot_bytes(g.placement.slot_bytes);
  info.set_delivery(g.delivery);
  info.set_multicast_address(MulticastAddress(g.multicast_index));
  info.set_root_switch(topo_->switch_at(g.placement.subtree.root()).name);
  info.set_tag(g.tag);
  for (uint32_t r : g.ranks) {
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      auto pos = std::find(n.host_ranks.begin(), n.host_ranks.end(), r);
      if (pos == n.host_ranks.end()) continue;
      control::GroupMember* m = info.add_members();
      m->set_rank(r);
      m->set_leaf_switch(topo_->switch_at(n.switch_index).name);
      m->set_child_index(static_cast<uint32_t>(pos - n.host_ranks.begin()));
    }
  }
  const std::vector<SubtreeNode>& nodes = g.placement.subtree.nodes;
  for (const SubtreeNode& n : nodes) {
    info.add_switches(topo_->switch_at(n.switch_index).name);
    control::GroupNode* node = info.add_nodes();
    node->set_name(topo_->switch_at(n.switch_index).name);
    // The reduction order: host ranks, then child switches.
    for (uint32_t r : n.host_ranks) node->add_children(-1 - static_cast<int32_t>(r));
    for (int child : n.child_switches) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].switch_index == child) node->add_children(static_cast<int32_t>(i));
      }
    }
  }
  return info;
}

namespace {

// The member ranks at and below `switch_index` in `subtree`, ascending.
std::vector<uint32_t> SubtreeRanks(const Subtree& subtree, int switch_index) {
  std::vector<uint32_t> out;
  std::vector<int> todo = {switch_index};
  while (!todo.empty()) {
    const SubtreeNode* n = subtree.Find(todo.back());
    todo.pop_back();
    if (n == nullptr) continue;
    out.insert(out.end(), n->host_ranks.begin(), n->host_ranks.end());
    todo.insert(todo.end(), n->child_switches.begin(), n->child_switches.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

control::ManagerMessage AggregationManager::InstallMessageLocked(const Group& g,
                                                                 const SubtreeNode& node) const {
  const Job& job = jobs_.at(g.job_id);
  const uint32_t tree = g.placement.tree_id();
  control::ManagerMessage msg;
  control::InstallGroup* ig = msg.mutable_install_group();
  ig->set_tree_id(tree);
  ig->set_group_id(g.id);
  ig->set_epoch(g.epoch);
  ig->set_job_id(g.job_id);
  ig->set_pkey(job.pkey);
  ig->set_qkey(job.qkey);
  ig->set_num_slots(g.placement.num_slots);
  ig->set_slot_bytes(g.placement.slot_bytes);
  ig->set_delivery(g.delivery);
  ig->set_multicast_address(MulticastAddress(g.multicast_index));
  for (uint32_t r : node.host_ranks) {
    control::GroupChild* c = ig->add_children();
    c->set_rank(r);
    c->add_subtree_ranks(r);
    c->set_qpn(job.ranks.at(r).leaf_qpn);
  }
  for (int child : node.child_switches) {
    control::GroupChild* c = ig->add_children();
    c->set_switch_name(topo_->switch_at(child).name);
    for (uint32_t r : SubtreeRanks(g.placement.subtree, child)) c->add_subtree_ranks(r);
    auto it = links_.find({tree, child});
    c->set_qpn(it == links_.end() ? 0 : it->second.parent_qpn);
  }
  ig->set_is_root(node.parent < 0);
  if (node.parent >= 0) {
    auto it = links_.find({tree, node.switch_index});
    ig->set_parent_qpn(it == links_.end() ? 0 : it->second.child_qpn);
  }
  for (uint32_t r : g.ranks) ig->add_member_ranks(r);
  return msg;
}

absl::Status AggregationManager::ConnectLinks(uint32_t tree_id, const std::vector<int>& children) {
  struct Pending {
    int child, parent;
    std::string child_name, parent_name, child_addr, parent_addr;
    control::QpCreated pqp, cqp;
    bool parent_created = false, child_created = false;
    absl::Status status;
  };
  std::vector<Pending> links;
  {
    absl::MutexLock lock(&mu_);
    const Tree& tree = alloc_.trees()[tree_id];
    for (int child : children) {
      Pending p;
      p.child = child;
      p.parent = tree.parent[child];
      p.child_name = topo_->switch_at(child).name;
      p.parent_name = topo_->switch_at(p.parent).name;
      p.child_addr = switches_[child].data_address;
      p.parent_addr = switches_[p.parent].data_address;
      Link link;
      link.tree_id = tree_id;
      link.child = child;
      link.parent = p.parent;
      links_[{tree_id, child}] = link;
      links.push_back(std::move(p));
    }
  }
  auto run = [&](auto make, auto on_ok) {
    std::vector<SwitchCommand> cmds;
    std::vector<size_t> which;
    for (size_t i = 0; i < links.size(); ++i) {
      if (!links[i].status.ok()) continue;
      cmds.push_back(make(links[i]));
      which.push_back(i);
    }
    if (cmds.empty()) return;
    auto results = commander_->Execute(cmds, options_.command_timeout);
    for (size_t j = 0; j < which.size(); ++j) {
      Pending& p = links[which[j]];
      absl::Status s = CommandStatus(cmds[j].switch_name, results[j]);
      if (s.ok()) {
        on_ok(p, *results[j]);
      } else {
        p.status = s;
      }
    }
  };
  // 1. The parent's QP, waiting for its peer.
  run(
      [&](const Pending& p) {
        control::ManagerMessage m;
        control::SwitchPeer* peer = m.mutable_create_qp()->mutable_peer()->mutable_switch_peer();
        peer->set_name(p.child_name);
        peer->set_tree_id(tree_id);
        m.mutable_create_qp()->set_pkey(kFabricPkey);
        return SwitchCommand{p.parent_name, m};
      },
      [](Pending& p, const control::CommandResult& r) {
        p.pqp = r.qp();
        p.parent_created = true;
      });
  // 2. The child's QP, straight to RTS toward the parent's.
  run(
      [&](const Pending& p) {
        control::ManagerMessage m;
        control::SwitchPeer* peer = m.mutable_create_qp()->mutable_peer()->mutable_switch_peer();
        peer->set_name(p.parent_name);
        peer->set_tree_id(tree_id);
        control::Endpoint* remote = m.mutable_create_qp()->mutable_remote();
        remote->set_address(p.parent_addr);
        remote->set_qpn(p.pqp.qpn());
        remote->set_psn(p.pqp.psn());
        m.mutable_create_qp()->set_pkey(kFabricPkey);
        return SwitchCommand{p.child_name, m};
      },
      [](Pending& p, const control::CommandResult& r) {
        p.cqp = r.qp();
        p.child_created = true;
      });
  // 3. The parent's QP to RTS toward the child's.
  run(
      [&](const Pending& p) {
        control::ManagerMessage m;
        m.mutable_connect_qp()->set_qpn(p.pqp.qpn());
        control::Endpoint* remote = m.mutable_connect_qp()->mutable_remote();
        remote->set_address(p.child_addr);
        remote->set_qpn(p.cqp.qpn());
        remote->set_psn(p.cqp.psn());
        return SwitchCommand{p.parent_name, m};
      },
      [](Pending&, const control::CommandResult&) {});

  Outbox cleanup;
  absl::Status first_error;
  {
    absl::MutexLock lock(&mu_);
    for (Pending& p : links) {
      const LinkKey key{tree_id, p.child};
      if (p.status.ok()) {
        Link& link = links_[key];
        link.parent_qpn = p.pqp.qpn();
        link.parent_psn = p.pqp.psn();
        link.child_qpn = p.cqp.qpn();
        link.child_psn = p.cqp.psn();
        link.connected = true;
        state::JournalEntry e;
        *e.mutable_put_link() = LinkRecordLocked(link);
        // A link that is not journaled is only a leak on the switch until
        // the next reconcile, so a journal error does not fail it.
        (void)JournalLocked(e);
        continue;
      }
      if (first_error.ok()) {
        first_error =
            absl::Status(p.status.code(),
                         absl::StrFormat("tree %d link %s -> %s could not be connected: %s",
                                         tree_id, p.child_name, p.parent_name, p.status.message()));
      }
      links_.erase(key);
      alloc_.ReleaseLink(tree_id, p.child);
      if (p.parent_created) {
        control::ManagerMessage m;
        m.mutable_destroy_qp()->set_qpn(p.pqp.qpn());
        cleanup.Add(p.parent_name, std::move(m));
      }
      if (p.child_created) {
        control::ManagerMessage m;
        m.mutable_destroy_qp()->set_qpn(p.cqp.qpn());
        cleanup.Add(p.child_name, std::move(m));
      }
    }
  }
  SendBestEffort(std::move(cleanup), "undo a half-connected link");
  return first_error;
}

absl::Status AggregationManager::BringUpGroup(uint64_t group_id) {
  uint32_t tree_id;
  std::vector<int> new_links;
  {
    absl::MutexLock lock(&mu_);
    Group& g = groups_.at(group_id);
    tree_id = g.placement.tree_id();
    new_links = g.placement.new_links;
  }
  if (!new_links.empty()) NETFOLD_RETURN_IF_ERROR(ConnectLinks(tree_id, new_links));
  std::vector<SwitchCommand> installs;
  {
    absl::MutexLock lock(&mu_);
    Group& g = groups_.at(group_id);
    g.placement.new_links.clear();
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      installs.push_back({topo_->switch_at(n.switch_index).name, InstallMessageLocked(g, n)});
    }
  }
  auto results = commander_->Execute(installs, options_.command_timeout);
  for (size_t i = 0; i < installs.size(); ++i) {
    absl::Status s = CommandStatus(installs[i].switch_name, results[i]);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrFormat("group %d was not confirmed: %s", group_id, s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  Group& g = groups_.at(group_id);
  state::JournalEntry e;
  *e.mutable_put_group() = GroupRecordLocked(g);
  NETFOLD_RETURN_IF_ERROR(JournalLocked(e));
  g.state = GroupState::kReady;
  return absl::OkStatus();
}

void AggregationManager::ReleaseGroupLocked(Group& g, Outbox* out) {
  alloc_.Release(g.placement);
  for (const SubtreeNode& n : g.placement.subtree.nodes) {
    const SwitchState st = switches_[n.switch_index].state;
    if (st != SwitchState::kUp && st != SwitchState::kReconciling) continue;
    control::ManagerMessage m;
    m.mutable_remove_group()->set_group_id(g.id);
    m.mutable_remove_group()->set_epoch(g.epoch);
    out->Add(topo_->switch_at(n.switch_index).name, std::move(m));
  }
}

void AggregationManager::EraseGroupLocked(uint64_t group_id, const std::string& reason,
                                          bool notify) {
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return;
  Group g = std::move(it->second);
  groups_.erase(it);
  multicast_used_.erase(g.multicast_index);
  state::JournalEntry e;
  e.set_delete_group(group_id);
  if (!JournalLocked(e).ok()) NETFOLD_LOG(kError) << "group " << group_id << " not journaled";
  auto job_it = jobs_.find(g.job_id);
  if (job_it == jobs_.end()) return;
  job_it->second.groups.erase(group_id);
  if (notify) {
    NETFOLD_LOG(kWarning) << "group " << group_id << " of job " << g.job_id
                          << " revoked: " << reason;
    control::JobEvent ev;
    ev.set_kind(control::JobEvent::GROUP_REVOKED);
    ev.set_group_id(group_id);
    ev.set_reason(reason);
    PublishLocked(job_it->second, ev, g.ranks);
  }
}

absl::StatusOr<control::CreateGroupResponse> AggregationManager::CreateGroup(
    const control::CreateGroupRequest& req) {
  absl::MutexLock op(&op_mu_);
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
    std::vector<uint32_t> ranks(req.ranks().begin(), req.ranks().end());
    std::sort(ranks.begin(), ranks.end());
    if (req.tag().size() > 128) return absl::InvalidArgumentError("tag is longer than 128 bytes");
    if (!req.tag().empty()) {
      for (uint64_t gid : job->groups) {
        const Group& g = groups_.at(gid);
        if (g.tag != req.tag()) continue;
        if (g.ranks != ranks) {
          return absl::AlreadyExistsError(
              absl::StrFormat("tag '%s' already names group %d of job %d, with other ranks",
                              req.tag(), gid, job->id));
        }
        if (g.state != GroupState::kReady) {
          return absl::UnavailableError(absl::StrFormat("group %d is being set up", gid));
        }
        control::CreateGroupResponse resp;
        *resp.mutable_group() = GroupInfoLocked(g);
        return resp;
      }
    }
    if (req.delivery() != control::DELIVERY_MODE_UNSPECIFIED &&
        req.delivery() != control::DELIVERY_MULTICAST &&
        req.delivery() != control::DELIVERY_RC_DOWN) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown delivery mode %d", req.delivery()));
    }
    GroupRequest greq;
    std::vector<Shortfall> why;
    NETFOLD_RETURN_IF_ERROR(
        CheckGroupRequestLocked(*job, ranks, req.num_slots(), req.slot_bytes(), &greq, &why));
    if (!why.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("group not created: %s", JoinShortfalls(why)));
    }
    NETFOLD_ASSIGN_OR_RETURN(Placement placement, alloc_.PlanGroup(greq, nullptr));
    NETFOLD_RETURN_IF_ERROR(alloc_.Reserve(placement));
    absl::StatusOr<uint64_t> gid = NextGroupIdLocked();
    uint32_t mcast = gid.ok() ? AllocateMulticastLocked() : 0;
    if (!gid.ok() || mcast == 0) {
      alloc_.Release(placement);
      return gid.ok() ? absl::ResourceExhaustedError("no free multicast address for the group")
                      : gid.status();
    }
    id = *gid;
    Group g;
    g.id = id;
    g.job_id = job->id;
    g.ranks = ranks;
    g.placement = std::move(placement);
    g.delivery = req.delivery() == control::DELIVERY_RC_DOWN ? control::DELIVERY_RC_DOWN
                                                             : control::DELIVERY_MULTICAST;
    g.multicast_index = mcast;
    g.tag = req.tag();
    groups_[id] = std::move(g);
    job->groups.insert(id);
  }
  absl::Status s = BringUpGroup(id);
  Outbox out;
  control::CreateGroupResponse resp;
  {
    absl::MutexLock lock(&mu_);
    Group& g = groups_.at(id);
    if (s.ok()) {
      *resp.mutable_group() = GroupInfoLocked(g);
      NETFOLD_LOG(kInfo) << "group " << id << " of job " << g.job_id << ": ranks "
                         << RanksText(g.ranks) << " on tree " << g.placement.tree_id() << ", root "
                         << resp.group().root_switch();
      MaybeSnapshotLocked();
    } else {
      ReleaseGroupLocked(g, &out);
      EraseGroupLocked(id, "", /*notify=*/false);
    }
  }
  SendBestEffort(std::move(out), "undo a group that did not come up");
  if (!s.ok()) return s;
  return resp;
}

absl::Status AggregationManager::DestroyGroup(const control::DestroyGroupRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthJobLocked(req.job()));
    if (!job->groups.count(req.group_id())) {
      return absl::NotFoundError(absl::StrFormat(
          "job %d has no group %d (it may have been revoked)", job->id, req.group_id()));
    }
    ReleaseGroupLocked(groups_.at(req.group_id()), &out);
    EraseGroupLocked(req.group_id(), "", /*notify=*/false);
    MaybeSnapshotLocked();
  }
  SendBestEffort(std::move(out), "destroy group");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Failures

std::vector<uint64_t> AggregationManager::DetachRanksLocked(Job& job,
                                                            const std::vector<uint32_t>& ranks,
                                                            const std::string& reason,
                                                            bool destroy_qp, Outbox* out) {
  std::vector<uint64_t> groups;
  std::vector<uint32_t> detached;
  for (uint32_t r : ranks) {
    Rank& rank = job.ranks.at(r);
    if (!rank.attached) continue;
    rank.attached = false;
    detached.push_back(r);
    const SwitchState st = switches_[rank.leaf].state;
    if (destroy_qp && (st == SwitchState::kUp || st == SwitchState::kReconciling)) {
      control::ManagerMessage m;
      m.mutable_destroy_qp()->set_qpn(rank.leaf_qpn);
      out->Add(topo_->switch_at(rank.leaf).name, std::move(m));
    }
    rank.leaf_qpn = 0;
    rank.leaf_psn = 0;
    for (uint64_t gid : job.groups) {
      const Group& g = groups_.at(gid);
      if (std::binary_search(g.ranks.begin(), g.ranks.end(), r)) groups.push_back(gid);
    }
  }
  if (detached.empty()) return groups;
  state::JournalEntry e;
  *e.mutable_put_job() = JobRecordLocked(job);
  (void)JournalLocked(e);
  control::JobEvent ev;
  ev.set_kind(control::JobEvent::RANK_DETACHED);
  for (uint32_t r : detached) ev.add_ranks(r);
  ev.set_reason(reason);
  NETFOLD_LOG(kWarning) << "job " << job.id << ": ranks " << RanksText(detached)
                        << " detached: " << reason;
  PublishLocked(job, ev, {});
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

std::vector<uint64_t> AggregationManager::DropLinkLocked(const LinkKey& key,
                                                         const std::string& reason, bool mark_down,
                                                         Outbox* out) {
  std::vector<uint64_t> groups;
  auto it = links_.find(key);
  if (it == links_.end()) return groups;
  const Link link = it->second;
  links_.erase(it);
  alloc_.ReleaseLink(link.tree_id, link.child);
  for (auto [sw, qpn] :
       {std::pair{link.parent, link.parent_qpn}, std::pair{link.child, link.child_qpn}}) {
    const SwitchState st = switches_[sw].state;
    if (qpn == 0 || (st != SwitchState::kUp && st != SwitchState::kReconciling)) continue;
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(qpn);
    out->Add(topo_->switch_at(sw).name, std::move(m));
  }
  state::JournalEntry e;
  *e.mutable_delete_link() = LinkRecordLocked(link);
  (void)JournalLocked(e);
  if (mark_down) {
    alloc_.SetLinkDown(link.tree_id, link.child, true, reason);
    links_down_until_[key] = clock_->Now() + options_.link_retry_after;
  }
  NETFOLD_LOG(kWarning) << "tree " << link.tree_id << " link " << topo_->switch_at(link.child).name
                        << " -> " << topo_->switch_at(link.parent).name << " dropped: " << reason;
  for (const auto& [gid, g] : groups_) {
    if (g.placement.tree_id() != link.tree_id) continue;
    const SubtreeNode* n = g.placement.subtree.Find(link.child);
    if (n != nullptr && n->parent >= 0) groups.push_back(gid);
  }
  return groups;
}

void AggregationManager::FailGroups(const std::vector<uint64_t>& ids_in,
                                    const std::string& reason) {
  std::vector<uint64_t> ids = ids_in;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint64_t id : ids) {
    Outbox out;
    bool replan = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = groups_.find(id);
      if (it == groups_.end()) continue;
      Group& g = it->second;
      const uint32_t old_tree = g.placement.tree_id();
      ReleaseGroupLocked(g, &out);
      std::string replan_failure;
      if (options_.replan_on_failure) {
        const Job& job = jobs_.at(g.job_id);
        GroupRequest req;
        req.num_slots = g.placement.num_slots;
        req.slot_bytes = g.placement.slot_bytes;
        for (uint32_t r : g.ranks) {
          const Rank& rank = job.ranks.at(r);
          if (!rank.attached) {
            replan_failure = absl::StrFormat("rank %d is detached", r);
            break;
          }
          req.members.emplace_back(r, rank.leaf);
        }
        if (replan_failure.empty()) {
          absl::StatusOr<Placement> p = alloc_.PlanGroup(req, nullptr, old_tree);
          absl::Status s = p.ok() ? alloc_.Reserve(*p) : p.status();
          if (s.ok()) {
            g.placement = *std::move(p);
            g.epoch += 1;
            g.state = GroupState::kInstalling;
            replan = true;
          } else {
            replan_failure = std::string(s.message());
          }
        }
      }
      if (!replan) {
        EraseGroupLocked(id,
                         options_.replan_on_failure
                             ? absl::StrFormat("%s; re-plan impossible: %s", reason, replan_failure)
                             : reason,
                         /*notify=*/true);
      }
    }
    SendBestEffort(std::move(out), "remove a failed group");
    if (!replan) continue;
    absl::Status s = BringUpGroup(id);
    Outbox undo;
    {
      absl::MutexLock lock(&mu_);
      Group& g = groups_.at(id);
      if (s.ok()) {
        control::JobEvent ev;
        ev.set_kind(control::JobEvent::GROUP_REPLANNED);
        ev.set_group_id(id);
        *ev.mutable_group() = GroupInfoLocked(g);
        ev.set_reason(reason);
        NETFOLD_LOG(kWarning) << "group " << id << " re-planned on tree " << g.placement.tree_id()
                              << " epoch " << g.epoch << ": " << reason;
        PublishLocked(jobs_.at(g.job_id), ev, g.ranks);
      } else {
        ReleaseGroupLocked(g, &undo);
        EraseGroupLocked(id, absl::StrFormat("%s; re-plan failed: %s", reason, s.message()),
                         /*notify=*/true);
      }
    }
    SendBestEffort(std::move(undo), "undo a failed re-plan");
  }
}

void AggregationManager::HandleSwitchDeath(int sw) {
  Outbox out;
  std::vector<uint64_t> failed;
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    Switch& s = switches_[sw];
    const std::string& name = topo_->switch_at(sw).name;
    reason = absl::StrFormat("switch %s is dead: %s", name, s.dead_reason);
    NETFOLD_LOG(kWarning) << reason;
    SetSwitchStateLocked(sw, SwitchState::kDead, s.dead_reason);
    s.death_pending = false;
    s.grace_until = absl::ZeroDuration();
    s.session = 0;
    s.reported = control::ResourceUsage();
    std::vector<LinkKey> keys;
    for (const auto& [key, link] : links_) {
      if (link.child == sw || link.parent == sw) keys.push_back(key);
    }
    for (const LinkKey& key : keys) {
      std::vector<uint64_t> g = DropLinkLocked(key, reason, /*mark_down=*/false, &out);
      failed.insert(failed.end(), g.begin(), g.end());
    }
    for (auto& [jid, job] : jobs_) {
      std::vector<uint32_t> ranks;
      for (const auto& [r, rank] : job.ranks) {
        if (rank.leaf == sw && rank.attached) ranks.push_back(r);
      }
      if (ranks.empty()) continue;
      std::vector<uint64_t> g = DetachRanksLocked(job, ranks, reason, /*destroy_qp=*/false, &out);
      failed.insert(failed.end(), g.begin(), g.end());
    }
    for (const auto& [gid, g] : groups_) {
      if (g.placement.subtree.Find(sw) != nullptr) failed.push_back(gid);
    }
  }
  commander_->Disconnect(topo_->switch_at(sw).name);
  SendBestEffort(std::move(out), "clean up after a dead switch");
  FailGroups(failed, reason);
}

void AggregationManager::HandleQpFailure(const QpFailure& f) {
  Outbox out;
  std::vector<uint64_t> failed;
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    const std::string& name = topo_->switch_at(f.switch_index).name;
    reason = absl::StrFormat("QP %d on switch %s failed: %s", f.qpn, name, f.reason);
    bool found = false;
    for (auto& [jid, job] : jobs_) {
      for (auto& [r, rank] : job.ranks) {
        if (rank.attached && rank.leaf == f.switch_index && rank.leaf_qpn == f.qpn) {
          failed = DetachRanksLocked(job, {r}, reason, /*destroy_qp=*/true, &out);
          found = true;
          break;
        }
      }
      if (found) break;
    }
    if (!found) {
      for (const auto& [key, link] : links_) {
        if ((link.parent == f.switch_index && link.parent_qpn == f.qpn) ||
            (link.child == f.switch_index && link.child_qpn == f.qpn)) {
          LinkKey k = key;
          failed = DropLinkLocked(k, reason, /*mark_down=*/true, &out);
          found = true;
          break;
        }
      }
    }
    if (!found) {
      NETFOLD_LOG(kInfo) << "ignoring error report for unknown " << reason;
      return;
    }
  }
  SendBestEffort(std::move(out), "clean up after a QP error");
  FailGroups(failed, reason);
}

void AggregationManager::Reconcile(int sw) {
  Outbox out;
  std::vector<uint64_t> failed;
  std::vector<SwitchCommand> installs;
  std::vector<uint64_t> install_groups;
  const std::string& name = topo_->switch_at(sw).name;
  std::string reason = absl::StrFormat("switch %s came back without it (restarted?)", name);
  {
    absl::MutexLock lock(&mu_);
    Switch& s = switches_[sw];
    if (s.state != SwitchState::kReconciling) return;
    std::set<uint32_t> expected_qpns;
    for (auto& [jid, job] : jobs_) {
      std::vector<uint32_t> missing;
      for (const auto& [r, rank] : job.ranks) {
        if (rank.leaf != sw || !rank.attached) continue;
        if (s.reported_qpns.count(rank.leaf_qpn)) {
          expected_qpns.insert(rank.leaf_qpn);
        } else {
          missing.push_back(r);
        }
      }
      if (missing.empty()) continue;
      std::vector<uint64_t> g = DetachRanksLocked(
          job, missing, absl::StrFormat("switch %s lost the ranks' QPs (restarted?)", name),
          /*destroy_qp=*/false, &out);
      failed.insert(failed.end(), g.begin(), g.end());
    }
    std::vector<LinkKey> lost;
    for (const auto& [key, link] : links_) {
      if (link.child != sw && link.parent != sw) continue;
      uint32_t qpn = link.child == sw ? link.child_qpn : link.parent_qpn;
      if (s.reported_qpns.count(qpn)) {
        expected_qpns.insert(qpn);
      } else {
        lost.push_back(key);
      }
    }
    for (const LinkKey& key : lost) {
      std::vector<uint64_t> g = DropLinkLocked(key, reason, /*mark_down=*/false, &out);
      failed.insert(failed.end(), g.begin(), g.end());
    }
    for (uint32_t qpn : s.reported_qpns) {
      if (expected_qpns.count(qpn)) continue;
      control::ManagerMessage m;
      m.mutable_destroy_qp()->set_qpn(qpn);
      out.Add(name, std::move(m));
    }
    std::sort(failed.begin(), failed.end());
    std::set<std::pair<uint64_t, uint32_t>> expected_groups;
    for (const auto& [gid, g] : groups_) {
      if (std::binary_search(failed.begin(), failed.end(), gid)) continue;
      const SubtreeNode* node = g.placement.subtree.Find(sw);
      if (node == nullptr) continue;
      expected_groups.emplace(gid, g.epoch);
      if (!s.reported_groups.count({gid, g.epoch}) && g.state == GroupState::kReady) {
        installs.push_back({name, InstallMessageLocked(g, *node)});
        install_groups.push_back(gid);
      }
    }
    for (const auto& [gid, epoch] : s.reported_groups) {
      if (expected_groups.count({gid, epoch})) continue;
      control::ManagerMessage m;
      m.mutable_remove_group()->set_group_id(gid);
      m.mutable_remove_group()->set_epoch(epoch);
      out.Add(name, std::move(m));
    }
    NETFOLD_LOG(kInfo) << "reconciling switch " << name << ": " << out.commands.size()
                       << " removals, " << installs.size() << " re-installs, " << failed.size()
                       << " groups lost";
  }
  SendBestEffort(std::move(out), "reconcile");
  FailGroups(failed, reason);
  if (!installs.empty()) {
    auto results = commander_->Execute(installs, options_.command_timeout);
    std::vector<uint64_t> bad;
    std::string why;
    for (size_t i = 0; i < installs.size(); ++i) {
      absl::Status st = CommandStatus(name, results[i]);
      if (!st.ok()) {
        bad.push_back(install_groups[i]);
        why = std::string(st.message());
      }
    }
    if (!bad.empty()) FailGroups(bad, absl::StrFormat("re-installing on %s failed: %s", name, why));
  }
  absl::MutexLock lock(&mu_);
  Switch& s = switches_[sw];
  if (s.state == SwitchState::kReconciling && !s.death_pending) {
    s.reported_groups.clear();
    s.reported_qpns.clear();
    s.grace_until = absl::ZeroDuration();
    SetSwitchStateLocked(sw, SwitchState::kUp, "");
  }
}

void AggregationManager::SendBestEffort(Outbox out, std::string_view what) {
  if (out.commands.empty()) return;
  auto results = commander_->Execute(out.commands, options_.command_timeout);
  for (size_t i = 0; i < results.size(); ++i) {
    absl::Status s = CommandStatus(out.commands[i].switch_name, results[i]);
    if (!Ignorable(s)) NETFOLD_LOG(kWarning) << what << ": " << s.message();
  }
}

void AggregationManager::Tick() {
  absl::MutexLock op(&op_mu_);
  std::vector<int> deaths;
  std::vector<int> reconciles;
  std::vector<QpFailure> qp_failures;
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> silent_hosts;
  Outbox abandoned_out;
  {
    absl::MutexLock lock(&mu_);
    const absl::Duration now = clock_->Now();
    for (int sw = 0; sw < topo_->num_switches(); ++sw) {
      Switch& s = switches_[sw];
      const bool live = s.state == SwitchState::kUp || s.state == SwitchState::kReconciling;
      if (s.death_pending) {
        deaths.push_back(sw);
      } else if (live && now - s.last_heartbeat > options_.switch_timeout) {
        s.dead_reason = absl::StrFormat("no heartbeat for %dms (timeout %dms)",
                                        Ms(now - s.last_heartbeat), Ms(options_.switch_timeout));
        deaths.push_back(sw);
      } else if (s.state == SwitchState::kUnknown && s.grace_until > absl::ZeroDuration() &&
                 now > s.grace_until) {
        s.dead_reason = "did not re-register after the manager restarted";
        deaths.push_back(sw);
      } else if (s.state == SwitchState::kReconciling) {
        reconciles.push_back(sw);
      }
    }
    qp_failures.swap(qp_failures_);
    for (auto it = links_down_until_.begin(); it != links_down_until_.end();) {
      if (it->second <= now) {
        alloc_.SetLinkDown(it->first.first, it->first.second, false, "");
        it = links_down_until_.erase(it);
      } else {
        ++it;
      }
    }
    if (options_.abandoned_job_timeout > absl::ZeroDuration()) {
      // A job none of whose ranks is attached (they all died, or never
      // came) holds its QP quota and P_Key until someone destroys it:
      // after abandoned_job_timeout the manager does.
      std::vector<uint64_t> abandoned;
      for (auto& [jid, job] : jobs_) {
        bool any_attached = false;
        for (const auto& [r, rank] : job.ranks) any_attached = any_attached || rank.attached;
        if (any_attached) {
          job.unattached_since.reset();
        } else if (!job.unattached_since) {
          job.unattached_since = now;
        } else if (now - *job.unattached_since > options_.abandoned_job_timeout) {
          abandoned.push_back(jid);
        }
      }
      for (uint64_t jid : abandoned) {
        NETFOLD_LOG(kWarning) << "job " << jid << " has had no attached rank for "
                              << Ms(options_.abandoned_job_timeout) << "ms: destroying it";
        DestroyJobLocked(jobs_.at(jid),
                         absl::StrFormat("no rank was attached for %dms (abandoned_job_timeout)",
                                         Ms(options_.abandoned_job_timeout)),
                         &abandoned_out);
      }
    }
    if (options_.host_timeout > absl::ZeroDuration()) {
      for (const auto& [jid, job] : jobs_) {
        std::vector<uint32_t> ranks;
        for (const auto& [r, rank] : job.ranks) {
          if (rank.attached && now - rank.last_seen > options_.host_timeout) ranks.push_back(r);
        }
        if (!ranks.empty()) silent_hosts.emplace_back(jid, std::move(ranks));
      }
    }
  }
  SendBestEffort(std::move(abandoned_out), "destroy abandoned jobs");
  for (int sw : deaths) HandleSwitchDeath(sw);
  for (const QpFailure& f : qp_failures) HandleQpFailure(f);
  for (const auto& [jid, ranks] : silent_hosts) {
    Outbox out;
    std::vector<uint64_t> failed;
    std::string reason =
        absl::StrFormat("ranks %s of job %d stopped sending heartbeats (timeout %dms)",
                        RanksText(ranks), jid, Ms(options_.host_timeout));
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(jid);
      if (it == jobs_.end()) continue;
      failed = DetachRanksLocked(it->second, ranks, reason, /*destroy_qp=*/true, &out);
    }
    SendBestEffort(std::move(out), "detach silent ranks");
    FailGroups(failed, reason);
  }
  for (int sw : reconciles) Reconcile(sw);
  absl::MutexLock lock(&mu_);
  MaybeSnapshotLocked();
}

void AggregationManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (auto& [jid, job] : jobs_) {
    for (auto& [r, w] : job.watchers) w->Close();
    job.watchers.clear();
  }
}

// ---------------------------------------------------------------------------
// Admin

control::GetStatusResponse AggregationManager::GetStatus() const {
  absl::MutexLock lock(&mu_);
  control::GetStatusResponse resp;
  resp.set_manager_incarnation(incarnation_);
  resp.set_topology_name(topo_->name());
  const absl::Duration now = clock_->Now();
  for (int sw = 0; sw < topo_->num_switches(); ++sw) {
    const Switch& s = switches_[sw];
    const SwitchSpec& spec = topo_->switch_at(sw);
    control::SwitchStatus* st = resp.add_switches();
    st->set_name(spec.name);
    st->set_tier(spec.tier);
    switch (s.state) {
      case SwitchState::kUnknown:
        st->set_state(control::SwitchStatus::UNKNOWN);
        break;
      case SwitchState::kReconciling:
        st->set_state(control::SwitchStatus::RECONCILING);
        break;
      case SwitchState::kUp:
        st->set_state(control::SwitchStatus::UP);
        break;
      case SwitchState::kDead:
        st->set_state(control::SwitchStatus::DEAD);
        break;
    }
    st->set_data_address(s.data_address);
    st->set_admin_address(s.admin_address);
    st->set_last_heartbeat_ms_ago(
        s.last_heartbeat == absl::InfiniteDuration() ? -1 : Ms(now - s.last_heartbeat));
    st->mutable_capacity()->set_max_trees(spec.capacity.trees);
    st->mutable_capacity()->set_max_groups(spec.capacity.groups);
    st->mutable_capacity()->set_num_slots(spec.capacity.slots);
    st->mutable_capacity()->set_slot_bytes(spec.capacity.slot_bytes);
    st->mutable_capacity()->set_max_qps(spec.capacity.qps);
    const Usage& u = alloc_.used(sw);
    st->mutable_used()->set_groups(u.groups);
    st->mutable_used()->set_slots(u.slots);
    st->mutable_used()->set_qps(u.qps);
    *st->mutable_reported() = s.reported;
    st->set_num_trees(alloc_.trees_of(sw));
    st->set_incarnation(s.incarnation);
  }
  for (const Tree& t : alloc_.trees()) {
    control::TreeStatus* ts = resp.add_trees();
    ts->set_tree_id(t.id);
    ts->set_root(topo_->switch_at(t.root).name);
    ts->set_num_groups(alloc_.tree_load(t.id));
    for (int sw : t.switches) {
      ts->add_switches(topo_->switch_at(sw).name);
      if (t.parent[sw] < 0) continue;
      control::TreeEdge* e = ts->add_edges();
      e->set_parent(topo_->switch_at(t.parent[sw]).name);
      e->set_child(topo_->switch_at(sw).name);
      auto it = links_.find({t.id, sw});
      e->set_connected(it != links_.end() && it->second.connected);
      e->set_down(alloc_.LinkDown(t.id, sw));
    }
  }
  for (const auto& [jid, job] : jobs_) {
    control::JobStatus* js = resp.add_jobs();
    js->set_job_id(jid);
    js->set_name(job.name);
    js->set_num_ranks(static_cast<uint32_t>(job.ranks.size()));
    uint32_t attached = 0;
    for (const auto& [r, rank] : job.ranks) attached += rank.attached ? 1 : 0;
    js->set_num_attached(attached);
    *js->mutable_quota() = job.quota;
    js->set_num_groups(static_cast<uint32_t>(job.groups.size()));
    js->set_pkey(job.pkey);
  }
  for (const auto& [gid, g] : groups_) {
    if (g.state != GroupState::kReady) continue;
    control::GroupStatus* gs = resp.add_groups();
    gs->set_group_id(gid);
    gs->set_job_id(g.job_id);
    gs->set_tree_id(g.placement.tree_id());
    gs->set_epoch(g.epoch);
    for (uint32_t r : g.ranks) gs->add_ranks(r);
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      gs->add_switches(topo_->switch_at(n.switch_index).name);
    }
    gs->set_root_switch(topo_->switch_at(g.placement.subtree.root()).name);
    gs->set_num_slots(g.placement.num_slots);
    gs->set_slot_bytes(g.placement.slot_bytes);
  }
  return resp;
}

control::ExplainResponse AggregationManager::Explain(const control::ExplainRequest& req) const {
  absl::MutexLock lock(&mu_);
  control::ExplainResponse resp;
  resp.set_tree_id(-1);
  std::vector<Shortfall> why;
  auto finish = [&](const std::string& fits_text) {
    for (const Shortfall& s : why) {
      control::Shortfall* p = resp.add_shortfalls();
      p->set_tree_id(s.tree_id);
      p->set_switch_name(s.switch_name);
      p->set_resource(s.resource);
      p->set_needed(s.needed);
      p->set_free(s.free);
      p->set_capacity(s.capacity);
      p->set_reason(s.reason);
    }
    resp.set_fits(why.empty());
    resp.set_summary(why.empty() ? fits_text : JoinShortfalls(why));
    return resp;
  };
  auto malformed = [&](const absl::Status& s) {
    Shortfall sf;
    sf.resource = "request";
    sf.reason = std::string(s.message());
    why.push_back(sf);
    return finish("");
  };
  if (req.has_job()) {
    control::JobQuota quota;
    std::vector<std::pair<int, uint32_t>> qps;
    absl::Status s = CheckJobRequestLocked(req.job(), &quota, &qps, &why);
    if (!s.ok()) return malformed(s);
    return finish(absl::StrFormat("the job fits: %d ranks, quota %d groups x %d slots x %d B",
                                  req.job().ranks_size(), quota.max_groups(), quota.num_slots(),
                                  quota.slot_bytes()));
  }
  if (req.has_group()) {
    auto it = jobs_.find(req.group().job_id());
    if (it == jobs_.end()) {
      return malformed(absl::NotFoundError(absl::StrFormat("no job %d", req.group().job_id())));
    }
    std::vector<uint32_t> ranks(req.group().ranks().begin(), req.group().ranks().end());
    std::sort(ranks.begin(), ranks.end());
    GroupRequest greq;
    absl::Status s = CheckGroupRequestLocked(it->second, ranks, req.group().num_slots(),
                                             req.group().slot_bytes(), &greq, &why);
    if (!s.ok()) return malformed(s);
    if (!why.empty()) return finish("");
    absl::StatusOr<Placement> p = alloc_.PlanGroup(greq, &why);
    if (p.ok()) {
      resp.set_tree_id(static_cast<int32_t>(p->tree_id()));
      return finish(absl::StrFormat("the group fits on tree %d, root %s", p->tree_id(),
                                    topo_->switch_at(p->subtree.root()).name));
    }
    if (why.empty()) return malformed(p.status());
    return finish("");
  }
  return malformed(absl::InvalidArgumentError("ExplainRequest names neither a job nor a group"));
}

}  // namespace netfold::manager
