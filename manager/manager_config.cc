#include "manager/manager_config.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "manager/endpoint_address.h"
#include "manager/yaml_util.h"

namespace netfold::manager {
namespace {

constexpr uint64_t kMaxMs = 24ull * 3600 * 1000;

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

absl::Status ReadMs(const YAML::Node& root, const char* key, absl::Duration* out) {
  if (!root[key].IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(uint64_t ms, ReadUint(root[key], key, kMaxMs));
  *out = absl::Milliseconds(static_cast<int64_t>(ms));
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadNumber(const YAML::Node& node, const std::string& where, uint64_t max, T* out) {
  if (!node.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(uint64_t v, ReadUint(node, where, max));
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ManagerConfig> ParseManagerConfig(std::string_view yaml_text,
                                                 const std::string& base_dir, ManagerConfig c) {
  NETFOLD_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text));
  if (root.IsNull()) return c;  // an empty file
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(root,
                {"listen", "topology", "state_dir", "log_level", "heartbeat_interval_ms",
                 "switch_timeout_ms", "host_timeout_ms", "abandoned_job_timeout_ms",
                 "command_timeout_ms", "link_retry_ms",
                 "replan_on_failure", "switch_secret", "multicast_prefix", "snapshot_every",
                 "max_message_bytes", "max_threads", "rate_limit", "limits"},
                "manager config"));
  if (root["listen"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.server.listen_address, ReadString(root["listen"], "listen"));
  }
  if (root["topology"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(std::string t, ReadString(root["topology"], "topology"));
    c.topology_path = Resolve(t, base_dir);
  }
  if (root["state_dir"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(std::string d, ReadString(root["state_dir"], "state_dir"));
    c.state_dir = Resolve(d, base_dir);
  }
  if (root["log_level"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.log_level, ReadString(root["log_level"], "log_level"));
  }
  NETFOLD_RETURN_IF_ERROR(ReadMs(root, "heartbeat_interval_ms", &c.manager.heartbeat_interval));
  NETFOLD_RETURN_IF_ERROR(ReadMs(root, "switch_timeout_ms", &c.manager.switch_timeout));
  NETFOLD_RETURN_IF_ERROR(ReadMs(root, "host_timeout_ms", &c.manager.host_timeout));
  NETFOLD_RETURN_IF_ERROR(
      ReadMs(root, "abandoned_job_timeout_ms", &c.manager.abandoned_job_timeout));
  NETFOLD_RETURN_IF_ERROR(ReadMs(root, "command_timeout_ms", &c.manager.command_timeout));
  NETFOLD_RETURN_IF_ERROR(ReadMs(root, "link_retry_ms", &c.manager.link_retry_after));
  if (root["replan_on_failure"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.manager.replan_on_failure,
                             ReadBool(root["replan_on_failure"], "replan_on_failure"));
  }
  if (root["switch_secret"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.manager.switch_secret,
                             ReadString(root["switch_secret"], "switch_secret"));
  }
  if (root["multicast_prefix"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.manager.multicast_prefix,
                             ReadString(root["multicast_prefix"], "multicast_prefix"));
  }
  NETFOLD_RETURN_IF_ERROR(
      ReadNumber(root["snapshot_every"], "snapshot_every", 1u << 30, &c.manager.snapshot_every));
  NETFOLD_RETURN_IF_ERROR(ReadNumber(root["max_message_bytes"], "max_message_bytes", 1u << 30,
                                     &c.server.max_message_bytes));
  NETFOLD_RETURN_IF_ERROR(
      ReadNumber(root["max_threads"], "max_threads", 1u << 16, &c.server.max_threads));
  if (root["rate_limit"].IsDefined()) {
    const YAML::Node rl = root["rate_limit"];
    NETFOLD_RETURN_IF_ERROR(CheckKeys(rl, {"requests_per_second", "burst"}, "rate_limit"));
    NETFOLD_RETURN_IF_ERROR(ReadNumber(rl["requests_per_second"], "rate_limit.requests_per_second",
                                       1u << 30, &c.server.requests_per_second));
    NETFOLD_RETURN_IF_ERROR(ReadNumber(rl["burst"], "rate_limit.burst", 1u << 30, &c.server.burst));
  }
  if (root["limits"].IsDefined()) {
    const YAML::Node l = root["limits"];
    NETFOLD_RETURN_IF_ERROR(CheckKeys(
        l,
        {"max_jobs", "max_ranks_per_job", "max_groups_per_job", "default_groups_per_job",
         "max_slots_per_group", "default_slots_per_group", "max_slot_bytes", "default_slot_bytes"},
        "limits"));
    JobLimits& j = c.manager.limits;
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
      NETFOLD_RETURN_IF_ERROR(
          ReadNumber(l[f.key], absl::StrFormat("limits.%s", f.key), 1u << 30, f.value));
    }
  }
  return c;
}

absl::StatusOr<ManagerConfig> LoadManagerConfig(const std::string& path) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  absl::StatusOr<ManagerConfig> c = ParseManagerConfig(text, dir);
  if (!c.ok()) {
    return absl::Status(c.status().code(),
                        absl::StrFormat("config %s: %s", path, c.status().message()));
  }
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

}  // namespace netfold::manager
