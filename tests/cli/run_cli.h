// Running the netfold CLI from a test: its exit code, stdout and stderr
// (tools/run_command.h; stderr through a file in the test's temporary
// directory, removed after).
//
//   CliResult r = RunCli({NETFOLD_CLI, "demo", "--quick"}, absl::Seconds(120), "demo_test");
//   EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
#ifndef NETFOLD_TESTS_CLI_RUN_CLI_H_
#define NETFOLD_TESTS_CLI_RUN_CLI_H_

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tools/run_command.h"

namespace netfold {

struct CliResult {
  int exit_code = -1;  // -1: it could not run, or a signal ended it
  std::string out;
  std::string err;     // its stderr, after why it could not run if so
};

// The whole of file `path` ("" if it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` as an argument vector, stdin from /dev/null, within
// `timeout`; `tag` names its stderr file.
inline CliResult RunCli(const std::vector<std::string>& argv, absl::Duration timeout,
                        const std::string& tag) {
  const std::string err_path =
      absl::StrFormat("%s/%s.%d.err", ::testing::TempDir(), tag, getpid());
  std::remove(err_path.c_str());
  tools::CommandOptions options;
  options.timeout = timeout;
  options.stderr_path = err_path;
  CliResult r;
  absl::StatusOr<tools::CommandResult> run = tools::RunCommand(argv, options);
  if (run.ok()) {
    r.out = run->output;
    r.exit_code = run->exit_code;
  } else {
    r.err = run.status().ToString() + "\n";
  }
  r.err += ReadFile(err_path);
  std::remove(err_path.c_str());
  return r;
}

}  // namespace netfold

#endif  // NETFOLD_TESTS_CLI_RUN_CLI_H_
