// GroupEngine's operation (group_engine.h): what group_engine.cc and
// group_engine_layout.cc share. Internal to GroupEngine; nothing else
// includes it.
#ifndef NETFOLD_HOST_GROUP_ENGINE_OP_H_
#define NETFOLD_HOST_GROUP_ENGINE_OP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "host/group_engine.h"

namespace netfold::host {

struct GroupEngine::Op {
  OpId id = 0;
  CollectiveArgs args;
  size_t elem_size = 0;
  size_t num_chunks = 1;    // the chunks this channel carries (GroupParams::channel)
  size_t vector_chunks = 1;  // the whole vector's
  size_t chunks_posted = 0;
  size_t chunks_done = 0;
  // With a gate (channels): which chunks have their result, and the first
  // that has not (FirstMissing).
  std::vector<bool> landed;
  size_t first_missing = 0;
  // Blocked operations (CollectiveArgs::blocks): each block's first chunk
  // and first element, and this rank's block.
  std::vector<size_t> block_first_chunk;
  std::vector<size_t> block_first_element;
  size_t my_block = 0;
  // A blocked operation run as one allreduce (LayOutBlocks): an allgather's
  // contribution (its block, zeros elsewhere), a reduce-scatter's whole
  // result, of which its block goes to keep_to when the op completes.
  std::vector<uint8_t> staged;
  uint8_t* keep_to = nullptr;
  size_t keep_from = 0, keep_bytes = 0;
  // An allreduce's chunks whose result reached the caller's buffer (Written).
  std::vector<bool> written;
  // The memory its requests' elements were sent from (the caller's send
  // buffer, or `staged`): the sender may read it until told to let go
  // (ReleaseSent), before the operation is handed back.
  const uint8_t* sent_begin = nullptr;
  const uint8_t* sent_end = nullptr;
  bool sent_released = false;
  // Its multicast results may be written straight into the caller's result
  // buffer (PredictPlaces): that memory is only written until the op is
  // done, so bytes of another datagram written there by mistake are
  // overwritten before anyone reads them.
  bool places_results = false;
  int64_t deadline_ns = 0;
  bool done = false;
  absl::Status status;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_GROUP_ENGINE_OP_H_
