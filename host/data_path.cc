#include "host/data_path.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/awake_clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "host/link/soft_leaf_link.h"
#include "proto/control/plane_name.h"
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
  path->links_.resize(1);
  path->links_[0].ready = true;
  NETFOLD_ASSIGN_OR_RETURN(path->links_[0].link, path->CreateLeafLink(options, slot_bytes));
  path->links_[0].sender = std::make_unique<LeafSender>();
  path->links_[0].sender->link = path->links_[0].link.get();
  path->wake_link_ = path->links_[0].link.get();
  path->reserved_requests_.assign(1, 0);
  path->soft_link_ = options.transport == ContextOptions::Transport::kSoft;
  path->placer_.path = path.get();
  if (path->soft_link_ && options.place_results) path->port_->SetReceivePlacer(&path->placer_);
  return path;
}

size_t DataPath::Placer::PredictPlaces(const transport::Ipv4Endpoint& group,
                                       std::span<transport::ReceivePlace> out) {
  if (!armed) return 0;
  // The engines whose results come to `group` (a group with channels has
  // one busy per channel, each on its own address); an engine routed
  // without its address may be any.
  size_t n = 0;
  for (auto& [id, routed] : path->engines_) {
    if (routed.multicast.has_value() && *routed.multicast != group) continue;
    n += routed.engine->PredictPlaces(out.subspan(n));
  }
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
  return it != path->engines_.end() && it->second.engine->ClaimPlace(h, place);
}

DataPath::~DataPath() {
  engines_.clear();
  links_.clear();
  endpoint_.reset();
}

absl::StatusOr<LeafLink*> DataPath::AddPlane(uint32_t plane, uint32_t* psn) {
  *psn = 0;
  if (plane == 0 || plane >= control::kMaxPlanes) {
    return absl::InvalidArgumentError(absl::StrFormat("no data plane %d to add", plane));
  }
  if (has_plane(plane)) return links_[plane].link.get();
  if (plane < links_.size() && links_[plane].link != nullptr) {
    PlaneLink& pending = links_[plane];
    if (pending.attaching) {
      return absl::FailedPreconditionError(
          absl::StrFormat("data plane %d is being attached by another call", plane));
    }
    pending.attaching = true;  // an attach that got no answer: retried as it was
    *psn = pending.psn;
    return pending.link.get();
  }
  if (!soft_link_) {
    return absl::FailedPreconditionError(
        "data planes other than 0 need NETFOLD_TRANSPORT=soft (a NIC link is one QP)");
  }
  // Another QP on the same engine and port: the planes' messages are read
  // together and each link takes its own. Its stats leave the port's
  // counters to plane 0's link, which counts them once.
  NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<SoftLeafLink> soft,
                           SoftLeafLink::Create(endpoint_.get(), nullptr));
  if (links_.size() <= plane) {
    links_.resize(plane + 1);
    reserved_requests_.resize(plane + 1, 0);
  }
  links_[plane].link = std::move(soft);
  links_[plane].sender = std::make_unique<LeafSender>();
  links_[plane].sender->link = links_[plane].link.get();
  links_[plane].attaching = true;
  return links_[plane].link.get();
}

void DataPath::AttachFailed(uint32_t plane, uint32_t psn) {
  if (plane == 0 || plane >= links_.size() || links_[plane].ready) return;
  links_[plane].attaching = false;
  links_[plane].psn = psn;
}

void DataPath::MarkPlaneReady(uint32_t plane) {
  if (plane < links_.size() && links_[plane].link != nullptr) {
    links_[plane].ready = true;
    links_[plane].attaching = false;
  }
}

void DataPath::RemovePlane(uint32_t plane) {
  if (plane == 0 || plane >= links_.size() || links_[plane].ready) return;
  links_[plane] = PlaneLink();
}

absl::Status DataPath::ReconnectLink(uint32_t plane, const LeafPeer& peer) {
  if (!has_plane(plane)) {
    return absl::FailedPreconditionError(absl::StrFormat("no data plane %d to reconnect", plane));
  }
  NETFOLD_RETURN_IF_ERROR(links_[plane].link->Reconnect(peer));
  links_[plane].failure_told = false;
  return absl::OkStatus();
}

LeafLinkStats DataPath::link_stats() const {
  LeafLinkStats sum;
  for (const PlaneLink& p : links_) {
    if (p.link == nullptr) continue;
    const LeafLinkStats s = p.link->stats();
    sum.tx_bytes += s.tx_bytes;
    sum.rx_bytes += s.rx_bytes;
    sum.retransmissions += s.retransmissions;
    sum.packets_dropped += s.packets_dropped;
    sum.foreign_packets_dropped += s.foreign_packets_dropped;
    sum.results_placed += s.results_placed;
    sum.results_place_missed += s.results_place_missed;
  }
  return sum;
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

void DataPath::Route(uint32_t group_id, GroupEngine* engine, uint32_t plane,
                     std::optional<transport::Ipv4Endpoint> multicast) {
  Unroute(group_id);  // routed again: its earlier windows count no more
  engines_[group_id] = {engine, plane, multicast};
  // Each engine keeps up to K requests in flight on its plane's link, and
  // the link's queue holds them until the switch acknowledges them.
  // Their results come back by multicast into the port's buffers.
  reserved_requests_.at(plane) += engine->params().num_slots;
  reserved_result_bytes_ +=
      size_t{engine->params().num_slots} * (engine->params().slot_bytes + kResultOverhead);
  link(plane).ReserveRequests(reserved_requests_[plane] + kRequestsBeyondWindows);
  if (soft_link_) port_->ReserveReceive(reserved_result_bytes_);  // a NIC's come elsewhere
}

void DataPath::Unroute(uint32_t group_id) {
  auto it = engines_.find(group_id);
  if (it == engines_.end()) return;
  // Its windows no longer count: the next group's Route reserves on top of
  // the live groups' (what the link and port set up stays, ready for it).
  const GroupParams& p = it->second.engine->params();
  uint32_t& requests = reserved_requests_.at(it->second.plane);
  requests -= std::min(requests, p.num_slots);
  reserved_result_bytes_ -= std::min(
      reserved_result_bytes_, size_t{p.num_slots} * (p.slot_bytes + kResultOverhead));
  engines_.erase(it);
}

void DataPath::PostFailure(std::optional<uint32_t> group_id, absl::Status why) {
  absl::MutexLock lock(&failures_mu_);
  failures_.push_back({group_id, std::move(why)});
  has_failures_.store(true, std::memory_order_release);
}

void DataPath::PostPlaneFailure(uint32_t plane, absl::Status why) {
  absl::MutexLock lock(&failures_mu_);
  failures_.push_back({std::nullopt, std::move(why), plane});
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
      for (auto& [id, routed] : engines_) {
        if (!f.plane || routed.plane == *f.plane) routed.engine->Fail(f.why);
      }
    } else if (auto it = engines_.find(*f.group_id); it != engines_.end()) {
      it->second.engine->Fail(f.why);
    }
  }
}

void DataPath::PollEngines(bool timers) {
  for (auto& [id, routed] : engines_) {
    if (timers) {
      routed.engine->Poll();
    } else {
      routed.engine->Post();
    }
  }
  // A soft link flushes the engine all the planes' links share: once.
  for (const PlaneLink& p : links_) {
    if (p.link != nullptr) p.link->Flush();
    if (soft_link_) break;
  }
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
  for (auto& [id, routed] : engines_) until(routed.engine->NextTimerNs());
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
    it->second.engine->OnMessage(h, elements, message, burst_ns);
  };
  // A process that was not scheduled for a while finds many bursts
  // waiting: read them (a bounded number) before judging any result lost.
  // A read that took everything there was ends it: asking again at once
  // was a system call that found nothing two times in three
  // (docs/performance.md, "Reads that found nothing").
  constexpr int kMaxBursts = 16;
  placer_.armed = true;
  LeafLink& first = *links_[0].link;
  for (size_t plane = 1; plane < links_.size(); ++plane) {
    if (links_[plane].link != nullptr && links_[plane].link->HoldsMessages()) {
      wait = absl::ZeroDuration();  // another reader took them: no wait for more
    }
  }
  for (int burst = 0; burst < kMaxBursts; ++burst) {
    since_reading = kMessagesPerReading;  // a wait may come first
    const size_t packets = first.Progress(wait, deliver);
    // The other planes' links share plane 0's engine (AddPlane): that read
    // took their packets too, which they hand over without a read of their own.
    for (size_t plane = 1; plane < links_.size(); ++plane) {
      if (links_[plane].link != nullptr) links_[plane].link->Drain(deliver);
    }
    if (packets == 0 || !first.MayHoldMore()) break;
    wait = absl::ZeroDuration();
  }
  placer_.armed = false;
  if (!soft_link_) endpoint_->Progress(absl::ZeroDuration());
  for (size_t plane = 0; plane < links_.size(); ++plane) {
    if (links_[plane].link == nullptr) continue;
    if (absl::Status link = links_[plane].link->status(); !link.ok()) {
      if (!links_[plane].failure_told && on_link_failure_) {
        links_[plane].failure_told = true;
        on_link_failure_(static_cast<uint32_t>(plane), std::string(link.message()));
      }
      for (auto& [id, routed] : engines_) {
        if (routed.plane == plane) {
          // Unavailable whatever the link's own code (a verbs completion's
          // may be another): the fabric is gone, the hosts may take over.
          routed.engine->Fail(
              WithErrorCode(absl::UnavailableError(link.message()), NETFOLD_ERR_UNAVAILABLE));
        }
      }
    }
  }
  PollEngines(/*timers=*/true);
}

}  // namespace netfold::host
