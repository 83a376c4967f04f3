// HostControl.WatchEvents on gRPC's callback API (docs/security.md,
// "Streams and threads"): a watch waits for its job's events without
// holding a thread. The job's EventStream says when it has something
// (EventStream::OnReady), and the watch writes it from whichever thread
// that was; gRPC's callback threads carry the rest.
//
//   // in the callback handler, after the admission checks:
//   return new EventWatch(*stream, [core] { /* the watch is over */ });
//   return EventWatch::Refuse(status);       // refused before it started
//
// Events go out one at a time in the stream's order; JOB_DESTROYED is the
// last. The watch ends (status OK) when the stream closes (job destroyed,
// the rank watched again, the manager stopping) and every event was
// written; with CANCELLED when the client goes away.
//
// Thread-safety: gRPC's reactions and the stream's ready callback may run
// on any threads at once; the watch's shared state orders them.
#ifndef NETFOLD_MANAGER_EVENT_WATCH_H_
#define NETFOLD_MANAGER_EVENT_WATCH_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>

#include "manager/event_hub.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

class EventWatch final : public grpc::ServerWriteReactor<control::JobEvent> {
 public:
  // Writes `stream`'s events; `on_done` runs once gRPC is done with the RPC.
  EventWatch(std::shared_ptr<EventStream> stream, std::function<void()> on_done);
  // A watch refused before it started: it finishes with `status` at once.
  static grpc::ServerWriteReactor<control::JobEvent>* Refuse(const grpc::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct State;
  // Starts the next write, or the finish, if one is due and none is under way.
  static void Pump(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::function<void()> on_done_;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_EVENT_WATCH_H_
