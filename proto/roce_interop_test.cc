// Interop with an independent implementation: RoCEv2 packets built by
// scapy's RoCE layer (tests/roce_vectors.py -> proto/testdata/
// roce_vectors.txt) must be byte-identical to what BuildRocePacket makes
// from the same fields, must parse with the ICRC checked (over the canonical
// headers and over scapy's real IPv4/UDP headers), and must fail the ICRC
// check after any single-bit error outside the masked BTH byte.
#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "proto/proto_test_util.h"
#include "proto/roce_packet.h"

namespace netfold::proto {
namespace {

using ::netfold::proto::testing::FromHex;
using ::netfold::proto::testing::TestdataDir;
using ::netfold::proto::testing::ToHex;

using Vector = std::map<std::string, std::string>;

std::vector<Vector> LoadVectors() {
  const std::string path = TestdataDir() + "/roce_vectors.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path << " (NETFOLD_PROTO_TESTDATA unset?)";
  std::vector<Vector> vectors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Vector v;
    std::string word;
    while (words >> word) {
      const size_t eq = word.find('=');
      EXPECT_NE(eq, std::string::npos) << word;
      if (eq == std::string::npos) continue;
      v[word.substr(0, eq)] = word.substr(eq + 1);
    }
    vectors.push_back(std::move(v));
  }
  return vectors;
}

uint64_t Num(const Vector& v, const std::string& key) {
  auto it = v.find(key);
  EXPECT_NE(it, v.end()) << "missing " << key;
  if (it == v.end()) return 0;
  return std::strtoull(it->second.c_str(), nullptr, 0);
}

uint32_t Ip(const Vector& v, const std::string& key) {
  in_addr addr{};
  EXPECT_EQ(inet_pton(AF_INET, v.at(key).c_str(), &addr), 1) << v.at(key);
  return ntohl(addr.s_addr);
}

IcrcAddresses Addresses(const Vector& v) {
  return IcrcAddresses{.src_ip = Ip(v, "src_ip"),
                       .dst_ip = Ip(v, "dst_ip"),
                       .src_port = static_cast<uint16_t>(Num(v, "src_port")),
                       .dst_port = static_cast<uint16_t>(Num(v, "dst_port"))};
}

RocePacketSpec SpecOf(const Vector& v) {
  RocePacketSpec spec;
  spec.bth.opcode = static_cast<BthOpcode>(Num(v, "opcode"));
  spec.bth.solicited_event = Num(v, "se") != 0;
  spec.bth.mig_req = Num(v, "m") != 0;
  spec.bth.pad_count = static_cast<uint8_t>(Num(v, "pad"));
  spec.bth.transport_version = static_cast<uint8_t>(Num(v, "tver"));
  spec.bth.pkey = static_cast<uint16_t>(Num(v, "pkey"));
  spec.bth.fecn = Num(v, "fecn") != 0;
  spec.bth.becn = Num(v, "becn") != 0;
  spec.bth.dest_qp = static_cast<uint32_t>(Num(v, "dqpn"));
  spec.bth.ack_req = Num(v, "ackreq") != 0;
  spec.bth.psn = static_cast<uint32_t>(Num(v, "psn"));
  if (v.count("qkey")) {
    spec.deth = Deth{.qkey = static_cast<uint32_t>(Num(v, "qkey")),
                     .src_qp = static_cast<uint32_t>(Num(v, "srcqp"))};
  }
  if (v.count("syndrome")) {
    spec.aeth = Aeth{.syndrome = static_cast<uint8_t>(Num(v, "syndrome")),
                     .msn = static_cast<uint32_t>(Num(v, "msn"))};
  }
  if (v.count("imm")) spec.imm = static_cast<uint32_t>(Num(v, "imm"));
  return spec;
}

TEST(RoceInterop, VectorsCoverEveryOpcodeAndPadCount) {
  const std::vector<Vector> vectors = LoadVectors();
  ASSERT_GE(vectors.size(), 20u);
  std::set<uint64_t> opcodes, pads;
  for (const Vector& v : vectors) {
    opcodes.insert(Num(v, "opcode"));
    pads.insert(Num(v, "pad"));
  }
  EXPECT_EQ(opcodes, (std::set<uint64_t>{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x11, 0x64, 0x65}));
  EXPECT_EQ(pads, (std::set<uint64_t>{0, 1, 2, 3}));
}

TEST(RoceInterop, BuilderMatchesScapyByteForByte) {
  for (const Vector& v : LoadVectors()) {
    SCOPED_TRACE(v.at("name"));
    const std::vector<uint8_t> payload = FromHex(v.at("payload"));
    const std::vector<uint8_t> expected = FromHex(v.at("udp_payload"));
    std::vector<uint8_t> out(expected.size() + 16);
    absl::StatusOr<size_t> n = BuildRocePacket(SpecOf(v), payload, Addresses(v), out);
    ASSERT_TRUE(n.ok()) << n.status();
    out.resize(*n);
    EXPECT_EQ(ToHex(out), ToHex(expected));
  }
}

TEST(RoceInterop, ParserAcceptsScapyPackets) {
  for (const Vector& v : LoadVectors()) {
    SCOPED_TRACE(v.at("name"));
    const std::vector<uint8_t> packet = FromHex(v.at("udp_payload"));
    const IcrcAddresses addrs = Addresses(v);
    RocePacketView view;
    ASSERT_EQ(ParseRocePacket(packet, &addrs, &view), RoceParseResult::kOk);
    const RocePacketSpec spec = SpecOf(v);
    EXPECT_EQ(view.bth, spec.bth);
    EXPECT_EQ(view.deth, spec.deth);
    EXPECT_EQ(view.aeth, spec.aeth);
    EXPECT_EQ(view.imm, spec.imm);
    EXPECT_EQ(ToHex(view.payload), v.at("payload"));

    // The same ICRC over scapy's real IPv4/UDP headers (its TTL, TOS and
    // checksums, all masked).
    const std::vector<uint8_t> headers = FromHex(v.at("headers"));
    ASSERT_EQ(headers.size(), kIpv4HeaderSize + kUdpHeaderSize);
    const auto ip = std::span<const uint8_t>(headers).first<kIpv4HeaderSize>();
    const auto udp = std::span<const uint8_t>(headers).subspan<kIpv4HeaderSize, kUdpHeaderSize>();
    EXPECT_EQ(ParseRocePacketIpv4(ip, udp, packet, &view), RoceParseResult::kOk);
    EXPECT_EQ(ip[8], Num(v, "ttl"));
    EXPECT_EQ(ip[1], Num(v, "tos"));
  }
}

TEST(RoceInterop, IcrcCatchesEverySingleBitFlipOfScapyPackets) {
  int flips = 0;
  for (const Vector& v : LoadVectors()) {
    SCOPED_TRACE(v.at("name"));
    std::vector<uint8_t> packet = FromHex(v.at("udp_payload"));
    const IcrcAddresses addrs = Addresses(v);
    RocePacketView view;
    for (size_t byte = 0; byte < packet.size(); ++byte) {
      if (byte == kBthFecnByteOffset) continue;  // masked
      for (int bit = 0; bit < 8; ++bit) {
        packet[byte] ^= static_cast<uint8_t>(1 << bit);
        ASSERT_EQ(ParseRocePacket(packet, &addrs, &view), RoceParseResult::kBadIcrc)
            << "byte " << byte << " bit " << bit;
        packet[byte] ^= static_cast<uint8_t>(1 << bit);
        ++flips;
      }
    }
    ASSERT_EQ(ParseRocePacket(packet, &addrs, &view), RoceParseResult::kOk);
  }
  EXPECT_GT(flips, 10000);
}

}  // namespace
}  // namespace netfold::proto
