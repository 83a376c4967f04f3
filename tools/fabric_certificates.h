// Writing a fabric's TLS files into a directory: `netfold up` does it for
// every fabric it starts, `netfold certs --out DIR --hosts ...` for a
// testbed of several machines (docs/operations.md, docs/security.md).
//
//   absl::StatusOr<StateDir> dir = StateDir::Open("/home/op/fabric-tls", /*create=*/true);
//   absl::StatusOr<std::vector<std::string>> names =
//       WriteFabricCertificates(*dir, *auth::MakeFabricCertificates({"10.0.0.1"}));
//   // names: "IP:127.0.0.1", ..., "IP:10.0.0.2" (what the certificate covers)
//
// Thread-compatible (writes files).
#ifndef NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_
#define NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auth/tls_certificates.h"
#include "tools/state_dir.h"

namespace netfold::tools {

// Writes `certs` (auth/tls_certificates.h MakeFabricCertificates) as
// ca.pem, server.pem and server.key into `dir` (each mode 0600, a new file
// renamed into place: StateDir::WriteFile), the key first and the CA last,
// so that a client never finds a CA whose server files are not there yet.
// Returns the names the server certificate covers; the errors of writing.
absl::StatusOr<std::vector<std::string>> WriteFabricCertificates(
    const StateDir& dir, const auth::FabricCertificates& certs);

// `netfold certs --out DIR`: opens (or makes, 0700) `dir` as a state
// directory is (tools/state_dir.h: refused if another user could have
// prepared it), refuses a directory that already holds a CA unless `force`,
// writes a new set valid for `days` and prints what goes where. A bad host
// (InvalidArgument) is found before anything is made on disk.
absl::Status MakeCertsDirectory(const std::string& dir, const std::vector<std::string>& hosts,
                                int days, bool force);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_FABRIC_CERTIFICATES_H_
