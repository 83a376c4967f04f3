// The DPDK backend of netfold-switchd: a transport::Port whose links are
// DPDK ports. This is the factory the switch daemon calls.
//
//   DpdkPortConfig config;
//   config.eal_args = DefaultEalArgs();                       // once per process
//   config.links = {{.device = "net_af_packet0,iface=sw1-p0"},
//                   {.device = "net_af_packet1,iface=sw1-p1"}};
//   config.port.local = {*ParseIpv4Address("10.0.0.254"), 4791};
//   absl::StatusOr<std::unique_ptr<FramePort>> port = CreateDpdkPort(config);
//   if (!port.ok()) return port.status();        // says what is missing (root, device, ...)
//   FramePort* admin = port->get();               // link faults and counters
//   std::unique_ptr<transport::Port> plain = *std::move(port);   // what the data plane uses
//
// It initialises the EAL (DpdkRuntime) if this is the first DPDK port of the
// process, opens one DpdkLink per entry of `links` (in order: link i of the
// FramePort is links[i]) and builds a FramePort over them (frame_port.h:
// what is terminated, bridged, counted; the idle policy). Each link's
// faults start from its config and can be changed at run time with
// FramePort::SetLinkImpairment.
//
// Thread-safety: CreateDpdkPort may be called from any thread; the port it
// returns follows the Port rules (one polling thread).
#ifndef NETFOLD_TRANSPORT_DPDK_DPDK_PORT_H_
#define NETFOLD_TRANSPORT_DPDK_DPDK_PORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/dpdk/dpdk_link.h"
#include "transport/dpdk/dpdk_runtime.h"
#include "transport/dpdk/frame_port.h"
#include "transport/link_impairment.h"

namespace netfold::transport::dpdk {

struct DpdkLinkConfig {
  // A port the EAL probed (PCI address, "net_tap0" from --vdev), or a
  // virtual device's devargs to hot-plug ("net_af_packet0,iface=veth0").
  std::string device;
  ImpairmentConfig send;     // faults on frames leaving through this link
  ImpairmentConfig receive;  // faults on frames arriving on it
};

struct DpdkPortConfig {
  // Used only by the first DPDK port of the process (the EAL is global).
  std::vector<std::string> eal_args = DefaultEalArgs();
  std::vector<DpdkLinkConfig> links;
  // Address, MAC, pool, idle policy, bridge and ARP settings. Its link
  // impairment lists are ignored: DpdkLinkConfig carries them.
  FramePortConfig port;
  DpdkLinkOptions link_options;  // mbufs and descriptors, per link
};

// Returns the switch's Port, or the first error: the EAL's (PermissionDenied
// when not root, ...), a device's (NotFound, Unavailable with DPDK's
// reason), or the config's (InvalidArgument). On error nothing stays open
// (the EAL stays initialised: it cannot be undone).
absl::StatusOr<std::unique_ptr<FramePort>> CreateDpdkPort(const DpdkPortConfig& config);

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_DPDK_PORT_H_
