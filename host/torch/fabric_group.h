// A netfold group (netfold_group_create) behind one torch process group:
// its out-of-band exchanges on the process group's store, the mutex that
// keeps libnetfold's calls on it to one thread at a time, and the thread
// that completes its Works in the order they started.
//
//   auto group = FabricGroup::Create(ctx, store, rank, size, world_ranks, timeout);
//   auto work = c10::make_intrusive<WorkNetfold>(rank, type, group->calls(), outputs);
//   group->Start(*work, [&](netfold_group_t g, netfold_request_t* r) { ... });
//   group->Submit(work);
//   FabricContext::Retire(std::move(group));   // when its process group goes
//
// The completion thread completes the Works nobody will wait for: those
// whose future was asked for (getFuture wakes it) and those their caller
// dropped (only the queue holds them; it looks for them every 10 ms while
// Works are in flight, and sleeps while none is). Until they are done it
// moves the data itself, waiting in netfold_progress (the context's, not
// the group's: it takes no mutex, and a collective started on another
// thread makes it return at once), and tests them after each return
// (netfold_request_test, never blocking the caller's next collective on the
// mutex). While another thread holds the mutex (a wait(): that one drives)
// it tests at growing intervals instead, 50 us doubling up to 2 ms. A Work
// its caller waits for costs this thread nothing: a loop of blocking
// collectives wakes it once per 10 ms at most. Works completed by their
// callers leave the queue at the next Submit.
//
// Destroy() (also the destructor) refuses new collectives, completes every
// Work in flight, stops the thread and destroys the netfold group
// (collective over the members, through the store, within the process
// group's timeout). It is idempotent. A process group's destructor hands
// its group to FabricContext::Retire, which calls it on a thread of its
// own; the context's Shutdown calls it at exit for the groups still held.
//
// Thread-safety: every member may be called from any thread; Start and
// Submit of one group are called in the same order on every rank (torch
// calls them in program order).
#ifndef NETFOLD_HOST_TORCH_FABRIC_GROUP_H_
#define NETFOLD_HOST_TORCH_FABRIC_GROUP_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host/torch/fabric_context.h"
#include "host/torch/store_oob.h"
#include "host/torch/work_netfold.h"
#include "netfold/netfold.h"

namespace netfold::pytorch {

class FabricGroup {
 public:
  // Creates the netfold group of `size` members (collective over them).
  // `world_ranks`: each member's world rank, in group-rank order; empty:
  // the whole world. Throws c10::Error with libnetfold's reason.
  static std::shared_ptr<FabricGroup> Create(std::shared_ptr<FabricContext> context,
                                             const c10::intrusive_ptr<c10d::Store>& store,
                                             int rank, int size, std::vector<int> world_ranks,
                                             std::chrono::milliseconds timeout);
  ~FabricGroup();  // Destroy()

  FabricGroup(const FabricGroup&) = delete;
  FabricGroup& operator=(const FabricGroup&) = delete;

  // Starts one request of `work` with `start` (a netfold _nb call on this
  // group). Throws c10::Error if the group is destroyed; a call that fails
  // is recorded in `work` (FailToStart) and thrown.
  void Start(WorkNetfold& work, const std::function<int(netfold_group_t, netfold_request_t*)>& start);
  // Hands `work`, whose requests are started, to the completion thread.
  void Submit(c10::intrusive_ptr<WorkNetfold> work);
  // The mutex every netfold call on this group holds.
  std::mutex* calls() { return &calls_; }

  void Destroy();

 private:
  FabricGroup(std::shared_ptr<FabricContext> context, const c10::intrusive_ptr<c10d::Store>& store,
              int rank, int size, std::chrono::milliseconds timeout);
  void CompleteInOrder();  // the completion thread

  std::shared_ptr<FabricContext> context_;
  StoreOob oob_;
  netfold_group_t group_ = nullptr;

  std::mutex calls_;
  bool destroyed_ = false;  // under calls_

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<WorkNetfold>> in_flight_;  // under queue_mu_
  bool closing_ = false;                                   // under queue_mu_
  bool completer_idle_ = false;  // under queue_mu_: asleep until notified
  bool wanted_ = false;          // under queue_mu_: a future was asked for since the last look
  std::unique_ptr<std::thread> completer_;
  const int pid_;  // the process that created it (not a fork() child)
};

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_FABRIC_GROUP_H_
