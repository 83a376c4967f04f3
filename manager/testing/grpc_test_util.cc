#include "manager/testing/grpc_test_util.h"

#include <grpcpp/generic/generic_stub.h>

#include "absl/time/clock.h"
#include "auth/grpc_credential.h"

namespace netfold::manager {

std::shared_ptr<grpc::Channel> FastReconnectChannel(const std::string& address,
                                                    const auth::ClientAuth& auth) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  return auth::CreateChannel(address, auth, args);
}

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration step) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(step);
  }
}

grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                          const std::string& bytes, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::CompletionQueue cq;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  // The context deadline bounds this wait.
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

EventWatcher::EventWatcher(const std::shared_ptr<grpc::Channel>& channel,
                           control::WatchEventsRequest request)
    : stub_(control::HostControl::NewStub(channel)) {
  thread_ = std::thread([this, request] {
    std::unique_ptr<grpc::ClientReader<control::JobEvent>> reader =
        stub_->WatchEvents(&ctx_, request);
    control::JobEvent e;
    while (reader->Read(&e)) {
      absl::MutexLock lock(&mu_);
      if (e.kind() == control::JobEvent::WATCH_STARTED) {
        started_ = true;
      } else {
        events_.push_back(e);
      }
    }
    grpc::Status s = reader->Finish();
    absl::MutexLock lock(&mu_);
    finished_ = true;
    status_ = s;
  });
}

EventWatcher::~EventWatcher() {
  Cancel();
  thread_.join();
}

void EventWatcher::Cancel() { ctx_.TryCancel(); }

bool EventWatcher::WaitStarted(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return started_ || finished_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return started_;
}

std::optional<control::JobEvent> EventWatcher::WaitFor(
    const std::function<bool(const control::JobEvent&)>& match, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  std::optional<control::JobEvent> found;
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& e : events_) {
      if (match(e)) {
        found = e;
        return true;
      }
    }
    return finished_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return found;
}

std::vector<control::JobEvent> EventWatcher::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

grpc::Status EventWatcher::WaitFinished(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "stream did not end");
  }
  return status_;
}

}  // namespace netfold::manager
