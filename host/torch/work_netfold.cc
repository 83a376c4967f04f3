#include "host/torch/work_netfold.h"

#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

namespace netfold::pytorch {

std::string DescribeFailure(const char* what, int code) {
  std::string message = std::string("netfold ") + what + " failed: " + netfold_strerror(code);
  const std::string detail = netfold_last_error();
  if (!detail.empty()) message += ": " + detail;
  return message;
}

WorkNetfold::WorkNetfold(int rank, c10d::OpType type, std::mutex* calls,
                         std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      calls_(calls),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

WorkNetfold::~WorkNetfold() {
  // A Work is handed to its group's completion thread once started, which
  // holds it until it completes; this only guards a Work dropped between
  // starting a request and being handed over (an exception in between).
  if (!collected_.load()) Drive(/*block=*/true);
}

void WorkNetfold::FailToStart(const std::string& message) {
  if (error_.empty()) error_ = message;
}

bool WorkNetfold::Completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WorkNetfold::Drive(bool block) {
  if (!collected_.load()) {
    std::unique_lock<std::mutex> calls(*calls_, std::defer_lock);
    if (block) {
      calls.lock();
    } else if (!calls.try_lock()) {
      return Completed();
    }
    if (collected_.load()) {
      calls.unlock();  // another thread collected meanwhile; it finishes
    } else {
      const std::string what = c10d::opTypeToString(retrieveOpType());
      while (collected_requests_ < requests_.size()) {
        netfold_request_t request = requests_[collected_requests_];
        const int rc = block ? netfold_request_wait(request) : netfold_request_test(request);
        if (rc == NETFOLD_ERR_IN_PROGRESS) return false;
        if (rc != NETFOLD_SUCCESS && error_.empty()) error_ = DescribeFailure(what.c_str(), rc);
        netfold_request_free(request);
        ++collected_requests_;
      }
      collected_.store(true);
      calls.unlock();
      Finish();
      return true;
    }
  }
  if (!block) return Completed();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_; });
  return true;
}

void WorkNetfold::Finish() {
  std::exception_ptr failure;
  if (!error_.empty()) {
    failure = std::make_exception_ptr(std::runtime_error(error_));
  } else {
    try {
      for (const std::function<void()>& step : steps_) step();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  steps_.clear();  // drops the staging buffers they hold
  held_.clear();
  finish(failure);
  if (failure) {
    future_->setError(failure);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool WorkNetfold::isCompleted() { return Drive(/*block=*/false); }

c10::intrusive_ptr<c10::ivalue::Future> WorkNetfold::getFuture() {
  if (!future_wanted_.exchange(true) && !collected_.load() && wake_) wake_();
  return future_;
}

bool WorkNetfold::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    Drive(/*block=*/true);
  } else {
    // netfold_request_wait has no deadline of its own to pass: poll.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!Drive(/*block=*/false)) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "netfold ",
                  c10d::opTypeToString(retrieveOpType()), ": not complete after ",
                  timeout.count(), " ms (Work.wait timeout)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

}  // namespace netfold::pytorch
