// Configuration of netfold-switchd: a YAML file (docs/switch.md, example in
// deploy/switchd.example.yaml), overridden by command-line flags.
//
//   absl::StatusOr<SwitchdConfig> config = LoadSwitchdConfig("/etc/netfold/leaf0.yaml");
//   config->manager_address = "127.0.0.1:47910";      // a flag wins
//   NETFOLD_RETURN_IF_ERROR(ValidateSwitchdConfig(*config));
//
// Every key is optional but `name`. With `manager` the switch registers
// with the aggregation manager, which installs its state at run time; without
// it the switch runs in static mode: the QPs and groups of the `static:`
// section are installed at start (so a switch can be tested without a
// manager). The two are exclusive.
//
//   name: leaf0
//   data_address: 127.0.0.1:4791        # port 0: the kernel picks one
//   backend: udp                        # udp, or dpdk (needs the dpdk: section)
//   dpdk:                               # docs/dpdk.md
//     eal_args: "--no-huge --no-shconf --no-pci -m 256 -l 0"
//     links: [{device: "net_af_packet0,iface=leaf0-p0,blocksz=8192,framesz=8192",
//              send_faults: "drop=0.01,seed=3", receive_faults: ""}]
//     prefix_length: 24
//     gateway: 10.0.0.1
//     mac: "02:6e:66:00:00:01"
//     busy_poll: false
//     bridge: true
//     mbufs_per_link: 2047
//     mbuf_data_size: 8192
//   admin_address: 127.0.0.1:0          # "": no admin service
//   admin_detail: false                 # per-QP/group/peer admin view (loopback only)
//   manager: 127.0.0.1:47910            # omit for static mode
//   credential_file: /etc/netfold/credential   # the fabric credential (a 0600 file)
//   auth: credential                    # or none: no credential, loudly
//   tls_dir: /etc/netfold/tls           # ca.pem, server.pem, server.key (netfold certs)
//   tls: required                       # or none: plaintext, loudly
//   log_level: info
//   capacity: {trees: 64, groups: 64, slots: 1024, slot_bytes: 4048, qps: 256}
//   job_quota: {groups: 64, slots: 2048, qps: 256}   # with a manager, default: capacity
//   transport: {path_mtu: 4096, ack_timeout_ms: 4, ack_delay_us: 1000, retry_count: 7,
//               idle_wait_us: (automatic), poll_us: 0, packet_buffers: 8192,
//               receive_queues: 0, planes: 1, scheduling: batch}
//   link_faults:
//     - {peer: default, direction: both, impairment: "drop=0.01,seed=3"}
//     - {peer: 127.0.0.1:5000, direction: send, impairment: "down=1"}
//   static:
//     jobs: [{id: 1, quota: {groups: 4, slots: 64, qps: 8}}]
//     qps:
//       - {qpn: 0x100, psn: 1000, job: 1, pkey: 0x8001, peer: "rank 0",
//          remote: {address: 127.0.0.1:6000, qpn: 0x200, psn: 2000}}
//     groups:
//       - {tree: 0, group: 1, epoch: 1, job: 1, pkey: 0x8001, qkey: 0x1234,
//          num_slots: 8, slot_bytes: 1024, multicast: 239.1.0.1:4791,
//          children: [{qpn: 0x100, ranks: [0]}, {qpn: 0x101, ranks: [1]}]}
//
// The file is read with config/yaml_reader.h, whose rules hold for every
// netfold config: numbers decimal or hexadecimal (0x...), unknown and
// duplicate keys refused, a key without a value refused ("" is the empty
// string), and errors (InvalidArgument) naming the file, the key path and
// its line, and what was expected.
//
// Thread-safe (pure functions).
#ifndef NETFOLD_SWITCH_SWITCHD_CONFIG_H_
#define NETFOLD_SWITCH_SWITCHD_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/tls_files.h"
#include "switch/switch_data_plane.h"
#include "transport/impaired_port.h"
#include "transport/ipv4_endpoint.h"
#include "transport/link_impairment.h"

namespace netfold::sw {

// A link fault from the config or the command line. `peer` is "default"
// (peers seen later), "all" (the same at start) or "ip:port".
struct LinkFaultSpec {
  std::string peer = "default";
  transport::LinkDirection direction = transport::LinkDirection::kBoth;
  transport::ImpairmentConfig impairment;
};

// The DPDK backend (`backend: dpdk`, docs/dpdk.md): plain data, so that the
// config parses (and is checked) in builds without DPDK too.
struct DpdkLinkSpec {
  // A port the EAL probed ("net_tap0", a PCI address) or a virtual device's
  // devargs ("net_af_packet0,iface=leaf0-p0,blocksz=8192,framesz=8192").
  std::string device;
  transport::ImpairmentConfig send;     // faults on frames leaving by this link
  transport::ImpairmentConfig receive;  // faults on frames arriving on it
};

struct DpdkBackendConfig {
  std::string eal_args;  // "" = the defaults of docs/dpdk.md
  std::vector<DpdkLinkSpec> links;
  int prefix_length = 24;        // on-link subnet of data_address
  uint32_t gateway = 0;          // next hop beyond it; 0 = none
  std::string mac;               // "" = derived from data_address
  bool busy_poll = false;        // spin instead of the idle backoff
  bool bridge = true;            // forward frames not for the switch
  uint32_t mbufs_per_link = 2047;
  uint32_t mbuf_data_size = 0;   // 0 = max(8192, path_mtu + 256) (room for af_packet frames)
};

// The data-plane thread's wait when idle on a port that can be woken: long,
// since packets, QP timers, commands and Stop all end it early; what remains
// is one wakeup per interval to publish usage for the heartbeats.
inline constexpr absl::Duration kIdleWaitWoken = absl::Milliseconds(100);

struct SwitchdConfig {
  std::string name;
  transport::Ipv4Endpoint data_address{0x7f000001, transport::kDefaultRocePort};
  std::string backend = "udp";
  DpdkBackendConfig dpdk;  // with backend dpdk
  std::string admin_address = "127.0.0.1:0";  // "" = no admin service
  // The admin API may answer requests for its detailed view (QPNs, PSN
  // counters, P_Keys, peers): only with an admin address on loopback, until
  // the admin API authenticates its callers.
  bool admin_detail = false;
  std::string manager_address;                // "" = static mode
  // The file of the fabric credential, presented to the manager and asked
  // of admin callers ("" = $NETFOLD_CREDENTIAL_FILE); `auth: none` (or
  // --insecure) runs without one. LoadSwitchdCredential fills `credential`.
  std::string credential_file;
  bool auth_none = false;
  std::string credential;  // never from YAML or flags: read from credential_file
  // The directory of the TLS files (auth/tls_files.h): the admin port
  // presents its certificate, the manager's is checked against its CA.
  // `tls: none` (or --plaintext) runs without, loudly. LoadSwitchdTls fills
  // `tls`.
  std::string tls_dir;
  bool tls_none = false;
  std::optional<auth::TlsFiles> tls;
  std::string log_level;  // "" = leave NETFOLD_LOG_LEVEL's choice
  // Files the daemon writes once serving: the bound data-plane UDP port and
  // admin port (useful with port 0). "" = none.
  std::string data_port_file;
  std::string admin_port_file;

  // Capacities, per-job quota defaults and RC parameters. data_plane.name
  // follows `name`.
  SwitchConfig data_plane;
  uint32_t max_trees = 64;
  // How long the data-plane thread waits for packets when idle. Unset: long
  // (kIdleWaitWoken) on a port that control commands can wake (udp), 1 ms
  // on one they cannot (dpdk), where it bounds how late a command runs.
  std::optional<absl::Duration> idle_wait;
  // udp backend: keep reading without sleeping this long after the last
  // packet (transport.poll_us; UdpPortConfig::poll_window). Zero: sleep in
  // epoll at once (the default; polling is opt-in).
  absl::Duration poll_window = absl::ZeroDuration();
  uint32_t packet_buffers = 8192;
  // udp backend: receive queues (transport.receive_queues), each a thread
  // reading a socket of the data port's SO_REUSEPORT group, steered by the
  // sender's port (transport/multi_queue_udp_port.h; docs/switch.md,
  // "Receive queues"). 0 (the default): the data-plane thread reads the one
  // socket itself. Opt-in: the threads take cores the ranks may need.
  uint32_t receive_queues = 0;
  // Data planes (transport.planes, docs/switch.md "Data planes"): the
  // switch runs this many independent data planes, each a switch of its own
  // to the fabric (proto/control/plane_name.h: NAME, NAME@1, ...) with its
  // own ports, QPs, groups and thread, the way a NIC spreads flows over
  // queues. 1 (the default): one data plane, as always. udp backend.
  uint32_t planes = 1;
  // The plane this config runs (netfold-switchd expands one config into
  // `planes` of them; not a YAML key): the name it registers is
  // PlaneSwitchName(name, plane).
  uint32_t plane = 0;
  // The data-plane thread runs as SCHED_BATCH (transport.scheduling: batch,
  // the default) or SCHED_OTHER (normal). Batch: its wakeups do not preempt
  // the thread running on that core (an MPI rank on a shared machine); it
  // takes the next free core, or the core when that thread sleeps. With a
  // core to spare there is no difference.
  bool sched_batch = true;

  std::vector<LinkFaultSpec> link_faults;

  // job_quota as given, a field not given kQuotaNotGiven (data_plane.
  // default_quota has the static defaults there). With a manager a switch
  // holds a job to its own capacity but where this says less: the manager
  // grants jobs their quotas (docs/manager.md), and a lower limit here
  // refuses groups it granted (SwitchDaemon::Start).
  static constexpr uint32_t kQuotaNotGiven = UINT32_MAX;
  JobQuota job_quota_given{kQuotaNotGiven, kQuotaNotGiven, kQuotaNotGiven};
  // `base` with the fields job_quota gave in their place.
  JobQuota QuotaGivenOver(JobQuota base) const {
    if (job_quota_given.max_groups != kQuotaNotGiven) base.max_groups = job_quota_given.max_groups;
    if (job_quota_given.max_slots != kQuotaNotGiven) base.max_slots = job_quota_given.max_slots;
    if (job_quota_given.max_qps != kQuotaNotGiven) base.max_qps = job_quota_given.max_qps;
    return base;
  }

  // Static mode.
  std::vector<std::pair<uint64_t, JobQuota>> static_job_quotas;
  std::vector<QpRequest> static_qps;  // each with qpn and psn set
  std::vector<GroupSpec> static_groups;
};

// Parses YAML text over the defaults in `base`. InvalidArgument names the
// key path and its line.
absl::StatusOr<SwitchdConfig> ParseSwitchdConfig(std::string_view yaml_text,
                                                 SwitchdConfig base = {});
// Reads and parses a file: errors as above, after "PATH: ".
absl::StatusOr<SwitchdConfig> LoadSwitchdConfig(const std::string& path);

// Checks what depends on several keys: a name, a usable data address, the
// backend, slot size against the MTU, manager vs static mode, static QPNs
// unique, the dpdk section. InvalidArgument (Unimplemented for the dpdk
// backend in a build without DPDK).
absl::Status ValidateSwitchdConfig(const SwitchdConfig& config);

// Reads the fabric credential into config->credential from credential_file,
// else the file $NETFOLD_CREDENTIAL_FILE names. A switch with a manager or
// an admin address needs one unless auth_none (InvalidArgument saying how
// to give it); auth_none with a credential_file is refused too, the
// environment's file ignored (it may be inherited). The file's own errors
// (mode 0644, ...) are ReadCredentialFile's.
absl::Status LoadSwitchdCredential(SwitchdConfig* config);

// Reads tls_dir into config->tls (ReadTlsDir's errors). Without a tls_dir:
// plaintext if tls_none, if no credential is required (auth: none), or if
// the switch has neither a manager nor an admin address; otherwise
// InvalidArgument saying how to give one. tls_none with a tls_dir is
// InvalidArgument too. Call after LoadSwitchdCredential.
absl::Status LoadSwitchdTls(SwitchdConfig* config);

// "PEER/DIRECTION/IMPAIRMENT" entries separated by ';' (the --link_faults
// flag), e.g. "all/both/drop=0.05,seed=3;127.0.0.1:5000/send/down=1".
absl::StatusOr<std::vector<LinkFaultSpec>> ParseLinkFaultList(std::string_view text);

// The largest slot (P) whose multicast result fits one packet of `path_mtu`:
// the 40-byte aggregation header plus P bytes, P a multiple of 16.
uint32_t MaxSlotBytesForMtu(uint32_t path_mtu);

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_SWITCHD_CONFIG_H_
