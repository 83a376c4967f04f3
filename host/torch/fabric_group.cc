#include "host/torch/fabric_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace netfold::pytorch {
namespace {

constexpr std::chrono::microseconds kFirstPoll(50);
constexpr std::chrono::microseconds kLongestPoll(2000);
constexpr std::chrono::milliseconds kReapInterval(10);
// The longest one netfold_progress of the completion thread waits.
constexpr int kDriveUs = 2000;

}  // namespace

FabricGroup::FabricGroup(std::shared_ptr<FabricContext> context,
                         const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout)
    : context_(std::move(context)),
      oob_(store, context_->GroupScope(), rank, size, timeout),
      pid_(getpid()) {}

std::shared_ptr<FabricGroup> FabricGroup::Create(std::shared_ptr<FabricContext> context,
                                                 const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int size, std::vector<int> world_ranks,
                                                 std::chrono::milliseconds timeout) {
  std::shared_ptr<FabricGroup> group(new FabricGroup(std::move(context), store, rank, size, timeout));
  netfold_group_spec_t spec = NETFOLD_GROUP_SPEC_INITIALIZER;
  spec.rank = rank;
  spec.size = size;
  spec.world_ranks = world_ranks.empty() ? nullptr : world_ranks.data();
  spec.oob = group->oob_.callbacks();
  const int rc = netfold_group_create(group->context_->handle(), &spec, &group->group_);
  if (rc != NETFOLD_SUCCESS) {
    std::string message = DescribeFailure("group_create", rc);
    if (rc == NETFOLD_ERR_OOB) message += " (" + group->oob_.last_error() + ")";
    TORCH_CHECK(false, message);
  }
  group->context_->Register(group);
  group->completer_ = std::make_unique<std::thread>([g = group.get()] { g->CompleteInOrder(); });
  return group;
}

FabricGroup::~FabricGroup() { Destroy(); }

void FabricGroup::Start(WorkNetfold& work,
                        const std::function<int(netfold_group_t, netfold_request_t*)>& start) {
  std::lock_guard<std::mutex> lock(calls_);
  TORCH_CHECK(!destroyed_, "netfold: the process group was destroyed (or shut down at exit)");
  netfold_request_t request = nullptr;
  const int rc = start(group_, &request);
  if (rc != NETFOLD_SUCCESS) {
    const std::string message =
        DescribeFailure(c10d::opTypeToString(work.retrieveOpType()).c_str(), rc);
    work.FailToStart(message);
    TORCH_CHECK(false, message);
  }
  work.AddRequest(request);
}

void FabricGroup::Submit(c10::intrusive_ptr<WorkNetfold> work) {
  work->OnFutureWanted([this] {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      wanted_ = true;
    }
    queue_cv_.notify_one();
  });
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    // What the callers completed themselves leaves here, on their thread.
    while (!in_flight_.empty() && in_flight_.front()->Completed()) in_flight_.pop_front();
    in_flight_.push_back(std::move(work));
    wake = completer_idle_;
  }
  if (wake) queue_cv_.notify_one();
}

void FabricGroup::CompleteInOrder() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  std::chrono::microseconds poll = kFirstPoll;
  while (true) {
    while (!in_flight_.empty() && in_flight_.front()->Completed()) in_flight_.pop_front();
    if (in_flight_.empty() && closing_) return;
    // This thread's Works: those whose future was asked for, those only
    // this queue still holds (dropped by their caller), every one once
    // the group closes. The others' callers will wait for them.
    std::vector<c10::intrusive_ptr<WorkNetfold>> mine;
    for (const c10::intrusive_ptr<WorkNetfold>& w : in_flight_) {
      if (closing_ || w->future_wanted() || w.use_count() == 1) mine.push_back(w);
    }
    wanted_ = false;
    if (mine.empty()) {
      // Nothing to complete: sleep until a Submit to an empty queue, a
      // future asked for or the group closing; while Works are in flight,
      // look again every kReapInterval for those dropped meanwhile.
      completer_idle_ = in_flight_.empty();
      if (completer_idle_) {
        queue_cv_.wait(lock);
      } else {
        queue_cv_.wait_for(lock, kReapInterval);
      }
      completer_idle_ = false;
      poll = kFirstPoll;
      continue;
    }
    const bool drain = closing_;
    lock.unlock();
    bool done = true;
    for (const c10::intrusive_ptr<WorkNetfold>& w : mine) done = w->Drive(/*block=*/drain) && done;
    mine.clear();  // a dropped Work's last reference goes here, not under the lock
    // Until they are done this thread moves the data path itself, waiting
    // in the library as a blocking wait does (netfold_progress returns at
    // each packet, and at once when a collective starts on another
    // thread). Testing at intervals moved the data only at each test: the
    // library's progress thread takes over only after a millisecond away,
    // so a future-driven allreduce (DDP's) of 1-16 MiB took twice a
    // blocking one's time (docs/performance.md, "Futures"). Not while
    // another thread holds the group's calls: that one drives. (The
    // try_lock is a hint: a call that starts just after it only makes the
    // drive return early.)
    bool drove = false;
    if (!done && !drain && calls_.try_lock()) {
      calls_.unlock();
      drove = netfold_progress(context_->handle(), kDriveUs) == NETFOLD_SUCCESS;
    }
    lock.lock();
    if (done || drove) {
      poll = kFirstPoll;
    } else if (!wanted_ && !closing_) {
      queue_cv_.wait_for(lock, poll);
      poll = std::min(2 * poll, kLongestPoll);
    }
  }
}

void FabricGroup::Destroy() {
  if (getpid() != pid_) {
    // A fork() child's copy: the thread and the group belong to the parent.
    (void)completer_.release();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(calls_);
    if (destroyed_) return;
    destroyed_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    closing_ = true;
  }
  queue_cv_.notify_one();
  if (completer_ != nullptr) completer_->join();
  if (group_ != nullptr) {
    const int rc = netfold_group_destroy(group_);
    group_ = nullptr;
    if (rc != NETFOLD_SUCCESS) {
      std::string message = DescribeFailure("group_destroy", rc);
      if (rc == NETFOLD_ERR_OOB) message += " (" + oob_.last_error() + ")";
      std::fprintf(stderr, "netfold_torch: %s\n", message.c_str());
    }
  }
  context_->Unregister(this);
}

}  // namespace netfold::pytorch
