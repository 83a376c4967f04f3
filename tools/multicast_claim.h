// A local fabric's claim on a multicast prefix, machine-wide: two fabrics on
// one machine (two users' `netfold up`, two tests side by side) never share
// a multicast group, so neither hears the other's results.
//
// The manager gives each group <prefix>.x.y:4791 (manager/fabric_state.h);
// LocalFabric takes a prefix "239.N" here before it writes the manager's
// config:
//
//   NETFOLD_ASSIGN_OR_RETURN(MulticastClaim claim,
//                            MulticastClaim::Take(1 + getpid() % 250));
//   config += "multicast_prefix: \"" + claim.prefix() + "\"\n";
//
// The claim is an abstract AF_UNIX socket named "netfold-multicast-239.N",
// bound while any process holds it open. LocalFabric hands the descriptor to
// every daemon it starts, so the claim lasts as long as the fabric, also
// after `netfold up` exits, and ends with the last daemon however it ends
// (no file to clean up). Abstract names belong to the network namespace, as
// loopback multicast groups do.
//
// Another local user can bind a name first; the fabric then takes the next
// free prefix, so squatting costs a prefix, never a result. Take fails with
// ResourceExhausted when every prefix is taken. Movable, not thread-safe.

#ifndef NETFOLD_TOOLS_MULTICAST_CLAIM_H_
#define NETFOLD_TOOLS_MULTICAST_CLAIM_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace netfold::tools {

class MulticastClaim {
 public:
  // The prefixes a claim can take: 239.kFirstOctet .. 239.kLastOctet.
  static constexpr int kFirstOctet = 1;
  static constexpr int kLastOctet = 250;

  // Claims the first free prefix, trying 239.`start` first and going up
  // (wrapping). `start` outside the range is folded into it.
  static absl::StatusOr<MulticastClaim> Take(int start);
  // Claims 239.`octet` alone (a restarted daemon's fabric keeps its prefix):
  // AlreadyExists if a process holds it, InvalidArgument outside the range.
  static absl::StatusOr<MulticastClaim> TakeExactly(int octet);
  // True if one of `pids` holds the claim on 239.`octet` (an open descriptor
  // of the bound socket, found through /proc/net/unix and /proc/PID/fd);
  // false if another process or none does.
  static bool HeldByOneOf(int octet, const std::vector<pid_t>& pids);

  MulticastClaim(MulticastClaim&& other) noexcept;
  MulticastClaim& operator=(MulticastClaim&& other) noexcept;
  MulticastClaim(const MulticastClaim&) = delete;
  MulticastClaim& operator=(const MulticastClaim&) = delete;
  // Closes this process's descriptor (the claim ends when no process holds one).
  ~MulticastClaim();

  // "239.N", as the manager's multicast_prefix takes it.
  std::string prefix() const;
  int octet() const { return octet_; }
  // The bound socket, close-on-exec. A child that should hold the claim
  // clears FD_CLOEXEC after fork() (async-signal-safe): LocalFabric::Spawn.
  int fd() const { return fd_; }

 private:
  MulticastClaim(int fd, int octet) : fd_(fd), octet_(octet) {}
  int fd_ = -1;
  int octet_ = 0;
};

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_MULTICAST_CLAIM_H_
