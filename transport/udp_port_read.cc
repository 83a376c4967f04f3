// UdpPort's reads (udp_port.h): batches read with UDP_GRO into batch
// buffers and handed out as views, multicast results read into the places
// the placer predicts (a result's payload straight into the caller's
// buffer), and plain recvmmsg without GRO. Split from udp_port.cc.
#include "transport/udp_port.h"

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transport/udp_port_internal.h"

namespace netfold::transport {

using udp_port_internal::FromSockaddr;
using udp_port_internal::kBatchBuffers;
using udp_port_internal::kGroBufferBytes;
using udp_port_internal::kGroReads;
using udp_port_internal::kMaxBatchBytes;
using udp_port_internal::kMaxBurst;
using udp_port_internal::kMaxSegments;

namespace {

// The packet size of a message read with UDP_GRO: its gso_size, or its
// length when it came alone.
size_t SegmentSize(const msghdr& h, size_t len) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&h), c)) {
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int size = 0;
      std::memcpy(&size, CMSG_DATA(c), sizeof(size));
      if (size > 0) return static_cast<size_t>(size);
    }
  }
  return len;
}

}  // namespace

void UdpPort::ReserveReceive(size_t bytes) {
  if (!config_.gro) return;
  batch_pool_.Prefault(static_cast<uint32_t>(
      std::min<size_t>(kBatchBuffers, (bytes + kGroBufferBytes - 1) / kGroBufferBytes + 1)));
}

size_t UdpPort::ReadSocketGro(Socket& s, std::span<PacketBuffer*> out) {
  // Batches land in batch buffers; their packets are handed out as views
  // of them (no copy). A batch buffer goes back to its pool when its last
  // packet is freed. Read only as many batches as there are batch buffers
  // and view headers for a full batch each.
  size_t reads = std::min({kGroReads, static_cast<size_t>(batch_pool_.num_free()),
                           static_cast<size_t>(pool_.num_free_views()) / kMaxSegments});
  if (reads == 0) {
    // Out of batch buffers (packets of earlier batches are still held) or
    // views: read one batch into scratch and copy its packets, if the pool
    // has room for all of them (a peek says how many).
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int))];
    iovec iov{scratch_.data(), scratch_.size()};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof(control);
    const ssize_t len = recvmsg(s.fd, &h, MSG_PEEK | MSG_DONTWAIT);
    if (len < 0) {
      CountRead(s, -1);
      s.unread = false;
      return 0;
    }
    const size_t segment = SegmentSize(h, static_cast<size_t>(len));
    const size_t count = len == 0 ? 1 : (static_cast<size_t>(len) + segment - 1) / segment;
    if (count > pool_.num_free()) {
      counters_.Add(counters_.rx_no_buffer);
      return 0;
    }
    reads = 1;
  }
  const bool copy = batch_pool_.num_free() == 0 || pool_.num_free_views() < kMaxSegments;
  PacketBuffer* batches[kGroReads] = {};
  mmsghdr msgs[kGroReads];
  iovec iovs[kGroReads];
  sockaddr_in addrs[kGroReads];
  alignas(cmsghdr) uint8_t controls[kGroReads][CMSG_SPACE(sizeof(int))];
  for (size_t i = 0; i < reads; ++i) {
    if (copy) {
      iovs[i] = {scratch_.data(), scratch_.size()};
    } else {
      batches[i] = batch_pool_.Alloc();
      iovs[i] = {batches[i]->data(), batches[i]->capacity()};
    }
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &addrs[i];
    msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
    msgs[i].msg_hdr.msg_control = controls[i];
    msgs[i].msg_hdr.msg_controllen = sizeof(controls[i]);
  }
  const int n = recvmmsg(s.fd, msgs, static_cast<unsigned>(reads), MSG_DONTWAIT, nullptr);
  CountRead(s, n);
  size_t kept = 0;
  for (int i = 0; i < n; ++i) {
    const msghdr& h = msgs[i].msg_hdr;
    if (h.msg_flags & MSG_TRUNC) {
      counters_.Add(counters_.rx_truncated);
      continue;
    }
    const size_t len = msgs[i].msg_len;
    const size_t segment = SegmentSize(h, len);
    const size_t count = len == 0 ? 1 : (len + segment - 1) / segment;
    const uint8_t* data = static_cast<const uint8_t*>(iovs[i].iov_base);
    if (batches[i] != nullptr) batches[i]->set_len(static_cast<uint32_t>(len));
    for (size_t k = 0; k < count; ++k) {
      const size_t offset = k * segment;
      const size_t size = std::min(segment, len - offset);
      if (size > pool_.buffer_size()) {  // as a datagram too large for a buffer would be
        counters_.Add(counters_.rx_truncated);
        continue;
      }
      PacketBuffer* p = nullptr;
      if (batches[i] != nullptr && count > 1) {
        p = pool_.AllocView(batches[i], static_cast<uint32_t>(offset), static_cast<uint32_t>(size));
      } else {
        // A datagram that came alone (or no batch buffer): copied, so that
        // it does not hold a batch buffer for as long as it is kept.
        p = pool_.Alloc();
        if (p != nullptr) {
          std::memcpy(p->data(), data + offset, size);
          p->set_len(static_cast<uint32_t>(size));
          if (count > 1) counters_.Add(counters_.rx_batch_copied);
        }
      }
      if (p == nullptr) {
        counters_.Add(counters_.rx_no_buffer);
        continue;
      }
      HandOut(p, FromSockaddr(addrs[i]), s, k, count, out, kept);
    }
  }
  // The batch buffers go back with their last packet (at once if none).
  for (size_t i = 0; i < reads; ++i) PacketPool::Free(batches[i]);
  s.unread = n == static_cast<int>(reads);  // a full read may have left more behind
  return kept;
}

void UdpPort::HandOut(PacketBuffer* p, const Ipv4Endpoint& src, const Socket& s, size_t k,
                      size_t count, std::span<PacketBuffer*> out, size_t& kept) {
  p->src = src;
  p->dst = s.bound;
  p->ip_id = static_cast<uint16_t>(k);
  counters_.Add(counters_.rx_bytes, p->len());
  counters_.Add(counters_.rx_packets);
  if (count > 1) counters_.Add(counters_.rx_batched);
  if (kept < out.size()) {
    out[kept++] = p;
  } else {
    pending_.push_back(p);
  }
}

void UdpPort::CountRead(const Socket& s, int n) {
  if (n > 0) return;
  if (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
    counters_.Add(counters_.rx_empty_reads);
  } else if (errno != EINTR) {
    counters_.Add(counters_.rx_errors);
    NETFOLD_LOG(kDebug) << "recvmmsg on " << s.bound.ToString() << ": errno " << errno;
  }
}

size_t UdpPort::ReadSocketPlaced(Socket& s, std::span<PacketBuffer*> out, bool* out_of_places) {
  // Guess where the next datagrams' payloads go: at most one place per
  // packet buffer free and per packet the caller takes (a placed packet is
  // always handed out by this call).
  const size_t room = std::min({out.size(), kMaxBurst, static_cast<size_t>(pool_.num_free())});
  places_.resize(kMaxBurst);
  const size_t guessed = room == 0 ? 0 : placer_->PredictPlaces(s.bound, {places_.data(), room});
  size_t next = 0, kept = 0;
  s.unread = true;  // not read yet
  for (size_t read = 0; read < kGroReads && next < guessed; ++read) {
    // One batch (or datagram) per recvmsg, its size unknown until it is
    // read: a recvmmsg of several would meet the second batch's packets
    // with places guessed as if the first had been full. Each place is
    // three pieces, the packet's head and tail in a packet buffer around
    // the payload in the place; places of one size only (the kernel cuts
    // a batch into equal segments). What the places do not take goes to
    // spill_.
    const ReceivePlace& first = places_[next];
    const size_t size = static_cast<size_t>(first.head) + first.len + first.tail;
    if (size == 0 || size > pool_.buffer_size()) {
      next = guessed;  // a guess no packet buffer could hold: read as usual
      break;
    }
    // A batch that may not fit in `out` whole waits for the next call: its
    // packets beyond `out` would wait in pending_, unplaced and not yet
    // seen by the placer, whose next guesses would then all be off.
    const size_t per_batch =
        config_.gro ? std::clamp<size_t>(kMaxBatchBytes / size, 1, kMaxSegments) : 1;
    if (kept > 0 && out.size() - kept < per_batch) break;
    size_t m = 0;
    const size_t most = std::min({per_batch, guessed - next, out.size() - kept});
    while (m < most) {
      const ReceivePlace& p = places_[next + m];
      if (static_cast<size_t>(p.head) + p.len + p.tail != size) break;
      ++m;
    }
    // Room first for the batch's segments beyond its places (copied out
    // of the spill), so that none is read only to be dropped. Without it,
    // read as usual: with UDP_GRO a batch read unplaced needs no free
    // packet buffer (its packets are views of a batch buffer), and one left
    // in the socket would wait there as long as the buffers stay held.
    if (pool_.num_free() < per_batch) {
      next = guessed;
      break;
    }
    PacketBuffer* bufs[kMaxSegments];
    m = pool_.AllocBurst({bufs, m});
    iovec iovs[kMaxSegments * 3 + 1];
    for (size_t k = 0; k < m; ++k) {
      const ReceivePlace& p = places_[next + k];
      iovs[3 * k] = {bufs[k]->data(), p.head};
      iovs[3 * k + 1] = {p.at, p.len};
      iovs[3 * k + 2] = {bufs[k]->data() + p.head + p.len, p.tail};
    }
    spill_.resize(kGroBufferBytes);
    iovs[3 * m] = {spill_.data(), spill_.size()};
    sockaddr_in addr{};
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int))];
    msghdr h{};
    h.msg_name = &addr;
    h.msg_namelen = sizeof(addr);
    h.msg_iov = iovs;
    h.msg_iovlen = 3 * m + 1;
    h.msg_control = control;
    h.msg_controllen = config_.gro ? sizeof(control) : 0;
    const ssize_t got = recvmsg(s.fd, &h, MSG_DONTWAIT);
    if (got < 0) {
      CountRead(s, -1);
      PacketPool::FreeBurst({bufs, m});
      s.unread = false;
      break;
    }
    const size_t len = static_cast<size_t>(got);
    if (h.msg_flags & MSG_TRUNC) {
      counters_.Add(counters_.rx_truncated);
      PacketPool::FreeBurst({bufs, m});
      continue;
    }
    const size_t segment = std::max<size_t>(SegmentSize(h, len), 1);
    const size_t count = len == 0 ? 1 : (len + segment - 1) / segment;
    const Ipv4Endpoint src = FromSockaddr(addr);
    // Only copies can go to pending_: a placed packet always fits in out.
    auto hand_out = [&](PacketBuffer* p, size_t k) { HandOut(p, src, s, k, count, out, kept); };
    // A packet copied from `bytes` into a fresh buffer.
    auto copy_out = [&](const uint8_t* bytes, size_t n, size_t k) {
      PacketBuffer* p = n <= pool_.buffer_size() ? pool_.Alloc() : nullptr;
      if (p == nullptr) {
        counters_.Add(n <= pool_.buffer_size() ? counters_.rx_no_buffer : counters_.rx_truncated);
        return;
      }
      if (n > 0) std::memcpy(p->data(), bytes, n);
      p->set_len(static_cast<uint32_t>(n));
      hand_out(p, k);
    };
    const size_t placed = std::min(count, m);
    if (segment != size) {
      // Cut elsewhere than guessed (another size, a datagram alone): the
      // bytes lie across the pieces in order. Put them together and copy
      // each packet out.
      gathered_.resize(std::max<size_t>(gathered_.size(), len));
      size_t at = 0;
      for (size_t i = 0; i <= 3 * m && at < len; ++i) {
        const size_t n = std::min(iovs[i].iov_len, len - at);
        std::memcpy(gathered_.data() + at, iovs[i].iov_base, n);
        at += n;
      }
      for (size_t k = 0; k < count; ++k) {
        const size_t offset = std::min(len, k * segment);
        copy_out(gathered_.data() + offset, std::min(segment, len - offset), k);
      }
      counters_.Add(counters_.rx_place_missed, placed);
      PacketPool::FreeBurst({bufs, m});
      next += placed;
      continue;
    }
    for (size_t k = 0; k < placed; ++k) {
      // Every packet of the batch whose place was not its own is copied
      // back before any is handed up: a payload left in another packet's
      // place would be overwritten when that one is written out.
      PacketBuffer* p = bufs[k];
      const ReceivePlace& place = places_[next + k];
      const size_t bytes = std::min(size, len - k * size);
      p->set_len(static_cast<uint32_t>(bytes));
      if (bytes == size && placer_->ClaimPlace(place, {p->data(), place.head})) {
        p->SetExternal(place.head, {place.at, place.len});
        counters_.Add(counters_.rx_placed);
      } else {
        if (bytes > place.head) {
          std::memcpy(p->data() + place.head, place.at,
                      std::min<size_t>(place.len, bytes - place.head));
        }
        counters_.Add(counters_.rx_place_missed);
      }
      hand_out(p, k);
    }
    PacketPool::FreeBurst({bufs + placed, m - placed});
    for (size_t k = placed; k < count; ++k) {
      const size_t offset = (k - placed) * size;
      copy_out(spill_.data() + offset, std::min(size, len - placed * size - offset), k);
    }
    next += placed;
    if (count < per_batch) {
      // A batch shorter than the sender could cut ends its burst: the
      // socket is most likely empty, and asking would be a system call
      // that finds nothing (epoll, level-triggered, still reports a
      // socket that is not).
      s.unread = false;
      break;
    }
  }
  *out_of_places = next >= guessed;
  return kept;
}

size_t UdpPort::ReadSocket(Socket& s, std::span<PacketBuffer*> out) {
  if (placer_ != nullptr && s.bound.IsMulticast()) {
    bool out_of_places = false;
    const size_t n = ReadSocketPlaced(s, out, &out_of_places);
    // Places ran out before the socket did: the rest as usual.
    if (!out_of_places || !s.unread || n == out.size()) return n;
    return n + ReadSocketUnplaced(s, out.subspan(n));
  }
  return ReadSocketUnplaced(s, out);
}

size_t UdpPort::ReadSocketUnplaced(Socket& s, std::span<PacketBuffer*> out) {
  if (config_.gro) return ReadSocketGro(s, out);
  const size_t want = std::min(out.size(), kMaxBurst);
  PacketBuffer* bufs[kMaxBurst];
  const size_t got_bufs = pool_.AllocBurst({bufs, want});
  if (got_bufs == 0) {
    // Leave the datagrams in the socket; the caller frees buffers and retries.
    counters_.Add(counters_.rx_no_buffer);
    return 0;
  }
  mmsghdr msgs[kMaxBurst];
  iovec iovs[kMaxBurst];
  sockaddr_in addrs[kMaxBurst];
  for (size_t i = 0; i < got_bufs; ++i) {
    iovs[i] = {bufs[i]->data(), bufs[i]->capacity()};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &addrs[i];
    msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
  }
  int n = recvmmsg(s.fd, msgs, static_cast<unsigned>(got_bufs), MSG_DONTWAIT, nullptr);
  CountRead(s, n);
  n = std::max(n, 0);
  size_t kept = 0;
  for (int i = 0; i < n; ++i) {
    PacketBuffer* p = bufs[i];
    if (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
      counters_.Add(counters_.rx_truncated);
      PacketPool::Free(p);
      continue;
    }
    p->set_len(msgs[i].msg_len);
    p->src = FromSockaddr(addrs[i]);
    p->dst = s.bound;
    counters_.Add(counters_.rx_bytes, msgs[i].msg_len);
    out[kept++] = p;
  }
  counters_.Add(counters_.rx_packets, kept);
  for (size_t i = static_cast<size_t>(n); i < got_bufs; ++i) PacketPool::Free(bufs[i]);
  s.unread = static_cast<size_t>(n) == got_bufs;  // a full burst may have left more behind
  return kept;
}

}  // namespace netfold::transport
