// The command line of a netfold daemon (netfold-switchd, netfold-managerd):
// absl flags, plus the manners of a command-line program that Abseil
// 20220623 lacks: `--help` prints the usage and the daemon's own flags to
// stdout and exits 0 (absl's own --help exits 1, and lists only flags of a
// file named after the program, so "No flags matched" for ours).
//
//   int main(int argc, char** argv) {
//     std::optional<std::vector<char*>> args = config::ParseDaemonCommandLine(
//         argc, argv, "one netfold switch.\n  netfold-switchd --name NAME ...");
//     if (!args) return 0;   // help was printed
//     ...
//   }
//
// Not thread-safe: call once, from main, before other threads start.
#ifndef NETFOLD_CONFIG_COMMAND_LINE_H_
#define NETFOLD_CONFIG_COMMAND_LINE_H_

#include <optional>
#include <ostream>
#include <string_view>
#include <vector>

namespace netfold::config {

// If an argument (before a bare "--") is --help, -help, -h, --helpshort or
// --helpfull: writes DaemonHelp to stdout and returns nullopt. Otherwise
// parses the flags with absl::ParseCommandLine (which exits with status 1
// and a message on an unknown or malformed flag) and returns what it
// returns: argv[0] and the positional arguments.
std::optional<std::vector<char*>> ParseDaemonCommandLine(int argc, char** argv,
                                                         std::string_view usage);

// "PROGRAM: USAGE", then one line per flag, sorted by name, with its help
// text: the program's flags (every flag not defined inside Abseil), or with
// `all` every flag.
void WriteDaemonHelp(std::ostream& out, std::string_view program, std::string_view usage, bool all);

}  // namespace netfold::config

#endif  // NETFOLD_CONFIG_COMMAND_LINE_H_
