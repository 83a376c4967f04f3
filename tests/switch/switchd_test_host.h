// A test "host" for netfold-switchd's integration tests: one rank's data
// path, in the test process, over real UDP sockets on loopback: a
// transport::RoceEndpoint on a UdpPort, the RC QP to its leaf switch, a UD
// QP for multicast results, and a host::GroupEngine per group (read-only use
// of host/: the engine cuts, windows and repairs, this class moves bytes).
//
//   auto h = TestHost::Create(/*rank=*/0);
//   h->Init(job.pkey(), job.qkey());                   // QPs in INIT
//   AttachRequest req; *req.mutable_endpoint() = h->LocalEndpoint();
//   h->Connect(attach_response.switch_endpoint());     // RC QP to RTS
//   h->JoinGroup(group_info);                          // engine + multicast
//   host::OpId op = *h->engine(group_id).Start(args);
//   RunHosts(hosts, [&] { return h->engine(group_id).Done(op); }, absl::Seconds(10));
//
// Not thread-safe: one test thread drives every host (RunHosts polls them
// all, sleeping briefly when nothing arrived).
#ifndef NETFOLD_TESTS_SWITCH_SWITCHD_TEST_HOST_H_
#define NETFOLD_TESTS_SWITCH_SWITCHD_TEST_HOST_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "host/group_engine.h"
#include "proto/aggregation_header.h"
#include "proto/control/netfold_control.pb.h"
#include "transport/roce_endpoint.h"
#include "transport/udp_port.h"

namespace netfold::testing {

class TestHost : public host::RequestSender {
 public:
  static absl::StatusOr<std::unique_ptr<TestHost>> Create(uint32_t rank) {
    transport::UdpPortConfig config;
    config.local = {0x7f000001, 0};
    config.pool.num_buffers = 2048;
    NETFOLD_ASSIGN_OR_RETURN(std::unique_ptr<transport::UdpPort> port,
                             transport::UdpPort::Create(config));
    std::unique_ptr<TestHost> h(new TestHost(rank));
    h->endpoint_ = std::make_unique<transport::RoceEndpoint>(std::move(port), RealClock());
    return h;
  }

  uint32_t rank() const { return rank_; }
  transport::Ipv4Endpoint address() const { return endpoint_->local(); }
  transport::RoceEndpoint& endpoint() { return *endpoint_; }

  // Creates the RC QP (INIT, the job's P_Key) and the UD QP (the job's Q_Key).
  absl::Status Init(uint32_t pkey, uint32_t qkey, std::optional<uint32_t> qpn = std::nullopt) {
    pkey_ = static_cast<uint16_t>(pkey);
    transport::RcQpConfig rc_config;
    rc_config.max_message_size = 64 * 1024;
    if (qpn) {
      NETFOLD_ASSIGN_OR_RETURN(rc_, endpoint_->CreateRcQpWithQpn(*qpn, rc_config));
    } else {
      NETFOLD_ASSIGN_OR_RETURN(rc_, endpoint_->CreateRcQp(rc_config));
    }
    transport::RcQpAttributes attrs;
    attrs.pkey = pkey_;
    NETFOLD_RETURN_IF_ERROR(rc_->Modify(transport::QpState::kInit, attrs));
    NETFOLD_ASSIGN_OR_RETURN(ud_, endpoint_->CreateUdQp({.qkey = qkey, .pkey = pkey_}));
    return absl::OkStatus();
  }

  // What the manager (or a static config) needs to reach this host.
  control::Endpoint LocalEndpoint() const {
    control::Endpoint e;
    e.set_address(endpoint_->local().ToString());
    e.set_qpn(rc_->qpn());
    e.set_psn(psn());
    return e;
  }
  uint32_t psn() const { return 1000 + rank_; }
  uint32_t qpn() const { return rc_->qpn(); }

  // Moves the RC QP to RTS toward the switch.
  absl::Status Connect(const control::Endpoint& sw) {
    NETFOLD_ASSIGN_OR_RETURN(transport::Ipv4Endpoint addr, transport::ParseIpv4Endpoint(sw.address()));
    transport::RcQpAttributes attrs = rc_->attributes();
    attrs.remote = addr;
    attrs.remote_qpn = sw.qpn();
    attrs.rq_psn = sw.psn();
    attrs.sq_psn = psn();
    attrs.timeout = absl::Milliseconds(2);
    attrs.retry_count = 7;
    NETFOLD_RETURN_IF_ERROR(rc_->Modify(transport::QpState::kRtr, attrs));
    return rc_->Modify(transport::QpState::kRts, attrs);
  }

  // Starts an engine for the group (and listens to its multicast address).
  absl::Status JoinGroup(const control::GroupInfo& g) {
    host::GroupParams p;
    p.tree_id = static_cast<uint16_t>(g.tree_id());
    p.group_id = static_cast<uint32_t>(g.group_id());
    p.epoch = g.epoch();
    p.rank = rank_;
    p.num_slots = g.num_slots();
    p.slot_bytes = g.slot_bytes();
    p.delivery = g.delivery() == control::DELIVERY_RC_DOWN ? proto::DeliveryMode::kRcTree
                                                            : proto::DeliveryMode::kMulticast;
    p.repair_after = absl::Milliseconds(20);
    p.op_timeout = absl::Seconds(20);
    if (p.delivery == proto::DeliveryMode::kMulticast) {
      NETFOLD_ASSIGN_OR_RETURN(transport::Ipv4Endpoint group,
                               transport::ParseIpv4Endpoint(g.multicast_address()));
      NETFOLD_RETURN_IF_ERROR(endpoint_->AttachMulticast(ud_->qpn(), group));
      multicast_[g.group_id()] = group;
    }
    engines_[g.group_id()] = std::make_unique<host::GroupEngine>(p, this, RealClock());
    return absl::OkStatus();
  }

  void LeaveGroup(uint64_t group_id) {
    engines_.erase(group_id);
    auto it = multicast_.find(group_id);
    if (it != multicast_.end()) {
      (void)endpoint_->DetachMulticast(ud_->qpn(), it->second);
      multicast_.erase(it);
    }
  }

  host::GroupEngine& engine(uint64_t group_id) { return *engines_.at(group_id); }
  bool has_engine(uint64_t group_id) const { return engines_.count(group_id) > 0; }
  transport::RcQueuePair& rc() { return *rc_; }

  // Receives what arrived, feeds the engines, sends. Returns packets received.
  size_t Poll() {
    const size_t n = endpoint_->Progress(absl::ZeroDuration());
    transport::RecvMessage m;
    while (rc_ != nullptr && rc_->PeekRecv(&m)) {
      Deliver(m.data);
      rc_->PopRecv();
    }
    transport::UdDatagram d;
    while (ud_ != nullptr && ud_->PeekRecv(&d)) {
      Deliver(d.data);
      ud_->PopRecv();
    }
    transport::SendCompletion sc;
    while (rc_ != nullptr && rc_->PollSendCompletion(&sc)) {
    }
    for (auto& [id, e] : engines_) e->Poll();
    endpoint_->Flush();
    return n;
  }

  absl::Status SendRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                           std::span<const uint8_t> tag) override {
    const std::span<const uint8_t> pieces[] = {header, elements, tag};
    return rc_->PostSendGather(pieces, 0);
  }

  uint64_t malformed() const { return malformed_; }

 private:
  explicit TestHost(uint32_t rank) : rank_(rank) {}

  void Deliver(std::span<const uint8_t> message) {
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseAggregationMessage(message, &h, &elements) !=
        proto::AggregationParseResult::kOk) {
      ++malformed_;
      return;
    }
    auto it = engines_.find(h.group_id);
    if (it != engines_.end()) it->second->OnMessage(h, elements, message);
  }

  const uint32_t rank_;
  uint16_t pkey_ = 0xffff;
  std::unique_ptr<transport::RoceEndpoint> endpoint_;
  transport::RcQueuePair* rc_ = nullptr;
  transport::UdQueuePair* ud_ = nullptr;
  std::map<uint64_t, std::unique_ptr<host::GroupEngine>> engines_;
  std::map<uint64_t, transport::Ipv4Endpoint> multicast_;
  uint64_t malformed_ = 0;
};

// Polls every host until `done` holds or `timeout` passes; sleeps 200 us
// when no packet arrived, so an idle wait does not spin.
inline bool RunHosts(const std::vector<TestHost*>& hosts, const std::function<bool()>& done,
                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t received = 0;
    for (TestHost* h : hosts) received += h->Poll();
    if (done()) return true;
    if (absl::Now() >= deadline) return false;
    if (received == 0) absl::SleepFor(absl::Microseconds(200));
  }
}

}  // namespace netfold::testing

#endif  // NETFOLD_TESTS_SWITCH_SWITCHD_TEST_HOST_H_
