#include "auth/fabric_credential.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace netfold::auth {
namespace {

namespace fs = std::filesystem;

class FabricCredentialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "credential-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  std::string dir_;
};

TEST_F(FabricCredentialTest, CreatedFileIsPrivateAndReadsBack) {
  const std::string path = dir_ + "/credential";
  absl::StatusOr<std::string> made = CreateCredentialFile(path);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->size(), 2 * kCredentialBytes);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  absl::StatusOr<std::string> read = ReadCredentialFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *made);
  // A second fabric gets another secret.
  absl::StatusOr<std::string> again = CreateCredentialFile(path);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, *made);
}

// Issue 23, item 3: a secret others can read is no secret.
TEST_F(FabricCredentialTest, FileReadableByOthersIsRefusedWithTheFix) {
  const std::string path = Write("credential", "abcdef\n", 0644);
  absl::StatusOr<std::string> read = ReadCredentialFile(path);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kPermissionDenied) << read.status();
  EXPECT_NE(read.status().message().find("mode 0644"), std::string::npos) << read.status();
  EXPECT_NE(read.status().message().find("chmod 600 " + path), std::string::npos);
  EXPECT_EQ(ReadCredentialFile(Write("g", "abcdef", 0640)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadCredentialFile(Write("w", "abcdef", 0602)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(ReadCredentialFile(Write("ok", "abcdef", 0400)).ok());
}

TEST_F(FabricCredentialTest, LinksEmptyFilesAndControlCharactersAreRefused) {
  const std::string target = Write("target", "abcdef", 0600);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(ReadCredentialFile(link).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadCredentialFile(dir_).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadCredentialFile(dir_ + "/absent").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadCredentialFile(Write("empty", " \n", 0600)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCredentialFile(Write("space", "ab cd", 0600)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCredentialFile(Write("long", std::string(2000, 'a'), 0600)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FabricCredentialTest, CreateReplacesALinkInsteadOfFollowingIt) {
  const std::string target = Write("elsewhere", "keep", 0600);
  const std::string path = dir_ + "/credential";
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  ASSERT_TRUE(CreateCredentialFile(path).ok());
  std::ifstream in(target);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep");
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(FabricCredentialTest, DefaultFileComesFromTheEnvironmentThenTheStateDirectory) {
  const char* saved_file = std::getenv(kCredentialFileEnv);
  const char* saved_dir = std::getenv("NETFOLD_STATE_DIR");
  const std::string old_file = saved_file ? saved_file : "";
  const std::string old_dir = saved_dir ? saved_dir : "";
  setenv(kCredentialFileEnv, "/some/file", 1);
  EXPECT_EQ(DefaultCredentialFile(), "/some/file");
  unsetenv(kCredentialFileEnv);
  setenv("NETFOLD_STATE_DIR", dir_.c_str(), 1);
  EXPECT_EQ(DefaultCredentialFile(), "");
  ASSERT_TRUE(CreateCredentialFile(dir_ + "/credential").ok());
  EXPECT_EQ(DefaultCredentialFile(), dir_ + "/credential");
  if (saved_file) setenv(kCredentialFileEnv, old_file.c_str(), 1);
  if (saved_dir) {
    setenv("NETFOLD_STATE_DIR", old_dir.c_str(), 1);
  } else {
    unsetenv("NETFOLD_STATE_DIR");
  }
}

}  // namespace
}  // namespace netfold::auth
