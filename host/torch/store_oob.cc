#include "host/torch/store_oob.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

namespace netfold::pytorch {
namespace {

// How often a wait asks the store: soon at first (ranks usually arrive
// together), then at most every 10 ms.
constexpr std::chrono::microseconds kFirstPause(100);
constexpr std::chrono::microseconds kLongestPause(10000);

int AllgatherCallback(void* ctx, const void* send, void* recv, size_t bytes) {
  return static_cast<StoreOob*>(ctx)->Allgather(send, recv, bytes);
}
int BcastCallback(void* ctx, void* buf, size_t bytes, int root) {
  return static_cast<StoreOob*>(ctx)->Bcast(buf, bytes, root);
}
int BarrierCallback(void* ctx) { return static_cast<StoreOob*>(ctx)->Barrier(); }

std::string Describe(const std::exception& e) {
  // c10::Error::what() carries a backtrace; the message alone is enough.
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->msg();
  return e.what();
}

}  // namespace

StoreOob::StoreOob(c10::intrusive_ptr<c10d::Store> store, std::string scope, int rank, int size,
                   std::chrono::milliseconds timeout)
    : store_(std::move(store)), scope_(std::move(scope)), rank_(rank), size_(size),
      timeout_(timeout) {}

netfold_oob_t StoreOob::callbacks() {
  return netfold_oob_t{AllgatherCallback, BcastCallback, BarrierCallback, this};
}

std::string StoreOob::NextRound() { return scope_ + "/" + std::to_string(round_++) + "/"; }

void StoreOob::WaitFor(const std::vector<std::string>& keys) {
  // Polled with check() rather than the store's wait(): a TCPStore client
  // holds its one connection for the whole of a wait(), so the other
  // threads of the process (another group being created or destroyed on
  // the same store) could not set the keys their peers wait for.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::chrono::microseconds pause = kFirstPause;
  while (true) {
    try {
      if (store_->check(keys)) return;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "the store failed while waiting for ", keys.size(), " rank(s) of ",
                  scope_, " (", Describe(e), ")");
    }
    TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "waited ", timeout_.count(),
                " ms in the store for ", keys.size(), " rank(s) of ", scope_);
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, kLongestPause);
  }
}

void StoreOob::EndRound(std::vector<std::string> mine, bool saw_everyone) {
  if (saw_everyone) {
    for (const std::string& key : previous_keys_) store_->deleteKey(key);
    previous_keys_.clear();
  }
  previous_keys_.insert(previous_keys_.end(), mine.begin(), mine.end());
  last_error_.clear();
}

int StoreOob::Allgather(const void* send, void* recv, size_t bytes) {
  try {
    const std::string round = NextRound();
    const std::string own = round + std::to_string(rank_);
    const auto* in = static_cast<const uint8_t*>(send);
    store_->set(own, std::vector<uint8_t>(in, in + bytes));
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(round + std::to_string(r));
    WaitFor(keys);
    auto* out = static_cast<uint8_t*>(recv);
    for (int r = 0; r < size_; ++r) {
      const std::vector<uint8_t> value = r == rank_ ? std::vector<uint8_t>(in, in + bytes)
                                                    : store_->get(keys[static_cast<size_t>(r)]);
      TORCH_CHECK(value.size() == bytes, "rank ", r, " of ", scope_, " gave ", value.size(),
                  " bytes, this rank ", bytes);
      if (bytes > 0) std::memcpy(out + static_cast<size_t>(r) * bytes, value.data(), bytes);
    }
    EndRound({own}, /*saw_everyone=*/true);
    return 0;
  } catch (const std::exception& e) {
    last_error_ = "allgather over the store failed: " + Describe(e);
    return -1;
  }
}

int StoreOob::Bcast(void* buf, size_t bytes, int root) {
  try {
    TORCH_CHECK(root >= 0 && root < size_, "root ", root, " is not a rank of ", size_);
    const std::string key = NextRound() + "root";
    auto* data = static_cast<uint8_t*>(buf);
    if (rank_ == root) {
      store_->set(key, std::vector<uint8_t>(data, data + bytes));
      EndRound({key}, /*saw_everyone=*/false);
      return 0;
    }
    WaitFor({key});
    const std::vector<uint8_t> value = store_->get(key);
    TORCH_CHECK(value.size() == bytes, "the root of ", scope_, " sent ", value.size(),
                " bytes, this rank expected ", bytes);
    if (bytes > 0) std::memcpy(data, value.data(), bytes);
    EndRound({}, /*saw_everyone=*/false);
    return 0;
  } catch (const std::exception& e) {
    last_error_ = "bcast over the store failed: " + Describe(e);
    return -1;
  }
}

int StoreOob::Barrier() {
  try {
    const std::string round = NextRound();
    const std::string own = round + std::to_string(rank_);
    store_->set(own, std::vector<uint8_t>());
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(round + std::to_string(r));
    WaitFor(keys);
    EndRound({own}, /*saw_everyone=*/true);
    return 0;
  } catch (const std::exception& e) {
    last_error_ = "barrier over the store failed: " + Describe(e);
    return -1;
  }
}

}  // namespace netfold::pytorch
