#include "host/context.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

// Encodes an outcome (OK + payload, or an error) for an OOB broadcast, so
// that every rank returns the same error when the one that talked to the
// manager failed.
std::string EncodeOutcome(const absl::Status& s, const std::string& payload) {
  std::string out(8, '\0');
  const int32_t code = static_cast<int32_t>(s.code());
  const int32_t netfold_code = ToErrorCode(s);
  std::memcpy(out.data(), &code, 4);
  std::memcpy(out.data() + 4, &netfold_code, 4);
  out += s.ok() ? payload : std::string(s.message());
  return out;
}

absl::StatusOr<std::string> DecodeOutcome(const std::string& in) {
  if (in.size() < 8) return absl::InternalError("malformed out-of-band outcome");
  int32_t code, netfold_code;
  std::memcpy(&code, in.data(), 4);
  std::memcpy(&netfold_code, in.data() + 4, 4);
  if (code == 0) return in.substr(8);
  return WithErrorCode(absl::Status(static_cast<absl::StatusCode>(code), in.substr(8)),
                       static_cast<netfold_status_t>(netfold_code));
}

// Every rank learns whether every rank succeeded; the first failure wins.
absl::Status AgreeOnStatus(Oob& oob, const absl::Status& mine) {
  const int32_t code = mine.ok() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(oob.size()));
  NETFOLD_RETURN_IF_ERROR(oob.Allgather(&code, all.data(), sizeof(code)));
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != 0) {
      return WithErrorCode(absl::UnavailableError(absl::StrFormat(
                               "rank %d of the group failed to join (see its log)", r)),
                           NETFOLD_ERR_UNAVAILABLE);
    }
  }
  return absl::OkStatus();
}

// The members' exchanges wait for other processes: outside the data path's
// lock, so that the progress thread keeps the link answered meanwhile.
class OutsideOob : public Oob {
 public:
  OutsideOob(Oob& inner, ProgressThread& progress) : inner_(inner), progress_(progress) {}
  absl::Status Allgather(const void* send, void* recv, size_t bytes) override {
    ProgressThread::Outside outside(progress_);
    return inner_.Allgather(send, recv, bytes);
  }
  absl::Status Bcast(void* buf, size_t bytes, int root) override {
    ProgressThread::Outside outside(progress_);
    return inner_.Bcast(buf, bytes, root);
  }
  absl::Status Barrier() override {
    ProgressThread::Outside outside(progress_);
    return inner_.Barrier();
  }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

 private:
  Oob& inner_;
  ProgressThread& progress_;
};

// Failures of the fabric the hosts can stand in for.
bool HostsCanStandIn(const absl::Status& s) {
  return absl::IsResourceExhausted(s) || absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsFailedPrecondition(s);
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
  // The job takes the default partition if any rank asks for it (a RoCE
  // NIC knows no other P_Key).
  // So does integrity (docs/security.md), if any rank asks for it: one
  // byte per rank, bit 0 the partition, bit 1 integrity (bits 3 to 7 below).
  const uint8_t wants = static_cast<uint8_t>(
      (options_.default_partition || options_.transport == ContextOptions::Transport::kVerbs
           ? 1
           : 0) |
      (options_.integrity ? 2 : 0) | (std::min(options_.channels, control::kMaxPlanes) << 3));
  std::vector<uint8_t> partitions(static_cast<size_t>(options_.world_size));
  NETFOLD_RETURN_IF_ERROR(world.Allgather(&wants, partitions.data(), 1));
  const bool default_partition =
      std::any_of(partitions.begin(), partitions.end(), [](uint8_t v) { return (v & 1) != 0; });
  const bool integrity =
      std::any_of(partitions.begin(), partitions.end(), [](uint8_t v) { return (v & 2) != 0; });
  // And the most channels any rank asks for (bits 3 to 7), so that every
  // rank knows how much a group may have in flight (num_slots()).
  for (uint8_t v : partitions) channels_ = std::max<uint32_t>(channels_, v >> 3);

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
  if (*psn == 0) {
    absl::BitGen gen;
    *psn = absl::Uniform<uint32_t>(gen, 1, 1u << 24);
  }
  control::AttachRequest attach;
  attach.set_rank(static_cast<uint32_t>(options_.rank));
  attach.set_plane(plane);
  attach.mutable_endpoint()->set_address(link.address());
  attach.mutable_endpoint()->set_qpn(link.qpn());
  attach.mutable_endpoint()->set_psn(*psn);
  return manager_->Attach(attach);
}

absl::Status Context::ConnectLink(LeafLink& link, const control::AttachResponse& attached,
                                  uint32_t psn) {
  LeafPeer peer;
  NETFOLD_ASSIGN_OR_RETURN(peer.remote,
                           transport::ParseIpv4Endpoint(attached.switch_endpoint().address()));
  peer.remote_qpn = attached.switch_endpoint().qpn();
  peer.rq_psn = attached.switch_endpoint().psn();
  peer.sq_psn = psn;
  peer.pkey = pkey_;
  peer.qkey = qkey_;
  return link.Connect(peer);
}

bool Context::PlaneLost(uint32_t plane) {
  // A link whose connection failed is lost as well: the manager's
  // RANK_DETACHED may come later, or not at all.
  if (!(lost_planes_.load() & (1u << plane)) && plane > 0 && data_path_->has_plane(plane) &&
      !data_path_->link(plane).status().ok()) {
    lost_planes_.fetch_or(1u << plane);
  }
  return (lost_planes_.load() & (1u << plane)) != 0;
}

absl::Status Context::EnsurePlane(uint32_t plane) {
  if (PlaneLost(plane)) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d", options_.rank, plane));
  }
  if (data_path_->has_plane(plane)) return absl::OkStatus();
  uint32_t psn = 0;  // an earlier attempt's, if its answer did not come
  NETFOLD_ASSIGN_OR_RETURN(LeafLink * link, data_path_->AddPlane(plane, &psn));
  absl::StatusOr<control::AttachResponse> attached;
  {
    ProgressThread::Outside outside(*progress_);  // the manager may take its time
    attached = RequestAttach(plane, *link, &psn);
  }
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
  if (lost_planes_.load() & (1u << plane)) {
    return absl::UnavailableError(absl::StrFormat(
        "rank %d lost its attachment in data plane %d", options_.rank, plane));
  }
  NETFOLD_LOG(kInfo) << absl::StrFormat("rank %d attached in data plane %d: QP 0x%06x -> %s %s",
                                        options_.rank, plane, link->qpn(), attached->leaf_switch(),
                                        attached->switch_endpoint().address());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> Context::ChoosePlanes(Oob& group_oob) {
  // Every member has the fabric's planes from the same manager: without
  // planes nobody asks (no round of the OOB).
  if (planes_ == 1) return std::vector<uint32_t>{0};
  std::string choice;
  if (group_oob.rank() == 0) {
    // The next planes in turn, skipping those lost; as many as the job's
    // channels.
    const uint32_t usable = usable_planes_;
    std::vector<uint32_t> chosen;
    for (uint32_t i = 0; i < usable && chosen.size() < channels_; ++i) {
      const uint32_t p = (next_plane_ + i) % usable;
      if (!PlaneLost(p)) chosen.push_back(p);
    }
    if (chosen.empty()) chosen.push_back(0);
    next_plane_ = (chosen.front() + 1) % std::max<uint32_t>(usable, 1);
    choice = absl::StrJoin(chosen, ",");
  }
  NETFOLD_RETURN_IF_ERROR(group_oob.BcastString(&choice, 0));
  std::vector<uint32_t> planes;
  for (absl::string_view field : absl::StrSplit(choice, ',')) {
    uint32_t plane = 0;
    if (!absl::SimpleAtoi(field, &plane) || plane >= planes_ ||
        std::find(planes.begin(), planes.end(), plane) != planes.end() ||
        planes.size() >= control::kMaxPlanes) {
      return absl::InternalError(absl::StrFormat("group rank 0 chose data planes '%s'", choice));
    }
    planes.push_back(plane);
  }
  if (planes == std::vector<uint32_t>{0}) return planes;
  absl::Status mine = absl::OkStatus();
  for (uint32_t plane : planes) {
    if (plane == 0 || !mine.ok()) continue;
    mine = EnsurePlane(plane);
    if (!mine.ok() && data_path_->soft()) {  // on verbs, expected: no warning
      NETFOLD_LOG(kWarning) << "rank " << options_.rank << ": cannot attach in data plane "
                            << plane << ": " << mine.message();
    }
  }
  absl::Status all = AgreeOnStatus(group_oob, mine);
  if (!all.ok()) {
    if (group_oob.rank() == 0) {
      NETFOLD_LOG(kWarning) << "data planes " << choice << " cannot take the group ("
                            << all.message() << "): trying plane 0 alone";
    }
    return std::vector<uint32_t>{0};
  }
  return planes;
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
      if (e.plane() != 0) {
        // This rank's attachment in one data plane: that plane's groups
        // fail, the others go on; the plane is not chosen again. (Another
        // rank's loss revokes the groups it is in: GROUP_REVOKED.)
        if (std::find(e.ranks().begin(), e.ranks().end(), static_cast<uint32_t>(options_.rank)) ==
            e.ranks().end()) {
          break;
        }
        if (e.plane() < control::kMaxPlanes) lost_planes_.fetch_or(1u << e.plane());
        data_path_->PostPlaneFailure(
            e.plane(), WithErrorCode(absl::UnavailableError(absl::StrFormat(
                                         "data plane %d lost its leaf: %s", e.plane(), e.reason())),
                                     NETFOLD_ERR_UNAVAILABLE));
        break;
      }
      [[fallthrough]];
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

absl::StatusOr<std::unique_ptr<Group>> Context::CreateGroup(Oob& members,
                                                           const std::vector<int>& world_ranks) {
  ProgressThread::Inside inside(*progress_);
  OutsideOob group_oob(members, *progress_);
  if (static_cast<int>(world_ranks.size()) != group_oob.size()) {
    return absl::InvalidArgumentError("the group's rank list and its OOB size differ");
  }
  for (int r : world_ranks) {
    if (r < 0 || r >= options_.world_size) {
      return absl::InvalidArgumentError(absl::StrFormat("world rank %d out of range", r));
    }
  }
  if (world_ranks[static_cast<size_t>(group_oob.rank())] != options_.rank) {
    return absl::InvalidArgumentError(
        "the group spec's world rank for this process is not this process's rank");
  }
  namespace alg = algorithms;
  const alg::AlgorithmPolicy policy = options_.algorithm;
  const bool hosts_only = policy == alg::AlgorithmPolicy::kRing ||
                          policy == alg::AlgorithmPolicy::kBidirRing ||
                          policy == alg::AlgorithmPolicy::kTree ||
                          policy == alg::AlgorithmPolicy::kTreeScatter;
  const bool may_fall_back = policy != alg::AlgorithmPolicy::kInNetwork;
  GroupSetup setup;
  setup.released_reduces = static_cast<int>(options_.released_reduces);
  setup.group_rank = group_oob.rank();
  setup.world_ranks = world_ranks;
  auto connect_hosts = [&](std::optional<alg::TreeSpec> fabric_tree) -> absl::Status {
    HostCollectivesOptions ho;
    ho.policy = policy;
    ho.pkey = pkey_;
    ho.op_timeout = options_.timeout;
    ho.fabric_tree = std::move(fabric_tree);
    NETFOLD_ASSIGN_OR_RETURN(setup.host,
                             HostCollectives::Connect(&data_path_->endpoint(), group_oob, ho));
    return absl::OkStatus();
  };
  auto adopt = [&]() {
    GroupOwner* owner = this;  // a private base: converted here, where it is accessible
    auto group = std::make_unique<Group>(owner, std::move(setup));
    if (Channels* fabric = group->fabric(); fabric != nullptr) {
      for (size_t c = 0; c < fabric->size(); ++c) {
        data_path_->Route(static_cast<uint32_t>(fabric->channel(c).group_id), &fabric->engine(c),
                          fabric->channel(c).plane, fabric->channel(c).multicast);
      }
    }
    groups_.push_back(group.get());
    return group;
  };
  auto host_group = [&](const std::string& why) -> absl::StatusOr<std::unique_ptr<Group>> {
    NETFOLD_RETURN_IF_ERROR(connect_hosts(std::nullopt));
    setup.description = absl::StrFormat("host group of %d ranks (NETFOLD_ALGORITHM=%s): %s",
                                        world_ranks.size(), alg::AlgorithmPolicyName(policy), why);
    if (!hosts_only && group_oob.rank() == 0) NETFOLD_LOG(kWarning) << setup.description;
    return adopt();
  };
  if (hosts_only) return host_group("the policy asks for host algorithms");

  absl::StatusOr<std::vector<uint32_t>> planes = ChoosePlanes(group_oob);
  if (!planes.ok()) return planes.status();
  // Every member takes the same path below: RequestGroup broadcasts rank
  // 0's answer, and JoinFabricGroup agrees on its outcome. A group on
  // channels or on a plane above 0 that cannot be had goes on plane 0,
  // one channel, once.
  const std::vector<uint32_t> plane_zero = {0};
  auto to_plane_zero = [&](const absl::Status& why) {
    if (group_oob.rank() == 0) {
      NETFOLD_LOG(kWarning) << "data planes " << absl::StrJoin(*planes, ",")
                            << " cannot take the group (" << why.message()
                            << "): trying plane 0 alone";
    }
    *planes = plane_zero;
  };
  for (;;) {
    absl::StatusOr<std::vector<control::GroupInfo>> infos =
        RequestGroups(group_oob, world_ranks, *planes);
    if (!infos.ok()) {
      if (*planes != plane_zero) {
        to_plane_zero(infos.status());
        continue;
      }
      // The fabric cannot serve the group (no resources, a switch or the
      // manager gone): the hosts can, unless the policy forbids it.
      if (may_fall_back && HostsCanStandIn(infos.status())) {
        return host_group(std::string(infos.status().message()));
      }
      return infos.status();
    }
    if (infos->size() > 1 && !ChannelsAlike(*infos)) {
      // Channels fold their chunks in their own trees, in slots of their
      // own: trees of another shape would fold elements in another order
      // (the result would not be the bits one channel gives), and slots of
      // another size would cut the vector elsewhere. One channel, then.
      if (group_oob.rank() == 0) {
        NETFOLD_LOG(kWarning) << "the data planes' groups differ in tree shape or slots: the "
                                 "group runs on one channel (plane "
                              << (*planes)[0] << ")";
      }
      ReleaseGroups(group_oob, {infos->begin() + 1, infos->end()});
      infos->resize(1);
      planes->resize(1);
    }
    absl::Status joined = absl::OkStatus();
    for (size_t c = 0; c < infos->size() && joined.ok(); ++c) {
      joined = JoinFabricGroup(group_oob, (*infos)[c], (*planes)[c], static_cast<uint32_t>(c),
                               static_cast<uint32_t>(infos->size()), setup);
    }
    const bool join_failed = !joined.ok();  // agreed by every member
    // The hosts stand by to take over if the fabric fails mid-job.
    if (joined.ok() && may_fall_back) {
      joined = AgreeOnStatus(group_oob, connect_hosts(FabricTree(infos->front(), world_ranks)));
    }
    if (joined.ok()) break;
    LeaveFabricGroups(setup);
    ReleaseGroups(group_oob, *infos);
    setup.host.reset();
    if (*planes == plane_zero) {
      // A member cannot join the fabric's group (every member agreed on
      // that, whatever its own reason): the hosts can serve it, as a group
      // the fabric refuses, unless the policy forbids it. Not when it was
      // the hosts' own channels that failed to connect.
      if (join_failed && may_fall_back) return host_group(std::string(joined.message()));
      return joined;
    }
    to_plane_zero(joined);
  }
  setup.group_id = setup.channels.front().group_id;
  return adopt();
}

void Context::ReleaseGroups(Oob& group_oob, const std::vector<control::GroupInfo>& infos) {
  if (group_oob.rank() != 0) return;
  ProgressThread::Outside outside(*progress_);  // the manager may take its time
  for (const control::GroupInfo& info : infos) {
    if (absl::Status s = ReleaseAtManager(info.group_id(), /*fabric_failed=*/false); !s.ok()) {
      NETFOLD_LOG(kInfo) << "releasing group " << info.group_id() << ": " << s;
    }
  }
}

void Context::LeaveFabricGroups(GroupSetup& setup) {
  for (FabricChannel& c : setup.channels) {
    if (c.multicast) data_path_->link(c.plane).DetachMulticast(*c.multicast);
  }
  setup.channels.clear();
}

absl::StatusOr<std::vector<control::GroupInfo>> Context::RequestGroups(
    Oob& group_oob, const std::vector<int>& world_ranks, const std::vector<uint32_t>& planes) {
  std::vector<control::GroupInfo> infos;
  for (uint32_t plane : planes) {
    absl::StatusOr<control::GroupInfo> info = RequestGroup(group_oob, world_ranks, plane);
    if (!info.ok()) {
      // A plane the manager no longer has (a topology changed under a
      // restart) is not chosen again; the channels granted go back.
      if (plane != 0 && absl::IsInvalidArgument(info.status())) {
        lost_planes_.fetch_or(1u << plane);
      }
      ReleaseGroups(group_oob, infos);
      return info.status();
    }
    infos.push_back(*std::move(info));
  }
  return infos;
}

absl::StatusOr<control::GroupInfo> Context::RequestGroup(Oob& group_oob,
                                                         const std::vector<int>& world_ranks,
                                                         uint32_t plane) {
  std::string outcome;
  if (group_oob.rank() == 0) {
    control::CreateGroupRequest req;
    req.set_plane(plane);
    for (int r : world_ranks) req.add_ranks(static_cast<uint32_t>(r));
    req.set_num_slots(options_.num_slots);
    req.set_slot_bytes(options_.slot_bytes);
    req.set_delivery(options_.delivery == proto::DeliveryMode::kRcTree
                         ? control::DELIVERY_RC_DOWN
                         : control::DELIVERY_MULTICAST);
    // A tag makes the request idempotent, so a retry after a lost answer
    // cannot create a second group.
    req.set_tag(absl::StrFormat("rank%d-group%d", options_.rank, ++groups_created_));
    absl::StatusOr<control::CreateGroupResponse> resp;
    {
      ProgressThread::Outside outside(*progress_);  // the manager may take its time
      resp = manager_->CreateGroup(req);
    }
    outcome = EncodeOutcome(resp.status(), resp.ok() ? resp->group().SerializeAsString() : "");
  }
  NETFOLD_RETURN_IF_ERROR(group_oob.BcastString(&outcome, 0));
  NETFOLD_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(outcome));
  control::GroupInfo info;
  if (!info.ParseFromString(payload)) return absl::InternalError("malformed group description");
  return info;
}

absl::Status Context::JoinFabricGroup(Oob& group_oob, const control::GroupInfo& info,
                                      uint32_t plane, uint32_t channel, uint32_t channels,
                                      GroupSetup& setup) {
  FabricChannel joined;
  joined.group_id = info.group_id();
  absl::Status mine = absl::OkStatus();
  if (info.group_id() > 0xffffffffull || info.tree_id() > 0xffff) {
    mine = absl::InternalError("the manager returned a group or tree id wider than the data plane's");
  }
  GroupParams params;
  params.tree_id = static_cast<uint16_t>(info.tree_id());
  params.group_id = static_cast<uint32_t>(info.group_id());
  params.epoch = info.epoch();
  params.rank = static_cast<uint32_t>(options_.rank);
  params.num_slots = info.num_slots();
  params.slot_bytes = info.slot_bytes();
  params.delivery = info.delivery() == control::DELIVERY_RC_DOWN ? proto::DeliveryMode::kRcTree
                                                                 : proto::DeliveryMode::kMulticast;
  params.repair_after = options_.repair_after;
  params.bcast_run = options_.bcast_run;
  params.reduce_data = options_.reduce_data;
  params.op_timeout = options_.timeout;
  params.integrity_key = integrity_key_;
  params.channel = channel;
  params.channels = channels;
  for (int r : setup.world_ranks) params.members.push_back(static_cast<uint32_t>(r));
  // The others learn only that this rank failed: its reason is said here,
  // since the group may go on elsewhere (plane 0, the hosts) without an
  // error.
  auto agree = [&](const absl::Status& own) {
    if (!own.ok()) {
      NETFOLD_LOG(kWarning) << "rank " << options_.rank << ": cannot join group "
                            << info.group_id() << " in data plane " << plane << ": "
                            << own.message();
    }
    return AgreeOnStatus(group_oob, own);
  };
  if (info.plane() != plane || !data_path_->has_plane(info.plane())) {
    // The plane was agreed before the request (ChoosePlane): a manager
    // that placed it elsewhere is not one this library can follow.
    return agree(absl::InternalError(
        absl::StrFormat("the manager placed group %d in data plane %d, where this rank is not "
                        "attached",
                        info.group_id(), info.plane())));
  }
  joined.plane = info.plane();
  LeafLink& link = data_path_->link(joined.plane);
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast &&
      proto::kAggregationHeaderSize + params.slot_bytes > link.max_datagram_payload()) {
    mine = absl::FailedPreconditionError(absl::StrFormat(
        "a multicast result of %d + %d bytes does not fit this rank's path MTU of %d bytes: "
        "set NETFOLD_SLOT_BYTES to at most %d, or NETFOLD_DELIVERY=rc",
        proto::kAggregationHeaderSize, params.slot_bytes, link.max_datagram_payload(),
        link.max_datagram_payload() - proto::kAggregationHeaderSize));
  }
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast) {
    absl::StatusOr<transport::Ipv4Endpoint> mc =
        transport::ParseIpv4Endpoint(info.multicast_address());
    // Results are taken from the group root only (its data address and
    // port); from a manager that does not name it, the leaf.
    absl::StatusOr<transport::Ipv4Endpoint> root =
        info.root_data_address().empty() ? absl::StatusOr<transport::Ipv4Endpoint>(leaf_address_)
                                         : transport::ParseIpv4Endpoint(info.root_data_address());
    if (!mc.ok()) {
      mine = mc.status();
    } else if (!root.ok()) {
      mine = absl::InternalError(absl::StrFormat("the manager's root data address: %s",
                                                 root.status().message()));
    } else {
      mine = link.AttachMulticast(*mc, *root);
    }
    if (mine.ok()) joined.multicast = *mc;
  }
  joined.engine =
      std::make_unique<GroupEngine>(params, data_path_->sender(joined.plane), DataPath::clock());
  if (channel == 0) {
    setup.description = absl::StrFormat(
        "group %d: tree %d, root switch %s, %d switches, K=%d, P=%d, %s", info.group_id(),
        info.tree_id(), info.root_switch(), info.switches_size(), info.num_slots(),
        info.slot_bytes(), params.delivery == proto::DeliveryMode::kMulticast ? "multicast" : "rc");
  } else {
    absl::StrAppendFormat(&setup.description, "; channel %d: group %d, root switch %s",
                          channel, info.group_id(), info.root_switch());
  }
  // Everyone listens before anyone posts: otherwise a fast rank's first
  // multicast result could reach a member not yet attached.
  absl::Status all = agree(mine);
  if (!all.ok()) {
    if (joined.multicast) link.DetachMulticast(*joined.multicast);
    return all;
  }
  setup.channels.push_back(std::move(joined));
  return absl::OkStatus();
}

bool Context::FabricThere() {
  if (lost_fabric_) return false;
  ProgressThread::Inside inside(*progress_);
  if (fabric_failed_ || !data_path_->link().status().ok()) return false;
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
  for (Group* g : groups_) g->Orphan();  // groups outliving the context
  groups_.clear();
  data_path_.reset();
  manager_.reset();
}

}  // namespace netfold::host
