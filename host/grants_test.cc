#include "host/grants.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "netfold/netfold.h"

namespace netfold::host {
namespace {

// A group of a root over two leaves: world ranks 4, 6 on the first leaf,
// 5 on the second.
control::GroupInfo Granted(uint32_t k = 8, uint32_t p = 1024,
                           control::DeliveryMode delivery = control::DELIVERY_MULTICAST) {
  control::GroupInfo info;
  info.set_num_slots(k);
  info.set_slot_bytes(p);
  info.set_delivery(delivery);
  for (const std::vector<int32_t>& children :
       std::vector<std::vector<int32_t>>{{1, 2}, {-1 - 4, -1 - 6}, {-1 - 5}}) {
    control::GroupNode* node = info.add_nodes();
    for (int32_t c : children) node->add_children(c);
  }
  return info;
}

TEST(JobChannels, TheMostAskedForWithinThePlanesAndTheWindow) {
  EXPECT_EQ(JobChannels(0, 4, 128), 1u);  // nobody asked
  EXPECT_EQ(JobChannels(1, 4, 128), 1u);
  EXPECT_EQ(JobChannels(3, 4, 128), 3u);
  EXPECT_EQ(JobChannels(16, 4, 128), 4u);  // the planes
  EXPECT_EQ(JobChannels(2, 1, 128), 1u);
  // The written window: channels x K chunks at most NETFOLD_WRITTEN_WINDOW.
  EXPECT_EQ(JobChannels(16, 16, 128), NETFOLD_WRITTEN_WINDOW / 128u);
  EXPECT_EQ(JobChannels(16, 16, 256), NETFOLD_WRITTEN_WINDOW / 256u);
  EXPECT_EQ(JobChannels(4, 16, NETFOLD_WRITTEN_WINDOW), 1u);
  EXPECT_EQ(JobChannels(4, 16, 4 * NETFOLD_WRITTEN_WINDOW), 1u);  // one, never none
  EXPECT_EQ(JobChannels(4, 16, 0), 4u);                            // no K yet: the planes
  for (uint32_t k : {1u, 8u, 64u, 100u, 128u, 256u, 1000u}) {
    for (uint32_t asked = 0; asked <= 16; ++asked) {
      const uint32_t n = JobChannels(asked, 16, k);
      EXPECT_GE(n, 1u);
      EXPECT_TRUE(n == 1 || n * k <= NETFOLD_WRITTEN_WINDOW) << "K " << k << " asked " << asked;
    }
  }
}

TEST(ChannelsAlike, TheSameSlotsDeliveryAndTreeShape) {
  EXPECT_TRUE(ChannelsAlike({}));
  EXPECT_TRUE(ChannelsAlike({Granted()}));
  // Another plane's group: other ids, switches and addresses, the same shape.
  control::GroupInfo other = Granted();
  other.set_group_id(9);
  other.set_tree_id(3);
  other.set_plane(1);
  other.set_root_switch("root@1");
  other.set_multicast_address("239.77.0.9:4791");
  other.mutable_nodes(0)->set_name("root@1");
  EXPECT_TRUE(ChannelsAlike({Granted(), other}));

  EXPECT_FALSE(ChannelsAlike({Granted(), Granted(16)}));
  EXPECT_FALSE(ChannelsAlike({Granted(), Granted(8, 2048)}));
  EXPECT_FALSE(ChannelsAlike({Granted(), Granted(8, 1024, control::DELIVERY_RC_DOWN)}));
  EXPECT_FALSE(ChannelsAlike({Granted(), Granted(), Granted(4)}));  // the third differs
  // The leaves in the other order: the root would fold them in another.
  control::GroupInfo swapped = Granted();
  swapped.mutable_nodes(0)->set_children(0, 2);
  swapped.mutable_nodes(0)->set_children(1, 1);
  EXPECT_FALSE(ChannelsAlike({Granted(), swapped}));
  // A rank on another leaf.
  control::GroupInfo moved = Granted();
  moved.mutable_nodes(1)->set_children(1, -1 - 5);
  moved.mutable_nodes(2)->set_children(0, -1 - 6);
  EXPECT_FALSE(ChannelsAlike({Granted(), moved}));
  // One switch for all.
  control::GroupInfo flat = Granted();
  flat.clear_nodes();
  control::GroupNode* only = flat.add_nodes();
  for (int32_t c : {-1 - 4, -1 - 6, -1 - 5}) only->add_children(c);
  EXPECT_FALSE(ChannelsAlike({Granted(), flat}));
}

TEST(FabricTree, TheManagersTreeWithGroupRanksAsLeaves) {
  // Group ranks 0, 1, 2 are world ranks 4, 5, 6.
  const std::optional<algorithms::TreeSpec> tree = FabricTree(Granted(), {4, 5, 6});
  ASSERT_TRUE(tree.has_value());
  const algorithms::TreeSpec expected{.children = {{1, 2}, {-1, -3}, {-2}}};
  EXPECT_EQ(tree->ToString(), expected.ToString());
  // A member the tree lacks, a leaf that is no member, no tree at all.
  EXPECT_FALSE(FabricTree(Granted(), {4, 5, 6, 7}).has_value());
  EXPECT_FALSE(FabricTree(Granted(), {4, 5}).has_value());
  EXPECT_FALSE(FabricTree(control::GroupInfo(), {4, 5, 6}).has_value());
  // A cycle is no tree.
  control::GroupInfo cycle = Granted();
  cycle.mutable_nodes(2)->add_children(0);
  EXPECT_FALSE(FabricTree(cycle, {4, 5, 6}).has_value());
}

}  // namespace
}  // namespace netfold::host
