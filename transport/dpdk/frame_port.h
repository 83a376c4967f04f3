// A Port over Ethernet links: the data plane of an emulated switch that
// owns whole frames (DPDK ports, or memory wires in tests). It terminates
// what is addressed to the switch itself and bridges everything else.
//
//   std::vector<std::unique_ptr<FrameLink>> links = ...;   // DpdkLink, MemoryFrameLink
//   absl::StatusOr<std::unique_ptr<FramePort>> port =
//       FramePort::Create({.local = {switch_ip, 4791}}, std::move(links));
//   FramePort* admin = port->get();                         // for faults and counters
//   RoceEndpoint ep(*std::move(port), RealClock());         // the RoCE engine on top
//   admin->SetLinkImpairment(1, send, receive);             // link faults, any thread
//
// Create a DPDK-backed one with CreateDpdkPort (dpdk_port.h).
//
// Terminated (the switch's own address `local.ip` and MAC `mac`):
// - ARP requests for `local.ip` get a reply; ARP requests and replies
//   teach the ARP cache; the port resolves next hops itself (requests out
//   of every link, retried, held packets sent when the reply comes).
// - ICMP echo requests to `local.ip` get a reply (`answer_ping`).
// - UDP to local.ip:local.port, and to joined multicast groups (ip and
//   port), is delivered by RecvBurst: data() at the UDP payload (the BTH),
//   src/dst from the IPv4/UDP headers. If the sender's IPv4 header was not
//   the canonical one of docs/protocol.md ("ICRC": identification 0, DF),
//   the ICRC is checked over the real headers and, if right, rewritten to
//   the canonical value, so the RoceEndpoint above checks it as usual.
// Bridged (an 802.1D learning bridge, l2_bridge.h): every other frame, by
// destination MAC; unknown unicast, broadcast and multicast are flooded to
// every other link (and multicast to a joined group is also delivered).
// Sent by SendBurst: IPv4 (identification 0, DF, TTL `ttl`) / UDP (checksum
// 0, as RoCE NICs send) frames from local to each packet's dst; unicast to
// the next hop's MAC out of the link the bridge learned it on (flooded if
// unknown), multicast to the 01:00:5e mapped MAC out of every link (and
// looped back if this port joined the group and `multicast_loopback`).
//
// Every link has a LinkImpairment stage on its send and its receive path
// (link_impairment.h), settable at run time from any thread.
//
// Idle policy: RecvBurst polls every link, and while nothing arrived for the
// local stack it sleeps between polls: right after a frame it polls again
// at once, then sleeps `idle_sleep_min`, doubling up to `idle_sleep_max`
// (the backoff carries over between calls; any frame resets it), never past
// its timeout, a held impaired frame's due time or an ARP timer. An idle
// port costs one poll per `idle_sleep_max`. `busy_poll` polls without
// sleeping (it burns a core). Bridging happens inside
// RecvBurst/SendBurst/Flush: a switch thread must keep calling them.
//
// Counters: PortCounters as every Port (delivered/sent UDP payloads), plus
// per-link LinkCounters and impairment counters, bridge counters and
// frame-level counters (ARP, ICMP, drops by reason); ForEachCounter lists
// them all by name.
//
// Thread-safety: as every Port, one thread polls it. SetLinkImpairment and
// every counter accessor may be called from any thread.
#ifndef NETFOLD_TRANSPORT_DPDK_FRAME_PORT_H_
#define NETFOLD_TRANSPORT_DPDK_FRAME_PORT_H_

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "transport/dpdk/arp_cache.h"
#include "transport/dpdk/ethernet_frame.h"
#include "transport/dpdk/frame_link.h"
#include "transport/dpdk/l2_bridge.h"
#include "transport/link_impairment.h"
#include "transport/port.h"

namespace netfold::transport::dpdk {

struct FramePortConfig {
  // The switch's own address. local.port 0 means kDefaultRocePort.
  Ipv4Endpoint local{0, kDefaultRocePort};
  // The switch's own MAC; zero: SwitchMacForAddress(local.ip), a locally
  // administered address (ethernet_frame.h). Set it to a NIC's MAC on a
  // testbed where DPDK owns the NICs, if you prefer.
  MacAddress mac;
  // Next hops: on-link when inside local.ip/prefix_length (or when there is
  // no gateway), otherwise the gateway.
  int prefix_length = 24;
  uint32_t gateway = 0;
  // Buffers for every frame in flight (received, bridged, queued, held) and
  // for the packets the user holds. A buffer holds one whole frame.
  PacketPoolConfig pool{.num_buffers = 4096, .buffer_size = 4096 + 256, .headroom = 64};
  uint32_t burst = 32;  // frames per link per poll (at most 64)
  bool busy_poll = false;
  absl::Duration idle_sleep_min = absl::Microseconds(20);
  absl::Duration idle_sleep_max = absl::Milliseconds(1);
  // The polling thread's timer slack (prctl PR_SET_TIMERSLACK), set on its
  // first idle sleep so that short sleeps are short; zero leaves it alone.
  absl::Duration idle_timer_slack = absl::Microseconds(5);
  uint8_t ttl = 64;
  uint8_t multicast_ttl = 1;
  uint8_t tos = 0;
  bool multicast_loopback = true;
  bool bridge = true;       // false: frames not for the switch are dropped
  bool answer_ping = true;
  bool normalize_icrc = true;
  BridgeConfig bridge_config;  // num_links is set from the links
  ArpConfig arp;
  // Frames waiting for one link's device; beyond, dropped (tx_queue_full).
  // SendBurst stops taking packets while a link's queue is this full.
  size_t tx_queue_limit = 1024;
  // Link faults at start (index = link); missing entries: none.
  std::vector<ImpairmentConfig> link_send_impairments;
  std::vector<ImpairmentConfig> link_receive_impairments;
};

// Frame-level counters of the local stack.
struct FramePortCounters {
  // Frames for the switch dropped by parse result (index: FrameParseResult).
  std::array<std::atomic<uint64_t>, kNumFrameParseResults> parse_drops{};
  std::atomic<uint64_t> rx_bad_source{0};   // group or zero source MAC
  std::atomic<uint64_t> rx_own_source{0};   // our own MAC came back (a loop)
  std::atomic<uint64_t> rx_not_for_us{0};   // to our MAC but another IP; bridging off
  std::atomic<uint64_t> rx_unhandled{0};    // to our IP: a protocol or port we do not serve
  std::atomic<uint64_t> rx_icrc_normalized{0};
  std::atomic<uint64_t> arp_requests_received{0};  // for our address
  std::atomic<uint64_t> arp_replies_received{0};
  std::atomic<uint64_t> arp_requests_sent{0};
  std::atomic<uint64_t> arp_replies_sent{0};
  std::atomic<uint64_t> arp_unresolved{0};  // packets dropped: no ARP reply in time
  std::atomic<uint64_t> arp_hold_refused{0};  // packets dropped: too many waiting for ARP
  std::atomic<uint64_t> icmp_echo_replies{0};
  std::atomic<uint64_t> tx_too_big{0};      // packet + 42 bytes of headers > buffer
  std::atomic<uint64_t> tx_loopback{0};     // to our own address or a joined group

  uint64_t ParseDrops(FrameParseResult r) const {
    return parse_drops[static_cast<size_t>(r)].load(std::memory_order_relaxed);
  }
};

class FramePort : public Port {
 public:
  // Takes the links (at least one). InvalidArgument for a bad config (no
  // local IP, a multicast local IP, a pool too small for a frame, ...).
  // `clock` must outlive the port.
  static absl::StatusOr<std::unique_ptr<FramePort>> Create(
      const FramePortConfig& config, std::vector<std::unique_ptr<FrameLink>> links,
      const Clock& clock = RealClock());
  ~FramePort() override;

  // Port.
  size_t RecvBurst(std::span<PacketBuffer*> out, absl::Duration timeout) override;
  size_t SendBurst(std::span<PacketBuffer* const> packets) override;
  absl::Status JoinMulticast(const Ipv4Endpoint& group) override;
  absl::Status LeaveMulticast(const Ipv4Endpoint& group) override;
  Ipv4Endpoint local() const override { return config_.local; }
  PacketPool& pool() override { return pool_; }
  const PortCounters& counters() const override { return counters_; }

  // One pass without waiting: receive and bridge, release due frames, run
  // ARP timers, transmit queued frames. For idle loops that neither send
  // nor receive. Returns the frames received from the links.
  size_t Flush();

  // Links and faults. Indices are the order of the links given to Create.
  size_t num_links() const { return links_.size(); }
  const std::string& link_name(size_t link) const { return links_[link]->link->name(); }
  std::optional<size_t> FindLink(std::string_view name) const;
  FrameLink& link(size_t i) { return *links_[i]->link; }
  // Replaces the link's send and receive impairment. Any thread.
  // OutOfRange for a bad index.
  absl::Status SetLinkImpairment(size_t link, const ImpairmentConfig& send,
                                 const ImpairmentConfig& receive);
  const LinkImpairment& send_stage(size_t link) const { return *links_[link]->send_stage; }
  const LinkImpairment& receive_stage(size_t link) const { return *links_[link]->receive_stage; }

  MacAddress mac() const { return mac_; }
  const LinkCounters& link_counters(size_t link) const { return links_[link]->counters; }
  const FramePortCounters& frame_counters() const { return frame_counters_; }
  const BridgeCounters& bridge_counters() const { return bridge_.counters(); }
  // Every counter as "port.rx_packets", "link.<name>.tx_frames",
  // "link.<name>.send.dropped_random", "device.<name>.imissed",
  // "bridge.learned", "frame.arp_requests_sent", ... Any thread.
  void ForEachCounter(const std::function<void(std::string_view, uint64_t)>& fn) const;

 private:
  static constexpr uint32_t kNoLink = ~0u;
  static constexpr size_t kMaxBurst = 64;

  struct LinkState {
    std::unique_ptr<FrameLink> link;
    std::unique_ptr<LinkImpairment> send_stage;
    std::unique_ptr<LinkImpairment> receive_stage;
    LinkCounters counters;
    std::vector<PacketBuffer*> tx_in;    // waiting for the send stage
    std::deque<PacketBuffer*> tx_queue;  // passed the stage, waiting for the device
  };

  FramePort(const FramePortConfig& config, const Clock& clock);

  size_t PollOnce();
  void HandleFrame(uint32_t in, PacketBuffer* p, int64_t now_ns);
  void Terminate(uint32_t in, PacketBuffer* p, const FrameView& v, FrameParseResult r,
                 int64_t now_ns);
  void HandleArp(uint32_t in, PacketBuffer* p, const FrameView& v, int64_t now_ns);
  void HandleIpv4(uint32_t in, PacketBuffer* p, const FrameView& v);
  void Deliver(PacketBuffer* p, const FrameView& v, const Ipv4Endpoint& dst);
  bool WantsLocally(const FrameView& v) const;
  const Ipv4Endpoint* FindGroup(uint32_t ip, uint16_t port) const;

  void SendOne(PacketBuffer* p, int64_t now_ns);
  void SendToMac(PacketBuffer* frame, const MacAddress& mac, int64_t now_ns);
  void SendArpRequest(uint32_t ip);
  void LoopbackCopy(const PacketBuffer& frame, const Ipv4Endpoint& dst);
  uint32_t NextHop(uint32_t ip) const;
  // Sends `frame` out of every link but `in`; the last link gets `frame`
  // itself unless `keep` (then the caller still owns it).
  void Flood(uint32_t in, PacketBuffer* frame, bool keep);
  void Enqueue(uint32_t link, PacketBuffer* frame) { links_[link]->tx_in.push_back(frame); }
  void FlushTx();
  void ArpTick(int64_t now_ns);
  bool TxBackpressure() const;
  std::optional<int64_t> NextEventNs() const;
  size_t PopReady(std::span<PacketBuffer*> out);

  FramePortConfig config_;
  const Clock& clock_;
  PacketPool pool_;
  PortCounters counters_;
  FramePortCounters frame_counters_;
  MacAddress mac_;
  uint32_t netmask_ = 0;
  std::vector<std::unique_ptr<LinkState>> links_;
  L2Bridge bridge_;
  ArpCache arp_;
  std::vector<Ipv4Endpoint> groups_;
  std::deque<PacketBuffer*> rx_ready_;
  int64_t idle_sleep_ns_ = 0;  // next idle sleep; 0 right after traffic
  // Scratch, kept to avoid allocation per poll.
  std::vector<PacketBuffer*> rx_passed_;
  std::vector<PacketBuffer*> tx_passed_;
  std::vector<PacketBuffer*> released_;
  std::vector<PacketBuffer*> failed_;
  std::vector<uint32_t> arp_requests_;
};

}  // namespace netfold::transport::dpdk

#endif  // NETFOLD_TRANSPORT_DPDK_FRAME_PORT_H_
