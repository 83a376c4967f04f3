#include "manager/event_watch.h"

#include <optional>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace netfold::manager {

struct EventWatch::State {
  explicit State(std::shared_ptr<EventStream> s) : stream(std::move(s)) {}

  const std::shared_ptr<EventStream> stream;
  absl::Mutex mu;
  EventWatch* watch ABSL_GUARDED_BY(mu) = nullptr;  // null once gRPC is done with it
  control::JobEvent writing;  // the event being written; untouched while in_flight
  bool in_flight ABSL_GUARDED_BY(mu) = false;
  bool last_written ABSL_GUARDED_BY(mu) = false;  // JOB_DESTROYED went out
  bool cancelled ABSL_GUARDED_BY(mu) = false;     // the client went away, or a write failed
  bool finished ABSL_GUARDED_BY(mu) = false;      // Finish was called
};

namespace {

// A watch refused at its start: nothing to write, finished at once.
class Refusal final : public grpc::ServerWriteReactor<control::JobEvent> {
 public:
  explicit Refusal(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<control::JobEvent>* EventWatch::Refuse(const grpc::Status& status) {
  return new Refusal(status);
}

EventWatch::EventWatch(std::shared_ptr<EventStream> stream, std::function<void()> on_done)
    : state_(std::make_shared<State>(std::move(stream))), on_done_(std::move(on_done)) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->watch = this;
  }
  // The stream may already hold events (WATCH_STARTED, replays): the first
  // Pump takes them; later ones wake it. The callback keeps the state, not
  // the watch, alive: after OnDone it finds no watch and does nothing.
  std::weak_ptr<State> weak = state_;
  state_->stream->OnReady([weak] {
    if (std::shared_ptr<State> s = weak.lock()) Pump(s);
  });
  Pump(state_);
}

void EventWatch::Pump(const std::shared_ptr<State>& s) {
  EventWatch* watch = nullptr;
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&s->mu);
    if (s->watch == nullptr || s->in_flight || s->finished) return;
    if (s->cancelled) {
      finish = grpc::Status(grpc::StatusCode::CANCELLED, "the watch was cancelled");
    } else if (s->last_written) {
      finish = grpc::Status::OK;
    } else if (std::optional<control::JobEvent> ev = s->stream->Next(absl::ZeroDuration())) {
      s->writing = *std::move(ev);
      s->in_flight = true;
      s->last_written = s->writing.kind() == control::JobEvent::JOB_DESTROYED;
    } else if (s->stream->Finished()) {
      finish = grpc::Status::OK;
    } else {
      return;  // nothing yet: the stream's ready callback comes back
    }
    if (finish.has_value()) s->finished = true;
    watch = s->watch;
  }
  // Outside the lock: gRPC may run a reaction inline. The flags above make
  // this thread the only one starting an operation now.
  if (finish.has_value()) {
    watch->Finish(*finish);
  } else {
    watch->StartWrite(&s->writing);
  }
}

void EventWatch::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->in_flight = false;
    if (!ok) state_->cancelled = true;
  }
  Pump(state_);
}

void EventWatch::OnCancel() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->cancelled = true;
  }
  Pump(state_);  // finishes now, or when the write under way completes
}

void EventWatch::OnDone() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->watch = nullptr;
  }
  state_->stream->OnReady(nullptr);
  state_->stream->Close();
  if (on_done_) on_done_();
  delete this;
}

}  // namespace netfold::manager
