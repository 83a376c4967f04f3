// Prints what a netfold daemon's admin API answers, as JSON on stdout, for
// scripts without gRPC bindings: the testbed test
// (tests/testbed/testbed_test.py) and deploy/testbed/netfold-testbed.
//
//   testbed_query counters 10.78.0.3:40371   # SwitchAdmin.GetCounters of a switch
//   testbed_query counters_detail ADDR       # its per-QP view (the switch's admin_detail)
//   testbed_query manager 10.78.0.1:45000    # Admin.GetStatus of the manager
//   testbed_query fault 10.78.0.3:40371 all both drop=0.05,seed=3
//                                            # SwitchAdmin.SetLinkFault (docs/switch.md)
//   testbed_query ... --timeout_ms 2000      # deadline of the call (default 5000)
//
// Every field is printed, zeros included (proto field names; 64-bit
// integers as strings, as protobuf's JSON mapping does). Exit status: 0 with
// the JSON, 1 if the call failed (the gRPC status on stderr), 2 for a bad
// command line. Calls present the credential in $NETFOLD_CREDENTIAL_FILE,
// over TLS checked against $NETFOLD_TLS_CA (else the ca.pem beside the
// credential file; plaintext if there is none).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "auth/fabric_credential.h"
#include "auth/grpc_credential.h"
#include "auth/tls_files.h"

#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "proto/control/netfold_control.grpc.pb.h"

namespace {

constexpr char kUsage[] =
    "usage: testbed_query counters|counters_detail|manager IP:PORT [--timeout_ms N]\n"
    "       testbed_query fault IP:PORT PEER both|send|receive IMPAIRMENT [--timeout_ms N]\n";

namespace control = netfold::control;

int Print(const grpc::Status& status, const std::string& what, const std::string& address,
          const google::protobuf::Message& answer) {
  if (!status.ok()) {
    std::fprintf(stderr, "testbed_query: %s at %s: %s (code %d)\n", what.c_str(),
                 address.c_str(), status.error_message().c_str(),
                 static_cast<int>(status.error_code()));
    return 1;
  }
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(answer, &json, options).ok()) {
    std::fprintf(stderr, "testbed_query: cannot convert the %s answer to JSON\n", what.c_str());
    return 1;
  }
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string what = argv[1];
  const std::string address = argv[2];
  const int num_args = what == "fault" ? 6 : 3;  // before the optional --timeout_ms N
  if (argc != num_args && argc != num_args + 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  long timeout_ms = 5000;
  if (argc == num_args + 2) {
    char* end = nullptr;
    timeout_ms = std::strtol(argv[num_args + 1], &end, 10);
    if (std::string(argv[num_args]) != "--timeout_ms" || *end != '\0' || timeout_ms <= 0) {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  // The fabric credential (docs/security.md), from the file
  // NETFOLD_CREDENTIAL_FILE names; none if unset (a daemon with auth: none).
  netfold::auth::ClientAuth auth;
  std::string credential_file;
  if (const char* file = std::getenv(netfold::auth::kCredentialFileEnv); file && *file) {
    credential_file = file;
    absl::StatusOr<std::string> c = netfold::auth::ReadCredentialFile(file);
    if (!c.ok()) {
      std::fprintf(stderr, "testbed_query: %s\n", std::string(c.status().message()).c_str());
      return 2;
    }
    auth.credential = *c;
  }
  if (const std::string ca = netfold::auth::DefaultTlsCaFile(credential_file); !ca.empty()) {
    absl::StatusOr<std::string> pem = netfold::auth::ReadTlsCaFile(ca);
    if (!pem.ok()) {
      std::fprintf(stderr, "testbed_query: %s\n", std::string(pem.status().message()).c_str());
      return 2;
    }
    auth.tls_ca_pem = *pem;
  }
  auto channel = netfold::auth::CreateChannel(address, auth);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (what == "counters" || what == "counters_detail") {
    control::GetCountersRequest request;
    request.set_detail(what == "counters_detail");  // the switch must allow it (admin_detail)
    control::GetCountersResponse answer;
    grpc::Status s =
        control::SwitchAdmin::NewStub(channel)->GetCounters(&context, request, &answer);
    return Print(s, "SwitchAdmin.GetCounters", address, answer);
  }
  if (what == "manager") {
    control::GetStatusResponse answer;
    grpc::Status s =
        control::Admin::NewStub(channel)->GetStatus(&context, control::GetStatusRequest(), &answer);
    return Print(s, "Admin.GetStatus", address, answer);
  }
  if (what == "fault") {
    control::SetLinkFaultRequest request;
    request.set_peer(argv[3]);
    const std::string direction = argv[4];
    if (direction == "both") {
      request.set_direction(control::LINK_DIRECTION_BOTH);
    } else if (direction == "send") {
      request.set_direction(control::LINK_DIRECTION_SEND);
    } else if (direction == "receive") {
      request.set_direction(control::LINK_DIRECTION_RECEIVE);
    } else {
      std::fprintf(stderr, "testbed_query: direction '%s' is not both, send or receive\n",
                   direction.c_str());
      return 2;
    }
    request.set_impairment(argv[5]);
    control::SetLinkFaultResponse answer;
    grpc::Status s = control::SwitchAdmin::NewStub(channel)->SetLinkFault(&context, request, &answer);
    return Print(s, "SwitchAdmin.SetLinkFault", address, answer);
  }
  std::fputs(kUsage, stderr);
  return 2;
}
