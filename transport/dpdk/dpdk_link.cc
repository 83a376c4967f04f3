#include "transport/dpdk/dpdk_link.h"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "transport/dpdk/dpdk_runtime.h"

namespace netfold::transport::dpdk {
namespace {

constexpr size_t kMaxBurst = 64;

absl::Mutex g_claim_mu;
absl::flat_hash_set<uint16_t>& Claimed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_claim_mu) {
  static auto* claimed = new absl::flat_hash_set<uint16_t>();
  return *claimed;
}

std::atomic<uint32_t> g_next_pool{0};

bool LooksLikeVdev(const std::string& name) {
  return name.rfind("net_", 0) == 0 || name.rfind("eth_", 0) == 0;
}

absl::Status DpdkError(int err, const std::string& what) {
  return absl::UnavailableError(
      absl::StrFormat("%s: %s (errno %d)", what, rte_strerror(err < 0 ? -err : err), err));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DpdkLink>> DpdkLink::Open(const std::string& device,
                                                         const DpdkLinkOptions& options) {
  DpdkRuntime* runtime = DpdkRuntime::Get();
  if (runtime == nullptr) {
    return absl::FailedPreconditionError(
        "the DPDK EAL is not initialised (DpdkRuntime::Initialize first)");
  }
  if (device.empty()) return absl::InvalidArgumentError("empty DPDK device name");
  if (options.mbuf_data_size < 64 || options.mbuf_data_size + RTE_PKTMBUF_HEADROOM > UINT16_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mbuf_data_size %d is not in 64..%d", options.mbuf_data_size,
                        UINT16_MAX - RTE_PKTMBUF_HEADROOM));
  }
  const std::string name = device.substr(0, device.find(','));
  std::unique_ptr<DpdkLink> link(new DpdkLink());
  link->name_ = name;

  uint16_t port_id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) != 0) {
    if (device.find(',') == std::string::npos && !LooksLikeVdev(name)) {
      return absl::NotFoundError(absl::StrFormat(
          "no DPDK port '%s' (ports: [%s]); give a PCI address probed by the EAL (-a ...) or a "
          "virtual device with its arguments, e.g. net_af_packet0,iface=veth0",
          name, absl::StrJoin(runtime->PortNames(), ", ")));
    }
    const int rc = rte_dev_probe(device.c_str());
    if (rc < 0) {
      return DpdkError(rc, absl::StrFormat("cannot create DPDK device '%s' (does the interface "
                                           "exist? is the device name unique? root?)",
                                           device));
    }
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) != 0) {
      return absl::InternalError(
          absl::StrFormat("DPDK device '%s' was probed but has no ethdev port '%s'", device, name));
    }
    rte_eth_dev_info probed;
    if (rte_eth_dev_info_get(port_id, &probed) == 0) link->hotplugged_ = probed.device;
  }
  link->port_id_ = port_id;
  {
    absl::MutexLock lock(&g_claim_mu);
    if (!Claimed().insert(port_id).second) {
      link->hotplugged_ = nullptr;  // not ours to remove
      return absl::AlreadyExistsError(
          absl::StrFormat("DPDK port '%s' is already used by another link", name));
    }
  }
  link->claimed_ = true;

  const int socket = rte_eth_dev_socket_id(port_id);
  const std::string pool_name =
      absl::StrFormat("nf_mbuf_%u", g_next_pool.fetch_add(1, std::memory_order_relaxed));
  link->mbufs_ = rte_pktmbuf_pool_create(
      pool_name.c_str(), options.num_mbufs, std::min<unsigned>(32, options.num_mbufs / 2), 0,
      static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + options.mbuf_data_size),
      socket < 0 ? static_cast<int>(SOCKET_ID_ANY) : socket);
  if (link->mbufs_ == nullptr) {
    return DpdkError(rte_errno, absl::StrFormat("cannot create an mbuf pool of %d x %d bytes for "
                                                "'%s' (raise the EAL's -m)",
                                                options.num_mbufs, options.mbuf_data_size, name));
  }

  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  int rc = rte_eth_dev_configure(port_id, 1, 1, &conf);
  if (rc < 0) return DpdkError(rc, absl::StrFormat("rte_eth_dev_configure(%s)", name));
  uint16_t rx_desc = options.rx_descriptors;
  uint16_t tx_desc = options.tx_descriptors;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_desc, &tx_desc);
  if (rc < 0) return DpdkError(rc, absl::StrFormat("rte_eth_dev_adjust_nb_rx_tx_desc(%s)", name));
  rc = rte_eth_rx_queue_setup(port_id, 0, rx_desc, static_cast<unsigned>(socket < 0 ? 0 : socket),
                              nullptr, link->mbufs_);
  if (rc < 0) {
    return DpdkError(rc, absl::StrFormat("rte_eth_rx_queue_setup(%s) with %d-byte mbufs (for "
                                         "net_af_packet, mbuf_data_size >= framesz - 32)",
                                         name, options.mbuf_data_size));
  }
  rc = rte_eth_tx_queue_setup(port_id, 0, tx_desc, static_cast<unsigned>(socket < 0 ? 0 : socket),
                              nullptr);
  if (rc < 0) return DpdkError(rc, absl::StrFormat("rte_eth_tx_queue_setup(%s)", name));
  rc = rte_eth_dev_start(port_id);
  if (rc < 0) return DpdkError(rc, absl::StrFormat("rte_eth_dev_start(%s)", name));
  link->started_ = true;
  if (options.promiscuous) {
    rc = rte_eth_promiscuous_enable(port_id);
    if (rc < 0) NETFOLD_LOG(kWarning) << "DPDK port " << name << ": no promiscuous mode (" << rc << ")";
    rc = rte_eth_allmulticast_enable(port_id);
    if (rc < 0) NETFOLD_LOG(kDebug) << "DPDK port " << name << ": no all-multicast mode (" << rc << ")";
  }
  rte_ether_addr addr;
  rc = rte_eth_macaddr_get(port_id, &addr);
  if (rc < 0) return DpdkError(rc, absl::StrFormat("rte_eth_macaddr_get(%s)", name));
  std::memcpy(link->mac_.bytes.data(), addr.addr_bytes, 6);
  link->DiscardQueuedFrames();
  NETFOLD_LOG(kInfo) << "DPDK link " << name << " (port " << port_id << ", " << link->mac_.ToString()
                     << ") up";
  return link;
}

DpdkLink::~DpdkLink() {
  if (started_) {
    const int rc = rte_eth_dev_stop(port_id_);
    if (rc < 0) NETFOLD_LOG(kWarning) << "rte_eth_dev_stop(" << name_ << "): " << rc;
  }
  if (hotplugged_ != nullptr) {
    // A device we created goes away with the link; a port the EAL probed
    // stays (stopped) for whoever opens it next.
    rte_eth_dev_close(port_id_);
    const int rc = rte_dev_remove(hotplugged_);
    if (rc < 0) NETFOLD_LOG(kWarning) << "rte_dev_remove(" << name_ << "): " << rc;
  }
  if (mbufs_ != nullptr) rte_mempool_free(mbufs_);
  if (claimed_) {
    absl::MutexLock lock(&g_claim_mu);
    Claimed().erase(port_id_);
  }
}

void DpdkLink::DiscardQueuedFrames() {
  // Bounded: the receive queue holds at most its descriptors (af_packet:
  // its ring's frames); more would be frames arriving meanwhile.
  constexpr int kRounds = 256;
  rte_mbuf* mbufs[kMaxBurst];
  int round = 0;
  for (; round < kRounds; ++round) {
    const uint16_t n = rte_eth_rx_burst(port_id_, 0, mbufs, kMaxBurst);
    if (n == 0) break;
    for (uint16_t i = 0; i < n; ++i) rte_pktmbuf_free(mbufs[i]);
    discarded_at_start_ += n;
  }
  if (round == kRounds) {
    NETFOLD_LOG(kWarning) << "DPDK link " << name_ << ": still receiving after discarding "
                          << discarded_at_start_ << " frames queued before its start";
  } else if (discarded_at_start_ > 0) {
    NETFOLD_LOG(kDebug) << "DPDK link " << name_ << ": discarded " << discarded_at_start_
                        << " frames queued before its start";
  }
}

size_t DpdkLink::RecvFrames(std::span<PacketBuffer* const> buffers, LinkCounters& counters) {
  rte_mbuf* mbufs[kMaxBurst];
  const uint16_t want = static_cast<uint16_t>(std::min(buffers.size(), kMaxBurst));
  const uint16_t n = rte_eth_rx_burst(port_id_, 0, mbufs, want);
  size_t out = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = mbufs[i];
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    PacketBuffer* p = buffers[out];
    if (len > p->capacity()) {
      counters.Add(counters.rx_oversize);
    } else {
      const void* src = rte_pktmbuf_read(m, 0, len, p->data());
      if (src != nullptr && src != p->data()) std::memcpy(p->data(), src, len);
      p->set_len(len);
      ++out;
    }
    rte_pktmbuf_free(m);
  }
  return out;
}

size_t DpdkLink::SendFrames(std::span<PacketBuffer* const> frames, LinkCounters& counters) {
  const size_t want = std::min(frames.size(), kMaxBurst);
  rte_mbuf* mbufs[kMaxBurst];
  size_t built = 0;
  for (; built < want; ++built) {
    PacketBuffer* f = frames[built];
    rte_mbuf* m = rte_pktmbuf_alloc(mbufs_);
    if (m == nullptr) {
      if (built == 0) counters.Add(counters.tx_no_buffer);
      break;
    }
    char* dst = rte_pktmbuf_append(m, static_cast<uint16_t>(std::min<uint32_t>(f->len(), UINT16_MAX)));
    if (dst == nullptr || f->len() > UINT16_MAX) {
      rte_pktmbuf_free(m);
      if (built == 0) {
        // Larger than the device takes: drop it (taken), so it cannot wedge the queue.
        counters.Add(counters.tx_errors);
        PacketPool::Free(f);
        return 1;
      }
      break;
    }
    std::memcpy(dst, f->data(), f->len());
    mbufs[built] = m;
  }
  const uint16_t sent = built == 0 ? 0 : rte_eth_tx_burst(port_id_, 0, mbufs, static_cast<uint16_t>(built));
  for (size_t i = sent; i < built; ++i) rte_pktmbuf_free(mbufs[i]);
  for (size_t i = 0; i < sent; ++i) PacketPool::Free(frames[i]);
  return sent;
}

void DpdkLink::ForEachDeviceCounter(
    const std::function<void(std::string_view, uint64_t)>& fn) const {
  fn("discarded_at_start", discarded_at_start_);
  rte_eth_stats s;
  if (rte_eth_stats_get(port_id_, &s) != 0) return;
  fn("ipackets", s.ipackets);
  fn("opackets", s.opackets);
  fn("ibytes", s.ibytes);
  fn("obytes", s.obytes);
  fn("imissed", s.imissed);
  fn("ierrors", s.ierrors);
  fn("oerrors", s.oerrors);
  fn("rx_nombuf", s.rx_nombuf);
}

}  // namespace netfold::transport::dpdk
