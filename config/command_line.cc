#include "config/command_line.h"

#include <algorithm>
#include <iostream>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace netfold::config {

void WriteDaemonHelp(std::ostream& out, std::string_view program, std::string_view usage,
                     bool all) {
  out << program << ": " << usage << "\n\nflags:\n";
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    // Abseil's own flags (--flagfile, --helpfull, ...) live in absl/flags/.
    if (!all && flag->Filename().find("absl/") != std::string::npos) continue;
    flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  size_t width = 0;
  for (const absl::CommandLineFlag* flag : flags) width = std::max(width, flag->Name().size());
  // "  --name  help", the help wrapped at 80 columns under itself. No default
  // column: the daemons' flags default to "not given" (the config file's
  // value), and each help text names the real default.
  const size_t indent = width + 6;
  for (const absl::CommandLineFlag* flag : flags) {
    std::string line =
        absl::StrFormat("  --%-*s  ", static_cast<int>(width), std::string(flag->Name()));
    for (absl::string_view word : absl::StrSplit(flag->Help(), ' ', absl::SkipEmpty())) {
      if (line.size() > indent && line.size() + 1 + word.size() > 80) {
        out << line << "\n";
        line = std::string(indent, ' ');
      } else if (line.size() > indent) {
        line += ' ';
      }
      line.append(word.data(), word.size());
    }
    out << line << "\n";
  }
  if (!all) out << "\n--helpfull lists Abseil's own flags too.\n";
}

std::optional<std::vector<char*>> ParseDaemonCommandLine(int argc, char** argv,
                                                         std::string_view usage) {
  absl::SetProgramUsageMessage(absl::string_view(usage.data(), usage.size()));
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    const bool full = arg == "--helpfull" || arg == "-helpfull";
    if (full || arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpshort" ||
        arg == "-helpshort") {
      std::string_view program = argc > 0 ? argv[0] : "";
      if (size_t slash = program.rfind('/'); slash != std::string_view::npos) {
        program.remove_prefix(slash + 1);
      }
      WriteDaemonHelp(std::cout, program, usage, full);
      std::cout.flush();
      return std::nullopt;
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace netfold::config
