// A fabric's own certificate authority, made with OpenSSL: one CA
// certificate that every client of the fabric trusts, and one server
// certificate (with its key) that the manager and the switches present on
// their gRPC ports (docs/security.md, "TLS on the control plane").
//
//   absl::StatusOr<FabricCertificates> certs =
//       MakeFabricCertificates({"10.0.0.1", "mgmt0.example"});
//   // certs->ca_pem: to every client (NETFOLD_TLS_CA);
//   // certs->cert_pem, certs->key_pem: to the daemons (--tls_dir).
//   NETFOLD_RETURN_IF_ERROR(CheckServerCertificate(ca, cert, key));  // at a daemon's start
//
// Keys are EC P-256 from OpenSSL's generator; certificates are X.509 v3,
// signed with ECDSA-SHA256. The server certificate names 127.0.0.1, ::1 and
// localhost and the hosts asked for (subjectAltName), which gRPC checks
// against the address a client dials. The CA's key signs once and is then
// dropped: it is never written anywhere, so nobody can make another
// certificate this fabric's clients trust; to add a host, make a new set.
// Thread-safe (plain functions; OpenSSL 3 is thread-safe).
#ifndef NETFOLD_AUTH_TLS_CERTIFICATES_H_
#define NETFOLD_AUTH_TLS_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netfold::auth {

// PEM texts.
struct FabricCertificates {
  std::string ca_pem;    // the CA certificate (public)
  std::string cert_pem;  // the server certificate (public)
  std::string key_pem;   // the server's private key (secret: mode 0600)
};

// How long the certificates of `netfold up` and `netfold certs` are valid.
inline constexpr absl::Duration kDefaultCertificateValidity = absl::Hours(24 * 365);
// The most host names or addresses a server certificate may list.
inline constexpr size_t kMaxCertificateHosts = 256;

// A new CA and a server certificate for `hosts` (IPv4 or IPv6 addresses, or
// DNS names of letters, digits, '-' and '.'), besides 127.0.0.1, ::1 and
// localhost, valid from an hour ago (clocks differ) for `validity`.
// InvalidArgument naming a host that is neither (or more than
// kMaxCertificateHosts); Internal with OpenSSL's reason if it fails.
absl::StatusOr<FabricCertificates> MakeFabricCertificates(
    const std::vector<std::string>& hosts, absl::Duration validity = kDefaultCertificateValidity);

// Checks, before a daemon serves with them, that `cert_pem` is a
// certificate signed by `ca_pem`'s key, valid now, and that `key_pem` is
// its private key. InvalidArgument saying which (a file from another set,
// an expired certificate), so that the mistake is found at start rather
// than as a failed handshake on every client.
absl::Status CheckServerCertificate(const std::string& ca_pem, const std::string& cert_pem,
                                    const std::string& key_pem);

// OK if `pem` holds a PEM certificate; else InvalidArgument naming `what`.
absl::Status CheckCertificatePem(const std::string& pem, const std::string& what);

// The subjectAltName entries of a PEM certificate ("IP:127.0.0.1",
// "DNS:localhost", ...), for tests and `netfold certs`' report.
absl::StatusOr<std::vector<std::string>> CertificateHosts(const std::string& cert_pem);

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_TLS_CERTIFICATES_H_
