#include "transport/udp_port.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "transport/udp_port_internal.h"

namespace netfold::transport {
namespace {

using udp_port_internal::FromSockaddr;
using udp_port_internal::kBatchBuffers;
using udp_port_internal::kGroBufferBytes;
using udp_port_internal::kMaxBatchBytes;
using udp_port_internal::kMaxBurst;
using udp_port_internal::kMaxEvents;
using udp_port_internal::kMaxSegments;
using udp_port_internal::ToSockaddr;

absl::Status SetOpt(int fd, int level, int name, int value, const char* what) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return ErrnoToStatus(errno, what);
  }
  return absl::OkStatus();
}

void SizeBuffers(int fd, int bytes) {
  // FORCE variants exceed rmem_max/wmem_max with CAP_NET_ADMIN (root);
  // without it the kernel caps the plain ones at rmem_max/wmem_max.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
  // What the kernel gave (it reports twice what it was asked, for its
  // bookkeeping). Less than asked: a window of results arriving at once can
  // overflow the socket, and what is dropped there is repaired, slowly.
  // Said once per process, at warning level. (The send buffer is asked
  // for in the same way; a short one only makes senders wait.)
  int got = 0;
  socklen_t len = sizeof(got);
  static std::atomic<bool> told{false};
  if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got / 2 < bytes &&
      !told.exchange(true)) {
    NETFOLD_LOG(kWarning) << absl::StrFormat(
        "UDP socket receive buffer %d bytes, %d asked: net.core.rmem_max caps it for a process "
        "without CAP_NET_ADMIN; bursts of results may be dropped and repaired (raise it: "
        "sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d; docs/operations.md)",
        got / 2, bytes, bytes, bytes);
  }
}

}  // namespace

namespace {

PacketPoolConfig WithViews(PacketPoolConfig c, bool gro) {
  // Enough view headers for every buffer's worth of packets in batches.
  if (gro) c.num_views = std::max(c.num_views, 2 * c.num_buffers);
  return c;
}

}  // namespace

UdpPort::UdpPort(const UdpPortConfig& config)
    : config_(config),
      pool_(WithViews(config.pool, config.gro)),
      batch_pool_({.num_buffers = config.gro ? kBatchBuffers : 0,
                   .buffer_size = kGroBufferBytes,
                   .headroom = 0}),
      local_(config.local) {}

UdpPort::~UdpPort() {
  for (PacketBuffer* p : pending_) PacketPool::Free(p);
  pending_.clear();
  for (Socket& s : sockets_) {
    if (s.fd >= 0) close(s.fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::StatusOr<std::unique_ptr<UdpPort>> UdpPort::Create(const UdpPortConfig& config) {
  if (config.local.IsMulticast()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "local address %s is a multicast address; join groups with JoinMulticast",
        config.local.ToString()));
  }
  if (config.pool.num_buffers == 0 || config.pool.buffer_size == 0) {
    return absl::InvalidArgumentError("UdpPort needs a non-empty packet pool");
  }
  std::unique_ptr<UdpPort> port(new UdpPort(config));
  NETFOLD_RETURN_IF_ERROR(port->Open());
  return port;
}

absl::Status UdpPort::Open() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return ErrnoToStatus(errno, "epoll_create1");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoToStatus(errno, "eventfd");
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd_;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
    return ErrnoToStatus(errno, "epoll_ctl(eventfd)");
  }

  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket(AF_INET, SOCK_DGRAM)");
  sockets_.push_back({fd, local_});
  SizeBuffers(fd, config_.socket_buffer_bytes);
  // DF and IPv4 identification 0 on every datagram, the header the ICRC
  // assumes (proto/icrc.h). Linux sets the identification to 0 only when
  // the socket does not let the stack fragment (IP_PMTUDISC_DO); under the
  // default (WANT) it picks one, and a RoCE NIC, which sees the real
  // header, would drop every packet with a bad ICRC.
  NETFOLD_RETURN_IF_ERROR(
      SetOpt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER"));
  if (config_.gro) {
    // A kernel without it (before 5.0) reads datagram by datagram.
    if (SetOpt(fd, IPPROTO_UDP, UDP_GRO, 1, "UDP_GRO").ok()) {
      scratch_.resize(kGroBufferBytes);
    } else {
      config_.gro = false;
    }
  }
  if (config_.reuse_port) {
    NETFOLD_RETURN_IF_ERROR(SetOpt(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT"));
  }
  sockaddr_in sa = ToSockaddr(local_);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("bind %s", local_.ToString()));
  }
  if (config_.reuse_port && config_.steer_queues > 0) {
    // The sender's UDP port, read past the IPv4 header, whatever its length
    // (the kernel picks one socket for a whole GSO batch, so the sender, not
    // the QP, is what every datagram of a batch has in common); modulo the
    // queues, past the group's first socket. The program runs with the
    // packet's data at the UDP payload: the headers are reached from
    // SKF_NET_OFF.
    sock_filter code[] = {
        // X = the IPv4 header's length (4 x IHL).
        BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, static_cast<uint32_t>(SKF_NET_OFF)),
        // A = the UDP source port, the first half-word after it.
        BPF_STMT(BPF_LD | BPF_H | BPF_IND, static_cast<uint32_t>(SKF_NET_OFF)),
        BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, static_cast<uint32_t>(config_.steer_queues)),
        BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 1),
        BPF_STMT(BPF_RET | BPF_A, 0),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) != 0) {
      return ErrnoToStatus(errno, "setsockopt SO_ATTACH_REUSEPORT_CBPF");
    }
  }
  socklen_t len = sizeof(sa);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    return ErrnoToStatus(errno, "getsockname");
  }
  local_ = FromSockaddr(sa);
  sockets_[0].bound = local_;

  // Multicast is sent from the unicast socket, out of the local interface.
  in_addr ifaddr{};
  ifaddr.s_addr = htonl(local_.ip);
  if (local_.ip != 0 &&
      setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof(ifaddr)) != 0) {
    return ErrnoToStatus(errno, "setsockopt IP_MULTICAST_IF");
  }
  NETFOLD_RETURN_IF_ERROR(SetOpt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 1, "IP_MULTICAST_LOOP"));
  NETFOLD_RETURN_IF_ERROR(
      SetOpt(fd, IPPROTO_IP, IP_MULTICAST_TTL, config_.multicast_ttl, "IP_MULTICAST_TTL"));

  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) return ErrnoToStatus(errno, "epoll_ctl");
  return absl::OkStatus();
}

absl::Status UdpPort::JoinMulticast(const Ipv4Endpoint& group) {
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a multicast address (224.0.0.0/4)", group.ToString()));
  }
  for (const Socket& s : sockets_) {
    if (s.bound == group) {
      return absl::AlreadyExistsError(absl::StrFormat("already joined %s", group.ToString()));
    }
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket(AF_INET, SOCK_DGRAM)");
  auto fail = [fd](absl::Status s) {
    close(fd);
    return s;
  };
  SizeBuffers(fd, config_.socket_buffer_bytes);
  if (absl::Status s = SetOpt(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR"); !s.ok()) return fail(s);
  // Only the groups this socket joined, not every group any socket joined.
  if (absl::Status s = SetOpt(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL"); !s.ok()) {
    return fail(s);
  }
  if (config_.gro) {
    if (absl::Status s = SetOpt(fd, IPPROTO_UDP, UDP_GRO, 1, "UDP_GRO"); !s.ok()) return fail(s);
  }
  sockaddr_in sa = ToSockaddr(group);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return fail(ErrnoToStatus(errno, absl::StrFormat("bind %s", group.ToString())));
  }
  ip_mreqn mreq{};
  mreq.imr_multiaddr.s_addr = htonl(group.ip);
  mreq.imr_address.s_addr = htonl(local_.ip);
  mreq.imr_ifindex = 0;
  if (setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0) {
    return fail(ErrnoToStatus(errno, absl::StrFormat("IP_ADD_MEMBERSHIP %s on %s",
                                                     group.ToString(),
                                                     FormatIpv4Address(local_.ip))));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return fail(ErrnoToStatus(errno, "epoll_ctl"));
  }
  sockets_.push_back({fd, group});
  return absl::OkStatus();
}

absl::Status UdpPort::LeaveMulticast(const Ipv4Endpoint& group) {
  for (size_t i = 1; i < sockets_.size(); ++i) {
    if (sockets_[i].bound == group) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sockets_[i].fd, nullptr);
      close(sockets_[i].fd);  // closing drops the membership
      sockets_.erase(sockets_.begin() + static_cast<ptrdiff_t>(i));
      next_socket_ = 0;
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrFormat("not a member of %s", group.ToString()));
}

size_t UdpPort::TakePending(std::span<PacketBuffer*> out) {
  size_t n = 0;
  while (n < out.size() && !pending_.empty()) {
    out[n++] = pending_.front();
    pending_.pop_front();
  }
  return n;
}

size_t UdpPort::ReadAll(std::span<PacketBuffer*> out) { return ReadSockets(out, false); }

size_t UdpPort::ReadSockets(std::span<PacketBuffer*> out, bool only_unread) {
  size_t total = TakePending(out);
  const size_t num = sockets_.size();
  for (size_t k = 0; k < num; ++k) {
    Socket& s = sockets_[(next_socket_ + k) % num];
    if (only_unread && !s.unread) continue;
    if (total == out.size()) {
      s.unread = true;  // not reached: it may hold datagrams
      continue;
    }
    total += ReadSocket(s, out.subspan(total));
  }
  next_socket_ = num == 0 ? 0 : (next_socket_ + 1) % num;
  return total;
}

bool UdpPort::MayHoldMore() const {
  return !pending_.empty() ||
         std::any_of(sockets_.begin(), sockets_.end(), [](const Socket& s) { return s.unread; });
}

size_t UdpPort::ReadReady(std::span<PacketBuffer*> out, absl::Duration timeout) {
  if (!pending_.empty()) return TakePending(out);
  epoll_event events[kMaxEvents];
  const int ready = Wait(events, timeout);
  if (ready == 0 && timeout <= absl::ZeroDuration()) counters_.Add(counters_.rx_empty_reads);
  size_t total = 0;
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.fd == wake_fd_) {
      uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));  // clears it; a failed read leaves it set
      woken_.store(false, std::memory_order_relaxed);
      continue;
    }
    for (Socket& s : sockets_) {
      if (s.fd == events[i].data.fd) {
        if (total == out.size()) {
          s.unread = true;  // ready, left for the next call
        } else {
          total += ReadSocket(s, out.subspan(total));
        }
        break;
      }
    }
  }
  return total;
}

int UdpPort::Wait(epoll_event* events, absl::Duration timeout) {
  timeout = std::clamp(timeout, absl::ZeroDuration(), absl::Hours(1));
  if (has_epoll_pwait2_) {
    const timespec ts = absl::ToTimespec(timeout);
    const int ready = epoll_pwait2(epoll_fd_, events, kMaxEvents, &ts, nullptr);
    if (ready >= 0 || errno != ENOSYS) return std::max(ready, 0);
    has_epoll_pwait2_ = false;  // a kernel before 5.11: milliseconds only
  }
  // Round up so that a sub-millisecond timeout still waits.
  const int ms =
      static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
  return std::max(epoll_wait(epoll_fd_, events, kMaxEvents, ms), 0);
}

size_t UdpPort::RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) {
  if (out.empty()) return 0;
  if (config_.busy_poll) {
    size_t n = ReadAll(out);
    Deadline deadline(RealClock(), timeout);
    while (n == 0 && !deadline.Expired() && !woken_.exchange(false)) n = ReadAll(out);
    return n;
  }
  // Datagrams left behind by a full burst are read at once, from the
  // sockets that burst filled (an empty read is a system call for nothing);
  // otherwise epoll says which sockets hold any (one call however many
  // groups are joined, instead of one read per socket) or waits until one
  // does. A timeout or EINTR returns 0: the caller loops with its own
  // deadline.
  if (MayHoldMore()) {
    if (const size_t n = ReadSockets(out, /*only_unread=*/true); n > 0) return Received(n);
  }
  if (config_.poll_window > absl::ZeroDuration()) {
    // Spin until the window since the last packet closes or the timeout
    // ends, whichever is first; then sleep for what is left.
    const int64_t start = RealClock().NowNanos();
    const int64_t end = std::min(last_activity_ns_ + absl::ToInt64Nanoseconds(config_.poll_window),
                                 start + absl::ToInt64Nanoseconds(timeout));
    for (int64_t now = start; now < end; now = RealClock().NowNanos()) {
      if (const size_t n = ReadAll(out); n > 0) return Received(n);
      if (woken_.load(std::memory_order_relaxed)) break;
      sched_yield();
    }
    timeout -= absl::Nanoseconds(std::max<int64_t>(0, RealClock().NowNanos() - start));
  }
  return Received(ReadReady(out, timeout));
}

void UdpPort::Wake() {
  woken_.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));  // EAGAIN: already signalled
}

int UdpPort::wait_fd() const {
  const bool spins = config_.busy_poll || config_.poll_window > absl::ZeroDuration();
  return spins ? -1 : epoll_fd_;
}

absl::Duration UdpPort::SleepBound(absl::Duration limit) {
  // Datagrams a full burst left in a socket keep the epoll set readable;
  // packets split from a batch are the port's own.
  return pending_.empty() ? limit : absl::ZeroDuration();
}

size_t UdpPort::Received(size_t n) {
  if (n > 0 && config_.poll_window > absl::ZeroDuration()) {
    last_activity_ns_ = RealClock().NowNanos();
  }
  return n;
}

size_t UdpPort::SendBurst(std::span<PacketBuffer* const> packets) {
  size_t taken = 0;
  while (taken < packets.size()) {
    const size_t sent = SendRuns(packets.subspan(taken));
    if (sent == 0) break;
    taken += sent;
  }
  if (taken > 0 && config_.poll_window > absl::ZeroDuration()) {
    last_activity_ns_ = RealClock().NowNanos();
  }
  return taken;
}

size_t UdpPort::Pieces(PacketBuffer& p, iovec* out) {
  const std::span<const uint8_t> external = p.external();
  // The ICRC at the end is rewritten in place for a batch's segments: it
  // must be the packet's own.
  if (!external.empty() && p.external_at() + external.size() + proto::kIcrcSize > p.len()) {
    p.Materialize();
  }
  if (p.external().empty()) {
    out[0] = {p.data(), p.len()};
    return 1;
  }
  size_t n = 0;
  const size_t at = p.external_at();
  if (at > 0) out[n++] = {p.data(), at};
  out[n++] = {const_cast<uint8_t*>(external.data()), external.size()};
  const size_t after = at + external.size();
  out[n++] = {p.data() + after, p.len() - after};
  return n;
}

size_t UdpPort::SendRuns(std::span<PacketBuffer* const> packets) {
  // One message per run: packets to one destination, all of the run's
  // first size but the last (which may be shorter), within the kernel's
  // limits; a run of one is a plain datagram.
  mmsghdr msgs[kMaxBurst];
  // Up to three pieces a packet: its own bytes around its external ones
  // (PacketBuffer::external), which the kernel copies from where they are.
  iovec iovs[kMaxBurst * 3];
  sockaddr_in addrs[kMaxBurst];
  alignas(cmsghdr) uint8_t controls[kMaxBurst][CMSG_SPACE(sizeof(uint16_t))];
  size_t run_start[kMaxBurst + 1];
  const size_t limit = std::min(packets.size(), kMaxBurst);
  const bool gso = config_.gso && gso_works_;
  size_t num_msgs = 0;
  size_t num_iovs = 0;
  for (size_t i = 0; i < limit;) {
    PacketBuffer* first = packets[i];
    size_t end = i + 1, bytes = first->len();
    if (gso && first->len() > proto::kIcrcSize) {
      while (end < limit && end - i < kMaxSegments) {
        const PacketBuffer* q = packets[end];
        if (q->dst != first->dst || q->len() > first->len() || q->len() <= proto::kIcrcSize ||
            bytes + q->len() > kMaxBatchBytes) {
          break;
        }
        bytes += q->len();
        ++end;
        if (q->len() < first->len()) break;  // only the last may be shorter
      }
    }
    run_start[num_msgs] = i;
    msghdr& h = msgs[num_msgs].msg_hdr;
    msgs[num_msgs] = {};
    addrs[num_msgs] = ToSockaddr(first->dst);
    h.msg_name = &addrs[num_msgs];
    h.msg_namelen = sizeof(addrs[num_msgs]);
    const size_t first_iov = num_iovs;
    for (size_t k = i; k < end; ++k) num_iovs += Pieces(*packets[k], &iovs[num_iovs]);
    h.msg_iov = &iovs[first_iov];
    h.msg_iovlen = num_iovs - first_iov;
    if (end - i > 1) {
      // Segment k leaves with IPv4 identification k: its ICRC must be the
      // one of that identification.
      for (size_t k = i + 1; k < end; ++k) {
        const std::span<uint8_t, proto::kIcrcSize> tail = packets[k]->bytes().last<proto::kIcrcSize>();
        proto::StoreIcrc(proto::LoadIcrc(tail) ^
                             icrc_ids_.Difference(packets[k]->len() - proto::kIcrcSize,
                                                  static_cast<uint16_t>(k - i)),
                         tail);
      }
      h.msg_control = controls[num_msgs];
      h.msg_controllen = sizeof(controls[num_msgs]);
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = static_cast<uint16_t>(first->len());
      std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    }
    ++num_msgs;
    i = end;
  }
  run_start[num_msgs] = limit;
  // Packets of runs the kernel did not take go back with the ICRC of
  // identification 0, to be sent again in whatever batch.
  auto restore = [&](size_t from_msg) {
    for (size_t m = from_msg; m < num_msgs; ++m) {
      for (size_t k = run_start[m] + 1; k < run_start[m + 1]; ++k) {
        const std::span<uint8_t, proto::kIcrcSize> tail = packets[k]->bytes().last<proto::kIcrcSize>();
        proto::StoreIcrc(proto::LoadIcrc(tail) ^
                             icrc_ids_.Difference(packets[k]->len() - proto::kIcrcSize,
                                                  static_cast<uint16_t>(k - run_start[m])),
                         tail);
      }
    }
  };
  const int n = sendmmsg(sockets_[0].fd, msgs, static_cast<unsigned>(num_msgs), MSG_DONTWAIT);
  if (n < 0) {
    const int error = errno;
    restore(0);
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ENOBUFS) {
      return 0;  // the caller keeps them
    }
    if (run_start[1] - run_start[0] > 1 && (error == EINVAL || error == EIO || error == EMSGSIZE)) {
      // The kernel or the path refuses segmentation offload (too old, a
      // segment over the route's MTU): one datagram per packet from now on.
      NETFOLD_LOG(kWarning) << "UDP segmentation offload refused (errno " << error
                            << "): this port sends datagram by datagram from now on";
      gso_works_ = false;
      return SendRuns(packets);
    }
    // A datagram the network refuses (unreachable, bad address): drop the
    // run, counted, so that one bad destination cannot wedge the queue.
    NETFOLD_LOG(kDebug) << "sendmmsg to " << packets[0]->dst.ToString() << ": errno " << error;
    for (size_t k = 0; k < run_start[1]; ++k) {
      counters_.Add(counters_.tx_errors);
      PacketPool::Free(packets[k]);
    }
    return run_start[1];
  }
  restore(static_cast<size_t>(n));
  const size_t taken = run_start[n];
  for (size_t k = 0; k < taken; ++k) counters_.Add(counters_.tx_bytes, packets[k]->len());
  counters_.Add(counters_.tx_packets, taken);
  for (int m = 0; m < n; ++m) {
    const size_t run = run_start[m + 1] - run_start[m];
    if (run > 1) counters_.Add(counters_.tx_batched, run);
  }
  PacketPool::FreeBurst(packets.first(taken));
  return taken;
}

}  // namespace netfold::transport
