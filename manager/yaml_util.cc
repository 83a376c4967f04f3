#include "manager/yaml_util.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "base/errno_status.h"

namespace netfold::manager {

absl::StatusOr<YAML::Node> ParseYaml(std::string_view text) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("YAML syntax error: %s", e.what()));
  }
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno != 0 ? errno : ENOENT, absl::StrFormat("open %s", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return ErrnoToStatus(errno != 0 ? errno : EIO, absl::StrFormat("read %s", path));
  return buf.str();
}

std::string YamlLine(const YAML::Node& node) {
  try {
    YAML::Mark mark = node.Mark();
    if (mark.is_null()) return "";
    return absl::StrFormat("line %d", mark.line + 1);
  } catch (const YAML::Exception&) {
    return "";
  }
}

namespace {

std::string At(const YAML::Node& node, std::string_view where) {
  std::string line = YamlLine(node);
  return line.empty() ? std::string(where) : absl::StrFormat("%s (%s)", where, line);
}

}  // namespace

absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                       std::string_view where) {
  try {
    if (!node.IsMap()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: expected a map", At(node, where)));
    }
    for (const auto& kv : node) {
      std::string key = kv.first.as<std::string>();
      bool known = false;
      for (std::string_view a : allowed) known = known || key == a;
      if (!known) {
        std::string list;
        for (std::string_view a : allowed)
          list += absl::StrFormat("%s%s", list.empty() ? "" : ", ", a);
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: unknown key '%s' (known: %s)", At(kv.first, where), key, list));
      }
    }
    return absl::OkStatus();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, e.what()));
  }
}

absl::StatusOr<uint64_t> ReadUint(const YAML::Node& node, std::string_view where,
                                  uint64_t max_value) {
  try {
    if (!node.IsDefined() || node.IsNull()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: missing", where));
    }
    if (!node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: expected a number", At(node, where)));
    }
    const std::string text = node.Scalar();
    if (text.empty() || text.size() > 20 ||
        text.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' is not a non-negative integer", At(node, where), text));
    }
    uint64_t value = 0;
    for (char c : text) {
      uint64_t digit = static_cast<uint64_t>(c - '0');
      if (value > (max_value - digit) / 10) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: %s is larger than %d", At(node, where), text, max_value));
      }
      value = value * 10 + digit;
    }
    return value;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, e.what()));
  }
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view where) {
  try {
    if (!node.IsDefined() || node.IsNull()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: missing", where));
    }
    if (!node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: expected a string", At(node, where)));
    }
    return node.Scalar();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, e.what()));
  }
}

absl::StatusOr<bool> ReadBool(const YAML::Node& node, std::string_view where) {
  try {
    if (!node.IsDefined() || node.IsNull() || !node.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected true or false", At(node, where)));
    }
    bool value = false;
    if (!YAML::convert<bool>::decode(node, value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' is not true or false", At(node, where), node.Scalar()));
    }
    return value;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s", where, e.what()));
  }
}

}  // namespace netfold::manager
