#include "tests/integration/in_process_fabric.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace netfold::testing {

using transport::Ipv4Endpoint;
using transport::QpState;

TreeShape TreeShape::OneLevel(int hosts) {
  TreeShape s;
  s.children.resize(1);
  for (int r = 0; r < hosts; ++r) s.children[0].push_back(-1 - r);
  return s;
}

TreeShape TreeShape::TwoLevel(int leaves, int hosts_per_leaf) {
  TreeShape s;
  s.children.resize(1 + leaves);
  int rank = 0;
  for (int i = 0; i < leaves; ++i) {
    s.children[0].push_back(1 + i);
    for (int h = 0; h < hosts_per_leaf; ++h) s.children[1 + i].push_back(-1 - rank++);
  }
  return s;
}

TreeShape TreeShape::ThreeLevel() {
  TreeShape s;
  s.children = {{1, 2}, {3, 4}, {5, 6}, {}, {}, {}, {}};
  const int per_leaf[4] = {3, 1, 2, 4};
  int rank = 0;
  for (int leaf = 0; leaf < 4; ++leaf) {
    for (int h = 0; h < per_leaf[leaf]; ++h) s.children[3 + leaf].push_back(-1 - rank++);
  }
  return s;
}

int TreeShape::num_hosts() const {
  int n = 0;
  for (const auto& c : children) {
    for (int x : c) n += x < 0;
  }
  return n;
}

std::vector<uint32_t> TreeShape::RanksBelow(int node) const {
  if (node < 0) return {static_cast<uint32_t>(-1 - node)};
  std::vector<uint32_t> out;
  for (int c : children[node]) {
    auto sub = RanksBelow(c);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A host process: its endpoint, the RC QP to its leaf, a UD QP for
// multicast results, and one group engine per group.
struct InProcessFabric::SimHost : host::RequestSender {
  uint32_t rank = 0;
  transport::ImpairedPort* port = nullptr;
  std::unique_ptr<transport::RoceEndpoint> endpoint;
  transport::RcQueuePair* rc = nullptr;
  transport::UdQueuePair* ud = nullptr;
  std::map<uint32_t, std::unique_ptr<host::GroupEngine>> engines;

  absl::Status SendRequest(std::span<const uint8_t> header, std::span<const uint8_t> elements,
                           std::span<const uint8_t> tag) override {
    const std::span<const uint8_t> pieces[] = {header, elements, tag};
    return rc->PostSendGather(pieces, 0);
  }

  void Deliver(std::span<const uint8_t> message) {
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseAggregationMessage(message, &h, &elements) !=
        proto::AggregationParseResult::kOk) {
      ADD_FAILURE() << "rank " << rank << " got a malformed message";
      return;
    }
    auto it = engines.find(h.group_id);
    if (it != engines.end()) it->second->OnMessage(h, elements, message);
  }

  void Run() {
    endpoint->Progress(absl::ZeroDuration());
    transport::RecvMessage m;
    while (rc->PeekRecv(&m)) {
      Deliver(m.data);
      rc->PopRecv();
    }
    transport::UdDatagram d;
    while (ud->PeekRecv(&d)) {
      Deliver(d.data);
      ud->PopRecv();
    }
    transport::SendCompletion sc;
    while (rc->PollSendCompletion(&sc)) {
    }
    for (auto& [id, engine] : engines) engine->Poll();
    endpoint->Flush();
  }
};

namespace {

transport::ImpairmentConfig PortFaults(const std::string& text, uint64_t seed) {
  auto c = transport::ParseImpairment(text);
  EXPECT_TRUE(c.ok()) << c.status();
  transport::ImpairmentConfig config = c.ok() ? *c : transport::ImpairmentConfig{};
  config.seed = seed;
  return config;
}

}  // namespace

InProcessFabric::InProcessFabric(const TreeShape& shape, const FabricOptions& options)
    : shape_(shape), options_(options) {
  uint64_t seed = options.seed * 1000;
  const transport::PacketPoolConfig pool{.num_buffers = 4096, .buffer_size = 4096 + 256};
  auto make_port = [&](Ipv4Endpoint addr) {
    auto mem = net_.CreatePort({.local = addr, .pool = pool, .rx_queue_limit = 4096});
    EXPECT_TRUE(mem.ok()) << mem.status();
    const uint64_t send_seed = ++seed;
    const uint64_t receive_seed = ++seed;
    return new transport::ImpairedPort(std::move(*mem), PortFaults(options.faults, send_seed),
                                       PortFaults(options.faults, receive_seed), clock_);
  };
  // Switches at 10.0.1.x, hosts at 10.0.2.x.
  switches_.resize(shape.num_switches());
  for (int s = 0; s < shape.num_switches(); ++s) {
    SwitchNode& node = switches_[s];
    node.port = make_port({0x0a000100u + static_cast<uint32_t>(s), 4791});
    sw::SwitchConfig config;
    config.name = absl::StrFormat("s%d", s);
    // Every RC timeout 1 ms, toward hosts too: the simulated hosts run every
    // step and never stop acknowledging, so the long timeout a switch keeps
    // for hosts busy outside netfold calls (host_ack_timeout) has nothing to
    // wait for here; it would only turn each lost packet toward a host into
    // a stall of 64 ms to 4 s.
    config.ack_timeout = absl::Milliseconds(1);
    config.host_ack_timeout = absl::Milliseconds(1);
    config.psn_seed = options.seed * 100 + static_cast<uint64_t>(s) + 1;
    node.plane = std::make_unique<sw::SwitchDataPlane>(std::unique_ptr<transport::Port>(node.port),
                                                       clock_, config);
  }
  for (int r = 0; r < shape.num_hosts(); ++r) hosts_.push_back(std::make_unique<SimHost>());
  leaf_of_.assign(shape.num_hosts(), -1);
  for (uint32_t r = 0; r < hosts_.size(); ++r) {
    SimHost& h = *hosts_[r];
    h.rank = r;
    h.port = make_port({0x0a000200u + r, 4791});
    h.endpoint = std::make_unique<transport::RoceEndpoint>(std::unique_ptr<transport::Port>(h.port),
                                                           clock_);
    h.ud = *h.endpoint->CreateUdQp({.qkey = options.qkey, .pkey = options.pkey});
  }
  transport::RcQpAttributes attrs;
  attrs.timeout = absl::Milliseconds(1);
  // Wire every edge: child side created first (INIT), parent connects to it.
  for (int s = 0; s < shape.num_switches(); ++s) {
    for (int child : shape.children[s]) {
      sw::SwitchDataPlane& parent = *switches_[s].plane;
      if (child >= 0) {
        sw::SwitchDataPlane& cs = *switches_[child].plane;
        auto down = cs.CreateQp({.peer = "parent"});
        EXPECT_TRUE(down.ok()) << down.status();
        auto up = parent.CreateQp({.remote = cs.local(), .remote_qpn = down->qpn,
                                   .remote_psn = down->psn, .peer = "child switch"});
        EXPECT_TRUE(up.ok()) << up.status();
        EXPECT_TRUE(cs.ConnectQp(down->qpn, parent.local(), up->qpn, up->psn).ok());
        switches_[child].parent_qpn = down->qpn;
        switches_[s].child_qpn[child] = up->qpn;
      } else {
        const uint32_t rank = static_cast<uint32_t>(-1 - child);
        SimHost& h = *hosts_[rank];
        leaf_of_[rank] = s;
        h.rc = *h.endpoint->CreateRcQp();
        attrs.pkey = options.pkey;
        EXPECT_TRUE(h.rc->Modify(QpState::kInit, attrs).ok());
        const uint32_t host_psn = 1000 + rank;
        auto qp = parent.CreateQp({.job_id = 1, .pkey = options.pkey,
                                   .remote = h.endpoint->local(), .remote_qpn = h.rc->qpn(),
                                   .remote_psn = host_psn,
                                   .peer = absl::StrFormat("rank %d", rank)});
        EXPECT_TRUE(qp.ok()) << qp.status();
        attrs.remote = parent.local();
        attrs.remote_qpn = qp->qpn;
        attrs.rq_psn = qp->psn;
        attrs.sq_psn = host_psn;
        EXPECT_TRUE(h.rc->Modify(QpState::kRtr, attrs).ok());
        EXPECT_TRUE(h.rc->Modify(QpState::kRts, attrs).ok());
        switches_[s].child_qpn[child] = qp->qpn;
      }
    }
  }
}

InProcessFabric::~InProcessFabric() {
  hosts_.clear();
  switches_.clear();
}

void InProcessFabric::CreateGroup(uint32_t group_id, const GroupOptions& options) {
  const Ipv4Endpoint multicast{0xef010000u + group_id, 4791};
  groups_[group_id] = multicast;
  for (int s = 0; s < shape_.num_switches(); ++s) {
    sw::GroupSpec spec;
    spec.job_id = 1;
    spec.tree_id = 1;
    spec.group_id = group_id;
    spec.epoch = 1;
    spec.pkey = options_.pkey;
    spec.qkey = options_.qkey;
    spec.num_slots = options.num_slots;
    spec.slot_bytes = options.slot_bytes;
    spec.integrity_key = options.integrity_key;
    for (int child : shape_.children[s]) {
      spec.children.push_back({switches_[s].child_qpn.at(child), shape_.RanksBelow(child)});
    }
    if (s != 0) spec.parent_qpn = switches_[s].parent_qpn;
    if (s == 0 && options.delivery == proto::DeliveryMode::kMulticast) spec.multicast = multicast;
    absl::Status st = switches_[s].plane->InstallGroup(spec);
    EXPECT_TRUE(st.ok()) << st;
  }
  for (auto& hp : hosts_) {
    SimHost& h = *hp;
    if (options.delivery == proto::DeliveryMode::kMulticast) {
      absl::Status st = h.endpoint->AttachMulticast(h.ud->qpn(), multicast);
      EXPECT_TRUE(st.ok()) << st;
    }
    host::GroupParams params;
    params.tree_id = 1;
    params.group_id = group_id;
    params.epoch = 1;
    params.rank = h.rank;
    params.num_slots = options.num_slots;
    params.slot_bytes = options.slot_bytes;
    params.delivery = options.delivery;
    params.reduce_data = options.reduce_data;
    params.repair_after = options.repair_after;
    params.op_timeout = options.op_timeout;
    params.integrity_key = options.integrity_key;
    for (const auto& member : hosts_) params.members.push_back(member->rank);
    h.engines[group_id] = std::make_unique<host::GroupEngine>(params, &h, clock_);
  }
}

void InProcessFabric::RemoveGroup(uint32_t group_id) {
  for (auto& s : switches_) (void)s.plane->RemoveGroup(1, group_id);
  for (auto& hp : hosts_) {
    SimHost& h = *hp;
    h.engines.erase(group_id);
    auto it = groups_.find(group_id);
    if (it != groups_.end()) (void)h.endpoint->DetachMulticast(h.ud->qpn(), it->second);
  }
}

host::GroupEngine& InProcessFabric::engine(uint32_t group_id, uint32_t rank) {
  return *hosts_[rank]->engines.at(group_id);
}

transport::RoceEndpoint& InProcessFabric::host_endpoint(uint32_t rank) {
  return *hosts_[rank]->endpoint;
}
transport::RcQueuePair& InProcessFabric::host_qp(uint32_t rank) { return *hosts_[rank]->rc; }
transport::ImpairedPort& InProcessFabric::host_port(uint32_t rank) { return *hosts_[rank]->port; }

std::vector<host::OpId> InProcessFabric::StartOnEveryRank(
    uint32_t group_id, const std::vector<host::CollectiveArgs>& args) {
  std::vector<host::OpId> ids;
  for (uint32_t r = 0; r < hosts_.size(); ++r) {
    auto id = engine(group_id, r).Start(args[r]);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.ok() ? *id : 0);
  }
  return ids;
}

void InProcessFabric::Step() {
  for (auto& s : switches_) s.plane->RunOnce(absl::ZeroDuration());
  for (auto& h : hosts_) h->Run();
  clock_.Advance(options_.step);
}

bool InProcessFabric::RunUntilDone(uint32_t group_id, const std::vector<host::OpId>& ops,
                                   int max_steps) {
  for (int step = 0; step < max_steps; ++step) {
    bool done = true;
    for (uint32_t r = 0; r < hosts_.size() && done; ++r) {
      done = engine(group_id, r).Done(ops[r]);
    }
    if (done) return true;
    Step();
  }
  return false;
}

absl::Status InProcessFabric::SendRaw(uint32_t rank, std::span<const uint8_t> message) {
  return hosts_[rank]->rc->PostSend(message, 0);
}

}  // namespace netfold::testing
