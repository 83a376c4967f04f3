// Configuration of netfold-managerd: a YAML file, overridden by flags.
//
//   absl::StatusOr<ManagerConfig> config = LoadManagerConfig("/etc/netfold/manager.yaml");
//   config->server.listen_address = "127.0.0.1:0";   // a flag wins
//
// Every key is optional except `topology` (a flag may give it instead);
// docs/manager.md lists them with their defaults:
//
//   listen: 127.0.0.1:47910
//   topology: two_level.yaml        # relative to the config file's directory
//   state_dir: /var/lib/netfold/manager
//   log_level: info
//   heartbeat_interval_ms: 500
//   switch_timeout_ms: 2000
//   host_timeout_ms: 5000           # 0: host processes never time out
//   abandoned_job_timeout_ms: 60000 # a job with no attached rank this long is destroyed (0: never)
//   command_timeout_ms: 3000
//   link_retry_ms: 10000
//   replan_on_failure: true
//   credential_file: /etc/netfold/credential   # the fabric credential (a 0600 file)
//   auth: credential                # or none: no credential asked of anyone (loud)
//   tls_dir: /etc/netfold/tls       # ca.pem, server.pem, server.key (netfold certs)
//   tls: required                   # or none: plaintext, the credential in clear (loud)
//   multicast_prefix: "239.77"
//   snapshot_every: 1000
//   max_message_bytes: 1048576
//   max_threads: 1024
//   rate_limit: {requests_per_second: 1000, burst: 2000}
//   limits: {max_jobs: 1024, max_ranks_per_job: 4096, max_groups_per_job: 256,
//            default_groups_per_job: 16, max_slots_per_group: 256,
//            default_slots_per_group: 128, max_slot_bytes: 65536,
//            default_slot_bytes: 4032}
//
// Thread-safe (pure functions).
#ifndef NETFOLD_MANAGER_MANAGER_CONFIG_H_
#define NETFOLD_MANAGER_MANAGER_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "manager/aggregation_manager.h"
#include "manager/control_service.h"

namespace netfold::manager {

struct ManagerConfig {
  std::string topology_path;
  std::string state_dir;  // "" = no durability
  std::string log_level;  // "" = leave NETFOLD_LOG_LEVEL's choice
  // The file holding the fabric credential every caller must present
  // (docs/security.md); "" = $NETFOLD_CREDENTIAL_FILE. Its contents go to
  // server.credential (LoadManagerCredential).
  std::string credential_file;
  // `auth: none` (or --insecure): no credential asked of anyone, said
  // loudly at start. Without it the manager refuses to start without one.
  bool auth_none = false;
  // The directory of the TLS files the port presents (auth/tls_files.h);
  // LoadManagerTls reads them into server.tls.
  std::string tls_dir;
  // `tls: none` (or --plaintext): serve in plaintext, said loudly at start.
  // Without it a manager with a credential refuses to start without TLS.
  bool tls_none = false;
  ManagerOptions manager;
  ServerOptions server;
};

// Parses YAML text over the defaults in `base`. Relative paths are resolved
// against `base_dir` (the config file's directory). The rules and errors are
// config/yaml_reader.h's: InvalidArgument naming the key path, its line and
// what was expected; unknown and duplicate keys refused.
absl::StatusOr<ManagerConfig> ParseManagerConfig(std::string_view yaml_text,
                                                 const std::string& base_dir,
                                                 ManagerConfig base = {});
// Reads and parses a file: errors as above, after "PATH: ".
absl::StatusOr<ManagerConfig> LoadManagerConfig(const std::string& path);

// Checks values that depend on each other (timeouts vs. interval, ...).
absl::Status ValidateManagerConfig(const ManagerConfig& config);

// Reads the fabric credential into config->server.credential: from
// credential_file, else the file $NETFOLD_CREDENTIAL_FILE names. Without
// either, InvalidArgument saying how to give one, unless auth_none; with
// auth_none and a credential_file, InvalidArgument too (which one is meant?);
// with auth_none the environment's file is ignored (it may be inherited).
// The file's own errors (mode 0644, ...) are ReadCredentialFile's.
absl::Status LoadManagerCredential(ManagerConfig* config);

// Reads tls_dir into config->server.tls (ReadTlsDir's errors). Without a
// tls_dir: plaintext if tls_none or if no credential is required (auth:
// none); otherwise InvalidArgument saying how to give one. tls_none with a
// tls_dir is InvalidArgument too. Call after LoadManagerCredential.
absl::Status LoadManagerTls(ManagerConfig* config);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_MANAGER_CONFIG_H_
