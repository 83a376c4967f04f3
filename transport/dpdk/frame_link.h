// One Ethernet link of a FramePort: where whole frames enter and leave.
// DpdkLink (dpdk_link.h) drives a DPDK ethdev port; MemoryFrameLink (below)
// is a wire in memory for tests and benchmarks.
//
//   PacketBuffer* bufs[32];                    // allocated by the caller
//   size_t n = link.RecvFrames(bufs, counters); // bufs[0..n) hold frames now
//   size_t sent = link.SendFrames(frames);      // link freed frames[0..sent)
//
// A frame sits in a PacketBuffer with data() at its first byte (the
// destination MAC) and len() its length without FCS.
//
// Contract:
// - RecvFrames fills the first n of the caller's buffers with received
//   frames and returns n; the caller still owns every buffer. A frame that
//   does not fit a buffer is dropped and counted (rx_oversize).
// - SendFrames sends a prefix of `frames` and returns its length; it frees
//   the buffers it took. It never blocks waiting for the network.
// - A link belongs to one thread; its counters may be read from any thread.
#ifndef NETFOLD_TRANSPORT_DPDK_FRAME_LINK_H_
#define NETFOLD_TRANSPORT_DPDK_FRAME_LINK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transport/dpdk/ethernet_frame.h"
#include "transport/packet_pool.h"

namespace netfold::transport::dpdk {

// Per-link counters (frames, whole Ethernet frames without FCS). FramePort
// counts frames and bytes; a link counts what only it sees (oversize,
// device refusals, no device buffer).
struct LinkCounters {
  std::atomic<uint64_t> rx_frames{0};
  std::atomic<uint64_t> rx_bytes{0};
  std::atomic<uint64_t> tx_frames{0};
  std::atomic<uint64_t> tx_bytes{0};
  std::atomic<uint64_t> rx_oversize{0};     // frame larger than a packet buffer
  std::atomic<uint64_t> rx_no_buffer{0};    // frames left in the device: pool empty
  std::atomic<uint64_t> tx_queue_full{0};   // dropped: the link's transmit queue was full
  std::atomic<uint64_t> tx_no_buffer{0};    // a flood copy or device buffer could not be had
  std::atomic<uint64_t> tx_errors{0};       // refused by the device (e.g. larger than it sends)

  void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
};

class FrameLink {
 public:
  virtual ~FrameLink() = default;

  virtual size_t RecvFrames(std::span<PacketBuffer* const> buffers, LinkCounters& counters) = 0;
  virtual size_t SendFrames(std::span<PacketBuffer* const> frames, LinkCounters& counters) = 0;

  // A name for counters and the admin interface ("net_af_packet0").
  virtual const std::string& name() const = 0;
  virtual MacAddress mac() const = 0;
  // Device-level counters, if the link has any beyond LinkCounters
  // (e.g. DPDK's rte_eth_stats). Callable from any thread.
  virtual void ForEachDeviceCounter(
      const std::function<void(std::string_view, uint64_t)>& /*fn*/) const {}
};

// Both ends of a wire in memory. The port side is a FrameLink; the test
// side injects frames towards the port and takes the frames it sent.
// Thread-safe: the two sides may be used from different threads.
class MemoryFrameLink : public FrameLink {
 public:
  MemoryFrameLink(std::string name, const MacAddress& mac, size_t queue_limit = 4096);

  size_t RecvFrames(std::span<PacketBuffer* const> buffers, LinkCounters& counters) override;
  size_t SendFrames(std::span<PacketBuffer* const> frames, LinkCounters& counters) override;
  const std::string& name() const override { return name_; }
  MacAddress mac() const override { return mac_; }

  // Test side. Inject returns false if the queue towards the port is full.
  bool Inject(std::span<const uint8_t> frame);
  // Frames the port sent, oldest first (and forgets them).
  std::vector<std::vector<uint8_t>> Take();
  size_t num_sent() const;
  // How often the port polled this link (RecvFrames calls).
  uint64_t num_polls() const { return polls_.load(std::memory_order_relaxed); }
  // When false, SendFrames takes nothing (a full device queue).
  void set_accepting(bool accepting);

 private:
  std::string name_;
  MacAddress mac_;
  size_t queue_limit_;
  std::atomic<uint64_t> polls_{0};
  mutable absl::Mutex mu_;
  std::deque<std::vector<uint8_t>> to_port_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint8_t>> from_port_ ABSL_GUARDED_BY(mu_);
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_FRAME_LINK_H_
