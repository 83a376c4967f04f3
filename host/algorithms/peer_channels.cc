#include "host/algorithms/peer_channels.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace netfold::host::algorithms {

using transport::QpState;

namespace {

// Connection record layout (little-endian), docs/algorithms.md "Channels".
constexpr uint32_t kRecordMagic = 0x4350464e;  // "NFPC"
constexpr size_t kRecordHeaderBytes = 20;
constexpr size_t kRecordEntryBytes = 8;
// Probes are the only messages with an immediate: keepalives, and the
// announcement of a failover (AnnounceOnHosts).
constexpr uint32_t kKeepaliveImm = 0x6b616c76;  // "kalv"
constexpr uint32_t kOnHostsImm = 0x686f7374;    // "host"

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint32_t Get32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

uint32_t DerivedPsn(uint64_t seed, uint32_t rank, uint32_t peer) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t{rank} << 32 | peer);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x) & 0xFFFFFF;
}

}  // namespace

RcPeerChannels::RcPeerChannels(transport::RoceEndpoint* endpoint, uint32_t rank,
                               uint32_t num_ranks, const RcPeerChannelsOptions& options)
    : endpoint_(endpoint), rank_(rank), num_ranks_(num_ranks), options_(options) {}

absl::StatusOr<std::unique_ptr<RcPeerChannels>> RcPeerChannels::Create(
    transport::RoceEndpoint* endpoint, uint32_t rank, uint32_t num_ranks,
    const RcPeerChannelsOptions& options) {
  if (endpoint == nullptr) return absl::InvalidArgumentError("no endpoint");
  if (rank >= num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d out of range (%d ranks)", rank, num_ranks));
  }
  if (options.queue_depth == 0 || options.max_message_bytes == 0 ||
      options.max_outstanding_packets == 0) {
    return absl::InvalidArgumentError(
        "queue_depth, max_message_bytes and max_outstanding_packets must be positive");
  }
  std::unique_ptr<RcPeerChannels> c(new RcPeerChannels(endpoint, rank, num_ranks, options));
  c->peers_.resize(num_ranks);
  absl::BitGen gen;
  transport::RcQpAttributes init;
  init.pkey = options.pkey;
  for (uint32_t q = 0; q < num_ranks; ++q) {
    if (q == rank) continue;
    NETFOLD_ASSIGN_OR_RETURN(
        transport::RcQueuePair * qp,
        endpoint->CreateRcQp({.max_send_queue = options.queue_depth,
                              .max_recv_queue = options.queue_depth,
                              .max_message_size = options.max_message_bytes,
                              .max_outstanding_packets = options.max_outstanding_packets}));
    c->peers_[q].qp = qp;
    NETFOLD_RETURN_IF_ERROR(qp->Modify(QpState::kInit, init));
    c->peers_[q].psn = options.psn_seed != 0
                           ? DerivedPsn(options.psn_seed, rank, q)
                           : absl::Uniform<uint32_t>(gen, 0, 1u << 24);
  }
  return c;
}

RcPeerChannels::~RcPeerChannels() {
  for (Peer& p : peers_) {
    if (p.qp != nullptr) (void)endpoint_->DestroyQp(p.qp->qpn());
  }
}

size_t RcPeerChannels::ConnectionRecordBytes(uint32_t num_ranks) {
  return kRecordHeaderBytes + kRecordEntryBytes * size_t{num_ranks};
}

std::vector<uint8_t> RcPeerChannels::LocalRecord() const {
  std::vector<uint8_t> r(ConnectionRecordBytes(num_ranks_), 0);
  const transport::Ipv4Endpoint local = endpoint_->local();
  Put32(&r[0], kRecordMagic);
  Put32(&r[4], rank_);
  Put32(&r[8], num_ranks_);
  Put32(&r[12], local.ip);
  Put16(&r[16], local.port);
  for (uint32_t q = 0; q < num_ranks_; ++q) {
    if (peers_[q].qp == nullptr) continue;
    uint8_t* e = &r[kRecordHeaderBytes + kRecordEntryBytes * q];
    Put32(e, peers_[q].qp->qpn());
    Put32(e + 4, peers_[q].psn);
  }
  return r;
}

absl::Status RcPeerChannels::Connect(std::span<const uint8_t> all_records) {
  const size_t bytes = ConnectionRecordBytes(num_ranks_);
  if (all_records.size() != bytes * num_ranks_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "connection records: got %d bytes, expected %d records of %d bytes", all_records.size(),
        num_ranks_, bytes));
  }
  if (connected_) return absl::FailedPreconditionError("peer channels are already connected");
  for (uint32_t q = 0; q < num_ranks_; ++q) {
    const uint8_t* rec = all_records.data() + bytes * q;
    if (Get32(rec) != kRecordMagic || Get32(rec + 4) != q || Get32(rec + 8) != num_ranks_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "connection record %d is not rank %d's of a %d-rank group (rank %d of %d, magic %08x)",
          q, q, num_ranks_, Get32(rec + 4), Get32(rec + 8), Get32(rec)));
    }
  }
  for (uint32_t q = 0; q < num_ranks_; ++q) {
    if (q == rank_) continue;
    const uint8_t* rec = all_records.data() + bytes * q;
    const uint8_t* entry = rec + kRecordHeaderBytes + kRecordEntryBytes * rank_;
    transport::RcQpAttributes attrs;
    attrs.pkey = options_.pkey;
    attrs.remote = {Get32(rec + 12), Get16(rec + 16)};
    attrs.remote_qpn = Get32(entry);
    attrs.rq_psn = Get32(entry + 4);
    attrs.path_mtu = options_.path_mtu;
    attrs.sq_psn = peers_[q].psn;
    attrs.timeout = options_.ack_timeout;
    attrs.retry_count = options_.retry_count;
    attrs.rnr_retry = 7;
    transport::RcQueuePair* qp = peers_[q].qp;
    absl::Status s = qp->Modify(QpState::kRtr, attrs);
    if (s.ok()) s = qp->Modify(QpState::kRts, attrs);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "connecting to rank %d (%s, QPN 0x%06x): %s", q, attrs.remote.ToString(),
          attrs.remote_qpn, s.ToString()));
    }
  }
  connected_ = true;
  return absl::OkStatus();
}

absl::Status RcPeerChannels::ConnectWithOob(const OobCallbacks& oob) {
  if (!oob.allgather) return absl::InvalidArgumentError("no OOB allgather callback");
  const std::vector<uint8_t> mine = LocalRecord();
  std::vector<uint8_t> all(mine.size() * num_ranks_);
  NETFOLD_RETURN_IF_ERROR(oob.allgather(mine, std::span<uint8_t>(all)));
  NETFOLD_RETURN_IF_ERROR(Connect(all));
  if (oob.barrier) NETFOLD_RETURN_IF_ERROR(oob.barrier());
  return absl::OkStatus();
}

absl::Status RcPeerChannels::CheckPeer(uint32_t peer) const {
  if (peer >= num_ranks_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d has no channel to rank %d (%d ranks)", rank_, peer, num_ranks_));
  }
  if (!connected_) return absl::FailedPreconditionError("peer channels are not connected");
  return absl::OkStatus();
}

absl::Status RcPeerChannels::Send(uint32_t peer, std::span<const uint8_t> message) {
  NETFOLD_RETURN_IF_ERROR(CheckPeer(peer));
  if (message.size() > options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "message of %d bytes exceeds the channels' limit of %d", message.size(),
        options_.max_message_bytes));
  }
  transport::RcQueuePair* qp = peers_[peer].qp;
  if (qp->state() == QpState::kError) return PeerStatus(peer);
  absl::Status s = qp->PostSend(message, 0);
  if (absl::IsFailedPrecondition(s)) return PeerStatus(peer);
  return s;
}

bool RcPeerChannels::Peek(uint32_t peer, std::span<const uint8_t>* message) {
  if (peer >= num_ranks_ || peer == rank_ || !connected_) return false;
  Peer& p = peers_[peer];
  if (!p.backlog.empty()) {
    *message = p.backlog.front();
    p.waiting_since_ns = -1;
    return true;
  }
  transport::RecvMessage m;
  while (p.qp->PeekRecv(&m)) {
    if (!PopProbe(p, m)) {
      *message = m.data;
      p.waiting_since_ns = -1;
      return true;
    }
  }
  const int64_t now = clock().NowNanos();
  if (p.waiting_since_ns < 0) p.waiting_since_ns = now;
  p.last_peek_ns = now;
  return false;
}

bool RcPeerChannels::PopProbe(Peer& p, const transport::RecvMessage& m) {
  if (!m.imm.has_value()) return false;
  if (*m.imm == kOnHostsImm) p.announced_on_hosts = true;
  p.qp->PopRecv();
  return true;
}

void RcPeerChannels::AnnounceOnHosts() {
  if (!connected_) return;
  for (Peer& p : peers_) {
    if (p.qp == nullptr || p.qp->state() != QpState::kRts) continue;
    (void)p.qp->PostSend({}, 0, kOnHostsImm);  // a full send queue: its messages tell it too
  }
  endpoint_->Flush();
}

std::optional<uint32_t> RcPeerChannels::PeerOnHosts() {
  if (!connected_) return std::nullopt;
  for (uint32_t peer = 0; peer < num_ranks_; ++peer) {
    if (peer == rank_) continue;
    Peer& p = peers_[peer];
    transport::RecvMessage m;
    while (p.qp->PeekRecv(&m) && PopProbe(p, m)) {
    }
    if (p.announced_on_hosts || !p.backlog.empty() || p.qp->num_recv_queued() > 0) return peer;
  }
  return std::nullopt;
}

void RcPeerChannels::Pop(uint32_t peer) {
  if (peer >= num_ranks_ || peer == rank_ || !connected_) return;
  Peer& p = peers_[peer];
  if (!p.backlog.empty()) {
    p.backlog.pop_front();
    return;
  }
  transport::RecvMessage m;
  if (p.qp->PeekRecv(&m)) p.qp->PopRecv();
}

// The endpoint hands the QPs at most one burst per Progress, so moving the
// messages out once the queue is half full keeps it from ever filling (an
// RC receiver with a full queue answers RNR, and a sender that keeps
// hearing RNR eventually gives up on the connection).
void RcPeerChannels::Drain(Peer& p) {
  if (p.qp == nullptr || p.qp->num_recv_queued() < std::max<uint32_t>(1, options_.queue_depth / 2)) {
    return;
  }
  transport::RecvMessage m;
  while (p.qp->PeekRecv(&m)) {
    if (PopProbe(p, m)) continue;
    p.backlog.emplace_back(m.data.begin(), m.data.end());
    ++messages_backlogged_;
    p.qp->PopRecv();
  }
}

absl::Status RcPeerChannels::PeerStatus(uint32_t peer) const {
  NETFOLD_RETURN_IF_ERROR(CheckPeer(peer));
  const transport::RcQueuePair* qp = peers_[peer].qp;
  if (qp->state() != QpState::kError) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "rank %d is unavailable: the connection to it (%s) failed: %s", peer,
      qp->attributes().remote.ToString(), qp->error().message()));
}

size_t RcPeerChannels::Unacknowledged(uint32_t peer) const {
  if (peer >= num_ranks_ || peer == rank_ || peers_[peer].qp == nullptr) return 0;
  return peers_[peer].qp->num_send_queued();
}

void RcPeerChannels::DrainCompletions() {
  transport::SendCompletion sc;
  for (Peer& p : peers_) {
    if (p.qp == nullptr) continue;
    while (p.qp->PollSendCompletion(&sc)) {
    }
  }
}

void RcPeerChannels::SendKeepalives() {
  if (!connected_) return;
  const int64_t now = clock().NowNanos();
  const int64_t interval = absl::ToInt64Nanoseconds(options_.keepalive_interval);
  bool sent = false;
  for (uint32_t q = 0; q < num_ranks_; ++q) {
    Peer& p = peers_[q];
    // Only while someone keeps asking for this peer's messages.
    if (p.qp == nullptr || p.waiting_since_ns < 0 || p.last_peek_ns < now - interval) continue;
    if (now < std::max(p.waiting_since_ns, p.last_probe_ns) + interval) continue;
    if (p.qp->state() != QpState::kRts || p.qp->num_send_queued() > 0) continue;
    if (p.qp->PostSend({}, 0, kKeepaliveImm).ok()) {
      p.last_probe_ns = now;
      ++keepalives_sent_;
      sent = true;
    }
  }
  if (sent) endpoint_->Flush();
}

void RcPeerChannels::Progress(absl::Duration timeout) {
  endpoint_->Progress(timeout);
  for (Peer& p : peers_) Drain(p);
  DrainCompletions();
  SendKeepalives();
}

void RcPeerChannels::Flush() {
  endpoint_->Flush();
  DrainCompletions();
}

std::optional<int64_t> RcPeerChannels::NextTimerNs() const {
  std::optional<int64_t> next = endpoint_->NextTimerNs();
  const int64_t interval = absl::ToInt64Nanoseconds(options_.keepalive_interval);
  const int64_t now = clock().NowNanos();
  for (uint32_t q = 0; q < num_ranks_; ++q) {
    const Peer& p = peers_[q];
    if (p.qp == nullptr || p.waiting_since_ns < 0 || p.last_peek_ns < now - interval) continue;
    const int64_t due = std::max(p.waiting_since_ns, p.last_probe_ns) + interval;
    if (!next || due < *next) next = due;
  }
  return next;
}

const transport::RcQueuePair* RcPeerChannels::qp(uint32_t peer) const {
  return peer < num_ranks_ ? peers_[peer].qp : nullptr;
}

}  // namespace netfold::host::algorithms
