// Point-to-point message channels between the ranks of a group, for the
// host-side algorithms: post a message to rank r, look at / consume the next
// message from rank r, all nonblocking, moved by Progress(). The RC
// implementation keeps one reliable connection (RC queue pair) to every
// other rank on a transport::RoceEndpoint; the caller connects them through
// an out-of-band allgather (the library's OOB callbacks).
//
//   auto channels = *RcPeerChannels::Create(&endpoint, rank, size, {});
//   NETFOLD_RETURN_IF_ERROR(channels->ConnectWithOob({
//       .allgather = [&](std::span<const uint8_t> mine, std::span<uint8_t> all) {
//         return oob.Allgather(mine.data(), all.data(), mine.size());
//       },
//       .barrier = [&] { return oob.Barrier(); }}));
//   channels->Send(peer, bytes);                 // copied; ResourceExhausted: retry later
//   std::span<const uint8_t> m;
//   if (channels->Peek(peer, &m)) { use(m); channels->Pop(peer); }
//   channels->Progress(absl::Milliseconds(1));   // receive, retransmit, send
//
// Messages between two ranks arrive exactly once and in order, or the
// channel fails: PeerStatus(r) then says Unavailable, naming rank r. The
// receive side never refuses a message (no RNR): when a peer's messages pile
// up unconsumed, Progress moves them out of the QP into a backlog, so a rank
// that is merely busy or blocked is never taken for a dead one; memory then
// grows with what its peers sent it (bounded by the operation). A rank
// that waits on a silent peer (Peek finds nothing) probes it every
// `keepalive_interval` with an empty message, so a dead peer is noticed by
// the RC retry budget even when nothing else is sent to it.
//
// Thread-safety: a PeerChannels belongs to the thread that runs its
// endpoint. Not thread-safe.
#ifndef NETFOLD_HOST_ALGORITHMS_PEER_CHANNELS_H_
#define NETFOLD_HOST_ALGORITHMS_PEER_CHANNELS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "transport/rc_queue_pair.h"
#include "transport/roce_endpoint.h"

namespace netfold::host::algorithms {

class PeerChannels {
 public:
  virtual ~PeerChannels() = default;

  virtual uint32_t rank() const = 0;
  virtual uint32_t num_ranks() const = 0;
  // The largest message Send accepts, in bytes.
  virtual size_t max_message_bytes() const = 0;

  // Queues `message` (copied before returning) for `peer`. ResourceExhausted
  // when the peer's send queue is full (retry after Progress); Unavailable
  // naming the peer once its connection failed; InvalidArgument for a peer
  // out of range, oneself, or a message over max_message_bytes().
  virtual absl::Status Send(uint32_t peer, std::span<const uint8_t> message) = 0;

  // The oldest message from `peer` not yet popped; false if there is none.
  // The bytes stay valid until Pop(peer), Progress() or Flush().
  virtual bool Peek(uint32_t peer, std::span<const uint8_t>* message) = 0;
  // Drops the message Peek(peer) returned.
  virtual void Pop(uint32_t peer) = 0;

  // OK while the connection to `peer` works; Unavailable naming the peer
  // and why once it failed (messages to it may then be lost).
  virtual absl::Status PeerStatus(uint32_t peer) const = 0;
  // Messages sent to `peer` that it has not acknowledged yet (it has every
  // message once this is 0, and this rank owes it no more progress).
  virtual size_t Unacknowledged(uint32_t peer) const = 0;

  // Receives for at most `timeout` (less when a timer is due), then sends
  // what is queued. Never blocks longer than `timeout`. Whoever runs the
  // underlying transport must call it regularly (with a zero timeout if it
  // ran the transport itself), also between operations.
  virtual void Progress(absl::Duration timeout) = 0;
  // Sends what is queued without receiving.
  virtual void Flush() = 0;
  // When Progress() next has timed work (clock nanoseconds); nullopt if none.
  virtual std::optional<int64_t> NextTimerNs() const = 0;
  virtual const Clock& clock() const = 0;
};

// The out-of-band collectives channel setup needs (the library's OOB
// callbacks: MPI, a TCP rendezvous, threads in tests).
struct OobCallbacks {
  // Gathers `mine` (the same size on every rank) from every rank into
  // `all` (num_ranks * mine.size() bytes, in rank order). Required.
  std::function<absl::Status(std::span<const uint8_t> mine, std::span<uint8_t> all)> allgather;
  // A barrier over the ranks; optional. When given, ConnectWithOob returns
  // only once every rank's queue pairs are ready, so the first messages are
  // not dropped by a peer still connecting (they would be retransmitted).
  std::function<absl::Status()> barrier;
};

struct RcPeerChannelsOptions {
  uint16_t pkey = 0xFFFF;
  uint32_t path_mtu = 4096;
  // Largest message; the engine's fragment plus its 32-byte header must fit.
  uint32_t max_message_bytes = 256 * 1024 + 64;
  // Messages posted and not yet acknowledged / received and not yet consumed,
  // per peer.
  uint32_t queue_depth = 128;
  // Packets in flight per peer (the go-back-N window). Small enough that
  // every peer's window fits the receiver's socket buffer together: a
  // window that overflows it is lost whole and resent whole.
  uint32_t max_outstanding_packets = 64;
  // RC retransmission: a peer that acknowledges nothing for
  // ack_timeout * (1 + 2 + 4 + ... + 64 + 64) = 191 * ack_timeout (7 retries,
  // docs/transport.md; 12 s with these defaults) is declared dead. A rank
  // that does not progress its transport that long (busy elsewhere while a
  // peer sends to it) is indistinguishable from a dead one. The same 64 ms
  // as a switch's toward hosts (transport.host_ack_timeout_ms): at 10 ms
  // (1.9 s), live but starved peers were declared dead when 16 ranks ran
  // 64 MiB allreduces on 2 cores. Operations still end at their own deadline.
  absl::Duration ack_timeout = absl::Milliseconds(64);
  uint8_t retry_count = 7;
  // A rank waiting on a silent peer probes it this often.
  absl::Duration keepalive_interval = absl::Milliseconds(200);
  // First PSNs: derived from this seed, rank and peer when non-zero (tests);
  // random otherwise.
  uint64_t psn_seed = 0;
};

class RcPeerChannels : public PeerChannels {
 public:
  // Creates one RC QP per other rank on `endpoint`, in INIT. The endpoint is
  // not owned and must outlive the channels; other QPs may share it (the
  // fabric's), and whoever runs the endpoint may call Progress on it instead
  // of on the channels. InvalidArgument for rank >= num_ranks.
  static absl::StatusOr<std::unique_ptr<RcPeerChannels>> Create(
      transport::RoceEndpoint* endpoint, uint32_t rank, uint32_t num_ranks,
      const RcPeerChannelsOptions& options);
  // Destroys the QPs (peers see the connections fail).
  ~RcPeerChannels() override;

  // This rank's connection record: its address and, for every rank, the QPN
  // and first PSN of the QP facing it. ConnectionRecordBytes(num_ranks)
  // bytes, the same on every rank.
  std::vector<uint8_t> LocalRecord() const;
  static size_t ConnectionRecordBytes(uint32_t num_ranks);
  // Connects every QP (RTR, RTS) from the records of all ranks, concatenated
  // in rank order (what an allgather of LocalRecord() returns).
  // InvalidArgument for records of the wrong size, rank or group size.
  absl::Status Connect(std::span<const uint8_t> all_records);
  // LocalRecord -> oob.allgather -> Connect -> oob.barrier (if given).
  absl::Status ConnectWithOob(const OobCallbacks& oob);
  bool connected() const { return connected_; }

  uint32_t rank() const override { return rank_; }
  uint32_t num_ranks() const override { return num_ranks_; }
  size_t max_message_bytes() const override { return options_.max_message_bytes; }
  absl::Status Send(uint32_t peer, std::span<const uint8_t> message) override;
  bool Peek(uint32_t peer, std::span<const uint8_t>* message) override;
  void Pop(uint32_t peer) override;
  absl::Status PeerStatus(uint32_t peer) const override;
  size_t Unacknowledged(uint32_t peer) const override;
  void Progress(absl::Duration timeout) override;
  void Flush() override;
  std::optional<int64_t> NextTimerNs() const override;
  const Clock& clock() const override { return endpoint_->clock(); }

  // Tells every peer that this rank now runs its collectives on the hosts
  // (a failover): a probe like the keepalives, which the peers' engines
  // never see. Peers whose connection failed are skipped.
  void AnnounceOnHosts();
  // The first peer that announced it runs on the hosts or has a message
  // (not a probe) waiting, if any; without the bookkeeping of Peek. To a
  // group still on the fabric, either means that peer failed over.
  std::optional<uint32_t> PeerOnHosts();

  // The QP facing `peer` (nullptr for oneself), e.g. for counters.
  const transport::RcQueuePair* qp(uint32_t peer) const;
  uint64_t keepalives_sent() const { return keepalives_sent_; }
  // Messages that went through a backlog (the consumer lagged behind).
  uint64_t messages_backlogged() const { return messages_backlogged_; }

 private:
  struct Peer {
    transport::RcQueuePair* qp = nullptr;
    uint32_t psn = 0;               // our first PSN toward the peer
    int64_t waiting_since_ns = -1;  // Peek has found nothing since then (-1: it found a message)
    int64_t last_peek_ns = -1;      // the last Peek that found nothing
    int64_t last_probe_ns = -1;     // the last keepalive sent
    bool announced_on_hosts = false;  // its AnnounceOnHosts probe came
    // Messages moved out of the QP's receive queue (older than those still
    // in it), so that the queue never fills: see Drain.
    std::deque<std::vector<uint8_t>> backlog;
  };
  RcPeerChannels(transport::RoceEndpoint* endpoint, uint32_t rank, uint32_t num_ranks,
                 const RcPeerChannelsOptions& options);
  absl::Status CheckPeer(uint32_t peer) const;
  void DrainCompletions();
  void Drain(Peer& p);
  // Pops the probe at the head of the peer's receive queue (noting an
  // announcement); false if the head is a message.
  bool PopProbe(Peer& p, const transport::RecvMessage& m);
  void SendKeepalives();

  transport::RoceEndpoint* endpoint_;
  uint32_t rank_;
  uint32_t num_ranks_;
  RcPeerChannelsOptions options_;
  bool connected_ = false;
  std::vector<Peer> peers_;
  uint64_t keepalives_sent_ = 0;
  uint64_t messages_backlogged_ = 0;
};

}  // namespace netfold::host::algorithms

#endif  // NETFOLD_HOST_ALGORITHMS_PEER_CHANNELS_H_
