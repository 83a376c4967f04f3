// The DPDK Environment Abstraction Layer (EAL), initialised once per
// process. DPDK allows one rte_eal_init per process; this object makes that
// explicit and turns its failures into a Status that says what to fix.
//
//   absl::StatusOr<DpdkRuntime*> rt = DpdkRuntime::Initialize(DefaultEalArgs());
//   if (!rt.ok()) return rt.status();   // e.g. PermissionDenied: not root
//
// The first call runs rte_eal_init with the given arguments (argv[0] is
// added). Later calls return the same runtime whatever their arguments
// (a mismatch is logged: devices they name can still be hot-plugged by
// DpdkLink). If initialisation failed, every later call returns the same
// error: DPDK cannot be initialised twice in one process.
//
// netfold does not use DPDK's lcores: the thread that polls a port is the
// caller's. rte_eal_init pins the calling thread to the main lcore; the
// runtime restores that thread's CPU affinity afterwards so a 2-core
// machine keeps both cores for everything else.
//
// Thread-safety: Initialize and Get are thread-safe. The runtime lives until
// the process exits (the EAL is not cleaned up).
#ifndef NETFOLD_TRANSPORT_DPDK_DPDK_RUNTIME_H_
#define NETFOLD_TRANSPORT_DPDK_DPDK_RUNTIME_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace netfold::transport::dpdk {

// Arguments that work on any Linux machine without hugepages or a PCI NIC,
// for virtual devices (net_af_packet, net_tap, net_memif):
//   --no-huge --no-shconf --no-pci -m 256 -l 0 --no-telemetry --log-level=*:warning
// --no-shconf lets several DPDK processes run at once (no shared config
// file). On a testbed with real NICs drop --no-huge/--no-pci and add -a
// <PCI address> per port (docs/dpdk.md).
std::vector<std::string> DefaultEalArgs();

// Splits a command-line string ("--no-huge -m 256 --vdev=net_tap0") on
// white space, for configs and flags that carry EAL arguments as one
// string. No quoting.
std::vector<std::string> SplitEalArgs(std::string_view text);

class DpdkRuntime {
 public:
  // See the file comment. Errors: PermissionDenied (not root / EACCES),
  // FailedPrecondition (a previous initialisation failed, or DPDK was
  // initialised by someone else), InvalidArgument (the EAL rejected its
  // arguments), Unavailable (anything else the EAL reports).
  static absl::StatusOr<DpdkRuntime*> Initialize(const std::vector<std::string>& eal_args);
  // The runtime, or nullptr before a successful Initialize.
  static DpdkRuntime* Get();

  const std::vector<std::string>& eal_args() const { return eal_args_; }
  // Names of the DPDK ethdev ports that exist now ("net_af_packet0", PCI
  // addresses), for error messages and tools.
  std::vector<std::string> PortNames() const;

 private:
  explicit DpdkRuntime(std::vector<std::string> args) : eal_args_(std::move(args)) {}
  std::vector<std::string> eal_args_;
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_DPDK_RUNTIME_H_
