// Issue 23, item 1: forged multicast results. A process of another user
// joins a group's multicast address, learns the P_Key, Q_Key and group from
// one result datagram, and multicasts results of its own for the operations
// that follow. The job's results must stay exact, every operation must
// succeed, and the ranks must count the forgeries they dropped.
//
// Real netfold-managerd and netfold-switchd processes on loopback
// (tools/local_fabric.h), four fabric_rank processes in two leaves under a
// root (the root multicasts the results), and the forger in this process.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "proto/aggregation_header.h"
#include "proto/roce_packet.h"
#include "tests/host/rank_launcher.h"
#include "tools/local_fabric.h"
#include "transport/udp_port.h"

namespace netfold {
namespace {

using testing::FirstMulticastGroups;
using testing::Launch;

// Listens on the first multicast addresses the manager hands out and, for
// every result it hears, multicasts forged results (elements changed) for
// the next `kAhead` operations of that group, with a valid ICRC.
class Forger {
 public:
  static constexpr int kAhead = 8;

  explicit Forger(std::vector<transport::Ipv4Endpoint> groups) {
    transport::UdpPortConfig config;
    config.local = {0x7f000001, 0};
    config.gro = false;
    auto port = transport::UdpPort::Create(config);
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return;
    port_ = std::move(*port);
    for (const auto& g : groups) {
      absl::Status s = port_->JoinMulticast(g);
      EXPECT_TRUE(s.ok()) << s;
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~Forger() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int results_heard() const { return heard_.load(); }
  int forgeries_sent() const { return sent_.load(); }

 private:
  void Run() {
    transport::PacketBuffer* rx[32];
    while (!stop_) {
      const size_t n = port_->RecvBurst(rx, absl::Milliseconds(10));
      for (size_t i = 0; i < n; ++i) {
        if (rx[i]->src != port_->local()) Forge(*rx[i]);
      }
      transport::PacketPool::FreeBurst({rx, n});
    }
  }

  void Forge(const transport::PacketBuffer& heard) {
    proto::RocePacketView v;
    if (proto::ParseRocePacket(heard.bytes(), nullptr, &v) != proto::RoceParseResult::kOk ||
        !v.deth.has_value()) {
      return;
    }
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseAggregationMessage(v.payload, &h, &elements) !=
            proto::AggregationParseResult::kOk ||
        h.type != proto::AggregationMessageType::kResult) {
      return;
    }
    ++heard_;
    std::vector<uint8_t> forged_elements(elements.begin(), elements.end());
    for (uint8_t& b : forged_elements) b ^= 0x5a;
    for (int ahead = 1; ahead <= kAhead; ++ahead) {
      proto::AggregationHeader f = h;
      f.seq = h.seq + static_cast<uint64_t>(ahead);
      std::vector<uint8_t> message(proto::kAggregationHeaderSize + forged_elements.size());
      if (!proto::EncodeAggregationMessage(f, forged_elements, message).ok()) return;
      proto::RocePacketSpec spec;
      spec.bth.opcode = proto::BthOpcode::kUdSendOnly;
      spec.bth.pkey = v.bth.pkey;
      spec.bth.dest_qp = v.bth.dest_qp;
      spec.bth.psn = v.bth.psn;
      spec.deth = proto::Deth{.qkey = v.deth->qkey, .src_qp = v.deth->src_qp};
      transport::PacketBuffer* p = port_->pool().Alloc();
      if (p == nullptr) return;
      const proto::IcrcAddresses addrs{port_->local().ip, heard.dst.ip, port_->local().port,
                                       heard.dst.port};
      auto len = proto::BuildRocePacket(spec, message, addrs, {p->data(), p->capacity()});
      if (!len.ok()) {
        transport::PacketPool::Free(p);
        return;
      }
      p->set_len(static_cast<uint32_t>(*len));
      p->dst = heard.dst;
      if (port_->SendBurst({&p, 1}) == 1) {
        ++sent_;
      } else {
        transport::PacketPool::Free(p);
      }
    }
  }

  std::unique_ptr<transport::UdpPort> port_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> heard_{0};
  std::atomic<int> sent_{0};
};

// The stream's line and the final stats line of rank r.
uint64_t ForeignDropped(const std::string& output) {
  const size_t at = output.find("foreign=");
  if (at == std::string::npos) return 0;
  return std::strtoull(output.c_str() + at + 8, nullptr, 10);
}

TEST(ForgedResults, ResultsFromAnyoneButTheGroupRootAreDroppedAndCounted) {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  auto fabric = tools::LocalFabric::Start(o);
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  Forger forger(FirstMulticastGroups(**fabric, 4));

  constexpr int kOps = 400;
  Launch ranks(**fabric, 4, 0, {"stream", std::to_string(kOps)});
  const auto results = ranks.Wait(absl::Minutes(4));
  ASSERT_GT(forger.results_heard(), 0) << "the forger heard no result: is the prefix right?";
  EXPECT_GT(forger.forgeries_sent(), 0);
  uint64_t dropped = 0;
  for (size_t r = 0; r < results.size(); ++r) {
    const std::string& out = results[r].output;
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << out;
    EXPECT_NE(out.find(absl::StrFormat("rank %d: stream ok=%d errors=0 wrong=0", r, kOps)),
              std::string::npos)
        << "rank " << r << " took a forged result:\n" << out;
    dropped += ForeignDropped(out);
  }
  EXPECT_GT(dropped, 0u) << "the ranks did not count the forgeries they dropped";
}

}  // namespace
}  // namespace netfold
