// Where a fabric's TLS files are and how they are read (docs/security.md,
// "TLS on the control plane"). A daemon reads a TLS directory holding the
// CA certificate, its server certificate and the server key; a client
// reads the CA certificate alone.
//
//   // a daemon (--tls_dir, tls_dir:):
//   absl::StatusOr<TlsFiles> tls = ReadTlsDir("/etc/netfold/tls");
//   // a client: NETFOLD_TLS_CA, else the ca.pem beside the credential file
//   std::string ca_file = DefaultTlsCaFile(credential_file);
//   absl::StatusOr<std::string> ca = ReadTlsCaFile(ca_file);
//
// The files follow the credential's rules (auth/owned_file.h): the user's
// own, never through a symbolic link; the key readable by nobody else
// (mode 0600), a certificate writable by nobody else. Thread-safe.
#ifndef NETFOLD_AUTH_TLS_FILES_H_
#define NETFOLD_AUTH_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace netfold::auth {

// The environment variable that names a client's CA certificate file.
inline constexpr char kTlsCaEnv[] = "NETFOLD_TLS_CA";
// The files of a TLS directory (`netfold up`'s state directory is one;
// `netfold certs --out DIR` makes one).
inline constexpr char kTlsCaFileName[] = "ca.pem";
inline constexpr char kTlsCertFileName[] = "server.pem";
inline constexpr char kTlsKeyFileName[] = "server.key";

// What a daemon serves with, in PEM.
struct TlsFiles {
  std::string ca_pem;    // to check the servers it calls (a switch: the manager)
  std::string cert_pem;  // presented on its own port
  std::string key_pem;
};

// The CA certificate in `path`: NotFound, PermissionDenied (a symbolic link,
// another user's file, writable by group or others) or InvalidArgument (not
// a PEM certificate), each naming the file.
absl::StatusOr<std::string> ReadTlsCaFile(const std::string& path);

// The three files of `dir`, each by the rules above (the key: mode 0600),
// and checked together (auth/tls_certificates.h CheckServerCertificate):
// errors name the file and say what to do.
absl::StatusOr<TlsFiles> ReadTlsDir(const std::string& dir);

// The CA file a client uses when it was given none: the file named by
// $NETFOLD_TLS_CA; else the ca.pem in the directory of `credential_file`
// (netfold up and netfold-testbed put both in their state directory), if
// it exists; else "" (the fabric runs in plaintext).
std::string DefaultTlsCaFile(const std::string& credential_file);

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_TLS_FILES_H_
