// The window (K slots of P bytes) a job gets when it asks for none: the
// manager's defaults (JobLimits), but no larger than the topology's switches
// hold: P at most the smallest `slot_bytes`, K at most a quarter of the
// fewest `slots`, so that every switch holds four groups of the default
// size (a topology of 64-slot switches gets K = 16, one of 512 or more the
// default 128). Admission applies it to a job's quota; `netfold bench`
// prints it.
//
//   DefaultWindow w = DefaultWindowFor(options.limits, topology);
#ifndef NETFOLD_MANAGER_DEFAULT_WINDOW_H_
#define NETFOLD_MANAGER_DEFAULT_WINDOW_H_

#include <algorithm>
#include <cstdint>

#include "manager/manager_options.h"
#include "manager/topology.h"

namespace netfold::manager {

struct DefaultWindow {
  uint32_t num_slots = 0;   // K
  uint32_t slot_bytes = 0;  // P
};

inline DefaultWindow DefaultWindowFor(const JobLimits& limits, const Topology& topo) {
  uint32_t slots = limits.default_slots_per_group;
  uint32_t bytes = limits.default_slot_bytes;
  for (int s = 0; s < topo.num_switches(); ++s) {
    slots = std::min(slots, topo.switch_at(s).capacity.slots / 4);
    bytes = std::min(bytes, topo.switch_at(s).capacity.slot_bytes);
  }
  return {.num_slots = std::max<uint32_t>(slots, 1), .slot_bytes = std::max<uint32_t>(bytes, 1)};
}

}  // namespace netfold::manager

#endif  // NETFOLD_MANAGER_DEFAULT_WINDOW_H_
