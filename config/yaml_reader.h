// Typed values out of a YAML configuration file, with errors that say where
// and what: every daemon's config (netfold-switchd, netfold-managerd) and
// the manager's topology file read YAML through these functions, so a bad
// file is refused the same way everywhere.
//
//   NETFOLD_ASSIGN_OR_RETURN(YAML::Node root, config::ParseYaml(text));
//   NETFOLD_RETURN_IF_ERROR(config::CheckKeys(root, {"name", "capacity"}, ""));
//   NETFOLD_RETURN_IF_ERROR(config::ReadOptionalString(root, "name", "", &c.name));
//   const YAML::Node cap = root["capacity"];
//   NETFOLD_RETURN_IF_ERROR(config::CheckKeys(cap, {"slots"}, "capacity"));
//   NETFOLD_RETURN_IF_ERROR(config::ReadOptionalUint(cap, "slots", "capacity", 1 << 24, &c.slots));
//   ...
//   return config::InFile(status, path);   // at the file boundary
//
// The error style. InvalidArgument, with the key path (`where`: "capacity",
// "static.qps[1].psn"; "" for the document itself), the line of the
// offending node when yaml-cpp knows it, and what was expected:
//
//   /etc/netfold/leaf0.yaml: static.qps[1].psn (line 14): 16777216 is larger than 16777215
//   /etc/netfold/leaf0.yaml: line 2: unknown key 'nmae' (known: name, data_address, ...)
//   capacity.slots (line 3): 'many' is not a non-negative integer
//
// The rules, the same for every file:
// - keys: ParseYaml refuses a duplicated key in any mapping (yaml-cpp keeps
//   both copies and would read the first); every map is checked with
//   CheckKeys, which refuses unknown keys (and duplicates, again);
// - numbers: non-negative integers, decimal or hexadecimal (0x...), at most
//   the caller's maximum;
// - strings: a key written without a value is refused ("" is the empty
//   string), so that `manager:` with a forgotten address is an error rather
//   than "no manager";
// - booleans: YAML's true/false, yes/no, on/off.
//
// yaml-cpp reports errors by throwing; every function here catches them, so
// callers never see an exception. Thread-safe (no shared state).
#ifndef NETFOLD_CONFIG_YAML_READER_H_
#define NETFOLD_CONFIG_YAML_READER_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "yaml-cpp/yaml.h"

namespace netfold::config {

// Parses one YAML document. InvalidArgument "YAML syntax error: ..." with the
// line and column; InvalidArgument "WHERE (line N): duplicate key 'K' (first
// on line M)" when any mapping of the document, at any depth and whether a
// parser reads it or not, has a key twice (yaml-cpp would keep both and read
// the first); InvalidArgument for a document of more than 2^20 nodes.
absl::StatusOr<YAML::Node> ParseYaml(std::string_view text);

// Reads a whole file. NotFound / PermissionDenied / ... naming the path.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// `status` with "PATH: " before its message (the code kept): how an error in
// a file's contents names the file. OK stays OK.
absl::Status InFile(const absl::Status& status, std::string_view path);

// "line N" of a node (1-based), or "" when yaml-cpp does not know.
std::string YamlLine(const YAML::Node& node);

// Key paths: KeyPath("capacity", "slots") is "capacity.slots",
// KeyPath("", "name") is "name"; IndexPath("static.qps", 1) is "static.qps[1]".
std::string KeyPath(std::string_view where, std::string_view key);
std::string IndexPath(std::string_view where, size_t index);

// InvalidArgument "WHERE (line N): WHAT", in the style above: for the checks
// a caller makes itself (an address that does not parse, a reserved value).
absl::Status ErrorAt(const YAML::Node& node, std::string_view where, std::string_view what);

// OK if `node` is a map whose keys are all in `allowed`, each once.
// InvalidArgument naming `where`, the key and its line otherwise.
absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                       std::string_view where);

// Required scalars: InvalidArgument naming `where` when the node is missing,
// has no value, is not a scalar or is out of range.
absl::StatusOr<uint64_t> ReadUint(const YAML::Node& node, std::string_view where,
                                  uint64_t max_value);
absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view where);
absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view where);
// A list of numbers, each at most `max_value` (an empty list is fine).
absl::StatusOr<std::vector<uint64_t>> ReadUintList(const YAML::Node& node, std::string_view where,
                                                   uint64_t max_value);

// Optional keys: read map[key] into *out when the key is present (errors as
// above, naming KeyPath(where, key)); leave *out alone when it is absent.
absl::Status ReadOptionalString(const YAML::Node& map, std::string_view key, std::string_view where,
                                std::string* out);
absl::Status ReadOptionalBool(const YAML::Node& map, std::string_view key, std::string_view where,
                              bool* out);
// A whole number of `unit`s (ack_timeout_ms: unit absl::Milliseconds(1)), at
// most `max_count` of them.
absl::Status ReadOptionalDuration(const YAML::Node& map, std::string_view key,
                                  std::string_view where, absl::Duration unit, uint64_t max_count,
                                  absl::Duration* out);
// Into any integer field that holds `max_value`.
template <typename T>
absl::Status ReadOptionalUint(const YAML::Node& map, std::string_view key, std::string_view where,
                              uint64_t max_value, T* out);

// Implementation details below.

// The node of map[key], or an undefined node (also when `map` is no map).
YAML::Node Child(const YAML::Node& map, std::string_view key);

template <typename T>
absl::Status ReadOptionalUint(const YAML::Node& map, std::string_view key, std::string_view where,
                              uint64_t max_value, T* out) {
  const YAML::Node node = Child(map, key);
  if (!node.IsDefined()) return absl::OkStatus();
  absl::StatusOr<uint64_t> value = ReadUint(node, KeyPath(where, key), max_value);
  if (!value.ok()) return value.status();
  *out = static_cast<T>(*value);
  return absl::OkStatus();
}

}  // namespace netfold::config

#endif  // NETFOLD_CONFIG_YAML_READER_H_
