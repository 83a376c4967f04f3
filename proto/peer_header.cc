#include "proto/peer_header.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "proto/little_endian.h"

namespace netfold::proto {

namespace {

struct PeerHeaderWire {
  uint8_t version;
  uint8_t type;
  uint8_t algorithm;
  uint8_t dtype;
  uint8_t op;
  std::array<uint8_t, 3> zero;
  Le32 seq;
  Le32 index;
  Le64 offset;
  Le64 count;
};
static_assert(sizeof(PeerHeaderWire) == kPeerHeaderSize && alignof(PeerHeaderWire) == 1);
static_assert(offsetof(PeerHeaderWire, seq) == 8 && offsetof(PeerHeaderWire, index) == 12 &&
              offsetof(PeerHeaderWire, offset) == 16 && offsetof(PeerHeaderWire, count) == 24);

}  // namespace

void EncodePeerHeader(const PeerHeader& h, uint8_t* out) {
  PeerHeaderWire w{};
  w.version = h.version;
  w.type = static_cast<uint8_t>(h.type);
  w.algorithm = h.algorithm;
  w.dtype = h.dtype;
  w.op = h.op;
  w.seq.set(h.seq);
  w.index.set(h.index);
  w.offset.set(h.offset);
  w.count.set(h.count);
  std::memcpy(out, &w, sizeof(w));
}

PeerHeader DecodePeerHeader(const uint8_t* in) {
  PeerHeaderWire w;
  std::memcpy(&w, in, sizeof(w));
  PeerHeader h;
  h.version = w.version;
  h.type = static_cast<PeerMessageType>(w.type);
  h.algorithm = w.algorithm;
  h.dtype = w.dtype;
  h.op = w.op;
  h.seq = w.seq.get();
  h.index = w.index.get();
  h.offset = w.offset.get();
  h.count = w.count.get();
  return h;
}

std::vector<uint8_t> EncodePeerAbort(PeerHeader h, uint32_t code, std::string_view message,
                                     size_t max_bytes) {
  h.type = PeerMessageType::kAbort;
  const size_t room = max_bytes > kPeerHeaderSize + 4 ? max_bytes - kPeerHeaderSize - 4 : 0;
  message = message.substr(0, std::min(room, message.size()));
  std::vector<uint8_t> m(kPeerHeaderSize + 4 + message.size());
  EncodePeerHeader(h, m.data());
  Le32 c;
  c.set(code);
  std::memcpy(m.data() + kPeerHeaderSize, c.bytes.data(), 4);
  std::memcpy(m.data() + kPeerHeaderSize + 4, message.data(), message.size());
  return m;
}

bool DecodePeerAbortBody(std::span<const uint8_t> body, uint32_t* code, std::string* message) {
  if (body.size() < 4) return false;
  Le32 c;
  std::memcpy(c.bytes.data(), body.data(), 4);
  *code = c.get();
  message->assign(reinterpret_cast<const char*>(body.data()) + 4, body.size() - 4);
  return true;
}

}  // namespace netfold::proto
