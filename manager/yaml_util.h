// Small Status-returning helpers over yaml-cpp, which reports errors by
// throwing. Every function here catches yaml-cpp's exceptions, so callers
// (topology and config parsing) never see one.
//
//   NETFOLD_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(text));
//   NETFOLD_RETURN_IF_ERROR(CheckKeys(root, {"name", "switches"}, "topology"));
//   NETFOLD_ASSIGN_OR_RETURN(uint64_t n, ReadUint(root["slots"], "slots", 1u << 20));
//
// Error messages name the key path and the line of the offending node.
// Thread-safe (no shared state).
#ifndef NETFOLD_MANAGER_YAML_UTIL_H_
#define NETFOLD_MANAGER_YAML_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace netfold::manager {

// Parses one YAML document. InvalidArgument with line and column on a
// syntax error.
absl::StatusOr<YAML::Node> ParseYaml(std::string_view text);

// Reads a whole file. NotFound / PermissionDenied with the path.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// "line N" of a node (1-based), or "" when yaml-cpp does not know.
std::string YamlLine(const YAML::Node& node);

// OK if `node` is a map whose keys are all in `allowed`; InvalidArgument
// naming `where` and the unknown key otherwise.
absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                       std::string_view where);

// Scalars. InvalidArgument naming `where` when the node is missing, not a
// scalar, or out of range.
absl::StatusOr<uint64_t> ReadUint(const YAML::Node& node, std::string_view where,
                                  uint64_t max_value);
absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view where);
absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view where);

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_YAML_UTIL_H_
