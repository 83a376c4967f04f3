// Interop with Wireshark: packets from BuildRocePacket, framed as
// Ethernet / IPv4 / UDP 4791 and written to a pcap file, must be decoded by
// tshark as RoCEv2 (InfiniBand BTH) with the opcode, destination QP, PSN,
// source QP (DETH), MSN (AETH) and ICRC we wrote. Skips if tshark is not
// installed (Debian package tshark).
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"
#include "proto/roce_packet.h"

namespace netfold::proto {
namespace {

// Returns the path of `name` in $PATH, or "" if it is not there.
std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct Expected {
  RocePacketSpec spec;
  size_t payload_size;
};

void Put16(std::ofstream& out, uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); }
void Put32(std::ofstream& out, uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); }

class RoceTsharkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tshark_ = FindInPath("tshark");
    if (tshark_.empty()) GTEST_SKIP() << "tshark is not installed (Debian package tshark)";
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/netfold-tshark-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }

  void TearDown() override {
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      EXPECT_FALSE(ec) << "cannot remove " << dir_ << ": " << ec.message();
    }
  }

  std::string tshark_;
  std::string dir_;
};

TEST_F(RoceTsharkTest, DecodesOpcodeDestQpAndPsn) {
  const IcrcAddresses rc_addrs{
      .src_ip = 0x0A000001, .dst_ip = 0x0A000002, .src_port = 49152, .dst_port = kRoceUdpPort};
  const IcrcAddresses ud_addrs{
      .src_ip = 0x0A000002, .dst_ip = 0xEF010203, .src_port = 50000, .dst_port = kRoceUdpPort};

  std::vector<Expected> packets;
  auto add = [&](BthOpcode op, uint32_t qp, uint32_t psn, size_t payload_size) -> RocePacketSpec& {
    RocePacketSpec spec;
    spec.bth.opcode = op;
    spec.bth.dest_qp = qp;
    spec.bth.psn = psn;
    spec.bth.pkey = 0x8003;
    if (OpcodeHasDeth(op)) spec.deth = Deth{.qkey = 0x80010203, .src_qp = 0x000102};
    if (OpcodeHasAeth(op)) spec.aeth = MakeAck(psn ^ 0x5A5A5A);
    if (OpcodeHasImm(op)) spec.imm = 0xCAFEF00D;
    packets.push_back({spec, payload_size});
    return packets.back().spec;
  };
  add(BthOpcode::kRcSendFirst, 0x000300, 0xFFFFFE, 256);
  add(BthOpcode::kRcSendMiddle, 0x000300, 0xFFFFFF, 256);
  add(BthOpcode::kRcSendLast, 0x000300, 0x000000, 13).bth.ack_req = true;
  add(BthOpcode::kRcSendLastWithImmediate, 0x000301, 0x000001, 7);
  add(BthOpcode::kRcSendOnly, 0xABCDEF, 0x123456, 56);
  add(BthOpcode::kRcSendOnlyWithImmediate, 0x000011, 0x7FFFFF, 1);
  add(BthOpcode::kRcAcknowledge, 0x000077, 0x800000, 0);
  add(BthOpcode::kUdSendOnly, 0xFFFFFF, 0x000007, 72);
  add(BthOpcode::kUdSendOnlyWithImmediate, 0x000055, 0x000008, 10);

  const std::string pcap = dir_ + "/roce.pcap";
  std::vector<uint32_t> icrcs;
  {
    std::ofstream out(pcap, std::ios::binary);
    ASSERT_TRUE(out.good());
    // pcap global header, in host byte order (the magic tells readers which).
    Put32(out, 0xA1B2C3D4);
    Put16(out, 2);
    Put16(out, 4);
    Put32(out, 0);
    Put32(out, 0);
    Put32(out, 65535);
    Put32(out, 1);  // LINKTYPE_ETHERNET
    uint32_t ts = 1700000000;
    for (const Expected& e : packets) {
      const bool ud = OpcodeIsUd(e.spec.bth.opcode);
      const IcrcAddresses& addrs = ud ? ud_addrs : rc_addrs;
      std::vector<uint8_t> payload(e.payload_size);
      for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
      std::vector<uint8_t> roce(RocePacketSize(e.spec.bth.opcode, payload.size()));
      absl::StatusOr<size_t> n = BuildRocePacket(e.spec, payload, addrs, roce);
      ASSERT_TRUE(n.ok()) << n.status();
      icrcs.push_back(LoadIcrc(std::span<const uint8_t>(roce).last<4>()));

      std::vector<uint8_t> frame = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00};
      if (ud) {  // the IPv4 multicast MAC of 239.1.2.3
        const uint8_t mcast[6] = {0x01, 0x00, 0x5E, 0x01, 0x02, 0x03};
        std::memcpy(frame.data(), mcast, 6);
      }
      const auto headers = MakeIpv4UdpHeaders(addrs, roce.size());
      frame.insert(frame.end(), headers.begin(), headers.end());
      frame.insert(frame.end(), roce.begin(), roce.end());
      Put32(out, ts++);
      Put32(out, 0);
      Put32(out, static_cast<uint32_t>(frame.size()));
      Put32(out, static_cast<uint32_t>(frame.size()));
      out.write(reinterpret_cast<const char*>(frame.data()),
                static_cast<std::streamsize>(frame.size()));
    }
    ASSERT_TRUE(out.good());
  }

  const std::string err = dir_ + "/tshark.stderr";
  const std::string command = absl::StrFormat(
      "'%s' -r '%s' -T fields -E 'separator=|' -e frame.protocols -e infiniband.bth.opcode "
      "-e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.bth.p_key "
      "-e infiniband.deth.srcqp -e infiniband.aeth.msn -e infiniband.invariant.crc 2>'%s'",
      tshark_, pcap, err);
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << command;
  std::string output;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  const int status = pclose(pipe);
  std::string stderr_text;
  {
    std::ifstream in(err);
    std::stringstream s;
    s << in.rdbuf();
    stderr_text = s.str();
  }
  ASSERT_EQ(status, 0) << command << "\n" << stderr_text;

  std::vector<std::string> lines;
  std::stringstream stream(output);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), packets.size()) << output << stderr_text;
  for (size_t i = 0; i < packets.size(); ++i) {
    const Bth& bth = packets[i].spec.bth;
    SCOPED_TRACE(absl::StrFormat("packet %d (%s): %s", i, BthOpcodeName(bth.opcode), lines[i]));
    std::vector<std::string> f;
    std::stringstream fields(lines[i]);
    for (std::string field; std::getline(fields, field, '|');) f.push_back(field);
    f.resize(8);
    EXPECT_NE(f[0].find("eth:ethertype:ip:udp:infiniband"), std::string::npos);
    EXPECT_EQ(std::strtoul(f[1].c_str(), nullptr, 0), static_cast<uint8_t>(bth.opcode));
    EXPECT_EQ(std::strtoul(f[2].c_str(), nullptr, 0), bth.dest_qp);
    EXPECT_EQ(std::strtoul(f[3].c_str(), nullptr, 0), bth.psn);
    EXPECT_EQ(std::strtoul(f[4].c_str(), nullptr, 0), bth.pkey);
    if (packets[i].spec.deth) {
      EXPECT_EQ(std::strtoul(f[5].c_str(), nullptr, 0), packets[i].spec.deth->src_qp);
    } else {
      EXPECT_EQ(f[5], "");
    }
    if (packets[i].spec.aeth) {
      EXPECT_EQ(std::strtoul(f[6].c_str(), nullptr, 0), packets[i].spec.aeth->msn);
    } else {
      EXPECT_EQ(f[6], "");
    }
    // Wireshark reads the ICRC as a big-endian number: our value byte-swapped.
    EXPECT_EQ(std::strtoul(f[7].c_str(), nullptr, 0), __builtin_bswap32(icrcs[i]));
  }
}

}  // namespace
}  // namespace netfold::proto
