#include "auth/tls_certificates.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auth/secrets.h"
#include "base/status_macros.h"

namespace netfold::auth {
namespace {

// Every OpenSSL object owned by a unique_ptr that frees it.
template <typename T, void (*Free)(T*)>
struct Freer {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Freer<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Freer<BIO, BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Freer<BIGNUM, BN_free>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Freer<X509_EXTENSION, X509_EXTENSION_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Freer<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Freer<X509_STORE_CTX, X509_STORE_CTX_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Freer<GENERAL_NAMES, GENERAL_NAMES_free>>;

// `what` and the reasons OpenSSL queued (the queue is emptied).
absl::Status OpenSslError(std::string_view what) {
  std::string reasons;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    reasons += absl::StrFormat("%s%s", reasons.empty() ? "" : "; ", buf);
  }
  return absl::InternalError(absl::StrFormat("%s failed: %s", what,
                                             reasons.empty() ? "no reason given" : reasons));
}

// A subjectAltName entry for `host`, or InvalidArgument.
absl::StatusOr<std::string> AltName(const std::string& host) {
  unsigned char addr[16];
  if (inet_pton(AF_INET, host.c_str(), addr) == 1 || inet_pton(AF_INET6, host.c_str(), addr) == 1) {
    return "IP:" + host;
  }
  // Only these characters: the entry goes into OpenSSL's "name:value,..."
  // list, where a ',' or ':' would start another entry.
  const bool ok = !host.empty() && host.size() <= 253 && host.front() != '-' &&
                  host.front() != '.' &&
                  std::all_of(host.begin(), host.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.';
                  });
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host '%s' is neither an IP address nor a DNS name (letters, digits, '-' and '.')", host));
  }
  return "DNS:" + host;
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("generating an EC P-256 key");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(absl::StrFormat("certificate extension %s = %s", OBJ_nid2sn(nid), value));
  }
  return absl::OkStatus();
}

// A certificate for `key` named `common_name`, without extensions or a
// signature; `issuer` null: self-issued.
absl::StatusOr<X509Ptr> NewCertificate(const std::string& common_name, EVP_PKEY* key,
                                       X509* issuer, absl::Duration validity) {
  X509Ptr cert(X509_new());
  BnPtr serial(BN_new());
  if (cert == nullptr || serial == nullptr) return OpenSslError("allocating a certificate");
  // A random 127-bit serial: positive, and unique without a database.
  bool ok = X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
            BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
            BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) != nullptr &&
            X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                            static_cast<long>(absl::ToInt64Seconds(validity))) != nullptr &&
            X509_set_pubkey(cert.get(), key) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                  reinterpret_cast<const unsigned char*>("netfold"), -1, -1,
                                  0) == 1 &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) == 1 &&
       X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer)
                                                          : name) == 1;
  if (!ok) return OpenSslError("filling in a certificate");
  return cert;
}

absl::StatusOr<std::string> ToPem(int (*write)(BIO*, void*), void* object) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get(), object) != 1) return OpenSslError("writing PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::string> CertificatePem(X509* cert) {
  return ToPem([](BIO* b, void* x) { return PEM_write_bio_X509(b, static_cast<X509*>(x)); },
               cert);
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  // PKCS#8, unencrypted: the file's mode protects it (gRPC reads it as is).
  return ToPem(
      [](BIO* b, void* k) {
        return PEM_write_bio_PrivateKey(b, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0,
                                        nullptr, nullptr);
      },
      key);
}

absl::StatusOr<X509Ptr> ParseCertificate(const std::string& pem, std::string_view what) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio == nullptr ? nullptr : PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrFormat("the %s is not a PEM certificate", what));
  }
  return cert;
}

}  // namespace

absl::StatusOr<FabricCertificates> MakeFabricCertificates(const std::vector<std::string>& hosts,
                                                          absl::Duration validity) {
  if (hosts.size() > kMaxCertificateHosts) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d hosts: a certificate lists at most %d", hosts.size(), kMaxCertificateHosts));
  }
  if (validity <= absl::ZeroDuration() || validity > absl::Hours(24 * 3650)) {
    return absl::InvalidArgumentError("certificate validity must be from 1 s to 10 years");
  }
  std::vector<std::string> names = {"IP:127.0.0.1", "IP:::1", "DNS:localhost"};
  for (const std::string& host : hosts) {
    NETFOLD_ASSIGN_OR_RETURN(std::string name, AltName(host));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }

  NETFOLD_ASSIGN_OR_RETURN(KeyPtr ca_key, NewKey());
  // A name of its own: clients of two fabrics never mistake one CA for the
  // other's.
  NETFOLD_ASSIGN_OR_RETURN(
      X509Ptr ca, NewCertificate("netfold fabric CA " + HexString(RandomBytes(8)), ca_key.get(),
                                 nullptr, validity));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  NETFOLD_RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) <= 0) return OpenSslError("signing the CA");

  NETFOLD_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  NETFOLD_ASSIGN_OR_RETURN(
      X509Ptr cert, NewCertificate("netfold fabric server", key.get(), ca.get(), validity));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE"));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature"));
  NETFOLD_RETURN_IF_ERROR(AddExtension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth"));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_subject_key_identifier, "hash"));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always"));
  NETFOLD_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.get(), NID_subject_alt_name, absl::StrJoin(names, ",")));
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) <= 0) {
    return OpenSslError("signing the server certificate");
  }

  FabricCertificates out;
  NETFOLD_ASSIGN_OR_RETURN(out.ca_pem, CertificatePem(ca.get()));
  NETFOLD_ASSIGN_OR_RETURN(out.cert_pem, CertificatePem(cert.get()));
  NETFOLD_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;  // ca_key is freed here: nothing else will ever be signed by it
}

absl::Status CheckServerCertificate(const std::string& ca_pem, const std::string& cert_pem,
                                    const std::string& key_pem) {
  NETFOLD_ASSIGN_OR_RETURN(X509Ptr ca, ParseCertificate(ca_pem, "CA certificate"));
  NETFOLD_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(cert_pem, "server certificate"));
  BioPtr bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  KeyPtr key(bio == nullptr ? nullptr
                            : PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the server key is not an unencrypted PEM private key");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the server key is not the server certificate's key (files of two different sets?)");
  }
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (store == nullptr || ctx == nullptr || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1 ||
      X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER) != 1) {
    return OpenSslError("setting up the certificate check");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int e = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrFormat("the server certificate does not check against the CA: %s",
                        X509_verify_cert_error_string(e)));
  }
  return absl::OkStatus();
}

absl::Status CheckCertificatePem(const std::string& pem, const std::string& what) {
  return ParseCertificate(pem, what).status();
}

absl::StatusOr<std::vector<std::string>> CertificateHosts(const std::string& cert_pem) {
  NETFOLD_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(cert_pem, "certificate"));
  NamesPtr names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  std::vector<std::string> out;
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                         static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      const int len = ASN1_STRING_length(s);
      char text[INET6_ADDRSTRLEN] = {};
      if ((len == 4 || len == 16) &&
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text,
                    sizeof(text)) != nullptr) {
        out.push_back(std::string("IP:") + text);
      }
    }
  }
  return out;
}

}  // namespace netfold::auth
