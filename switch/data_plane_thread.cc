#include "switch/data_plane_thread.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/log.h"

namespace netfold::sw {
namespace {

// How often Remove says that it is still waiting for a pass to end.
constexpr absl::Duration kRemoveReport = absl::Seconds(5);

}  // namespace

DataPlaneThread::DataPlaneThread(const DataPlaneThreadOptions& options) : options_(options) {}

DataPlaneThread::~DataPlaneThread() {
  absl::MutexLock control(&control_mu_);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (const Member& m : members_) m.plane->Wake();
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status DataPlaneThread::Add(SwitchDataPlane* plane, std::function<void()> after_pass) {
  absl::MutexLock control(&control_mu_);
  std::thread finished;
  {
    absl::MutexLock lock(&mu_);
    if (!members_.empty()) {
      std::vector<SwitchDataPlane*> all = {plane};
      for (const Member& m : members_) all.push_back(m.plane);
      for (SwitchDataPlane* p : all) {
        if (p->wait_fd() < 0) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "switch %s cannot share a data-plane thread: only kernel UDP ports without "
              "polling (poll_us 0, no busy_poll) can",
              p->config().name));
        }
      }
    }
    members_.push_back({plane, std::move(after_pass)});
    ++version_;
    if (members_.size() > 1) {
      // The thread may sleep in the first plane's RunOnce: make it look again.
      members_.front().plane->Wake();
      return absl::OkStatus();
    }
    // The first plane, or the first after the last was removed: a thread
    // that ended with the last plane is joined, a new one runs this one.
    finished = std::move(thread_);
    stop_ = false;
  }
  if (finished.joinable()) finished.join();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void DataPlaneThread::Remove(SwitchDataPlane* plane) {
  absl::MutexLock control(&control_mu_);
  uint64_t target = 0;
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(members_.begin(), members_.end(),
                           [plane](const Member& m) { return m.plane == plane; });
    if (it == members_.end()) return;
    members_.erase(it);
    ++version_;
    last = members_.empty();
    if (last) stop_ = true;
    target = passes_started_;
    plane->Wake();  // cut a wait in its RunOnce or in poll short
    // The pass that may hold it (started before the erase) must end; the
    // data plane's own waits are bounded, so it does.
    auto done = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return passes_done_ >= target;
    };
    while (!mu_.AwaitWithTimeout(absl::Condition(&done), kRemoveReport)) {
      NETFOLD_LOG(kError) << "switch " << plane->config().name
                          << ": still waiting for the data-plane thread to finish a pass";
    }
  }
  if (last && thread_.joinable()) thread_.join();
}

size_t DataPlaneThread::num_planes() const {
  absl::MutexLock lock(&mu_);
  return members_.size();
}

void DataPlaneThread::Loop() {
  if (options_.sched_batch) {
    // This thread only (pid 0): the daemon's control threads keep theirs.
    const sched_param none{};
    if (sched_setscheduler(0, SCHED_BATCH, &none) != 0) {
      NETFOLD_LOG(kWarning) << "switch " << options_.name
                            << ": the data plane stays SCHED_OTHER (SCHED_BATCH refused: "
                            << std::strerror(errno) << ")";
    }
  }
  // The thread's copy of the planes, taken again only when they changed.
  std::vector<Member> members;
  uint64_t version = 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || members_.empty()) return;
      if (version != version_) {
        members = members_;
        version = version_;
        // Between passes, on this thread: the planes' in-process links
        // follow the members (a removed plane is no longer reached).
        std::vector<SwitchDataPlane*> planes;
        for (const Member& m : members) planes.push_back(m.plane);
        for (SwitchDataPlane* p : planes) p->SetInProcessPeers(planes);
        ready_.assign(members.size(), true);
      }
      ++passes_started_;
    }
    if (members.size() == 1) {
      // Idle, the plane sleeps in receive: packets, QP timers, a posted
      // command (Post wakes it) and Remove (likewise) end the wait.
      members[0].plane->RunOnce(options_.idle_wait);
      members[0].after_pass();
    } else {
      for (size_t i = 0; i < members.size(); ++i) {
        members[i].plane->RunOnce(absl::ZeroDuration(), ready_[i]);
        members[i].after_pass();
      }
      absl::Duration sleep = options_.idle_wait;
      for (size_t i = 0; i < members.size(); ++i) {
        SwitchDataPlane& plane = *members[i].plane;
        const absl::Duration port = plane.PortSleepBound(options_.idle_wait);
        ready_[i] = port <= absl::ZeroDuration();  // read whatever poll says
        sleep = std::min(sleep, plane.HasInProcessMessages() ? absl::ZeroDuration() : port);
      }
      // With no time to sleep, poll still says which ports hold packets:
      // one system call instead of a read of every port.
      SleepOn(members, sleep);
    }
    absl::MutexLock lock(&mu_);
    passes_done_ = passes_started_;
  }
}

void DataPlaneThread::SleepOn(const std::vector<Member>& members, absl::Duration timeout) {
  fds_.resize(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    fds_[i] = {.fd = members[i].plane->wait_fd(), .events = POLLIN, .revents = 0};
  }
  const timespec ts = absl::ToTimespec(std::min(timeout, absl::Hours(1)));
  const int ready = ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  for (size_t i = 0; i < members.size(); ++i) {
    // EINTR (or an error): the next pass reads every port.
    ready_[i] = ready_[i] || ready < 0 || fds_[i].revents != 0;
  }
}

}  // namespace netfold::sw
