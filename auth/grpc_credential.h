// The fabric credential on gRPC: a client channel that presents it on every
// call, and the server-side check of it (docs/security.md, "The control
// plane: who may call").
//
//   // client (switchd's agent, libnetfold, the netfold CLI):
//   std::shared_ptr<grpc::Channel> channel = CreateChannel(address, secret);
//   // server handler:
//   CredentialVerifier verifier(secret);           // "" = anyone (auth: none)
//   if (grpc::Status s = verifier.Check(*ctx, "SetLinkFault"); !s.ok()) return s;
//
// The credential travels as the metadata `netfold-credential` and is
// compared in constant time. Over loopback no other user can read it; on a
// network it crosses in clear, so the control plane must stay on loopback
// or a private management network (docs/security.md). Thread-safe.
#ifndef NETFOLD_AUTH_GRPC_CREDENTIAL_H_
#define NETFOLD_AUTH_GRPC_CREDENTIAL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace netfold::auth {

// The metadata key of the credential.
inline constexpr char kCredentialMetadata[] = "netfold-credential";

// A channel to `address` ("ip:port") whose every call carries `credential`
// (none if it is empty), with `args`.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const std::string& credential,
                                             const grpc::ChannelArguments& args = {});

// Decides whether a call presented the fabric credential.
class CredentialVerifier {
 public:
  // `credential` empty: every caller is accepted (a daemon told to run
  // without authentication).
  explicit CredentialVerifier(std::string credential);

  bool required() const { return !credential_.empty(); }
  // OK if the call presented the credential (or none is required); else
  // UNAUTHENTICATED (it presented none) or PERMISSION_DENIED (another),
  // with a message that says where clients find it. Refusals are counted
  // and logged with `method` and the peer.
  grpc::Status Check(const grpc::ServerContextBase& ctx, std::string_view method) const;
  // Calls refused by Check.
  uint64_t num_refused() const { return num_refused_.load(std::memory_order_relaxed); }

 private:
  const std::string credential_;
  mutable std::atomic<uint64_t> num_refused_{0};
};

}  // namespace netfold::auth

#endif  // NETFOLD_AUTH_GRPC_CREDENTIAL_H_
