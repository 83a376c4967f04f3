#include "auth/tls_certificates.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "auth/grpc_credential.h"
#include "auth/owned_file.h"
#include "auth/tls_files.h"
#include "proto/control/netfold_control.grpc.pb.h"

namespace netfold::auth {
namespace {

namespace fs = std::filesystem;

bool Lists(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(TlsCertificatesTest, ServerCertificateChecksAgainstItsCaAndNamesTheHosts) {
  absl::StatusOr<FabricCertificates> c = MakeFabricCertificates({"10.1.2.3", "node-1.example"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ca_pem.rfind("-----BEGIN CERTIFICATE-----", 0), 0u);
  EXPECT_EQ(c->key_pem.rfind("-----BEGIN PRIVATE KEY-----", 0), 0u);
  EXPECT_TRUE(CheckServerCertificate(c->ca_pem, c->cert_pem, c->key_pem).ok());
  absl::StatusOr<std::vector<std::string>> hosts = CertificateHosts(c->cert_pem);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  for (const char* h : {"IP:127.0.0.1", "IP:::1", "DNS:localhost", "IP:10.1.2.3",
                        "DNS:node-1.example"}) {
    EXPECT_TRUE(Lists(*hosts, h)) << h;
  }
  EXPECT_EQ(hosts->size(), 5u);
  // The CA names nobody: it is not a server.
  EXPECT_TRUE(CertificateHosts(c->ca_pem)->empty());
}

TEST(TlsCertificatesTest, FilesOfTwoSetsDoNotCheck) {
  absl::StatusOr<FabricCertificates> a = MakeFabricCertificates({});
  absl::StatusOr<FabricCertificates> b = MakeFabricCertificates({});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->ca_pem, b->ca_pem);
  absl::Status wrong_ca = CheckServerCertificate(b->ca_pem, a->cert_pem, a->key_pem);
  EXPECT_EQ(wrong_ca.code(), absl::StatusCode::kInvalidArgument) << wrong_ca;
  EXPECT_NE(wrong_ca.message().find("does not check against the CA"), std::string::npos);
  absl::Status wrong_key = CheckServerCertificate(a->ca_pem, a->cert_pem, b->key_pem);
  EXPECT_EQ(wrong_key.code(), absl::StatusCode::kInvalidArgument) << wrong_key;
  // A server certificate is no CA: it cannot vouch for itself.
  EXPECT_FALSE(CheckServerCertificate(a->cert_pem, a->cert_pem, a->key_pem).ok());
  EXPECT_EQ(CheckServerCertificate("junk", a->cert_pem, a->key_pem).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckServerCertificate(a->ca_pem, a->cert_pem, "junk").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TlsCertificatesTest, HostsThatAreNeitherAddressesNorNamesAreRefused) {
  for (const char* bad : {"", "a,DNS:evil.example", "IP:1.2.3.4", "-x", "host name", "x:1"}) {
    absl::StatusOr<FabricCertificates> c = MakeFabricCertificates({bad});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(MakeFabricCertificates({"fe80::1", "192.168.0.1"}).ok());
  EXPECT_FALSE(MakeFabricCertificates({}, absl::ZeroDuration()).ok());
}

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tls-files-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<FabricCertificates> c = MakeFabricCertificates({});
    ASSERT_TRUE(c.ok()) << c.status();
    certs_ = *c;
    ASSERT_TRUE(WriteOwnedFile(Path(kTlsCaFileName), certs_.ca_pem).ok());
    ASSERT_TRUE(WriteOwnedFile(Path(kTlsCertFileName), certs_.cert_pem).ok());
    ASSERT_TRUE(WriteOwnedFile(Path(kTlsKeyFileName), certs_.key_pem).ok());
  }
  void TearDown() override {
    unsetenv(kTlsCaEnv);
    fs::remove_all(dir_);
  }
  std::string Path(const char* name) const { return dir_ + "/" + name; }

  std::string dir_;
  FabricCertificates certs_;
};

TEST_F(TlsFilesTest, ADirectoryOfOneSetReads) {
  struct stat st {};
  ASSERT_EQ(stat(Path(kTlsKeyFileName).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<TlsFiles> files = ReadTlsDir(dir_);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->key_pem, certs_.key_pem);
  // Certificates are public: readable by others is fine, writable is not.
  ASSERT_EQ(chmod(Path(kTlsCaFileName).c_str(), 0644), 0);
  EXPECT_TRUE(ReadTlsDir(dir_).ok());
  ASSERT_EQ(chmod(Path(kTlsCaFileName).c_str(), 0664), 0);
  absl::StatusOr<std::string> ca = ReadTlsCaFile(Path(kTlsCaFileName));
  EXPECT_EQ(ca.status().code(), absl::StatusCode::kPermissionDenied) << ca.status();
  EXPECT_NE(ca.status().message().find("mode 0664"), std::string::npos) << ca.status();
}

TEST_F(TlsFilesTest, AKeyOthersCanReadIsRefusedWithTheFix) {
  ASSERT_EQ(chmod(Path(kTlsKeyFileName).c_str(), 0644), 0);
  absl::StatusOr<TlsFiles> files = ReadTlsDir(dir_);
  EXPECT_EQ(files.status().code(), absl::StatusCode::kPermissionDenied) << files.status();
  const std::string m(files.status().message());
  EXPECT_NE(m.find("TLS key file " + Path(kTlsKeyFileName)), std::string::npos) << m;
  EXPECT_NE(m.find("mode 0644"), std::string::npos) << m;
  EXPECT_NE(m.find("chmod 600"), std::string::npos) << m;
}

TEST_F(TlsFilesTest, LinksMissingFilesAndMixedSetsAreRefused) {
  const std::string key = Path(kTlsKeyFileName);
  ASSERT_EQ(rename(key.c_str(), (key + ".real").c_str()), 0);
  EXPECT_EQ(ReadTlsDir(dir_).status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(symlink((key + ".real").c_str(), key.c_str()), 0);
  absl::StatusOr<TlsFiles> linked = ReadTlsDir(dir_);
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kPermissionDenied) << linked.status();
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos);
  ASSERT_EQ(unlink(key.c_str()), 0);
  absl::StatusOr<FabricCertificates> other = MakeFabricCertificates({});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(WriteOwnedFile(key, other->key_pem).ok());
  absl::StatusOr<TlsFiles> mixed = ReadTlsDir(dir_);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument) << mixed.status();
  ASSERT_TRUE(WriteOwnedFile(Path(kTlsCaFileName), "not a certificate\n").ok());
  EXPECT_EQ(ReadTlsCaFile(Path(kTlsCaFileName)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsFilesTest, ClientsFindTheCaBesideTheCredentialUnlessTheEnvironmentNamesOne) {
  unsetenv(kTlsCaEnv);
  EXPECT_EQ(DefaultTlsCaFile(dir_ + "/credential"), Path(kTlsCaFileName));
  EXPECT_EQ(DefaultTlsCaFile(dir_ + "/sub/credential"), "");
  EXPECT_EQ(DefaultTlsCaFile(""), "");
  setenv(kTlsCaEnv, "/some/ca.pem", 1);
  EXPECT_EQ(DefaultTlsCaFile(dir_ + "/credential"), "/some/ca.pem");
}

// A server with the fabric's certificate, and clients that trust the
// fabric's CA, another CA, or none.
class Answer final : public control::Admin::Service {
  grpc::Status GetStatus(grpc::ServerContext*, const control::GetStatusRequest*,
                         control::GetStatusResponse*) override {
    return grpc::Status::OK;
  }
};

grpc::Status Call(const std::string& address, const ClientAuth& auth,
                  const grpc::ChannelArguments& args = {}) {
  auto stub = control::Admin::NewStub(CreateChannel(address, auth, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  control::GetStatusResponse r;
  return stub->GetStatus(&ctx, control::GetStatusRequest(), &r);
}

TEST(TlsChannelTest, OnlyAClientTrustingTheFabricsCaForTheAddressItDialsGetsThrough) {
  absl::StatusOr<FabricCertificates> fabric = MakeFabricCertificates({});
  absl::StatusOr<FabricCertificates> other = MakeFabricCertificates({});
  ASSERT_TRUE(fabric.ok() && other.ok());
  const TlsFiles tls{fabric->ca_pem, fabric->cert_pem, fabric->key_pem};
  Answer service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ServerCredentials(&tls), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  const std::string ip = absl::StrFormat("127.0.0.1:%d", port);

  grpc::Status ok = Call(ip, {.credential = "", .tls_ca_pem = fabric->ca_pem});
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_TRUE(Call(absl::StrFormat("localhost:%d", port), {"", fabric->ca_pem}).ok());

  grpc::Status foreign = Call(ip, {"", other->ca_pem});
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::UNAVAILABLE) << foreign.error_message();
  grpc::Status plain = Call(ip, {"", ""});
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // The right CA, but a name the certificate does not list.
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("elsewhere.example");
  grpc::Status name = Call(ip, {"", fabric->ca_pem}, args);
  EXPECT_EQ(name.error_code(), grpc::StatusCode::UNAVAILABLE) << name.error_message();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace
}  // namespace netfold::auth
