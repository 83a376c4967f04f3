#include "manager/manager_config.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "auth/fabric_credential.h"
#include "auth/tls_files.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "config/yaml_reader.h"
#include "manager/endpoint_address.h"
#include "proto/slot_size.h"

namespace netfold::manager {
namespace {

using config::CheckKeys;
using config::ReadOptionalBool;
using config::ReadOptionalDuration;
using config::ReadOptionalString;
using config::ReadOptionalUint;

constexpr uint64_t kMaxMs = 24ull * 3600 * 1000;

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

}  // namespace

absl::StatusOr<ManagerConfig> ParseManagerConfig(std::string_view yaml_text,
                                                 const std::string& base_dir, ManagerConfig c) {
  NETFOLD_ASSIGN_OR_RETURN(const YAML::Node root, config::ParseYaml(yaml_text));
  if (root.IsNull()) return c;  // an empty file
  NETFOLD_RETURN_IF_ERROR(CheckKeys(
      root,
      {"listen", "topology", "state_dir", "log_level", "heartbeat_interval_ms", "switch_timeout_ms",
       "host_timeout_ms", "abandoned_job_timeout_ms", "command_timeout_ms", "link_retry_ms",
       "replan_on_failure", "require_integrity", "credential_file", "auth", "tls_dir", "tls",
       "multicast_prefix", "snapshot_every",
       "max_message_bytes", "max_threads", "rate_limit", "limits", "switch_secret"},
      ""));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "listen", "", &c.server.listen_address));
  if (root["topology"].IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "topology", "", &c.topology_path));
    c.topology_path = Resolve(c.topology_path, base_dir);
  }
  if (root["state_dir"].IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "state_dir", "", &c.state_dir));
    c.state_dir = Resolve(c.state_dir, base_dir);
  }
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "log_level", "", &c.log_level));
  const absl::Duration ms = absl::Milliseconds(1);
  ManagerOptions& m = c.manager;
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalDuration(root, "heartbeat_interval_ms", "", ms, kMaxMs, &m.heartbeat_interval));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalDuration(root, "switch_timeout_ms", "", ms, kMaxMs, &m.switch_timeout));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalDuration(root, "host_timeout_ms", "", ms, kMaxMs, &m.host_timeout));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalDuration(root, "abandoned_job_timeout_ms", "", ms, kMaxMs,
                                               &m.abandoned_job_timeout));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalDuration(root, "command_timeout_ms", "", ms, kMaxMs, &m.command_timeout));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalDuration(root, "link_retry_ms", "", ms, kMaxMs, &m.link_retry_after));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalBool(root, "replan_on_failure", "", &m.replan_on_failure));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalBool(root, "require_integrity", "", &m.require_integrity));
  if (root["switch_secret"].IsDefined()) {
    return config::ErrorAt(
        root["switch_secret"], "switch_secret",
        "is no longer read: a secret in a config file is as safe as the file. Put the fabric "
        "credential alone in a file only you can read (chmod 600) and name it with "
        "credential_file (docs/security.md)");
  }
  if (root["credential_file"].IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "credential_file", "", &c.credential_file));
    c.credential_file = Resolve(c.credential_file, base_dir);
  }
  std::string auth = c.auth_none ? "none" : "credential";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "auth", "", &auth));
  if (auth != "credential" && auth != "none") {
    return config::ErrorAt(root["auth"], "auth",
                           absl::StrFormat("'%s' must be credential or none", auth));
  }
  c.auth_none = auth == "none";
  if (root["tls_dir"].IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "tls_dir", "", &c.tls_dir));
    c.tls_dir = Resolve(c.tls_dir, base_dir);
  }
  std::string tls = c.tls_none ? "none" : "required";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "tls", "", &tls));
  if (tls != "required" && tls != "none") {
    return config::ErrorAt(root["tls"], "tls",
                           absl::StrFormat("'%s' must be required or none", tls));
  }
  c.tls_none = tls == "none";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "multicast_prefix", "", &m.multicast_prefix));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalUint(root, "snapshot_every", "", 1u << 30, &m.snapshot_every));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalUint(root, "max_message_bytes", "", 1u << 30, &c.server.max_message_bytes));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalUint(root, "max_threads", "", 1u << 16, &c.server.max_threads));
  if (const YAML::Node rl = root["rate_limit"]; rl.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(rl, {"requests_per_second", "burst"}, "rate_limit"));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(rl, "requests_per_second", "rate_limit", 1u << 30,
                                             &c.server.requests_per_second));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(rl, "burst", "rate_limit", 1u << 30, &c.server.burst));
  }
  if (const YAML::Node l = root["limits"]; l.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(
        l,
        {"max_jobs", "max_ranks_per_job", "max_groups_per_job", "default_groups_per_job",
         "max_slots_per_group", "default_slots_per_group", "max_slot_bytes", "default_slot_bytes"},
        "limits"));
    JobLimits& j = m.limits;
    struct Field {
      const char* key;
      uint32_t* value;
    };
    for (Field f :
         {Field{"max_jobs", &j.max_jobs}, Field{"max_ranks_per_job", &j.max_ranks_per_job},
          Field{"max_groups_per_job", &j.max_groups_per_job},
          Field{"default_groups_per_job", &j.default_groups_per_job},
          Field{"max_slots_per_group", &j.max_slots_per_group},
          Field{"default_slots_per_group", &j.default_slots_per_group},
          Field{"max_slot_bytes", &j.max_slot_bytes},
          Field{"default_slot_bytes", &j.default_slot_bytes}}) {
      NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(l, f.key, "limits", 1u << 30, f.value));
    }
  }
  return c;
}

absl::StatusOr<ManagerConfig> LoadManagerConfig(const std::string& path) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, config::ReadTextFile(path));
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  absl::StatusOr<ManagerConfig> c = ParseManagerConfig(text, dir);
  if (!c.ok()) return config::InFile(c.status(), path);
  return c;
}

absl::Status ValidateManagerConfig(const ManagerConfig& c) {
  if (c.topology_path.empty()) {
    return absl::InvalidArgumentError("no topology: give --topology or 'topology:' in --config");
  }
  const ManagerOptions& m = c.manager;
  if (m.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("heartbeat_interval_ms must be positive");
  }
  if (m.switch_timeout < 2 * m.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrFormat("switch_timeout_ms (%d) must be at least twice heartbeat_interval_ms (%d)",
                        absl::ToInt64Milliseconds(m.switch_timeout),
                        absl::ToInt64Milliseconds(m.heartbeat_interval)));
  }
  if (m.host_timeout > absl::ZeroDuration() && m.host_timeout < 2 * m.heartbeat_interval) {
    return absl::InvalidArgumentError(
        "host_timeout_ms must be 0 or at least twice heartbeat_interval_ms");
  }
  if (m.abandoned_job_timeout > absl::ZeroDuration() &&
      m.abandoned_job_timeout < 2 * m.heartbeat_interval) {
    return absl::InvalidArgumentError(
        "abandoned_job_timeout_ms must be 0 or at least twice heartbeat_interval_ms");
  }
  if (m.command_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("command_timeout_ms must be positive");
  }
  int a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(m.multicast_prefix.c_str(), "%d.%d%c", &a, &b, &tail) != 2 || a < 224 ||
      a > 239 || b < 0 || b > 255) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "multicast_prefix '%s' must be 'A.B' with A in 224..239", m.multicast_prefix));
  }
  const JobLimits& l = m.limits;
  if (l.default_groups_per_job == 0 || l.default_groups_per_job > l.max_groups_per_job ||
      l.default_slots_per_group == 0 || l.default_slots_per_group > l.max_slots_per_group ||
      l.default_slot_bytes == 0 || l.default_slot_bytes > l.max_slot_bytes) {
    return absl::InvalidArgumentError("limits: every default must be positive and <= its max");
  }
  // A slot size the switches' ALU refuses would fail every group that uses
  // it (proto/slot_size.h).
  if (!proto::IsValidSlotBytes(l.default_slot_bytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "limits.default_slot_bytes %d must be a multiple of %d (the largest element) and at "
        "most %d (a multicast result, %d-byte header + slot, fits one 4096-byte packet)",
        l.default_slot_bytes, proto::kSlotAlignment, proto::kMaxSlotBytes,
        proto::kAggregationHeaderSize));
  }
  if (l.max_slot_bytes % proto::kSlotAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "limits.max_slot_bytes %d must be a multiple of %d (the largest element)",
        l.max_slot_bytes, proto::kSlotAlignment));
  }
  if (c.server.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("max_message_bytes must be at least 1024");
  }
  if (c.server.max_threads < 8) return absl::InvalidArgumentError("max_threads must be >= 8");
  if (!c.log_level.empty() && !ParseLogLevel(c.log_level).has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "log_level '%s' is not one of error, warning, info, debug, trace", c.log_level));
  }
  return absl::OkStatus();
}

absl::Status LoadManagerCredential(ManagerConfig* c) {
  if (c->auth_none) {
    // The environment's file is ignored: it may be inherited; a file given
    // to this daemon is a contradiction.
    if (!c->credential_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("auth: none (--insecure) and a credential file (%s) both given: drop one",
                          c->credential_file));
    }
    c->server.credential.clear();
    return absl::OkStatus();
  }
  std::string file = c->credential_file;
  if (file.empty()) {
    if (const char* f = std::getenv(auth::kCredentialFileEnv); f != nullptr) file = f;
  }
  if (file.empty()) {
    return absl::InvalidArgumentError(
        "no fabric credential: give --credential_file FILE (or credential_file: in --config, or "
        "NETFOLD_CREDENTIAL_FILE), a file only you can read holding the secret every switch, "
        "job and admin call must present (netfold up makes one); or run without "
        "authentication with --insecure (auth: none), on a machine where you trust every user");
  }
  NETFOLD_ASSIGN_OR_RETURN(c->server.credential, auth::ReadCredentialFile(file));
  return absl::OkStatus();
}

absl::Status LoadManagerTls(ManagerConfig* c) {
  c->server.tls.reset();
  if (c->tls_none) {
    if (!c->tls_dir.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tls: none (--plaintext) and a TLS directory (%s) both given: drop one", c->tls_dir));
    }
    return absl::OkStatus();
  }
  if (c->tls_dir.empty()) {
    if (c->server.credential.empty()) return absl::OkStatus();  // auth: none, said loudly
    return absl::InvalidArgumentError(
        "no TLS: give --tls_dir DIR (or tls_dir: in --config), a directory holding ca.pem, "
        "server.pem and server.key (netfold certs makes them; netfold up does it itself), so "
        "that the fabric credential never crosses the network in clear; or serve in plaintext "
        "with --plaintext (tls: none), on loopback or a network only you can capture");
  }
  NETFOLD_ASSIGN_OR_RETURN(auth::TlsFiles tls, auth::ReadTlsDir(c->tls_dir));
  c->server.tls = std::move(tls);
  return absl::OkStatus();
}

}  // namespace netfold::manager
