// Issue 23, the integrity tag: the hole docs/security.md names under
// "Root on a host, or a spoofing router". A forger that can send with the
// group root switch's own source address and port (here root on the
// machine, through a raw socket with IP_HDRINCL) passes the source check
// of forged_results_test: without integrity its results are taken, and
// ranks get wrong data. With the job's keyed tag (NETFOLD_INTEGRITY=1, or
// a manager with require_integrity) the same forgeries are dropped and
// counted, and every result is exact.
//
// Real netfold-managerd and netfold-switchd processes on loopback
// (tools/local_fabric.h), four fabric_rank processes in two leaves under a
// root, and the forger in this process. Skips without root (no raw socket).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
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

// Listens to the group's multicast results and, for the newest one it
// heard, sends forged results for the next kAhead operations, with the
// group root's source address and port (raw IPv4, IP_HDRINCL) and a valid
// ICRC for those addresses: to every check but the tag, they are the
// root's. It sends them again every kEvery until it hears a newer result:
// a forgery is only taken while its chunk is posted and its true result
// has not come, and a rank posts its next chunks after the forger heard the
// last result. On a tagged result it alternates a stale tag (the heard one,
// elements changed) and no tag at all. With `malformed`, each forgery's
// aggregation header is one no switch sends (an unknown version), in a
// RoCE packet that is valid in every other way.
class SpoofingForger {
 public:
  static constexpr int kAhead = 8;
  static constexpr absl::Duration kEvery = absl::Microseconds(500);

  explicit SpoofingForger(std::vector<transport::Ipv4Endpoint> groups, bool malformed = false)
      : malformed_(malformed) {
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
    raw_ = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    EXPECT_GE(raw_, 0) << "raw socket: " << std::strerror(errno);
    const int one = 1;
    EXPECT_EQ(setsockopt(raw_, IPPROTO_IP, IP_HDRINCL, &one, sizeof(one)), 0);
    in_addr lo{};
    lo.s_addr = htonl(0x7f000001);
    EXPECT_EQ(setsockopt(raw_, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof(lo)), 0);
    thread_ = std::thread([this] { Run(); });
  }
  ~SpoofingForger() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (raw_ >= 0) close(raw_);
  }
  int results_heard() const { return heard_.load(); }
  int forgeries_sent() const { return sent_.load(); }

 private:
  // The newest result heard, per group (multicast address).
  struct Heard {
    std::vector<uint8_t> bytes;
    transport::Ipv4Endpoint src, dst;
    uint64_t seq = 0;
  };

  void Run() {
    transport::PacketBuffer* rx[32];
    std::map<uint64_t, Heard> newest;  // by the group's ip:port
    absl::Time last_round = absl::InfinitePast();
    while (!stop_) {
      const size_t n = port_->RecvBurst(rx, absl::Microseconds(200));
      for (size_t i = 0; i < n; ++i) {
        if (rx[i]->src == port_->local() || sent_digests_.contains(Digest(rx[i]->bytes()))) {
          continue;  // its own forgery, looped back
        }
        uint64_t seq = 0;
        if (!IsResult(rx[i]->bytes(), &seq)) continue;
        ++heard_;
        const uint64_t key = (uint64_t{rx[i]->dst.ip} << 16) | rx[i]->dst.port;
        Heard& h = newest[key];
        if (!h.bytes.empty() && seq <= h.seq) continue;
        h.bytes.assign(rx[i]->bytes().begin(), rx[i]->bytes().end());
        h.src = rx[i]->src;
        h.dst = rx[i]->dst;
        h.seq = seq;
        Forge(h);
      }
      transport::PacketPool::FreeBurst({rx, n});
      if (absl::Now() - last_round >= kEvery) {
        for (const auto& [key, h] : newest) Forge(h);
        last_round = absl::Now();
      }
    }
  }

  static size_t Digest(std::span<const uint8_t> bytes) {
    return absl::HashOf(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

  static bool IsResult(std::span<const uint8_t> bytes, uint64_t* seq) {
    proto::RocePacketView v;
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseRocePacket(bytes, nullptr, &v) != proto::RoceParseResult::kOk ||
        !v.deth.has_value() ||
        proto::ParseAggregationMessage(v.payload, &h, &elements) !=
            proto::AggregationParseResult::kOk ||
        h.type != proto::AggregationMessageType::kResult) {
      return false;
    }
    *seq = h.seq;
    return true;
  }

  void Forge(const Heard& heard) {
    proto::RocePacketView v;
    proto::AggregationHeader h;
    std::span<const uint8_t> elements;
    if (proto::ParseRocePacket(heard.bytes, nullptr, &v) != proto::RoceParseResult::kOk ||
        proto::ParseAggregationMessage(v.payload, &h, &elements) !=
            proto::AggregationParseResult::kOk) {
      return;
    }
    const std::span<const uint8_t> heard_tag =
        h.has_tag ? v.payload.last(proto::kAggregationTagSize) : std::span<const uint8_t>();
    std::vector<uint8_t> forged_elements(elements.begin(), elements.end());
    for (uint8_t& b : forged_elements) b ^= 0x5a;
    for (int ahead = 1; ahead <= kAhead; ++ahead) {
      proto::AggregationHeader f = h;
      f.seq = h.seq + static_cast<uint64_t>(ahead);
      f.has_tag = h.has_tag && ahead % 2 == 1;  // a stale tag, or none
      std::vector<uint8_t> message(proto::kAggregationHeaderSize + forged_elements.size());
      if (!proto::EncodeAggregationMessage(f, forged_elements, message).ok()) return;
      if (f.has_tag) message.insert(message.end(), heard_tag.begin(), heard_tag.end());
      if (malformed_) message[0] = 0x7f;  // the header's version
      Send(heard, v, message);
    }
  }

  // One UD SEND_ONLY to the heard packet's group, from the heard sender.
  void Send(const Heard& heard, const proto::RocePacketView& v,
            std::span<const uint8_t> message) {
    proto::RocePacketSpec spec;
    spec.bth.opcode = proto::BthOpcode::kUdSendOnly;
    spec.bth.pkey = v.bth.pkey;
    spec.bth.dest_qp = v.bth.dest_qp;
    spec.bth.psn = v.bth.psn;
    spec.deth = proto::Deth{.qkey = v.deth->qkey, .src_qp = v.deth->src_qp};
    const proto::IcrcAddresses addrs{heard.src.ip, heard.dst.ip, heard.src.port, heard.dst.port};
    uint8_t packet[9000];
    constexpr size_t kHeaders = sizeof(iphdr) + sizeof(udphdr);
    auto len = proto::BuildRocePacket(spec, message, addrs,
                                      {packet + kHeaders, sizeof(packet) - kHeaders});
    if (!len.ok()) return;
    iphdr ip{};
    ip.version = 4;
    ip.ihl = 5;
    ip.tot_len = htons(static_cast<uint16_t>(kHeaders + *len));
    ip.frag_off = htons(0x4000);
    ip.ttl = 1;
    ip.protocol = IPPROTO_UDP;
    ip.saddr = htonl(heard.src.ip);  // the group root's address...
    ip.daddr = htonl(heard.dst.ip);
    udphdr udp{};
    udp.source = htons(heard.src.port);  // ...and port
    udp.dest = htons(heard.dst.port);
    udp.len = htons(static_cast<uint16_t>(sizeof(udphdr) + *len));
    std::memcpy(packet, &ip, sizeof(ip));
    std::memcpy(packet + sizeof(ip), &udp, sizeof(udp));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(heard.dst.ip);
    if (sent_digests_.size() > 100000) sent_digests_.clear();
    sent_digests_.insert(Digest({packet + kHeaders, *len}));
    if (sendto(raw_, packet, kHeaders + *len, 0, reinterpret_cast<sockaddr*>(&to),
               sizeof(to)) > 0) {
      ++sent_;
    }
  }

  const bool malformed_;
  std::unique_ptr<transport::UdpPort> port_;
  int raw_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> heard_{0};
  std::atomic<int> sent_{0};
  absl::flat_hash_set<size_t> sent_digests_;  // the forger thread's
};

// A fabric_rank's count after `key` ("foreign=", "dropped=").
uint64_t Count(const std::string& output, std::string_view key) {
  const size_t at = output.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoull(output.c_str() + at + key.size(), nullptr, 10);
}

struct Outcome {
  int heard = 0;
  int sent = 0;
  std::vector<testing::RankResult> ranks;
};

constexpr int kOps = 300;

Outcome RunWithForger(int ops, std::map<std::string, std::string> env,
                      std::string manager_config, bool malformed = false) {
  tools::LocalFabricOptions o;
  o.hosts = 4;
  o.default_slot_bytes = 1024;
  o.default_slots = 8;
  o.manager_config = std::move(manager_config);
  auto fabric = tools::LocalFabric::Start(o);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  if (!fabric.ok()) return {};
  SpoofingForger forger(FirstMulticastGroups(**fabric, 4), malformed);
  // Rank 0 posts each operation 2 ms after the others, whose chunks then
  // wait that long for their results: the forger's window, every time.
  Launch ranks(**fabric, 4, 0, {"stream", std::to_string(ops), "0", "2000"}, std::move(env));
  Outcome out;
  out.ranks = ranks.Wait(absl::Minutes(4));
  out.heard = forger.results_heard();
  out.sent = forger.forgeries_sent();
  return out;
}

class SpoofedResults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "spoofing the root's address needs a raw socket (root)";
  }
};

// The known limit, shown: without integrity a forger with the root's
// address and port changes results (docs/security.md, "What is not
// protected"). If this ever fails, something else now stops the forgery.
TEST_F(SpoofedResults, WithoutIntegrityASpoofedSourceIsTaken) {
  // Fewer operations, and a shorter deadline: the forgeries cost the ranks
  // errors, and an operation they left short of a result its deadline.
  const Outcome out = RunWithForger(60, {{"NETFOLD_TIMEOUT_MS", "3000"}}, "");
  ASSERT_GT(out.heard, 0) << "the forger heard no result: is the prefix right?";
  ASSERT_GT(out.sent, 0);
  int damaged = 0;
  for (const auto& r : out.ranks) {
    std::printf("%s", r.output.c_str());  // what the forgeries did, for the record
    if (r.output.find(" wrong=0") == std::string::npos ||
        r.output.find(" errors=0") == std::string::npos) {
      ++damaged;
    }
  }
  EXPECT_GT(damaged, 0) << "no rank took a spoofed result";
}

// The forger heard results and sent forgeries, every rank completed every
// operation exactly; `counted` gets the sum of the ranks' `key` counts.
void ExpectEveryResultExact(const Outcome& out, std::string_view key, uint64_t* counted) {
  *counted = 0;
  ASSERT_GT(out.heard, 0) << "the forger heard no result: is the prefix right?";
  ASSERT_GT(out.sent, 0);
  for (size_t r = 0; r < out.ranks.size(); ++r) {
    const std::string& text = out.ranks[r].output;
    EXPECT_EQ(out.ranks[r].exit_code, 0) << "rank " << r << ":\n" << text;
    EXPECT_NE(text.find(absl::StrFormat("rank %d: stream ok=%d errors=0 wrong=0", r, kOps)),
              std::string::npos)
        << "rank " << r << " took a forged result:\n" << text;
    *counted += Count(text, key);
  }
}

void ExpectEveryResultExactAndForgeriesCounted(const Outcome& out) {
  uint64_t dropped = 0;
  ExpectEveryResultExact(out, "foreign=", &dropped);
  EXPECT_GT(dropped, 0u) << "the ranks did not count the forgeries they dropped";
}

TEST_F(SpoofedResults, WithTheJobsTagSpoofedResultsAreDroppedAndCounted) {
  ExpectEveryResultExactAndForgeriesCounted(RunWithForger(kOps, {{"NETFOLD_INTEGRITY", "1"}}, ""));
}

TEST_F(SpoofedResults, AManagerThatRequiresIntegrityProtectsAJobThatDidNotAsk) {
  ExpectEveryResultExactAndForgeriesCounted(RunWithForger(kOps, {}, "require_integrity: true\n"));
}

// Results from the root's own address whose aggregation header no switch
// sends: every result stays exact, and the ranks count what they dropped
// (packets_dropped), as for any bad input.
TEST_F(SpoofedResults, MalformedResultsAreDroppedAndCounted) {
  const Outcome out = RunWithForger(kOps, {}, "", /*malformed=*/true);
  uint64_t dropped = 0;
  ExpectEveryResultExact(out, "dropped=", &dropped);
  // Every rank hears every forgery (a full socket may lose some): together
  // they count at least as many as were sent.
  EXPECT_GE(dropped, static_cast<uint64_t>(out.sent))
      << "the ranks did not count the malformed results they dropped";
}

}  // namespace
}  // namespace netfold
