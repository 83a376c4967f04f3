// The process's netfold context (netfold_init), shared by every netfold
// process group of the process.
//
//   auto ctx = FabricContext::JoinWorld(store, rank, size, timeout);  // the default group
//   auto sub = FabricContext::Current();                               // a dist.new_group
//
// The default process group (init_process_group("netfold")) joins the
// fabric: netfold_init over the world, its out-of-band exchanges on that
// group's store. Every netfold process group then holds the context
// (shared_ptr) and is a netfold group in it, so subgroups need the default
// group to be netfold.
//
// Destroying a netfold group is collective over its members, but Python
// drops process groups in no order that ranks agree on (reference counts,
// the garbage collector, destroy_process_group): a rank that destroyed the
// world group first and one that destroyed a subgroup first would wait for
// each other. So a dropped process group's netfold group is destroyed on a
// thread of its own (Retire): each destroy meets its peers whatever else
// the rank does meanwhile. The context is finalized (netfold_finalize,
// over the world) when the last group holding it is gone, on the thread
// that destroyed that group, or by Shutdown() at interpreter exit
// (netfold_torch's atexit handler), which destroys the groups still held,
// each on a thread of its own, joins every destroying thread, then
// finalizes.
//
// A second default group (init_process_group after destroy_process_group)
// while groups of the first are still alive reuses the context if its rank
// and size are the same, and is refused otherwise.
//
// Thread-safety: the static members and Register/Unregister may be called
// from any thread.
#ifndef NETFOLD_HOST_TORCH_FABRIC_CONTEXT_H_
#define NETFOLD_HOST_TORCH_FABRIC_CONTEXT_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/torch/store_oob.h"
#include "netfold/netfold.h"

namespace netfold::pytorch {

class FabricGroup;

class FabricContext {
 public:
  // Joins the fabric for a default process group (collective over the
  // world), or returns the context this process already joined with the
  // same rank and size. Throws c10::Error with libnetfold's reason.
  static std::shared_ptr<FabricContext> JoinWorld(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::milliseconds timeout);
  // The context of the default process group. Throws if there is none.
  static std::shared_ptr<FabricContext> Current();
  // Destroys `group` (FabricGroup::Destroy, collective over its members)
  // on a thread of its own, and drops it there (which may finalize its
  // context). Returns at once.
  static void Retire(std::shared_ptr<FabricGroup> group);
  // At exit: destroys the groups still held (each on a thread of its own),
  // waits for every retired group to be destroyed, then finalizes. Only in the process that joined (not
  // in a fork() child). Errors are printed, not thrown.
  static void Shutdown();
  // The counters of the current context (netfold_get_stats). Throws if
  // there is none.
  static netfold_stats_t Stats();

  ~FabricContext();  // netfold_finalize, unless Shutdown() did

  FabricContext(const FabricContext&) = delete;
  FabricContext& operator=(const FabricContext&) = delete;

  netfold_context_t handle() const { return ctx_; }
  int world_rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  // A store key prefix for the out-of-band exchanges of a group created
  // now: the same on every rank, unique across contexts and default groups
  // of the process (torch names groups "0", "1", ... again after
  // destroy_process_group).
  std::string GroupScope() const;

  // The groups of this context still held by a process group (Shutdown).
  void Register(const std::shared_ptr<FabricGroup>& group);
  void Unregister(const FabricGroup* group);

 private:
  FabricContext(const c10::intrusive_ptr<c10d::Store>& store, uint64_t generation, int rank,
                int size, std::chrono::milliseconds timeout);
  void Finalize();

  const uint64_t generation_;  // contexts this process joined before, + 1
  std::atomic<uint64_t> world_epoch_{0};  // default groups created on it after the first
  StoreOob world_;             // on the first default group's store
  netfold_context_t ctx_ = nullptr;
  const int pid_;
  std::mutex groups_mu_;
  struct RegisteredGroup {
    const FabricGroup* group;  // what Unregister compares (never dereferenced)
    std::weak_ptr<FabricGroup> alive;
  };
  std::vector<RegisteredGroup> groups_;  // under groups_mu_
};

}  // namespace netfold::pytorch

#endif  // NETFOLD_HOST_TORCH_FABRIC_CONTEXT_H_
