// The out-of-band collectives libnetfold needs (netfold_oob_t: allgather,
// bcast, barrier) over the c10d::Store that torch hands a process group:
// TCPStore under torchrun and env://, wrapped in the group's PrefixStore.
// netfold_init uses them over the world, netfold_group_create and
// netfold_group_destroy over a group's members; never the data path.
//
//   StoreOob oob(store, "netfold/world/1", rank, size, std::chrono::seconds(300));
//   netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
//   spec.oob = oob.callbacks();
//   if (netfold_init(&spec, &ctx) == NETFOLD_ERR_OOB) puts(oob.last_error().c_str());
//
// Every call is a round of keys `SCOPE/N/...` (N counts the calls, the
// same on every rank because the calls are collective): each rank sets its
// own keys and waits for the others' with `timeout`, so a rank that never
// comes ends the call with an error, not a hang. Waits poll the store
// (check(), 100 us doubling to 10 ms) instead of blocking in its wait(),
// which would hold a TCPStore client's connection: several StoreOobs on
// one store (groups created and destroyed on several threads) would then
// wait for each other. A rank deletes the keys it
// set before call N once it has seen every rank's key of call N (an
// allgather or a barrier: every rank is past the earlier calls, so has read
// them), so the store keeps only the keys of the last calls per scope.
//
// The callbacks return 0 or -1 and never throw (they are called from C);
// last_error() says what failed (a timeout, a lost store). Not
// thread-safe: libnetfold calls them from the thread of the netfold call.
#ifndef NETFOLD_HOST_TORCH_STORE_OOB_H_
#define NETFOLD_HOST_TORCH_STORE_OOB_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "netfold/netfold.h"

namespace netfold::pytorch {

class StoreOob {
 public:
  // `scope` must be the same on every rank of this OOB and different from
  // every other scope on `store`.
  StoreOob(c10::intrusive_ptr<c10d::Store> store, std::string scope, int rank, int size,
           std::chrono::milliseconds timeout);
  StoreOob(const StoreOob&) = delete;
  StoreOob& operator=(const StoreOob&) = delete;

  // The callbacks for netfold_init_spec_t / netfold_group_spec_t; their
  // ctx is this object, which must outlive every netfold call given them.
  netfold_oob_t callbacks();

  // recv gets size() * bytes, in rank order. 0 on success, -1 on failure.
  int Allgather(const void* send, void* recv, size_t bytes);
  // `bytes` bytes of `root`'s buf into everyone's buf.
  int Bcast(void* buf, size_t bytes, int root);
  int Barrier();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // What the last failed call met ("" after a success).
  const std::string& last_error() const { return last_error_; }

 private:
  // The key prefix of the next call.
  std::string NextRound();
  // Waits for `keys` until the deadline, polling. Throws (c10::Error) on
  // failure; the public calls turn that into -1 and last_error_.
  void WaitFor(const std::vector<std::string>& keys);
  // Ends a round in which this rank set `mine`. `saw_everyone`: every
  // rank's key of this round was there, so every rank has read the keys
  // of earlier rounds, and those this rank set are deleted.
  void EndRound(std::vector<std::string> mine, bool saw_everyone);

  c10::intrusive_ptr<c10d::Store> store_;
  std::string scope_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  uint64_t round_ = 0;
  std::vector<std::string> previous_keys_;
  std::string last_error_;
};

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_STORE_OOB_H_
