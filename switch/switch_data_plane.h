// The data plane of one emulated switch: its RoCEv2 endpoint, the RC queue
// pairs to hosts and to other switches, one UD queue pair per job for
// multicast results, and the aggregation nodes of every (tree, group) it
// serves. netfold-switchd runs it on one thread; the control plane (the
// manager's commands, the admin interface) reaches it through
// SwitchDataPlane::Post.
//
//   SwitchDataPlane dp(std::move(port), RealClock(), {.name = "s1"});
//   QpCreated qp = *dp.CreateQp({.job_id = 7, .pkey = 0x8001, .remote = host});
//   dp.InstallGroup(spec);                 // children name QPs by QPN
//   while (running) dp.RunOnce(absl::Milliseconds(5));
//
// Per received message: the RC QP hands over a complete SEND; its
// aggregation header is parsed (drops counted per reason); (tree, group)
// selects the node; the QP must be one of the node's children (or its
// parent, for results coming down); the node does the rest. Messages the
// nodes send go out on the QPs; when a QP's send queue is full they wait in
// a per-QP backlog, never dropped.
//
// Quotas per job (groups, slots, QPs) are enforced here too, whatever the
// manager asked: a command over quota fails with ResourceExhausted.
//
// Thread-safety: every method but Post and the counters belongs to the
// data-plane thread (the one calling RunOnce).
#ifndef NETFOLD_SWITCH_SWITCH_DATA_PLANE_H_
#define NETFOLD_SWITCH_SWITCH_DATA_PLANE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "proto/aggregation_header.h"
#include "switch/aggregation_node.h"
#include "transport/impaired_port.h"
#include "transport/port.h"
#include "transport/rc_queue_pair.h"
#include "transport/roce_endpoint.h"

namespace netfold::sw {

// What one job may hold on a switch. These defaults are static mode's (no
// manager); with a manager a switch's default is its own capacity
// (SwitchDaemon::Start, docs/switch.md).
struct JobQuota {
  uint32_t max_groups = 64;
  // Summed over the job's groups on this switch: 16 groups at K = 128.
  uint32_t max_slots = 2048;
  uint32_t max_qps = 256;
};

struct SwitchConfig {
  std::string name = "switch";
  JobQuota default_quota;          // for jobs without SetJobQuota
  uint32_t max_groups = 4096;      // the switch's own capacity
  uint32_t max_slots = 65536;
  uint32_t max_slot_bytes = 4048;  // a multicast result must fit one 4096-byte packet
  uint32_t max_qps = 4096;
  uint32_t path_mtu = 4096;
  absl::Duration ack_timeout = absl::Milliseconds(4);  // toward other switches
  // Toward hosts (QPs of a job). A host's library acknowledges only while
  // the application is inside a netfold call (there is no NIC to do it),
  // so a host busy elsewhere must not be taken for a dead one: with 7
  // retries and the doubling (capped at 64x) a host is declared dead after
  // 191 x this (12 s at 64 ms). The manager's heartbeats find dead hosts
  // sooner.
  absl::Duration host_ack_timeout = absl::Milliseconds(64);
  // How long the switch's ACK of a request may wait to cover the requests
  // that follow (RcQpConfig::ack_delay): one ACK per few operations instead
  // of one per request, fewer wakeups of hosts and switch. Capped at a
  // quarter of ack_timeout; the config accepts at most 1 ms, an eighth of
  // the hosts' own timeout (8 ms, host/link/leaf_link.h).
  absl::Duration ack_delay = absl::Milliseconds(1);
  uint8_t retry_count = 7;
  // And no QP fails before it went this long without progress: a peer
  // (another switch's process, a host) on a shared machine may not run
  // for a while. Longer than the manager's switch timeout (2 s), so that
  // a switch that died is reported by the manager, with that reason.
  absl::Duration min_failure_time = absl::Seconds(3);
  // transport.ip_identification: solve (RoceEndpointConfig::
  // solve_ip_identification): accept RoCE NICs' packets through kernel
  // sockets, which hide the IPv4 identification the ICRC covers.
  bool solve_ip_identification = false;
  // Initial PSNs are random; a non-zero seed makes them reproducible (tests).
  uint64_t psn_seed = 0;
  // Several switches on one data-plane thread (DataPlaneThread): a QP
  // connected to another of them carries its messages in memory, not
  // through the sockets (SetInProcessPeers). Off while either port has
  // ever had a link fault set: faults need the packets.
  bool in_process_links = false;
};

struct QpRequest {
  uint64_t job_id = 0;      // 0: a switch-to-switch QP (not charged to a job)
  uint16_t pkey = 0xFFFF;   // the job's P_Key; 0xFFFF between switches
  // Connect straight to RTS when set; otherwise the QP waits in INIT.
  std::optional<transport::Ipv4Endpoint> remote;
  uint32_t remote_qpn = 0;
  uint32_t remote_psn = 0;
  std::string peer;         // for logs and counters: "job 7 rank 3", "s2"
  // A host QP: the job rank it serves. Passes handle a job's QPs in rank
  // order, the order its groups fold their host children in.
  uint32_t rank = 0;
  // Fixed numbers for statically configured peers (netfold-switchd's static
  // mode); unset: the switch picks. A taken QPN fails with AlreadyExists.
  std::optional<uint32_t> qpn;
  std::optional<uint32_t> psn;  // 24-bit
};

struct QpCreated {
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

struct GroupChildSpec {
  uint32_t qpn = 0;                // the local QP toward this child
  std::vector<uint32_t> ranks;     // the ranks below it
};

struct GroupSpec {
  uint64_t job_id = 0;
  uint16_t tree_id = 0;
  uint32_t group_id = 0;
  uint32_t epoch = 0;
  uint16_t pkey = 0xFFFF;
  uint32_t qkey = 0;
  uint32_t num_slots = 8;
  uint32_t slot_bytes = 4032;
  std::vector<GroupChildSpec> children;  // reduction order
  std::optional<uint32_t> parent_qpn;    // none at the group root
  // The group root's multicast destination (ip:port); unset: no multicast.
  std::optional<transport::Ipv4Endpoint> multicast;
  // The job's integrity key (AggregationNodeConfig::integrity_key).
  std::optional<proto::AggregationKey> integrity_key;
};

// Why the switch dropped a message before a node saw it. Values index
// counter arrays.
enum class SwitchDropReason : uint8_t {
  kUnknownGroup = 0,  // no node for (tree, group)
  kNotAMember,        // the QP is neither a child nor the parent of that node
  kQpFailed,          // a message for a QP in ERROR (its peer is gone)
  kNumReasons
};
inline constexpr size_t kNumSwitchDropReasons = static_cast<size_t>(SwitchDropReason::kNumReasons);
std::string_view SwitchDropReasonName(SwitchDropReason reason);

struct SwitchCounters {
  std::atomic<uint64_t> messages_received{0};
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<uint64_t> multicasts_sent{0};
  std::atomic<uint64_t> backlogged{0};  // sends that waited for room in a send queue
  // Of messages_sent, those to another switch (a switch-to-switch QP, job
  // 0), and of those the ones handed over in memory to a switch of the same
  // process (SwitchConfig::in_process_links).
  std::atomic<uint64_t> messages_to_switches{0};
  std::atomic<uint64_t> in_process_messages{0};
  std::array<std::atomic<uint64_t>, proto::kNumAggregationParseResults> parse_drops{};
  std::array<std::atomic<uint64_t>, kNumSwitchDropReasons> drops{};
  // Integrity: messages the nodes of groups since removed dropped as
  // bad_tag (the live nodes count their own: SwitchDataPlane::num_bad_tags).
  std::atomic<uint64_t> bad_tags_of_removed_groups{0};
};

// A QP that failed (retries exhausted, NAK, ...): reported to the manager.
struct QpFailure {
  uint32_t qpn = 0;
  std::string peer;
  absl::Status reason;
};

// (MessageKeeper, privately: its nodes keep early contributions where they
// arrived, the packet buffers of its QPs' messages (at most a quarter of
// the port's pool at a time) or the buffers of its inbox.)
class SwitchDataPlane : private MessageKeeper {
 public:
  SwitchDataPlane(std::unique_ptr<transport::Port> port, const Clock& clock,
                  const SwitchConfig& config);
  SwitchDataPlane(const SwitchDataPlane&) = delete;
  SwitchDataPlane& operator=(const SwitchDataPlane&) = delete;
  ~SwitchDataPlane();

  // --- Control (data-plane thread) -------------------------------------
  void SetJobQuota(uint64_t job_id, const JobQuota& quota);
  absl::StatusOr<QpCreated> CreateQp(const QpRequest& request);
  // INIT -> RTR -> RTS toward `remote`.
  absl::Status ConnectQp(uint32_t qpn, const transport::Ipv4Endpoint& remote, uint32_t remote_qpn,
                         uint32_t remote_psn);
  // Fails with FailedPrecondition while a group still uses the QP.
  absl::Status DestroyQp(uint32_t qpn);
  // Installs a group's node; a newer epoch of an installed group replaces it
  // (in-flight operations are aborted). Checks quotas and that every QP
  // exists and belongs to the job (or is a switch QP).
  absl::Status InstallGroup(const GroupSpec& spec);
  // Aborts in-flight operations (children get kAbort) and frees the slots.
  // epoch 0 removes any epoch. NotFound if absent.
  absl::Status RemoveGroup(uint16_t tree_id, uint32_t group_id, uint32_t epoch = 0);

  // --- Data plane ------------------------------------------------------
  // Receives (waiting at most `timeout`), runs the nodes, sends. Then runs
  // the commands posted from other threads. With `read_port` false (a
  // thread that polled wait_fd() and found it quiet) the port is not read:
  // messages from switches of this process, QP timers and commands are
  // served as always.
  void RunOnce(absl::Duration timeout, bool read_port = true);
  // Runs `command` on the data-plane thread during a later RunOnce.
  // Thread-safe. The command must not block.
  void Post(std::function<void(SwitchDataPlane&)> command);
  // Post, then waits until `command` ran, at most `timeout`: false if it
  // did not run in time (it may still run later). Not from the data-plane
  // thread, which would wait for itself.
  bool PostAndWait(std::function<void(SwitchDataPlane&)> command, absl::Duration timeout);
  // Makes a RunOnce waiting in receive return soon. Any thread.
  void Wake() { endpoint_.port().Wake(); }
  // True if Post and Wake cut RunOnce's wait short (its port can be woken):
  // the loop may then wait long when idle.
  bool CanWake() { return endpoint_.port().CanWake(); }
  // For a thread that runs several data planes (DataPlaneThread): the fd to
  // sleep on (-1: this plane's port cannot share a thread); how long the
  // port lets it sleep before the next RunOnce, at most `limit`
  // (RoceEndpoint::SleepBound: zero when the next RunOnce must read the
  // port although wait_fd() is quiet, as it holds packets read and not
  // handed out or a QP timer is due); and whether messages from switches
  // of this process wait (then it must not sleep at all).
  int wait_fd() { return endpoint_.port().wait_fd(); }
  absl::Duration PortSleepBound(absl::Duration limit) { return endpoint_.SleepBound(limit); }
  bool HasInProcessMessages() const { return !inbox_.empty(); }
  // QPs that went to ERROR since the last call.
  std::vector<QpFailure> TakeQpFailures();
  // The other switches this thread runs (DataPlaneThread, between passes,
  // on the data-plane thread). With in_process_links on both sides, a QP
  // connected afterwards to one of them hands its messages to that
  // switch's inbox instead of its socket; a QP whose peer left this list
  // goes back to RC. Messages are handed over in order and handled at the
  // start of the peer's next RunOnce, before anything it receives, so a
  // QP that has to fall back to RC (a link fault set) keeps its order.
  void SetInProcessPeers(const std::vector<SwitchDataPlane*>& peers);

  // --- State -----------------------------------------------------------
  transport::Ipv4Endpoint local() const { return endpoint_.local(); }
  const SwitchConfig& config() const { return config_; }
  transport::RoceEndpoint& endpoint() { return endpoint_; }
  const SwitchCounters& counters() const { return counters_; }
  size_t num_groups() const { return groups_.size(); }
  size_t num_qps() const { return qps_.size(); }
  uint32_t num_slots_used() const { return slots_used_; }
  // Buffers the in-process inbox holds for reuse, of at least
  // `min_capacity` bytes each (a group's reservation, ReserveBuffers).
  size_t num_spare_inbox_buffers(size_t min_capacity) const;
  // Busy slots over every node: 0 once all operations completed.
  size_t num_busy_slots() const;
  // Messages dropped for a bad or missing integrity tag, over every node
  // this switch has held (the admin API's `aggregation.bad_tag`).
  uint64_t num_bad_tags() const;
  // Visits every installed node (for status and admin).
  void ForEachNode(const std::function<void(const GroupSpec&, const AggregationNode&)>& fn) const;
  void ForEachQp(const std::function<void(const std::string& peer,
                                          const transport::RcQueuePair&)>& fn) const;
  // The job a QP is charged to (0: a switch-to-switch QP or no such QP).
  uint64_t QpJobId(uint32_t qpn) const;
  // Adds the counters of every QP this switch has had, destroyed ones
  // included, to `into`: totals that only grow, where a job's own QPs
  // (ForEachQp) leave with the job.
  void SumQpCounters(transport::RcQpCounters& into) const;

 private:
  struct Qp;
  struct Group;
  class Output;

  static uint64_t GroupKey(uint16_t tree, uint32_t group) {
    return (static_cast<uint64_t>(tree) << 32) | group;
  }
  JobQuota QuotaOf(uint64_t job) const;
  void HandleMessage(Qp& qp, std::span<const uint8_t> message);
  // MessageKeeper: takes the message being handled off its QP's receive
  // queue (TakeRecv; if the budget allows), or its buffer off the inbox.
  void* KeepCurrent() override;
  void Release(void* handle) override;
  void Send(uint32_t qpn, std::span<const uint8_t> message);
  // In-process links: whether `qp` may hand its next message to its peer
  // switch now (no link fault, the peer's QP there and connected back);
  // hands `message` to this switch's inbox for its QP `qpn`; handles the
  // inbox.
  bool InProcessLinkUsable(const Qp& qp) const;
  void Deliver(uint32_t qpn, std::span<const uint8_t> message);
  void HandleInbox();
  void FlushBacklogs();
  void CheckQpErrors();
  absl::StatusOr<transport::UdQueuePair*> MulticastQp(uint64_t job_id, uint16_t pkey,
                                                      uint32_t qkey);
  void RemoveGroupAt(uint64_t key);
  // Makes what a new group's operations will fill resident now, before its
  // first long operation, as a switch's memory is: the port's receive
  // buffers for K messages from each neighbour across the port, inbox
  // buffers for K from each neighbour in this process, the send queue
  // toward a parent across the port, and a group root's K result packets. Grown on demand, a fresh fabric's
  // first long operations took ~1 500 page faults in the switches
  // (docs/performance.md, "The switches' first long operation").
  void ReserveBuffers(const GroupSpec& spec);

  SwitchConfig config_;
  const Clock& clock_;
  // The nodes' clock (their latency histograms): a reading serves 16 slot
  // events and is renewed every pass; reading the clock at every slot's
  // start and end was ~4 % of a switch's CPU in a bcast.
  CoarseClock node_clock_;
  transport::RoceEndpoint endpoint_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Qp>> qps_;
  // The same QPs in a fixed order: host QPs by job and rank, then the
  // QPs between switches, each by QPN. Every pass over all of them
  // (receiving, error checks) goes in this order, never in hash order:
  // messages are handled, and so answered, in the same order in every
  // process, so that seeded link faults hit the same packets in every
  // run. Rank order is the order a group folds its host children in, so
  // the contributions of one pass are mostly folded as they are handled
  // instead of waiting in the slot (a copy).
  std::vector<Qp*> qps_in_order_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Group>> groups_;
  absl::flat_hash_map<uint64_t, JobQuota> quotas_;
  struct JobUsage {
    uint32_t groups = 0, slots = 0, qps = 0;
  };
  absl::flat_hash_map<uint64_t, JobUsage> usage_;
  absl::flat_hash_map<uint64_t, transport::UdQueuePair*> multicast_qps_;  // per job
  uint32_t slots_used_ = 0;
  uint64_t psn_state_;
  std::vector<QpFailure> failures_;
  std::vector<uint32_t> with_backlog_;
  // In-process links (SetInProcessPeers).
  transport::ImpairedPort* impaired_port_ = nullptr;  // the port, if it can have faults
  std::vector<SwitchDataPlane*> in_process_peers_;
  struct InboxMessage {
    uint32_t qpn = 0;
    std::vector<uint8_t> bytes;
  };
  std::deque<InboxMessage> inbox_;
  // MessageKeeper: the QP whose oldest message is being handled, or the
  // inbox message; whether a node took it; what is kept (a packet buffer
  // or an inbox buffer), in holders reused; how many packet buffers are
  // out, of at most max_kept_.
  struct Kept {
    transport::PacketBuffer* packet = nullptr;
    std::vector<uint8_t> bytes;
  };
  Qp* handling_ = nullptr;
  InboxMessage* handling_inbox_ = nullptr;
  bool handled_taken_ = false;
  std::vector<std::unique_ptr<Kept>> spare_kept_;
  uint32_t kept_ = 0;
  uint32_t max_kept_ = 0;
  std::vector<std::vector<uint8_t>> spare_buffers_;  // the inbox's, for reuse
  static constexpr size_t kMaxSpareBuffers = 1024;
  // Receive memory reserved for the groups installed so far (it stays).
  size_t reserved_receive_bytes_ = 0;

  absl::Mutex commands_mu_;
  std::deque<std::function<void(SwitchDataPlane&)>> commands_ ABSL_GUARDED_BY(commands_mu_);

  SwitchCounters counters_;
  // What the QPs destroyed so far counted (SumQpCounters).
  transport::RcQpCounters destroyed_qp_counters_;
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_SWITCH_DATA_PLANE_H_
