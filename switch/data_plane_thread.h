// The thread that runs switch data planes: one per netfold-switchd process,
// whether it hosts one switch or several (docs/switch.md, "Several switches
// in one process").
//
//   DataPlaneThread thread({.idle_wait = kIdleWaitWoken});
//   thread.Add(&leaf_plane, [] { /* after each pass: publish usage */ });
//   thread.Add(&root_plane, ...);
//   ...
//   thread.Remove(&leaf_plane);   // returns once the thread is done with it
//
// One plane: the thread calls its RunOnce(idle_wait) as before, so the
// port waits (or spins, with a poll window) as it was configured to.
// Several: each pass runs every plane's RunOnce without waiting, in the
// order they were added, then the thread sleeps in poll(2) on all their
// ports' wait_fd()s, no longer than the shortest PortSleepBound (a QP
// timer, a delayed packet), and not at all (a poll without a timeout) when
// a plane has in-process messages waiting. The next pass reads only the
// ports poll found readable and those PortSleepBound says must be read;
// every plane still takes its in-process messages, timers and commands. A
// message one switch sends to another of the process is
// then read in the same or the next pass, without waking another process:
// on a machine with fewer cores than processes those wakeups, not the
// folding, were the cost of a tree on one host (docs/performance.md).
//
// Thread-safety: Add, Remove and Stop from any thread but the data-plane
// thread itself. A plane is touched only by the data-plane thread while it
// is added (commands reach it through SwitchDataPlane::Post).
#ifndef NETFOLD_SWITCH_DATA_PLANE_THREAD_H_
#define NETFOLD_SWITCH_DATA_PLANE_THREAD_H_

#include <poll.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "switch/switch_data_plane.h"

namespace netfold::sw {

struct DataPlaneThreadOptions {
  // The longest sleep when idle (packets, timers, Post and Remove end it
  // early on ports that can be woken).
  absl::Duration idle_wait = absl::Milliseconds(100);
  // SCHED_BATCH for the thread (transport.scheduling: batch).
  bool sched_batch = false;
  std::string name = "switch";  // for its logs
};

class DataPlaneThread {
 public:
  explicit DataPlaneThread(const DataPlaneThreadOptions& options);
  // Stops the thread; every plane must have been removed.
  ~DataPlaneThread();
  DataPlaneThread(const DataPlaneThread&) = delete;
  DataPlaneThread& operator=(const DataPlaneThread&) = delete;

  // Starts running `plane` (and the thread, with the first plane);
  // `after_pass` runs on the thread after each of its passes. A second
  // plane needs every port to have a wait_fd (kernel UDP without polling):
  // FailedPrecondition otherwise, and nothing changes.
  absl::Status Add(SwitchDataPlane* plane, std::function<void()> after_pass);
  // Stops running `plane`; on return the thread no longer touches it. The
  // thread ends with the last plane.
  void Remove(SwitchDataPlane* plane);
  size_t num_planes() const;

 private:
  struct Member {
    SwitchDataPlane* plane;
    std::function<void()> after_pass;
  };
  void Loop();
  // Sleeps in poll(2) on the planes' fds, at most `timeout`; adds to
  // ready_ the ones poll found readable (all of them if poll failed).
  void SleepOn(const std::vector<Member>& members, absl::Duration timeout);

  const DataPlaneThreadOptions options_;
  // Serializes Add, Remove and the destructor (they start and join thread_);
  // taken before mu_, never by the thread.
  absl::Mutex control_mu_;
  mutable absl::Mutex mu_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Add and Remove
  uint64_t passes_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t passes_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<pollfd> fds_;  // the thread's own: SleepOn's set
  // The thread's own: per member, whether the next pass reads its port
  // (its fd was readable after the last poll, or PortSleepBound said it
  // must be read, or the members just changed). Asking the others was a
  // system call that found nothing, two for every pass of a tree of three.
  std::vector<bool> ready_;
  std::thread thread_ ABSL_GUARDED_BY(control_mu_);
};

}  // namespace netfold::sw

#endif  // NETFOLD_SWITCH_DATA_PLANE_THREAD_H_
