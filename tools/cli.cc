#include "tools/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/log.h"

namespace netfold::tools {
namespace {

constexpr std::string_view kCommonHelp =
    "Common: --log-level error|warning|info|debug|trace. The state directory defaults to\n"
    "$NETFOLD_STATE_DIR or /tmp/netfold-<uid>.\n";

// Each line of `text` after `indent`.
std::string Indent(std::string_view text, std::string_view indent) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    out += absl::StrFormat("%s%s\n", line.empty() ? "" : indent, std::string(line));
  }
  return out;
}

std::string Join(const std::vector<std::string>& words, std::string_view prefix = "") {
  std::string out;
  for (const std::string& w : words) {
    absl::StrAppendFormat(&out, "%s%s%s", out.empty() ? "" : " ", std::string(prefix), w);
  }
  return out;
}

// What completes an option's value: files, directories, choices, or
// nothing (a number, an address).
std::string CompleteValue(std::string_view option) {
  if (option == "topology") return "compgen -f -- \"$cur\"";
  if (option == "state-dir" || option == "out") return "compgen -d -- \"$cur\"";
  if (option == "direction") return "compgen -W \"both send receive\" -- \"$cur\"";
  if (option == "peer") return "compgen -W \"all default\" -- \"$cur\"";
  if (option == "log-level") return "compgen -W \"error warning info debug trace\" -- \"$cur\"";
  return "";
}

}  // namespace

const Command* FindCommand(std::string_view name) {
  for (const Command& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string Usage() {
  std::string out = "usage: netfold COMMAND [options]\n\ncommands:\n";
  size_t width = 0;
  for (const Command& c : Commands()) width = std::max(width, c.name.size());
  for (const Command& c : Commands()) {
    // The summary under itself, after "  NAME ".
    const std::string summary = Indent(c.summary, std::string(width + 3, ' '));
    out += absl::StrFormat("  %-*s %s", static_cast<int>(width), c.name, summary.substr(width + 3));
  }
  out += "\n";
  out += kCommonHelp;
  out += "`netfold help COMMAND` or `netfold COMMAND --help` prints one command's usage.\n";
  return out;
}

std::string CommandUsage(const Command& c) {
  return absl::StrFormat("usage: netfold %s %s\n\n%s\n%s", c.name, c.synopsis,
                         Indent(c.summary, "  "), kCommonHelp);
}

Args Args::Parse(int argc, char** argv, const Command& command) {
  const std::vector<std::string>& flags = command.flags;
  std::vector<std::string> valued = command.valued;
  valued.push_back("log-level");
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (a.positional.size() < command.max_positional) {
        a.positional.push_back(arg);
        continue;
      }
      a.error = absl::StrFormat("unexpected argument '%s'", arg);
      return a;
    }
    std::string key = arg.substr(2), value;
    if (size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    for (char& c : key) c = c == '_' ? '-' : c;
    const bool is_flag = std::find(flags.begin(), flags.end(), key) != flags.end();
    const bool is_valued = std::find(valued.begin(), valued.end(), key) != valued.end();
    if (!is_flag && !is_valued) {
      a.error = absl::StrFormat("unknown option --%s", key);
      return a;
    }
    if (is_valued && value.empty() && arg.find('=') == std::string::npos) {
      if (i + 1 >= argc) {
        a.error = absl::StrFormat("--%s needs a value", key);
        return a;
      }
      value = argv[++i];
    }
    a.values[key] = is_flag && value.empty() ? "1" : value;
  }
  return a;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "netfold: %s\n", message.c_str());
  return 2;
}

// A command line the command cannot parse: the error, and where the usage is.
int FailUsage(std::string_view command, const std::string& message) {
  return Fail(
      absl::StrFormat("%s (netfold %s --help prints the usage)", message, std::string(command)));
}

std::string SelfPath(const char* argv0) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return argv0;
  buf[n] = '\0';
  return buf;
}

void ApplyLogLevel(const Args& args) {
  if (args.Has("log-level")) {
    if (auto level = ParseLogLevel(args.Get("log-level"))) SetLogLevel(*level);
  }
}

// The bash completion script, from the command table.
std::string BashCompletion() {
  std::vector<std::string> names;
  std::vector<std::string> valued = {"log-level"};
  for (const Command& c : Commands()) {
    names.emplace_back(c.name);
    for (const std::string& v : c.valued) {
      if (std::find(valued.begin(), valued.end(), v) == valued.end()) valued.push_back(v);
    }
  }
  std::string out =
      "# bash completion for netfold, generated by `netfold completion bash`\n"
      "# (docs/operations.md). Load it with: source <(netfold completion bash)\n"
      "_netfold() {\n"
      "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
      "  COMPREPLY=()\n"
      "  if [[ $COMP_CWORD -eq 1 ]]; then\n";
  absl::StrAppendFormat(&out, "    COMPREPLY=($(compgen -W \"%s --help\" -- \"$cur\"))\n",
                        Join(names));
  out += "    return\n  fi\n  case \"$prev\" in\n";
  for (const std::string& v : valued) {
    const std::string values = CompleteValue(v);
    absl::StrAppendFormat(&out, "    --%s) %sreturn ;;\n", v,
                          values.empty() ? "" : absl::StrFormat("COMPREPLY=($(%s)); ", values));
  }
  out += "  esac\n  local options=\"\" words=\"\"\n  case \"${COMP_WORDS[1]}\" in\n";
  for (const Command& c : Commands()) {
    std::vector<std::string> options = c.flags;
    options.insert(options.end(), c.valued.begin(), c.valued.end());
    options.push_back("log-level");
    options.push_back("help");
    const std::vector<std::string>& words = c.name == "help" ? names : c.words;
    absl::StrAppendFormat(&out, "    %s) options=\"%s\"; words=\"%s\" ;;\n", c.name,
                          Join(options, "--"), Join(words));
  }
  out +=
      "  esac\n"
      "  if [[ \"$cur\" == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$options\" -- \"$cur\"))\n"
      "  elif [[ $COMP_CWORD -eq 2 && -n \"$words\" ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
      "  fi\n"
      "}\n"
      "complete -F _netfold netfold\n";
  return out;
}

}  // namespace netfold::tools
