#include "host/link/verbs_leaf_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "host/link/verbs_address.h"
#include "host/link/verbs_attributes.h"
#include "host/link/verbs_buffers.h"
#include "host/link/verbs_resources.h"
#include "host/link/verbs_status.h"

namespace netfold::host {

namespace {

GidType FromVerbsGidType(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_ROCE_V1:
      return GidType::kRoceV1;
    case IBV_GID_TYPE_ROCE_V2:
      return GidType::kRoceV2;
    default:
      return GidType::kIb;
  }
}

absl::Status SetNonBlocking(int fd, std::string_view what) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return StatusFromErrno(errno, what);
  }
  return absl::OkStatus();
}

absl::Status Modify(ibv_qp* qp, const QpTransition& t, std::string_view what) {
  QpTransition copy = t;  // ibv_modify_qp takes a non-const pointer
  const int rc = ibv_modify_qp(qp, &copy.attr, copy.mask);
  if (rc != 0) return StatusFromErrno(rc > 0 ? rc : errno, what);
  return absl::OkStatus();
}

// IPv4 address (host order) -> what verbs and rdma_cm take.
ibv_gid VerbsGidOf(uint32_t ipv4) {
  const Gid g = Ipv4MappedGid(ipv4);
  ibv_gid gid;
  std::memcpy(gid.raw, g.data(), g.size());
  return gid;
}

sockaddr_in SockaddrOf(uint32_t ipv4) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ipv4);
  return a;
}

// The device, port and GID index holding `ipv4` (or the ones the options
// force), and the opened device.
struct Placement {
  VerbsContext context;
  std::string device;
  uint8_t port = 0;
  uint32_t gid_index = 0;
  ibv_port_attr port_attr{};
};

absl::StatusOr<Placement> Place(const VerbsLinkOptions& o, uint32_t ipv4) {
  int num_devices = 0;
  errno = 0;
  VerbsDeviceList list(ibv_get_device_list(&num_devices));
  if (!list || num_devices == 0) {
    const int err = errno;
    return absl::NotFoundError(absl::StrFormat(
            "no RDMA device on this host (ibv_get_device_list: %s); NETFOLD_TRANSPORT=verbs needs "
            "an RDMA NIC or Soft-RoCE (`rdma link add rxe0 type rxe netdev IFACE`, docs/verbs.md)",
            err != 0 ? std::strerror(err) : "none found"));
  }
  std::vector<std::string> tried;
  absl::Status last = absl::NotFoundError("no device matched");
  for (int d = 0; d < num_devices; ++d) {
    ibv_device* dev = list.get()[d];
    const std::string name = ibv_get_device_name(dev);
    if (!o.device.empty() && name != o.device) continue;
    tried.push_back(name);
    VerbsContext ctx(ibv_open_device(dev));
    if (!ctx) {
      last = StatusFromErrno(errno, absl::StrFormat("opening RDMA device %s", name));
      continue;
    }
    ibv_device_attr dattr{};
    if (int rc = ibv_query_device(ctx.get(), &dattr); rc != 0) {
      last = StatusFromErrno(rc, absl::StrFormat("querying RDMA device %s", name));
      continue;
    }
    for (uint8_t port = 1; port <= dattr.phys_port_cnt; ++port) {
      if (o.port != 0 && port != o.port) continue;
      ibv_port_attr pattr{};
      if (int rc = ibv_query_port(ctx.get(), port, &pattr); rc != 0) {
        last = StatusFromErrno(rc, absl::StrFormat("querying %s port %d", name, port));
        continue;
      }
      std::vector<GidEntry> table;
      for (int i = 0; i < pattr.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx.get(), port, static_cast<uint32_t>(i), &e, 0) != 0) continue;
        GidEntry g;
        g.index = e.gid_index;
        std::memcpy(g.gid.data(), e.gid.raw, g.gid.size());
        g.type = FromVerbsGidType(e.gid_type);
        table.push_back(g);
      }
      absl::StatusOr<uint32_t> index = SelectGidIndex(table, ipv4, o.gid_index);
      if (!index.ok()) {
        last = absl::Status(index.status().code(),
                            absl::StrFormat("%s port %d: %s", name, port, index.status().message()));
        continue;
      }
      if (pattr.state != IBV_PORT_ACTIVE) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s port %d holds the address but is %s, not ACTIVE", name, port,
            ibv_port_state_str(pattr.state)));
      }
      Placement p;
      p.context = std::move(ctx);
      p.device = name;
      p.port = port;
      p.gid_index = *index;
      p.port_attr = pattr;
      return p;
    }
  }
  if (tried.empty()) {
    return absl::NotFoundError(absl::StrFormat("there is no RDMA device named '%s'", o.device));
  }
  return absl::Status(last.code(), absl::StrFormat("no RDMA port holds %s (tried %s): %s",
                                                   o.local_address, absl::StrJoin(tried, ", "),
                                                   last.message()));
}

}  // namespace

struct VerbsLeafLink::Impl {
  VerbsLinkOptions options;
  uint32_t local_ip = 0;
  std::string device;
  uint8_t port = 0;
  uint32_t gid_index = 0;
  ibv_mtu path_mtu = IBV_MTU_1024;
  ibv_port_attr port_attr{};

  // In order of creation: members are destroyed in reverse.
  VerbsContext context;
  VerbsCompChannel channel;
  VerbsCq cq;
  VerbsPd pd;
  std::unique_ptr<BufferSlots> sends, rc_recvs, ud_recvs;
  VerbsMr send_mr, rc_recv_mr, ud_recv_mr;
  VerbsQp rc, ud;
  CmEventChannel cm_channel;
  CmId cm_id;
  bool cm_unavailable = false;

  std::map<uint32_t, bool> groups;  // attached multicast addresses -> joined through rdma_cm
  bool connected = false;
  unsigned unacked_cq_events = 0;
  int wake_fd = -1;  // eventfd: Wake() ends a Progress waiting in ppoll
  absl::Status failure;
  LeafLinkStats stats;

  ~Impl() {
    if (wake_fd >= 0) close(wake_fd);
    if (cq && unacked_cq_events > 0) ibv_ack_cq_events(cq.get(), unacked_cq_events);
    for (const auto& [ip, joined] : groups) Leave(ip, joined);
  }

  // Detaches the UD QP from group `ip` and leaves it at rdma_cm if joined.
  void Leave(uint32_t ip, bool joined) {
    ibv_gid gid = VerbsGidOf(ip);
    if (ud) (void)ibv_detach_mcast(ud.get(), &gid, 0);
    if (joined && cm_id) {
      sockaddr_in a = SockaddrOf(ip);
      (void)rdma_leave_multicast(cm_id.get(), reinterpret_cast<sockaddr*>(&a));
    }
  }

  absl::Status PostRecv(ibv_qp* qp, BufferSlots& slots, ibv_mr* mr, WrKind kind, uint32_t index) {
    std::span<uint8_t> buf = slots.Slot(index);
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(buf.data());
    sge.length = static_cast<uint32_t>(buf.size());
    sge.lkey = mr->lkey;
    ibv_recv_wr wr{};
    wr.wr_id = MakeWrId(kind, index);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp, &wr, &bad); rc != 0) {
      return StatusFromErrno(rc, "posting a receive buffer");
    }
    return absl::OkStatus();
  }

  absl::Status PostAllRecvs(ibv_qp* qp, BufferSlots& slots, ibv_mr* mr, WrKind kind) {
    while (std::optional<uint32_t> i = slots.Acquire()) {
      NETFOLD_RETURN_IF_ERROR(PostRecv(qp, slots, mr, kind, *i));
    }
    return absl::OkStatus();
  }

  // An rdma_cm id bound to the rank's address, for multicast joins.
  absl::Status OpenCm() {
    cm_channel.reset(rdma_create_event_channel());
    if (!cm_channel) return StatusFromErrno(errno, "creating an rdma_cm event channel");
    NETFOLD_RETURN_IF_ERROR(SetNonBlocking(cm_channel->fd, "the rdma_cm channel"));
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel.get(), &id, nullptr, RDMA_PS_UDP) != 0) {
      return StatusFromErrno(errno, "creating an rdma_cm id");
    }
    cm_id.reset(id);
    sockaddr_in local = SockaddrOf(local_ip);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&local)) != 0) {
      return StatusFromErrno(errno, "binding the rdma_cm id to the rank's address");
    }
    return absl::OkStatus();
  }

  void Fail(absl::Status why) {
    if (failure.ok()) {
      NETFOLD_LOG(kWarning) << "verbs leaf link failed: " << why.message();
      failure = std::move(why);
    }
  }

  // Handles one completion; returns after delivering at most one message.
  void Complete(const ibv_wc& wc, absl::FunctionRef<void(const LinkMessage&)> deliver) {
    std::optional<WrId> id = DecodeWrId(wc.wr_id);
    if (!id) {
      ++stats.packets_dropped;
      return;
    }
    switch (id->kind) {
      case WrKind::kRcSend:
        if (!sends->Release(id->index)) ++stats.packets_dropped;
        if (wc.status != IBV_WC_SUCCESS) {
          Fail(StatusFromCompletion(wc.status, wc.vendor_err, "a request to the leaf switch"));
        }
        return;
      case WrKind::kRcRecv:
      case WrKind::kUdRecv: {
        const bool is_ud = id->kind == WrKind::kUdRecv;
        BufferSlots& slots = is_ud ? *ud_recvs : *rc_recvs;
        if (wc.status != IBV_WC_SUCCESS) {
          (void)slots.Release(id->index);  // the QP flushed it; not re-posted
          if (!is_ud) {
            Fail(StatusFromCompletion(wc.status, wc.vendor_err, "a result from the leaf switch"));
          } else if (wc.status != IBV_WC_WR_FLUSH_ERR) {
            ++stats.packets_dropped;
          }
          return;
        }
        std::span<uint8_t> buf = slots.Slot(id->index);
        const size_t skip = is_ud ? kUdReceivePrefix : 0;
        if (wc.byte_len < skip || wc.byte_len > buf.size()) {
          ++stats.packets_dropped;
        } else {
          stats.rx_bytes += wc.byte_len - skip;
          deliver(LinkMessage(buf.subspan(skip, wc.byte_len - skip)));
        }
        ibv_qp* qp = is_ud ? ud.get() : rc.get();
        ibv_mr* mr = is_ud ? ud_recv_mr.get() : rc_recv_mr.get();
        if (absl::Status s = PostRecv(qp, slots, mr, id->kind, id->index); !s.ok()) {
          (void)slots.Release(id->index);
          if (!is_ud) Fail(s);
        }
        return;
      }
    }
  }

  // Polls the CQ dry; returns the number of completions handled.
  int Drain(absl::FunctionRef<void(const LinkMessage&)> deliver) {
    int total = 0;
    ibv_wc wcs[32];
    for (;;) {
      const int n = ibv_poll_cq(cq.get(), 32, wcs);
      if (n < 0) {
        Fail(absl::UnavailableError("polling the completion queue failed"));
        return total;
      }
      for (int i = 0; i < n; ++i) Complete(wcs[i], deliver);
      total += n;
      if (n < 32) return total;
    }
  }

  void HandleAsyncEvents() {
    ibv_async_event event;
    while (ibv_get_async_event(context.get(), &event) == 0) {
      absl::Status s = StatusFromAsyncEvent(event.event_type);
      const bool ours = event.event_type == IBV_EVENT_PORT_ERR ||
                        event.event_type == IBV_EVENT_DEVICE_FATAL ||
                        (event.element.qp != nullptr &&
                         (event.element.qp == rc.get() || event.element.qp == ud.get()));
      ibv_ack_async_event(&event);
      if (!s.ok() && ours) Fail(s);
    }
  }
};

VerbsLeafLink::VerbsLeafLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VerbsLeafLink::~VerbsLeafLink() = default;

absl::StatusOr<std::unique_ptr<VerbsLeafLink>> VerbsLeafLink::Create(const VerbsLinkOptions& o) {
  if (o.send_queue == 0 || o.recv_queue == 0 || o.max_message == 0) {
    return absl::InvalidArgumentError("verbs link: queue sizes and max_message must be positive");
  }
  NETFOLD_ASSIGN_OR_RETURN(const uint32_t ipv4, transport::ParseIpv4Address(o.local_address));
  NETFOLD_ASSIGN_OR_RETURN(Placement placement, Place(o, ipv4));
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // without it, Wake() does nothing
  m.options = o;
  m.local_ip = ipv4;
  m.device = placement.device;
  m.port = placement.port;
  m.gid_index = placement.gid_index;
  m.port_attr = placement.port_attr;
  m.context = std::move(placement.context);
  if (o.path_mtu != 0) {
    NETFOLD_ASSIGN_OR_RETURN(m.path_mtu, MtuFromBytes(o.path_mtu));
    if (MtuBytes(m.path_mtu) > MtuBytes(m.port_attr.active_mtu)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "NETFOLD_VERBS_MTU=%d exceeds %s port %d's active MTU of %d bytes", o.path_mtu,
          m.device, m.port, MtuBytes(m.port_attr.active_mtu)));
    }
  } else {
    m.path_mtu = m.port_attr.active_mtu;
  }
  NETFOLD_RETURN_IF_ERROR(SetNonBlocking(m.context->async_fd, "the device's async event fd"));

  m.channel.reset(ibv_create_comp_channel(m.context.get()));
  if (!m.channel) return StatusFromErrno(errno, "creating a completion channel");
  NETFOLD_RETURN_IF_ERROR(SetNonBlocking(m.channel->fd, "the completion channel"));
  const int cqe = static_cast<int>(o.send_queue + 2 * o.recv_queue);
  m.cq.reset(ibv_create_cq(m.context.get(), cqe, nullptr, m.channel.get(), 0));
  if (!m.cq) return StatusFromErrno(errno, "creating a completion queue");
  m.pd.reset(ibv_alloc_pd(m.context.get()));
  if (!m.pd) return StatusFromErrno(errno, "allocating a protection domain");

  m.sends = std::make_unique<BufferSlots>(o.send_queue, o.max_message);
  m.rc_recvs = std::make_unique<BufferSlots>(o.recv_queue, o.max_message);
  m.ud_recvs = std::make_unique<BufferSlots>(o.recv_queue,
                                             kUdReceivePrefix + MtuBytes(m.path_mtu));
  auto reg = [&](BufferSlots& slots, VerbsMr* mr, const char* what) -> absl::Status {
    mr->reset(ibv_reg_mr(m.pd.get(), slots.base(), slots.total_bytes(), IBV_ACCESS_LOCAL_WRITE));
    if (!*mr) return StatusFromErrno(errno, absl::StrFormat("registering the %s buffers", what));
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(reg(*m.sends, &m.send_mr, "send"));
  NETFOLD_RETURN_IF_ERROR(reg(*m.rc_recvs, &m.rc_recv_mr, "RC receive"));
  NETFOLD_RETURN_IF_ERROR(reg(*m.ud_recvs, &m.ud_recv_mr, "UD receive"));

  auto make_qp = [&](ibv_qp_type type, uint32_t send_wr, VerbsQp* qp) -> absl::Status {
    ibv_qp_init_attr init{};
    init.send_cq = m.cq.get();
    init.recv_cq = m.cq.get();
    init.cap.max_send_wr = send_wr;
    init.cap.max_recv_wr = o.recv_queue;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.qp_type = type;
    init.sq_sig_all = 1;
    qp->reset(ibv_create_qp(m.pd.get(), &init));
    if (!*qp) {
      return StatusFromErrno(errno, type == IBV_QPT_RC ? "creating the RC QP" : "creating the UD QP");
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(make_qp(IBV_QPT_RC, o.send_queue, &m.rc));
  NETFOLD_RETURN_IF_ERROR(make_qp(IBV_QPT_UD, 1, &m.ud));
  NETFOLD_LOG(kInfo) << absl::StrFormat(
      "verbs leaf link on %s port %d, GID index %d (%s), path MTU %d, RC QP 0x%06x, UD QP 0x%06x",
      m.device, m.port, m.gid_index, FormatGid(Ipv4MappedGid(ipv4)), MtuBytes(m.path_mtu),
      m.rc->qp_num, m.ud->qp_num);
  return std::unique_ptr<VerbsLeafLink>(new VerbsLeafLink(std::move(impl)));
}

std::string VerbsLeafLink::address() const {
  return transport::Ipv4Endpoint{impl_->local_ip, kRoceUdpPort}.ToString();
}

uint32_t VerbsLeafLink::qpn() const { return impl_->rc->qp_num; }

size_t VerbsLeafLink::max_datagram_payload() const { return MtuBytes(impl_->path_mtu); }

absl::Status VerbsLeafLink::Connect(const LeafPeer& peer) {
  Impl& m = *impl_;
  if (m.connected) return absl::FailedPreconditionError("the leaf link is already connected");
  std::vector<uint16_t> pkeys;
  for (int i = 0; i < m.port_attr.pkey_tbl_len; ++i) {
    __be16 p = 0;
    if (ibv_query_pkey(m.context.get(), m.port, i, &p) == 0) pkeys.push_back(p);
  }
  NETFOLD_ASSIGN_OR_RETURN(const uint16_t pkey_index, FindPkeyIndex(pkeys, peer.pkey));

  NETFOLD_RETURN_IF_ERROR(Modify(m.rc.get(), RcToInit(m.port, pkey_index), "RC QP to INIT"));
  NETFOLD_RETURN_IF_ERROR(
      m.PostAllRecvs(m.rc.get(), *m.rc_recvs, m.rc_recv_mr.get(), WrKind::kRcRecv));
  RcRtrParams rtr;
  rtr.port = m.port;
  rtr.path_mtu = m.path_mtu;
  rtr.dest_qpn = peer.remote_qpn;
  rtr.rq_psn = peer.rq_psn;
  rtr.dgid = Ipv4MappedGid(peer.remote.ip);
  rtr.sgid_index = static_cast<uint8_t>(m.gid_index);
  NETFOLD_RETURN_IF_ERROR(Modify(m.rc.get(), RcToRtr(rtr), "RC QP to RTR"));
  RcRtsParams rts;
  rts.sq_psn = peer.sq_psn;
  rts.timeout_exponent = AckTimeoutExponent(std::max(m.options.ack_timeout, peer.ack_timeout));
  rts.retry_count = std::min<uint8_t>(m.options.retry_count, 6);
  NETFOLD_RETURN_IF_ERROR(Modify(m.rc.get(), RcToRts(rts), "RC QP to RTS"));

  NETFOLD_RETURN_IF_ERROR(
      Modify(m.ud.get(), UdToInit(m.port, pkey_index, peer.qkey), "UD QP to INIT"));
  NETFOLD_RETURN_IF_ERROR(
      m.PostAllRecvs(m.ud.get(), *m.ud_recvs, m.ud_recv_mr.get(), WrKind::kUdRecv));
  NETFOLD_RETURN_IF_ERROR(Modify(m.ud.get(), UdToRtr(), "UD QP to RTR"));
  NETFOLD_RETURN_IF_ERROR(Modify(m.ud.get(), UdToRts(0), "UD QP to RTS"));
  m.connected = true;
  return absl::OkStatus();
}

absl::Status VerbsLeafLink::PostRequest(std::span<const uint8_t> header,
                                        std::span<const uint8_t> elements,
                                        std::span<const uint8_t> tag) {
  Impl& m = *impl_;
  if (!m.failure.ok()) return m.failure;
  if (!m.connected) return absl::FailedPreconditionError("the leaf link is not connected");
  const size_t size = header.size() + elements.size() + tag.size();
  if (size > m.sends->slot_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a request of %d bytes exceeds the verbs link's %d-byte messages", size,
        m.sends->slot_bytes()));
  }
  std::optional<uint32_t> slot = m.sends->Acquire();
  if (!slot) return absl::ResourceExhaustedError("the verbs send queue is full");
  // Into the registered send buffer: the caller's memory is not registered.
  std::span<uint8_t> buf = m.sends->Slot(*slot);
  std::memcpy(buf.data(), header.data(), header.size());
  if (!elements.empty()) std::memcpy(buf.data() + header.size(), elements.data(), elements.size());
  if (!tag.empty()) {
    std::memcpy(buf.data() + header.size() + elements.size(), tag.data(), tag.size());
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(buf.data());
  sge.length = static_cast<uint32_t>(size);
  sge.lkey = m.send_mr->lkey;
  ibv_send_wr wr{};
  wr.wr_id = MakeWrId(WrKind::kRcSend, *slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(m.rc.get(), &wr, &bad); rc != 0) {
    m.sends->Release(*slot);
    if (rc == ENOMEM) return absl::ResourceExhaustedError("the verbs send queue is full");
    absl::Status s = StatusFromErrno(rc, "posting a request to the leaf switch");
    m.Fail(absl::UnavailableError(s.message()));
    return m.failure;
  }
  m.stats.tx_bytes += size;
  return absl::OkStatus();
}

// `source` is not checked: a UD completion does not carry the UDP source
// port, and the GRH's source address alone would not tell the switch from
// another process on its machine (docs/security.md, "The data plane").
absl::Status VerbsLeafLink::AttachMulticast(const transport::Ipv4Endpoint& group,
                                            const transport::Ipv4Endpoint& /*source*/) {
  Impl& m = *impl_;
  if (!m.connected) return absl::FailedPreconditionError("the leaf link is not connected");
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a multicast address", group.ToString()));
  }
  if (m.groups.count(group.ip) > 0) return absl::OkStatus();
  // The IGMP join (so that snooping switches forward the group) through
  // rdma_cm; without rdma_cm (no rdma_ucm module) the attach alone still
  // receives on segments that flood multicast.
  bool joined = false;
  if (!m.cm_unavailable && !m.cm_id) {
    if (absl::Status s = m.OpenCm(); !s.ok()) {
      NETFOLD_LOG(kWarning) << "rdma_cm is not available (" << s.message()
                            << "): multicast groups are attached without an IGMP join";
      m.cm_id.reset();
      m.cm_channel.reset();
      m.cm_unavailable = true;
    }
  }
  if (m.cm_id) {
    sockaddr_in a = SockaddrOf(group.ip);
    if (rdma_join_multicast(m.cm_id.get(), reinterpret_cast<sockaddr*>(&a), nullptr) == 0) {
      const absl::Time deadline = absl::Now() + m.options.join_timeout;
      while (!joined && absl::Now() < deadline) {
        pollfd p{m.cm_channel->fd, POLLIN, 0};
        const int ms = static_cast<int>(
            std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
        if (poll(&p, 1, ms) <= 0) continue;
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(m.cm_channel.get(), &ev) != 0) continue;
        const rdma_cm_event_type type = ev->event;
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_MULTICAST_JOIN) {
          joined = true;
        } else if (type == RDMA_CM_EVENT_MULTICAST_ERROR) {
          break;
        }
      }
      if (!joined) {
        NETFOLD_LOG(kWarning) << "the IGMP join of " << group.ToString()
                              << " did not complete; attaching without it";
        (void)rdma_leave_multicast(m.cm_id.get(), reinterpret_cast<sockaddr*>(&a));
      }
    }
  }
  ibv_gid gid = VerbsGidOf(group.ip);
  if (int rc = ibv_attach_mcast(m.ud.get(), &gid, 0); rc != 0) {
    return StatusFromErrno(rc, absl::StrFormat("attaching the UD QP to %s",
                                               FormatGid(Ipv4MappedGid(group.ip))));
  }
  m.groups[group.ip] = joined;
  return absl::OkStatus();
}

void VerbsLeafLink::DetachMulticast(const transport::Ipv4Endpoint& group) {
  Impl& m = *impl_;
  auto it = m.groups.find(group.ip);
  if (it == m.groups.end()) return;
  m.Leave(group.ip, it->second);
  m.groups.erase(it);
}

size_t VerbsLeafLink::Progress(absl::Duration timeout,
                               absl::FunctionRef<void(const LinkMessage&)> deliver) {
  Impl& m = *impl_;
  m.HandleAsyncEvents();
  if (const int n = m.Drain(deliver); n > 0 || timeout <= absl::ZeroDuration()) {
    return static_cast<size_t>(n);
  }
  // Arm the notification, then look once more: a completion that arrived
  // in between would otherwise wait for the next one.
  if (ibv_req_notify_cq(m.cq.get(), 0) != 0) {
    m.Fail(absl::UnavailableError("arming the completion queue failed"));
    return 0;
  }
  if (const int n = m.Drain(deliver); n > 0) return static_cast<size_t>(n);
  pollfd fds[3] = {{m.channel->fd, POLLIN, 0},
                   {m.context->async_fd, POLLIN, 0},
                   {m.wake_fd, POLLIN, 0}};
  const timespec ts = absl::ToTimespec(std::min(timeout, absl::Seconds(60)));
  if (ppoll(fds, m.wake_fd >= 0 ? 3 : 2, &ts, nullptr) <= 0) return 0;
  if (m.wake_fd >= 0 && (fds[2].revents & POLLIN)) {
    uint64_t count = 0;
    (void)!read(m.wake_fd, &count, sizeof(count));
  }
  if (fds[0].revents & POLLIN) {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    while (ibv_get_cq_event(m.channel.get(), &cq, &cq_context) == 0) {
      if (++m.unacked_cq_events >= 64) {
        ibv_ack_cq_events(m.cq.get(), m.unacked_cq_events);
        m.unacked_cq_events = 0;
      }
    }
  }
  if (fds[1].revents & POLLIN) m.HandleAsyncEvents();
  return static_cast<size_t>(m.Drain(deliver));
}

void VerbsLeafLink::Wake() {
  const uint64_t one = 1;
  if (impl_->wake_fd >= 0) (void)!write(impl_->wake_fd, &one, sizeof(one));
}

absl::Status VerbsLeafLink::status() const { return impl_->failure; }

LeafLinkStats VerbsLeafLink::stats() const { return impl_->stats; }

}  // namespace netfold::host
