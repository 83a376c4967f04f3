// How a reduce in a multicast group delivers its result to the ranks
// (GroupParams::reduce_data, NETFOLD_REDUCE_DATA; docs/host.md).
#ifndef NETFOLD_HOST_REDUCE_DATA_H_
#define NETFOLD_HOST_REDUCE_DATA_H_

#include <cstdint>

namespace netfold::host {

// How a reduce in a multicast group delivers its result to the ranks.
enum class ReduceData : uint8_t {
  // The whole result by multicast to every rank; all but the root drop it
  // (delivery multicast).
  kAll,
  // The data to the root alone, relayed down the tree over RC, and the
  // header to every rank by multicast (delivery root_data): the other
  // ranks receive no data, at the price of the switches' relay.
  kRoot,
  // kAll for a reduce of at most K chunks, kRoot for a longer one
  // (docs/performance.md, "A long reduce's data to its root alone"):
  // within the window the non-roots return at once and the root's result
  // comes sooner by one multicast than through the relay; past it every
  // rank waits for the root, and, measured with the switches in one
  // process on the hosts' cores, what the non-roots would receive and
  // drop cost more than the relay.
  kAuto,
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_REDUCE_DATA_H_
