// The TLS files of `netfold up` and `netfold certs` (tools/fabric_certificates.h):
// written private, never through a link planted in their place, one
// consistent set that a daemon reads back; a directory that holds a CA is
// not overwritten unless asked, and a bad host leaves nothing on disk.
#include "tools/fabric_certificates.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "auth/tls_files.h"
#include "gtest/gtest.h"

namespace netfold::tools {
namespace {

namespace fs = std::filesystem;

class FabricCertificatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fabric_certificates_test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  std::string tmp_;
};

TEST_F(FabricCertificatesTest, WritesOnePrivateSetAndReplacesAPlantedLink) {
  absl::StatusOr<StateDir> dir = StateDir::Open(tmp_ + "/tls", /*create=*/true);
  ASSERT_TRUE(dir.ok()) << dir.status();
  // Someone planted a link where the key goes: it must be replaced, and
  // what it points to left alone.
  const std::string victim = tmp_ + "/victim";
  std::ofstream(victim) << "untouched";
  ASSERT_EQ(symlink(victim.c_str(), dir->PathOf(auth::kTlsKeyFileName).c_str()), 0);

  absl::StatusOr<auth::FabricCertificates> certs = auth::MakeFabricCertificates({"10.0.0.7"});
  ASSERT_TRUE(certs.ok()) << certs.status();
  absl::StatusOr<std::vector<std::string>> names = WriteFabricCertificates(*dir, *certs);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_NE(std::find(names->begin(), names->end(), "IP:10.0.0.7"), names->end());

  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "untouched");
  for (const char* name : {auth::kTlsCaFileName, auth::kTlsCertFileName, auth::kTlsKeyFileName}) {
    struct stat st {};
    ASSERT_EQ(lstat(dir->PathOf(name).c_str(), &st), 0) << name;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << name;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
  }
  absl::StatusOr<auth::TlsFiles> read = auth::ReadTlsDir(dir->path());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->key_pem, certs->key_pem);
}

TEST_F(FabricCertificatesTest, ASetInPlaceIsKeptUnlessForcedAndABadHostWritesNothing) {
  const std::string out = tmp_ + "/out";
  ASSERT_TRUE(MakeCertsDirectory(out, {"node-1"}, 30, /*force=*/false).ok());
  struct stat st {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ifstream first_in(out + "/ca.pem");
  const std::string first((std::istreambuf_iterator<char>(first_in)),
                          std::istreambuf_iterator<char>());

  absl::Status again = MakeCertsDirectory(out, {}, 30, /*force=*/false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_NE(again.message().find("--force"), std::string::npos) << again;
  ASSERT_TRUE(MakeCertsDirectory(out, {}, 30, /*force=*/true).ok());
  std::ifstream second_in(out + "/ca.pem");
  const std::string second((std::istreambuf_iterator<char>(second_in)),
                           std::istreambuf_iterator<char>());
  EXPECT_NE(first, second);
  EXPECT_TRUE(auth::ReadTlsDir(out).ok());

  const std::string bad = tmp_ + "/bad";
  absl::Status s = MakeCertsDirectory(bad, {"10.0.0.1", "a,DNS:evil"}, 30, /*force=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(fs::exists(bad));
}

}  // namespace
}  // namespace netfold::tools
