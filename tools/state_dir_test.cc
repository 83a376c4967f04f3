// StateDir (tools/state_dir.h): a state directory another user could have
// prepared is refused with its path and owner; files in it are never
// written or read through a symlink.
#include "tools/state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uid_t kNobody = 65534;

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "state_dir_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static mode_t Mode(const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  }
  std::string tmp_;
};

TEST_F(StateDirTest, MakesAMissingDirectory0700) {
  const std::string path = tmp_ + "/state";
  absl::StatusOr<StateDir> d = StateDir::Open(path, /*create=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->path(), path);
  EXPECT_EQ(Mode(path), 0700u);
  // Opening it again is fine; without `create` a missing one is NotFound.
  EXPECT_TRUE(StateDir::Open(path, true).ok());
  EXPECT_EQ(StateDir::Open(tmp_ + "/none", false).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StateDirTest, RefusesADirectoryThatIsASymlink) {
  ASSERT_TRUE(fs::create_directory(tmp_ + "/real"));
  ASSERT_EQ(chmod((tmp_ + "/real").c_str(), 0700), 0);
  ASSERT_EQ(symlink((tmp_ + "/real").c_str(), (tmp_ + "/link").c_str()), 0);
  absl::StatusOr<StateDir> d = StateDir::Open(tmp_ + "/link", /*create=*/true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr(tmp_ + "/link"));
  EXPECT_THAT(d.status().message(), HasSubstr("is a symlink"));
}

TEST_F(StateDirTest, RefusesAPathThroughAnotherUsersSymlink) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to make a symlink owned by another user";
  ASSERT_TRUE(fs::create_directories(tmp_ + "/real/state"));
  ASSERT_EQ(chmod((tmp_ + "/real/state").c_str(), 0700), 0);
  ASSERT_EQ(symlink((tmp_ + "/real").c_str(), (tmp_ + "/planted").c_str()), 0);
  ASSERT_EQ(lchown((tmp_ + "/planted").c_str(), kNobody, kNobody), 0);
  absl::StatusOr<StateDir> d = StateDir::Open(tmp_ + "/planted/state", /*create=*/true);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("reached through the symlink " + tmp_ + "/planted"));
  EXPECT_THAT(d.status().message(), HasSubstr("uid 65534"));
  // The same through a symlink of our own is our choice.
  ASSERT_EQ(lchown((tmp_ + "/planted").c_str(), getuid(), getgid()), 0);
  EXPECT_TRUE(StateDir::Open(tmp_ + "/planted/state", true).ok());
}

TEST_F(StateDirTest, RefusesADirectoryOwnedByAnotherUser) {
  std::string path = "/etc";  // root's, when this test is not root
  if (getuid() == 0) {
    path = tmp_ + "/theirs";
    ASSERT_TRUE(fs::create_directory(path));
    ASSERT_EQ(chmod(path.c_str(), 0755), 0);
    ASSERT_EQ(chown(path.c_str(), kNobody, kNobody), 0);
  }
  absl::StatusOr<StateDir> d = StateDir::Open(path, /*create=*/true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr(path));
  EXPECT_THAT(d.status().message(), HasSubstr("is owned by"));
  EXPECT_THAT(d.status().message(), HasSubstr(getuid() == 0 ? "uid 65534" : "uid 0"));
}

TEST_F(StateDirTest, RefusesADirectoryOthersMayWrite) {
  for (mode_t mode : {0777, 0770, 01777, 0702}) {
    const std::string path = tmp_ + "/open" + std::to_string(mode);
    ASSERT_TRUE(fs::create_directory(path));
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    absl::StatusOr<StateDir> d = StateDir::Open(path, /*create=*/true);
    ASSERT_FALSE(d.ok()) << std::oct << mode;
    EXPECT_THAT(d.status().message(), HasSubstr("lets other users write")) << std::oct << mode;
  }
  // Readable by others is not a way in.
  ASSERT_TRUE(fs::create_directory(tmp_ + "/readable"));
  ASSERT_EQ(chmod((tmp_ + "/readable").c_str(), 0755), 0);
  EXPECT_TRUE(StateDir::Open(tmp_ + "/readable", true).ok());
}

TEST_F(StateDirTest, WriteFileReplacesASymlinkInsteadOfWritingThroughIt) {
  absl::StatusOr<StateDir> d = StateDir::Open(tmp_ + "/state", true);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string outside = tmp_ + "/outside";
  std::ofstream(outside) << "precious\n";
  ASSERT_EQ(symlink(outside.c_str(), d->PathOf("manager.yaml").c_str()), 0);
  ASSERT_TRUE(d->WriteFile("manager.yaml", "listen: x\n").ok());
  EXPECT_EQ(Slurp(outside), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat(d->PathOf("manager.yaml").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(*d->ReadFile("manager.yaml"), "listen: x\n");
  // A log: a new file, also when a symlink was planted under its name.
  ASSERT_EQ(symlink(outside.c_str(), d->PathOf("leaf0.log").c_str()), 0);
  absl::StatusOr<int> fd = d->CreateFile("leaf0.log");
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_EQ(write(*fd, "log\n", 4), 4);
  close(*fd);
  EXPECT_EQ(Slurp(outside), "precious\n");
  EXPECT_EQ(*d->ReadFile("leaf0.log"), "log\n");
}

TEST_F(StateDirTest, RenameMovesAFileAndAMissingOneIsNoError) {
  absl::StatusOr<StateDir> dir = StateDir::Open(tmp_ + "/s", /*create=*/true);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_TRUE(dir->WriteFile("leaf0.log", "first\n").ok());
  ASSERT_TRUE(dir->WriteFile("leaf0.log.1", "older\n").ok());
  ASSERT_TRUE(dir->Rename("leaf0.log", "leaf0.log.1").ok());
  EXPECT_FALSE(dir->Exists("leaf0.log"));
  EXPECT_EQ(dir->ReadFile("leaf0.log.1").value_or(""), "first\n");
  EXPECT_TRUE(dir->Rename("leaf0.log", "leaf0.log.1").ok());
  EXPECT_EQ(dir->ReadFile("leaf0.log.1").value_or(""), "first\n");
  EXPECT_TRUE(absl::IsInvalidArgument(dir->Rename("../x", "y")));
}

TEST_F(StateDirTest, ReadFileRefusesSymlinksAndOddFiles) {
  absl::StatusOr<StateDir> d = StateDir::Open(tmp_ + "/state", true);
  ASSERT_TRUE(d.ok()) << d.status();
  std::ofstream(tmp_ + "/outside") << "127.6.6.6:1\n";
  ASSERT_EQ(symlink((tmp_ + "/outside").c_str(), d->PathOf("manager.address").c_str()), 0);
  absl::StatusOr<std::string> text = d->ReadFile("manager.address");
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("symlink"));
  ASSERT_EQ(mkfifo(d->PathOf("fabric.pids").c_str(), 0600), 0);
  EXPECT_FALSE(d->ReadFile("fabric.pids").ok());  // and does not block
  EXPECT_EQ(d->ReadFile("absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(d->ReadFile("../outside").ok());
}

}  // namespace
}  // namespace netfold::tools
