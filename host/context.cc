#include "host/context.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auth/fabric_credential.h"
#include "auth/tls_files.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/grants.h"
#include "netfold/netfold.h"
#include "proto/control/plane_name.h"

namespace netfold::host {

namespace {

// WhileWaiting: how deep in followed failovers this thread is (the lock
// may pass between threads in the middle: Group::LetOthersIn).
thread_local int t_following = 0;

// The first PSN of an attachment: random, never 0 (0 means "none" in the
// manager's messages).
uint32_t NewPsn() {
  absl::BitGen gen;
  return absl::Uniform<uint32_t>(gen, 1, 1u << 24);
}

}  // namespace

Context::Context(const ContextOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const ContextOptions& options, Oob& world) {
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d of %d is not a valid rank", options.rank, options.world_size));
  }
  std::unique_ptr<Context> ctx(new Context(options));
  absl::Status joined = ctx->Join(world);
  if (absl::Status all = AgreeOnStatus(world, joined); !all.ok()) {
    // The job rank 0 created would otherwise hold its QPs until the
    // manager's host timeout.
    if (options.rank == 0 && ctx->job_id_ != 0) (void)ctx->manager_->DestroyJob(/*patient=*/false);
    return all;
  }
  // A leaf link that fails is told to the manager, which fails the job's
  // groups there for every rank at once.
  Context* c = ctx.get();
  ctx->data_path_->SetLinkFailureHandler([c](uint32_t plane, std::string why) {
    c->manager_->ReportLinkFailure(plane, c->attach_psn_[plane].load(), std::move(why));
  });
  ctx->manager_->StartControl(static_cast<uint32_t>(options.rank), ctx->heartbeat_interval_,
                              [c = ctx.get()](const control::JobEvent& e) { c->OnEvent(e); });
  ProgressThreadOptions po;
  po.enabled = options.progress_thread;
  po.takeover_after = options.progress_takeover;
  DataPath* path = ctx->data_path_.get();
  ctx->progress_ = std::make_unique<ProgressThread>(
      po, [path](absl::Duration timeout) { path->Progress(timeout); }, [path] { path->Wake(); });
  ctx->progress_->Start();
  return ctx;
}

absl::Status Context::Join(Oob& world) {
  auth::ClientAuth client_auth;
  if (!options_.credential_file.empty()) {
    absl::StatusOr<std::string> c = auth::ReadCredentialFile(options_.credential_file);
    if (!c.ok()) {
      // Refused whatever the algorithm policy: the operator must fix the
      // file (or the variable naming it), and must hear about it.
      return absl::InvalidArgumentError(absl::StrFormat(
          "the fabric credential (NETFOLD_CREDENTIAL_FILE): %s", c.status().message()));
    }
    client_auth.credential = *std::move(c);
  }
  if (!options_.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = auth::ReadTlsCaFile(options_.tls_ca_file);
    if (!ca.ok()) {
      // As the credential: a CA file that cannot be trusted is the
      // operator's to fix, not a reason to fall back to plaintext.
      return absl::InvalidArgumentError(
          absl::StrFormat("the fabric's CA (NETFOLD_TLS_CA): %s", ca.status().message()));
    }
    client_auth.tls_ca_pem = *std::move(ca);
  }
  manager_ = std::make_unique<ManagerClient>(options_.manager, client_auth,
                                             options_.timeout, options_.connect_timeout);

  // Every rank's host name, for the job's rank table.
  constexpr size_t kNameBytes = 64;
  if (options_.host_name.size() >= kNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("host name '%s' is too long", options_.host_name));
  }
  std::vector<char> names(kNameBytes * static_cast<size_t>(options_.world_size), 0);
  char mine[kNameBytes] = {};
  std::memcpy(mine, options_.host_name.data(), options_.host_name.size());
  NETFOLD_RETURN_IF_ERROR(world.Allgather(mine, names.data(), kNameBytes));
  // What each rank asks of the job, one uint16 per rank: bit 0 the
  // default partition (the job takes it if any rank asks: a RoCE NIC knows
  // no other P_Key), bit 1 integrity (docs/security.md; likewise), bit 2
  // that it may keep groups (the job keeps them if every rank may), bits 3
  // to 7 its channels, bits 8 to 15 its NETFOLD_ALGORITHM.
  const uint16_t wants = static_cast<uint16_t>(
      (options_.default_partition || options_.transport == ContextOptions::Transport::kVerbs
           ? 1
           : 0) |
      (options_.integrity ? 2 : 0) | (options_.keep_groups > 0 ? 4 : 0) |
      (std::min(options_.channels, control::kMaxPlanes) << 3) |
      (static_cast<uint16_t>(options_.algorithm) << 8));
  std::vector<uint16_t> asked(static_cast<size_t>(options_.world_size));
  NETFOLD_RETURN_IF_ERROR(world.Allgather(&wants, asked.data(), sizeof(wants)));
  const bool default_partition =
      std::any_of(asked.begin(), asked.end(), [](uint16_t v) { return (v & 1) != 0; });
  const bool integrity =
      std::any_of(asked.begin(), asked.end(), [](uint16_t v) { return (v & 2) != 0; });
  // Whether a group's creation starts by looking for a kept one: an
  // exchange every member must take, so a job-wide choice.
  keeps_groups_ =
      std::all_of(asked.begin(), asked.end(), [](uint16_t v) { return (v & 4) != 0; });
  // The most channels any rank asks for, so that every rank knows how much
  // a group may have in flight (num_slots()).
  for (uint16_t v : asked) channels_ = std::max<uint32_t>(channels_, (v >> 3) & 0x1f);
  // One algorithm policy: the members of a group decide together whether
  // the fabric or the hosts serve it, and which host algorithm runs.
  for (size_t r = 1; r < asked.size(); ++r) {
    const auto policy = [](uint16_t v) {
      return algorithms::AlgorithmPolicyName(static_cast<algorithms::AlgorithmPolicy>(v >> 8));
    };
    if ((asked[r] >> 8) != (asked[0] >> 8)) {
      return WithErrorCode(
          absl::InvalidArgumentError(absl::StrFormat(
              "NETFOLD_ALGORITHM differs between ranks: rank 0 has %s, rank %d %s (every rank "
              "of a job must use the same)",
              policy(asked[0]), r, policy(asked[r]))),
          NETFOLD_ERR_MISMATCH);
    }
  }

  // Rank 0 creates the job; everyone learns the outcome.
  std::string outcome;
  if (options_.rank == 0) {
    control::CreateJobRequest req;
    req.set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    req.set_name(options_.job_name);
    for (int r = 0; r < options_.world_size; ++r) {
      auto* spec = req.add_ranks();
      spec->set_rank(static_cast<uint32_t>(r));
      spec->set_host(std::string(names.data() + kNameBytes * static_cast<size_t>(r)));
    }
    req.mutable_quota()->set_num_slots(options_.num_slots);
    req.mutable_quota()->set_slot_bytes(options_.slot_bytes);
    req.mutable_quota()->set_max_groups(options_.max_groups);
    req.set_default_partition(default_partition);
    req.set_integrity(integrity);
    req.set_channels(channels_);
    absl::StatusOr<control::CreateJobResponse> resp = manager_->CreateJob(req);
    outcome = EncodeOutcome(resp.status(), resp.ok() ? resp->SerializeAsString() : "");
  }
  NETFOLD_RETURN_IF_ERROR(world.BcastString(&outcome, 0));
  NETFOLD_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(outcome));
  control::CreateJobResponse job;
  if (!job.ParseFromString(payload)) return absl::InternalError("malformed job description");
  job_id_ = job.job_id();
  pkey_ = static_cast<uint16_t>(job.pkey());
  qkey_ = job.qkey();
  // A manager that requires integrity gives a key to jobs that did not ask.
  if (!job.integrity_key().empty()) {
    NETFOLD_ASSIGN_OR_RETURN(proto::AggregationKey key,
                             proto::AggregationKeyFromBytes(job.integrity_key()));
    integrity_key_ = key;
  } else if (integrity) {
    return absl::FailedPreconditionError(
        "NETFOLD_INTEGRITY=1, but the manager gave the job no integrity key (a manager older "
        "than this library?)");
  }
  if (job.quota().num_slots() > 0) num_slots_ = job.quota().num_slots();
  if (job.quota().slot_bytes() > 0) slot_bytes_ = job.quota().slot_bytes();
  max_groups_ = job.quota().max_groups();
  if (job.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(job.heartbeat_interval_ms());
  }
  manager_->SetJob(job_id_, job.job_key());

  NETFOLD_ASSIGN_OR_RETURN(data_path_, DataPath::Create(options_, slot_bytes_));
  LeafLink& link = data_path_->link();
  uint32_t psn = 0;
  NETFOLD_ASSIGN_OR_RETURN(control::AttachResponse attached, RequestAttach(0, link, &psn));
  attach_psn_[0].store(psn);
  NETFOLD_RETURN_IF_ERROR(ConnectLink(link, attached, psn));
  NETFOLD_ASSIGN_OR_RETURN(leaf_address_,
                           transport::ParseIpv4Endpoint(attached.switch_endpoint().address()));
  // The fabric's: the same at every rank (ChoosePlanes' OOB round depends
  // on it), whatever each rank's transport.
  planes_ = std::clamp<uint32_t>(attached.planes(), 1, control::kMaxPlanes);
  // Channels: at most the fabric's planes and what the window allows.
  channels_ = JobChannels(channels_, planes_, num_slots_);
  // A NIC link is one QP: a rank on verbs keeps the groups it creates on
  // plane 0 (as a member, it sends them there by failing to attach).
  usable_planes_ = !data_path_->soft()       ? 1
                   : options_.planes == 0    ? planes_
                                             : std::min(planes_, options_.planes);
  // Jobs side by side start on different planes (each job's first group
  // is most often its busiest: MPI_COMM_WORLD).
  next_plane_ = static_cast<uint32_t>(job_id_ % usable_planes_);
  NETFOLD_LOG(kInfo) << absl::StrFormat(
      "rank %d joined job %d: %s QP 0x%06x -> %s %s QP 0x%06x (%s transport, P_Key 0x%04x%s%s)",
      options_.rank, job_id_, link.address(), link.qpn(), attached.leaf_switch(),
      leaf_address_.ToString(), attached.switch_endpoint().qpn(),
      options_.transport == ContextOptions::Transport::kVerbs ? "verbs" : "soft", pkey_,
      integrity_key_ ? ", integrity tag" : "",
      planes_ > 1 ? absl::StrFormat(", %d data planes", planes_) : "");
  return absl::OkStatus();
}

absl::StatusOr<control::AttachResponse> Context::RequestAttach(uint32_t plane,
                                                               const LeafLink& link,
                                                               uint32_t* psn) {
  if (*psn == 0) *psn = NewPsn();
  control::AttachRequest attach;
  attach.set_rank(static_cast<uint32_t>(options_.rank));
  attach.set_plane(plane);
  attach.mutable_endpoint()->set_address(link.address());
  attach.mutable_endpoint()->set_qpn(link.qpn());
  attach.mutable_endpoint()->set_psn(*psn);
  return manager_->Attach(attach);
}

absl::StatusOr<LeafPeer> Context::PeerFrom(const control::AttachResponse& attached,
                                           uint32_t psn) const {
  LeafPeer peer;
  NETFOLD_ASSIGN_OR_RETURN(peer.remote,
                           transport::ParseIpv4Endpoint(attached.switch_endpoint().address()));
  peer.remote_qpn = attached.switch_endpoint().qpn();
  peer.rq_psn = attached.switch_endpoint().psn();
  peer.sq_psn = psn;
  peer.pkey = pkey_;
  peer.qkey = qkey_;
  return peer;
}

absl::Status Context::ConnectLink(LeafLink& link, const control::AttachResponse& attached,
                                  uint32_t psn) {
  NETFOLD_ASSIGN_OR_RETURN(LeafPeer peer, PeerFrom(attached, psn));
  return link.Connect(peer);
}

bool Context::PlaneLost(uint32_t plane) {
  // A link whose connection failed is lost as well: the manager's
  // RANK_DETACHED may come later, or not at all.
  if (!(lost_planes_.load() & (1u << plane)) && data_path_->has_plane(plane) &&
      !data_path_->link(plane).status().ok()) {
    lost_planes_.fetch_or(1u << plane);
  }
  return (lost_planes_.load() & (1u << plane)) != 0;
}

absl::Status Context::ReattachLostPlanes() {
  absl::Status plane_zero = absl::OkStatus();
  for (uint32_t plane = 0; plane < planes_; ++plane) {
    if (!PlaneLost(plane)) continue;
    absl::Status s = Reattach(plane);
    if (plane == 0) plane_zero = s;
  }
  return plane_zero;
}

absl::Status Context::Reattach(uint32_t plane) {
  ReattachTimes& times = reattach_[plane];
  if (!data_path_->has_plane(plane)) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d", options_.rank, plane));
  }
  if (!data_path_->soft()) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d (NETFOLD_TRANSPORT=verbs does not attach "
        "again)",
        options_.rank, plane));
  }
  if (times.attaching) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d; another thread is attaching it again",
        options_.rank, plane));
  }
  const int64_t now = DataPath::clock().NowNanos();
  if (now < times.due_ns) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d; it tries to attach again in %s",
        options_.rank, plane,
        absl::FormatDuration(absl::Trunc(absl::Nanoseconds(times.due_ns - now),
                                         absl::Milliseconds(100)))));
  }
  // `retry_in`: when to try again; ZeroDuration: after the backoff.
  auto failed = [&](const absl::Status& why, absl::Duration retry_in) {
    times.attaching = false;
    if (retry_in == absl::ZeroDuration()) {
      times.backoff = std::clamp(2 * times.backoff, kReattachFirstBackoff, kReattachMaxBackoff);
      retry_in = times.backoff;
    }
    times.due_ns = retry_in == absl::InfiniteDuration()
                       ? std::numeric_limits<int64_t>::max()
                       : DataPath::clock().NowNanos() + absl::ToInt64Nanoseconds(retry_in);
    NETFOLD_LOG(kWarning) << absl::StrFormat(
        "rank %d could not attach again in data plane %d (%s): %s", options_.rank, plane,
        retry_in == absl::InfiniteDuration()
            ? "not trying again"
            : absl::StrCat("next try in ", absl::FormatDuration(retry_in)),
        why.message());
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d and could not attach again: %s",
        options_.rank, plane, why.message()));
  };
  LeafLink& link = data_path_->link(plane);
  // A new PSN (the manager takes the attach as a replacement), this rank's
  // from before the call on: a detach of the attachment before (an event,
  // a report) is told apart by its PSN, even one that comes during it.
  uint32_t psn = NewPsn();
  attach_psn_[plane].store(psn);
  absl::StatusOr<control::AttachResponse> attached;
  times.attaching = true;  // other threads' groups go to the hosts meanwhile
  {
    ProgressThread::Outside outside(*progress_);  // the manager may take its time
    attached = RequestAttach(plane, link, &psn);
  }
  if (!attached.ok()) {
    // Cheap to ask again (no keepalive was waited for) if the manager or
    // the leaf was not there (restarting, registering); after the backoff
    // if it refused (no QP left, ...); never for a plane it does not have
    // (a topology changed under a restart).
    const absl::Status& s = attached.status();
    absl::Duration retry_in = absl::ZeroDuration();  // the backoff
    if (absl::IsInvalidArgument(s)) {
      retry_in = absl::InfiniteDuration();
    } else if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      retry_in = kReattachAttachRetry;
    }
    return failed(s, retry_in);
  }
  auto not_connected = [&](const absl::Status& why) {
    // The manager hears it as of a link that fails, and detaches the rank.
    manager_->ReportLinkFailure(plane, psn, std::string(why.message()));
    return failed(why, absl::ZeroDuration());
  };
  absl::StatusOr<LeafPeer> peer = PeerFrom(*attached, psn);
  if (!peer.ok()) return not_connected(peer.status());
  if (absl::Status s = data_path_->ReconnectLink(plane, *peer); !s.ok()) return not_connected(s);
  // The manager attached this rank at a leaf it sees up; whether the leaf's
  // data port reaches this rank (a cut that has not healed) only the leaf
  // can say: it answers a keepalive. One every kKeepaliveEvery, in case
  // one is lost or the leaf does not run for a while.
  const int64_t start = DataPath::clock().NowNanos();
  int64_t sent_ns = start - absl::ToInt64Nanoseconds(kKeepaliveEvery);
  while (!link.keepalive_answered() && link.status().ok() &&
         detached_psn_[plane].load() != psn) {
    const int64_t t = DataPath::clock().NowNanos();
    if (t - start >= absl::ToInt64Nanoseconds(kReattachProbe)) break;
    if (t - sent_ns >= absl::ToInt64Nanoseconds(kKeepaliveEvery)) {
      if (absl::Status s = link.SendKeepalive(); !s.ok()) return not_connected(s);
      sent_ns = t;
    }
    data_path_->Progress(absl::Milliseconds(10));
  }
  if (detached_psn_[plane].load() == psn) {
    return failed(absl::UnavailableError("the manager detached it again meanwhile"),
                  absl::ZeroDuration());
  }
  if (!link.status().ok()) return not_connected(link.status());
  if (!link.keepalive_answered()) {
    return not_connected(absl::UnavailableError(
        absl::StrFormat("the leaf switch did not answer a keepalive within %s of attaching again",
                        absl::FormatDuration(kReattachProbe))));
  }
  times = ReattachTimes();
  lost_planes_.fetch_and(~(1u << plane));
  if (plane == 0) {
    if (absl::StatusOr<transport::Ipv4Endpoint> leaf =
            transport::ParseIpv4Endpoint(attached->switch_endpoint().address());
        leaf.ok()) {
      leaf_address_ = *leaf;
    }
  }
  // Told at the level its loss was (a warning), so that a user sees both.
  NETFOLD_LOG(kWarning) << absl::StrFormat(
      "rank %d attached again in data plane %d: QP 0x%06x -> %s %s", options_.rank, plane,
      link.qpn(), attached->leaf_switch(), attached->switch_endpoint().address());
  return absl::OkStatus();
}

absl::Status Context::EnsurePlane(uint32_t plane) {
  auto lost = [&] {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d", options_.rank, plane));
  };
  if (PlaneLost(plane)) return lost();
  if (data_path_->has_plane(plane)) return absl::OkStatus();
  uint32_t psn = 0;  // an earlier attempt's, if its answer did not come
  NETFOLD_ASSIGN_OR_RETURN(LeafLink * link, data_path_->AddPlane(plane, &psn));
  absl::StatusOr<control::AttachResponse> attached;
  {
    ProgressThread::Outside outside(*progress_);  // the manager may take its time
    attached = RequestAttach(plane, *link, &psn);
  }
  if (attached.ok()) attach_psn_[plane].store(psn);
  if (!attached.ok()) {
    // The manager may have attached it: the next attempt names the same
    // endpoint, which it takes as a retry, not as a replacement.
    data_path_->AttachFailed(plane, psn);
    return attached.status();
  }
  // Back under the lock: the link's QPs belong to the data path's thread.
  if (absl::Status s = ConnectLink(*link, *attached, psn); !s.ok()) {
    data_path_->RemovePlane(plane);
    return s;
  }
  data_path_->MarkPlaneReady(plane);
  if (lost_planes_.load() & (1u << plane)) return lost();  // while it attached
  NETFOLD_LOG(kInfo) << absl::StrFormat("rank %d attached in data plane %d: QP 0x%06x -> %s %s",
                                        options_.rank, plane, link->qpn(), attached->leaf_switch(),
                                        attached->switch_endpoint().address());
  return absl::OkStatus();
}

// On the manager client's control thread: the data path applies it.
void Context::OnEvent(const control::JobEvent& e) {
  const auto group = static_cast<uint32_t>(e.group_id());
  switch (e.kind()) {
    case control::JobEvent::GROUP_REVOKED:
      data_path_->PostFailure(
          group, WithErrorCode(absl::AbortedError(absl::StrFormat(
                                   "group %d was revoked: %s", e.group_id(), e.reason())),
                               NETFOLD_ERR_ABORTED));
      break;
    case control::JobEvent::GROUP_REPLANNED:
      data_path_->PostFailure(
          group, WithErrorCode(absl::AbortedError(absl::StrFormat(
                                   "group %d was re-planned (%s): recreate it", e.group_id(),
                                   e.reason())),
                               NETFOLD_ERR_ABORTED));
      break;
    case control::JobEvent::RANK_DETACHED:
      // This rank's attachment in one data plane: that plane's groups
      // fail, the others go on; the plane is not chosen again until the
      // rank attaches there again (Reattach). Another rank's loss revokes
      // the groups it is in (GROUP_REVOKED); this rank's other groups go on.
      if (e.plane() >= control::kMaxPlanes) break;
      if (auto it = std::find(e.ranks().begin(), e.ranks().end(),
                              static_cast<uint32_t>(options_.rank));
          it == e.ranks().end()) {
        break;
      } else if (const int i = static_cast<int>(it - e.ranks().begin());
                 e.host_psns_size() == e.ranks_size()) {
        // The attachment the manager detached: not this rank's current
        // one if it attached again since (an old report, a replacement).
        if (e.host_psns(i) != attach_psn_[e.plane()].load()) {
          NETFOLD_LOG(kInfo) << "rank " << options_.rank << ": data plane " << e.plane()
                             << ": an earlier attachment was detached (" << e.reason() << ")";
          break;
        }
        detached_psn_[e.plane()].store(e.host_psns(i));
      }
      lost_planes_.fetch_or(1u << e.plane());
      data_path_->PostPlaneFailure(
          e.plane(), WithErrorCode(absl::UnavailableError(absl::StrFormat(
                                       "data plane %d lost its leaf: %s", e.plane(), e.reason())),
                                   NETFOLD_ERR_UNAVAILABLE));
      break;
    case control::JobEvent::JOB_DESTROYED:
      lost_fabric_ = true;
      data_path_->PostFailure(
          std::nullopt,
          WithErrorCode(
              absl::UnavailableError(absl::StrFormat("the job lost its fabric: %s", e.reason())),
              NETFOLD_ERR_UNAVAILABLE));
      break;
    default:
      break;
  }
}

void Context::Progress(absl::Duration timeout) { data_path_->Progress(timeout); }

void Context::WhileWaiting() {
  // Every group follows, the waiting one too (as its own Progress would).
  if (groups_.size() < 2) return;
  // Every few milliseconds of a wait: a failover is rare, and looking
  // reads every member's host channel of every group. Inside a followed
  // failover's exchanges, every time: the members there may wait for this
  // rank in yet another group.
  constexpr int64_t kEveryNs = 5'000'000;
  const int64_t now = DataPath::clock().NowNanos();
  if (t_following == 0 && now - followed_ns_ < kEveryNs) return;
  followed_ns_ = now;
  // A copy: a group's failover runs the hosts' exchanges, which call back
  // here, and let other application threads in (Group::LetOthersIn), which
  // may create or destroy groups meanwhile: each is looked up again before
  // it follows. A group in its failover is on the hosts already, so
  // following it again only moves its host operations: at most one nested
  // failover per group.
  ++t_following;
  const std::vector<Group*> groups = groups_;
  for (Group* g : groups) {
    if (std::find(groups_.begin(), groups_.end(), g) != groups_.end()) g->FollowFailover();
  }
  --t_following;
}

bool Context::FabricThere() {
  if (lost_fabric_) return false;
  ProgressThread::Inside inside(*progress_);
  if (fabric_failed_ || PlaneLost(0)) return false;
  for (const Group* g : groups_) {
    if (g->fabric() != nullptr && !g->fabric()->failure().ok()) return false;
  }
  return true;
}

absl::Status Context::ReleaseAtManager(uint64_t group_id, bool fabric_failed) {
  return manager_->DestroyGroup(group_id, /*patient=*/!fabric_failed && FabricThere());
}

void Context::Forget(Group& group) {
  auto it = std::find(groups_.begin(), groups_.end(), &group);
  if (it == groups_.end()) return;
  groups_.erase(it);
  retired_host_ops_ += group.host_ops();
  retired_failovers_ += group.failed_over() ? 1 : 0;
  if (group.fabric_failed()) fabric_failed_ = true;
  const Channels* fabric = group.fabric();
  if (fabric == nullptr) return;  // the hosts served it from the start
  retired_ += fabric->stats();
  for (size_t c = 0; c < fabric->size(); ++c) {
    const FabricChannel& channel = fabric->channel(c);
    data_path_->Unroute(static_cast<uint32_t>(channel.group_id));
    if (channel.multicast && data_path_->has_plane(channel.plane)) {
      data_path_->link(channel.plane).DetachMulticast(*channel.multicast);
    }
  }
}

ContextStats Context::stats() const {
  ProgressThread::Inside inside(*progress_);  // the engines' counters move under it
  ContextStats out;
  out.engines = retired_;
  out.host_ops = retired_host_ops_;
  out.failovers = retired_failovers_;
  out.groups_requested = groups_requested_;
  out.groups_reused = groups_reused_;
  out.groups_kept = kept_.size();
  for (const Group* g : groups_) {
    out.host_ops += g->host_ops();
    out.failovers += g->failed_over() ? 1 : 0;
    if (g->fabric() != nullptr) out.engines += g->fabric()->stats();
  }
  if (data_path_ != nullptr) {
    const LeafLinkStats link = data_path_->link_stats();
    out.link_tx_bytes = link.tx_bytes;
    out.link_rx_bytes = link.rx_bytes;
    out.retransmissions = link.retransmissions;
    // Results with a bad or missing integrity tag are forged or damaged
    // packets the link let through: counted with the foreign ones.
    out.packets_dropped =
        link.packets_dropped + out.engines.bad_tags + data_path_->messages_dropped();
    out.foreign_packets_dropped = link.foreign_packets_dropped + out.engines.bad_tags;
    out.results_placed = link.results_placed;
    out.results_place_missed = link.results_place_missed;
  }
  return out;
}

absl::Status Context::Finalize(Oob& world) {
  absl::Status result = world.Barrier();
  if (options_.rank == 0 && manager_ != nullptr && job_id_ != 0) {
    absl::Status s = manager_->DestroyJob(/*patient=*/FabricThere());
    if (result.ok()) result = s;
  }
  return result;
}

Context::~Context() {
  if (progress_ != nullptr) progress_->Stop();
  if (manager_ != nullptr) manager_->StopControl();
  for (Group* g : groups_) g->Orphan();  // groups outliving the context, kept ones too
  groups_.clear();
  kept_.clear();  // before the data path their engines send through
  data_path_.reset();
  manager_.reset();
}

}  // namespace netfold::host
