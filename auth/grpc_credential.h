// The control plane's gRPC security, in one place: every channel is made by
// CreateChannel (TLS against the fabric's CA, the fabric credential on every
// call) and every server's credentials by ServerCredentials; handlers check
// the credential with CredentialVerifier (docs/security.md, "Who may call:
// the fabric credential" and "TLS on the control plane").
//
//   // client (switchd's agent, libnetfold, the netfold CLI):
//   std::shared_ptr<grpc::Channel> channel =
//       CreateChannel(address, {.credential = secret, .tls_ca_pem = ca});
//   // server:
//   builder.AddListeningPort(address, ServerCredentials(tls_files_or_null), &port);
//   CredentialVerifier verifier(secret);           // "" = anyone (auth: none)
//   if (grpc::Status s = verifier.Check(*ctx, "SetLinkFault"); !s.ok()) return s;
//
// The credential travels as the metadata `netfold-credential` and is
// compared in constant time. With TLS (server-authenticated: the client
// checks the server's certificate against the fabric's CA and the address
// it dials) nobody on the path can read or replace it; without, it crosses
// in clear. Thread-safe.
#ifndef NETFOLD_AUTH_GRPC_CREDENTIAL_H_
#define NETFOLD_AUTH_GRPC_CREDENTIAL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "auth/tls_files.h"

namespace netfold::auth {

// The metadata key of the credential.
inline constexpr char kCredentialMetadata[] = "netfold-credential";

// How a client proves itself and checks the server.
struct ClientAuth {
  std::string credential;  // the fabric credential; "" = none (auth: none)
  // The fabric CA's certificate (PEM): TLS, and the server's certificate
  // must be signed by it and name the address dialed. "" = plaintext.
  std::string tls_ca_pem;
};

// A channel to `address` ("ip:port") with `auth`, and `args`. Connects
// lazily: a server that does not present a certificate of the fabric's CA
// (or speaks plaintext) makes every call fail UNAVAILABLE.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address, const ClientAuth& auth,
                                             const grpc::ChannelArguments& args = {});

// What to check when a channel made with `auth` cannot connect, for the
// error message: a plaintext client against a TLS fabric (or the reverse),
// or a server certificate that another CA signed or that does not name the
// address dialed; gRPC reports each as a failed connection.
std::string ConnectHint(const ClientAuth& auth);

// The credentials of a server's listening port: TLS with `tls`'s server
// certificate and key (clients present no certificate: they present the
// fabric credential), or plaintext if `tls` is null.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles* tls);

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
