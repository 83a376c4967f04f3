#include "transport/impaired_port.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace netfold::transport {

absl::StatusOr<LinkDirection> ParseLinkDirection(std::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::string_view(text.data(), text.size()));
  if (t == "send" || t == "tx") return LinkDirection::kSend;
  if (t == "receive" || t == "recv" || t == "rx") return LinkDirection::kReceive;
  if (t == "both" || t.empty()) return LinkDirection::kBoth;
  return absl::InvalidArgumentError(
      absl::StrFormat("link direction '%s' is not one of send, receive, both", text));
}

std::string_view LinkDirectionName(LinkDirection direction) {
  switch (direction) {
    case LinkDirection::kSend: return "send";
    case LinkDirection::kReceive: return "receive";
    case LinkDirection::kBoth: return "both";
  }
  return "invalid";
}

uint64_t ImpairedPort::DeriveSeed(uint64_t seed, const Ipv4Endpoint& peer) {
  // splitmix64 of the seed mixed with the address: different per peer,
  // identical across runs and platforms.
  uint64_t z = seed ^ ((static_cast<uint64_t>(peer.ip) << 16) | peer.port);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ImpairmentConfig ImpairedPort::ForPeer(const ImpairmentConfig& config,
                                       const Ipv4Endpoint& peer) const {
  ImpairmentConfig c = config;
  // One link has nothing to fall into lockstep with: its seed stays as given.
  if (max_peers_ > 1) c.seed = DeriveSeed(config.seed, peer);
  return c;
}

ImpairedPort::ImpairedPort(std::unique_ptr<Port> inner, const Clock& clock, size_t max_peers)
    : inner_(std::move(inner)), clock_(clock), max_peers_(std::max<size_t>(max_peers, 1)) {}

ImpairedPort::ImpairedPort(std::unique_ptr<Port> inner, const ImpairmentConfig& send,
                           const ImpairmentConfig& receive, const Clock& clock)
    : ImpairedPort(std::move(inner), clock, /*max_peers=*/1) {
  ever_impaired_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  default_send_ = send;
  default_receive_ = receive;
  link_ = FindOrCreateLocked(Ipv4Endpoint{});
  dp_peers_ = peer_list_;
}

const LinkImpairment& ImpairedPort::send_stage() const {
  assert(link_ != nullptr && "send_stage() of a port with peers: use SnapshotPeer");
  return link_->send;
}

const LinkImpairment& ImpairedPort::receive_stage() const {
  assert(link_ != nullptr && "receive_stage() of a port with peers: use SnapshotPeer");
  return link_->receive;
}

ImpairedPort::~ImpairedPort() {
  for (PacketBuffer* p : pending_tx_) PacketPool::Free(p);
  for (PacketBuffer* p : ready_rx_) PacketPool::Free(p);
  absl::MutexLock lock(&mu_);
  for (Peer* p : peer_list_) {
    p->send.DropHeld();
    p->receive.DropHeld();
  }
}

ImpairedPort::Peer* ImpairedPort::FindOrCreateLocked(const Ipv4Endpoint& address) {
  auto it = peers_.find(address);
  if (it != peers_.end()) return it->second.get();
  Ipv4Endpoint key = address;
  if (peers_.size() + 1 >= max_peers_) {
    // Full: everything new shares the overflow peer (created once; the +1
    // above keeps room for it).
    key = Ipv4Endpoint{};
    auto o = peers_.find(key);
    if (o != peers_.end()) return o->second.get();
  }
  auto peer = std::make_unique<Peer>(key, ForPeer(default_send_, key),
                                     ForPeer(default_receive_, key), clock_);
  Peer* raw = peer.get();
  peers_[key] = std::move(peer);
  peer_list_.push_back(raw);
  num_peers_.store(peer_list_.size(), std::memory_order_relaxed);
  return raw;
}

void ImpairedPort::SetDefaultImpairment(LinkDirection direction, const ImpairmentConfig& config) {
  ever_impaired_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  if (direction != LinkDirection::kReceive) default_send_ = config;
  if (direction != LinkDirection::kSend) default_receive_ = config;
}

void ImpairedPort::SetAllImpairment(LinkDirection direction, const ImpairmentConfig& config) {
  ever_impaired_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  if (direction != LinkDirection::kReceive) default_send_ = config;
  if (direction != LinkDirection::kSend) default_receive_ = config;
  for (Peer* p : peer_list_) {
    if (direction != LinkDirection::kReceive) p->send.SetConfig(ForPeer(config, p->address));
    if (direction != LinkDirection::kSend) p->receive.SetConfig(ForPeer(config, p->address));
  }
}

absl::Status ImpairedPort::SetPeerImpairment(const Ipv4Endpoint& peer, LinkDirection direction,
                                             const ImpairmentConfig& config) {
  ever_impaired_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  Peer* p = FindOrCreateLocked(peer);
  if (!(p->address == peer)) {
    return absl::ResourceExhaustedError(
        link_ != nullptr
            ? absl::StrFormat("cannot track peer %s: the port has one link", peer.ToString())
            : absl::StrFormat("cannot track peer %s: %d peers already tracked", peer.ToString(),
                              max_peers_));
  }
  if (direction != LinkDirection::kReceive) p->send.SetConfig(config);
  if (direction != LinkDirection::kSend) p->receive.SetConfig(config);
  return absl::OkStatus();
}

ImpairmentConfig ImpairedPort::default_send() const {
  absl::MutexLock lock(&mu_);
  return default_send_;
}

ImpairmentConfig ImpairedPort::default_receive() const {
  absl::MutexLock lock(&mu_);
  return default_receive_;
}

size_t ImpairedPort::num_peers() const { return num_peers_.load(std::memory_order_relaxed); }

PeerLinkSnapshot ImpairedPort::SnapshotOf(const Peer& p) {
  auto stage = [](const ImpairmentCounters& c) {
    PeerLinkSnapshot::Stage s;
    s.packets_in = c.packets_in.load(std::memory_order_relaxed);
    s.packets_out = c.packets_out.load(std::memory_order_relaxed);
    s.dropped_down = c.dropped_down.load(std::memory_order_relaxed);
    s.dropped_random = c.dropped_random.load(std::memory_order_relaxed);
    s.dropped_burst = c.dropped_burst.load(std::memory_order_relaxed);
    s.dropped_rate = c.dropped_rate.load(std::memory_order_relaxed);
    s.duplicated = c.duplicated.load(std::memory_order_relaxed);
    s.corrupted = c.corrupted.load(std::memory_order_relaxed);
    s.reordered = c.reordered.load(std::memory_order_relaxed);
    s.delayed = c.delayed.load(std::memory_order_relaxed);
    return s;
  };
  PeerLinkSnapshot s;
  s.peer = p.address;
  s.send = p.send.config();
  s.receive = p.receive.config();
  s.rx_packets = p.traffic.rx_packets.load(std::memory_order_relaxed);
  s.rx_bytes = p.traffic.rx_bytes.load(std::memory_order_relaxed);
  s.tx_packets = p.traffic.tx_packets.load(std::memory_order_relaxed);
  s.tx_bytes = p.traffic.tx_bytes.load(std::memory_order_relaxed);
  s.send_stage = stage(p.send.counters());
  s.receive_stage = stage(p.receive.counters());
  return s;
}

std::vector<PeerLinkSnapshot> ImpairedPort::Snapshot() const {
  std::vector<PeerLinkSnapshot> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(peer_list_.size());
    for (const Peer* p : peer_list_) out.push_back(SnapshotOf(*p));
  }
  std::sort(out.begin(), out.end(), [](const PeerLinkSnapshot& a, const PeerLinkSnapshot& b) {
    return a.peer.ip != b.peer.ip ? a.peer.ip < b.peer.ip : a.peer.port < b.peer.port;
  });
  return out;
}

std::optional<PeerLinkSnapshot> ImpairedPort::SnapshotPeer(const Ipv4Endpoint& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  return SnapshotOf(*it->second);
}

void ImpairedPort::TransmitPending() {
  while (!pending_tx_.empty()) {
    scratch_.assign(pending_tx_.begin(),
                    pending_tx_.begin() +
                        static_cast<ptrdiff_t>(std::min<size_t>(pending_tx_.size(), 64)));
    const size_t taken = inner_->SendBurst(scratch_);
    pending_tx_.erase(pending_tx_.begin(), pending_tx_.begin() + static_cast<ptrdiff_t>(taken));
    if (taken < scratch_.size()) break;
  }
  scratch_.clear();
  while (pending_tx_.size() > kMaxPendingTx) {
    PacketPool::Free(pending_tx_.back());
    pending_tx_.pop_back();
    tx_overflow_.fetch_add(1, std::memory_order_relaxed);
  }
}

// Both directions' held packets that are due: sends to pending_tx_,
// receives to ready_rx_. Data-plane thread only; dp_peers_ is its view.
void ImpairedPort::ReleaseHeld() {
  for (Peer* p : dp_peers_) {
    if (p->send.num_held() > 0) {
      staged_.clear();
      p->send.Release(&staged_);
      pending_tx_.insert(pending_tx_.end(), staged_.begin(), staged_.end());
    }
    if (p->receive.num_held() > 0) {
      staged_.clear();
      p->receive.Release(&staged_);
      ready_rx_.insert(ready_rx_.end(), staged_.begin(), staged_.end());
    }
  }
  staged_.clear();
}

std::optional<int64_t> ImpairedPort::NextDueNs() const {
  std::optional<int64_t> next;
  for (Peer* p : dp_peers_) {
    for (const LinkImpairment* stage : {&p->send, &p->receive}) {
      if (stage->num_held() == 0) continue;
      if (auto due = stage->NextDueNs()) next = next ? std::min(*next, *due) : *due;
    }
  }
  return next;
}

void ImpairedPort::Flush() {
  ReleaseHeld();
  TransmitPending();
}

ImpairedPort::Peer* ImpairedPort::DataPlanePeer(const Ipv4Endpoint& address) {
  if (link_ != nullptr) return link_;
  if (auto it = dp_lookup_.find(address); it != dp_lookup_.end()) return it->second;
  Peer* peer;
  {
    absl::MutexLock lock(&mu_);
    peer = FindOrCreateLocked(address);
    if (dp_peers_.size() != peer_list_.size()) dp_peers_ = peer_list_;
  }
  // Addresses beyond the tracking limit share the overflow peer; caching
  // each of them would grow without bound.
  if (dp_lookup_.size() < 2 * max_peers_) dp_lookup_[address] = peer;
  return peer;
}

void ImpairedPort::RefreshDataPlanePeers() {
  if (num_peers_.load(std::memory_order_relaxed) == dp_peers_.size()) return;
  absl::MutexLock lock(&mu_);
  dp_peers_ = peer_list_;
}

void ImpairedPort::ThroughStages(std::span<PacketBuffer* const> packets, bool sending,
                                 std::deque<PacketBuffer*>* out) {
  auto peer_of = [sending](const PacketBuffer* p) -> const Ipv4Endpoint& {
    return sending ? p->dst : p->src;
  };
  size_t i = 0;
  while (i < packets.size()) {
    // A run of packets of the same peer (every packet, on one link) goes
    // through its stage at once.
    size_t j = i + 1;
    while (j < packets.size() && (link_ != nullptr || peer_of(packets[j]) == peer_of(packets[i]))) {
      ++j;
    }
    Peer* peer = DataPlanePeer(peer_of(packets[i]));
    uint64_t bytes = 0;
    for (size_t k = i; k < j; ++k) bytes += packets[k]->len();
    PeerTrafficCounters& t = peer->traffic;
    (sending ? t.tx_packets : t.rx_packets).fetch_add(j - i, std::memory_order_relaxed);
    (sending ? t.tx_bytes : t.rx_bytes).fetch_add(bytes, std::memory_order_relaxed);
    staged_.clear();
    (sending ? peer->send : peer->receive).Process(packets.subspan(i, j - i), &staged_);
    out->insert(out->end(), staged_.begin(), staged_.end());
    i = j;
  }
  staged_.clear();
}

size_t ImpairedPort::SendBurst(std::span<PacketBuffer* const> packets) {
  ThroughStages(packets, /*sending=*/true, &pending_tx_);
  TransmitPending();
  // What waits for the inner port outlives this call: its bytes must be
  // its own (PacketBuffer::external).
  for (PacketBuffer* p : pending_tx_) p->Materialize();
  return packets.size();  // the stages own every packet now
}

absl::Duration ImpairedPort::SleepBound(absl::Duration limit) {
  if (!ready_rx_.empty()) return absl::ZeroDuration();
  if (auto due = NextDueNs()) {
    limit = std::min(limit, absl::Nanoseconds(std::max<int64_t>(0, *due - clock_.NowNanos())));
  }
  return inner_->SleepBound(limit);
}

bool ImpairedPort::MayHoldMore() const {
  if (!ready_rx_.empty() || inner_->MayHoldMore()) return true;
  const std::optional<int64_t> due = NextDueNs();
  return due.has_value() && *due <= clock_.NowNanos();
}

size_t ImpairedPort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  RefreshDataPlanePeers();
  Flush();
  const int64_t deadline_ns = clock_.NowNanos() + absl::ToInt64Nanoseconds(timeout);
  PacketBuffer* burst[64];
  while (ready_rx_.empty()) {
    // Wait for the network, but not past the moment a held packet (either
    // direction) becomes due.
    int64_t wait_until = deadline_ns;
    if (auto due = NextDueNs()) wait_until = std::min(wait_until, *due);
    const int64_t now = clock_.NowNanos();
    const absl::Duration wait = absl::Nanoseconds(std::max<int64_t>(0, wait_until - now));
    const size_t n = inner_->RecvBurst(
        {burst, std::min<size_t>(64, std::max<size_t>(out.size(), 1))}, wait);
    ThroughStages({burst, n}, /*sending=*/false, &ready_rx_);
    Flush();
    const int64_t after = clock_.NowNanos();
    // A clock that does not move (a FakeClock in a test) cannot reach the
    // deadline: give up after one empty pass instead of spinning.
    if (!ready_rx_.empty() || after >= deadline_ns || (n == 0 && after == now) ||
        woken_.exchange(false, std::memory_order_relaxed)) {
      break;
    }
  }
  const size_t count = std::min(out.size(), ready_rx_.size());
  for (size_t i = 0; i < count; ++i) {
    out[i] = ready_rx_.front();
    ready_rx_.pop_front();
  }
  // What waits for the next call must not hold a placer's memory
  // (Port::SetReceivePlacer).
  for (PacketBuffer* p : ready_rx_) p->Materialize();
  return count;
}

}  // namespace netfold::transport
