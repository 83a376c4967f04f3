// The event stream of a job (HostControl.WatchEvents): what the manager
// tells a job's processes about its groups and ranks (revoked, re-planned,
// detached, job destroyed). Each job's events are numbered 1, 2, ... in the
// order they happened; the last `events_per_job` are kept so that a process
// that reconnects can ask for what it missed. A rank has at most one
// subscriber: a newer one replaces (closes) the older.
//
//   EventHub hub(incarnation, /*events_per_job=*/256);
//   std::shared_ptr<EventStream> s = hub.Subscribe(job_id, /*rank=*/0, /*after_sequence=*/0);
//   hub.Publish(job_id, revoked, /*ranks=*/{0, 3});     // {}: every rank of the job
//   std::optional<control::JobEvent> e = s->Next(absl::Seconds(1));  // WATCH_STARTED first
//   hub.EndJob(job_id);                                 // closes s
//
// Thread safety: EventStream is thread-safe (gRPC's callback threads
// drain it). EventHub is not: AggregationManager calls it under its state lock, so
// that events are numbered in the order of the changes they report.
#ifndef NETFOLD_MANAGER_EVENT_HUB_H_
#define NETFOLD_MANAGER_EVENT_HUB_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::manager {

// One WatchEvents subscriber's queue. Thread-safe.
class EventStream {
 public:
  EventStream(uint64_t job_id, uint32_t rank) : job_id_(job_id), rank_(rank) {}
  // Waits up to `timeout` for the next event; nullopt on timeout or once
  // closed and drained.
  std::optional<control::JobEvent> Next(absl::Duration timeout);
  // True once closed (job destroyed, replaced by a newer stream of the same
  // rank, manager shutting down) and every queued event was taken.
  bool Finished() const;
  // Queues `event` unless closed; a reader that falls 1024 events behind
  // loses the oldest.
  void Push(const control::JobEvent& event);
  void Close();
  // `ready` runs (on the pushing or closing thread, without this stream's
  // lock) after each Push and Close: a reader that does not block in Next
  // (the callback API's WatchEvents) learns there is something to take.
  // It must not block.
  void OnReady(std::function<void()> ready);
  uint64_t job_id() const { return job_id_; }
  uint32_t rank() const { return rank_; }

 private:
  const uint64_t job_id_;
  const uint32_t rank_;
  mutable absl::Mutex mu_;
  std::deque<control::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> ready_ ABSL_GUARDED_BY(mu_);
};

// Every job's events and subscribers. Not thread-safe (see above).
class EventHub {
 public:
  // Events carry `incarnation` (the manager's), so that a process sees a
  // restart; at most `events_per_job` are kept per job for replay.
  EventHub(uint64_t incarnation, size_t events_per_job);
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  // Numbers `event` (sequence, job id, incarnation), hands it to the
  // subscribers among `ranks` (every subscriber of the job when empty) and
  // keeps it for replay.
  void Publish(uint64_t job_id, control::JobEvent event, std::vector<uint32_t> ranks);

  // A new stream for (job, rank), closing the rank's previous one. It starts
  // with WATCH_STARTED, then the kept events after `after_sequence` (none
  // when 0) meant for the rank, then new ones as they are published. A
  // number from another manager incarnation (`incarnation`, 0: unknown) or
  // past any this hub issued is from before a restart and says nothing
  // about what the subscriber saw of this hub's events: every kept event for
  // the rank is replayed. The caller checked that the job and rank exist,
  // and that !closed().
  std::shared_ptr<EventStream> Subscribe(uint64_t job_id, uint32_t rank, uint64_t after_sequence,
                                         uint64_t incarnation = 0);

  // The job is gone: closes its streams and forgets its events.
  void EndJob(uint64_t job_id);

  // Closes every stream (the manager is shutting down); kept events stay.
  void CloseAll();
  bool closed() const { return closed_; }

 private:
  struct JobLog {
    uint64_t next_sequence = 1;
    // Kept events with the ranks they are for (empty: every rank).
    std::deque<std::pair<control::JobEvent, std::vector<uint32_t>>> events;
    std::map<uint32_t, std::shared_ptr<EventStream>> watchers;
  };

  const uint64_t incarnation_;
  const size_t events_per_job_;
  std::map<uint64_t, JobLog> jobs_;
  bool closed_ = false;
};

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_EVENT_HUB_H_
