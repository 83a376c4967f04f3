// The fabric credential: one random secret per fabric, in a file only its
// owner can read, that every control-plane caller presents (switch
// registration, job calls, the manager's and the switches' admin calls;
// docs/security.md, "The control plane: who may call").
//
//   // netfold up, once per fabric:
//   absl::StatusOr<std::string> secret = CreateCredentialFile(state_dir + "/credential");
//   // a daemon or a client:
//   absl::StatusOr<std::string> secret = ReadCredentialFile(path);   // refuses mode 0644
//
// The secret is never taken from a command line (every user sees those in
// ps) nor from the environment itself: the environment names the file
// (NETFOLD_CREDENTIAL_FILE). Thread-safe (plain functions).
#ifndef NETFOLD_AUTH_FABRIC_CREDENTIAL_H_
#define NETFOLD_AUTH_FABRIC_CREDENTIAL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace netfold::auth {

// The environment variable that names a credential file.
inline constexpr char kCredentialFileEnv[] = "NETFOLD_CREDENTIAL_FILE";
// The file's name in the state directory of `netfold up`.
inline constexpr char kCredentialFileName[] = "credential";
// Random bytes in a credential CreateCredentialFile makes (written as hex).
inline constexpr size_t kCredentialBytes = 32;
// The longest credential a file may hold.
inline constexpr size_t kMaxCredentialBytes = 1024;

// Reads the credential in `path` (surrounding whitespace dropped). Refused,
// with a message that names the file and says what to do:
// - NotFound: no such file;
// - PermissionDenied: a symbolic link, not a regular file, owned by another
//   user, or readable or writable by group or others ("mode 0644: chmod 600");
// - InvalidArgument: empty, longer than kMaxCredentialBytes, or holding a
//   character outside printable ASCII (it travels as gRPC metadata).
absl::StatusOr<std::string> ReadCredentialFile(const std::string& path);

// Writes a new credential to `path`: kCredentialBytes from getrandom(2) as
// lower-case hex, mode 0600, replacing the file atomically (a temporary
// file renamed over it; a symbolic link at `path` is replaced, never
// followed). Returns the credential.
absl::StatusOr<std::string> CreateCredentialFile(const std::string& path);

// The credential file a client uses when it was given none: the file named
// by $NETFOLD_CREDENTIAL_FILE; else the one in $NETFOLD_STATE_DIR, else in
// /tmp/netfold-<uid> (the state directories of `netfold up`), if it exists;
// else "".
std::string DefaultCredentialFile();

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_FABRIC_CREDENTIAL_H_
