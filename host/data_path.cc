#include "host/data_path.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/awake_clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/link/soft_leaf_link.h"
#ifdef NETFOLD_HAVE_VERBS
#include "host/link/verbs_leaf_link.h"
#endif
#include "transport/udp_port.h"

namespace netfold::host {

absl::StatusOr<std::unique_ptr<DataPath>> DataPath::Create(const ContextOptions& options,
                                                           uint32_t slot_bytes) {
  std::unique_ptr<DataPath> path(new DataPath());
  // This rank's soft engine: a UDP port (with the configured faults) for
  // the host algorithms, and for the leaf link unless it uses verbs.
  transport::UdpPortConfig port_config;
  port_config.poll_window = options.poll_window;
  NETFOLD_ASSIGN_OR_RETURN(port_config.local,
                           transport::ParseIpv4Endpoint(options.local_address, 0));
  NETFOLD_ASSIGN_OR_RETURN(auto udp, transport::UdpPort::Create(port_config));
  NETFOLD_ASSIGN_OR_RETURN(transport::ImpairmentConfig faults,
                           transport::ParseImpairment(options.faults));
  path->port_ = new transport::ImpairedPort(std::move(udp), faults, faults, path->clock());
  path->endpoint_ = std::make_unique<transport::RoceEndpoint>(
      std::unique_ptr<transport::Port>(path->port_), path->clock());
  NETFOLD_ASSIGN_OR_RETURN(path->link_, path->CreateLeafLink(options, slot_bytes));
  path->soft_link_ = options.transport == ContextOptions::Transport::kSoft;
  path->sender_.link = path->link_.get();
  path->placer_.path = path.get();
  if (path->soft_link_ && options.place_results) path->port_->SetReceivePlacer(&path->placer_);
  return path;
}

size_t DataPath::Placer::PredictPlaces(const transport::Ipv4Endpoint& group,
                                       std::span<transport::ReceivePlace> out) {
  (void)group;  // a group's results come to its own address; most jobs have one group busy
  if (!armed) return 0;
  size_t n = 0;
  for (auto& [id, engine] : path->engines_) n += engine->PredictPlaces(out.subspan(n));
  return n;
}

bool DataPath::Placer::ClaimPlace(const transport::ReceivePlace& place,
                                  std::span<const uint8_t> head) {
  constexpr size_t kRoce = proto::RoceHeadersSize(proto::BthOpcode::kUdSendOnly);
  if (head.size() < kRoce + proto::kAggregationHeaderSize ||
      head[0] != static_cast<uint8_t>(proto::BthOpcode::kUdSendOnly)) {
    return false;
  }
  proto::AggregationHeader h;
  if (proto::ParseAggregationHeader(head.subspan(kRoce), &h) != proto::AggregationParseResult::kOk) {
    return false;
  }
  auto it = path->engines_.find(h.group_id);
  return it != path->engines_.end() && it->second->ClaimPlace(h, place);
}

DataPath::~DataPath() {
  engines_.clear();
  link_.reset();
  endpoint_.reset();
}

absl::StatusOr<std::unique_ptr<LeafLink>> DataPath::CreateLeafLink(const ContextOptions& options,
                                                                   uint32_t slot_bytes) {
  if (options.transport == ContextOptions::Transport::kSoft) {
    NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<SoftLeafLink> soft,
                             SoftLeafLink::Create(endpoint_.get(), port_));
    return std::unique_ptr<LeafLink>(std::move(soft));
  }
#ifdef NETFOLD_HAVE_VERBS
  VerbsLinkOptions vo;
  vo.local_address = options.local_address;
  vo.device = options.verbs_device;
  vo.port = static_cast<uint8_t>(options.verbs_port);
  vo.gid_index = options.verbs_gid_index;
  vo.path_mtu = options.verbs_mtu;
  vo.max_message = static_cast<uint32_t>(proto::kAggregationHeaderSize) + slot_bytes;
  absl::StatusOr<std::unique_ptr<VerbsLeafLink>> verbs = VerbsLeafLink::Create(vo);
  if (!verbs.ok()) {
    return absl::Status(verbs.status().code(),
                        absl::StrFormat("rank %d: NETFOLD_TRANSPORT=verbs: %s", options.rank,
                                        verbs.status().message()));
  }
  return std::unique_ptr<LeafLink>(*std::move(verbs));
#else
  (void)slot_bytes;
  return absl::FailedPreconditionError(
      "NETFOLD_TRANSPORT=verbs: this libnetfold was built without rdma-core (meson option "
      "-Dverbs=enabled needs libibverbs-dev and librdmacm-dev)");
#endif
}

void DataPath::Route(uint32_t group_id, GroupEngine* engine) {
  engines_[group_id] = engine;
  // Each engine keeps up to K requests in flight on the one link, and
  // the link's queue holds them until the switch acknowledges them.
  // Their results come back by multicast into the port's buffers.
  reserved_requests_ += engine->params().num_slots;
  reserved_result_bytes_ +=
      size_t{engine->params().num_slots} * (engine->params().slot_bytes + kResultOverhead);
  link_->ReserveRequests(reserved_requests_ + kRequestsBeyondWindows);
  if (soft_link_) port_->ReserveReceive(reserved_result_bytes_);  // a NIC's come elsewhere
}

void DataPath::Unroute(uint32_t group_id) { engines_.erase(group_id); }

void DataPath::PostFailure(std::optional<uint32_t> group_id, absl::Status why) {
  absl::MutexLock lock(&failures_mu_);
  failures_.push_back({group_id, std::move(why)});
  has_failures_.store(true, std::memory_order_release);
}

void DataPath::ApplyFailures() {
  if (!has_failures_.load(std::memory_order_acquire)) return;
  std::vector<Failure> failures;
  {
    absl::MutexLock lock(&failures_mu_);
    failures.swap(failures_);
    has_failures_.store(false, std::memory_order_relaxed);
  }
  for (const Failure& f : failures) {
    if (!f.group_id) {
      for (auto& [id, engine] : engines_) engine->Fail(f.why);
    } else if (auto it = engines_.find(*f.group_id); it != engines_.end()) {
      it->second->Fail(f.why);
    }
  }
}

void DataPath::PollEngines(bool timers) {
  for (auto& [id, engine] : engines_) {
    if (timers) {
      engine->Poll();
    } else {
      engine->Post();
    }
  }
  link_->Flush();
}

void DataPath::Progress(absl::Duration timeout) {
  ApplyFailures();
  // Requests out before the wait; repair timers only after what has
  // arrived is read (a result waiting unread is not lost).
  PollEngines(/*timers=*/false);
  absl::Duration wait = timeout;
  auto until = [&](std::optional<int64_t> t) {
    if (t) wait = std::min(wait, absl::Nanoseconds(std::max<int64_t>(0, *t - clock().NowNanos())));
  };
  for (auto& [id, engine] : engines_) until(engine->NextTimerNs());
  // With a NIC link the soft engine (the host algorithms' queue pairs) is
  // not behind the link's wait: wake for its timers, move it below.
  if (!soft_link_) until(endpoint_->NextTimerNs());
  // One reading of the clock serves up to kMessagesPerReading messages of
  // a burst (a result's round-trip sample is then at most that many
  // messages' handling early): a reading per result was a few per cent of
  // a rank's CPU (docs/performance.md, "The awake clock without its
  // mutex").
  constexpr int kMessagesPerReading = 16;
  int64_t burst_ns = 0;
  int since_reading = kMessagesPerReading;
  auto deliver = [&](const LinkMessage& m) {
    const std::span<const uint8_t> message = m.bytes;
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    proto::AggregationParseResult r = proto::ParseAggregationMessage(message, &h, &elements);
    if (r == proto::AggregationParseResult::kOk && !m.placed.empty()) {
      // Its elements are in the caller's buffer, where the port wrote them
      // (Placer); the hole they left in `message` must be exactly theirs.
      if (h.has_tag || elements.data() != message.data() + m.placed_at ||
          elements.size() != m.placed.size()) {
        r = proto::AggregationParseResult::kBadPayloadLength;
      } else {
        elements = m.placed;
      }
    }
    if (r != proto::AggregationParseResult::kOk) {
      // A switch validates what it sends: this came from elsewhere, or was
      // built wrong. Dropped and counted (packets_dropped).
      ++messages_dropped_;
      NETFOLD_LOG(kDebug) << "dropped a " << message.size()
                          << "-byte message with a malformed aggregation header ("
                          << proto::AggregationParseResultName(r) << ")";
      return;
    }
    auto it = engines_.find(h.group_id);
    if (it == engines_.end()) {
      ++messages_dropped_;  // a group destroyed since, or not ours
      return;
    }
    if (since_reading++ >= kMessagesPerReading) {
      burst_ns = clock().NowNanos();
      since_reading = 1;
    }
    it->second->OnMessage(h, elements, message, burst_ns);
  };
  // A process that was not scheduled for a while finds many bursts
  // waiting: read them (a bounded number) before judging any result lost.
  // A read that took everything there was ends it: asking again at once
  // was a system call that found nothing two times in three
  // (docs/performance.md, "Reads that found nothing").
  constexpr int kMaxBursts = 16;
  placer_.armed = true;
  for (int burst = 0; burst < kMaxBursts; ++burst) {
    since_reading = kMessagesPerReading;  // a wait may come first
    if (link_->Progress(wait, deliver) == 0 || !link_->MayHoldMore()) break;
    wait = absl::ZeroDuration();
  }
  placer_.armed = false;
  if (!soft_link_) endpoint_->Progress(absl::ZeroDuration());
  if (absl::Status link = link_->status(); !link.ok()) {
    for (auto& [id, engine] : engines_) {
      engine->Fail(WithErrorCode(link, NETFOLD_ERR_UNAVAILABLE));
    }
  }
  PollEngines(/*timers=*/true);
}

}  // namespace netfold::host
