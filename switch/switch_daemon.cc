#include "switch/switch_daemon.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/control/plane_name.h"
#include "switch/control_commands.h"
#include "transport/multi_queue_udp_port.h"
#include "transport/udp_port.h"
#ifdef NETFOLD_HAVE_DPDK
#include "transport/dpdk/dpdk_port.h"
#endif

namespace netfold::sw {
namespace {

// How long Stop waits for the data plane to run its part, and how long the
// aborts of removed groups get to leave before the QPs go.
constexpr absl::Duration kStopStepTimeout = absl::Seconds(5);
constexpr absl::Duration kAbortGrace = absl::Milliseconds(50);

}  // namespace

absl::StatusOr<std::unique_ptr<transport::Port>> CreateBackendPort(const SwitchdConfig& config) {
  if (config.backend == "udp") {
    transport::UdpPortConfig udp;
    udp.local = config.data_address;
    udp.poll_window = config.poll_window;
    udp.pool.num_buffers = config.packet_buffers;
    if (config.receive_queues > 0) {
      absl::StatusOr<std::unique_ptr<transport::MultiQueueUdpPort>> port =
          transport::MultiQueueUdpPort::Create(
              {.port = udp, .queues = static_cast<int>(config.receive_queues)});
      if (!port.ok()) {
        return absl::Status(port.status().code(),
                            absl::StrFormat("data plane on %s: %s",
                                            config.data_address.ToString(),
                                            port.status().message()));
      }
      return std::unique_ptr<transport::Port>(std::move(*port));
    }
    absl::StatusOr<std::unique_ptr<transport::UdpPort>> port = transport::UdpPort::Create(udp);
    if (!port.ok()) {
      return absl::Status(port.status().code(),
                          absl::StrFormat("data plane on %s: %s", config.data_address.ToString(),
                                          port.status().message()));
    }
    return std::unique_ptr<transport::Port>(std::move(*port));
  }
  if (config.backend == "dpdk") {
#ifdef NETFOLD_HAVE_DPDK
    namespace dpdk = transport::dpdk;
    const DpdkBackendConfig& d = config.dpdk;
    dpdk::DpdkPortConfig pc;
    if (!d.eal_args.empty()) pc.eal_args = dpdk::SplitEalArgs(d.eal_args);
    for (const DpdkLinkSpec& l : d.links) {
      pc.links.push_back({.device = l.device, .send = l.send, .receive = l.receive});
    }
    pc.port.local = config.data_address;
    if (!d.mac.empty()) {
      NETFOLD_ASSIGN_OR_RETURN(pc.port.mac, dpdk::ParseMacAddress(d.mac));
    }
    pc.port.prefix_length = d.prefix_length;
    pc.port.gateway = d.gateway;
    pc.port.busy_poll = d.busy_poll;
    pc.port.bridge = d.bridge;
    pc.port.pool.num_buffers = config.packet_buffers;
    pc.link_options.num_mbufs = d.mbufs_per_link;
    pc.link_options.mbuf_data_size =
        d.mbuf_data_size != 0 ? d.mbuf_data_size
                              : std::max<uint32_t>(8192, config.data_plane.path_mtu + 256);
    absl::StatusOr<std::unique_ptr<dpdk::FramePort>> port = dpdk::CreateDpdkPort(pc);
    if (!port.ok()) {
      return absl::Status(port.status().code(),
                          absl::StrFormat("DPDK data plane on %s: %s",
                                          config.data_address.ToString(), port.status().message()));
    }
    return std::unique_ptr<transport::Port>(std::move(*port));
#else
    return absl::UnimplementedError("this netfold-switchd was built without DPDK; use udp");
#endif
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown backend '%s'", config.backend));
}

absl::StatusOr<std::unique_ptr<SwitchDaemon>> SwitchDaemon::Start(const SwitchdConfig& config,
                                                                  DataPlaneThread* shared) {
  NETFOLD_RETURN_IF_ERROR(ValidateSwitchdConfig(config));
  std::unique_ptr<SwitchDaemon> d(new SwitchDaemon(config));
  // A data plane other than the first is a switch of its own to the fabric.
  d->config_.name = control::PlaneSwitchName(config.name, config.plane);
  d->config_.data_plane.name = d->config_.name;
  if (!config.manager_address.empty()) {
    // The switch's capacity, but where job_quota says less.
    SwitchConfig& dp = d->config_.data_plane;
    dp.default_quota = config.QuotaGivenOver(
        {.max_groups = dp.max_groups, .max_slots = dp.max_slots, .max_qps = dp.max_qps});
    const JobQuota& q = dp.default_quota;
    if (q.max_groups < dp.max_groups || q.max_slots < dp.max_slots || q.max_qps < dp.max_qps) {
      NETFOLD_LOG(kWarning) << absl::StrFormat(
          "switch %s: job_quota (%d groups, %d slots, %d QPs per job) is not known to the "
          "manager: groups it grants a job beyond it are refused here",
          d->config_.name, q.max_groups, q.max_slots, q.max_qps);
    }
  }
  const std::string& name = d->config_.name;

  NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<transport::Port> backend, CreateBackendPort(config));
  d->data_address_ = backend->local();
  // The backend's own counters for the admin API (the DPDK port's, the
  // receive queues'); the daemon keeps the port (inside port_) as long as
  // the admin service.
  std::function<void(const std::function<void(std::string_view, uint64_t)>&)> backend_counters;
  if (auto* queues = dynamic_cast<transport::MultiQueueUdpPort*>(backend.get())) {
    backend_counters = [queues](const auto& fn) { queues->ForEachCounter(fn); };
  }
#ifdef NETFOLD_HAVE_DPDK
  if (auto* frame_port = dynamic_cast<transport::dpdk::FramePort*>(backend.get())) {
    backend_counters = [frame_port](const auto& fn) { frame_port->ForEachCounter(fn); };
  }
#endif
  auto port = std::make_unique<transport::ImpairedPort>(std::move(backend), RealClock());
  for (const LinkFaultSpec& f : config.link_faults) {
    if (f.peer == "default") {
      port->SetDefaultImpairment(f.direction, f.impairment);
    } else if (f.peer == "all") {
      port->SetAllImpairment(f.direction, f.impairment);
    } else {
      absl::StatusOr<transport::Ipv4Endpoint> peer = transport::ParseIpv4Endpoint(f.peer);
      if (!peer.ok()) return peer.status();
      NETFOLD_RETURN_IF_ERROR(port->SetPeerImpairment(*peer, f.direction, f.impairment));
    }
    NETFOLD_LOG(kWarning) << "switch " << name << ": link fault " << f.peer << " "
                          << transport::LinkDirectionName(f.direction) << ": "
                          << f.impairment.ToString();
  }
  d->port_ = port.get();
  d->dp_ = std::make_unique<SwitchDataPlane>(std::move(port), RealClock(), d->config_.data_plane);
  NETFOLD_RETURN_IF_ERROR(d->InstallStatic());
  if (shared == nullptr) {
    // Idle, the thread sleeps in receive: packets, QP timers, a posted
    // command (Post wakes it) and Stop (likewise) end the wait.
    d->own_thread_ = std::make_unique<DataPlaneThread>(DataPlaneThreadOptions{
        .idle_wait = config.idle_wait.value_or(d->dp_->CanWake() ? kIdleWaitWoken
                                                                 : absl::Milliseconds(1)),
        .sched_batch = config.sched_batch,
        .name = name});
    shared = d->own_thread_.get();
  }
  NETFOLD_RETURN_IF_ERROR(shared->Add(d->dp_.get(), [raw = d.get()] { raw->AfterPass(); }));
  d->thread_ = shared;

  const uint64_t incarnation = NewIncarnation();
  const control::SwitchCapacity capacity = CapacityOf(d->config_.data_plane, config.max_trees);
  if (!config.admin_address.empty()) {
    SwitchIdentity identity{.name = name,
                            .data_address = d->data_address_.ToString(),
                            .incarnation = incarnation,
                            .started = absl::Now(),
                            .capacity = capacity,
                            .backend = config.backend,
                            .allow_detail = config.admin_detail,
                            .backend_counters = std::move(backend_counters)};
    d->admin_service_ =
        std::make_unique<SwitchAdminService>(d->dp_.get(), d->port_, std::move(identity),
                                             config.credential);
    NETFOLD_ASSIGN_OR_RETURN(d->admin_server_,
                             AdminServer::Start(config.admin_address, d->admin_service_.get(),
                                                config.tls ? &*config.tls : nullptr));
    absl::StatusOr<transport::Ipv4Endpoint> admin = transport::ParseIpv4Endpoint(config.admin_address);
    if (!admin.ok()) return admin.status();
    admin->port = static_cast<uint16_t>(d->admin_server_->port());
    d->admin_address_ = admin->ToString();
  }
  if (!config.manager_address.empty()) {
    SwitchAgentOptions options;
    options.manager_address = config.manager_address;
    options.name = name;
    options.data_address = d->data_address_.ToString();
    options.admin_address = d->admin_address_;
    options.credential = config.credential;
    if (config.tls) options.tls_ca_pem = config.tls->ca_pem;
    options.capacity = capacity;
    options.incarnation = incarnation;
    options.limits.max_trees = config.max_trees;
    SwitchDaemon* raw = d.get();
    d->agent_ = std::make_unique<SwitchAgent>(options, d->dp_.get(), [raw] {
      control::ResourceUsage u;
      u.set_groups(raw->used_groups_.load(std::memory_order_relaxed));
      u.set_slots(raw->used_slots_.load(std::memory_order_relaxed));
      u.set_qps(raw->used_qps_.load(std::memory_order_relaxed));
      return u;
    });
    d->agent_for_dp_.store(d->agent_.get());
    d->agent_->Start();
  }
  NETFOLD_LOG(kWarning) << absl::StrFormat(
      "netfold-switchd %s: data plane %s (%s), admin %s, %s", name,
      d->data_address_.ToString(), config.backend,
      d->admin_address_.empty() ? "off" : d->admin_address_,
      config.manager_address.empty()
          ? absl::StrFormat("static mode (%d QPs, %d groups)", config.static_qps.size(),
                            config.static_groups.size())
          : absl::StrFormat("manager %s", config.manager_address));
  return d;
}

absl::Status SwitchDaemon::InstallStatic() {
  for (const auto& [job, quota] : config_.static_job_quotas) dp_->SetJobQuota(job, quota);
  for (const QpRequest& qp : config_.static_qps) {
    absl::StatusOr<QpCreated> created = dp_->CreateQp(qp);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrFormat("static QP 0x%x (%s): %s", qp.qpn.value_or(0), qp.peer,
                                          created.status().message()));
    }
  }
  for (const GroupSpec& g : config_.static_groups) {
    absl::Status s = dp_->InstallGroup(g);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("static group %d (tree %d): %s", g.group_id,
                                                    g.tree_id, s.message()));
    }
  }
  return absl::OkStatus();
}

void SwitchDaemon::AfterPass() {
  used_groups_.store(static_cast<uint32_t>(dp_->num_groups()), std::memory_order_relaxed);
  used_slots_.store(dp_->num_slots_used(), std::memory_order_relaxed);
  used_qps_.store(static_cast<uint32_t>(dp_->num_qps()), std::memory_order_relaxed);
  std::vector<QpFailure> failures = dp_->TakeQpFailures();
  if (failures.empty()) return;
  if (SwitchAgent* agent = agent_for_dp_.load(std::memory_order_acquire)) {
    agent->ReportQpFailures(std::move(failures));
  }
}

SwitchDaemon::~SwitchDaemon() {
  absl::StatusOr<ShutdownReport> r = Stop();
  if (!r.ok()) NETFOLD_LOG(kError) << "switch " << config_.name << ": " << r.status();
}

absl::StatusOr<ShutdownReport> SwitchDaemon::Stop() {
  ShutdownReport report;
  if (stopped_) return report;
  stopped_ = true;
  // 1. The control stream ends: the manager declares the switch gone and
  //    revokes its groups (their processes hear of it from the manager).
  agent_for_dp_.store(nullptr, std::memory_order_release);
  if (agent_ != nullptr) agent_->Stop();
  // 2. No more admin calls.
  if (admin_server_ != nullptr) admin_server_->Shutdown();
  absl::Status status;
  if (thread_ != nullptr) {
    // 3. Every group removed: in-flight operations aborted toward the
    //    children, slots freed.
    auto r = std::make_shared<ShutdownReport>();
    const bool removed = dp_->PostAndWait([r](SwitchDataPlane& dp) {
      std::vector<std::tuple<uint16_t, uint32_t, uint32_t>> groups;
      dp.ForEachNode([&groups](const GroupSpec& g, const AggregationNode&) {
        groups.emplace_back(g.tree_id, g.group_id, g.epoch);
      });
      for (const auto& [tree, group, epoch] : groups) {
        if (dp.RemoveGroup(tree, group, epoch).ok()) ++r->groups_removed;
      }
      r->slots_left = dp.num_slots_used();
      r->busy_slots_left = dp.num_busy_slots();
    }, kStopStepTimeout);
    // 4. The aborts get a moment to leave (and be retransmitted once if
    //    lost), then every QP goes.
    if (removed) absl::SleepFor(kAbortGrace);
    const bool destroyed = removed && dp_->PostAndWait([r](SwitchDataPlane& dp) {
      std::vector<uint32_t> qpns;
      dp.ForEachQp([&qpns](const std::string&, const transport::RcQueuePair& qp) {
        qpns.push_back(qp.qpn());
      });
      for (uint32_t qpn : qpns) {
        if (dp.DestroyQp(qpn).ok()) ++r->qps_destroyed;
      }
    }, kStopStepTimeout);
    thread_->Remove(dp_.get());
    thread_ = nullptr;
    report = *r;
    if (!removed || !destroyed) {
      status = absl::DeadlineExceededError(
          absl::StrFormat("the data plane did not run the shutdown within %s",
                          absl::FormatDuration(kStopStepTimeout)));
    } else if (report.slots_left != 0 || report.busy_slots_left != 0) {
      status = absl::InternalError(absl::StrFormat(
          "%d slots still reserved and %d busy after removing every group", report.slots_left,
          report.busy_slots_left));
    }
  }
  NETFOLD_LOG(kWarning) << absl::StrFormat(
      "netfold-switchd %s stopped: %d groups removed, %d QPs destroyed, %d slots left",
      config_.name, report.groups_removed, report.qps_destroyed, report.slots_left);
  if (!status.ok()) return status;
  return report;
}

}  // namespace netfold::sw
