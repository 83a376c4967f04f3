// The `verbs` leaf link: the rank's RC QP and multicast UD QP on an RDMA NIC
// (or Soft-RoCE) through libibverbs, talking RoCEv2 to netfold's software
// switches. The layering follows device -> context -> queue pairs ->
// registered buffers: a device and port are chosen by the GID that holds
// the rank's IPv4 address, one completion queue (with a completion channel,
// so Progress blocks with a deadline instead of spinning) serves both QPs,
// receive buffers are pre-posted and re-posted as results are consumed,
// requests are copied into registered send slots lent until their
// completion. Multicast results arrive on the UD QP after ibv_attach_mcast
// of the group's GID (::ffff:<group>), with an IGMP join through rdma_cm
// where the kernel offers it.
//
//   VerbsLinkOptions o{.local_address = "10.0.0.1", .max_message = 40 + slot_bytes};
//   absl::StatusOr<std::unique_ptr<VerbsLeafLink>> link = VerbsLeafLink::Create(o);
//   // NotFound/FailedPrecondition with the reason when there is no usable device.
//
// Thread-safety: as LeafLink.
#ifndef NETFOLD_HOST_LINK_VERBS_LEAF_LINK_H_
#define NETFOLD_HOST_LINK_VERBS_LEAF_LINK_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "host/link/leaf_link.h"

namespace netfold::host {

struct VerbsLinkOptions {
  // The rank's IPv4 address on the RoCE interface (NETFOLD_LOCAL_ADDRESS):
  // it picks the device, port and GID, and is what the switch sends to.
  std::string local_address;
  std::string device;                  // NETFOLD_VERBS_DEVICE; "" = found by the address
  uint8_t port = 0;                    // NETFOLD_VERBS_PORT; 0 = found by the address
  std::optional<uint32_t> gid_index;   // NETFOLD_VERBS_GID_INDEX; nullopt = by the address
  uint32_t path_mtu = 0;               // NETFOLD_VERBS_MTU; 0 = the port's active MTU
  uint32_t max_message = 4096;         // the largest request or RC result, bytes
  uint32_t send_queue = 128;           // requests in flight
  uint32_t recv_queue = 256;           // receive buffers per QP
  // The RC QP waits this long for an ACK (rounded up to 4.096 us x 2^n),
  // then retransmits, `retry_count` times (0..6; see RcRtsParams) before
  // the link fails: about 7 x 268 ms of silence from the switch by default.
  absl::Duration ack_timeout = absl::Milliseconds(268);
  uint8_t retry_count = 6;
  absl::Duration join_timeout = absl::Seconds(5);       // the rdma_cm multicast join
};

// The RoCEv2 UDP port: where a NIC listens, and so the port of the address
// a verbs rank gives the manager.
inline constexpr uint16_t kRoceUdpPort = 4791;

class VerbsLeafLink : public LeafLink {
 public:
  // Opens the device and creates the CQ, the QPs (RESET) and the registered
  // buffers. Errors: NotFound (no RDMA device, none holding the address, no
  // such device/port/GID), FailedPrecondition (the port is down, the GID is
  // not RoCE v2), InvalidArgument (a bad option), or the verbs call's errno.
  static absl::StatusOr<std::unique_ptr<VerbsLeafLink>> Create(const VerbsLinkOptions& options);
  ~VerbsLeafLink() override;

  std::string address() const override;
  uint32_t qpn() const override;
  size_t max_datagram_payload() const override;
  absl::Status Connect(const LeafPeer& peer) override;
  absl::Status PostRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                           std::span<const uint8_t> tag) override;
  absl::Status AttachMulticast(const transport::Ipv4Endpoint& group,
                               const transport::Ipv4Endpoint& source) override;
  void DetachMulticast(const transport::Ipv4Endpoint& group) override;
  void Flush() override {}
  size_t Progress(absl::Duration timeout,
                absl::FunctionRef<void(const LinkMessage&)> deliver) override;
  void Wake() override;
  absl::Status status() const override;
  LeafLinkStats stats() const override;

 private:
  struct Impl;
  explicit VerbsLeafLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_VERBS_LEAF_LINK_H_
