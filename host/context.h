// The library's per-process state behind the C API: the job at the manager,
// this rank's queue pairs to its leaf switch, its groups, and progress.
//
//   auto ctx = *Context::Create(options, world_oob);           // collective
//   auto group = *ctx->CreateGroup(group_oob, world_ranks);    // collective (host/group.h)
//   auto op = *group->Start({.dtype = ..., .send = in, .recv = out, .count = n});
//   absl::Status s = group->Wait(op);
//   group->Destroy(group_oob);  ctx->Finalize(world_oob);      // collective
//
// One control thread per context blocks on the manager's event stream and
// sends heartbeats (it never spins); everything on the data path happens in
// the caller's thread inside Start/Test/Wait. Not thread-safe: the caller
// serialises calls on a context and its groups.
#ifndef NETFOLD_HOST_CONTEXT_H_
#define NETFOLD_HOST_CONTEXT_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "host/algorithms/selection.h"
#include "host/group_engine.h"
#include "host/link/leaf_link.h"
#include "host/oob.h"
#include "transport/impaired_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::control {
class HostControl;
class JobEvent;
}  // namespace netfold::control

namespace netfold::host {

struct ContextOptions {
  int rank = 0;
  int world_size = 1;
  std::string manager = "127.0.0.1:47910";
  std::string host_name;             // topology host of this rank
  std::string local_address = "127.0.0.1";
  std::string job_name = "netfold";
  absl::Duration timeout = absl::Seconds(30);  // per operation and per RPC wait
  std::string faults;                // link faults on this rank's port ("" none)
  uint32_t num_slots = 0;            // K requested for groups (0: the manager's default)
  uint32_t slot_bytes = 0;           // P requested (0: default)
  proto::DeliveryMode delivery = proto::DeliveryMode::kMulticast;
  absl::Duration repair_after = absl::Milliseconds(20);
  // NETFOLD_ALGORITHM (docs/algorithms.md): auto (the fabric, else the
  // hosts; failover), innetwork (the fabric only), ring, bidir, tree,
  // treescatter (always the hosts), treeorder.
  algorithms::AlgorithmPolicy algorithm = algorithms::AlgorithmPolicy::kAuto;
  // NETFOLD_TRANSPORT (docs/host.md): how requests reach the leaf switch.
  // kSoft: netfold's own RoCEv2 engine over UDP; kVerbs: libibverbs on an
  // RDMA NIC or Soft-RoCE (docs/verbs.md). The host algorithms always use
  // the soft engine.
  enum class Transport { kSoft, kVerbs };
  Transport transport = Transport::kSoft;
  std::string verbs_device;              // NETFOLD_VERBS_DEVICE ("" = by local_address)
  uint32_t verbs_port = 0;               // NETFOLD_VERBS_PORT (0 = by local_address)
  std::optional<uint32_t> verbs_gid_index;  // NETFOLD_VERBS_GID_INDEX
  uint32_t verbs_mtu = 0;                // NETFOLD_VERBS_MTU (0 = the port's active MTU)
  // NETFOLD_PARTITION=default: the job uses P_Key 0xFFFF instead of one of
  // its own (implied when any rank uses the verbs transport).
  bool default_partition = false;
  // NETFOLD_POLL_US: the soft engine reads its socket without sleeping this
  // long after the last packet it sent or received (opt-in polling; zero:
  // it sleeps in epoll at once). UdpPortConfig::poll_window.
  absl::Duration poll_window = absl::ZeroDuration();
};

// Reads NETFOLD_* environment variables into `options` where the field was
// not set by the caller (empty string / zero), validating them.
absl::Status ApplyEnvironment(ContextOptions* options);

struct ContextStats {
  GroupEngineStats engines;    // summed over every group, alive or destroyed
  uint64_t host_ops = 0;       // operations the hosts ran (host algorithms)
  uint64_t failovers = 0;      // groups moved from the fabric to the hosts
  uint64_t link_tx_bytes = 0;
  uint64_t link_rx_bytes = 0;
  uint64_t retransmissions = 0;
  uint64_t packets_dropped = 0;
};

class Group;

class Context {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options, Oob& world);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Collective over the world: destroys the job (rank 0) after a barrier.
  absl::Status Finalize(Oob& world);

  // Collective over the group's members (group_oob ranks are group ranks;
  // world_ranks[i] is group rank i's world rank).
  absl::StatusOr<std::unique_ptr<Group>> CreateGroup(Oob& group_oob,
                                                     const std::vector<int>& world_ranks);

  // Receives and dispatches, waiting at most `timeout`.
  void Progress(absl::Duration timeout);

  const ContextOptions& options() const { return options_; }
  uint32_t num_slots() const { return num_slots_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint32_t max_groups() const { return max_groups_; }
  ContextStats stats() const;
  uint64_t job_id() const { return job_id_; }

 private:
  friend class Group;
  struct ManagerClient;
  // Every group's requests go up the one RC QP to the leaf.
  struct LeafSender : RequestSender {
    Context* ctx = nullptr;
    absl::Status SendRequest(std::span<const uint8_t> message) override;
  };
  LeafSender leaf_sender_;
  explicit Context(const ContextOptions& options);
  absl::Status Join(Oob& world);
  // The leaf link of options_.transport (after the job is known: slot_bytes_).
  absl::StatusOr<std::unique_ptr<LeafLink>> CreateLeafLink();
  void RunControlThread();
  void HandleEvent(const control::JobEvent& event);
  void Register(Group* g);
  void Unregister(Group* g);
  // Releases group `group_id` at the manager (rank 0 of the group calls it).
  absl::Status DestroyGroupAtManager(uint64_t group_id);
  // Releases the job at the manager (rank 0 calls it).
  absl::Status DestroyJobAtManager();

  ContextOptions options_;
  std::unique_ptr<ManagerClient> manager_;
  uint64_t job_id_ = 0;
  std::string job_key_;
  uint16_t pkey_ = 0;
  uint32_t qkey_ = 0;
  uint32_t num_slots_ = 8, slot_bytes_ = 4032, max_groups_ = 0;
  uint64_t groups_created_ = 0;  // for idempotency tags
  absl::Duration heartbeat_interval_ = absl::Seconds(1);

  // The soft engine: the host algorithms' queue pairs, and the leaf link's
  // when the transport is soft.
  transport::ImpairedPort* port_ = nullptr;  // owned by endpoint_
  std::unique_ptr<transport::RoceEndpoint> endpoint_;
  std::unique_ptr<LeafLink> link_;
  absl::flat_hash_map<uint32_t, Group*> groups_;  // by group id (data-plane 32-bit)
  GroupEngineStats retired_;                      // stats of destroyed groups
  std::vector<Group*> all_groups_;                // every live group, fabric or not
  uint64_t retired_host_ops_ = 0, retired_failovers_ = 0;

  // The control thread and what it hands over.
  std::thread control_thread_;
  absl::Notification stop_;
  absl::Mutex events_mu_;
  std::deque<std::unique_ptr<control::JobEvent>> events_ ABSL_GUARDED_BY(events_mu_);
  std::atomic<bool> has_events_{false};
};

}  // namespace netfold::host

// Group is used through Context::CreateGroup; callers get both.
#include "host/group.h"  // IWYU pragma: export

#endif  // NETFOLD_HOST_CONTEXT_H_
