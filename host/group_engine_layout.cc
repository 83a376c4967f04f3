// How GroupEngine lays an operation out (group_engine.h): elements per
// chunk, the blocks of an allgather or a reduce-scatter, the chunks one
// channel carries, and where a chunk's elements are sent from and its
// result goes. Split from group_engine.cc.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "host/group_engine.h"
#include "host/group_engine_op.h"

namespace netfold::host {

using proto::CollectiveType;

size_t GroupEngine::ElementsPerChunk(const Op& op) const {
  return op.elem_size == 0 ? 0 : ChunkBytes() / op.elem_size;
}

absl::Status GroupEngine::LayOutBlocks(Op& op) const {
  const CollectiveArgs& a = op.args;
  if (a.collective != CollectiveType::kBcast && a.collective != CollectiveType::kReduce) {
    return absl::InvalidArgumentError("only bcast and reduce come in blocks");
  }
  if (a.blocks.size() != params_.members.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d blocks for a group of %d ranks", a.blocks.size(), params_.members.size()));
  }
  auto me = std::find(params_.members.begin(), params_.members.end(), params_.rank);
  if (me == params_.members.end()) return absl::InvalidArgumentError("this rank is no member");
  op.my_block = static_cast<size_t>(me - params_.members.begin());
  const size_t per_chunk = ElementsPerChunk(op);
  size_t elements = 0, chunks = 0;
  for (size_t b : a.blocks) {
    op.block_first_chunk.push_back(chunks);
    op.block_first_element.push_back(elements);
    elements += b;
    chunks += per_chunk == 0 ? 0 : (b + per_chunk - 1) / per_chunk;
  }
  if (elements != a.count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the blocks hold %d elements, the operation %d", elements, a.count));
  }
  // The root of an empty operation's one chunk (a barrier in effect).
  op.args.root = params_.members.front();
  if (a.count == 0) return absl::OkStatus();
  op.num_chunks = chunks;
  const size_t mine = a.blocks[op.my_block];
  const bool allgather = a.collective == CollectiveType::kBcast;
  const size_t send_elements = allgather ? mine : a.count;
  const size_t recv_elements = allgather ? a.count : mine;
  if ((send_elements > 0 && a.send == nullptr) || (recv_elements > 0 && a.recv == nullptr)) {
    return absl::InvalidArgumentError("null buffer for a non-empty operation");
  }
  // Blocks smaller than a slot cost a chunk each, most of a slot unused: a
  // vector that fits the window goes as one allreduce of the whole vector
  // when that takes fewer chunks (an allgather as a bitwise OR to which each
  // rank gives its block, a reduce-scatter keeping its block of the
  // result). Every rank decides alike; the result is bitwise the same
  // (the switches fold in one order whatever the chunking).
  const size_t bytes = a.count * op.elem_size;
  const size_t whole_chunks =
      allgather ? (bytes + ChunkBytes() - 1) / ChunkBytes()
                : (a.count + per_chunk - 1) / per_chunk;
  if (whole_chunks < chunks && bytes <= size_t{params_.num_slots} * ChunkBytes()) {
    const size_t first = op.block_first_element[op.my_block] * op.elem_size;
    op.staged.assign(bytes, 0);
    if (allgather) {
      if (mine > 0) std::memcpy(op.staged.data() + first, a.send, mine * op.elem_size);
      op.args.dtype = proto::DataType::kUint8;
      op.args.op = proto::ReduceOp::kBor;
      op.args.count = bytes;
      op.args.send = op.staged.data();
      op.elem_size = 1;
    } else {
      op.keep_to = static_cast<uint8_t*>(a.recv);
      op.keep_from = first;
      op.keep_bytes = mine * op.elem_size;
      op.args.recv = op.staged.data();
    }
    op.args.collective = CollectiveType::kAllreduce;
    op.args.blocks.clear();
    op.num_chunks = whole_chunks;
    return absl::OkStatus();
  }
  // An in-place reduce-scatter needs no copy of its input: element i of
  // the result is element start + i >= i of the input, so it is written
  // only after the chunk holding input element i was sent.
  return absl::OkStatus();
}

size_t GroupEngine::ChannelChunks(size_t total) const {
  const size_t n = std::max<uint32_t>(params_.channels, 1), c = params_.channel;
  return total > c ? (total - c + n - 1) / n : 0;
}

GroupEngine::ChunkSpan GroupEngine::Locate(const Op& op, size_t chunk) const {
  const CollectiveArgs& a = op.args;
  ChunkSpan c{.root = a.root};
  if (a.count == 0) return c;
  chunk = VectorChunk(chunk);
  const size_t per_chunk = ElementsPerChunk(op);
  // The chunk's block: the whole vector, or the last block starting at or
  // before it (empty blocks start where the next one does).
  size_t block = 0, block_first_element = 0, block_elements = a.count, block_first_chunk = 0;
  bool mine = a.root == params_.rank;
  if (!a.blocks.empty()) {
    const auto& starts = op.block_first_chunk;
    block = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), chunk) -
                                starts.begin()) - 1;
    block_first_element = op.block_first_element[block];
    block_elements = a.blocks[block];
    block_first_chunk = starts[block];
    c.root = params_.members[block];
    mine = block == op.my_block;
  }
  const size_t within = (chunk - block_first_chunk) * per_chunk;
  c.first = block_first_element + within;
  c.n = std::min(per_chunk, block_elements - within);
  const size_t elem = op.elem_size;
  const auto* send = static_cast<const uint8_t*>(a.send);
  auto* recv = static_cast<uint8_t*>(a.recv);
  // Offsets into a buffer that holds the whole vector, or one block.
  const size_t whole = c.first * elem, in_block = (a.blocks.empty() ? c.first : within) * elem;
  switch (a.collective) {
    case CollectiveType::kAllreduce:
      c.send = send + whole;
      c.recv = recv + whole;
      break;
    case CollectiveType::kReduce:
      c.send = send + whole;
      if (mine) c.recv = recv + in_block;
      break;
    case CollectiveType::kBcast:
      if (mine) c.send = send + in_block;
      c.recv = recv + whole;
      break;
    default:
      break;
  }
  return c;
}

}  // namespace netfold::host
