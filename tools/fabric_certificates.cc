#include "tools/fabric_certificates.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auth/tls_files.h"
#include "base/status_macros.h"

namespace netfold::tools {

absl::StatusOr<std::vector<std::string>> WriteFabricCertificates(
    const StateDir& dir, const auth::FabricCertificates& certs) {
  NETFOLD_RETURN_IF_ERROR(dir.WriteFile(auth::kTlsKeyFileName, certs.key_pem));
  NETFOLD_RETURN_IF_ERROR(dir.WriteFile(auth::kTlsCertFileName, certs.cert_pem));
  NETFOLD_RETURN_IF_ERROR(dir.WriteFile(auth::kTlsCaFileName, certs.ca_pem));
  return auth::CertificateHosts(certs.cert_pem);
}

absl::Status MakeCertsDirectory(const std::string& path, const std::vector<std::string>& hosts,
                                int days, bool force) {
  // The certificates first: a bad host changes nothing on disk.
  NETFOLD_ASSIGN_OR_RETURN(auth::FabricCertificates certs,
                           auth::MakeFabricCertificates(hosts, absl::Hours(24) * days));
  NETFOLD_ASSIGN_OR_RETURN(StateDir dir, StateDir::Open(path, /*create=*/true));
  if (dir.Exists(auth::kTlsCaFileName) && !force) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s already holds a CA (%s): daemons and clients may use it; pass --force to replace "
        "the set, then copy the new files everywhere",
        dir.path(), auth::kTlsCaFileName));
  }
  NETFOLD_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           WriteFabricCertificates(dir, certs));
  absl::PrintF("netfold certs: a new CA and server certificate in %s, valid %d days\n",
               dir.path(), days);
  absl::PrintF("  the server certificate covers: %s\n", absl::StrJoin(names, " "));
  absl::PrintF("  %s: the CA, to every machine; clients find it with NETFOLD_TLS_CA (or beside\n"
               "    their NETFOLD_CREDENTIAL_FILE), daemons in their --tls_dir\n",
               dir.PathOf(auth::kTlsCaFileName));
  absl::PrintF("  %s, %s (mode 0600): to the manager's and the switches' machines,\n"
               "    which take the directory with --tls_dir (tls_dir: in a config)\n",
               dir.PathOf(auth::kTlsCertFileName), dir.PathOf(auth::kTlsKeyFileName));
  absl::PrintF("  the CA's key was not kept: to add a host, make a new set and copy it again\n");
  return absl::OkStatus();
}

}  // namespace netfold::tools
