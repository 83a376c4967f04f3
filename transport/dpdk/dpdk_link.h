// A FrameLink over one DPDK ethdev port: a NIC, or a virtual device
// (net_af_packet on a veth, net_tap, net_memif).
//
//   DpdkRuntime::Initialize(DefaultEalArgs());
//   absl::StatusOr<std::unique_ptr<DpdkLink>> link =
//       DpdkLink::Open("net_af_packet0,iface=veth0", {});   // hot-plugged
//   absl::StatusOr<std::unique_ptr<DpdkLink>> nic = DpdkLink::Open("0000:03:00.0", {});
//
// `device` is either the name of an ethdev port that exists (probed from
// the EAL arguments: a PCI address, "net_tap0" from --vdev=net_tap0), or a
// virtual device's devargs ("net_af_packet3,iface=veth3") which is
// hot-plugged now and removed again when the link closes. The port is
// configured with one RX and one TX queue, its own mbuf pool, promiscuous
// and all-multicast (a switch port sees every frame), and started. What
// its receive queue holds once started is discarded (counted as
// discarded_at_start): net_af_packet's socket takes every interface's
// frames until DPDK binds it to its own, enough on a busy host to fill its
// ring before anyone polls. Other devices start with an empty queue; for
// them it finds nothing, or the frames of the start's last microseconds.
//
// Data path: frames are copied between mbufs and PacketBuffers (one copy
// each way; af_packet adds its own). RecvFrames never waits; SendFrames
// frees what the device took and leaves the rest to the caller.
//
// Thread-safety: one thread uses the data path; ForEachDeviceCounter reads
// rte_eth_stats and may be called from any thread.
#ifndef NETFOLD_TRANSPORT_DPDK_DPDK_LINK_H_
#define NETFOLD_TRANSPORT_DPDK_DPDK_LINK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/dpdk/frame_link.h"

struct rte_mempool;
struct rte_device;

namespace netfold::transport::dpdk {

struct DpdkLinkOptions {
  uint32_t num_mbufs = 2047;        // per link; a power of two minus one suits the mempool
  uint16_t rx_descriptors = 512;
  uint16_t tx_descriptors = 512;
  // Bytes of frame an mbuf holds. Must be at least the largest frame, and
  // for net_af_packet at least its framesz minus 32.
  uint32_t mbuf_data_size = 4096 + 256;
  bool promiscuous = true;
};

class DpdkLink : public FrameLink {
 public:
  // Requires an initialised DpdkRuntime (FailedPrecondition otherwise).
  // NotFound if `device` names no port and is not a virtual device;
  // AlreadyExists if another DpdkLink in this process uses the port;
  // Unavailable (with DPDK's reason) if probing or setting up fails.
  static absl::StatusOr<std::unique_ptr<DpdkLink>> Open(const std::string& device,
                                                        const DpdkLinkOptions& options);
  ~DpdkLink() override;  // stops and closes the port, removes a hot-plugged device

  size_t RecvFrames(std::span<PacketBuffer* const> buffers, LinkCounters& counters) override;
  size_t SendFrames(std::span<PacketBuffer* const> frames, LinkCounters& counters) override;
  const std::string& name() const override { return name_; }
  MacAddress mac() const override { return mac_; }
  // discarded_at_start; rte_eth_stats: ipackets (the discarded frames
  // included), opackets, ibytes, obytes, imissed, ierrors, oerrors,
  // rx_nombuf.
  void ForEachDeviceCounter(
      const std::function<void(std::string_view, uint64_t)>& fn) const override;

  uint16_t port_id() const { return port_id_; }

 private:
  DpdkLink() = default;
  void DiscardQueuedFrames();

  std::string name_;
  MacAddress mac_;
  uint16_t port_id_ = 0;
  bool started_ = false;
  bool claimed_ = false;
  rte_device* hotplugged_ = nullptr;  // removed on close
  rte_mempool* mbufs_ = nullptr;
  uint64_t discarded_at_start_ = 0;  // written before the link is handed out
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_DPDK_LINK_H_
