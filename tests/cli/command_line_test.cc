// The manners of netfold's three command lines, run as a user runs them:
// `--help` (and `netfold help [COMMAND]`, `netfold COMMAND --help`) prints
// the usage to stdout and exits 0; an unknown command or option exits
// non-zero with a message on stderr; `netfold completion bash` completes
// commands, options and their values in a real bash.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `command_line` with /bin/sh, stdin from /dev/null.
Result RunShell(const std::string& command_line) {
  const std::string err_path =
      absl::StrFormat("%s/command_line_test.%d.err", ::testing::TempDir(), getpid());
  const std::string shell = absl::StrFormat("%s </dev/null 2>'%s'", command_line, err_path);
  Result r;
  FILE* p = popen(shell.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream s;
  s << err.rdbuf();
  r.err = s.str();
  std::remove(err_path.c_str());
  return r;
}

std::string Netfold(const std::string& args) {
  return absl::StrFormat("'%s' %s", NETFOLD_CLI, args);
}

const char* const kCommands[] = {"demo",  "up",      "down",  "status", "explain",    "fault",
                                 "kill",  "restart", "bench", "help",   "completion"};

TEST(Netfold, HelpPrintsTheUsageAndExitsZero) {
  for (const char* args : {"--help", "-h", "help"}) {
    const Result r = RunShell(Netfold(args));
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
    EXPECT_THAT(r.out, StartsWith("usage: netfold COMMAND [options]")) << args;
    for (const char* command : kCommands) EXPECT_THAT(r.out, HasSubstr(command)) << args;
    EXPECT_THAT(r.err, IsEmpty()) << args;
  }
}

TEST(Netfold, EveryCommandHasItsOwnHelp) {
  for (const char* command : kCommands) {
    const Result help = RunShell(Netfold(absl::StrFormat("help %s", command)));
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
    EXPECT_THAT(help.out, StartsWith(absl::StrFormat("usage: netfold %s", command)));
    // The same from the command itself, wherever --help (or -h) stands.
    for (const char* form : {"%s --help", "%s -h", "%s x --help"}) {
      const std::string args = absl::StrFormat(form, command);
      const Result r = RunShell(Netfold(args));
      EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
      EXPECT_EQ(r.out, help.out) << args;
      EXPECT_THAT(r.err, IsEmpty()) << args;
    }
  }
}

TEST(Netfold, MistakesExitNonZeroWithAMessage) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c :
       {Case{"", "usage: netfold COMMAND"}, Case{"nosuch", "unknown command 'nosuch'"},
        Case{"demo --bogus", "unknown option --bogus"}, Case{"demo --bogus", "netfold demo --help"},
        Case{"up --hosts", "--hosts needs a value"}, Case{"help nosuch", "no command 'nosuch'"},
        Case{"fault leaf0", "give SWITCH and IMPAIRMENT"},
        Case{"kill", "give the daemon"}, Case{"restart", "give the daemon"},
        Case{"kill leaf0 --signal HUP", "use KILL, TERM, STOP or CONT"},
        Case{"restart leaf0 --timeout 0", "--timeout: seconds"},
        Case{"completion zsh", "netfold completion bash"}}) {
    const Result r = RunShell(Netfold(c.args));
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(r.out, IsEmpty()) << c.args;
  }
}

// What bash completes for the words of `line` (the last one being typed).
std::string Complete(const std::string& script, const std::string& line) {
  const std::string program = absl::StrFormat(
      "source '%s'; COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
      "[[ '%s' == *' ' ]] && COMP_WORDS+=('') && COMP_CWORD=$((COMP_CWORD + 1)); "
      "_netfold; echo \"${COMPREPLY[*]}\"",
      script, line, line);
  const Result r = RunShell(absl::StrFormat("bash -c '%s'", [&] {
    std::string quoted;
    for (char ch : program) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return quoted;
  }()));
  EXPECT_EQ(r.exit_code, 0) << line << ": " << r.err;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(Netfold, BashCompletionCompletes) {
  if (system("command -v bash >/dev/null 2>&1") != 0) GTEST_SKIP() << "no bash";
  const Result r = RunShell(Netfold("completion bash"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("complete -F _netfold netfold"));
  const std::string script = ::testing::TempDir() + "/netfold_completion.bash";
  {
    std::ofstream out(script);
    out << r.out;
  }
  EXPECT_EQ(Complete(script, "netfold fa"), "fault");
  EXPECT_EQ(Complete(script, "netfold st"), "status");
  EXPECT_EQ(Complete(script, "netfold ex"), "explain");
  EXPECT_EQ(Complete(script, "netfold explain --job 3 --ra"), "--ranks");
  EXPECT_EQ(Complete(script, "netfold explain --job 3 --pl"), "--plane");
  EXPECT_EQ(Complete(script, "netfold up --plan"), "--planes");
  EXPECT_EQ(Complete(script, "netfold fault leaf0 --di"), "--direction");
  EXPECT_EQ(Complete(script, "netfold fault leaf0 --direction s"), "send");
  EXPECT_EQ(Complete(script, "netfold bench all"), "allreduce allgather allreduce_in_place");
  EXPECT_EQ(Complete(script, "netfold bench reduce_"), "reduce_scatter reduce_in_place");
  EXPECT_EQ(Complete(script, "netfold help comp"), "completion");
  EXPECT_EQ(Complete(script, "netfold demo --hosts "), "");  // a number: nothing to offer
  std::remove(script.c_str());
}

TEST(Daemons, HelpPrintsTheUsageAndTheirFlagsAndExitsZero) {
  struct Daemon {
    const char* path;
    const char* name;
    const char* flag;
  };
  for (const Daemon& d : {Daemon{NETFOLD_SWITCHD, "netfold-switchd", "--data_address"},
                          Daemon{NETFOLD_MANAGERD, "netfold-managerd", "--topology"}}) {
    for (const char* help : {"--help", "-h", "--helpshort"}) {
      const Result r = RunShell(absl::StrFormat("'%s' %s", d.path, help));
      EXPECT_EQ(r.exit_code, 0) << d.name << " " << help << ": " << r.err;
      EXPECT_THAT(r.out, StartsWith(absl::StrFormat("%s: ", d.name)));
      EXPECT_THAT(r.out, HasSubstr(d.flag)) << d.name;
      EXPECT_THAT(r.out, HasSubstr("--config")) << d.name;
      EXPECT_THAT(r.out, Not(HasSubstr("--flagfile"))) << d.name << ": Abseil's own flags";
      EXPECT_THAT(r.err, IsEmpty()) << d.name;
    }
    const Result full = RunShell(absl::StrFormat("'%s' --helpfull", d.path));
    EXPECT_EQ(full.exit_code, 0) << d.name;
    EXPECT_THAT(full.out, HasSubstr("--flagfile")) << d.name;
    const Result bad = RunShell(absl::StrFormat("'%s' --no_such_flag=1", d.path));
    EXPECT_NE(bad.exit_code, 0) << d.name;
    EXPECT_THAT(bad.err, HasSubstr("no_such_flag")) << d.name;
  }
}

}  // namespace
}  // namespace netfold
