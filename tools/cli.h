// The framework of the netfold command line: the table of commands, the
// option parser, the usage texts, the exit on errors and the bash completion
// script. The verbs themselves (demo, up, status, ...) and the table that
// lists them live in netfold_main.cc; everything here reads that table
// (Commands()), so that the usage, `netfold help COMMAND`, the parser and
// `netfold completion bash` cannot disagree.
//
//   int Down(int argc, char** argv) {
//     Args args = Args::Parse(argc, argv, *FindCommand("down"));
//     if (!args.error.empty()) return FailUsage("down", args.error);
//     const std::string dir = args.Get("state-dir", LocalFabric::DefaultStateDir());
//     ...
//   }
//
// The functions return new strings and keep no state of their own; they are
// thread-safe as long as the table is (it is built once, then only read).
#ifndef NETFOLD_TOOLS_CLI_H_
#define NETFOLD_TOOLS_CLI_H_

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace netfold::tools {

// A command of the CLI: its usage and help, the options its parser accepts
// and what completes its first argument. The usage, `netfold help COMMAND`,
// the parser and `netfold completion bash` all read the table (Commands()),
// so that they cannot disagree.
struct Command {
  std::string_view name;
  std::string_view synopsis;        // what follows "netfold NAME"
  std::string_view summary;         // its lines under the name in the usage
  std::vector<std::string> flags;   // --flag
  std::vector<std::string> valued;  // --key VALUE (and --log-level, common to all)
  size_t max_positional = 0;
  std::vector<std::string> words;  // the choices of the first argument
  int (*run)(int argc, char** argv) = nullptr;
};

// Every command, in the order of the usage; defined in netfold_main.cc,
// after the commands. The table is built on the first call and never freed.
const std::vector<Command>& Commands();

// The command called `name` in the table, or nullptr if there is none. The
// pointer stays valid for the life of the process.
const Command* FindCommand(std::string_view name);

// The usage of the whole CLI: every command with its summary, then the
// options common to all.
std::string Usage();

// The usage of one command, as `netfold help COMMAND` and
// `netfold COMMAND --help` print it.
std::string CommandUsage(const Command& c);

// --key=value / --key value / --flag, after the command, and up to
// the command's max_positional plain arguments among them (in `positional`).
struct Args {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  std::string error;

  // The arguments after argv[1] (the command's name), parsed with the
  // options of `command`. On a command line it cannot parse, `error` says
  // why and the rest is what was parsed before it.
  static Args Parse(int argc, char** argv, const Command& command);
  bool Has(const std::string& k) const { return values.count(k) > 0; }
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
  }
};

// Prints "netfold: MESSAGE" on stderr and returns 2, the exit status of an
// error.
int Fail(const std::string& message);

// A command line the command cannot parse: the error, and where the usage is.
int FailUsage(std::string_view command, const std::string& message);

// The path of this executable (argv0 if /proc/self/exe cannot be read), for
// the commands that start copies of it.
std::string SelfPath(const char* argv0);

// Sets the log level of --log-level, the option common to all commands; an
// unknown level leaves it as it was.
void ApplyLogLevel(const Args& args);

// The bash completion script, from the command table.
std::string BashCompletion();

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_CLI_H_
