// The c10d::Work of a netfold collective: the libnetfold requests it
// started (netfold_*_nb), what to do once they are done (copy staged
// results into the caller's tensors, divide an AVG), and its future.
//
//   auto work = c10::make_intrusive<WorkNetfold>(rank, c10d::OpType::ALLREDUCE,
//                                                 calls, outputs);
//   group.Start(*work, [&](netfold_group_t g, netfold_request_t* r) {
//     return netfold_allreduce_nb(g, NETFOLD_IN_PLACE, p, n, dtype, op, r);
//   });
//   work->AndThen([=] { tensor.copy_(staged); });
//   group.Submit(work);
//   work->wait();                    // or isCompleted(), or getFuture()->wait()
//
// Completion: whichever thread gets there first collects the requests —
// the caller in wait() (netfold_request_wait: the caller's thread drives
// the data path, as a blocking collective does) or isCompleted()
// (netfold_request_test), or the group's completion thread (fabric_group.h)
// for a Work nobody will wait for: one whose future was asked for (DDP
// waits on futures) or that its caller dropped, so that it still completes
// and releases its tensors. libnetfold allows one thread at a time on a group, so each of
// them calls netfold's group and request functions only while holding the
// group's `calls` mutex; wait() blocks on it, isCompleted() and the
// completion thread only try it (the completion thread's netfold_progress,
// a call on the context, takes no group mutex). The
// finishing step, the Work's own completion and the future (whose
// callbacks run inline) happen after the mutex is released.
//
// Thread-safety: every public member may be called from any thread.
#ifndef NETFOLD_HOST_TORCH_WORK_NETFOLD_H_
#define NETFOLD_HOST_TORCH_WORK_NETFOLD_H_

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "netfold/netfold.h"

namespace netfold::pytorch {

class WorkNetfold : public c10d::Work {
 public:
  // `calls`: the mutex of the group's netfold calls, which must outlive the
  // Work's requests (the group completes every Work before it goes).
  // `outputs`: result() and the future's value.
  WorkNetfold(int rank, c10d::OpType type, std::mutex* calls, std::vector<at::Tensor> outputs);
  ~WorkNetfold() override;

  bool isCompleted() override;
  // kNoTimeout: waits with libnetfold's deadline (NETFOLD_TIMEOUT_MS).
  // Throws the operation's error.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  // Marks the Work as wanted by someone who will not call wait() (a
  // future's waiter, DDP's comm hook) and wakes the group's completion
  // thread, which then completes it.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Keeps `buffer` alive until the requests are done: every buffer handed
  // to libnetfold is held here (a staging copy would otherwise be freed
  // while the fabric still reads or writes it). Only before Submit.
  void Hold(at::Tensor buffer) { held_.push_back(std::move(buffer)); }
  // Adds a step to run once every request succeeded, after the steps added
  // before it (copying staged results out, dividing an AVG). A step may
  // throw: the Work then fails with its message. Only before Submit.
  void AndThen(std::function<void()> step) { steps_.push_back(std::move(step)); }

  // For FabricGroup, with `calls` held: a started request, or the error of
  // one that did not start (the Work then fails with it once the requests
  // that did start are done).
  void AddRequest(netfold_request_t request) { requests_.push_back(request); }
  void FailToStart(const std::string& message);

  // Collects the requests if they are done (waiting for them if `block`)
  // and completes the Work. Returns whether the Work is complete.
  bool Drive(bool block);
  bool Completed();
  // For FabricGroup: called (once) by getFuture() while the Work is in
  // flight. Only before Submit.
  void OnFutureWanted(std::function<void()> wake) { wake_ = std::move(wake); }
  bool future_wanted() const { return future_wanted_.load(); }

 private:
  // Runs the steps, completes the Work and its future. Once, without `calls`.
  void Finish();

  std::mutex* calls_;
  std::vector<netfold_request_t> requests_;  // under *calls_
  size_t collected_requests_ = 0;            // under *calls_
  std::string error_;                        // under *calls_ until collected_
  std::atomic<bool> collected_{false};
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> held_;
  std::vector<std::function<void()>> steps_;
  std::function<void()> wake_;
  std::atomic<bool> future_wanted_{false};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// "netfold allreduce failed: timeout: <netfold_last_error()>": for a
// failed netfold call, on the thread that made it.
std::string DescribeFailure(const char* what, int code);

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_WORK_NETFOLD_H_
