#include "auth/fabric_credential.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "auth/owned_file.h"
#include "auth/secrets.h"
#include "base/status_macros.h"

namespace netfold::auth {

absl::StatusOr<std::string> ReadCredentialFile(const std::string& path) {
  static constexpr OwnedFileRules kRules = {
      .what = "credential file",
      .secret = true,
      .exposure = "act as any switch or operator of the fabric",
      .renew = "make a new secret",
      .max_bytes = kMaxCredentialBytes + 2,  // the secret and a line end
  };
  absl::StatusOr<std::string> text = ReadOwnedFile(path, kRules);
  if (absl::IsOutOfRange(text.status())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "credential file %s holds more than %d bytes", path, kMaxCredentialBytes));
  }
  if (!text.ok()) return text.status();
  const std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("credential file %s is empty", path));
  }
  if (secret.size() > kMaxCredentialBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "credential file %s holds more than %d bytes", path, kMaxCredentialBytes));
  }
  for (char c : secret) {
    if (c < '!' || c > '~') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "credential file %s holds a character that is not printable ASCII (or a space "
          "inside the secret)",
          path));
    }
  }
  return secret;
}

absl::StatusOr<std::string> CreateCredentialFile(const std::string& path) {
  const std::string secret = HexString(RandomBytes(kCredentialBytes));
  NETFOLD_RETURN_IF_ERROR(WriteOwnedFile(path, secret + "\n"));
  return secret;
}

std::string DefaultCredentialFile() {
  if (const char* f = std::getenv(kCredentialFileEnv); f != nullptr && *f != '\0') return f;
  std::string dir;
  if (const char* d = std::getenv("NETFOLD_STATE_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else {
    dir = absl::StrFormat("/tmp/netfold-%d", getuid());
  }
  const std::string path = dir + "/" + kCredentialFileName;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return path;  // ReadCredentialFile judges it
  return "";
}

}  // namespace netfold::auth
