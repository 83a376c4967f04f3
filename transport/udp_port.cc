#include "transport/udp_port.h"

#include <arpa/inet.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace netfold::transport {
namespace {

constexpr size_t kMaxBurst = 64;
constexpr int kMaxEvents = 16;

sockaddr_in ToSockaddr(const Ipv4Endpoint& ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ip);
  sa.sin_port = htons(ep.port);
  return sa;
}

Ipv4Endpoint FromSockaddr(const sockaddr_in& sa) {
  return Ipv4Endpoint{ntohl(sa.sin_addr.s_addr), ntohs(sa.sin_port)};
}

absl::Status SetOpt(int fd, int level, int name, int value, const char* what) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return ErrnoToStatus(errno, what);
  }
  return absl::OkStatus();
}

void SizeBuffers(int fd, int bytes) {
  // FORCE variants exceed rmem_max/wmem_max as root; fall back quietly.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
}

}  // namespace

UdpPort::UdpPort(const UdpPortConfig& config)
    : config_(config), pool_(config.pool), local_(config.local) {}

UdpPort::~UdpPort() {
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
  sockaddr_in sa = ToSockaddr(local_);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("bind %s", local_.ToString()));
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

size_t UdpPort::ReadSocket(const Socket& s, std::span<PacketBuffer*> out) {
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
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      counters_.Add(counters_.rx_errors);
      NETFOLD_LOG(kDebug) << "recvmmsg on " << s.bound.ToString() << ": errno " << errno;
    }
    n = 0;
  }
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
  // A full burst may have left more behind.
  if (static_cast<size_t>(n) == got_bufs) backlog_ = true;
  return kept;
}

size_t UdpPort::ReadAll(std::span<PacketBuffer*> out) {
  backlog_ = false;
  size_t total = 0;
  const size_t num = sockets_.size();
  for (size_t k = 0; k < num && total < out.size(); ++k) {
    const Socket& s = sockets_[(next_socket_ + k) % num];
    total += ReadSocket(s, out.subspan(total));
  }
  if (total == out.size()) backlog_ = true;
  next_socket_ = num == 0 ? 0 : (next_socket_ + 1) % num;
  return total;
}

size_t UdpPort::ReadReady(std::span<PacketBuffer*> out, absl::Duration timeout) {
  epoll_event events[kMaxEvents];
  const int ready = Wait(events, timeout);
  backlog_ = false;
  size_t total = 0;
  for (int i = 0; i < ready; ++i) {
    if (events[i].data.fd == wake_fd_) {
      uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));  // clears it; a failed read leaves it set
      woken_.store(false, std::memory_order_relaxed);
      continue;
    }
    if (total == out.size()) {
      backlog_ = true;  // ready sockets left unread
      break;
    }
    for (const Socket& s : sockets_) {
      if (s.fd == events[i].data.fd) {
        total += ReadSocket(s, out.subspan(total));
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
  // Datagrams left behind by a full burst are read at once; otherwise epoll
  // says which sockets hold any (one call however many groups are joined,
  // instead of one read per socket) or waits until one does. A timeout or
  // EINTR returns 0: the caller loops with its own deadline.
  if (backlog_) {
    if (const size_t n = ReadAll(out); n > 0) return Received(n);
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

size_t UdpPort::Received(size_t n) {
  if (n > 0 && config_.poll_window > absl::ZeroDuration()) {
    last_activity_ns_ = RealClock().NowNanos();
  }
  return n;
}

size_t UdpPort::SendBurst(std::span<PacketBuffer* const> packets) {
  size_t taken = 0;
  while (taken < packets.size()) {
    const size_t batch = std::min(packets.size() - taken, kMaxBurst);
    mmsghdr msgs[kMaxBurst];
    iovec iovs[kMaxBurst];
    sockaddr_in addrs[kMaxBurst];
    for (size_t i = 0; i < batch; ++i) {
      PacketBuffer* p = packets[taken + i];
      iovs[i] = {p->data(), p->len()};
      addrs[i] = ToSockaddr(p->dst);
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &addrs[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(addrs[i]);
    }
    int n = sendmmsg(sockets_[0].fd, msgs, static_cast<unsigned>(batch), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENOBUFS) {
        break;  // the caller keeps the rest
      }
      // A datagram the network refuses (unreachable, bad address): drop it,
      // counted, so that one bad destination cannot wedge the queue.
      NETFOLD_LOG(kDebug) << "sendmmsg to " << packets[taken]->dst.ToString() << ": errno "
                          << errno;
      counters_.Add(counters_.tx_errors);
      PacketPool::Free(packets[taken]);
      ++taken;
      continue;
    }
    for (int i = 0; i < n; ++i) {
      PacketBuffer* p = packets[taken + static_cast<size_t>(i)];
      counters_.Add(counters_.tx_bytes, p->len());
      PacketPool::Free(p);
    }
    counters_.Add(counters_.tx_packets, static_cast<uint64_t>(n));
    taken += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < batch) break;
  }
  if (taken > 0 && config_.poll_window > absl::ZeroDuration()) {
    last_activity_ns_ = RealClock().NowNanos();
  }
  return taken;
}

}  // namespace netfold::transport
