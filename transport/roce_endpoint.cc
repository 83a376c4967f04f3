#include "transport/roce_endpoint.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/counter.h"
#include "base/status_macros.h"

namespace netfold::transport {

namespace {
// Segments of one UDP GSO send carry identifications 0..63 (udp_port.cc).

template <typename Qp>
void InsertInQpnOrder(std::vector<Qp*>& qps, Qp* qp) {
  qps.insert(std::upper_bound(qps.begin(), qps.end(), qp,
                              [](const Qp* a, const Qp* b) { return a->qpn() < b->qpn(); }),
             qp);
}

template <typename Qp>
void EraseFromQpnOrder(std::vector<Qp*>& qps, uint32_t qpn) {
  qps.erase(std::remove_if(qps.begin(), qps.end(), [qpn](const Qp* q) { return q->qpn() == qpn; }),
            qps.end());
}

}  // namespace

RoceEndpoint::RoceEndpoint(std::unique_ptr<Port> port, const Clock& clock,
                           const RoceEndpointConfig& config)
    : port_(std::move(port)),
      clock_(clock),
      config_(config),
      next_qpn_(std::max(config.first_qpn, kFirstAssignableQpn)) {
  rx_.resize(std::max<size_t>(config_.burst, 1));
}

RoceEndpoint::~RoceEndpoint() {
  // QPs hold packet buffers of the port's pool: destroy them before the port.
  rc_in_order_.clear();
  ud_in_order_.clear();
  ud_qps_.clear();
  rc_qps_.clear();
  PacketPool::FreeBurst(tx_);
}

uint32_t RoceEndpoint::NextQpn() {
  for (;;) {
    uint32_t qpn = next_qpn_;
    next_qpn_ = next_qpn_ + 1 >= kMulticastQpn ? kFirstAssignableQpn : next_qpn_ + 1;
    if (!rc_qps_.contains(qpn) && !ud_qps_.contains(qpn)) return qpn;
  }
}

namespace {

absl::Status CheckRcQpConfig(const RcQpConfig& config) {
  if (config.recv_line_offset >= kCacheLine) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "recv_line_offset %d is not below the cache line (%d bytes)", config.recv_line_offset,
        kCacheLine));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RcQueuePair*> RoceEndpoint::CreateRcQp(const RcQpConfig& config) {
  NETFOLD_RETURN_IF_ERROR(CheckRcQpConfig(config));
  const uint32_t qpn = NextQpn();
  auto qp = std::make_unique<RcQueuePair>(qpn, config, clock_);
  RcQueuePair* raw = qp.get();
  rc_qps_[qpn] = std::move(qp);
  InsertInQpnOrder(rc_in_order_, raw);
  return raw;
}

absl::StatusOr<RcQueuePair*> RoceEndpoint::CreateRcQpWithQpn(uint32_t qpn,
                                                              const RcQpConfig& config) {
  NETFOLD_RETURN_IF_ERROR(CheckRcQpConfig(config));
  if (qpn < kFirstAssignableQpn || qpn >= kMulticastQpn) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "QPN 0x%x is not assignable (0x%x..0x%x)", qpn, kFirstAssignableQpn, kMulticastQpn - 1));
  }
  if (rc_qps_.contains(qpn) || ud_qps_.contains(qpn)) {
    return absl::AlreadyExistsError(
        absl::StrFormat("QP 0x%06x already exists on %s", qpn, local().ToString()));
  }
  auto qp = std::make_unique<RcQueuePair>(qpn, config, clock_);
  RcQueuePair* raw = qp.get();
  rc_qps_[qpn] = std::move(qp);
  InsertInQpnOrder(rc_in_order_, raw);
  return raw;
}

absl::StatusOr<UdQueuePair*> RoceEndpoint::CreateUdQp(const UdQpConfig& config) {
  const uint32_t qpn = NextQpn();
  auto qp = std::make_unique<UdQueuePair>(qpn, config, &port_->pool(), port_->local());
  UdQueuePair* raw = qp.get();
  ud_qps_[qpn] = std::move(qp);
  InsertInQpnOrder(ud_in_order_, raw);
  return raw;
}

absl::Status RoceEndpoint::DestroyQp(uint32_t qpn) {
  if (auto rc = rc_qps_.find(qpn); rc != rc_qps_.end()) {
    const RcQueuePair& qp = *rc->second;
    const uint64_t number = ++destructions_;
    destroyed_[qpn] = Destroyed{qp.attributes().remote.ip, qp.bound_source_port(),
                                clock_.NowNanos(), number};
    destroyed_order_.emplace_back(qpn, number);
    if (destroyed_order_.size() > kMaxDestroyedRemembered) {
      const auto [oldest, its_number] = destroyed_order_.front();
      destroyed_order_.pop_front();
      if (auto d = destroyed_.find(oldest);
          d != destroyed_.end() && d->second.number == its_number) {
        destroyed_.erase(d);
      }
    }
    EraseFromQpnOrder(rc_in_order_, qpn);
    rc_qps_.erase(rc);
    return absl::OkStatus();
  }
  if (ud_qps_.contains(qpn)) {
    std::vector<Ipv4Endpoint> joined;
    for (const auto& [group, members] : groups_) {
      if (std::find(members.begin(), members.end(), qpn) != members.end()) joined.push_back(group);
    }
    for (const Ipv4Endpoint& g : joined) NETFOLD_RETURN_IF_ERROR(DetachMulticast(qpn, g));
    EraseFromQpnOrder(ud_in_order_, qpn);
    ud_qps_.erase(qpn);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrFormat("no QP 0x%06x on %s", qpn, local().ToString()));
}

bool RoceEndpoint::LateForDestroyedQp(uint32_t qpn, const proto::RocePacketView& view,
                                      const PacketBuffer& p) {
  if (view.bth.opcode != proto::BthOpcode::kRcAcknowledge) return false;
  auto d = destroyed_.find(qpn);
  if (d == destroyed_.end()) return false;
  if (clock_.NowNanos() - d->second.at_ns >= kLateAfterDestroyNs) {
    destroyed_.erase(d);  // its place in destroyed_order_ goes when it comes first
    return false;
  }
  return p.src.ip == d->second.peer_ip &&
         (!d->second.peer_port || p.src.port == *d->second.peer_port);
}

RcQueuePair* RoceEndpoint::FindRcQp(uint32_t qpn) {
  auto it = rc_qps_.find(qpn);
  return it == rc_qps_.end() ? nullptr : it->second.get();
}

UdQueuePair* RoceEndpoint::FindUdQp(uint32_t qpn) {
  auto it = ud_qps_.find(qpn);
  return it == ud_qps_.end() ? nullptr : it->second.get();
}

absl::Status RoceEndpoint::AttachMulticast(uint32_t qpn, const Ipv4Endpoint& group) {
  if (!ud_qps_.contains(qpn)) {
    return absl::NotFoundError(absl::StrFormat("no UD QP 0x%06x to attach", qpn));
  }
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a multicast address", group.ToString()));
  }
  auto& members = groups_[group];
  if (std::find(members.begin(), members.end(), qpn) != members.end()) {
    return absl::AlreadyExistsError(
        absl::StrFormat("QP 0x%06x is already attached to %s", qpn, group.ToString()));
  }
  if (members.empty()) {
    if (absl::Status s = port_->JoinMulticast(group); !s.ok()) {
      groups_.erase(group);
      return s;
    }
  }
  members.push_back(qpn);
  return absl::OkStatus();
}

absl::Status RoceEndpoint::DetachMulticast(uint32_t qpn, const Ipv4Endpoint& group) {
  auto it = groups_.find(group);
  if (it != groups_.end()) {
    auto pos = std::find(it->second.begin(), it->second.end(), qpn);
    if (pos != it->second.end()) {
      it->second.erase(pos);
      if (it->second.empty()) {
        groups_.erase(it);
        return port_->LeaveMulticast(group);
      }
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(
      absl::StrFormat("QP 0x%06x is not attached to %s", qpn, group.ToString()));
}

namespace {

// RC request opcodes netfold does not implement but a NIC may send: RDMA
// WRITE (0x06-0x0B), RDMA READ request (0x0C), CMP_SWAP/FETCH_ADD (0x13,
// 0x14), SEND_LAST/ONLY with invalidate (0x16, 0x17). Responses (READ
// responses, atomic ACKs) are not requests: a peer has no reason to send
// them to a QP that never asked.
bool IsUnsupportedRcRequest(uint8_t opcode) {
  return (opcode >= 0x06 && opcode <= 0x0C) || opcode == 0x13 || opcode == 0x14 ||
         opcode == 0x16 || opcode == 0x17;
}

}  // namespace

bool RoceEndpoint::DispatchUnsupportedRequest(const PacketBuffer& p) {
  // The parser checked the ICRC and stopped at the opcode; the BTH itself
  // is whole.
  if (p.len() < proto::kBthSize) return false;
  proto::BthWire wire;
  std::memcpy(&wire, p.data(), sizeof(wire));
  const proto::Bth bth = proto::DecodeBth(wire);
  const uint8_t opcode = static_cast<uint8_t>(bth.opcode);
  if (!IsUnsupportedRcRequest(opcode)) return false;
  RcQueuePair* qp = FindRcQp(bth.dest_qp);
  if (qp == nullptr) return false;
  qp->OnUnsupportedRequest(opcode, bth.pkey, bth.psn, p.src);
  return true;
}

proto::RoceParseResult RoceEndpoint::CheckIcrc(PacketBuffer& p, bool* solved) {
  const std::span<const uint8_t> bytes = p.bytes();
  if (bytes.size() < proto::kBthSize + proto::kIcrcSize) return proto::RoceParseResult::kTruncated;
  const std::span<const uint8_t> covered = bytes.first(bytes.size() - proto::kIcrcSize);
  const std::span<const uint8_t> part = p.external();
  if (!part.empty() && (p.external_at() <= proto::kBthFecnByteOffset ||
                        p.external_at() + part.size() > covered.size())) {
    p.Materialize();  // placed over the ICRC (a placer's odd guess): whole first
  }
  const proto::IcrcAddresses addrs{p.src.ip, p.dst.ip, p.src.port, p.dst.port, 0};
  const uint32_t received = proto::LoadIcrc(bytes.last<proto::kIcrcSize>());
  // The ICRC of identification x is the one of 0 XOR D(x) (proto/icrc.h):
  // one CRC pass, then the identification is looked up, not recomputed. A
  // payload placed in its owner's memory is read where it is.
  const uint32_t delta = (p.external().empty() ? proto::ComputeIcrc(addrs, covered)
                                               : proto::ComputeIcrcWithPart(
                                                     addrs, covered, p.external_at(),
                                                     p.external())) ^
                         received;
  // Sent alone (identification 0), or its place in the received batch.
  if (delta == 0 || (p.ip_id != 0 && delta == icrc_ids_.Difference(covered.size(), p.ip_id))) {
    return proto::RoceParseResult::kOk;
  }
  p.Materialize();  // the rarer paths below read the packet whole
  // A segment of a peer's GSO send that arrived alone or in another batch.
  std::optional<uint16_t> id;
  if (config_.accept_segment_identifications || config_.solve_ip_identification) {
    id = icrc_ids_.FindSegment(covered.size(), delta);
  }
  // A NIC's identification, any of 2^16.
  if (!id.has_value() && config_.solve_ip_identification) {
    id = proto::SolveIpv4Identification(addrs, covered, received);
  }
  if (!id.has_value()) return proto::RoceParseResult::kBadIcrc;
  *solved = true;
  return proto::RoceParseResult::kOk;
}

void RoceEndpoint::Dispatch(PacketBuffer* p) {
  BumpCounter(counters_.rx_packets);
  proto::RocePacketView view;
  bool solved = false;
  proto::RoceParseResult r =
      config_.check_icrc ? CheckIcrc(*p, &solved) : proto::RoceParseResult::kOk;
  // A placed payload (Port::SetReceivePlacer) is not read here: the parse
  // reads headers, pad count and ICRC only.
  if (r == proto::RoceParseResult::kOk) r = proto::ParseRocePacket(p->bytes(), nullptr, &view);
  if (r == proto::RoceParseResult::kOk && solved) {
    BumpCounter(counters_.ip_identification_solved);
  }
  if (r == proto::RoceParseResult::kUnknownOpcode && DispatchUnsupportedRequest(*p)) {
    PacketPool::Free(p);
    return;
  }
  if (r != proto::RoceParseResult::kOk) {
    BumpCounter(counters_.parse_drops[static_cast<size_t>(r)]);
    PacketPool::Free(p);
    return;
  }
  const uint32_t qpn = view.bth.dest_qp;
  if (qpn == kMulticastQpn) {
    auto it = groups_.find(p->dst);
    if (!p->dst.IsMulticast() || it == groups_.end() || it->second.empty()) {
      counters_.drops.Count(QpDropReason::kUnknownQp);
      PacketPool::Free(p);
      return;
    }
    // Every attached QP gets the datagram; all but the last get a copy.
    const std::vector<uint32_t>& members = it->second;
    if (members.size() > 1) p->Materialize();
    for (size_t i = 0; i + 1 < members.size(); ++i) {
      PacketBuffer* copy = port_->pool().Alloc();
      if (copy == nullptr) {
        counters_.drops.Count(QpDropReason::kNoBuffer);
        continue;
      }
      std::memcpy(copy->data(), p->data(), p->len());
      copy->set_len(p->len());
      copy->src = p->src;
      copy->dst = p->dst;
      proto::RocePacketView copy_view = view;
      copy_view.payload = {copy->data() + (view.payload.data() - p->data()), view.payload.size()};
      if (!ud_qps_[members[i]]->OnPacket(copy_view, copy)) PacketPool::Free(copy);
    }
    if (!ud_qps_[members.back()]->OnPacket(view, p)) PacketPool::Free(p);
    return;
  }
  if (auto rc = rc_qps_.find(qpn); rc != rc_qps_.end()) {
    p->Materialize();  // an RC QP reads its payload where the packet has it
    if (!rc->second->OnPacket(view, p)) PacketPool::Free(p);
    return;
  }
  if (auto ud = ud_qps_.find(qpn); ud != ud_qps_.end()) {
    if (!ud->second->OnPacket(view, p)) PacketPool::Free(p);
    return;
  }
  if (LateForDestroyedQp(qpn, view, *p)) {
    BumpCounter(counters_.late_for_destroyed_qp);
  } else {
    counters_.drops.Count(QpDropReason::kUnknownQp);
  }
  PacketPool::Free(p);
}

void RoceEndpoint::SendDue() {
  const Ipv4Endpoint local = port_->local();
  PacketSink sink{&port_->pool(), &tx_, port_->TakesExternalBytes()};
  // When one delayed ACK is due, every waiting ACK goes with it: one wakeup
  // and one burst for all connections instead of one per connection.
  const int64_t now = clock_.NowNanos();
  bool ack_due = false;
  for (RcQueuePair* qp : rc_in_order_) ack_due = ack_due || qp->AckDue(now);
  for (RcQueuePair* qp : rc_in_order_) {
    if (ack_due) qp->ExpediteAck(now);
    if (qp->HasWork(now)) qp->Poll(local, sink);
  }
  for (UdQueuePair* qp : ud_in_order_) {
    if (qp->HasWork()) qp->Poll(&tx_);
  }
  if (tx_.empty()) return;
  const size_t sent = port_->SendBurst(tx_);
  BumpCounter(counters_.tx_packets, sent);
  if (sent < tx_.size()) {
    // The network is full: drop the rest; RC retransmits, UD is unreliable.
    BumpCounter(counters_.tx_dropped, tx_.size() - sent);
    PacketPool::FreeBurst(std::span<PacketBuffer* const>(tx_).subspan(sent));
  }
  tx_.clear();
}

std::optional<int64_t> RoceEndpoint::NextTimerNs() const {
  std::optional<int64_t> next;
  for (const RcQueuePair* qp : rc_in_order_) {
    if (auto t = qp->NextTimerNs()) next = next ? std::min(*next, *t) : *t;
  }
  for (const UdQueuePair* qp : ud_in_order_) {
    if (qp->HasWork()) return clock_.NowNanos();
  }
  return next;
}

size_t RoceEndpoint::ReceiveIfTimerDue() {
  // A timer that fell due while the owner was busy elsewhere fires only
  // after what arrived meanwhile is read: the ACK a retransmission timer
  // waits for may be sitting in the socket (the peer delays its ACKs), and
  // a delayed ACK covers what arrived with it. New requests queued to send
  // need no read first: for them it was a system call that mostly found
  // nothing (docs/performance.md, "Reads that found nothing").
  std::optional<int64_t> t;
  for (const RcQueuePair* qp : rc_in_order_) {
    if (auto e = qp->NextExpiryNs()) t = t ? std::min(*t, *e) : *e;
  }
  if (!t || *t > clock_.NowNanos()) return 0;
  const size_t n = port_->RecvBurst(rx_, absl::ZeroDuration());
  for (size_t i = 0; i < n; ++i) Dispatch(rx_[i]);
  return n;
}

void RoceEndpoint::Flush() {
  // What this reads reaches the QPs' receive queues after their owner
  // emptied them: the next Receive must not wait before it is handled.
  if (ReceiveIfTimerDue() > 0) flushed_receives_ = true;
  SendDue();
}

size_t RoceEndpoint::Progress(absl::Duration timeout) {
  const size_t n = Receive(timeout);
  SendDue();
  return n;
}

absl::Duration RoceEndpoint::UntilNextTimer(absl::Duration limit) const {
  if (auto t = NextTimerNs()) {
    limit = std::min(limit, absl::Nanoseconds(std::max<int64_t>(0, *t - clock_.NowNanos())));
  }
  return limit;
}

absl::Duration RoceEndpoint::SleepBound(absl::Duration limit) {
  if (flushed_receives_) return absl::ZeroDuration();
  return port_->SleepBound(UntilNextTimer(limit));
}

size_t RoceEndpoint::Receive(absl::Duration timeout) {
  const size_t n = ReceiveIfTimerDue();
  SendDue();
  const bool flushed = std::exchange(flushed_receives_, false);
  const absl::Duration wait = n > 0 || flushed ? absl::ZeroDuration() : UntilNextTimer(timeout);
  const size_t m = port_->RecvBurst(rx_, wait);
  for (size_t i = 0; i < m; ++i) Dispatch(rx_[i]);
  return n + m;
}

}  // namespace netfold::transport
