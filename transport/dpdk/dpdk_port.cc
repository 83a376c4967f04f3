#include "transport/dpdk/dpdk_port.h"

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace netfold::transport::dpdk {

absl::StatusOr<std::unique_ptr<FramePort>> CreateDpdkPort(const DpdkPortConfig& config) {
  if (config.links.empty()) {
    return absl::InvalidArgumentError("a DPDK port needs at least one link (DpdkPortConfig::links)");
  }
  if (config.port.pool.buffer_size > config.link_options.mbuf_data_size) {
    // A frame that fits a packet buffer must fit an mbuf, or it could be
    // received but never sent on.
    return absl::InvalidArgumentError(absl::StrFormat(
        "mbuf_data_size %d is smaller than the packet buffers (%d bytes)",
        config.link_options.mbuf_data_size, config.port.pool.buffer_size));
  }
  NETFOLD_RETURN_IF_ERROR(DpdkRuntime::Initialize(config.eal_args));

  FramePortConfig port_config = config.port;
  port_config.link_send_impairments.clear();
  port_config.link_receive_impairments.clear();
  std::vector<std::unique_ptr<FrameLink>> links;
  for (const DpdkLinkConfig& l : config.links) {
    absl::StatusOr<std::unique_ptr<DpdkLink>> link = DpdkLink::Open(l.device, config.link_options);
    if (!link.ok()) {
      return absl::Status(link.status().code(),
                          absl::StrFormat("link %d (%s): %s", links.size(), l.device,
                                          link.status().message()));
    }
    links.push_back(*std::move(link));
    port_config.link_send_impairments.push_back(l.send);
    port_config.link_receive_impairments.push_back(l.receive);
  }
  return FramePort::Create(port_config, std::move(links));
}

}  // namespace netfold::transport::dpdk
