#include "host/link/soft_leaf_link.h"

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace netfold::host {

using transport::QpState;

absl::StatusOr<std::unique_ptr<SoftLeafLink>> SoftLeafLink::Create(
    transport::RoceEndpoint* endpoint, const transport::ImpairedPort* port) {
  std::unique_ptr<SoftLeafLink> link(new SoftLeafLink(endpoint, port));
  transport::RcQpConfig rc_config;
  rc_config.max_send_queue = 1024;
  rc_config.max_recv_queue = 1024;
  rc_config.max_message_size = 64 * 1024;
  // Results that come over RC are ACKed coalesced: the switch waits
  // host_ack_timeout (64 ms) before it retransmits.
  rc_config.ack_delay = absl::Milliseconds(1);
  // The leaf switch is a process that may not run for a while on a shared
  // machine: the link fails after 3 s without an ACK (as the switches'
  // own, transport.link_failure_ms), not after its 7 retries (1.5 s at
  // 8 ms). A dead switch is reported by the manager sooner.
  rc_config.min_failure_time = absl::Seconds(3);
  NETFOLD_ASSIGN_OR_RETURN(link->rc_, endpoint->CreateRcQp(rc_config));
  return link;
}

SoftLeafLink::~SoftLeafLink() {
  if (ud_ != nullptr) (void)endpoint_->DestroyQp(ud_->qpn());
  if (rc_ != nullptr) (void)endpoint_->DestroyQp(rc_->qpn());
}

std::string SoftLeafLink::address() const { return endpoint_->local().ToString(); }

size_t SoftLeafLink::max_datagram_payload() const { return transport::UdQpConfig{}.mtu; }

absl::Status SoftLeafLink::Connect(const LeafPeer& peer) {
  if (ud_ != nullptr) return absl::FailedPreconditionError("the leaf link is already connected");
  NETFOLD_RETURN_IF_ERROR(ConnectRc(peer));
  // Results are taken only from the group root named at AttachMulticast:
  // the keys travel in clear and anyone can join the multicast address.
  NETFOLD_ASSIGN_OR_RETURN(
      ud_, endpoint_->CreateUdQp({.qkey = peer.qkey,
                                    .pkey = peer.pkey,
                                    .filter_sources = true,
                                    .keeps_placed = true}));
  return absl::OkStatus();
}

absl::Status SoftLeafLink::Reconnect(const LeafPeer& peer) {
  if (ud_ == nullptr) return absl::FailedPreconditionError("the leaf link was never connected");
  NETFOLD_RETURN_IF_ERROR(rc_->Modify(QpState::kReset, {}));
  return ConnectRc(peer);
}

absl::Status SoftLeafLink::ConnectRc(const LeafPeer& peer) {
  transport::RcQpAttributes attrs;
  attrs.pkey = peer.pkey;
  attrs.remote = peer.remote;
  attrs.remote_qpn = peer.remote_qpn;
  attrs.rq_psn = peer.rq_psn;
  attrs.sq_psn = peer.sq_psn;
  attrs.timeout = peer.ack_timeout;
  NETFOLD_RETURN_IF_ERROR(rc_->Modify(QpState::kInit, attrs));
  NETFOLD_RETURN_IF_ERROR(rc_->Modify(QpState::kRtr, attrs));
  return rc_->Modify(QpState::kRts, attrs);
}

void SoftLeafLink::ReserveRequests(uint32_t messages) {
  if (absl::Status s = rc_->ReserveSends(messages); !s.ok()) {
    NETFOLD_LOG(kDebug) << "no send buffers reserved: " << s;
  }
}

absl::Status SoftLeafLink::PostRequest(std::span<const uint8_t> header,
                                       std::span<const uint8_t> elements,
                                       std::span<const uint8_t> tag) {
  const std::span<const uint8_t> pieces[] = {header, elements, tag};
  return rc_->PostSendGatherReferencing(pieces, 1, 0);
}

void SoftLeafLink::ReleaseRequests(std::span<const uint8_t> memory) {
  if (rc_ != nullptr) rc_->ReleaseReferences(memory);
}

absl::Status SoftLeafLink::AttachMulticast(const transport::Ipv4Endpoint& group,
                                           const transport::Ipv4Endpoint& source) {
  if (ud_ == nullptr) return absl::FailedPreconditionError("the leaf link is not connected");
  if (source.IsMulticast() || source.ip == 0 || source.port == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "results of %s would come from %s, which is not a switch's data address",
        group.ToString(), source.ToString()));
  }
  ud_->AllowSource(group, source);
  absl::Status s = endpoint_->AttachMulticast(ud_->qpn(), group);
  // Already attached (a re-planned group not yet destroyed): its results
  // keep coming, now from the source named here.
  if (!s.ok() && !absl::IsAlreadyExists(s)) ud_->ForgetSource(group);
  return s;
}

void SoftLeafLink::DetachMulticast(const transport::Ipv4Endpoint& group) {
  if (ud_ == nullptr) return;
  (void)endpoint_->DetachMulticast(ud_->qpn(), group);
  ud_->ForgetSource(group);
}

void SoftLeafLink::Flush() { endpoint_->Flush(); }

size_t SoftLeafLink::Progress(absl::Duration timeout,
                              absl::FunctionRef<void(const LinkMessage&)> deliver) {
  // The endpoint is shared: the host algorithms' channels and a Flush read
  // it too, and what they read for this link waits in its queue pairs. Not
  // behind a wait: a result read that way sat there a whole `timeout`
  // (10 ms in Group::Wait) while the socket stayed empty
  // (docs/performance.md, "Results another reader took"). This relies on
  // every Progress emptying both queues (below): one that left messages
  // behind would make every later Progress return at once.
  // ACKs leave with the next requests (Flush).
  const size_t packets = endpoint_->Receive(HoldsMessages() ? absl::ZeroDuration() : timeout);
  (void)Drain(deliver);
  return packets;
}

bool SoftLeafLink::HoldsMessages() const {
  return rc_->num_recv_queued() > 0 || (ud_ != nullptr && ud_->num_recv_queued() > 0);
}

size_t SoftLeafLink::Drain(absl::FunctionRef<void(const LinkMessage&)> deliver) {
  size_t n = 0;
  transport::RecvMessage m;
  while (rc_->PeekRecv(&m)) {
    deliver(m.data);
    rc_->PopRecv();
    ++n;
  }
  if (ud_ != nullptr) {
    transport::UdDatagram d;
    while (ud_->PeekRecv(&d)) {
      deliver(LinkMessage(d.data, d.placed, d.placed_at));
      ud_->PopRecv();
      ++n;
    }
  }
  transport::SendCompletion sc;
  while (rc_->PollSendCompletion(&sc)) {
  }
  return n;
}

absl::Status SoftLeafLink::status() const {
  if (rc_->state() != QpState::kError) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrFormat("the connection to the leaf switch failed: %s", rc_->error().message()));
}

LeafLinkStats SoftLeafLink::stats() const {
  LeafLinkStats out;
  if (port_ != nullptr) {
    out.tx_bytes = port_->counters().tx_bytes.load();
    out.rx_bytes = port_->counters().rx_bytes.load();
    // Read from the socket but dropped before any queue pair saw them.
    out.packets_dropped += port_->counters().rx_no_buffer.load() +
                           port_->counters().rx_truncated.load();
    out.results_placed = port_->counters().rx_placed.load();
    out.results_place_missed = port_->counters().rx_place_missed.load();
  }
  out.retransmissions = rc_->counters().packets_retransmitted.load();
  out.packets_dropped += rc_->counters().drops.Total();
  if (ud_ != nullptr) {
    out.packets_dropped += ud_->counters().drops.Total();
    out.foreign_packets_dropped += ud_->counters().drops.Get(transport::QpDropReason::kWrongSource);
  }
  out.foreign_packets_dropped += rc_->counters().drops.Get(transport::QpDropReason::kWrongSource);
  // The engine's drops, like the port's, are counted by the link that
  // owns the port (a data plane's link shares them: DataPath::AddPlane).
  if (port_ != nullptr) {
    out.packets_dropped += endpoint_->counters().drops.Total();
    for (const auto& c : endpoint_->counters().parse_drops) out.packets_dropped += c.load();
  }
  return out;
}

}  // namespace netfold::host
