// A daemon's command line on record (NAME.argv) and the signals `netfold
// kill` takes (tools/fabric_daemons.h); the commands themselves against
// real daemons: tests/cli/process_fault_command_test.cc.
#include "tools/fabric_daemons.h"

#include <signal.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

TEST(FabricDaemons, ACommandLineRoundTripsWithSpacesAndEmptyArguments) {
  const std::vector<std::string> argv = {"/usr/bin/netfold-switchd", "--name=leaf0,leaf1",
                                         "--log_level=info warn", ""};
  absl::StatusOr<std::vector<std::string>> back = ParseArgv(FormatArgv(argv));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, argv);
}

TEST(FabricDaemons, TextThatIsNotACommandLineIsRefused) {
  EXPECT_FALSE(ParseArgv("").ok());
  EXPECT_FALSE(ParseArgv(std::string("/bin/x", 6)).ok()) << "no NUL at the end";
  EXPECT_FALSE(ParseArgv(std::string("\0", 1)).ok()) << "an empty program";
  EXPECT_FALSE(ParseArgv(std::string("netfold-switchd\0", 16)).ok()) << "not a path";
}

TEST(FabricDaemons, SignalsByNameWithOrWithoutSigInAnyCase) {
  EXPECT_EQ(ParseSignalName("KILL").value_or(0), SIGKILL);
  EXPECT_EQ(ParseSignalName("sigterm").value_or(0), SIGTERM);
  EXPECT_EQ(ParseSignalName("Stop").value_or(0), SIGSTOP);
  EXPECT_EQ(ParseSignalName("SIGCONT").value_or(0), SIGCONT);
  absl::StatusOr<int> bad = ParseSignalName("HUP");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("KILL, TERM, STOP or CONT"));
  EXPECT_FALSE(ParseSignalName("9").ok());
}

}  // namespace
}  // namespace netfold::tools
