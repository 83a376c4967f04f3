#include "switch/switch_admin_service.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "proto/aggregation_header.h"
#include "proto/control/grpc_status.h"
#include "proto/roce_packet.h"
#include "switch/control_commands.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;

uint64_t Load(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

void AddCount(google::protobuf::RepeatedPtrField<control::NamedCount>* out, std::string_view name,
              uint64_t count, bool skip_zero) {
  if (skip_zero && count == 0) return;
  control::NamedCount* c = out->Add();
  c->set_name(std::string(name));
  c->set_count(count);
}

void FillStage(const transport::PeerLinkSnapshot::Stage& s, control::ImpairmentStageCounters* out) {
  out->set_packets_in(s.packets_in);
  out->set_packets_out(s.packets_out);
  AddCount(out->mutable_drops(), "dropped_down", s.dropped_down, true);
  AddCount(out->mutable_drops(), "dropped_random", s.dropped_random, true);
  AddCount(out->mutable_drops(), "dropped_burst", s.dropped_burst, true);
  AddCount(out->mutable_drops(), "dropped_rate", s.dropped_rate, true);
  out->set_duplicated(s.duplicated);
  out->set_corrupted(s.corrupted);
  out->set_reordered(s.reordered);
  out->set_delayed(s.delayed);
}

void FillQpDrops(const transport::QpDropCounters& drops,
                 google::protobuf::RepeatedPtrField<control::NamedCount>* out, std::string_view prefix,
                 bool skip_zero) {
  for (size_t r = 0; r < transport::kNumQpDropReasons; ++r) {
    const auto reason = static_cast<transport::QpDropReason>(r);
    AddCount(out, absl::StrFormat("%s%s", prefix, transport::QpDropReasonName(reason)),
             drops.Get(reason), skip_zero);
  }
}

void FillQpCounts(const transport::RcQpCounters& c, control::QpCounters* q) {
  q->set_messages_sent(Load(c.messages_sent));
  q->set_messages_received(Load(c.messages_received));
  q->set_packets_sent(Load(c.packets_sent));
  q->set_packets_retransmitted(Load(c.packets_retransmitted));
  q->set_bytes_sent(Load(c.bytes_sent));
  q->set_packets_received(Load(c.packets_received));
  q->set_bytes_received(Load(c.bytes_received));
  q->set_acks_sent(Load(c.acks_sent));
  q->set_acks_received(Load(c.acks_received));
  q->set_naks_sent(Load(c.naks_sent));
  q->set_naks_received(Load(c.naks_received));
  q->set_rnr_naks_sent(Load(c.rnr_naks_sent));
  q->set_rnr_naks_received(Load(c.rnr_naks_received));
  q->set_timeouts(Load(c.timeouts));
  q->set_spurious_timeouts(Load(c.spurious_timeouts));
  FillQpDrops(c.drops, q->mutable_drops(), "", true);
}

// Waits for `fn` to run on the data-plane thread, at most `timeout`.
grpc::Status RunOnDataPlane(SwitchDataPlane* dp, absl::Duration timeout,
                            std::function<void(SwitchDataPlane&)> fn) {
  struct Call {
    absl::Notification done;
    std::function<void(SwitchDataPlane&)> fn;
  };
  auto call = std::make_shared<Call>();
  call->fn = std::move(fn);
  // The closure owns the call; if we give up waiting, it still runs safely
  // later, but must not touch the caller's response: the caller's `fn`
  // writes into a buffer the closure owns (see the handlers).
  dp->Post([call](SwitchDataPlane& plane) {
    call->fn(plane);
    call->done.Notify();
  });
  if (!call->done.WaitForNotificationWithTimeout(timeout)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrFormat("the data plane did not answer within %s",
                                        absl::FormatDuration(timeout)));
  }
  return grpc::Status::OK;
}

std::string ConfigText(const transport::ImpairmentConfig& c) { return c.ToString(); }

}  // namespace

void FillCounters(SwitchDataPlane& dp, const transport::ImpairedPort* port,
                  control::GetCountersResponse* out, bool detail) {
  // The port.
  const transport::PortCounters& pc = dp.endpoint().port().counters();
  control::SwitchPortCounters* p = out->mutable_port();
  p->set_rx_packets(Load(pc.rx_packets));
  p->set_rx_bytes(Load(pc.rx_bytes));
  p->set_tx_packets(Load(pc.tx_packets));
  p->set_tx_bytes(Load(pc.tx_bytes));
  p->set_rx_ip_identification_solved(Load(dp.endpoint().counters().ip_identification_solved));
  p->set_rx_batch_copied(Load(pc.rx_batch_copied));
  p->set_rx_empty_reads(Load(pc.rx_empty_reads));
  p->set_tx_batched(Load(pc.tx_batched));
  p->set_rx_batched(Load(pc.rx_batched));
  AddCount(p->mutable_drops(), "rx_no_buffer", Load(pc.rx_no_buffer), false);
  AddCount(p->mutable_drops(), "rx_truncated", Load(pc.rx_truncated), false);
  AddCount(p->mutable_drops(), "rx_errors", Load(pc.rx_errors), false);
  AddCount(p->mutable_drops(), "tx_errors", Load(pc.tx_errors), false);
  AddCount(p->mutable_drops(), "tx_dropped", Load(dp.endpoint().counters().tx_dropped), false);
  AddCount(p->mutable_drops(), "tx_overflow", port != nullptr ? port->num_tx_overflow() : 0, false);

  // The switch: everything dropped before a node saw it, by layer.
  const SwitchCounters& sc = dp.counters();
  out->set_messages_received(Load(sc.messages_received));
  out->set_messages_sent(Load(sc.messages_sent));
  out->set_multicasts_sent(Load(sc.multicasts_sent));
  out->set_backlogged(Load(sc.backlogged));
  out->set_messages_to_switches(Load(sc.messages_to_switches));
  out->set_in_process_messages(Load(sc.in_process_messages));
  const transport::RoceEndpointCounters& ec = dp.endpoint().counters();
  out->set_late_for_destroyed_qp(Load(ec.late_for_destroyed_qp));
  for (size_t r = 1; r < proto::kNumRoceParseResults; ++r) {
    const auto reason = static_cast<proto::RoceParseResult>(r);
    AddCount(out->mutable_drops(), absl::StrFormat("roce.%s", proto::RoceParseResultName(reason)),
             ec.ParseDrops(reason), false);
  }
  AddCount(out->mutable_drops(), "endpoint.unknown_qp",
           ec.drops.Get(transport::QpDropReason::kUnknownQp), false);
  AddCount(out->mutable_drops(), "endpoint.no_buffer",
           ec.drops.Get(transport::QpDropReason::kNoBuffer), false);
  for (size_t r = 1; r < proto::kNumAggregationParseResults; ++r) {
    const auto reason = static_cast<proto::AggregationParseResult>(r);
    AddCount(out->mutable_drops(),
             absl::StrFormat("aggregation.%s", proto::AggregationParseResultName(reason)),
             Load(sc.parse_drops[r]), false);
  }
  AddCount(out->mutable_drops(), "aggregation.bad_tag", dp.num_bad_tags(), false);
  for (size_t r = 0; r < kNumSwitchDropReasons; ++r) {
    AddCount(out->mutable_drops(),
             absl::StrFormat("switch.%s", SwitchDropReasonName(static_cast<SwitchDropReason>(r))),
             Load(sc.drops[r]), false);
  }

  out->set_detailed(detail);
  *out->mutable_usage() = UsageOf(dp);
  if (!detail) {
    // The drops of every QP the switch has had (so the sums only grow),
    // by reason. Whether a probe was ahead of or behind a QP's expected PSN
    // is not told apart: that would find the PSN in 24 probes.
    transport::RcQpCounters all;
    dp.SumQpCounters(all);
    auto at = [&](transport::QpDropReason r) { return all.drops.Get(r); };
    for (size_t r = 0; r < transport::kNumQpDropReasons; ++r) {
      const auto reason = static_cast<transport::QpDropReason>(r);
      if (reason == transport::QpDropReason::kOutOfSequence ||
          reason == transport::QpDropReason::kDuplicate ||
          reason == transport::QpDropReason::kUnknownQp) {
        continue;  // the first two below; unknown_qp is the endpoint's
      }
      AddCount(out->mutable_drops(), absl::StrFormat("qp.%s", transport::QpDropReasonName(reason)),
               at(reason), false);
    }
    AddCount(out->mutable_drops(), "qp.psn_mismatch",
             at(transport::QpDropReason::kOutOfSequence) + at(transport::QpDropReason::kDuplicate),
             false);
    return;
  }

  // QPs, ordered by QPN; and who sits behind each remote address.
  std::map<uint32_t, control::QpCounters> qps;
  absl::flat_hash_map<Ipv4Endpoint, std::string> names;
  dp.ForEachQp([&](const std::string& peer, const transport::RcQueuePair& rc) {
    control::QpCounters q;
    q.set_qpn(rc.qpn());
    q.set_peer(peer);
    q.set_job_id(dp.QpJobId(rc.qpn()));
    q.set_state(std::string(transport::QpStateName(rc.state())));
    if (!rc.error().ok()) q.set_error(std::string(rc.error().message()));
    if (rc.state() == transport::QpState::kRtr || rc.state() == transport::QpState::kRts ||
        rc.state() == transport::QpState::kError) {
      if (rc.attributes().remote.port != 0) {
        q.set_remote_address(rc.attributes().remote.ToString());
        q.set_remote_qpn(rc.attributes().remote_qpn);
        std::string& n = names[rc.attributes().remote];
        n = n.empty() ? peer : absl::StrFormat("%s, %s", n, peer);
      }
    }
    FillQpCounts(rc.counters(), &q);
    q.set_send_queued(static_cast<uint32_t>(rc.num_send_queued()));
    qps[rc.qpn()] = std::move(q);
  });
  for (auto& kv : qps) *out->add_qps() = std::move(kv.second);
  transport::RcQpCounters all;
  dp.SumQpCounters(all);
  FillQpCounts(all, out->mutable_all_qps());

  // Groups, ordered by (tree, group).
  std::map<std::pair<uint16_t, uint32_t>, control::GroupCounters> groups;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode& node) {
    control::GroupCounters gc;
    const NodeCounters& c = node.counters();
    gc.set_group_id(g.group_id);
    gc.set_tree_id(g.tree_id);
    gc.set_epoch(g.epoch);
    gc.set_job_id(g.job_id);
    gc.set_requests_received(Load(c.requests_received));
    gc.set_operations_completed(Load(c.operations_completed));
    gc.set_results_distributed(Load(c.results_distributed));
    gc.set_errors_distributed(Load(c.errors_distributed));
    gc.set_bytes_reduced(Load(c.bytes_reduced));
    gc.set_repairs_answered(Load(c.repairs_answered));
    gc.set_repairs_forwarded(Load(c.repairs_forwarded));
    gc.set_results_relayed(Load(c.results_relayed));
    gc.set_contributions_buffered(Load(c.contributions_buffered));
    gc.set_contributions_copied(Load(c.contributions_copied));
    for (size_t r = 0; r < kNumNodeDropReasons; ++r) {
      AddCount(gc.mutable_drops(), NodeDropReasonName(static_cast<NodeDropReason>(r)),
               c.Drops(static_cast<NodeDropReason>(r)), true);
    }
    gc.set_busy_slots(static_cast<uint32_t>(node.num_busy_slots()));
    gc.set_num_slots(g.num_slots);
    for (const auto& b : c.latency_us_log2) gc.add_latency_us_log2(Load(b));
    if (g.multicast) {
      std::string& n = names[*g.multicast];
      if (n.empty()) n = absl::StrFormat("multicast of group %d", g.group_id);
    }
    groups[{g.tree_id, g.group_id}] = std::move(gc);
  });
  for (auto& kv : groups) *out->add_groups() = std::move(kv.second);

  // Peers (virtual ports).
  if (port != nullptr) {
    for (const transport::PeerLinkSnapshot& s : port->Snapshot()) {
      control::PeerCounters* pc2 = out->add_peers();
      pc2->set_peer(s.peer.ToString());
      if (auto it = names.find(s.peer); it != names.end()) pc2->set_name(it->second);
      if (s.peer == Ipv4Endpoint{}) pc2->set_name("every peer beyond the tracking limit");
      pc2->set_rx_packets(s.rx_packets);
      pc2->set_rx_bytes(s.rx_bytes);
      pc2->set_tx_packets(s.tx_packets);
      pc2->set_tx_bytes(s.tx_bytes);
      pc2->set_send_impairment(ConfigText(s.send));
      pc2->set_receive_impairment(ConfigText(s.receive));
      FillStage(s.send_stage, pc2->mutable_send_stage());
      FillStage(s.receive_stage, pc2->mutable_receive_stage());
    }
  }
}

void FillGroups(const SwitchDataPlane& dp, control::ListGroupsResponse* out, bool detail) {
  out->set_detailed(detail);
  *out->mutable_usage() = UsageOf(dp);
  if (!detail) {
    uint32_t busy = 0;
    dp.ForEachNode([&](const GroupSpec&, const AggregationNode& node) {
      busy += static_cast<uint32_t>(node.num_busy_slots());
    });
    out->set_busy_slots(busy);
    return;
  }
  absl::flat_hash_map<uint32_t, std::string> peers;
  dp.ForEachQp([&](const std::string& peer, const transport::RcQueuePair& rc) {
    peers[rc.qpn()] = peer;
  });
  std::map<std::pair<uint16_t, uint32_t>, control::SwitchGroup> groups;
  uint32_t busy = 0;
  dp.ForEachNode([&](const GroupSpec& g, const AggregationNode& node) {
    control::SwitchGroup sg;
    sg.set_group_id(g.group_id);
    sg.set_tree_id(g.tree_id);
    sg.set_epoch(g.epoch);
    sg.set_job_id(g.job_id);
    sg.set_pkey(g.pkey);
    sg.set_num_slots(g.num_slots);
    sg.set_slot_bytes(g.slot_bytes);
    sg.set_is_root(!g.parent_qpn.has_value());
    sg.set_parent_qpn(g.parent_qpn.value_or(0));
    if (g.multicast) sg.set_multicast_address(g.multicast->ToString());
    for (const GroupChildSpec& c : g.children) {
      control::SwitchGroupChild* child = sg.add_children();
      child->set_qpn(c.qpn);
      for (uint32_t r : c.ranks) child->add_ranks(r);
      if (auto it = peers.find(c.qpn); it != peers.end()) child->set_peer(it->second);
    }
    sg.set_busy_slots(static_cast<uint32_t>(node.num_busy_slots()));
    sg.set_operations_completed(Load(node.counters().operations_completed));
    busy += sg.busy_slots();
    groups[{g.tree_id, g.group_id}] = std::move(sg);
  });
  for (auto& kv : groups) *out->add_groups() = std::move(kv.second);
  out->set_busy_slots(busy);
}

absl::StatusOr<control::SetLinkFaultResponse> ApplyLinkFault(
    transport::ImpairedPort& port, const control::SetLinkFaultRequest& request) {
  absl::StatusOr<transport::ImpairmentConfig> config =
      transport::ParseImpairment(request.impairment());
  if (!config.ok()) return config.status();
  transport::LinkDirection direction;
  switch (request.direction()) {
    case control::LINK_DIRECTION_BOTH: direction = transport::LinkDirection::kBoth; break;
    case control::LINK_DIRECTION_SEND: direction = transport::LinkDirection::kSend; break;
    case control::LINK_DIRECTION_RECEIVE: direction = transport::LinkDirection::kReceive; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("direction %d is not both, send or receive", request.direction()));
  }
  control::SetLinkFaultResponse resp;
  auto add_peer = [&](const transport::PeerLinkSnapshot& s) {
    control::LinkFault* f = resp.add_links();
    f->set_peer(s.peer.ToString());
    f->set_send(s.send.ToString());
    f->set_receive(s.receive.ToString());
  };
  auto add_default = [&]() {
    control::LinkFault* f = resp.add_links();
    f->set_peer("default");
    f->set_send(port.default_send().ToString());
    f->set_receive(port.default_receive().ToString());
  };
  const std::string& peer = request.peer();
  if (peer == "all") {
    port.SetAllImpairment(direction, *config);
    for (const transport::PeerLinkSnapshot& s : port.Snapshot()) add_peer(s);
    add_default();
  } else if (peer == "default") {
    port.SetDefaultImpairment(direction, *config);
    add_default();
  } else {
    absl::StatusOr<Ipv4Endpoint> ep = transport::ParseIpv4Endpoint(peer);
    if (!ep.ok() || ep->ip == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer '%s' is neither \"all\", \"default\" nor an ip:port address", peer));
    }
    absl::Status s = port.SetPeerImpairment(*ep, direction, *config);
    if (!s.ok()) return s;
    if (std::optional<transport::PeerLinkSnapshot> snap = port.SnapshotPeer(*ep)) add_peer(*snap);
  }
  NETFOLD_LOG(kWarning) << "link fault set: peer " << peer << ", "
                        << transport::LinkDirectionName(direction) << ": " << config->ToString();
  return resp;
}

SwitchAdminService::SwitchAdminService(SwitchDataPlane* dp, transport::ImpairedPort* port,
                                       SwitchIdentity identity, std::string credential,
                                       absl::Duration timeout)
    : dp_(dp),
      port_(port),
      identity_(std::move(identity)),
      verifier_(std::move(credential)),
      timeout_(timeout) {}

grpc::Status SwitchAdminService::CheckDetail(bool wanted, std::string_view what) const {
  // A caller that presented the fabric credential is the operator's; without
  // one configured (auth: none) nobody is known, and the detail that lets a
  // caller forge a job's data stays off unless the operator allowed it.
  if (!wanted || verifier_.required() || identity_.allow_detail) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrFormat("switch %s: the detailed %s (QPNs, PSN counters, P_Keys, peers) is off: "
                      "this switch runs without a fabric credential (auth: none), so it does "
                      "not know its callers; ask without detail for the aggregate counters, "
                      "give the switch a credential, or start it with admin_detail: true "
                      "(loopback admin address only)",
                      identity_.name, what));
}

grpc::Status SwitchAdminService::GetCounters(grpc::ServerContext* ctx,
                                             const control::GetCountersRequest* request,
                                             control::GetCountersResponse* response) {
  if (grpc::Status s = verifier_.Check(*ctx, "GetCounters"); !s.ok()) return s;
  if (grpc::Status denied = CheckDetail(request->detail(), "GetCounters"); !denied.ok()) {
    return denied;
  }
  // The closure fills its own copy: if we stop waiting, it must not write
  // into a response gRPC may already have freed.
  auto result = std::make_shared<control::GetCountersResponse>();
  transport::ImpairedPort* port = port_;
  const bool detail = request->detail();
  grpc::Status s = RunOnDataPlane(dp_, timeout_, [result, port, detail](SwitchDataPlane& dp) {
    FillCounters(dp, port, result.get(), detail);
  });
  if (!s.ok()) return s;
  *response = std::move(*result);
  response->set_name(identity_.name);
  response->set_data_address(identity_.data_address);
  response->set_incarnation(identity_.incarnation);
  response->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - identity_.started));
  *response->mutable_capacity() = identity_.capacity;
  response->set_backend(identity_.backend);
  if (identity_.backend_counters) {
    identity_.backend_counters([response](std::string_view name, uint64_t count) {
      control::NamedCount* c = response->add_backend_counters();
      c->set_name(std::string(name));
      c->set_count(count);
    });
  }
  return grpc::Status::OK;
}

grpc::Status SwitchAdminService::ListGroups(grpc::ServerContext* ctx,
                                            const control::ListGroupsRequest* request,
                                            control::ListGroupsResponse* response) {
  if (grpc::Status s = verifier_.Check(*ctx, "ListGroups"); !s.ok()) return s;
  if (grpc::Status denied = CheckDetail(request->detail(), "ListGroups"); !denied.ok()) {
    return denied;
  }
  auto result = std::make_shared<control::ListGroupsResponse>();
  const bool detail = request->detail();
  grpc::Status s = RunOnDataPlane(dp_, timeout_, [result, detail](SwitchDataPlane& dp) {
    FillGroups(dp, result.get(), detail);
  });
  if (!s.ok()) return s;
  *response = std::move(*result);
  *response->mutable_capacity() = identity_.capacity;
  return grpc::Status::OK;
}

grpc::Status SwitchAdminService::SetLinkFault(grpc::ServerContext* ctx,
                                              const control::SetLinkFaultRequest* request,
                                              control::SetLinkFaultResponse* response) {
  // Before anything is parsed or a peer created: a stranger must not be
  // able to fill the peer table either.
  if (grpc::Status s = verifier_.Check(*ctx, "SetLinkFault"); !s.ok()) return s;
  if (port_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this switch has no per-peer impairment stage");
  }
  absl::StatusOr<control::SetLinkFaultResponse> r = ApplyLinkFault(*port_, *request);
  if (!r.ok()) {
    return control::ToGrpc(r.status());
  }
  *response = std::move(*r);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& address,
                                                                grpc::Service* service,
                                                                const auth::TlsFiles* tls) {
  std::unique_ptr<AdminServer> server(new AdminServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, auth::ServerCredentials(tls), &server->port_);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(64 * 1024);
  // A small pool: the admin API is for a CLI and tests, not for load.
  grpc::ResourceQuota quota("netfold-switchd-admin");
  quota.SetMaxThreads(16);
  builder.SetResourceQuota(quota);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot serve the admin API on %s (address in use?)", address));
  }
  return server;
}

AdminServer::~AdminServer() { Shutdown(); }

void AdminServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace netfold::sw
