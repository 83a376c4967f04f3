// Secrets: random keys from the kernel's CSPRNG and a comparison that
// does not leak, through its timing, how much of a guess was right.
//
//   std::string key = RandomBytes(16);
//   if (!ConstantTimeEquals(presented, key)) return absl::PermissionDeniedError(...);
//
// Thread-safe.
#ifndef NETFOLD_AUTH_SECRETS_H_
#define NETFOLD_AUTH_SECRETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace netfold::auth {

// `n` bytes from getrandom(2). Aborts if the kernel cannot provide them
// (there is no safe fallback for a secret).
std::string RandomBytes(size_t n);
uint64_t RandomU64();

// True iff a == b; the time taken depends only on the lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Lower-case hex, for logs of non-secret ids.
std::string HexString(std::string_view bytes);

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_SECRETS_H_
