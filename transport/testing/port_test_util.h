// Test helper for port tests: packets that carry a 4-byte tag, so that a
// test can tell which packets arrived, in which order.
//
//   PacketBuffer* p = TaggedPacket(port, dst, 7);       // 4 bytes: the tag
//   PacketBuffer* q = TaggedPacket(port, dst, 8, 64);   // the tag, then 0x5a
//   ASSERT_EQ(port.SendBurst({&p, 1}), 1u);
//   ... EXPECT_EQ(Tag(rx[0]), 7u);
//
// For tests only (no library includes it). Thread-safety: that of the port.
#ifndef NETFOLD_TRANSPORT_TESTING_PORT_TEST_UTIL_H_
#define NETFOLD_TRANSPORT_TESTING_PORT_TEST_UTIL_H_

#include <cstdint>
#include <cstring>

#include "transport/port.h"

namespace netfold::transport {

// A packet from `port`'s pool to `dst`, `len` >= 4 bytes long: the tag in
// host byte order, then 0x5a. The caller owns it.
inline PacketBuffer* TaggedPacket(Port& port, const Ipv4Endpoint& dst, uint32_t tag,
                                  uint32_t len = 4) {
  PacketBuffer* p = port.pool().Alloc();
  std::memset(p->data(), 0x5a, len);
  std::memcpy(p->data(), &tag, 4);
  p->set_len(len);
  p->dst = dst;
  return p;
}

// The tag of a packet made by TaggedPacket.
inline uint32_t Tag(const PacketBuffer* p) {
  uint32_t t;
  std::memcpy(&t, p->data(), 4);
  return t;
}

}  // namespace netfold::transport

#endif  // NETFOLD_TRANSPORT_TESTING_PORT_TEST_UTIL_H_
