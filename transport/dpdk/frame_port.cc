#include "transport/dpdk/frame_port.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "proto/icrc.h"
#include "proto/roce_headers.h"

namespace netfold::transport::dpdk {
namespace {

void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
uint64_t Get(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

constexpr uint32_t kLimitedBroadcast = 0xffffffffu;

void ForEachImpairmentCounter(const ImpairmentCounters& c, const std::string& prefix,
                              const std::function<void(std::string_view, uint64_t)>& fn) {
  fn(prefix + "packets_in", Get(c.packets_in));
  fn(prefix + "packets_out", Get(c.packets_out));
  fn(prefix + "dropped_down", Get(c.dropped_down));
  fn(prefix + "dropped_random", Get(c.dropped_random));
  fn(prefix + "dropped_burst", Get(c.dropped_burst));
  fn(prefix + "dropped_rate", Get(c.dropped_rate));
  fn(prefix + "duplicated", Get(c.duplicated));
  fn(prefix + "corrupted", Get(c.corrupted));
  fn(prefix + "reordered", Get(c.reordered));
  fn(prefix + "delayed", Get(c.delayed));
}

}  // namespace

FramePort::FramePort(const FramePortConfig& config, const Clock& clock)
    : config_(config),
      clock_(clock),
      pool_(config.pool),
      bridge_(config.bridge_config),
      arp_(config.arp) {}

absl::StatusOr<std::unique_ptr<FramePort>> FramePort::Create(
    const FramePortConfig& config, std::vector<std::unique_ptr<FrameLink>> links,
    const Clock& clock) {
  FramePortConfig c = config;
  if (c.local.port == 0) c.local.port = kDefaultRocePort;
  if (c.local.ip == 0 || c.local.IsMulticast() || c.local.ip == kLimitedBroadcast) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the switch needs a unicast IPv4 address of its own (local is %s)", c.local.ToString()));
  }
  if (links.empty()) return absl::InvalidArgumentError("a FramePort needs at least one link");
  for (const auto& l : links) {
    if (l == nullptr) return absl::InvalidArgumentError("null FrameLink");
  }
  if (c.prefix_length < 0 || c.prefix_length > 32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefix length %d is not in 0..32", c.prefix_length));
  }
  if (c.pool.num_buffers < 2 * kMaxBurst || c.pool.buffer_size < 64 + kUdpFrameHeadersSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the packet pool (%d buffers of %d bytes) is too small for frames: at least %d buffers "
        "of %d bytes",
        c.pool.num_buffers, c.pool.buffer_size, 2 * kMaxBurst, 64 + kUdpFrameHeadersSize));
  }
  if (c.burst == 0 || c.burst > kMaxBurst) {
    return absl::InvalidArgumentError(absl::StrFormat("burst %d is not in 1..%d", c.burst, kMaxBurst));
  }
  if (c.idle_sleep_min <= absl::ZeroDuration() || c.idle_sleep_max < c.idle_sleep_min) {
    return absl::InvalidArgumentError("idle sleep must satisfy 0 < idle_sleep_min <= idle_sleep_max");
  }
  if (c.tx_queue_limit == 0) return absl::InvalidArgumentError("tx_queue_limit must be positive");
  c.bridge_config.num_links = static_cast<uint32_t>(links.size());

  std::unique_ptr<FramePort> port(new FramePort(c, clock));
  port->netmask_ = c.prefix_length == 0 ? 0 : ~0u << (32 - c.prefix_length);
  port->mac_ = c.mac.IsZero() ? SwitchMacForAddress(c.local.ip) : c.mac;
  if (port->mac_.IsMulticast() || port->mac_.IsZero()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the switch MAC %s is not a unicast address", port->mac_.ToString()));
  }
  for (size_t i = 0; i < links.size(); ++i) {
    auto state = std::make_unique<LinkState>();
    state->link = std::move(links[i]);
    const ImpairmentConfig send =
        i < c.link_send_impairments.size() ? c.link_send_impairments[i] : ImpairmentConfig{};
    const ImpairmentConfig receive =
        i < c.link_receive_impairments.size() ? c.link_receive_impairments[i] : ImpairmentConfig{};
    state->send_stage = std::make_unique<LinkImpairment>(send, clock);
    state->receive_stage = std::make_unique<LinkImpairment>(receive, clock);
    port->links_.push_back(std::move(state));
  }
  return port;
}

FramePort::~FramePort() {
  for (PacketBuffer* p : rx_ready_) PacketPool::Free(p);
  for (auto& l : links_) {
    PacketPool::FreeBurst(l->tx_in);
    for (PacketBuffer* p : l->tx_queue) PacketPool::Free(p);
    l->send_stage->DropHeld();
    l->receive_stage->DropHeld();
  }
}

std::optional<size_t> FramePort::FindLink(std::string_view name) const {
  for (size_t i = 0; i < links_.size(); ++i) {
    if (links_[i]->link->name() == name) return i;
  }
  return std::nullopt;
}

absl::Status FramePort::SetLinkImpairment(size_t link, const ImpairmentConfig& send,
                                          const ImpairmentConfig& receive) {
  if (link >= links_.size()) {
    return absl::OutOfRangeError(
        absl::StrFormat("no link %d (the port has %d)", link, links_.size()));
  }
  links_[link]->send_stage->SetConfig(send);
  links_[link]->receive_stage->SetConfig(receive);
  return absl::OkStatus();
}

absl::Status FramePort::JoinMulticast(const Ipv4Endpoint& group) {
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a multicast address (224.0.0.0/4)", group.ToString()));
  }
  if (std::find(groups_.begin(), groups_.end(), group) != groups_.end()) {
    return absl::AlreadyExistsError(absl::StrFormat("already joined %s", group.ToString()));
  }
  groups_.push_back(group);
  return absl::OkStatus();
}

absl::Status FramePort::LeaveMulticast(const Ipv4Endpoint& group) {
  auto it = std::find(groups_.begin(), groups_.end(), group);
  if (it == groups_.end()) {
    return absl::NotFoundError(absl::StrFormat("not a member of %s", group.ToString()));
  }
  groups_.erase(it);
  return absl::OkStatus();
}

const Ipv4Endpoint* FramePort::FindGroup(uint32_t ip, uint16_t port) const {
  for (const Ipv4Endpoint& g : groups_) {
    if (g.ip == ip && g.port == port) return &g;
  }
  return nullptr;
}

uint32_t FramePort::NextHop(uint32_t ip) const {
  if (config_.gateway != 0 && (ip & netmask_) != (config_.local.ip & netmask_)) {
    return config_.gateway;
  }
  return ip;
}

// ---------------------------------------------------------------- receive

size_t FramePort::PollOnce() {
  const int64_t now = clock_.NowNanos();
  size_t received = 0;
  for (uint32_t i = 0; i < links_.size(); ++i) {
    LinkState& l = *links_[i];
    PacketBuffer* bufs[kMaxBurst];
    const size_t got = pool_.AllocBurst({bufs, config_.burst});
    size_t n = 0;
    if (got == 0) {
      // Frames stay in the device until buffers come back.
      counters_.Add(counters_.rx_no_buffer);
      l.counters.Add(l.counters.rx_no_buffer);
    } else {
      const uint64_t oversize = l.counters.rx_oversize.load(std::memory_order_relaxed);
      n = l.link->RecvFrames({bufs, got}, l.counters);
      PacketPool::FreeBurst({bufs + n, got - n});
      uint64_t bytes = 0;
      for (size_t k = 0; k < n; ++k) bytes += bufs[k]->len();
      l.counters.Add(l.counters.rx_frames, n);
      l.counters.Add(l.counters.rx_bytes, bytes);
      counters_.Add(counters_.rx_truncated,
                    l.counters.rx_oversize.load(std::memory_order_relaxed) - oversize);
    }
    received += n;
    if (n > 0) idle_sleep_ns_ = 0;  // traffic: poll again right away, then back off anew
    rx_passed_.clear();
    if (n > 0) {
      l.receive_stage->Process({bufs, n}, &rx_passed_);
    } else if (l.receive_stage->num_held() > 0) {
      l.receive_stage->Release(&rx_passed_);
    }
    for (PacketBuffer* p : rx_passed_) HandleFrame(i, p, now);
  }
  ArpTick(now);
  FlushTx();
  return received;
}

void FramePort::HandleFrame(uint32_t in, PacketBuffer* p, int64_t now_ns) {
  FrameView v;
  const FrameParseResult r = ParseFrame(p->bytes(), &v);
  if (r == FrameParseResult::kRunt) {
    Bump(frame_counters_.parse_drops[static_cast<size_t>(r)]);
    PacketPool::Free(p);
    return;
  }
  if (v.src.IsMulticast() || v.src.IsZero()) {
    Bump(frame_counters_.rx_bad_source);
    PacketPool::Free(p);
    return;
  }
  if (v.src == mac_) {
    Bump(frame_counters_.rx_own_source);
    PacketPool::Free(p);
    return;
  }
  if (v.dst == mac_) {
    bridge_.Learn(v.src, in, now_ns);
    Terminate(in, p, v, r, now_ns);
    return;
  }
  if (v.dst.IsMulticast()) {
    const bool local = WantsLocally(v);
    if (config_.bridge) {
      bridge_.Process(in, v.src, v.dst, now_ns);
      Flood(in, p, /*keep=*/local);
    }
    if (local) {
      Terminate(in, p, v, r, now_ns);
    } else if (!config_.bridge) {
      PacketPool::Free(p);
    }
    return;
  }
  if (!config_.bridge) {
    Bump(frame_counters_.rx_not_for_us);
    PacketPool::Free(p);
    return;
  }
  const L2Bridge::Decision d = bridge_.Process(in, v.src, v.dst, now_ns);
  switch (d.action) {
    case L2Bridge::Action::kForward:
      Enqueue(d.link, p);
      break;
    case L2Bridge::Action::kFlood:
      Flood(in, p, /*keep=*/false);
      break;
    case L2Bridge::Action::kFilter:
      PacketPool::Free(p);
      break;
  }
}

bool FramePort::WantsLocally(const FrameView& v) const {
  if (v.ether_type == kEtherTypeArp) return true;
  if (v.has_ipv4 && v.has_udp) return FindGroup(v.ipv4.dst, v.udp.dst_port) != nullptr;
  return false;
}

void FramePort::Terminate(uint32_t in, PacketBuffer* p, const FrameView& v, FrameParseResult r,
                          int64_t now_ns) {
  if (r != FrameParseResult::kOk) {
    Bump(frame_counters_.parse_drops[static_cast<size_t>(r)]);
    counters_.Add(counters_.rx_errors);
    PacketPool::Free(p);
    return;
  }
  if (v.has_arp) {
    HandleArp(in, p, v, now_ns);
  } else if (v.has_ipv4) {
    HandleIpv4(in, p, v);
  } else {
    Bump(frame_counters_.rx_unhandled);
    PacketPool::Free(p);
  }
}

void FramePort::HandleArp(uint32_t in, PacketBuffer* p, const FrameView& v, int64_t now_ns) {
  const ArpView& a = v.arp;
  const uint32_t own = config_.local.ip;
  const bool for_us = a.target_ip == own;
  if (for_us) {
    Bump(a.op == ArpOp::kRequest ? frame_counters_.arp_requests_received
                                 : frame_counters_.arp_replies_received);
  }
  released_.clear();
  if (a.sender_ip != 0 && a.sender_ip != own && !a.sender_mac.IsMulticast()) {
    // Like Linux: a request aimed at us creates an entry (we will answer
    // that host); anything else only refreshes what we already use.
    if (for_us) {
      arp_.Learn(a.sender_ip, a.sender_mac, now_ns, &released_);
    } else {
      arp_.Update(a.sender_ip, a.sender_mac, now_ns, &released_);
    }
  }
  for (PacketBuffer* q : released_) SendToMac(q, a.sender_mac, now_ns);
  released_.clear();
  if (a.op == ArpOp::kRequest && for_us) {
    // The reply reuses the request's buffer.
    WriteArpFrame(v.src, ArpOp::kReply, mac_, own, a.sender_mac, a.sender_ip,
                  std::span<uint8_t, kArpFrameSize>(p->data(), kArpFrameSize));
    p->set_len(kArpFrameSize);
    Bump(frame_counters_.arp_replies_sent);
    Enqueue(in, p);
    return;
  }
  PacketPool::Free(p);
}

void FramePort::HandleIpv4(uint32_t in, PacketBuffer* p, const FrameView& v) {
  const Ipv4View& ip = v.ipv4;
  if (ip.dst == config_.local.ip) {
    if (ip.protocol == kIpProtocolIcmp && config_.answer_ping &&
        MakeIcmpEchoReply(p->bytes(), v, mac_, config_.ttl)) {
      Bump(frame_counters_.icmp_echo_replies);
      Enqueue(in, p);
      return;
    }
    if (v.has_udp && v.udp.dst_port == config_.local.port) {
      Deliver(p, v, config_.local);
      return;
    }
    Bump(frame_counters_.rx_unhandled);
    PacketPool::Free(p);
    return;
  }
  if (v.has_udp) {
    if (const Ipv4Endpoint* g = FindGroup(ip.dst, v.udp.dst_port)) {
      Deliver(p, v, *g);
      return;
    }
  }
  Bump(frame_counters_.rx_not_for_us);
  PacketPool::Free(p);
}

void FramePort::Deliver(PacketBuffer* p, const FrameView& v, const Ipv4Endpoint& dst) {
  const size_t len = v.udp.payload_length;
  uint8_t* payload = p->data() + v.udp.payload_offset;
  if (config_.normalize_icrc && !IsCanonicalRoceIpv4(v.ipv4) &&
      v.ipv4.header_length == proto::kIpv4HeaderSize && len >= proto::kBthSize + proto::kIcrcSize) {
    // The sender's ICRC covers its real headers; the endpoint checks the
    // canonical ones. Translate a correct ICRC, leave a wrong one wrong.
    const std::span<const uint8_t> covered(payload, len - proto::kIcrcSize);
    const std::span<uint8_t, proto::kIcrcSize> tail(payload + len - proto::kIcrcSize,
                                                    proto::kIcrcSize);
    const uint32_t real = proto::ComputeIcrcIpv4(
        std::span<const uint8_t, proto::kIpv4HeaderSize>(p->data() + v.ipv4.offset,
                                                         proto::kIpv4HeaderSize),
        std::span<const uint8_t, proto::kUdpHeaderSize>(p->data() + v.udp.offset,
                                                        proto::kUdpHeaderSize),
        covered);
    if (real == proto::LoadIcrc(tail)) {
      const proto::IcrcAddresses addrs{v.ipv4.src, v.ipv4.dst, v.udp.src_port, v.udp.dst_port};
      proto::StoreIcrc(proto::ComputeIcrc(addrs, covered), tail);
      Bump(frame_counters_.rx_icrc_normalized);
    }
  }
  std::memmove(p->data(), payload, len);
  p->set_len(static_cast<uint32_t>(len));
  p->src = Ipv4Endpoint{v.ipv4.src, v.udp.src_port};
  p->dst = dst;
  counters_.Add(counters_.rx_packets);
  counters_.Add(counters_.rx_bytes, len);
  rx_ready_.push_back(p);
}

// ---------------------------------------------------------------- send

bool FramePort::TxBackpressure() const {
  for (const auto& l : links_) {
    if (l->tx_queue.size() + l->tx_in.size() >= config_.tx_queue_limit) return true;
  }
  return false;
}

size_t FramePort::SendBurst(std::span<PacketBuffer* const> packets) {
  const int64_t now = clock_.NowNanos();
  size_t taken = 0;
  for (PacketBuffer* p : packets) {
    if (TxBackpressure()) {
      FlushTx();
      if (TxBackpressure()) break;
    }
    SendOne(p, now);
    ++taken;
  }
  FlushTx();
  return taken;
}

void FramePort::SendOne(PacketBuffer* p, int64_t now_ns) {
  const uint32_t len = p->len();
  if (static_cast<size_t>(len) + kUdpFrameHeadersSize > p->capacity()) {
    Bump(frame_counters_.tx_too_big);
    counters_.Add(counters_.tx_errors);
    PacketPool::Free(p);
    return;
  }
  const Ipv4Endpoint dst = p->dst;
  counters_.Add(counters_.tx_packets);
  counters_.Add(counters_.tx_bytes, len);
  if (dst.ip == config_.local.ip) {
    // To ourselves: never on the wire, as the kernel's loopback.
    Bump(frame_counters_.tx_loopback);
    if (dst.port == config_.local.port) {
      p->src = config_.local;
      counters_.Add(counters_.rx_packets);
      counters_.Add(counters_.rx_bytes, len);
      rx_ready_.push_back(p);
    } else {
      Bump(frame_counters_.rx_unhandled);
      PacketPool::Free(p);
    }
    return;
  }
  // Headers go in front of the payload, in the same buffer.
  std::memmove(p->data() + kUdpFrameHeadersSize, p->data(), len);
  const bool multicast = dst.IsMulticast();
  const proto::IcrcAddresses addrs{config_.local.ip, dst.ip, config_.local.port, dst.port};
  const auto headers = proto::MakeIpv4UdpHeaders(
      addrs, len, multicast ? config_.multicast_ttl : config_.ttl, config_.tos);
  WriteEthernetHeader(MacAddress{}, mac_, kEtherTypeIpv4, p->data());
  std::memcpy(p->data() + kEthernetHeaderSize, headers.data(), headers.size());
  p->set_len(len + static_cast<uint32_t>(kUdpFrameHeadersSize));

  if (multicast) {
    if (config_.multicast_loopback && FindGroup(dst.ip, dst.port) != nullptr) LoopbackCopy(*p, dst);
    const MacAddress group_mac = Ipv4MulticastMac(dst.ip);
    std::memcpy(p->data(), group_mac.bytes.data(), 6);
    Flood(kNoLink, p, /*keep=*/false);
    return;
  }
  if (dst.ip == kLimitedBroadcast) {
    std::memcpy(p->data(), kBroadcastMac.bytes.data(), 6);
    Flood(kNoLink, p, /*keep=*/false);
    return;
  }
  const uint32_t next_hop = NextHop(dst.ip);
  const ArpCache::LookupResult r = arp_.Lookup(next_hop, now_ns);
  if (r.refresh) SendArpRequest(next_hop);
  if (r.mac) {
    SendToMac(p, *r.mac, now_ns);
    return;
  }
  switch (arp_.Hold(next_hop, p, now_ns)) {
    case ArpCache::HoldResult::kHeldSendRequest:
      SendArpRequest(next_hop);
      break;
    case ArpCache::HoldResult::kHeld:
      break;
    case ArpCache::HoldResult::kRefused:
      Bump(frame_counters_.arp_hold_refused);
      counters_.Add(counters_.tx_errors);
      PacketPool::Free(p);
      break;
  }
}

void FramePort::LoopbackCopy(const PacketBuffer& frame, const Ipv4Endpoint& dst) {
  PacketBuffer* c = pool_.Alloc();
  if (c == nullptr) {
    counters_.Add(counters_.rx_no_buffer);
    return;
  }
  const uint32_t len = frame.len() - static_cast<uint32_t>(kUdpFrameHeadersSize);
  std::memcpy(c->data(), frame.data() + kUdpFrameHeadersSize, len);
  c->set_len(len);
  c->src = config_.local;
  c->dst = dst;
  Bump(frame_counters_.tx_loopback);
  counters_.Add(counters_.rx_packets);
  counters_.Add(counters_.rx_bytes, len);
  rx_ready_.push_back(c);
}

void FramePort::SendToMac(PacketBuffer* frame, const MacAddress& mac, int64_t now_ns) {
  std::memcpy(frame->data(), mac.bytes.data(), 6);
  if (std::optional<uint32_t> link = bridge_.Lookup(mac, now_ns)) {
    Enqueue(*link, frame);
  } else {
    Flood(kNoLink, frame, /*keep=*/false);
  }
}

void FramePort::SendArpRequest(uint32_t ip) {
  PacketBuffer* p = pool_.Alloc();
  if (p == nullptr) {
    counters_.Add(counters_.tx_errors);
    return;
  }
  WriteArpFrame(kBroadcastMac, ArpOp::kRequest, mac_, config_.local.ip, MacAddress{}, ip,
                std::span<uint8_t, kArpFrameSize>(p->data(), kArpFrameSize));
  p->set_len(kArpFrameSize);
  Bump(frame_counters_.arp_requests_sent);
  Flood(kNoLink, p, /*keep=*/false);
}

void FramePort::Flood(uint32_t in, PacketBuffer* frame, bool keep) {
  uint32_t last = kNoLink;
  for (uint32_t i = 0; i < links_.size(); ++i) {
    if (i != in) last = i;
  }
  for (uint32_t i = 0; i < links_.size(); ++i) {
    if (i == in) continue;
    if (i == last && !keep) {
      Enqueue(i, frame);
      return;
    }
    PacketBuffer* copy = pool_.Alloc();
    if (copy == nullptr) {
      links_[i]->counters.Add(links_[i]->counters.tx_no_buffer);
      continue;
    }
    std::memcpy(copy->data(), frame->data(), frame->len());
    copy->set_len(frame->len());
    Enqueue(i, copy);
  }
  if (!keep) PacketPool::Free(frame);  // no other link
}

void FramePort::FlushTx() {
  for (auto& lp : links_) {
    LinkState& l = *lp;
    if (!l.tx_in.empty() || l.send_stage->num_held() > 0) {
      tx_passed_.clear();
      if (!l.tx_in.empty()) {
        l.send_stage->Process(l.tx_in, &tx_passed_);
        l.tx_in.clear();
      } else {
        l.send_stage->Release(&tx_passed_);
      }
      l.tx_queue.insert(l.tx_queue.end(), tx_passed_.begin(), tx_passed_.end());
    }
    while (!l.tx_queue.empty()) {
      PacketBuffer* batch[kMaxBurst];
      const size_t n = std::min(l.tx_queue.size(), kMaxBurst);
      uint32_t lens[kMaxBurst];
      std::copy_n(l.tx_queue.begin(), n, batch);
      for (size_t k = 0; k < n; ++k) lens[k] = batch[k]->len();
      const size_t sent = l.link->SendFrames({batch, n}, l.counters);
      uint64_t bytes = 0;
      for (size_t k = 0; k < sent; ++k) bytes += lens[k];
      l.counters.Add(l.counters.tx_frames, sent);
      l.counters.Add(l.counters.tx_bytes, bytes);
      l.tx_queue.erase(l.tx_queue.begin(), l.tx_queue.begin() + static_cast<ptrdiff_t>(sent));
      if (sent < n) break;
    }
    while (l.tx_queue.size() > config_.tx_queue_limit) {
      PacketPool::Free(l.tx_queue.back());
      l.tx_queue.pop_back();
      l.counters.Add(l.counters.tx_queue_full);
    }
  }
}

void FramePort::ArpTick(int64_t now_ns) {
  if (arp_.num_pending() == 0) return;
  arp_requests_.clear();
  failed_.clear();
  arp_.Tick(now_ns, &arp_requests_, &failed_);
  for (uint32_t ip : arp_requests_) SendArpRequest(ip);
  if (!failed_.empty()) {
    Bump(frame_counters_.arp_unresolved, failed_.size());
    counters_.Add(counters_.tx_errors, failed_.size());
    PacketPool::FreeBurst(failed_);
    failed_.clear();
  }
}

// ---------------------------------------------------------------- polling

std::optional<int64_t> FramePort::NextEventNs() const {
  std::optional<int64_t> next = arp_.NextTimerNs();
  auto consider = [&next](std::optional<int64_t> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  for (const auto& l : links_) {
    consider(l->send_stage->NextDueNs());
    consider(l->receive_stage->NextDueNs());
  }
  return next;
}

size_t FramePort::PopReady(std::span<PacketBuffer*> out) {
  const size_t n = std::min(out.size(), rx_ready_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = rx_ready_.front();
    rx_ready_.pop_front();
  }
  return n;
}

size_t FramePort::Flush() { return PollOnce(); }

size_t FramePort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  if (out.empty()) return 0;
  if (rx_ready_.empty()) PollOnce();
  if (!rx_ready_.empty() || timeout <= absl::ZeroDuration()) return PopReady(out);

  if (!config_.busy_poll && config_.idle_timer_slack > absl::ZeroDuration()) {
    // Sleeps of tens of microseconds mean nothing with Linux's default 50 us
    // timer slack. Per thread, and only ever made tighter by us.
    static thread_local int64_t applied_ns = 0;
    const int64_t slack = absl::ToInt64Nanoseconds(config_.idle_timer_slack);
    if (applied_ns != slack) {
      prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
      applied_ns = slack;
    }
  }
  const int64_t deadline = clock_.NowNanos() + absl::ToInt64Nanoseconds(timeout);
  const int64_t min_sleep = absl::ToInt64Nanoseconds(config_.idle_sleep_min);
  const int64_t max_sleep = absl::ToInt64Nanoseconds(config_.idle_sleep_max);
  // The backoff carries over from call to call: a port polled with short
  // timeouts settles at one poll per idle_sleep_max, like one long call.
  while (rx_ready_.empty()) {
    const int64_t now = clock_.NowNanos();
    if (now >= deadline) break;
    if (!config_.busy_poll) {
      int64_t wake = std::min(deadline, now + idle_sleep_ns_);
      if (std::optional<int64_t> event = NextEventNs()) wake = std::min(wake, *event);
      if (wake > now) absl::SleepFor(absl::Nanoseconds(wake - now));
      idle_sleep_ns_ = std::min(std::max(idle_sleep_ns_ * 2, min_sleep), max_sleep);
      // A clock that does not move (a FakeClock in a test) cannot reach the
      // deadline: one sleep and one poll, then give up.
      if (clock_.NowNanos() == now) {
        PollOnce();
        break;
      }
    }
    PollOnce();
  }
  return PopReady(out);
}

// ---------------------------------------------------------------- counters

void FramePort::ForEachCounter(const std::function<void(std::string_view, uint64_t)>& fn) const {
  fn("port.rx_packets", Get(counters_.rx_packets));
  fn("port.rx_bytes", Get(counters_.rx_bytes));
  fn("port.tx_packets", Get(counters_.tx_packets));
  fn("port.tx_bytes", Get(counters_.tx_bytes));
  fn("port.rx_no_buffer", Get(counters_.rx_no_buffer));
  fn("port.rx_truncated", Get(counters_.rx_truncated));
  fn("port.rx_errors", Get(counters_.rx_errors));
  fn("port.tx_errors", Get(counters_.tx_errors));
  for (const auto& l : links_) {
    const std::string prefix = absl::StrFormat("link.%s.", l->link->name());
    const LinkCounters& c = l->counters;
    fn(prefix + "rx_frames", Get(c.rx_frames));
    fn(prefix + "rx_bytes", Get(c.rx_bytes));
    fn(prefix + "tx_frames", Get(c.tx_frames));
    fn(prefix + "tx_bytes", Get(c.tx_bytes));
    fn(prefix + "rx_oversize", Get(c.rx_oversize));
    fn(prefix + "rx_no_buffer", Get(c.rx_no_buffer));
    fn(prefix + "tx_queue_full", Get(c.tx_queue_full));
    fn(prefix + "tx_no_buffer", Get(c.tx_no_buffer));
    fn(prefix + "tx_errors", Get(c.tx_errors));
    ForEachImpairmentCounter(l->send_stage->counters(), prefix + "send.", fn);
    ForEachImpairmentCounter(l->receive_stage->counters(), prefix + "receive.", fn);
    const std::string device = absl::StrFormat("device.%s.", l->link->name());
    l->link->ForEachDeviceCounter(
        [&](std::string_view name, uint64_t value) { fn(device + std::string(name), value); });
  }
  const BridgeCounters& b = bridge_.counters();
  fn("bridge.learned", Get(b.learned));
  fn("bridge.moved", Get(b.moved));
  fn("bridge.aged", Get(b.aged));
  fn("bridge.table_full", Get(b.table_full));
  fn("bridge.forwarded", Get(b.forwarded));
  fn("bridge.flooded_unknown", Get(b.flooded_unknown));
  fn("bridge.flooded_group", Get(b.flooded_group));
  fn("bridge.filtered", Get(b.filtered));
  fn("bridge.bad_source", Get(b.bad_source));
  const FramePortCounters& f = frame_counters_;
  for (size_t r = 1; r < kNumFrameParseResults; ++r) {
    fn(absl::StrFormat("frame.drop.%s", FrameParseResultName(static_cast<FrameParseResult>(r))),
       Get(f.parse_drops[r]));
  }
  fn("frame.rx_bad_source", Get(f.rx_bad_source));
  fn("frame.rx_own_source", Get(f.rx_own_source));
  fn("frame.rx_not_for_us", Get(f.rx_not_for_us));
  fn("frame.rx_unhandled", Get(f.rx_unhandled));
  fn("frame.rx_icrc_normalized", Get(f.rx_icrc_normalized));
  fn("frame.arp_requests_received", Get(f.arp_requests_received));
  fn("frame.arp_replies_received", Get(f.arp_replies_received));
  fn("frame.arp_requests_sent", Get(f.arp_requests_sent));
  fn("frame.arp_replies_sent", Get(f.arp_replies_sent));
  fn("frame.arp_unresolved", Get(f.arp_unresolved));
  fn("frame.arp_hold_refused", Get(f.arp_hold_refused));
  fn("frame.icmp_echo_replies", Get(f.icmp_echo_replies));
  fn("frame.tx_too_big", Get(f.tx_too_big));
  fn("frame.tx_loopback", Get(f.tx_loopback));
}

}  // namespace netfold::transport::dpdk
