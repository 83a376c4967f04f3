#include "transport/ud_queue_pair.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/counter.h"
#include "proto/psn.h"

namespace netfold::transport {

using proto::BthOpcode;

UdQueuePair::UdQueuePair(uint32_t qpn, const UdQpConfig& config, PacketPool* pool,
                         Ipv4Endpoint local)
    : qpn_(qpn), config_(config), pool_(pool), local_(local) {}

UdQueuePair::~UdQueuePair() {
  for (PacketBuffer* p : send_queue_) PacketPool::Free(p);
  for (Received& r : recv_queue_) PacketPool::Free(r.buffer);
}

absl::Status UdQueuePair::PostSend(const Ipv4Endpoint& dst, uint32_t dst_qpn, uint32_t qkey,
                                   std::span<const uint8_t> payload, std::optional<uint32_t> imm) {
  if (payload.size() > config_.mtu) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "UD datagram of %d bytes exceeds the MTU of %d", payload.size(), config_.mtu));
  }
  if (dst_qpn > kMulticastQpn || dst_qpn < kFirstAssignableQpn) {
    return absl::InvalidArgumentError(absl::StrFormat("destination QPN 0x%x is invalid", dst_qpn));
  }
  if ((dst_qpn == kMulticastQpn) != dst.IsMulticast()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "QPN 0xffffff goes with a multicast address and only with one (got %s)",
        dst.ToString()));
  }
  if (send_queue_.size() >= config_.max_send_queue) {
    return absl::ResourceExhaustedError("UD send queue is full");
  }
  const BthOpcode op = imm ? BthOpcode::kUdSendOnlyWithImmediate : BthOpcode::kUdSendOnly;
  PacketBuffer* p = pool_->Alloc();
  if (p == nullptr) return absl::ResourceExhaustedError("no packet buffer for a UD datagram");
  if (p->capacity() < proto::RocePacketSize(op, payload.size())) {
    PacketPool::Free(p);
    return absl::InvalidArgumentError("packet buffers are too small for this datagram");
  }
  proto::RocePacketSpec spec;
  spec.bth.opcode = op;
  spec.bth.pkey = config_.pkey;
  spec.bth.dest_qp = dst_qpn;
  spec.bth.psn = next_psn_;
  spec.deth = proto::Deth{.qkey = qkey, .src_qp = qpn_};
  if (imm) spec.imm = *imm;
  const proto::IcrcAddresses addrs{local_.ip, dst.ip, local_.port, dst.port};
  auto n = proto::BuildRocePacket(spec, payload, addrs, {p->data(), p->capacity()});
  if (!n.ok()) {
    PacketPool::Free(p);
    return n.status();
  }
  p->set_len(static_cast<uint32_t>(*n));
  p->dst = dst;
  next_psn_ = proto::PsnAdd(next_psn_, 1);
  send_queue_.push_back(p);
  BumpCounter(counters_.datagrams_sent);
  BumpCounter(counters_.bytes_sent, payload.size());
  return absl::OkStatus();
}

bool UdQueuePair::OnPacket(const proto::RocePacketView& packet, PacketBuffer* buffer) {
  if (!proto::OpcodeIsUd(packet.bth.opcode) || !packet.deth.has_value()) {
    counters_.drops.Count(QpDropReason::kWrongTransport);
    return false;
  }
  if (!PkeyMatches(packet.bth.pkey, config_.pkey)) {
    counters_.drops.Count(QpDropReason::kWrongPkey);
    return false;
  }
  if (packet.deth->qkey != config_.qkey) {
    counters_.drops.Count(QpDropReason::kWrongQkey);
    return false;
  }
  if (config_.filter_sources && !SourceAllowed(buffer->dst, buffer->src)) {
    counters_.drops.Count(QpDropReason::kWrongSource);
    return false;
  }
  if (packet.payload.size() > config_.mtu) {
    counters_.drops.Count(QpDropReason::kBadLength);
    return false;
  }
  if (recv_queue_.size() >= config_.max_recv_queue) {
    counters_.drops.Count(QpDropReason::kReceiveQueueFull);
    return false;
  }
  UdDatagram d;
  d.src = buffer->src;
  d.dst = buffer->dst;
  d.src_qpn = packet.deth->src_qp;
  d.imm = packet.imm;
  d.data = packet.payload;
  if (!buffer->external().empty()) {
    const size_t at = buffer->external_at();
    const size_t from = static_cast<size_t>(packet.payload.data() - buffer->data());
    if (config_.keeps_placed && at >= from && at + buffer->external().size() <= from + d.data.size()) {
      d.placed = buffer->external();
      d.placed_at = at - from;
    } else {
      buffer->Materialize();
    }
  }
  recv_queue_.push_back({buffer, d});
  BumpCounter(counters_.datagrams_received);
  BumpCounter(counters_.bytes_received, packet.payload.size());
  return true;
}

bool UdQueuePair::SourceAllowed(const Ipv4Endpoint& dst, const Ipv4Endpoint& src) const {
  for (const auto& [d, s] : allowed_sources_) {
    if (d == dst) return s == src;
  }
  return false;
}

void UdQueuePair::AllowSource(const Ipv4Endpoint& dst, const Ipv4Endpoint& source) {
  for (auto& [d, s] : allowed_sources_) {
    if (d == dst) {
      s = source;
      return;
    }
  }
  allowed_sources_.emplace_back(dst, source);
}

void UdQueuePair::ForgetSource(const Ipv4Endpoint& dst) {
  std::erase_if(allowed_sources_, [&](const auto& e) { return e.first == dst; });
}

void UdQueuePair::Poll(std::vector<PacketBuffer*>* out) {
  out->insert(out->end(), send_queue_.begin(), send_queue_.end());
  send_queue_.clear();
}

bool UdQueuePair::PeekRecv(UdDatagram* out) const {
  if (recv_queue_.empty()) return false;
  *out = recv_queue_.front().datagram;
  return true;
}

void UdQueuePair::PopRecv() {
  if (recv_queue_.empty()) return;
  PacketPool::Free(recv_queue_.front().buffer);
  recv_queue_.pop_front();
}

}  // namespace netfold::transport
