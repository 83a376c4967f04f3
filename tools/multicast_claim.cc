#include "tools/multicast_claim.h"

#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/errno_status.h"

namespace netfold::tools {
namespace {

constexpr int kNumPrefixes = MulticastClaim::kLastOctet - MulticastClaim::kFirstOctet + 1;

// Binds a new socket to the abstract name of 239.`octet`: the descriptor,
// -1 if another process holds the name, or an error.
absl::StatusOr<int> BindName(int octet) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoToStatus(errno, "socket(AF_UNIX)");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract: a leading NUL, no terminator (the length says where it ends).
  const std::string name = absl::StrFormat("netfold-multicast-239.%d", octet);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
  const int e = errno;
  close(fd);
  if (e == EADDRINUSE) return -1;
  return ErrnoToStatus(e, "bind(" + name + ")");
}

}  // namespace

absl::StatusOr<MulticastClaim> MulticastClaim::Take(int start) {
  const int first = ((start - kFirstOctet) % kNumPrefixes + kNumPrefixes) % kNumPrefixes;
  for (int i = 0; i < kNumPrefixes; ++i) {
    const int octet = kFirstOctet + (first + i) % kNumPrefixes;
    absl::StatusOr<int> fd = BindName(octet);
    if (!fd.ok()) return fd.status();
    if (*fd >= 0) return MulticastClaim(*fd, octet);
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "every multicast prefix 239.%d..239.%d is taken by another fabric on this machine "
      "(`ss -xap | grep netfold-multicast` lists who holds them)",
      kFirstOctet, kLastOctet));
}

absl::StatusOr<MulticastClaim> MulticastClaim::TakeExactly(int octet) {
  if (octet < kFirstOctet || octet > kLastOctet) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "multicast prefix 239.%d is outside 239.%d..239.%d", octet, kFirstOctet, kLastOctet));
  }
  absl::StatusOr<int> fd = BindName(octet);
  if (!fd.ok()) return fd.status();
  if (*fd < 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("another process holds the multicast prefix 239.%d", octet));
  }
  return MulticastClaim(*fd, octet);
}

bool MulticastClaim::HeldByOneOf(int octet, const std::vector<pid_t>& pids) {
  // The inodes of the sockets bound to the name ("@" marks an abstract one).
  const std::string path = absl::StrFormat("@netfold-multicast-239.%d", octet);
  std::vector<std::string> sockets;
  std::ifstream table("/proc/net/unix");
  std::string line;
  while (std::getline(table, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // Num RefCount Protocol Flags Type St Inode Path
    if (f.size() >= 8 && f[7] == path) sockets.push_back("socket:[" + f[6] + "]");
  }
  if (sockets.empty()) return false;
  for (pid_t pid : pids) {
    std::error_code ec;
    std::filesystem::directory_iterator it(absl::StrFormat("/proc/%d/fd", pid), ec);
    for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      std::error_code link_ec;
      const std::string target = std::filesystem::read_symlink(it->path(), link_ec).string();
      if (!link_ec && std::find(sockets.begin(), sockets.end(), target) != sockets.end()) {
        return true;
      }
    }
  }
  return false;
}

MulticastClaim::MulticastClaim(MulticastClaim&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), octet_(other.octet_) {}

MulticastClaim& MulticastClaim::operator=(MulticastClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    octet_ = other.octet_;
  }
  return *this;
}

MulticastClaim::~MulticastClaim() {
  if (fd_ >= 0) close(fd_);
}

std::string MulticastClaim::prefix() const { return absl::StrFormat("239.%d", octet_); }

}  // namespace netfold::tools
