// A group of ranks in a context (host/context.h): its collectives run on
// the fabric (Channels: a GroupEngine per channel, host/channels.h) or,
// when the fabric cannot serve it or fails, on the hosts (HostCollectives;
// docs/algorithms.md, "In libnetfold"). The group sees its context only
// through GroupOwner.
//
//   auto group = *ctx->CreateGroup(group_oob, world_ranks);    // collective
//   auto op = *group->Start({.dtype = ..., .send = in, .recv = out, .count = n});
//   absl::Status s = group->Wait(op);
//   group->Destroy(group_oob);                                 // collective
//
// Every call takes the data path's lock (GroupOwner::progress()) for the
// time it touches the data path; calls on one group must still come one at
// a time (operations are ordered per group, as MPI orders collectives).
#ifndef NETFOLD_HOST_GROUP_H_
#define NETFOLD_HOST_GROUP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/channels.h"
#include "host/group_engine.h"
#include "host/host_collectives.h"
#include "host/oob.h"
#include "host/progress_thread.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::host {

class Group;

// What a group needs of the context that made it (host/context.h), and
// nothing more: the data path's lock and progress, the manager, its own
// rank and the operations' deadline.
class GroupOwner {
 public:
  virtual ~GroupOwner() = default;
  // The data path's lock (held inside every call that touches it) and the
  // thread that drives it while the application is away.
  virtual ProgressThread& progress() = 0;
  // Moves the context's data path, waiting at most `timeout`; with the
  // data path's lock held.
  virtual void Progress(absl::Duration timeout) = 0;
  // Releases the group at the manager (group rank 0 calls it);
  // `fabric_failed`: the fabric failed under the group (revoked, gone), so
  // there is no point waiting for a manager that does not answer.
  virtual absl::Status ReleaseAtManager(uint64_t group_id, bool fabric_failed) = 0;
  // The group is going away: stop routing to it, keep its counters.
  virtual void Forget(Group& group) = 0;
  virtual int world_rank() const = 0;
  virtual absl::Duration op_timeout() const = 0;
  // A group waits (for an operation, in Wait or Test, or in its
  // failover's exchanges): the owner's groups follow a failover their
  // members started (Group::FollowFailover), since those members may wait
  // for this rank there before they come to the operation it waits for.
  // Cheap when nothing failed.
  virtual void WhileWaiting() {}
};

// How a context sets a group up (Context::CreateGroup).
struct GroupSetup {
  uint64_t group_id = 0;  // its first channel's fabric group
  int group_rank = 0;
  std::vector<int> world_ranks;  // by group rank
  // Its fabric groups (host/channels.h), in channel order; empty: the
  // hosts serve it from the start.
  std::vector<FabricChannel> channels;
  std::unique_ptr<HostCollectives> host;   // null: no host fallback (policy innetwork)
  std::string description;
  // Reduces this rank is not the root of that may complete in the
  // background at once (Wait releases them; ContextOptions::released_reduces).
  int released_reduces = 8;
};

class Group {
 public:
  // `owner` must outlive the group or call Orphan() first.
  Group(GroupOwner* owner, GroupSetup setup)
      : owner_(owner),
        group_id_(setup.group_id),
        group_rank_(setup.group_rank),
        world_ranks_(std::move(setup.world_ranks)),
        mode_(setup.channels.empty() ? Mode::kHost : Mode::kFabric),
        fabric_(setup.channels.empty() ? nullptr
                                       : std::make_unique<Channels>(std::move(setup.channels))),
        host_(std::move(setup.host)),
        description_(std::move(setup.description)),
        max_released_(setup.released_reduces) {}
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Starts a collective. `args.root` is a group rank; InvalidArgument for a
  // bad root or buffers, Unimplemented for an op MPI forbids on the type.
  absl::StatusOr<OpId> Start(CollectiveArgs args);
  // Makes progress; true once the op is done. A failover (below) runs
  // inside the call that notices the fabric failed.
  bool Test(OpId id);
  // Waits for `id` (deadline: the owner's timeout + margin) and returns its
  // outcome; the op is forgotten. A reduce at a rank that is not its root
  // is released as soon as its input has left (MPI allows it): Wait returns
  // OK once every chunk is posted, and the operation completes in the
  // background (below, "released reduces").
  // `written`, if given: for an allreduce that ran on the fabric, which
  // chunks of its result had reached the buffer (GroupEngine::Written;
  // nullopt if that is not known).
  absl::Status Wait(OpId id, std::optional<WrittenChunks>* written = nullptr);
  // Collective over the members: waits for the released reduces, then
  // releases the group at the manager.
  absl::Status Destroy(Oob& group_oob);
  // The same, unless every member may keep the group (`keep_vote` set,
  // the same at every member, and the group Keepable): then it stays as it
  // is, on the fabric and at the manager, and true says so
  // (Context::DestroyGroup keeps it for the next group of the same
  // members). The members agree in the exchange the release waits in
  // anyway.
  absl::StatusOr<bool> DestroyOrKeep(Oob& group_oob, std::optional<uint64_t> keep_vote);
  // On the fabric with nothing pending, failed or deferred: it can serve
  // another communicator of its members as it is. Under the data path's
  // lock.
  bool Keepable() const;
  // A kept group given to a new group of its members: usable again (while
  // kept it counts as destroyed: it follows no failover, since members
  // that dropped it would never answer). Under the data path's lock.
  void Reopen() { destroyed_ = false; }
  // The owner went first (Orphan): nothing is left to release.
  bool orphaned() const { return owner_ == nullptr; }
  // Something of the caller's that stays with the group while it is kept
  // (the C API's netfold_group_keep_data): `release(data)` runs when the
  // group goes, unless TakeData took it back first.
  void KeepData(void* data, void (*release)(void*)) {
    data_ = data;
    release_data_ = release;
  }
  void* TakeData() {
    release_data_ = nullptr;
    return std::exchange(data_, nullptr);
  }
  // Releases what KeepData gave now rather than when the group goes.
  void ReleaseData() {
    auto release = std::exchange(release_data_, nullptr);
    if (release != nullptr) release(std::exchange(data_, nullptr));
  }
  // Called by the owner while one of its groups waits
  // (GroupOwner::WhileWaiting): if the fabric failed under this group, or
  // a member went over to the hosts, this one follows now (Failover)
  // rather than when the application next calls it: a member blocked in
  // this group's failover would otherwise wait for this rank, which waits
  // for it in another group's operation. A group on the hosts moves its
  // host operations instead: its failover's exchanges may be suspended
  // further up this thread's stack (the other group's failover was
  // followed from them), and members wait for them there.
  void FollowFailover();
  // The owner is going (a context finalized before its groups): releases
  // the host algorithms' queue pairs while the owner's endpoint still
  // exists; every later call fails with FailedPrecondition.
  void Orphan() {
    owner_ = nullptr;
    host_.reset();
  }

  uint64_t group_id() const { return group_id_; }
  int rank() const { return group_rank_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  // Its fabric groups and their engines (host/channels.h); null for a
  // group the hosts serve from the start.
  Channels* fabric() { return fabric_.get(); }
  const Channels* fabric() const { return fabric_.get(); }
  // True while the fabric serves the group; false once the hosts do (from
  // the start, or after a failover).
  bool on_fabric() const { return mode_ == Mode::kFabric; }
  // A human-readable description (tree, switches, K, P; or the host algorithm).
  const std::string& description() const { return description_; }
  uint64_t host_ops() const { return host_ops_; }
  bool failed_over() const { return failed_over_; }
  // The fabric had failed under the group when it was destroyed.
  bool fabric_failed() const { return fabric_failed_; }

 private:
  enum class Mode { kFabric, kHost };
  // An operation between Start and Wait.
  struct Pending {
    CollectiveArgs args;               // root: the world rank (fabric) as started
    uint32_t group_root = 0;           // root as a group rank
    std::vector<uint8_t> saved_input;  // in-place input, kept for a re-run
    bool on_host = false;
    OpId inner = 0;                    // the fabric's or the host's op id
    std::optional<absl::Status> outcome;  // set once settled
    // A non-root's reduce (Wait returns once it is posted) and its copy of
    // the input, kept for a failover when the hosts may have to run it again.
    bool released = false;
    bool detached = false;  // Wait returned; Settle forgets it once settled
    std::vector<uint8_t> owned_input;
    std::optional<WrittenChunks> written;  // an allreduce's, once settled (Wait)
  };
  // What the ranks ahead hand to those behind in a failover (the last
  // operation completed on the fabric).
  struct LastOp {
    proto::CollectiveType collective = proto::CollectiveType::kBarrier;
    uint32_t group_root = 0;
    proto::DataType dtype = proto::DataType::kInt32;  // reduce: to run it again
    proto::ReduceOp op = proto::ReduceOp::kSum;
    size_t count = 0;
    std::vector<size_t> blocks;   // allgather, reduce-scatter
    size_t result_bytes = 0;      // allreduce, bcast: the result's size
    std::vector<uint8_t> result;  // and its end (KeptResult, host/resync.h)
    size_t input_bytes = 0;       // reduce: the input's size
    std::vector<uint8_t> input;   // and its end (KeptInput; a reduce-scatter's all)
  };
  class HostResyncExchange;

  void Progress(absl::Duration timeout);
  // On the fabric with a host fallback: a member that went over to the
  // hosts fails the fabric here too, so that this one follows.
  void FollowMembersOnHosts();
  // Whether operation `p` may be released now (posted, on the fabric, and
  // room among the detached).
  bool CanDetach(const Pending& p) const;
  // Progress until no detached operation is left or the deadline passes.
  void DrainDetached();
  // The failure of a released reduce not reported yet, as this call's error.
  absl::Status TakeDeferred();
  // Settles the fabric operations that are done, in start order, and fails
  // over when one failed in a way the hosts can repair.
  void Settle();
  void Record(const Pending& p);
  void Failover(const absl::Status& why);
  // One round of the failover's resync (host/resync.h) for the first
  // unsettled operation; true if the members were not in step, so that
  // another round is due.
  absl::StatusOr<bool> Resync();
  // Fails over a group on the fabric whose engine failed (Progress, Start).
  void FailOverIfTheFabricFailed();
  // Inside, in a long wait (an operation, a failover's exchange): another
  // application thread waiting to come in (MPI_THREAD_MULTIPLE) is let in,
  // since its peers on other ranks may be waiting for its operation while
  // ours wait for this one; holding the data path through the wait would
  // deadlock the two threads across ranks. The other thread may begin this
  // group's failover meanwhile: callers look (AwaitOthersFailover).
  void LetOthersIn();
  // Another thread is in this group's Failover (this one must not touch
  // its operations).
  bool OtherThreadFailingOver() const;
  // Inside: while another thread is in this group's failover (outside the
  // lock in one of its exchanges, LetOthersIn), waits outside until it is
  // over, so that no operation of the group starts or settles in the
  // middle of it. False if it lasted beyond every deadline.
  bool AwaitOthersFailover();
  absl::Status OthersFailoverTooLong();
  absl::Status StartOnHost(Pending& p);

  GroupOwner* owner_;
  const uint64_t group_id_;
  const int group_rank_;
  const std::vector<int> world_ranks_;
  Mode mode_;
  std::unique_ptr<Channels> fabric_;
  std::unique_ptr<HostCollectives> host_;
  std::map<OpId, Pending> ops_;
  OpId next_id_ = 1;
  uint64_t completed_ = 0;  // operations settled in start order
  LastOp last_;
  uint64_t host_ops_ = 0;
  bool failed_over_ = false;
  // The thread in this group's Failover, if one is (it may be outside the
  // lock, in an exchange: LetOthersIn).
  std::optional<std::thread::id> failing_over_;
  bool fabric_failed_ = false;
  void* data_ = nullptr;  // KeepData
  void (*release_data_)(void*) = nullptr;
  std::string description_;
  bool destroyed_ = false;  // or kept (Context::DestroyGroup) until Reopen
  // Released reduces whose Wait returned and which are not settled yet,
  // their owned bytes, and the first failure among them: the next Start
  // (or Destroy) of the group returns it.
  int detached_ = 0;
  int max_released_ = 8;
  size_t detached_bytes_ = 0;
  absl::Status deferred_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_GROUP_H_
