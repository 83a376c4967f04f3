#include "auth/grpc_credential.h"

#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "auth/secrets.h"
#include "base/log.h"

namespace netfold::auth {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Adds the credential to the initial metadata of every call.
class CredentialInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CredentialInterceptor(const std::string* credential) : credential_(credential) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kCredentialMetadata, *credential_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const credential_;
};

class CredentialInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CredentialInterceptorFactory(std::string credential)
      : credential_(std::move(credential)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new CredentialInterceptor(&credential_);
  }

 private:
  const std::string credential_;  // lives as long as the channel
};

}  // namespace

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address, const ClientAuth& auth,
                                             const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> transport;
  if (auth.tls_ca_pem.empty()) {
    transport = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = auth.tls_ca_pem;  // the fabric's CA only, not the system's
    transport = grpc::SslCredentials(ssl);
  }
  if (auth.credential.empty()) return grpc::CreateCustomChannel(address, transport, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<CredentialInterceptorFactory>(auth.credential));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, transport, args,
                                                                 std::move(factories));
}

std::string ConnectHint(const ClientAuth& auth) {
  if (auth.tls_ca_pem.empty()) {
    return "this client speaks plaintext (it found no CA): if the fabric runs TLS, as `netfold "
           "up` does, set NETFOLD_TLS_CA to its ca.pem";
  }
  return "this client speaks TLS: the server's certificate must be signed by its CA "
         "(NETFOLD_TLS_CA, else the ca.pem beside the credential file) and name the address "
         "dialed; a fabric run with --plaintext takes no TLS";
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsFiles* tls) {
  if (tls == nullptr) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  return grpc::SslServerCredentials(ssl);
}

CredentialVerifier::CredentialVerifier(std::string credential)
    : credential_(std::move(credential)) {}

grpc::Status CredentialVerifier::Check(const grpc::ServerContextBase& ctx,
                                       std::string_view method) const {
  if (credential_.empty()) return grpc::Status::OK;
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kCredentialMetadata);
  const bool presented = it != metadata.end();
  if (presented && ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()),
                                      credential_)) {
    return grpc::Status::OK;
  }
  num_refused_.fetch_add(1, std::memory_order_relaxed);
  NETFOLD_LOG(kInfo) << method << " from " << ctx.peer() << " refused: "
                     << (presented ? "wrong fabric credential" : "no fabric credential");
  if (!presented) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrFormat("%s: this fabric requires its credential: clients read it from the file "
                        "NETFOLD_CREDENTIAL_FILE names (netfold up prints it; it is the "
                        "`credential` file of its state directory)",
                        std::string(method)));
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrFormat("%s: wrong fabric credential", std::string(method)));
}

}  // namespace netfold::auth
