// Test helpers for talking to a manager over gRPC: a WatchEvents reader on
// its own thread, a unary call with raw (possibly malformed) bytes, and a
// wait-with-deadline for conditions that can only be polled.
//
//   EventWatcher w(channel, request);
//   ASSERT_TRUE(w.WaitStarted(absl::Seconds(5)));
//   std::optional<control::JobEvent> e = w.WaitFor(
//       [](const control::JobEvent& e) { return e.kind() == control::JobEvent::GROUP_REVOKED; },
//       absl::Seconds(2));
//
// Thread-safe.
#ifndef NETFOLD_MANAGER_TESTING_GRPC_TEST_UTIL_H_
#define NETFOLD_MANAGER_TESTING_GRPC_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auth/grpc_credential.h"
#include "proto/control/netfold_control.grpc.pb.h"

namespace netfold::manager {

// A channel that reconnects within half a second after its server restarts,
// with `auth` (the fabric credential on every call if not empty; TLS if a CA
// is given).
std::shared_ptr<grpc::Channel> FastReconnectChannel(const std::string& address,
                                                    const auth::ClientAuth& auth = {});

// Polls `condition` every `step` until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration step = absl::Milliseconds(20));

// Calls `method` ("/package.Service/Method") with `bytes` as the request
// message, whatever they are, and returns the status.
grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                          const std::string& bytes, absl::Duration timeout);

class EventWatcher {
 public:
  EventWatcher(const std::shared_ptr<grpc::Channel>& channel, control::WatchEventsRequest request);
  ~EventWatcher();
  EventWatcher(const EventWatcher&) = delete;
  EventWatcher& operator=(const EventWatcher&) = delete;

  // True once WATCH_STARTED arrived.
  bool WaitStarted(absl::Duration timeout);
  // The first event (WATCH_STARTED excluded) matching `match`, waiting up to
  // `timeout` for it.
  std::optional<control::JobEvent> WaitFor(
      const std::function<bool(const control::JobEvent&)>& match, absl::Duration timeout);
  std::vector<control::JobEvent> events() const;
  // Waits for the stream to end; its status (DEADLINE_EXCEEDED if it did not).
  grpc::Status WaitFinished(absl::Duration timeout);
  void Cancel();

 private:
  std::unique_ptr<control::HostControl::Stub> stub_;
  grpc::ClientContext ctx_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<control::JobEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_TESTING_GRPC_TEST_UTIL_H_
