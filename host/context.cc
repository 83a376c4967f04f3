#include "host/context.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/link/soft_leaf_link.h"
#ifdef NETFOLD_HAVE_VERBS
#include "host/link/verbs_leaf_link.h"
#endif
#include "proto/control/netfold_control.grpc.pb.h"
#include "proto/control/netfold_control.pb.h"
#include "transport/udp_port.h"

namespace netfold::host {

using transport::Ipv4Endpoint;

namespace {

absl::Status FromGrpc(const grpc::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrFormat("%s: %s", what, s.error_message()));
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

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

// The group's planned tree with group ranks as leaves (tree-order mode);
// nullopt if the manager did not send it or it does not describe exactly
// the group's members.
std::optional<algorithms::TreeSpec> FabricTree(const control::GroupInfo& info,
                                               const std::vector<int>& world_ranks) {
  algorithms::TreeSpec tree;
  for (const control::GroupNode& node : info.nodes()) {
    std::vector<int>& children = tree.children.emplace_back();
    for (int32_t c : node.children()) {
      if (c >= 0) {
        children.push_back(c);
        continue;
      }
      const int world = -1 - c;
      auto it = std::find(world_ranks.begin(), world_ranks.end(), world);
      if (it == world_ranks.end()) return std::nullopt;
      children.push_back(-1 - static_cast<int>(it - world_ranks.begin()));
    }
  }
  if (tree.children.empty() || !tree.Validate(static_cast<uint32_t>(world_ranks.size())).ok()) {
    return std::nullopt;
  }
  return tree;
}

}  // namespace

absl::Status ApplyEnvironment(ContextOptions* o) {
  if (std::string v = Env("NETFOLD_MANAGER"); !v.empty() && o->manager.empty()) o->manager = v;
  if (o->manager.empty()) o->manager = "127.0.0.1:47910";
  if (std::string v = Env("NETFOLD_HOST"); !v.empty() && o->host_name.empty()) o->host_name = v;
  if (o->host_name.empty()) o->host_name = absl::StrFormat("h%d", o->rank);
  if (std::string v = Env("NETFOLD_LOCAL_ADDRESS"); !v.empty()) o->local_address = v;
  if (std::string v = Env("NETFOLD_FAULTS"); !v.empty() && o->faults.empty()) o->faults = v;
  if (std::string v = Env("NETFOLD_TIMEOUT_MS"); !v.empty()) {
    int ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_TIMEOUT_MS='%s' is not a positive number of milliseconds", v));
    }
    o->timeout = absl::Milliseconds(ms);
  }
  auto number = [](const char* name, uint32_t* out) -> absl::Status {
    std::string v = Env(name);
    if (v.empty() || *out != 0) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out) || *out == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s='%s' is not a positive number", name, v));
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_SLOTS", &o->num_slots));
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_SLOT_BYTES", &o->slot_bytes));
  if (std::string v = Env("NETFOLD_DELIVERY"); !v.empty()) {
    if (v == "multicast") {
      o->delivery = proto::DeliveryMode::kMulticast;
    } else if (v == "rc" || v == "rc_tree") {
      o->delivery = proto::DeliveryMode::kRcTree;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_DELIVERY='%s': use multicast or rc", v));
    }
  }
  if (std::string v = Env("NETFOLD_ALGORITHM"); !v.empty()) {
    NETFOLD_ASSIGN_OR_RETURN(o->algorithm, algorithms::ParseAlgorithmPolicy(v));
  }
  if (std::string v = Env("NETFOLD_TRANSPORT"); !v.empty()) {
    if (v == "soft") {
      o->transport = ContextOptions::Transport::kSoft;
    } else if (v == "verbs") {
      o->transport = ContextOptions::Transport::kVerbs;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_TRANSPORT='%s': use soft or verbs", v));
    }
  }
  if (std::string v = Env("NETFOLD_VERBS_DEVICE"); !v.empty() && o->verbs_device.empty()) {
    o->verbs_device = v;
  }
  auto bounded = [](const char* name, uint32_t max, uint32_t* out) -> absl::Status {
    std::string v = Env(name);
    if (v.empty()) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out) || *out > max) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s='%s' is not a number from 0 to %d", name, v, max));
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_PORT", 255, &o->verbs_port));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_MTU", 4096, &o->verbs_mtu));
  if (!Env("NETFOLD_POLL_US").empty()) {
    uint32_t us = 0;
    NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_POLL_US", 1000000, &us));
    o->poll_window = absl::Microseconds(us);
  }
  if (!Env("NETFOLD_VERBS_GID_INDEX").empty()) {
    uint32_t index = 0;
    NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_GID_INDEX", 255, &index));
    o->verbs_gid_index = index;
  }
  if (std::string v = Env("NETFOLD_PARTITION"); !v.empty()) {
    if (v == "default") {
      o->default_partition = true;
    } else if (v != "job") {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_PARTITION='%s': use job or default", v));
    }
  }
  if (auto level = Env("NETFOLD_LOG_LEVEL"); !level.empty() && !ParseLogLevel(level)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NETFOLD_LOG_LEVEL='%s': use error, warning, info, debug or trace", level));
  }
  return absl::OkStatus();
}

// The gRPC side: a channel, the stub, and the credentials of the job.
// Calls the manager with the remaining time of `deadline` as the RPC
// deadline; UNAVAILABLE (the manager restarting, not reachable yet) is
// retried until the deadline, other errors return at once.
template <typename Rpc>
absl::Status CallManager(Deadline deadline, std::string_view what, Rpc rpc) {
  absl::Status s;
  do {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(std::max<int64_t>(
                       1, absl::ToInt64Milliseconds(deadline.Remaining()))));
    s = FromGrpc(rpc(&c), what);
    if (s.ok() || !absl::IsUnavailable(s)) return s;
    absl::SleepFor(absl::Milliseconds(100));
  } while (!deadline.Expired());
  return s;
}

struct Context::ManagerClient {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<control::HostControl::Stub> stub;
  control::JobCredentials creds;
  std::unique_ptr<grpc::ClientContext> watch_context;
  absl::Mutex watch_mu;
  std::thread heartbeat_thread;

  void Deadline(grpc::ClientContext* c, absl::Duration d) {
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(d)));
  }
};

Context::Context(const ContextOptions& options) : options_(options) { leaf_sender_.ctx = this; }

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
    if (options.rank == 0 && ctx->job_id_ != 0) (void)ctx->DestroyJobAtManager();
    return all;
  }
  ctx->control_thread_ = std::thread([c = ctx.get()] { c->RunControlThread(); });
  return ctx;
}

absl::Status Context::Join(Oob& world) {
  manager_ = std::make_unique<ManagerClient>();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  manager_->channel = grpc::CreateCustomChannel(options_.manager,
                                                grpc::InsecureChannelCredentials(), args);
  manager_->stub = control::HostControl::NewStub(manager_->channel);

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
  const uint8_t wants_default =
      options_.default_partition || options_.transport == ContextOptions::Transport::kVerbs;
  std::vector<uint8_t> partitions(static_cast<size_t>(options_.world_size));
  NETFOLD_RETURN_IF_ERROR(world.Allgather(&wants_default, partitions.data(), 1));
  const bool default_partition =
      std::any_of(partitions.begin(), partitions.end(), [](uint8_t v) { return v != 0; });

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
    req.set_default_partition(default_partition);
    control::CreateJobResponse resp;
    absl::Status s = CallManager(
        Deadline(RealClock(), options_.timeout),
        absl::StrFormat("creating the job at the manager %s", options_.manager),
        [&](grpc::ClientContext* c) { return manager_->stub->CreateJob(c, req, &resp); });
    outcome = EncodeOutcome(s, resp.SerializeAsString());
  }
  NETFOLD_RETURN_IF_ERROR(world.BcastString(&outcome, 0));
  NETFOLD_ASSIGN_OR_RETURN(std::string payload, DecodeOutcome(outcome));
  control::CreateJobResponse job;
  if (!job.ParseFromString(payload)) return absl::InternalError("malformed job description");
  job_id_ = job.job_id();
  job_key_ = job.job_key();
  pkey_ = static_cast<uint16_t>(job.pkey());
  qkey_ = job.qkey();
  if (job.quota().num_slots() > 0) num_slots_ = job.quota().num_slots();
  if (job.quota().slot_bytes() > 0) slot_bytes_ = job.quota().slot_bytes();
  max_groups_ = job.quota().max_groups();
  if (job.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(job.heartbeat_interval_ms());
  }
  manager_->creds.set_job_id(job_id_);
  manager_->creds.set_job_key(job_key_);

  // This rank's soft engine: a UDP port (with the configured faults) for
  // the host algorithms, and for the leaf link unless it uses verbs.
  transport::UdpPortConfig port_config;
  port_config.poll_window = options_.poll_window;
  NETFOLD_ASSIGN_OR_RETURN(port_config.local,
                           transport::ParseIpv4Endpoint(options_.local_address, 0));
  NETFOLD_ASSIGN_OR_RETURN(auto udp, transport::UdpPort::Create(port_config));
  NETFOLD_ASSIGN_OR_RETURN(transport::ImpairmentConfig faults,
                           transport::ParseImpairment(options_.faults));
  port_ = new transport::ImpairedPort(std::move(udp), faults, faults, RealClock());
  endpoint_ = std::make_unique<transport::RoceEndpoint>(std::unique_ptr<transport::Port>(port_),
                                                        RealClock());
  NETFOLD_ASSIGN_OR_RETURN(link_, CreateLeafLink());
  absl::BitGen gen;
  const uint32_t psn = absl::Uniform<uint32_t>(gen, 0, 1u << 24);

  control::AttachRequest attach;
  *attach.mutable_job() = manager_->creds;
  attach.set_rank(static_cast<uint32_t>(options_.rank));
  attach.mutable_endpoint()->set_address(link_->address());
  attach.mutable_endpoint()->set_qpn(link_->qpn());
  attach.mutable_endpoint()->set_psn(psn);
  control::AttachResponse attached;
  Deadline deadline(RealClock(), options_.timeout);
  absl::Status s;
  do {  // UNAVAILABLE while the leaf switch is not up yet: retry
    grpc::ClientContext c;
    manager_->Deadline(&c, deadline.Remaining());
    s = FromGrpc(manager_->stub->Attach(&c, attach, &attached),
                 absl::StrFormat("rank %d attaching to its leaf switch", options_.rank));
    if (s.ok() || !absl::IsUnavailable(s)) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (!deadline.Expired());
  NETFOLD_RETURN_IF_ERROR(s);
  LeafPeer peer;
  NETFOLD_ASSIGN_OR_RETURN(peer.remote,
                           transport::ParseIpv4Endpoint(attached.switch_endpoint().address()));
  peer.remote_qpn = attached.switch_endpoint().qpn();
  peer.rq_psn = attached.switch_endpoint().psn();
  peer.sq_psn = psn;
  peer.pkey = pkey_;
  peer.qkey = qkey_;
  NETFOLD_RETURN_IF_ERROR(link_->Connect(peer));
  NETFOLD_LOG(kInfo) << absl::StrFormat(
      "rank %d joined job %d: %s QP 0x%06x -> %s %s QP 0x%06x (%s transport, P_Key 0x%04x)",
      options_.rank, job_id_, link_->address(), link_->qpn(), attached.leaf_switch(),
      peer.remote.ToString(), peer.remote_qpn,
      options_.transport == ContextOptions::Transport::kVerbs ? "verbs" : "soft", pkey_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LeafLink>> Context::CreateLeafLink() {
  if (options_.transport == ContextOptions::Transport::kSoft) {
    NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<SoftLeafLink> soft,
                             SoftLeafLink::Create(endpoint_.get(), port_));
    return std::unique_ptr<LeafLink>(std::move(soft));
  }
#ifdef NETFOLD_HAVE_VERBS
  VerbsLinkOptions vo;
  vo.local_address = options_.local_address;
  vo.device = options_.verbs_device;
  vo.port = static_cast<uint8_t>(options_.verbs_port);
  vo.gid_index = options_.verbs_gid_index;
  vo.path_mtu = options_.verbs_mtu;
  vo.max_message = static_cast<uint32_t>(proto::kAggregationHeaderSize) + slot_bytes_;
  absl::StatusOr<std::unique_ptr<VerbsLeafLink>> verbs = VerbsLeafLink::Create(vo);
  if (!verbs.ok()) {
    return absl::Status(verbs.status().code(),
                        absl::StrFormat("rank %d: NETFOLD_TRANSPORT=verbs: %s", options_.rank,
                                        verbs.status().message()));
  }
  return std::unique_ptr<LeafLink>(*std::move(verbs));
#else
  return absl::FailedPreconditionError(
      "NETFOLD_TRANSPORT=verbs: this libnetfold was built without rdma-core (meson option "
      "-Dverbs=enabled needs libibverbs-dev and librdmacm-dev)");
#endif
}

void Context::RunControlThread() {
  // Heartbeats in their own small thread; this one blocks on the event stream.
  manager_->heartbeat_thread = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(heartbeat_interval_)) {
      control::HostHeartbeatRequest req;
      *req.mutable_job() = manager_->creds;
      req.set_rank(static_cast<uint32_t>(options_.rank));
      control::HostHeartbeatResponse resp;
      grpc::ClientContext c;
      manager_->Deadline(&c, heartbeat_interval_);
      grpc::Status s = manager_->stub->Heartbeat(&c, req, &resp);
      if (!s.ok()) NETFOLD_LOG(kDebug) << "heartbeat: " << s.error_message();
    }
  });
  uint64_t last_sequence = 0;
  while (!stop_.HasBeenNotified()) {
    control::WatchEventsRequest req;
    *req.mutable_job() = manager_->creds;
    req.set_rank(static_cast<uint32_t>(options_.rank));
    req.set_after_sequence(last_sequence);
    {
      absl::MutexLock lock(&manager_->watch_mu);
      if (stop_.HasBeenNotified()) break;
      manager_->watch_context = std::make_unique<grpc::ClientContext>();
    }
    auto reader = manager_->stub->WatchEvents(manager_->watch_context.get(), req);
    auto event = std::make_unique<control::JobEvent>();
    while (reader->Read(event.get())) {
      if (event->sequence() > 0) last_sequence = event->sequence();
      if (event->kind() != control::JobEvent::WATCH_STARTED) {
        absl::MutexLock lock(&events_mu_);
        events_.push_back(std::move(event));
        has_events_ = true;
      }
      event = std::make_unique<control::JobEvent>();
    }
    grpc::Status s = reader->Finish();
    if (stop_.HasBeenNotified()) break;
    NETFOLD_LOG(kDebug) << "event stream ended: " << s.error_message() << "; reconnecting";
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));  // back off, then watch again
  }
}

void Context::HandleEvent(const control::JobEvent& e) {
  auto fail_group = [&](uint64_t id, absl::Status why) {
    auto it = groups_.find(static_cast<uint32_t>(id));
    if (it != groups_.end()) it->second->engine_->Fail(why);
  };
  switch (e.kind()) {
    case control::JobEvent::GROUP_REVOKED:
      fail_group(e.group_id(), WithErrorCode(absl::AbortedError(absl::StrFormat(
                                   "group %d was revoked: %s", e.group_id(), e.reason())),
                               NETFOLD_ERR_ABORTED));
      break;
    case control::JobEvent::GROUP_REPLANNED:
      fail_group(e.group_id(), WithErrorCode(absl::AbortedError(absl::StrFormat(
                                   "group %d was re-planned (%s): recreate it", e.group_id(),
                                   e.reason())),
                               NETFOLD_ERR_ABORTED));
      break;
    case control::JobEvent::RANK_DETACHED:
    case control::JobEvent::JOB_DESTROYED:
      for (auto& [id, g] : groups_) {
        g->engine_->Fail(WithErrorCode(
            absl::UnavailableError(absl::StrFormat("the job lost its fabric: %s", e.reason())),
            NETFOLD_ERR_UNAVAILABLE));
      }
      break;
    default:
      break;
  }
}

void Context::Progress(absl::Duration timeout) {
  if (has_events_.load(std::memory_order_relaxed)) {
    std::deque<std::unique_ptr<control::JobEvent>> events;
    {
      absl::MutexLock lock(&events_mu_);
      events.swap(events_);
      has_events_ = false;
    }
    for (const auto& e : events) HandleEvent(*e);
  }
  for (auto& [id, g] : groups_) g->engine_->Poll();
  link_->Flush();
  absl::Duration wait = timeout;
  for (auto& [id, g] : groups_) {
    if (auto t = g->engine_->NextTimerNs()) {
      wait = std::min(wait, absl::Nanoseconds(std::max<int64_t>(0, *t - RealClock().NowNanos())));
    }
  }
  auto deliver = [&](std::span<const uint8_t> message) {
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseAggregationMessage(message, &h, &elements) !=
        proto::AggregationParseResult::kOk) {
      return;  // counted by nobody but harmless; the switch validates what it sends
    }
    auto it = groups_.find(h.group_id);
    if (it != groups_.end()) it->second->engine_->OnMessage(h, elements);
  };
  link_->Progress(wait, deliver);
  if (absl::Status link = link_->status(); !link.ok()) {
    for (auto& [id, g] : groups_) {
      g->engine_->Fail(WithErrorCode(std::move(link), NETFOLD_ERR_UNAVAILABLE));
    }
  }
  for (auto& [id, g] : groups_) g->engine_->Poll();
  link_->Flush();
}

absl::StatusOr<std::unique_ptr<Group>> Context::CreateGroup(Oob& group_oob,
                                                           const std::vector<int>& world_ranks) {
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
  auto group = std::unique_ptr<Group>(new Group(this));
  group->group_rank_ = group_oob.rank();
  group->world_ranks_ = world_ranks;
  auto connect_hosts = [&](std::optional<alg::TreeSpec> fabric_tree) -> absl::Status {
    HostCollectivesOptions ho;
    ho.policy = policy;
    ho.pkey = pkey_;
    ho.op_timeout = options_.timeout;
    ho.fabric_tree = std::move(fabric_tree);
    absl::StatusOr<std::unique_ptr<HostCollectives>> hc =
        HostCollectives::Connect(endpoint_.get(), group_oob, ho);
    if (!hc.ok()) return hc.status();
    group->host_ = *std::move(hc);
    return absl::OkStatus();
  };
  auto host_group = [&](const std::string& why) -> absl::StatusOr<std::unique_ptr<Group>> {
    NETFOLD_RETURN_IF_ERROR(connect_hosts(std::nullopt));
    group->mode_ = Group::Mode::kHost;
    group->description_ = absl::StrFormat("host group of %d ranks (NETFOLD_ALGORITHM=%s): %s",
                                          world_ranks.size(),
                                          alg::AlgorithmPolicyName(policy), why);
    if (!hosts_only && group_oob.rank() == 0) NETFOLD_LOG(kWarning) << group->description_;
    all_groups_.push_back(group.get());
    return std::move(group);
  };
  if (hosts_only) return host_group("the policy asks for host algorithms");

  std::string outcome;
  if (group_oob.rank() == 0) {
    control::CreateGroupRequest req;
    *req.mutable_job() = manager_->creds;
    for (int r : world_ranks) req.add_ranks(static_cast<uint32_t>(r));
    req.set_num_slots(options_.num_slots);
    req.set_slot_bytes(options_.slot_bytes);
    req.set_delivery(options_.delivery == proto::DeliveryMode::kRcTree
                         ? control::DELIVERY_RC_DOWN
                         : control::DELIVERY_MULTICAST);
    // A tag makes the request idempotent, so a retry after a lost answer
    // cannot create a second group.
    req.set_tag(absl::StrFormat("rank%d-group%d", options_.rank, ++groups_created_));
    control::CreateGroupResponse resp;
    absl::Status s = CallManager(Deadline(RealClock(), options_.timeout), "creating a group",
                                 [&](grpc::ClientContext* c) {
                                   return manager_->stub->CreateGroup(c, req, &resp);
                                 });
    if (absl::IsResourceExhausted(s)) s = WithErrorCode(s, NETFOLD_ERR_NO_RESOURCES);
    outcome = EncodeOutcome(s, resp.group().SerializeAsString());
  }
  NETFOLD_RETURN_IF_ERROR(group_oob.BcastString(&outcome, 0));
  absl::StatusOr<std::string> payload = DecodeOutcome(outcome);
  if (!payload.ok()) {
    // The fabric cannot serve the group (no resources, a switch or the
    // manager gone): the hosts can, unless the policy forbids it.
    if (may_fall_back &&
        (absl::IsResourceExhausted(payload.status()) || absl::IsUnavailable(payload.status()) ||
         absl::IsDeadlineExceeded(payload.status()) || absl::IsFailedPrecondition(payload.status()))) {
      return host_group(std::string(payload.status().message()));
    }
    return payload.status();
  }
  control::GroupInfo info;
  if (!info.ParseFromString(*payload)) return absl::InternalError("malformed group description");

  group->group_id_ = info.group_id();
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
  params.op_timeout = options_.timeout;
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast &&
      proto::kAggregationHeaderSize + params.slot_bytes > link_->max_datagram_payload()) {
    mine = absl::FailedPreconditionError(absl::StrFormat(
        "a multicast result of %d + %d bytes does not fit this rank's path MTU of %d bytes: "
        "set NETFOLD_SLOT_BYTES to at most %d, or NETFOLD_DELIVERY=rc",
        proto::kAggregationHeaderSize, params.slot_bytes, link_->max_datagram_payload(),
        link_->max_datagram_payload() - proto::kAggregationHeaderSize));
  }
  if (mine.ok() && params.delivery == proto::DeliveryMode::kMulticast) {
    auto mc = transport::ParseIpv4Endpoint(info.multicast_address());
    if (!mc.ok()) {
      mine = mc.status();
    } else {
      mine = link_->AttachMulticast(*mc);
      if (mine.ok()) group->multicast_ = *mc;
    }
  }
  group->engine_ = std::make_unique<GroupEngine>(params, &leaf_sender_, RealClock());
  group->description_ = absl::StrFormat(
      "group %d: tree %d, root switch %s, %d switches, K=%d, P=%d, %s", info.group_id(),
      info.tree_id(), info.root_switch(), info.switches_size(), info.num_slots(),
      info.slot_bytes(), params.delivery == proto::DeliveryMode::kMulticast ? "multicast" : "rc");
  // Everyone listens before anyone posts: otherwise a fast rank's first
  // multicast result could reach a member not yet attached.
  NETFOLD_RETURN_IF_ERROR(AgreeOnStatus(group_oob, mine));
  // The hosts stand by to take over if the fabric fails mid-job.
  if (may_fall_back) {
    absl::Status hosts = connect_hosts(FabricTree(info, world_ranks));
    NETFOLD_RETURN_IF_ERROR(AgreeOnStatus(group_oob, hosts));
  }
  Register(group.get());
  return group;
}

absl::Status Context::LeafSender::SendRequest(std::span<const uint8_t> message) {
  return ctx->link_->PostRequest(message);
}

absl::Status Context::DestroyGroupAtManager(uint64_t group_id) {
  control::DestroyGroupRequest req;
  *req.mutable_job() = manager_->creds;
  req.set_group_id(group_id);
  control::DestroyGroupResponse resp;
  return CallManager(Deadline(RealClock(), options_.timeout), "destroying a group",
                     [&](grpc::ClientContext* c) {
                       return manager_->stub->DestroyGroup(c, req, &resp);
                     });
}

void Context::Register(Group* g) {
  groups_[static_cast<uint32_t>(g->group_id_)] = g;
  all_groups_.push_back(g);
}

void Context::Unregister(Group* g) {
  if (auto it = std::find(all_groups_.begin(), all_groups_.end(), g); it != all_groups_.end()) {
    all_groups_.erase(it);
    retired_host_ops_ += g->host_ops_;
    retired_failovers_ += g->failed_over_ ? 1 : 0;
  }
  if (g->engine_ == nullptr) return;  // the hosts served it from the start
  auto it = groups_.find(static_cast<uint32_t>(g->group_id_));
  if (it != groups_.end() && it->second == g) {
    const GroupEngineStats& s = g->engine_->stats();
    retired_.ops_started += s.ops_started;
    retired_.ops_completed += s.ops_completed;
    retired_.ops_failed += s.ops_failed;
    retired_.chunks_posted += s.chunks_posted;
    retired_.results_received += s.results_received;
    retired_.duplicate_results += s.duplicate_results;
    retired_.repairs_sent += s.repairs_sent;
    retired_.bytes_sent += s.bytes_sent;
    retired_.bytes_received += s.bytes_received;
    retired_.unexpected_messages += s.unexpected_messages;
    groups_.erase(it);
  }
  if (g->multicast_ && link_ != nullptr) link_->DetachMulticast(*g->multicast_);
}

ContextStats Context::stats() const {
  ContextStats out;
  out.engines = retired_;
  out.host_ops = retired_host_ops_;
  out.failovers = retired_failovers_;
  for (const Group* g : all_groups_) {
    out.host_ops += g->host_ops_;
    out.failovers += g->failed_over_ ? 1 : 0;
  }
  for (const auto& [id, g] : groups_) {
    const GroupEngineStats& s = g->engine_->stats();
    out.engines.ops_started += s.ops_started;
    out.engines.ops_completed += s.ops_completed;
    out.engines.ops_failed += s.ops_failed;
    out.engines.chunks_posted += s.chunks_posted;
    out.engines.results_received += s.results_received;
    out.engines.duplicate_results += s.duplicate_results;
    out.engines.repairs_sent += s.repairs_sent;
    out.engines.bytes_sent += s.bytes_sent;
    out.engines.bytes_received += s.bytes_received;
    out.engines.unexpected_messages += s.unexpected_messages;
  }
  if (link_ != nullptr) {
    const LeafLinkStats link = link_->stats();
    out.link_tx_bytes = link.tx_bytes;
    out.link_rx_bytes = link.rx_bytes;
    out.retransmissions = link.retransmissions;
    out.packets_dropped = link.packets_dropped;
  }
  return out;
}

absl::Status Context::Finalize(Oob& world) {
  absl::Status result = world.Barrier();
  if (options_.rank == 0 && manager_ != nullptr && job_id_ != 0) {
    absl::Status s = DestroyJobAtManager();
    if (result.ok()) result = s;
  }
  return result;
}

absl::Status Context::DestroyJobAtManager() {
  control::DestroyJobRequest req;
  *req.mutable_job() = manager_->creds;
  control::DestroyJobResponse resp;
  return CallManager(Deadline(RealClock(), options_.timeout), "destroying the job",
                     [&](grpc::ClientContext* c) {
                       return manager_->stub->DestroyJob(c, req, &resp);
                     });
}

Context::~Context() {
  stop_.Notify();
  if (manager_ != nullptr) {
    absl::MutexLock lock(&manager_->watch_mu);
    if (manager_->watch_context) manager_->watch_context->TryCancel();
  }
  if (control_thread_.joinable()) control_thread_.join();
  if (manager_ != nullptr && manager_->heartbeat_thread.joinable()) {
    manager_->heartbeat_thread.join();
  }
  for (Group* g : all_groups_) g->ctx_ = nullptr;  // groups outliving the context
  all_groups_.clear();
  groups_.clear();
  link_.reset();
  endpoint_.reset();
}

}  // namespace netfold::host
