// A fabric of real daemons on loopback: one netfold-managerd and the
// switches of a topology, all in one netfold-switchd (one data-plane
// thread: docs/switch.md, "Several switches in one process") or one
// netfold-switchd each (switch_processes), started as child processes,
// waited for until every switch is UP, stopped on request. `netfold up`,
// `netfold demo`, `netfold bench` and the end-to-end tests use it.
//
//   auto fabric = *LocalFabric::Start({.hosts = 8});   // root + 2 leaves
//   setenv("NETFOLD_MANAGER", fabric->manager_address().c_str(), 1);
//   ...
//   fabric->Stop();      // or Release() to leave it running (netfold up)
//
// Everything lives in a state directory: the topology, the manager's config
// and journal, one log per daemon, the fabric credential (`credential`, mode
// 0600, new for every start: the daemons are given its path, never the
// secret, and every client presents it), the fabric's TLS files (`ca.pem`,
// `server.pem`, `server.key`, a new CA for every start; the daemons serve
// TLS with them, clients trust that CA alone), and `fabric.pids` / `manager.address`
// so that `netfold down` (StopStateDir) can find the daemons again. The
// directory is opened through StateDir (tools/state_dir.h: made 0700,
// refused if another user could have prepared it; files opened with
// O_NOFOLLOW) and fabric.pids records each daemon's start time, so that
// `netfold down` signals only the processes it started (tools/daemon_pids.h).
// A
// directory the fabric made itself (no `state_dir` given) is removed when
// the fabric is destroyed, unless KeepStateDir() was called, a daemon had
// to be killed, or NETFOLD_KEEP_STATE is set (for reading the logs).
// Every wait has a deadline; Stop sends SIGTERM, then SIGKILL after 5 s.
// Daemons not detached get SIGTERM when the thread that started them
// (Start, Restart) exits, not only the process (PR_SET_PDEATHSIG follows
// the forking thread): call those from a thread that outlives the fabric.
#ifndef NETFOLD_TOOLS_LOCAL_FABRIC_H_
#define NETFOLD_TOOLS_LOCAL_FABRIC_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tools/multicast_claim.h"
#include "tools/state_dir.h"

namespace netfold::tools {

struct LocalFabricOptions {
  // A topology file; empty: a two-level tree of three switches (root, leaf0,
  // leaf1) with `hosts` hosts h0.. split between the leaves.
  std::string topology_file;
  int hosts = 8;
  std::string state_dir;        // empty: a fresh directory under $TMPDIR
  std::string bin_dir;          // empty: found next to this program (FindDaemon)
  std::string link_faults;      // impairment of every switch port, e.g. "drop=0.01,seed=7"
  std::string log_level = "warning";
  bool detach = false;          // daemons in their own session (outlive the launcher)
  uint32_t default_slot_bytes = 0;  // manager's default P (0: its own default)
  uint32_t default_slots = 0;       // manager's default K
  uint32_t default_groups = 0;      // manager's default groups per job (0: its own)
  int switch_poll_us = 0;           // switches' --poll_us (0: they sleep in epoll at once)
  int switch_receive_queues = 0;    // switches' --receive_queues (0: none)
  // Data planes of every switch (docs/manager.md, "Data planes"): with a
  // generated topology its `planes:`; with a topology file, 0 takes the
  // file's and anything else must match it. The switches run with
  // --planes of the topology.
  int planes = 0;
  // kOne: every switch in one netfold-switchd process, on one data-plane
  // thread (fewer processes, no wakeup between leaf and root:
  // docs/switch.md). kEach: a process per switch (fault tests that kill one
  // switch need it; so does switch_poll_us, which forces it). kAuto: kOne
  // when the CPUs this process may run on are fewer than the topology's
  // switches and hosts (a rank per host: processes outnumber cores, so
  // every wakeup costs a context switch), else kEach (the switches then run
  // in parallel).
  enum class SwitchProcesses { kAuto, kOne, kEach };
  SwitchProcesses switch_processes = SwitchProcesses::kAuto;
  // Extra lines of the manager's YAML config (e.g. "host_timeout_ms: 1000\n"),
  // appended as given; tests scale the manager's timeouts with it.
  std::string manager_config;
  absl::Duration ready_timeout = absl::Seconds(30);
  // No TLS: the daemons run with --plaintext (the credential crosses
  // loopback in clear). For `netfold up --plaintext` and comparisons.
  bool plaintext = false;
};

class LocalFabric {
 public:
  static absl::StatusOr<std::unique_ptr<LocalFabric>> Start(const LocalFabricOptions& options);
  // Stops the daemons unless Release() was called.
  ~LocalFabric();

  const std::string& manager_address() const { return manager_address_; }
  // The fabric credential's file (for NETFOLD_CREDENTIAL_FILE) and the
  // secret in it (for the caller's own gRPC channels, auth/grpc_credential.h).
  const std::string& credential_file() const { return credential_file_; }
  const std::string& credential() const { return credential_; }
  // The fabric CA's certificate file (for NETFOLD_TLS_CA; "" with
  // plaintext), and what a client of this fabric needs: the credential and
  // the CA (auth/grpc_credential.h).
  const std::string& tls_ca_file() const { return tls_ca_file_; }
  const auth::ClientAuth& client_auth() const { return client_auth_; }
  const std::string& state_dir() const { return state_dir_; }
  // N of the manager's multicast prefix 239.N (groups get 239.N.x.y),
  // claimed machine-wide while any of the fabric's daemons runs
  // (tools/multicast_claim.h).
  int multicast_octet() const { return multicast_claim_ ? multicast_claim_->octet() : 0; }
  const std::string& topology_file() const { return topology_file_; }
  // Every switch of every data plane (NAME, NAME@1, ...), plane-major.
  const std::vector<std::string>& switch_names() const { return switch_names_; }
  // The topology's data planes (1 without planes).
  uint32_t planes() const { return planes_; }
  // True if every switch runs in one process (switch_processes resolved).
  bool one_switch_process() const { return one_switch_process_; }
  std::vector<std::string> host_names() const { return host_names_; }
  // The admin address of each switch ("" if unknown), same order as switch_names().
  std::vector<std::string> switch_admin_addresses() const;
  // The processes that run switches (one, or one per switch), while running.
  std::vector<pid_t> switch_pids() const;

  // SIGTERM every daemon, SIGKILL what is left after `grace`; reaps them.
  absl::Status Stop(absl::Duration grace = absl::Seconds(5));
  // Leaves the daemons running (their pids stay in the state directory).
  void Release() { released_ = true; }
  // Keeps a state directory the fabric made itself (e.g. a run failed and
  // its logs are worth reading).
  void KeepStateDir() { owns_state_dir_ = false; }

  // Sends `signal` to one daemon ("manager" or a switch name), e.g. SIGKILL,
  // SIGSTOP/SIGCONT for fault tests; SIGKILL also reaps it.
  // FailedPrecondition for a switch that shares its process with others
  // (switch_processes): the signal would hit them all.
  absl::Status Kill(const std::string& name, int signal);
  // Sends `signal` to every process that runs switches (one, or one per
  // switch); SIGKILL also reaps them.
  absl::Status KillSwitches(int signal);
  // Sets link faults on every link of switch `name` (NAME or NAME@P), both
  // ways, as `netfold fault NAME IMPAIRMENT` does: e.g. "down=1" cuts it
  // off, "none" clears it.
  absl::Status SetLinkFault(const std::string& name, const std::string& impairment);
  // The counters of switch `name` (NAME or NAME@P) as `netfold status
  // --switch NAME` shows them, QPs and groups included (detail).
  absl::StatusOr<control::GetCountersResponse> SwitchCounters(const std::string& name) const;
  // Starts a daemon again after it was killed, with the same command line
  // (the manager keeps its port and journal; a switch gets new ports and
  // registers again), and waits until every switch is UP.
  absl::Status Restart(const std::string& name, absl::Duration timeout = absl::Seconds(30));

  // Stops the daemons recorded in `state_dir` (netfold down): only those
  // that are still the processes recorded (tools/daemon_pids.h); `notes`
  // (if not null) gets a line for each one left alone and why. Errors: the
  // directory is refused (StateDir::Open), NotFound if no fabric runs from
  // it, FailedPrecondition if fabric.pids is not as netfold wrote it.
  static absl::Status StopStateDir(const std::string& state_dir,
                                   absl::Duration grace = absl::Seconds(5),
                                   std::vector<std::string>* notes = nullptr);
  // The default state directory of `netfold up`: $NETFOLD_STATE_DIR, else
  // /tmp/netfold-<uid>.
  static std::string DefaultStateDir();
  // Where the daemon `name` ("netfold-managerd") is: $NETFOLD_BIN_DIR,
  // this program's directory and its build-tree siblings (../manager,
  // ../switch), then $PATH.
  static absl::StatusOr<std::string> FindDaemon(const std::string& name,
                                                const std::string& bin_dir = "");

 private:
  struct Daemon {
    std::string name;         // "manager", a switch's name, or "switches"
    pid_t pid = -1;
    uint64_t start_time = 0;  // /proc/PID/stat field 22, for fabric.pids
    std::vector<std::string> argv;
    bool detach = false;
    std::vector<std::string> switches;  // the switches it runs
  };
  LocalFabric() = default;
  absl::Status Launch(const LocalFabricOptions& options);
  absl::StatusOr<pid_t> Spawn(const std::string& name, const std::vector<std::string>& argv,
                              bool detach);
  absl::Status WaitForSwitches(absl::Duration timeout);
  // Waits for the admin port file of every switch `d` runs.
  absl::Status WaitForAdminPorts(const Daemon& d, absl::Duration timeout);
  absl::Status WritePids();
  // A stub of switch `name`'s admin API; NotFound for a name not in the fabric.
  absl::StatusOr<std::unique_ptr<control::SwitchAdmin::Stub>> SwitchStub(
      const std::string& name) const;

  std::optional<StateDir> dir_;
  std::optional<MulticastClaim> multicast_claim_;
  std::string state_dir_;
  std::string topology_file_;
  std::string manager_address_;
  std::string credential_file_;
  std::string credential_;
  std::string tls_ca_file_;
  auth::ClientAuth client_auth_;
  std::vector<std::string> switch_names_;
  uint32_t planes_ = 1;
  absl::flat_hash_map<std::string, std::string> switch_admin_;  // name -> ip:port
  std::vector<std::string> host_names_;
  std::vector<Daemon> daemons_;
  bool one_switch_process_ = false;
  // fabric.lock of a given state directory, held from the start of the
  // launch until it is done or stopped (tools/fabric_daemons.h).
  std::optional<StateDir::Lock> launch_lock_;
  bool released_ = false;
  bool stopped_ = false;
  bool owns_state_dir_ = false;  // made by Launch: removed by the destructor
  bool wrote_pids_ = false;      // fabric.pids is this fabric's: Stop removes it
};

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_LOCAL_FABRIC_H_
