// What the manager grants a job and its groups, as the host reads it
// (docs/host.md, "Data planes" and "Channels"): how many channels the job
// takes, whether several groups granted for one communicator can be its
// channels, and the tree its hosts fall back on. Pure functions of the
// manager's answers, the same at every rank given the same answers.
//
//   uint32_t n = JobChannels(most_asked, attached.planes(), quota_k);
//   if (!ChannelsAlike(infos)) { ...one channel... }
//   std::optional<algorithms::TreeSpec> t = FabricTree(infos[0], world_ranks);
//
// Thread-safety: pure functions.
#ifndef NETFOLD_HOST_GRANTS_H_
#define NETFOLD_HOST_GRANTS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "host/algorithms/tree_spec.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::host {

// The channels a job takes: the most any rank asks for (NETFOLD_CHANNELS),
// at least 1, at most the fabric's planes, and at most as many as keep the
// chunks written of a result within the window the C API can describe
// (NETFOLD_WRITTEN_WINDOW chunks, netfold_request_written: the channels'
// gate keeps them within channels x K of each other, host/channels.h).
uint32_t JobChannels(uint32_t most_asked, uint32_t planes, uint32_t num_slots);

// Whether every group can be a channel of the first one's: the same slots
// (K, P, delivery), and a tree of the same shape (the same nodes in the
// same order, each with the same children: switch nodes by index, ranks by
// world rank), so that a channel cuts and folds its chunks as another
// would. True for one group, and for none.
bool ChannelsAlike(const std::vector<control::GroupInfo>& infos);

// The group's planned tree with group ranks as leaves (tree-order mode);
// nullopt if the manager did not send it or it does not describe exactly
// the group's members (`world_ranks`: group rank -> world rank).
std::optional<algorithms::TreeSpec> FabricTree(const control::GroupInfo& info,
                                               const std::vector<int>& world_ranks);

}  // namespace netfold::host

#endif  // NETFOLD_HOST_GRANTS_H_
