// Reading a file that netfold trusts: the fabric credential, a TLS key or
// the certificates a client trusts. Such a file is only as safe as the
// people who can write (or, for a secret, read) it, so it must be the
// user's own and private enough, and a symbolic link put in its place is
// refused rather than followed (docs/security.md).
//
//   absl::StatusOr<std::string> key = ReadOwnedFile(path, kTlsKeyRules);
//   // PermissionDenied: "TLS key file /x/server.key has mode 0644: ... (chmod 600 ...)"
//   NETFOLD_RETURN_IF_ERROR(WriteOwnedFile(path, pem));   // 0600, temp file + rename
//
// Thread-safe (plain functions).
#ifndef NETFOLD_AUTH_OWNED_FILE_H_
#define NETFOLD_AUTH_OWNED_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netfold::auth {

// What a file must be, and the words its refusals use.
struct OwnedFileRules {
  const char* what;  // "credential file", names the file in every message
  // A secret: no group or other permission bit at all (else only no group
  // or other write bit: a certificate may be readable by all).
  bool secret;
  // Who could do what with the file if others could write (or read) it:
  // "act as any switch or operator of the fabric".
  const char* exposure;
  // For a secret others may have read: what to do besides chmod
  // ("make a new secret").
  const char* renew;
  size_t max_bytes;
};

// The contents of `path`. Refused, with a message that names the file and
// says what to do:
// - NotFound: no such file;
// - PermissionDenied: a symbolic link, not a regular file, owned by another
//   user, or with a permission bit `rules` forbid ("mode 0644: chmod 600");
// - OutOfRange: longer than rules.max_bytes.
absl::StatusOr<std::string> ReadOwnedFile(const std::string& path, const OwnedFileRules& rules);

// Replaces `path` with `text`, mode 0600: written to `path`.tmp (created
// anew: a leftover or a symbolic link there is removed, never followed),
// fsync'd and renamed over `path`, so a symbolic link at `path` is
// replaced, never written through.
absl::Status WriteOwnedFile(const std::string& path, std::string_view text);

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_OWNED_FILE_H_
