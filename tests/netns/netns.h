// Test helper: network namespaces and veth pairs that a test makes for
// itself and that always go away, even when the test fails or the process
// is killed.
//
//   if (std::string why = NetnsUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
//   NetnsTestbed bed("nd");
//   std::string h0 = *bed.AddNamespace();
//   NetnsTestbed::Veth v = *bed.AddVeth(h0, "198.18.0.1/24");   // v.root_if stays in the root ns
//   bed.Exec(h0, "ip neigh show");                               // a command inside h0
//   int replies = *bed.Ping(h0, "198.18.0.254", 3);               // ICMP echo from h0
//   bed.RunIn(h0, [&] { sock = MakeSocket(); });                 // a socket that lives in h0
//
// Names carry the tag and this process's pid ("nd4711n0", "nd4711r0"), so
// parallel test processes never collide and nothing outside is touched.
// Cleanup happens three ways: the destructor deletes what the testbed made;
// a reaper process started with the first testbed deletes whatever is left
// with this pid's names when this process exits in any way (crash, kill,
// timeout); and every new testbed first deletes leftovers of dead pids.
//
// Thread-safety: a testbed belongs to one thread; RunIn runs its function on
// a helper thread and waits for it.
#ifndef NETFOLD_TESTS_NETNS_NETNS_H_
#define NETFOLD_TESTS_NETNS_NETNS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netfold::testing {

struct CommandResult {
  int exit_code = -1;  // -1: could not run or was killed (timeout)
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` with /bin/sh -c, killed after `timeout`. Never throws.
CommandResult RunCommand(const std::string& command, absl::Duration timeout = absl::Seconds(20));

// "" if this process can build namespace testbeds (root, iproute2, netns
// support); otherwise the reason, for GTEST_SKIP.
std::string NetnsUnavailableReason();

class NetnsTestbed {
 public:
  // `tag`: 2-3 lowercase letters identifying the test binary.
  explicit NetnsTestbed(std::string tag);
  ~NetnsTestbed();
  NetnsTestbed(const NetnsTestbed&) = delete;
  NetnsTestbed& operator=(const NetnsTestbed&) = delete;

  // A new namespace with its loopback up (and IPv6 off: no router
  // solicitations or DAD on the test links). Returns its name.
  absl::StatusOr<std::string> AddNamespace();

  struct Veth {
    std::string root_if;  // stays in the root namespace: up, no address, IPv6 off
    std::string ns_if;    // inside `ns`, with the address, up
    std::string ns;
  };
  // A veth pair into `ns` with `cidr` ("198.18.0.1/24") on the inner end;
  // both ends get `mtu`. Checksum offload is turned off on the inner end
  // (when ethtool is installed) so frames a user-space switch forwards
  // carry real checksums.
  absl::StatusOr<Veth> AddVeth(const std::string& ns, const std::string& cidr, int mtu = 1500);

  // Runs `command` inside `ns` (ip netns exec).
  CommandResult Exec(const std::string& ns, const std::string& command,
                     absl::Duration timeout = absl::Seconds(20));

  // Sends `count` ICMP echo requests from namespace `ns` to `dst_ip`
  // ("198.18.0.2"), one at a time, each waiting up to `wait` for its reply
  // (a raw socket: no dependency on the ping program). Returns how many
  // were answered.
  absl::StatusOr<int> Ping(const std::string& ns, const std::string& dst_ip, int count,
                           absl::Duration wait = absl::Seconds(1));

  // Runs `fn` on a thread that entered `ns`, and waits for it. Sockets `fn`
  // creates stay in `ns` and can be used from any thread afterwards.
  absl::Status RunIn(const std::string& ns, const std::function<void()>& fn);

  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  int next_ns_ = 0;
  int next_link_ = 0;
  std::vector<std::string> namespaces_;
  std::vector<std::string> root_links_;
};

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_NETNS_NETNS_H_
