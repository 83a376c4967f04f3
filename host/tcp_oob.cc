#include "host/tcp_oob.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/error_codes.h"
#include "transport/ipv4_endpoint.h"

namespace netfold::host {
namespace {

constexpr uint8_t kOpAllgather = 1;
constexpr uint8_t kOpBcast = 2;
constexpr uint8_t kOpBarrier = 3;
constexpr uint8_t kOpBye = 4;
constexpr uint32_t kMagic = 0x4e464f42;  // "NFOB"
constexpr uint64_t kMaxBytes = 256u << 20;

struct Request {
  uint8_t op;
  uint32_t root;
  uint64_t bytes;
};

absl::Status OobError(std::string_view what) {
  return WithErrorCode(absl::UnavailableError(absl::StrFormat("out-of-band (TCP): %s", what)),
                       NETFOLD_ERR_OOB);
}

// Waits for `events` on fd until the deadline, or until *stop (if given)
// is set: a server being destroyed looks at it every 100 ms.
absl::Status WaitFd(int fd, short events, absl::Time deadline,
                    const std::atomic<bool>* stop = nullptr) {
  while (true) {
    if (stop != nullptr && stop->load()) return absl::CancelledError("stopped");
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, stop != nullptr ? 100 : 1000)));
    if (rc > 0) return absl::OkStatus();
    if (rc < 0 && errno != EINTR) return ErrnoToStatus(errno, "poll");
    if (absl::Now() >= deadline) return OobError("timed out waiting for a peer");
  }
}

absl::Status WriteAll(int fd, const void* data, size_t n, absl::Time deadline,
                      const std::atomic<bool>* stop = nullptr) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    NETFOLD_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, stop));
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return OobError(absl::StrFormat("send: %s", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t n, absl::Time deadline,
                     const std::atomic<bool>* stop = nullptr) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    NETFOLD_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, stop));
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) return OobError("the peer closed the connection");
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return OobError(absl::StrFormat("recv: %s", std::strerror(errno)));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::Status WriteRequest(int fd, const Request& r, absl::Time deadline) {
  uint8_t buf[13];
  buf[0] = r.op;
  std::memcpy(buf + 1, &r.root, 4);
  std::memcpy(buf + 5, &r.bytes, 8);
  return WriteAll(fd, buf, sizeof(buf), deadline);
}

absl::StatusOr<Request> ReadRequest(int fd, absl::Time deadline, const std::atomic<bool>* stop) {
  uint8_t buf[13];
  NETFOLD_RETURN_IF_ERROR(ReadAll(fd, buf, sizeof(buf), deadline, stop));
  Request r;
  r.op = buf[0];
  std::memcpy(&r.root, buf + 1, 4);
  std::memcpy(&r.bytes, buf + 5, 8);
  if (r.op < kOpAllgather || r.op > kOpBye || r.bytes > kMaxBytes) {
    return OobError("malformed request");
  }
  return r;
}

// Connects `fd` (non-blocking) to `sa` by the deadline: a peer that drops
// the SYNs (a full accept queue, a filter) would otherwise hold a blocking
// connect for the kernel's SYN retries, about two minutes.
absl::Status ConnectBy(int fd, const sockaddr_in& sa, absl::Time deadline) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) {
    return absl::OkStatus();
  }
  if (errno != EINPROGRESS && errno != EINTR) return ErrnoToStatus(errno, "connect");
  if (absl::Status s = WaitFd(fd, POLLOUT, deadline); !s.ok()) {
    if (absl::Now() < deadline) return s;  // poll failed
    return absl::DeadlineExceededError("connect: no answer from the server in time");
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return err == 0 ? absl::OkStatus() : ErrnoToStatus(err, "connect");
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpOobServer>> TcpOobServer::Start(int size,
                                                                  const std::string& bind_address,
                                                                  absl::Duration timeout) {
  if (size <= 0) return absl::InvalidArgumentError("the OOB server needs at least one rank");
  NETFOLD_ASSIGN_OR_RETURN(transport::Ipv4Endpoint ep, transport::ParseIpv4Endpoint(bind_address, 0));
  std::unique_ptr<TcpOobServer> server(new TcpOobServer());
  server->size_ = size;
  server->timeout_ = timeout;
  // Non-blocking: accept4 never waits (poll says when to call it).
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket");
  server->listen_fd_ = fd;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(ep.ip);
  sa.sin_port = htons(ep.port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoToStatus(errno, absl::StrFormat("bind %s", bind_address));
  }
  if (listen(fd, size + 8) != 0) return ErrnoToStatus(errno, "listen");
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  server->address_ = transport::Ipv4Endpoint{ep.ip, ntohs(sa.sin_port)}.ToString();
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

TcpOobServer::~TcpOobServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

absl::Status TcpOobServer::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done_.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  if (!done_.load()) return absl::DeadlineExceededError("the OOB server is still running");
  return result_;
}

void TcpOobServer::Serve() {
  std::vector<int> fds(size_, -1);
  auto finish = [&](absl::Status s) {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
    if (!s.ok()) NETFOLD_LOG(kWarning) << "OOB server: " << s;
    result_ = s;
    done_ = true;
  };
  // Accept every rank.
  int connected = 0;
  absl::Time deadline = absl::Now() + timeout_;
  while (connected < size_) {
    if (stop_.load()) return finish(absl::CancelledError("stopped"));
    // Checked on every pass: connections that never say hello must not
    // keep the server accepting past its deadline.
    if (absl::Now() >= deadline) return finish(OobError("not every rank connected in time"));
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint32_t hello[3];
    const absl::Time hello_by = std::min(deadline, absl::Now() + absl::Seconds(10));
    if (!ReadAll(fd, hello, sizeof(hello), hello_by, &stop_).ok() ||
        hello[0] != kMagic || hello[1] >= static_cast<uint32_t>(size_) ||
        hello[2] != static_cast<uint32_t>(size_) || fds[hello[1]] >= 0) {
      close(fd);
      continue;  // a stray or duplicate connection: ignore it
    }
    fds[hello[1]] = fd;
    ++connected;
  }
  // Serve operations until every rank said goodbye.
  std::vector<uint8_t> data;
  while (!stop_.load()) {
    deadline = absl::Now() + timeout_;
    Request first{};
    data.clear();
    for (int r = 0; r < size_; ++r) {
      auto req = ReadRequest(fds[r], deadline, &stop_);
      if (!req.ok()) return finish(req.status());
      if (r == 0) {
        first = *req;
      } else if (req->op != first.op || req->root != first.root || req->bytes != first.bytes) {
        return finish(OobError(absl::StrFormat(
            "ranks disagree on the out-of-band operation (rank 0: op %d, %d bytes; rank %d: op "
            "%d, %d bytes)",
            first.op, first.bytes, r, req->op, req->bytes)));
      }
      const bool sends = req->op == kOpAllgather || (req->op == kOpBcast && req->root == static_cast<uint32_t>(r));
      if (sends && req->bytes > 0) {
        const size_t at = req->op == kOpAllgather ? data.size() : 0;
        data.resize(at + req->bytes);
        if (absl::Status s = ReadAll(fds[r], data.data() + at, req->bytes, deadline, &stop_);
            !s.ok()) {
          return finish(s);
        }
      }
    }
    if (first.op == kOpBcast && first.root >= static_cast<uint32_t>(size_)) {
      return finish(OobError("bcast root out of range"));
    }
    if (first.op == kOpBye) {
      for (int r = 0; r < size_; ++r) (void)WriteAll(fds[r], &kMagic, 4, deadline, &stop_);
      return finish(absl::OkStatus());
    }
    for (int r = 0; r < size_; ++r) {
      uint64_t n = data.size();
      absl::Status s = WriteAll(fds[r], &n, sizeof(n), deadline, &stop_);
      if (s.ok() && n > 0) s = WriteAll(fds[r], data.data(), n, deadline, &stop_);
      if (!s.ok()) return finish(s);
    }
  }
  finish(absl::CancelledError("stopped"));
}

absl::StatusOr<std::unique_ptr<TcpOob>> TcpOob::Connect(const std::string& address, int rank,
                                                       int size, absl::Duration timeout) {
  if (rank < 0 || size <= 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrFormat("bad OOB rank %d of %d", rank, size));
  }
  NETFOLD_ASSIGN_OR_RETURN(transport::Ipv4Endpoint ep, transport::ParseIpv4Endpoint(address, 0));
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    // Non-blocking: every read and write waits in poll with a deadline.
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return ErrnoToStatus(errno, "socket");
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(ep.ip);
    sa.sin_port = htons(ep.port);
    const absl::Status connected = ConnectBy(fd, sa, deadline);
    if (connected.ok()) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const uint32_t hello[3] = {kMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(size)};
      if (absl::Status s = WriteAll(fd, hello, sizeof(hello), deadline); !s.ok()) {
        close(fd);
        return s;
      }
      return std::unique_ptr<TcpOob>(new TcpOob(fd, rank, size));
    }
    close(fd);
    if (absl::Now() >= deadline) {
      return WithErrorCode(
          absl::Status(connected.code(), absl::StrFormat("OOB server %s: %s", address,
                                                         connected.message())),
          NETFOLD_ERR_OOB);
    }
    absl::SleepFor(absl::Milliseconds(20));  // the server may not listen yet
  }
}

absl::StatusOr<std::unique_ptr<TcpOob>> TcpOob::FromEnvironment() {
  const char* address = std::getenv("NETFOLD_OOB_ADDRESS");
  const char* rank = std::getenv("NETFOLD_OOB_RANK");
  const char* size = std::getenv("NETFOLD_OOB_SIZE");
  int r = 0, n = 0;
  if (address == nullptr || rank == nullptr || size == nullptr || !absl::SimpleAtoi(rank, &r) ||
      !absl::SimpleAtoi(size, &n)) {
    return absl::InvalidArgumentError(
        "NETFOLD_OOB_ADDRESS, NETFOLD_OOB_RANK and NETFOLD_OOB_SIZE must be set");
  }
  return Connect(address, r, n);
}

TcpOob::~TcpOob() {
  // Say goodbye so the server can end cleanly; best effort.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  if (WriteRequest(fd_, {kOpBye, 0, 0}, deadline).ok()) {
    uint32_t ack;
    (void)ReadAll(fd_, &ack, sizeof(ack), deadline);
  }
  close(fd_);
}

absl::Status TcpOob::Exchange(uint8_t op, uint32_t root, const void* send, size_t send_bytes,
                              void* recv, size_t recv_bytes) {
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  NETFOLD_RETURN_IF_ERROR(WriteRequest(fd_, {op, root, send_bytes}, deadline));
  const bool sends = op == kOpAllgather || (op == kOpBcast && root == static_cast<uint32_t>(rank_));
  if (sends && send_bytes > 0) NETFOLD_RETURN_IF_ERROR(WriteAll(fd_, send, send_bytes, deadline));
  uint64_t n = 0;
  NETFOLD_RETURN_IF_ERROR(ReadAll(fd_, &n, sizeof(n), deadline));
  if (n != recv_bytes) return OobError("unexpected reply size");
  if (n > 0) NETFOLD_RETURN_IF_ERROR(ReadAll(fd_, recv, n, deadline));
  return absl::OkStatus();
}

absl::Status TcpOob::Allgather(const void* send, void* recv, size_t bytes) {
  return Exchange(kOpAllgather, 0, send, bytes, recv, bytes * static_cast<size_t>(size_));
}

absl::Status TcpOob::Bcast(void* buf, size_t bytes, int root) {
  return Exchange(kOpBcast, static_cast<uint32_t>(root), buf, bytes, buf, bytes);
}

absl::Status TcpOob::Barrier() { return Exchange(kOpBarrier, 0, nullptr, 0, nullptr, 0); }

netfold_oob_t TcpOob::callbacks() {
  netfold_oob_t cb;
  cb.ctx = this;
  cb.allgather = [](void* ctx, const void* send, void* recv, size_t bytes) {
    return static_cast<TcpOob*>(ctx)->Allgather(send, recv, bytes).ok() ? 0 : -1;
  };
  cb.bcast = [](void* ctx, void* buf, size_t bytes, int root) {
    return static_cast<TcpOob*>(ctx)->Bcast(buf, bytes, root).ok() ? 0 : -1;
  };
  cb.barrier = [](void* ctx) { return static_cast<TcpOob*>(ctx)->Barrier().ok() ? 0 : -1; };
  return cb;
}

}  // namespace netfold::host
