#include "manager/aggregation_manager.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "manager/admin_report.h"
#include "manager/admission.h"
#include "manager/failures.h"
#include "manager/liveness.h"
#include "manager/recovery.h"
#include "auth/secrets.h"

namespace netfold::manager {

using auth::ConstantTimeEquals;
using auth::RandomBytes;
using auth::RandomU64;

namespace {

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// A text from a client, for logs and events: its first 200 bytes if they
// are printable ASCII (as libnetfold sends), else escaped.
std::string Printable(const std::string& text) {
  const std::string head = text.substr(0, 200);
  const bool plain =
      std::all_of(head.begin(), head.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  return plain ? head : absl::CHexEscape(head);
}

// What a rank attached as `a` (its leaf and the leaf's QP) is told.
control::AttachResponse AttachAnswer(const FabricState& state, const Job& job,
                                     const LeafAttachment& a) {
  control::AttachResponse resp;
  resp.set_leaf_switch(state.SwitchName(a.leaf));
  resp.mutable_switch_endpoint()->set_address(state.switches[a.leaf].data_address);
  resp.mutable_switch_endpoint()->set_qpn(a.leaf_qpn);
  resp.mutable_switch_endpoint()->set_psn(a.leaf_psn);
  resp.set_pkey(job.pkey);
  resp.set_qkey(job.qkey);
  resp.set_planes(state.topo.planes());
  return resp;
}

}  // namespace

// ---------------------------------------------------------------------------
// Construction, recovery

AggregationManager::AggregationManager(const Topology& topo, ManagerOptions options, Clock& clock,
                                       SwitchCommander* commander, Journal* journal)
    : topo_(&topo),
      options_(std::move(options)),
      commander_(commander),
      incarnation_(RandomU64() | 1),
      installer_(commander, options_.command_timeout),
      state_(topo, options_, clock, journal, incarnation_) {}

AggregationManager::~AggregationManager() { Shutdown(); }

void AggregationManager::SetWakeup(std::function<void()> wakeup) {
  absl::MutexLock lock(&mu_);
  wakeup_ = std::move(wakeup);
}

void AggregationManager::WakeUp() {
  // Called with mu_ held; the callback only signals a condition variable.
  if (wakeup_) wakeup_();
}

absl::Status AggregationManager::Recover(const state::Snapshot& snapshot) {
  absl::MutexLock op(&op_mu_);
  absl::MutexLock lock(&mu_);
  return RecoverFabricState(snapshot, &state_);
}

void AggregationManager::Serving() {
  absl::MutexLock lock(&mu_);
  RestartReregistrationGrace(&state_);
}

// ---------------------------------------------------------------------------
// Switches

absl::Status AggregationManager::ValidateRegistration(const control::RegisterSwitch& req) const {
  return manager::ValidateRegistration(*topo_, options_, req);
}

absl::StatusOr<control::RegisterReply> AggregationManager::RegisterSwitch(
    const control::RegisterSwitch& req, uint64_t session) {
  NETFOLD_RETURN_IF_ERROR(ValidateRegistration(req));
  const int sw = topo_->FindSwitch(req.name());
  absl::MutexLock lock(&mu_);
  Switch& s = state_.switches[sw];
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
  s.last_heartbeat = state_.clock.Now();
  s.last_heartbeat_sequence = 0;  // the registration
  s.reported = control::ResourceUsage();
  s.reported_groups.clear();
  for (const control::InstalledGroup& g : req.installed_groups()) {
    s.reported_groups.emplace(g.group_id(), g.epoch());
  }
  s.reported_qpns = std::set<uint32_t>(req.qpns().begin(), req.qpns().end());
  s.death_pending = false;
  s.dead_reason.clear();
  state_.SetSwitchState(sw, SwitchState::kReconciling, "");
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
  const absl::Duration asked = RealClock().Now();
  absl::MutexLock lock(&mu_);
  Switch& s = state_.switches[sw];
  if (s.session != session) return;
  const std::string late = RecordSwitchHeartbeat(state_, sw, hb.sequence(), state_.clock.Now(),
                                                 RealClock().Now() - asked);
  if (!late.empty()) NETFOLD_LOG(kWarning) << late;
  s.reported = hb.usage();
}

void AggregationManager::SwitchDisconnected(std::string_view name, uint64_t session) {
  const int sw = topo_->FindSwitch(name);
  if (sw < 0) return;
  absl::MutexLock lock(&mu_);
  Switch& s = state_.switches[sw];
  if (s.session != session) return;
  s.session = 0;
  if (state_.Reachable(sw)) {
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
  if (state_.switches[sw].session != session) return;
  if (qp_failures_.size() < 4096) {
    qp_failures_.push_back({sw, report.qpn(), report.reason().substr(0, 200)});
  }
  WakeUp();
}

// ---------------------------------------------------------------------------
// Jobs

absl::StatusOr<control::CreateJobResponse> AggregationManager::CreateJob(
    const control::CreateJobRequest& req) {
  absl::MutexLock op(&op_mu_);
  absl::MutexLock lock(&mu_);
  control::JobQuota quota;
  std::vector<std::pair<int, uint32_t>> qps;
  std::vector<Shortfall> why;
  NETFOLD_RETURN_IF_ERROR(CheckJobRequest(state_, req, &quota, &qps, &why));
  if (!why.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("job not admitted: %s", JoinShortfalls(why)));
  }
  NETFOLD_RETURN_IF_ERROR(state_.alloc.ReserveQps(qps, nullptr));
  absl::StatusOr<uint64_t> id = state_.records.NextJobId();
  if (!id.ok()) {
    state_.alloc.ReleaseQps(qps);
    return id.status();
  }
  Job job;
  job.id = *id;
  job.name = req.name().empty() ? absl::StrFormat("job-%d", job.id) : req.name();
  job.key = RandomBytes(kJobKeyBytes);
  if (req.default_partition()) {
    job.pkey = kDefaultPkey;  // shared by every such job; never in pkeys_used
  } else {
    do {
      job.pkey = 0x8000u | static_cast<uint32_t>(RandomU64() & 0x7fff);
    } while (job.pkey == 0x8000u || job.pkey == kDefaultPkey ||
             state_.pkeys_used.count(job.pkey) > 0);
  }
  job.qkey = static_cast<uint32_t>(RandomU64() & 0x7fffffffu) | 1u;  // high bit: privileged
  job.integrity_key = IntegrityKeyFor(req, options_);
  job.quota = quota;
  const absl::Duration now = state_.clock.Now();
  for (const control::RankSpec& r : req.ranks()) {
    Rank rank;
    rank.rank = r.rank();
    rank.host = r.host();
    rank.leaf = topo_->host_at(topo_->FindHost(r.host())).switch_index;
    rank.last_seen = now;
    job.ranks[rank.rank] = rank;
  }
  if (absl::Status s = state_.records.PutJob(job); !s.ok()) {
    state_.alloc.ReleaseQps(qps);
    return s;
  }
  if (job.pkey != kDefaultPkey) state_.pkeys_used.insert(job.pkey);
  control::CreateJobResponse resp;
  resp.set_job_id(job.id);
  resp.set_job_key(job.key);
  resp.set_pkey(job.pkey);
  resp.set_qkey(job.qkey);
  resp.set_integrity_key(job.integrity_key);
  *resp.mutable_quota() = quota;
  resp.set_heartbeat_interval_ms(static_cast<uint32_t>(Ms(options_.heartbeat_interval)));
  resp.set_heartbeat_timeout_ms(static_cast<uint32_t>(Ms(options_.host_timeout)));
  NETFOLD_LOG(kInfo) << "job " << job.id << " (" << job.name << "): " << job.ranks.size()
                     << " ranks, quota " << quota.max_groups() << " groups x " << quota.num_slots()
                     << " slots x " << quota.slot_bytes() << " B";
  state_.jobs[job.id] = std::move(job);
  state_.MaybeSnapshot();
  return resp;
}

absl::Status AggregationManager::DestroyJob(const control::DestroyJobRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
    state_.DestroyJob(*job, "the job was destroyed", &out);
  }
  SendBestEffort(out, "destroy job");
  return absl::OkStatus();
}

absl::StatusOr<control::AttachResponse> AggregationManager::Attach(
    const control::AttachRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  std::vector<uint64_t> revoked;
  std::string leaf_name;
  std::string reason;
  control::ManagerMessage create;
  const uint32_t plane = req.plane();
  int leaf_index = -1;
  bool reserved = false;  // a QP reserved at a leaf of plane > 0 for this first attach
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
    auto it = job->ranks.find(req.rank());
    if (it == job->ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
    }
    if (plane >= topo_->planes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d: plane %d, but the fabric has %d data plane(s)", req.rank(), plane,
          topo_->planes()));
    }
    Rank& rank = it->second;
    NETFOLD_RETURN_IF_ERROR(CheckRankEndpoint(req.rank(), req.endpoint()));
    leaf_index = topo_->InPlane(rank.leaf, plane);
    leaf_name = state_.SwitchName(leaf_index);
    const Switch& leaf = state_.switches[leaf_index];
    if (leaf.state != SwitchState::kUp) {
      return absl::UnavailableError(absl::StrFormat(
          "leaf switch %s of rank %d is not up (%s)", leaf_name, req.rank(),
          leaf.state == SwitchState::kDead ? leaf.dead_reason : "not registered or reconciling"));
    }
    if (const LeafAttachment* a = rank.In(plane);
        a != nullptr && a->attached && a->host_endpoint.address() == req.endpoint().address() &&
        a->host_endpoint.qpn() == req.endpoint().qpn() &&
        a->host_endpoint.psn() == req.endpoint().psn()) {
      // The same endpoint again: a retry whose answer was lost. The
      // attachment stands (replacing it would revoke what the rank is
      // about to use).
      rank.last_seen = state_.clock.Now();
      return AttachAnswer(state_, *job, *a);
    }
    if (rank.AttachedIn(plane)) {
      reason = plane == 0 ? absl::StrFormat("rank %d of job %d attached again", rank.rank, job->id)
                          : absl::StrFormat("rank %d of job %d attached again in plane %d",
                                            rank.rank, job->id, plane);
      revoked = state_.DetachRanks(*job, {rank.rank}, reason, /*destroy_qp=*/true, &out, plane);
    }
    if (rank.In(plane) == nullptr) {
      // The first attach in a plane above 0 takes a QP of that leaf for
      // the job, as job creation took plane 0's.
      std::vector<Shortfall> why;
      absl::Status s = state_.alloc.ReserveQps({{leaf_index, 1u}}, &why);
      if (!s.ok()) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "rank %d could not attach in plane %d: %s", req.rank(), plane, s.message()));
      }
      reserved = true;
    }
    create.mutable_create_qp()->mutable_peer()->mutable_host()->set_job_id(job->id);
    create.mutable_create_qp()->mutable_peer()->mutable_host()->set_rank(rank.rank);
    *create.mutable_create_qp()->mutable_remote() = req.endpoint();
    create.mutable_create_qp()->set_pkey(job->pkey);
  }
  SendBestEffort(out, "detach before re-attach");
  FailGroups(revoked, reason);

  std::vector<absl::StatusOr<control::CommandResult>> results =
      commander_->Execute({{leaf_name, create}}, options_.command_timeout);
  absl::Status s = CommandStatus(leaf_name, results[0]);
  if (!s.ok()) {
    if (reserved) {
      absl::MutexLock lock(&mu_);
      state_.alloc.ReleaseQps({{leaf_index, 1u}});
    }
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
    Job& job = state_.jobs.at(req.job().job_id());  // op_mu_ held: the job is still there
    Rank& rank = job.ranks.at(req.rank());
    LeafAttachment& a = plane == 0 ? rank : rank.planes[plane];
    a.leaf = leaf_index;
    a.attached = true;
    a.host_endpoint = req.endpoint();
    a.leaf_qpn = qp.qpn();
    a.leaf_psn = qp.psn();
    rank.last_seen = state_.clock.Now();
    journaled = state_.records.PutJob(job);
    if (journaled.ok()) {
      resp = AttachAnswer(state_, job, a);
      state_.MaybeSnapshot();
    } else {
      a.attached = false;
      a.leaf_qpn = 0;
      a.leaf_psn = 0;
      if (reserved) {
        rank.planes.erase(plane);
        state_.alloc.ReleaseQps({{leaf_index, 1u}});
      }
    }
  }
  if (!journaled.ok()) {
    Outbox undo;
    control::ManagerMessage m;
    m.mutable_destroy_qp()->set_qpn(qp.qpn());
    undo.Add(leaf_name, std::move(m));
    SendBestEffort(undo, "undo attach");
    return journaled;
  }
  return resp;
}

absl::StatusOr<control::HostHeartbeatResponse> AggregationManager::HostHeartbeat(
    const control::HostHeartbeatRequest& req) {
  absl::MutexLock lock(&mu_);
  NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
  auto it = job->ranks.find(req.rank());
  if (it == job->ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
  }
  it->second.last_seen = state_.clock.Now();
  // The rank's own word that its leaf link failed: handled as the leaf's
  // report of that QP's error would be (Tick, QpFailed), since a leaf
  // whose port was cut off has nothing in flight to report it with.
  // Each attachment once, however often a (buggy or hostile) rank lists
  // it: the queue is shared with the switches' reports. The reason is the
  // rank's words, escaped to printable ASCII (it goes into logs and events).
  for (const control::LinkFailure& f : req.link_failures()) {
    const LeafAttachment* a = it->second.In(f.plane());
    if (a == nullptr || !a->attached || qp_failures_.size() >= 4096) continue;
    // A report of an earlier attachment (sent before the rank attached
    // again) is not one of this attachment's.
    if (f.psn() != 0 && f.psn() != a->host_endpoint.psn()) continue;
    const bool queued =
        std::any_of(qp_failures_.begin(), qp_failures_.end(), [&](const QpFailure& q) {
          return q.switch_index == a->leaf && q.qpn == a->leaf_qpn;
        });
    if (queued) continue;
    qp_failures_.push_back(
        {a->leaf, a->leaf_qpn,
         absl::StrFormat("rank %d of job %d reports its link broken: %s", req.rank(), job->id,
                         Printable(f.reason()))});
    WakeUp();
  }
  control::HostHeartbeatResponse resp;
  resp.set_manager_incarnation(incarnation_);
  return resp;
}

absl::StatusOr<std::shared_ptr<EventStream>> AggregationManager::WatchEvents(
    const control::WatchEventsRequest& req) {
  absl::MutexLock lock(&mu_);
  if (state_.events.closed()) return absl::UnavailableError("the manager is shutting down");
  NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
  if (!job->ranks.count(req.rank())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("job %d has no rank %d", job->id, req.rank()));
  }
  return state_.events.Subscribe(job->id, req.rank(), req.after_sequence(), req.incarnation());
}

// ---------------------------------------------------------------------------
// Groups

absl::StatusOr<control::CreateGroupResponse> AggregationManager::CreateGroup(
    const control::CreateGroupRequest& req) {
  absl::MutexLock op(&op_mu_);
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
    std::vector<uint32_t> ranks(req.ranks().begin(), req.ranks().end());
    std::sort(ranks.begin(), ranks.end());
    if (req.tag().size() > 128) return absl::InvalidArgumentError("tag is longer than 128 bytes");
    if (req.plane() >= topo_->planes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "plane %d, but the fabric has %d data plane(s)", req.plane(), topo_->planes()));
    }
    if (!req.tag().empty()) {
      for (uint64_t gid : job->groups) {
        const Group& g = state_.groups.at(gid);
        if (g.tag != req.tag()) continue;
        if (g.ranks != ranks || state_.GroupPlane(g) != req.plane()) {
          return absl::AlreadyExistsError(
              absl::StrFormat("tag '%s' already names group %d of job %d, with other ranks or "
                              "in another data plane",
                              req.tag(), gid, job->id));
        }
        if (g.state != GroupState::kReady) {
          return absl::UnavailableError(absl::StrFormat("group %d is being set up", gid));
        }
        control::CreateGroupResponse resp;
        *resp.mutable_group() = state_.DescribeGroup(g);
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
    NETFOLD_RETURN_IF_ERROR(CheckGroupRequest(*job, ranks, req.num_slots(), req.slot_bytes(),
                                              &greq, &why, req.plane()));
    if (!why.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("group not created: %s", JoinShortfalls(why)));
    }
    NETFOLD_ASSIGN_OR_RETURN(Placement placement, state_.alloc.PlanGroup(greq, nullptr));
    NETFOLD_RETURN_IF_ERROR(state_.alloc.Reserve(placement));
    absl::StatusOr<uint64_t> gid = state_.records.NextGroupId();
    uint32_t mcast = gid.ok() ? state_.AllocateMulticast(*gid) : 0;
    if (!gid.ok() || mcast == 0) {
      state_.alloc.Release(placement);
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
    state_.groups[id] = std::move(g);
    job->groups.insert(id);
  }
  absl::Status s = BringUpGroup(id);
  Outbox out;
  control::CreateGroupResponse resp;
  {
    absl::MutexLock lock(&mu_);
    Group& g = state_.groups.at(id);
    if (s.ok()) {
      *resp.mutable_group() = state_.DescribeGroup(g);
      NETFOLD_LOG(kInfo) << "group " << id << " of job " << g.job_id << ": ranks "
                         << RanksText(g.ranks) << " on tree " << g.placement.tree_id() << ", root "
                         << resp.group().root_switch();
      state_.MaybeSnapshot();
    } else {
      state_.ReleaseGroup(g, &out);
      state_.EraseGroup(id, "", /*notify=*/false);
    }
  }
  SendBestEffort(out, "undo a group that did not come up");
  if (!s.ok()) return s;
  return resp;
}

absl::Status AggregationManager::DestroyGroup(const control::DestroyGroupRequest& req) {
  absl::MutexLock op(&op_mu_);
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    NETFOLD_ASSIGN_OR_RETURN(Job * job, AuthenticateJob(state_.jobs, req.job()));
    if (!job->groups.count(req.group_id())) {
      // A revoked group's processes let its multicast address go.
      state_.ReleaseRevokedGroup(*job, req.group_id());
      return absl::NotFoundError(absl::StrFormat(
          "job %d has no group %d (it may have been revoked)", job->id, req.group_id()));
    }
    state_.ReleaseGroup(state_.groups.at(req.group_id()), &out);
    state_.EraseGroup(req.group_id(), "", /*notify=*/false);
    state_.MaybeSnapshot();
  }
  // The removals are not waited for: the switches take them before any
  // later command (another group's install in the slots released here:
  // both are sent under op_mu_, in order), and nobody waits on their
  // outcome. A job that makes communicators in a
  // loop waited ~2 ms per free for them (docs/performance.md).
  commander_->Post(out.commands, options_.command_timeout);
  return absl::OkStatus();
}

absl::Status AggregationManager::BringUpGroup(uint64_t group_id) {
  uint32_t tree_id;
  std::vector<int> new_links;
  {
    absl::MutexLock lock(&mu_);
    const Group& g = state_.groups.at(group_id);
    tree_id = g.placement.tree_id();
    new_links = g.placement.new_links;
  }
  if (!new_links.empty()) NETFOLD_RETURN_IF_ERROR(ConnectLinks(tree_id, new_links));
  std::vector<SwitchCommand> installs;
  {
    absl::MutexLock lock(&mu_);
    Group& g = state_.groups.at(group_id);
    g.placement.new_links.clear();
    for (const SubtreeNode& n : g.placement.subtree.nodes) {
      installs.push_back({state_.SwitchName(n.switch_index), InstallMessage(state_, g, n)});
    }
  }
  NETFOLD_RETURN_IF_ERROR(installer_.Install(group_id, installs));
  absl::MutexLock lock(&mu_);
  Group& g = state_.groups.at(group_id);
  NETFOLD_RETURN_IF_ERROR(state_.records.PutGroup(g));
  g.state = GroupState::kReady;
  return absl::OkStatus();
}

absl::Status AggregationManager::ConnectLinks(uint32_t tree_id, const std::vector<int>& children) {
  std::vector<LinkEnds> ends;
  {
    absl::MutexLock lock(&mu_);
    for (int child : children) {
      ends.push_back(LinkEndsOf(state_, tree_id, child));
      state_.OpenLink(tree_id, child);
    }
  }
  std::vector<LinkAttempt> attempts = installer_.ConnectLinks(tree_id, ends);
  Outbox cleanup;
  absl::Status first_error;
  {
    absl::MutexLock lock(&mu_);
    for (const LinkAttempt& a : attempts) {
      if (a.status.ok()) {
        state_.LinkConnected(tree_id, a.ends.child, a.parent_qp, a.child_qp);
        continue;
      }
      if (first_error.ok()) {
        first_error = absl::Status(
            a.status.code(),
            absl::StrFormat("tree %d link %s -> %s could not be connected: %s", tree_id,
                            a.ends.child_name, a.ends.parent_name, a.status.message()));
      }
      state_.ForgetLink(tree_id, a.ends.child);
      GroupInstaller::Undo(a, &cleanup);
    }
  }
  SendBestEffort(cleanup, "undo a half-connected link");
  return first_error;
}

// ---------------------------------------------------------------------------
// Failures

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
      if (!state_.groups.count(id)) continue;
      replan = state_.ReplanGroup(id, reason, &out);
    }
    SendBestEffort(out, "remove a failed group");
    if (!replan) continue;
    absl::Status s = BringUpGroup(id);
    Outbox undo;
    {
      absl::MutexLock lock(&mu_);
      Group& g = state_.groups.at(id);
      if (s.ok()) {
        control::JobEvent ev;
        ev.set_kind(control::JobEvent::GROUP_REPLANNED);
        ev.set_group_id(id);
        *ev.mutable_group() = state_.DescribeGroup(g);
        ev.set_reason(reason);
        NETFOLD_LOG(kWarning) << "group " << id << " re-planned on tree " << g.placement.tree_id()
                              << " epoch " << g.epoch << ": " << reason;
        state_.events.Publish(g.job_id, ev, g.ranks);
      } else {
        state_.ReleaseGroup(g, &undo);
        state_.EraseGroup(id, absl::StrFormat("%s; re-plan failed: %s", reason, s.message()),
                          /*notify=*/true);
      }
    }
    SendBestEffort(undo, "undo a failed re-plan");
  }
}

void AggregationManager::HandleSwitchDeath(int sw) {
  Fallout f;
  {
    absl::MutexLock lock(&mu_);
    f = SwitchDied(state_, sw);
  }
  commander_->Disconnect(topo_->switch_at(sw).name);
  SendBestEffort(f.out, "clean up after a dead switch");
  FailGroups(f.lost_groups, f.reason);
}

void AggregationManager::HandleQpFailure(const QpFailure& qp) {
  std::optional<Fallout> f;
  {
    absl::MutexLock lock(&mu_);
    f = QpFailed(state_, qp.switch_index, qp.qpn, qp.reason);
  }
  if (!f.has_value()) return;
  SendBestEffort(f->out, "clean up after a QP error");
  FailGroups(f->lost_groups, f->reason);
}

void AggregationManager::Reconcile(int sw) {
  std::optional<Reconciliation> plan;
  {
    absl::MutexLock lock(&mu_);
    plan = PlanReconcile(state_, sw);
  }
  if (!plan.has_value()) return;
  SendBestEffort(plan->fallout.out, "reconcile");
  FailGroups(plan->fallout.lost_groups, plan->fallout.reason);
  if (!plan->installs.empty()) {
    std::vector<absl::Status> results = installer_.InstallEach(plan->installs);
    std::vector<uint64_t> bad;
    std::string why;
    for (size_t i = 0; i < plan->installs.size(); ++i) {
      if (!results[i].ok()) {
        bad.push_back(plan->install_groups[i]);
        why = std::string(results[i].message());
      }
    }
    if (!bad.empty()) {
      FailGroups(bad, absl::StrFormat("re-installing on %s failed: %s",
                                      topo_->switch_at(sw).name, why));
    }
  }
  absl::MutexLock lock(&mu_);
  EndReconcile(state_, sw);
}

void AggregationManager::SendBestEffort(const Outbox& out, std::string_view what) {
  manager::SendBestEffort(*commander_, out, options_.command_timeout, what);
}

// ---------------------------------------------------------------------------
// Background work

void AggregationManager::Tick() {
  absl::MutexLock op(&op_mu_);
  LivenessSweep due;
  std::vector<QpFailure> qp_failures;
  Outbox abandoned_out;
  {
    absl::MutexLock lock(&mu_);
    due = SweepLiveness(state_, state_.clock.Now());
    qp_failures.swap(qp_failures_);
    const int64_t abandoned_ms = Ms(options_.abandoned_job_timeout);
    for (uint64_t jid : due.abandoned_jobs) {
      NETFOLD_LOG(kWarning) << "job " << jid << " has had no attached rank for " << abandoned_ms
                            << "ms: destroying it";
      state_.DestroyJob(
          state_.jobs.at(jid),
          absl::StrFormat("no rank was attached for %dms (abandoned_job_timeout)", abandoned_ms),
          &abandoned_out);
    }
  }
  SendBestEffort(abandoned_out, "destroy abandoned jobs");
  for (int sw : due.deaths) HandleSwitchDeath(sw);
  for (const QpFailure& f : qp_failures) HandleQpFailure(f);
  for (const auto& [jid, ranks] : due.silent_ranks) {
    Outbox out;
    std::vector<uint64_t> failed;
    std::string reason =
        absl::StrFormat("ranks %s of job %d stopped sending heartbeats (timeout %dms)",
                        RanksText(ranks), jid, Ms(options_.host_timeout));
    {
      absl::MutexLock lock(&mu_);
      auto it = state_.jobs.find(jid);
      if (it == state_.jobs.end()) continue;
      failed = state_.DetachRanks(it->second, ranks, reason, /*destroy_qp=*/true, &out);
    }
    SendBestEffort(out, "detach silent ranks");
    FailGroups(failed, reason);
  }
  for (int sw : due.reconciles) Reconcile(sw);
  absl::MutexLock lock(&mu_);
  state_.MaybeSnapshot();
}

void AggregationManager::Shutdown() {
  absl::MutexLock lock(&mu_);
  state_.events.CloseAll();
}

// ---------------------------------------------------------------------------
// Admin

bool AggregationManager::Authenticates(const control::JobCredentials& creds) const {
  absl::MutexLock lock(&mu_);
  auto it = state_.jobs.find(creds.job_id());
  return !creds.job_key().empty() && it != state_.jobs.end() &&
         ConstantTimeEquals(creds.job_key(), it->second.key);
}

control::GetStatusResponse AggregationManager::GetStatus() const {
  absl::MutexLock lock(&mu_);
  return StatusReport(state_, incarnation_);
}

control::ExplainResponse AggregationManager::Explain(const control::ExplainRequest& req) const {
  absl::MutexLock lock(&mu_);
  return ExplainReport(state_, req);
}

}  // namespace netfold::manager
