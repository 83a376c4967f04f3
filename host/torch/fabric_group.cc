#include "host/torch/fabric_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace netfold::pytorch {
namespace {

constexpr std::chrono::microseconds kFirstPoll(50);
constexpr std::chrono::microseconds kLongestPoll(2000);

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
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    in_flight_.push_back(std::move(work));
  }
  queue_cv_.notify_one();
}

void FabricGroup::CompleteInOrder() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  std::chrono::microseconds poll = kFirstPoll;
  while (true) {
    queue_cv_.wait(lock, [&] { return !in_flight_.empty() || closing_; });
    if (in_flight_.empty()) return;  // closing, and nothing left
    c10::intrusive_ptr<WorkNetfold> work = in_flight_.front();
    const bool drain = closing_;
    lock.unlock();
    const bool done = work->Drive(/*block=*/drain);
    lock.lock();
    if (done) {
      in_flight_.pop_front();
      poll = kFirstPoll;
      continue;
    }
    queue_cv_.wait_for(lock, poll);
    poll = std::min(2 * poll, kLongestPoll);
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
