#include "auth/tls_files.h"

#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_format.h"
#include "auth/owned_file.h"
#include "auth/tls_certificates.h"
#include "base/status_macros.h"

namespace netfold::auth {
namespace {

constexpr size_t kMaxPemBytes = 64 * 1024;

constexpr OwnedFileRules kCertificateRules = {
    .what = "TLS certificate file",
    .secret = false,
    .exposure = "replace it and have clients trust their own server",
    .renew = "",
    .max_bytes = kMaxPemBytes,
};

constexpr OwnedFileRules kKeyRules = {
    .what = "TLS key file",
    .secret = true,
    .exposure = "pose as the fabric's manager or switches and read every credential sent",
    .renew = "make new certificates (netfold certs, or netfold up again)",
    .max_bytes = kMaxPemBytes,
};

absl::StatusOr<std::string> ReadCertificate(const std::string& path) {
  NETFOLD_ASSIGN_OR_RETURN(std::string pem, ReadOwnedFile(path, kCertificateRules));
  NETFOLD_RETURN_IF_ERROR(CheckCertificatePem(pem, "TLS certificate file " + path));
  return pem;
}

}  // namespace

absl::StatusOr<std::string> ReadTlsCaFile(const std::string& path) {
  return ReadCertificate(path);
}

absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir) {
  TlsFiles files;
  NETFOLD_ASSIGN_OR_RETURN(files.ca_pem, ReadCertificate(dir + "/" + kTlsCaFileName));
  NETFOLD_ASSIGN_OR_RETURN(files.cert_pem, ReadCertificate(dir + "/" + kTlsCertFileName));
  NETFOLD_ASSIGN_OR_RETURN(files.key_pem, ReadOwnedFile(dir + "/" + kTlsKeyFileName, kKeyRules));
  if (absl::Status s = CheckServerCertificate(files.ca_pem, files.cert_pem, files.key_pem);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "TLS directory %s: %s; make the three files again together (netfold certs)", dir,
        s.message()));
  }
  return files;
}

std::string DefaultTlsCaFile(const std::string& credential_file) {
  if (const char* f = std::getenv(kTlsCaEnv); f != nullptr && *f != '\0') return f;
  if (credential_file.empty()) return "";
  const size_t slash = credential_file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : credential_file.substr(0, slash);
  const std::string path = dir + "/" + kTlsCaFileName;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return path;  // ReadTlsCaFile judges it
  return "";
}

}  // namespace netfold::auth
