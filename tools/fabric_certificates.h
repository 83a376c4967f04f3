// Writing a fabric's TLS files into a directory: `netfold up` does it for
// every fabric it starts, `netfold certs --out DIR --hosts ...` for a
// testbed of several machines (docs/operations.md, docs/security.md).
//
//   absl::StatusOr<StateDir> dir = StateDir::Open("/home/op/fabric-tls", /*create=*/true);
//   absl::StatusOr<std::vector<std::string>> names =
//       WriteFabricCertificates(*dir, {"10.0.0.1", "10.0.0.2"});
//   // names: "IP:127.0.0.1", ..., "IP:10.0.0.2" (what the certificate covers)
//
// Thread-compatible (writes files).
#ifndef NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_
#define NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "auth/tls_certificates.h"
#include "tools/state_dir.h"

namespace netfold::tools {

// Makes a new CA and server certificate for `hosts` (auth/tls_certificates.h)
// and writes ca.pem, server.pem and server.key into `dir` (each mode 0600,
// a new file renamed into place: StateDir::WriteFile), the key first and
// the CA last, so that a client never finds a CA whose server files are
// not there yet. Returns the names the server certificate covers.
// InvalidArgument for a bad host; the errors of writing otherwise.
absl::StatusOr<std::vector<std::string>> WriteFabricCertificates(
    const StateDir& dir, const std::vector<std::string>& hosts,
    absl::Duration validity = auth::kDefaultCertificateValidity);

// `netfold certs --out DIR`: opens (or makes, 0700) `dir` as a state
// directory is (tools/state_dir.h: refused if another user could have
// prepared it), refuses a directory that already holds a CA unless `force`,
// writes the files valid for `days` and prints what goes where.
absl::Status MakeCertsDirectory(const std::string& dir, const std::vector<std::string>& hosts,
                                int days, bool force);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_
