// What TLS costs the control plane (docs/performance.md, "control plane:
// TLS"): two `netfold up` fabrics in the same run, one with TLS (the
// default) and one --plaintext, and against each manager
//   - 1000 GetStatus calls on one channel (the per-call cost), and
//   - 100 new channels, each making one GetStatus (connection set-up, the
//     TLS handshake included).
// Rounds alternate between the two fabrics; the median round is printed,
// with the ratio TLS / plaintext.
//
//   build/bench/control_plane/tls_cost [--calls N] [--connections N] [--rounds N]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

bool GetStatus(control::Admin::Stub* stub) {
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  control::GetStatusResponse r;
  grpc::Status s = stub->GetStatus(&c, control::GetStatusRequest(), &r);
  if (!s.ok()) std::fprintf(stderr, "tls_cost: GetStatus: %s\n", s.error_message().c_str());
  return s.ok();
}

// Seconds for `calls` GetStatus on one (warmed-up) channel; < 0 on error.
double PerCall(const tools::LocalFabric& f, int calls) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(f.manager_address(), f.client_auth()));
  if (!GetStatus(stub.get())) return -1;
  const absl::Time start = absl::Now();
  for (int i = 0; i < calls; ++i) {
    if (!GetStatus(stub.get())) return -1;
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// Seconds for `connections` new channels with one GetStatus each.
double PerConnection(const tools::LocalFabric& f, int connections) {
  const absl::Time start = absl::Now();
  for (int i = 0; i < connections; ++i) {
    // A channel argument of its own: gRPC shares subchannels (and their
    // connection) between channels with equal arguments.
    grpc::ChannelArguments args;
    args.SetInt("netfold.bench.connection", i);
    auto stub = control::Admin::NewStub(
        auth::CreateChannel(f.manager_address(), f.client_auth(), args));
    if (!GetStatus(stub.get())) return -1;
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int calls = 1000, connections = 100, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    int* field = std::strcmp(argv[i], "--calls") == 0         ? &calls
                 : std::strcmp(argv[i], "--connections") == 0 ? &connections
                 : std::strcmp(argv[i], "--rounds") == 0      ? &rounds
                                                              : nullptr;
    if (field == nullptr || !absl::SimpleAtoi(argv[i + 1], field) || *field < 1) {
      std::fprintf(stderr, "usage: tls_cost [--calls N] [--connections N] [--rounds N]\n");
      return 2;
    }
  }
  tools::LocalFabricOptions o;
  o.hosts = 2;
  // GetStatus counts against the caller's IP (1000/s, burst 2000 by
  // default): lift the limit, or the rounds measure its refusals.
  o.manager_config = "rate_limit: {requests_per_second: 0}\n";
  auto tls = tools::LocalFabric::Start(o);
  o.plaintext = true;
  auto plain = tools::LocalFabric::Start(o);
  if (!tls.ok() || !plain.ok()) {
    std::fprintf(stderr, "tls_cost: %s\n",
                 std::string((tls.ok() ? plain : tls).status().message()).c_str());
    return 1;
  }
  std::vector<double> call_tls, call_plain, conn_tls, conn_plain;
  for (int r = 0; r < rounds; ++r) {
    call_tls.push_back(PerCall(**tls, calls));
    call_plain.push_back(PerCall(**plain, calls));
    conn_tls.push_back(PerConnection(**tls, connections));
    conn_plain.push_back(PerConnection(**plain, connections));
  }
  for (const auto* v : {&call_tls, &call_plain, &conn_tls, &conn_plain}) {
    if (std::any_of(v->begin(), v->end(), [](double s) { return s < 0; })) return 1;
  }
  const double ct = Median(call_tls), cp = Median(call_plain);
  const double nt = Median(conn_tls), np = Median(conn_plain);
  std::printf("control plane, TLS vs plaintext (median of %d rounds, same run)\n", rounds);
  std::printf("%-36s %12s %12s %8s\n", "", "TLS", "plaintext", "ratio");
  std::printf("%-36s %9.1f ms %9.1f ms %8.2f\n",
              (std::to_string(calls) + " GetStatus, one channel").c_str(), ct * 1e3, cp * 1e3,
              ct / cp);
  std::printf("%-36s %9.1f us %9.1f us\n", "  per call", ct / calls * 1e6, cp / calls * 1e6);
  std::printf("%-36s %9.1f ms %9.1f ms %8.2f\n",
              (std::to_string(connections) + " new channels, 1 call each").c_str(), nt * 1e3,
              np * 1e3, nt / np);
  std::printf("%-36s %9.1f us %9.1f us\n", "  per connection", nt / connections * 1e6,
              np / connections * 1e6);
  return 0;
}

}  // namespace
}  // namespace netfold

int main(int argc, char** argv) { return netfold::Main(argc, argv); }
