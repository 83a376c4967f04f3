#include "manager/event_hub.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace netfold::manager {
namespace {

bool IsFor(const std::vector<uint32_t>& ranks, uint32_t rank) {
  return ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

}  // namespace

// ---------------------------------------------------------------------------
// EventStream

std::optional<control::JobEvent> EventStream::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (queue_.empty()) return std::nullopt;
  control::JobEvent e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

bool EventStream::Finished() const {
  absl::MutexLock lock(&mu_);
  return closed_ && queue_.empty();
}

void EventStream::Push(const control::JobEvent& event) {
  std::function<void()> ready;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    // A watcher that never reads cannot make the manager hoard memory.
    if (queue_.size() >= 1024) queue_.pop_front();
    queue_.push_back(event);
    ready = ready_;
  }
  if (ready) ready();
}

void EventStream::Close() {
  std::function<void()> ready;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    ready = ready_;
  }
  if (ready) ready();
}

void EventStream::OnReady(std::function<void()> ready) {
  absl::MutexLock lock(&mu_);
  ready_ = std::move(ready);
}

// ---------------------------------------------------------------------------
// EventHub

EventHub::EventHub(uint64_t incarnation, size_t events_per_job)
    : incarnation_(incarnation), events_per_job_(events_per_job) {}

void EventHub::Publish(uint64_t job_id, control::JobEvent event, std::vector<uint32_t> ranks) {
  JobLog& log = jobs_[job_id];
  event.set_sequence(log.next_sequence++);
  event.set_job_id(job_id);
  event.set_manager_incarnation(incarnation_);
  for (const auto& [rank, stream] : log.watchers) {
    if (IsFor(ranks, rank)) stream->Push(event);
  }
  log.events.emplace_back(std::move(event), std::move(ranks));
  while (log.events.size() > events_per_job_) log.events.pop_front();
}

std::shared_ptr<EventStream> EventHub::Subscribe(uint64_t job_id, uint32_t rank,
                                                 uint64_t after_sequence, uint64_t incarnation) {
  JobLog& log = jobs_[job_id];
  auto stream = std::make_shared<EventStream>(job_id, rank);
  control::JobEvent hello;
  hello.set_kind(control::JobEvent::WATCH_STARTED);
  hello.set_job_id(job_id);
  hello.set_manager_incarnation(incarnation_);
  hello.set_reason(absl::StrFormat("watching job %d rank %d", job_id, rank));
  stream->Push(hello);
  const bool before_restart = (incarnation != 0 && incarnation != incarnation_) ||
                              after_sequence >= log.next_sequence;
  if (before_restart || after_sequence > 0) {
    const uint64_t after = before_restart ? 0 : after_sequence;
    for (const auto& [event, ranks] : log.events) {
      if (event.sequence() > after && IsFor(ranks, rank)) stream->Push(event);
    }
  }
  std::shared_ptr<EventStream>& slot = log.watchers[rank];
  if (slot != nullptr) slot->Close();
  slot = stream;
  return stream;
}

void EventHub::EndJob(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  for (auto& [rank, stream] : it->second.watchers) stream->Close();
  jobs_.erase(it);
}

void EventHub::CloseAll() {
  closed_ = true;
  for (auto& [job_id, log] : jobs_) {
    for (auto& [rank, stream] : log.watchers) stream->Close();
    log.watchers.clear();
  }
}

}  // namespace netfold::manager
