#include "config/yaml_reader.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/status_macros.h"

namespace netfold::config {
namespace {

// "where (line N)", "where", "line N" or "" (the document, line unknown).
std::string At(const YAML::Node& node, std::string_view where) {
  const std::string line = YamlLine(node);
  if (line.empty()) return std::string(where);
  if (where.empty()) return line;
  return absl::StrFormat("%s (%s)", where, line);
}

// What yaml-cpp threw, under the key path.
absl::Status Thrown(std::string_view where, const YAML::Exception& e) {
  return absl::InvalidArgumentError(where.empty() ? std::string(e.what())
                                                  : absl::StrFormat("%s: %s", where, e.what()));
}

// The scalar of a node that must have a value: `expected` names the kind
// ("a number") in the error.
absl::StatusOr<std::string> Scalar(const YAML::Node& node, std::string_view where,
                                   std::string_view expected) {
  if (!node.IsDefined()) return absl::InvalidArgumentError(absl::StrFormat("%s: missing", where));
  if (node.IsNull()) {
    // No line: yaml-cpp marks an empty value at the token after it, often
    // the next line, which would point the reader at the wrong key.
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: no value, expected %s", where, expected));
  }
  if (!node.IsScalar()) return ErrorAt(node, where, absl::StrFormat("expected %s", expected));
  return node.Scalar();
}

// Every mapping of the document, at any depth, has each key once: yaml-cpp
// keeps both copies of a duplicated key and a lookup reads the first, so a
// second `listen:` further down a file would be silently ignored. Checked
// here, once for every file, rather than left to each parser's CheckKeys.
// Iterative (a deeply nested document cannot exhaust the stack) and with a
// budget of nodes (aliases can make a small text a huge tree).
absl::Status CheckUniqueKeys(const YAML::Node& root) {
  constexpr size_t kMaxNodes = 1 << 20;
  std::vector<std::pair<YAML::Node, std::string>> pending = {{root, ""}};  // node, key path
  size_t visited = 0;
  while (!pending.empty()) {
    const auto [node, where] = pending.back();
    pending.pop_back();
    if (++visited > kMaxNodes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the document has more than %d nodes (counting aliases); not a configuration",
          kMaxNodes));
    }
    if (node.IsSequence()) {
      size_t i = 0;
      for (const YAML::Node& item : node) pending.emplace_back(item, IndexPath(where, i++));
    } else if (node.IsMap()) {
      std::vector<std::pair<std::string, YAML::Node>> seen;
      for (const auto& kv : node) {
        // A key that is itself a map or a list is compared by its text.
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
        for (const auto& [earlier, earlier_node] : seen) {
          if (earlier != key) continue;
          const std::string first = YamlLine(earlier_node);
          return ErrorAt(kv.first, where,
                         absl::StrFormat("duplicate key '%s'%s", key.substr(0, 64),
                                         first.empty() ? ""
                                                       : absl::StrFormat(" (first on %s)", first)));
        }
        seen.emplace_back(key, kv.first);
        pending.emplace_back(kv.first, where);
        pending.emplace_back(kv.second, KeyPath(where, key.substr(0, 64)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<YAML::Node> ParseYaml(std::string_view text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("YAML syntax error: %s", e.what()));
  }
  try {
    NETFOLD_RETURN_IF_ERROR(CheckUniqueKeys(root));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("YAML: %s", e.what()));
  }
  return root;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  errno = 0;
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno != 0 ? errno : ENOENT, absl::StrFormat("open %s", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return ErrnoToStatus(errno != 0 ? errno : EIO, absl::StrFormat("read %s", path));
  return buf.str();
}

absl::Status InFile(const absl::Status& status, std::string_view path) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrFormat("%s: %s", path, status.message()));
}

std::string YamlLine(const YAML::Node& node) {
  try {
    if (!node.IsDefined()) return "";
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return "";
    return absl::StrFormat("line %d", mark.line + 1);
  } catch (const YAML::Exception&) {
    return "";
  }
}

absl::Status ErrorAt(const YAML::Node& node, std::string_view where, std::string_view what) {
  const std::string at = At(node, where);
  return absl::InvalidArgumentError(at.empty() ? std::string(what)
                                               : absl::StrFormat("%s: %s", at, what));
}

std::string KeyPath(std::string_view where, std::string_view key) {
  return where.empty() ? std::string(key) : absl::StrFormat("%s.%s", where, key);
}

std::string IndexPath(std::string_view where, size_t index) {
  return absl::StrFormat("%s[%d]", where, index);
}

YAML::Node Child(const YAML::Node& map, std::string_view key) {
  try {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    return map[std::string(key)];
  } catch (const YAML::Exception&) {
    return YAML::Node(YAML::NodeType::Undefined);
  }
}

absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                       std::string_view where) {
  try {
    if (!node.IsMap()) return ErrorAt(node, where, "expected a map");
    std::vector<std::pair<std::string, YAML::Node>> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      bool known = false;
      for (std::string_view a : allowed) known = known || key == a;
      if (!known) {
        std::string list;
        for (std::string_view a : allowed) {
          list += absl::StrFormat("%s%s", list.empty() ? "" : ", ", a);
        }
        return ErrorAt(kv.first, where, absl::StrFormat("unknown key '%s' (known: %s)", key, list));
      }
      for (const auto& [earlier, earlier_node] : seen) {
        if (earlier != key) continue;
        const std::string first = YamlLine(earlier_node);
        return ErrorAt(
            kv.first, where,
            absl::StrFormat("duplicate key '%s'%s", key,
                            first.empty() ? "" : absl::StrFormat(" (first on %s)", first)));
      }
      seen.emplace_back(key, kv.first);
    }
    return absl::OkStatus();
  } catch (const YAML::Exception& e) {
    return Thrown(where, e);
  }
}

absl::StatusOr<uint64_t> ReadUint(const YAML::Node& node, std::string_view where,
                                  uint64_t max_value) {
  try {
    NETFOLD_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where, "a number"));
    const bool hex = text.size() > 2 && text[0] == '0' && (text[1] | 0x20) == 'x';
    const std::string_view digits = std::string_view(text).substr(hex ? 2 : 0);
    const std::string_view allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
    if (digits.empty() || digits.size() > 20 ||
        digits.find_first_not_of(allowed) != std::string_view::npos) {
      return ErrorAt(node, where, absl::StrFormat("'%s' is not a non-negative integer", text));
    }
    const uint64_t base = hex ? 16 : 10;
    uint64_t value = 0;
    for (char c : digits) {
      const uint64_t d =
          c <= '9' ? static_cast<uint64_t>(c - '0') : static_cast<uint64_t>((c | 0x20) - 'a' + 10);
      if (d > max_value || value > (max_value - d) / base) {
        return ErrorAt(node, where, absl::StrFormat("%s is larger than %d", text, max_value));
      }
      value = value * base + d;
    }
    return value;
  } catch (const YAML::Exception& e) {
    return Thrown(where, e);
  }
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view where) {
  try {
    return Scalar(node, where, "a string (\"\" for an empty one)");
  } catch (const YAML::Exception& e) {
    return Thrown(where, e);
  }
}

absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view where) {
  try {
    NETFOLD_ASSIGN_OR_RETURN(const std::string text, Scalar(node, where, "true or false"));
    bool value = false;
    if (!YAML::convert<bool>::decode(node, value)) {
      return ErrorAt(node, where, absl::StrFormat("'%s' is not true or false", text));
    }
    return value;
  } catch (const YAML::Exception& e) {
    return Thrown(where, e);
  }
}

absl::StatusOr<std::vector<uint64_t>> ReadUintList(const YAML::Node& node, std::string_view where,
                                                   uint64_t max_value) {
  try {
    if (!node.IsDefined() || !node.IsSequence()) return ErrorAt(node, where, "expected a list");
    std::vector<uint64_t> out;
    out.reserve(node.size());
    for (size_t i = 0; i < node.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t v, ReadUint(node[i], IndexPath(where, i), max_value));
      out.push_back(v);
    }
    return out;
  } catch (const YAML::Exception& e) {
    return Thrown(where, e);
  }
}

absl::Status ReadOptionalString(const YAML::Node& map, std::string_view key, std::string_view where,
                                std::string* out) {
  const YAML::Node node = Child(map, key);
  if (!node.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(*out, ReadString(node, KeyPath(where, key)));
  return absl::OkStatus();
}

absl::Status ReadOptionalBool(const YAML::Node& map, std::string_view key, std::string_view where,
                              bool* out) {
  const YAML::Node node = Child(map, key);
  if (!node.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(*out, ReadBool(node, KeyPath(where, key)));
  return absl::OkStatus();
}

absl::Status ReadOptionalDuration(const YAML::Node& map, std::string_view key,
                                  std::string_view where, absl::Duration unit, uint64_t max_count,
                                  absl::Duration* out) {
  const YAML::Node node = Child(map, key);
  if (!node.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(uint64_t count, ReadUint(node, KeyPath(where, key), max_count));
  *out = unit * static_cast<int64_t>(count);
  return absl::OkStatus();
}

}  // namespace netfold::config
