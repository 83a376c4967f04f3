// A group's fabric side: one fabric group per channel, each with its own
// engine, tree and slots, in its own data plane (docs/host.md,
// "Channels"). With N channels an operation's chunks go to the channels in
// turn (chunk i to channel i mod N: GroupParams::channel), so a large
// vector folds on N switch threads at once. To the group (host/group.h)
// the N engines are one: an operation starts on all, is done and posted
// when it is on all, and fails when it fails on one; a channel that fails
// fails the others, so that the group fails over whole.
//
//   std::vector<FabricChannel> cs;  // from Context::CreateGroup
//   Channels channels(std::move(cs));
//   auto op = *channels.Start(args);
//   while (!channels.Done(op)) { ...the data path moves the engines... }
//   absl::Status s = channels.Finish(op);
//
// The chunks follow the vector as with one engine, so what the failover
// needs holds with the channels' windows together: a member that is behind
// lacks at most each channel's last K chunks, which are among the
// vector's last N x K (window_slots(); KeptResult, host/resync.h).
//
// Thread-safety: none; under the data path's lock, as the engines.
#ifndef NETFOLD_HOST_CHANNELS_H_
#define NETFOLD_HOST_CHANNELS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "host/group_engine.h"
#include "host/resync.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::host {

// One fabric group of a communicator.
struct FabricChannel {
  uint64_t group_id = 0;
  uint32_t plane = 0;  // the data plane of its tree: its leaf link there
  std::optional<transport::Ipv4Endpoint> multicast;  // joined for its results
  std::unique_ptr<GroupEngine> engine;  // GroupParams::channel is its index here
};

class Channels : private ChunkGate {
 public:
  // `channels` is not empty; channel i's engine is channel i of
  // channels.size().
  explicit Channels(std::vector<FabricChannel> channels);
  Channels(const Channels&) = delete;
  Channels& operator=(const Channels&) = delete;

  // Starts the operation on every channel (GroupEngine::Start's errors).
  absl::StatusOr<OpId> Start(const CollectiveArgs& args);
  // Done on every channel, or failed on one (the others are then failed
  // with it).
  bool Done(OpId id);
  // Posted on every channel (GroupEngine::Posted).
  bool Posted(OpId id);
  // The outcome once Done: the first channel's failure, if any; forgets it.
  absl::Status Finish(OpId id);
  // The chunks of an allreduce's result written, over every channel.
  std::optional<WrittenChunks> Written(OpId id) const;
  // Fails every channel (GroupEngine::Fail).
  void Fail(const absl::Status& why);
  // OK while every channel is; else the first channel's failure.
  const absl::Status& failure() const;

  size_t size() const { return channels_.size(); }
  const FabricChannel& channel(size_t i) const { return channels_[i]; }
  GroupEngine& engine(size_t i) { return *channels_[i].engine; }
  // Chunks in flight for the whole group, at most: the channels' K
  // together (the bound a failover's record needs, host/resync.h), and
  // how far apart the chunks written of a result may be (ChunkGate).
  uint32_t window_slots() const { return window_slots_; }
  uint32_t slot_bytes() const { return channels_[0].engine->params().slot_bytes; }
  // The engines' counters together, operations counted once: started,
  // completed where every channel completed them, failed where one failed
  // them (as each becomes done).
  GroupEngineStats stats() const;

 private:
  // A channel failed: the others follow (a group fails over whole).
  void FailTogether();
  // ChunkGate: chunk g may go once every channel has the results of its
  // chunks up to g - window_slots().
  bool MayPost(OpId op, size_t vector_chunk) const override;

  std::vector<FabricChannel> channels_;
  struct Op {
    std::vector<OpId> inner;     // its id on each channel (the first's is its own)
    std::vector<uint8_t> input;  // an in-place reduce-scatter's input (Start)
    bool counted = false;        // in ops_completed_ or ops_failed_
  };
  // Counts `op` once it is done on every channel (Done, Finish, Fail).
  void Count(Op& op);

  uint32_t window_slots_ = 0;  // window_slots()
  std::map<OpId, Op> ops_;
  uint64_t ops_started_ = 0, ops_completed_ = 0, ops_failed_ = 0;
};

// Merges what channels wrote of one allreduce (each marks its own chunks).
WrittenChunks MergeWritten(const std::vector<WrittenChunks>& parts);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_CHANNELS_H_
