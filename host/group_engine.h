// The host side of one group's in-network collectives: it cuts operations
// into chunks of at most one slot (P bytes), gives each chunk the next
// sequence number, keeps at most K chunks in flight (posting s + K only
// after result s arrived, which is what lets the switches reuse slot s mod
// K), writes results back in place, repairs lost multicast results, and
// enforces a deadline on every operation. Pure logic: the caller moves the
// bytes (RC requests up, results from RC or UD multicast down).
//
//   GroupEngine engine(params, &rc_sender, RealClock());
//   auto op = engine.Start({.collective = CollectiveType::kAllreduce,
//                           .dtype = DataType::kFp32, .op = ReduceOp::kSum,
//                           .send = in, .recv = out, .count = n});
//   while (!engine.Done(*op)) { transport.Progress(...); feed engine.OnMessage(...); engine.Poll(); }
//   absl::Status s = engine.Finish(*op);
//
// Every rank of a group must start the same operations in the same order
// (as MPI requires of collectives): their chunks then carry the same
// sequence numbers. A chunk whose result is an error fails its operation,
// but the remaining chunks are still posted so that the ranks stay aligned.
//
// Thread-safety: not thread-safe; one thread drives an engine.
#ifndef NETFOLD_HOST_GROUP_ENGINE_H_
#define NETFOLD_HOST_GROUP_ENGINE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "host/reduce_data.h"
#include "host/resync.h"
#include "proto/aggregation_header.h"
#include "proto/aggregation_tag.h"
#include "proto/roce_headers.h"
#include "transport/port.h"

namespace netfold::host {

// The longest a late multicast result waits before it is asked for again,
// the first time whatever its round trip, and between repairs
// (GroupParams::repair_after).
inline constexpr absl::Duration kMaxRepairAfter = absl::Seconds(1);
// How long a group's results may take before the first one ever came: the
// time they take is not known yet, and the first window of a long
// operation may wait behind every rank's (TCP's first retransmission
// timeout, RFC 6298 2.1). At most a quarter of the operation's deadline
// (GroupParams::op_timeout); a gap in later results asks sooner.
inline constexpr absl::Duration kFirstRepairAfter = absl::Seconds(1);

struct GroupParams {
  uint16_t tree_id = 0;
  uint32_t group_id = 0;
  uint32_t epoch = 0;
  uint32_t rank = 0;        // this process's rank in the job
  uint32_t num_slots = 8;   // K
  uint32_t slot_bytes = 4032;  // P
  proto::DeliveryMode delivery = proto::DeliveryMode::kMulticast;
  // The job rank of each group rank: the roots of an operation's blocks
  // (CollectiveArgs::blocks). Empty: blocked operations are refused.
  std::vector<uint32_t> members;
  // A multicast result not seen this long after its request is asked for
  // again over RC (then again after twice as long, ...): the least wait;
  // where results take longer, the smoothed time they take plus four times
  // its variation (at most kMaxRepairAfter), as TCP's retransmission timer;
  // kFirstRepairAfter before the group's first result.
  absl::Duration repair_after = absl::Milliseconds(20);
  // A bcast rank that carries no data for a run of chunks (every rank but
  // the root) posts one request for up to this many of them
  // (AggregationHeader::repeat): fewer messages for every rank and switch
  // to handle, at the price of a window that moves in steps. 0: K / 4;
  // 1: a request per chunk.
  uint32_t bcast_run = 0;
  // How a reduce in a multicast group delivers its result (ReduceData).
  ReduceData reduce_data = ReduceData::kAuto;
  // An operation not complete this long after Start fails with DeadlineExceeded.
  absl::Duration op_timeout = absl::Seconds(30);
  // Channels (docs/host.md, "Channels"): this engine is channel `channel`
  // of a communicator's `channels` fabric groups, and carries chunks
  // channel, channel + channels, ... of each operation's vector (the
  // chunks it would have as the only engine). Whatever a channel does not
  // carry it leaves untouched; an operation with no chunk here is done at
  // Start. A barrier (or any empty operation) is channel 0's alone.
  uint32_t channel = 0;
  uint32_t channels = 1;
  // The job's integrity key (docs/security.md): requests are tagged, and a
  // result without a valid tag is dropped (GroupEngineStats::bad_tags) as
  // if lost, so repair fetches it again. A chunk then carries at most
  // slot_bytes - 16 bytes of elements, leaving room for the tag.
  std::optional<proto::AggregationKey> integrity_key;
};

// Sends a request (or repair request) message to the leaf switch over RC:
// the 40-byte header, then the elements (straight from the caller's send
// buffer), then `tag` (16 bytes with integrity, else empty). The header and
// tag are copied before SendRequest returns; the elements may be read where
// they are until ReleaseElements covers them (a link that sends from the
// caller's memory, as a NIC does), which the engine calls before it hands
// an operation's send buffer back to its caller. Returns ResourceExhausted
// if the send queue is full (the engine retries on the next Poll); any
// other error fails the group.
class RequestSender {
 public:
  virtual ~RequestSender() = default;
  virtual absl::Status SendRequest(std::span<const uint8_t> header,
                                   std::span<const uint8_t> elements,
                                   std::span<const uint8_t> tag) = 0;
  // From now on the sender reads nothing of `memory` (it copies what its
  // queued requests still need). The default: a sender that copied.
  virtual void ReleaseElements(std::span<const uint8_t> memory) { (void)memory; }
};

struct CollectiveArgs {
  proto::CollectiveType collective = proto::CollectiveType::kAllreduce;
  proto::DataType dtype = proto::DataType::kInt32;
  proto::ReduceOp op = proto::ReduceOp::kSum;
  uint32_t root = 0;           // reduce/bcast root rank
  const void* send = nullptr;  // count elements (bcast: read at the root only)
  void* recv = nullptr;        // count elements; may equal send (in place)
  size_t count = 0;
  // Allgather and reduce-scatter: a bcast (reduce) per block. When not
  // empty, the `count` elements are one block per group rank, in group-rank
  // order (blocks[i] elements; they sum to count), block i rooted at group
  // rank i, and `root` is unused. Bcast (allgather): `send` is this rank's
  // block, `recv` the whole vector. Reduce (reduce-scatter): `send` is the
  // whole vector, `recv` this rank's block; `send` may equal `recv` (in
  // place: the input fills `recv`, the result its first elements).
  std::vector<size_t> blocks;
};

using OpId = uint64_t;

// Channels (GroupParams::channels) keep their chunks of an operation
// within one window of the vector: a channel posts the vector's chunk g
// only when the gate allows it (host/channels.h: when every channel has
// the results of its chunks up to g - N x K). So the chunks written of a
// result are never more than N x K apart, as with one engine K apart
// (WrittenChunks, netfold_request_written).
class ChunkGate {
 public:
  virtual ~ChunkGate() = default;
  virtual bool MayPost(OpId op, size_t vector_chunk) const = 0;
};

struct GroupEngineStats {
  uint64_t ops_started = 0;
  uint64_t ops_completed = 0;
  uint64_t ops_failed = 0;
  uint64_t chunks_posted = 0;
  uint64_t results_received = 0;
  uint64_t duplicate_results = 0;  // the multicast and a repair both came
  uint64_t repairs_sent = 0;
  uint64_t bytes_sent = 0;         // request payload bytes
  uint64_t bytes_received = 0;     // result payload bytes
  uint64_t unexpected_messages = 0;
  uint64_t bad_tags = 0;  // integrity: results dropped for a bad or missing tag

  GroupEngineStats& operator+=(const GroupEngineStats& o) {
    ops_started += o.ops_started;
    ops_completed += o.ops_completed;
    ops_failed += o.ops_failed;
    chunks_posted += o.chunks_posted;
    results_received += o.results_received;
    duplicate_results += o.duplicate_results;
    repairs_sent += o.repairs_sent;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    unexpected_messages += o.unexpected_messages;
    bad_tags += o.bad_tags;
    return *this;
  }
};

class GroupEngine {
 public:
  GroupEngine(const GroupParams& params, RequestSender* sender, const Clock& clock);
  GroupEngine(const GroupEngine&) = delete;
  GroupEngine& operator=(const GroupEngine&) = delete;
  ~GroupEngine();

  // Validates `args` (InvalidArgument: null buffers, op not allowed, root
  // out of range is the caller's check) and queues the operation. Posting
  // happens in Poll(). FailedPrecondition once the group failed (aborted,
  // revoked).
  absl::StatusOr<OpId> Start(const CollectiveArgs& args);

  // A result or abort for this group (from the RC QP or the multicast UD QP).
  // `message` is the whole message as received (header, elements, tag): with
  // an integrity key its tag is checked first (an empty one fails).
  // `arrived_ns`: when it arrived, on the engine's clock, if the caller
  // read that (one reading may serve a few messages of a burst: a result's
  // round-trip sample and the post it makes room for are then that much
  // early); else the engine reads its clock.
  void OnMessage(const proto::AggregationHeader& header, std::span<const uint8_t> elements,
                 std::span<const uint8_t> message = {},
                 std::optional<int64_t> arrived_ns = std::nullopt);

  // Posts chunks the window allows, sends repair requests, expires deadlines.
  void Poll();
  // Posts chunks the window allows, and nothing else: for a caller that has
  // not read what arrived yet (Poll would judge unread results lost).
  void Post();
  // When Poll() next has timed work (repair, deadline); nullopt if idle.
  std::optional<int64_t> NextTimerNs() const;

  // Placed receives (transport::ReceivePlacer, through the data path):
  // where the multicast results of chunks in flight go in the caller's
  // memory, oldest first, up to out.size(), skipping chunks whose place a
  // result already claimed. Only operations whose result buffer is written
  // and not read before they are done (Op::places_results).
  size_t PredictPlaces(std::span<transport::ReceivePlace> out) const;
  // Whether a datagram with header `h` (not yet checked by anyone) read
  // into `place` is the result it was predicted for; if so the place is
  // not offered again while its chunk waits.
  bool ClaimPlace(const proto::AggregationHeader& h, const transport::ReceivePlace& place);
  // The bytes of a multicast result before its elements: BTH, DETH and
  // the aggregation header.
  static constexpr uint32_t kResultHead = static_cast<uint32_t>(
      proto::RoceHeadersSize(proto::BthOpcode::kUdSendOnly) + proto::kAggregationHeaderSize);

  bool Done(OpId id) const;
  // Every chunk of the operation was handed to the sender, and the sender
  // let go of its elements (RequestSender::ReleaseElements: it copied what
  // it still needed): the caller's send buffer is no longer read. True for
  // an unknown or finished operation.
  bool Posted(OpId id);
  // The operation's outcome once Done; forgets it. NotFound for an unknown id.
  absl::Status Finish(OpId id);
  // The outcome without forgetting it; nullopt while pending.
  std::optional<absl::Status> Peek(OpId id) const;
  // Which chunks of an allreduce's result reached the caller's buffer so
  // far (for a failover, host/resync.h), numbered in the whole vector (a
  // channel marks only its own); nullopt for an unknown operation or
  // another kind (a blocked one too).
  std::optional<WrittenChunks> Written(OpId id) const;

  // Channels: the gate every post asks first (not owned; null: none).
  void SetGate(const ChunkGate* gate) { gate_ = gate; }
  // The operation's first chunk without a result on this channel, in the
  // vector's numbering; nullopt once every chunk of it here has one (or
  // for an unknown or finished operation).
  std::optional<size_t> FirstMissing(OpId id) const;

  // Fails every pending operation with `why` and refuses new ones.
  void Fail(absl::Status why);
  const absl::Status& failure() const { return failure_; }
  bool idle() const;
  const GroupParams& params() const { return params_; }
  const GroupEngineStats& stats() const { return stats_; }
  uint64_t next_seq() const { return next_seq_; }

 private:
  // idle(), with no operation left to finish and no request waiting to be
  // sent again: Poll has nothing to do and no timer is due.
  bool Quiet() const;
  struct Op;
  struct InFlight {
    bool used = false;
    uint64_t seq = 0;
    Op* op = nullptr;
    size_t chunk = 0;
    int64_t posted_ns = 0;
    int64_t repair_at_ns = 0;
    absl::Duration repair_backoff;
    bool repaired = false;  // asked for again: its time says nothing of the round trip
    // Past its wait, put off because results still came or an older chunk
    // was asked for: its time is that of a queue or of a late rank, not of
    // the round trip either (counting it lengthened every wait after a
    // loss, and the next loss then held every rank back longer).
    bool late = false;
    // A datagram claimed its place (ClaimPlace): it may still be on its
    // way up, so the place is not offered to the port again.
    bool placed = false;
  };

  // Where one chunk of an operation comes from and goes to.
  struct ChunkSpan {
    uint32_t root = 0;              // the job rank it is rooted at (reduce, bcast)
    size_t first = 0;               // its first element in the whole vector
    size_t n = 0;                   // elements
    const uint8_t* send = nullptr;  // its elements; null: it carries none
    uint8_t* recv = nullptr;        // where its result goes; null: dropped
  };

  // A request as it goes to the sender: the header, and the elements where
  // they are in the caller's send buffer (valid while the op lives).
  struct Request {
    std::array<uint8_t, proto::kAggregationHeaderSize> header;
    std::span<const uint8_t> elements;
    proto::AggregationTag tag{};  // with integrity: over header and elements
    size_t tag_size = 0;          // 16 with integrity, else 0
  };

  // Posts the next request; `now_ns` is the pass's time, read at its
  // first post.
  bool PostNextChunk(std::optional<int64_t>& now_ns);
  // How the switches deliver the operation's results.
  proto::DeliveryMode DeliveryOf(const Op& op) const;
  // Whether the result of `chunk` may be lost on the way (it travels by
  // multicast) and so is asked for again when it is late.
  bool MayLose(const Op& op, size_t chunk) const;
  // Whether `op`'s next `run` chunks may go now: the window has room, and
  // the channels' gate lets them (ChunkGate).
  bool MayPostRun(const Op& op, size_t run) const;
  // Chunks from `chunk` on that one request may stand for (1 unless a
  // bcast rank without their data; then those alike, at most bcast_run).
  size_t RunLength(const Op& op, size_t chunk) const;
  // The request for `chunk` (seq), standing for `repeat` more after it.
  std::optional<Request> BuildRequest(const Op& op, size_t chunk, uint64_t seq,
                                      proto::AggregationMessageType type,
                                      uint32_t repeat = 0) const;
  absl::Status Send(const Request& r) {
    return sender_->SendRequest(r.header, r.elements, {r.tag.data(), r.tag_size});
  }
  void HandleMessage(const proto::AggregationHeader& h, std::span<const uint8_t> elements,
                     std::span<const uint8_t> message);
  void CompleteChunk(InFlight& slot, const proto::AggregationHeader& h,
                     std::span<const uint8_t> elements);
  // The message's time while one is handled, else the clock's.
  int64_t NowNs() const { return message_ns_.has_value() ? *message_ns_ : clock_.NowNanos(); }
  void FinishOpIfDone(Op& op);
  // Tells the sender to let go of the memory `op`'s requests were sent
  // from (once; no request of it is posted after).
  void ReleaseSent(Op& op);
  // How long a multicast result may take before it is first asked for
  // again: repair_after, or more where results take longer (srtt_ns_).
  absl::Duration RepairAfter() const;
  size_t ElementsPerChunk(const Op& op) const;
  // Element bytes one chunk may carry: P, less the tag's room with integrity.
  size_t ChunkBytes() const {
    const size_t tag = params_.integrity_key ? proto::kAggregationTagSize : 0;
    return params_.slot_bytes > tag ? params_.slot_bytes - tag : 0;
  }
  // Where the operation's chunk `chunk` (this engine's numbering: the
  // chunk-th it carries) is in the whole vector's.
  ChunkSpan Locate(const Op& op, size_t chunk) const;
  // Of `total` chunks of a vector, how many this channel carries.
  size_t ChannelChunks(size_t total) const;
  // Lays a blocked operation out in chunks (CollectiveArgs::blocks).
  absl::Status LayOutBlocks(Op& op) const;

  // The vector's chunk of this channel's chunk `chunk`.
  size_t VectorChunk(size_t chunk) const {
    return chunk * std::max<uint32_t>(params_.channels, 1) + params_.channel;
  }

  GroupParams params_;
  RequestSender* sender_;
  const ChunkGate* gate_ = nullptr;
  const Clock& clock_;
  absl::Status failure_;
  OpId next_op_id_ = 1;
  uint64_t next_seq_ = 0;    // the next chunk's sequence number
  uint64_t low_seq_ = 0;     // the oldest chunk without a result
  std::deque<Op*> queue_;                    // started, not all chunks posted yet
  std::map<OpId, std::unique_ptr<Op>> ops_;  // every op not yet finished (owner)
  std::vector<InFlight> window_;           // K entries, indexed by seq mod K
  std::optional<Request> pending_request_;  // a request the sender refused, to retry
  OpId pending_op_ = 0;                     // the operation it belongs to
  // A chunk's time from its request to its result, smoothed as TCP smooths
  // its round trip (RFC 6298: srtt and rttvar, gains 1/8 and 1/4), from
  // chunks neither asked for again nor late (InFlight). Where ranks and
  // switches share cores the scheduler sets it, and a deep window waits its
  // turn: repairs at a fixed 20 ms asked for results that were only late.
  bool have_rtt_ = false;
  int64_t srtt_ns_ = 0;
  int64_t rttvar_ns_ = 0;
  // When a chunk's wait is over (Poll):
  // - while results keep coming (the last came less than RepairAfter()
  //   ago) it is queued behind them, not lost: a deep window drains
  //   through queues shared with every rank, its last chunks later than
  //   the wait learned from short operations (TCP restarts its timer on
  //   every ACK that brings news, RFC 6298 5.3);
  // - when nothing comes, only the oldest chunk is asked for (a probe, as
  //   TCP resends one segment): a rank late to the operation holds every
  //   result back, and asking for results not computed yet gets no answer;
  // - once results of kGapResults later chunks came, it was lost (a
  //   group's switches complete its chunks in order): asked for at once,
  //   wait or not (TCP's fast retransmit).
  static constexpr uint64_t kGapResults = 3;
  int64_t last_result_ns_ = INT64_MIN / 2;  // when the last new result came
  // The time OnMessage was given, while it handles its message.
  std::optional<int64_t> message_ns_;
  uint64_t results_end_seq_ = 0;            // one past the highest seq with a result
  GroupEngineStats stats_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_GROUP_ENGINE_H_
