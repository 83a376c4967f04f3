// The `soft` leaf link: an RC QP and a UD QP on netfold's own RoCEv2 engine
// (transport/roce_endpoint.h) over a UDP socket. The endpoint is shared with
// the host algorithms' queue pairs (host/host_collectives.h), so Progress()
// moves their traffic too.
//
//   auto link = *SoftLeafLink::Create(&endpoint, port);
//
// Thread-safety: as LeafLink.
#ifndef NETFOLD_HOST_LINK_SOFT_LEAF_LINK_H_
#define NETFOLD_HOST_LINK_SOFT_LEAF_LINK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "host/link/leaf_link.h"
#include "transport/impaired_port.h"
#include "transport/roce_endpoint.h"

namespace netfold::host {

class SoftLeafLink : public LeafLink {
 public:
  // `endpoint` and `port` (the endpoint's port, for byte counters; may be
  // null) are not owned and must outlive the link. Creates the RC QP in INIT.
  // Without a port the link's stats leave out the port's and the engine's
  // counters: a data plane's link, beside the link that counts them
  // (DataPath::AddPlane).
  static absl::StatusOr<std::unique_ptr<SoftLeafLink>> Create(transport::RoceEndpoint* endpoint,
                                                              const transport::ImpairedPort* port);
  ~SoftLeafLink() override;

  std::string address() const override;
  uint32_t qpn() const override { return rc_->qpn(); }
  size_t max_datagram_payload() const override;
  absl::Status Connect(const LeafPeer& peer) override;
  absl::Status Reconnect(const LeafPeer& peer) override;
  absl::Status SendKeepalive() override { return rc_->SendKeepalive(); }
  bool keepalive_answered() const override { return rc_->keepalive_answered(); }
  // The elements are referenced (RcQueuePair::PostSendGatherReferencing):
  // sent from the caller's memory, copied only by ReleaseRequests or for a
  // port that cannot send them from there.
  absl::Status PostRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                           std::span<const uint8_t> tag) override;
  void ReleaseRequests(std::span<const uint8_t> memory) override;
  absl::Status AttachMulticast(const transport::Ipv4Endpoint& group,
                               const transport::Ipv4Endpoint& source) override;
  void DetachMulticast(const transport::Ipv4Endpoint& group) override;
  void Flush() override;
  void ReserveRequests(uint32_t messages) override;
  bool MayHoldMore() const override { return endpoint_->MayHoldMore(); }
  size_t Progress(absl::Duration timeout,
                absl::FunctionRef<void(const LinkMessage&)> deliver) override;
  size_t Drain(absl::FunctionRef<void(const LinkMessage&)> deliver) override;
  bool HoldsMessages() const override;
  void Wake() override { endpoint_->port().Wake(); }
  absl::Status status() const override;
  LeafLinkStats stats() const override;

 private:
  SoftLeafLink(transport::RoceEndpoint* endpoint, const transport::ImpairedPort* port)
      : endpoint_(endpoint), port_(port) {}
  // The RC QP from RESET to RTS toward `peer`.
  absl::Status ConnectRc(const LeafPeer& peer);

  transport::RoceEndpoint* endpoint_;
  const transport::ImpairedPort* port_;
  transport::RcQueuePair* rc_ = nullptr;
  transport::UdQueuePair* ud_ = nullptr;
};

}  // namespace netfold::host

#endif  // NETFOLD_HOST_LINK_SOFT_LEAF_LINK_H_
