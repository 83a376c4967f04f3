#include "host/grants.h"

#include <algorithm>

#include "netfold/netfold.h"

namespace netfold::host {

uint32_t JobChannels(uint32_t most_asked, uint32_t planes, uint32_t num_slots) {
  const uint32_t by_window = NETFOLD_WRITTEN_WINDOW / std::max<uint32_t>(num_slots, 1);
  return std::clamp<uint32_t>(most_asked, 1, std::max<uint32_t>(1, std::min(planes, by_window)));
}

bool ChannelsAlike(const std::vector<control::GroupInfo>& infos) {
  if (infos.empty()) return true;
  auto shape = [](const control::GroupInfo& info) {
    std::vector<std::vector<int32_t>> nodes;
    for (const control::GroupNode& node : info.nodes()) {
      nodes.emplace_back(node.children().begin(), node.children().end());
    }
    return nodes;
  };
  const control::GroupInfo& first = infos.front();
  const auto first_shape = shape(first);
  return std::all_of(infos.begin(), infos.end(), [&](const control::GroupInfo& i) {
    return i.num_slots() == first.num_slots() && i.slot_bytes() == first.slot_bytes() &&
           i.delivery() == first.delivery() && shape(i) == first_shape;
  });
}

std::optional<algorithms::TreeSpec> FabricTree(const control::GroupInfo& info,
                                               const std::vector<int>& world_ranks) {
  algorithms::TreeSpec tree;
  for (const control::GroupNode& node : info.nodes()) {
    std::vector<int>& children = tree.children.emplace_back();
    for (int32_t c : node.children()) {
      if (c >= 0) {
        children.push_back(c);
        continue;
      }
      const int world = -1 - c;
      auto it = std::find(world_ranks.begin(), world_ranks.end(), world);
      if (it == world_ranks.end()) return std::nullopt;
      children.push_back(-1 - static_cast<int>(it - world_ranks.begin()));
    }
  }
  if (tree.children.empty() || !tree.Validate(static_cast<uint32_t>(world_ranks.size())).ok()) {
    return std::nullopt;
  }
  return tree;
}

}  // namespace netfold::host
