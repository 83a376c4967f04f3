// What a rank's libnetfold context is configured with, and how NETFOLD_*
// environment variables fill it (docs/host.md, "Configuration").
//
//   ContextOptions o;
//   o.rank = rank;  o.world_size = n;
//   NETFOLD_RETURN_IF_ERROR(ApplyEnvironment(&o));   // fields left empty/zero
//   auto ctx = Context::Create(o, world_oob);        // host/context.h
//
// Plain data and one pure function of the environment; thread-compatible.
#ifndef NETFOLD_HOST_OPTIONS_H_
#define NETFOLD_HOST_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "host/algorithms/selection.h"
#include "host/reduce_data.h"
#include "proto/aggregation_header.h"

namespace netfold::host {

struct ContextOptions {
  int rank = 0;
  int world_size = 1;
  std::string manager = "127.0.0.1:47910";
  // The file of the fabric credential, presented on every call to the
  // manager: NETFOLD_CREDENTIAL_FILE, else the `credential` file of
  // $NETFOLD_STATE_DIR or /tmp/netfold-<uid> (netfold up's), if there is
  // one; "" = none (a manager run with auth: none).
  std::string credential_file;
  // The fabric CA's certificate file: TLS to the manager, whose certificate
  // must be signed by it. NETFOLD_TLS_CA, else the ca.pem beside
  // credential_file (netfold up's), if there is one; "" = plaintext (a
  // fabric run with --plaintext).
  std::string tls_ca_file;
  std::string host_name;             // topology host of this rank
  std::string local_address = "127.0.0.1";
  std::string job_name = "netfold";
  absl::Duration timeout = absl::Seconds(30);  // per operation and per RPC wait
  // NETFOLD_CONNECT_TIMEOUT_MS: how long init waits for a manager that
  // does not answer (one that refuses, or a name that does not resolve,
  // fails at once).
  absl::Duration connect_timeout = absl::Seconds(1);
  std::string faults;                // link faults on this rank's port ("" none)
  uint32_t num_slots = 0;            // K requested for groups (0: the manager's default)
  uint32_t slot_bytes = 0;           // P requested (0: default)
  // NETFOLD_MAX_GROUPS: the groups the job asks to hold at once (0: the
  // manager's default_groups_per_job, once per channel); each channel is
  // one.
  uint32_t max_groups = 0;
  proto::DeliveryMode delivery = proto::DeliveryMode::kMulticast;
  // NETFOLD_BCAST_RUN: the most chunks of a bcast one request of a rank
  // without their data stands for (GroupParams::bcast_run; 0: K / 4, 1: a
  // request per chunk, as switches before the `repeat` field need).
  uint32_t bcast_run = 0;
  // NETFOLD_REDUCE_DATA: auto (the default), all or root
  // (GroupParams::reduce_data).
  ReduceData reduce_data = ReduceData::kAuto;
  // NETFOLD_RELEASED_REDUCES (0..8): how many reduces this rank is not the
  // root of may complete in the background at once, the caller already
  // returned (docs/host.md, "Lifecycle"); 0: none, a reduce returns when
  // it completes. The MPI interposer asks for 1 (its failover needs it).
  uint32_t released_reduces = 8;
  // NETFOLD_KEEP_GROUPS (0..64): how many destroyed groups this rank keeps
  // for the next group of the same members (docs/host.md, "Kept groups"):
  // a communicator freed and made again (MPI_Comm_dup, MPI_Comm_split in a
  // loop) gets its fabric group back without the manager. 0: none; the
  // job keeps groups only if every rank may.
  uint32_t keep_groups = 4;
  // NETFOLD_PLANES (0..16): how many of the fabric's data planes this
  // rank's groups are spread over (docs/host.md, "Data planes"); 0 (the
  // default): all the fabric has, 1: plane 0 alone.
  uint32_t planes = 0;
  // NETFOLD_CHANNELS (0..16): how many data planes one group's operations
  // are spread over, chunk by chunk (docs/host.md, "Channels"); the job
  // takes the largest any rank asks for, at most the fabric's planes. 0
  // and 1 (the default): one.
  uint32_t channels = 1;
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
  // NETFOLD_INTEGRITY=1: the job's aggregation messages carry a keyed tag
  // (docs/security.md); the job has it if any rank asks.
  bool integrity = false;
  // NETFOLD_POLL_US: the soft engine reads its socket without sleeping this
  // long after the last packet it sent or received (opt-in polling; zero:
  // it sleeps in epoll at once). UdpPortConfig::poll_window.
  absl::Duration poll_window = absl::ZeroDuration();
  // NETFOLD_PROGRESS_THREAD (docs/host.md, "Progress and threads"): a
  // thread of the library drives the data path while the application is
  // out of the library for `progress_takeover` (NETFOLD_PROGRESS_TAKEOVER_US),
  // as a NIC would; false: only inside library calls.
  bool progress_thread = true;
  absl::Duration progress_takeover = absl::Milliseconds(1);
  // NETFOLD_PLACE_RESULTS (docs/host.md, "Results straight into the
  // caller's buffer"): the soft link's port writes multicast results
  // straight into the operation's result buffer where it can, as a NIC
  // writes a receive into posted memory; false: into packet buffers, and
  // the engine copies them out.
  bool place_results = true;
};

// Reads NETFOLD_* environment variables into `options` where the field was
// not set by the caller (empty string / zero), validating them.
absl::Status ApplyEnvironment(ContextOptions* options);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_OPTIONS_H_
