// What it costs to move RoCE-sized packets from one process to another on
// the same machine, per packet, by two means (docs/performance.md, "The
// floor of a link between two processes"):
//
//   udp  the kernel: the sender builds a run of packets and hands it over in
//        one sendmsg with UDP_SEGMENT, the receiver reads runs of them with
//        UDP_GRO and recvmmsg (what transport/udp_port.cc does);
//   shm  a single-producer/single-consumer ring of packet slots in memory
//        shared by the two processes, a futex to wake a side that sleeps.
//
// Both sides do the per-byte work a RoCEv2 link asks of them whatever it
// runs on: the sender copies each payload from a "caller's buffer" into the
// packet and computes its CRC (the ICRC's ISA-L function), the receiver
// checks the CRC and copies the payload into another buffer. So the
// difference between the two rows is what the kernel's path costs above
// that floor. Blocking on both rows (no spinning): a side that finds
// nothing to do sleeps.
//
//   process_link_bench [--packets N] [--reps R]
//
// Prints CPU microseconds per packet (both processes, user + system) and
// the wall rate, per repetition, with a third row: the same per-byte work
// in one process without any link (the floor), and the ratios of the
// medians to udp's. A
// receive buffer too small for the sender's bursts loses packets (counted,
// and the row says so); the benchmark asks for 64 MiB (SO_RCVBUFFORCE as
// root, else capped by net.core.rmem_max).
#include <isa-l/crc.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace {

constexpr size_t kPacketBytes = 4096;        // a RoCE MTU's packet
constexpr size_t kPayloadBytes = kPacketBytes - 4;  // the rest is the CRC
constexpr size_t kBufferPackets = 256;       // 1 MiB "caller's buffers"
constexpr size_t kRunPackets = 15;           // 15 x 4096 fits one UDP datagram
constexpr size_t kRingSlots = 256;

struct Result {
  double cpu_us_per_packet;
  double packets_per_s;
  uint64_t lost;
};

double CpuOfChildren() {
  rusage r;
  getrusage(RUSAGE_CHILDREN, &r);
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec +
         r.ru_stime.tv_usec / 1e6;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The per-byte work of each side.
class Endpoint {
 public:
  Endpoint() : from_(kBufferPackets * kPacketBytes, 7), to_(kBufferPackets * kPacketBytes, 0) {}
  void Build(uint8_t* packet, uint64_t i) {
    std::memcpy(packet, from_.data() + (i % kBufferPackets) * kPacketBytes, kPayloadBytes);
    std::memcpy(packet, &i, sizeof(i));
    const uint32_t crc = crc32_gzip_refl(0, packet, kPayloadBytes);
    std::memcpy(packet + kPayloadBytes, &crc, sizeof(crc));
  }
  bool Take(const uint8_t* packet, uint64_t* index) {
    uint32_t want;
    std::memcpy(&want, packet + kPayloadBytes, sizeof(want));
    if (crc32_gzip_refl(0, packet, kPayloadBytes) != want) return false;
    std::memcpy(index, packet, sizeof(*index));
    std::memcpy(to_.data() + (*index % kBufferPackets) * kPacketBytes, packet, kPayloadBytes);
    return true;
  }

 private:
  std::vector<uint8_t> from_, to_;
};

// What the consumer reports through a page shared with the parent: how
// many packets it took and when it took the last one (the wall time ends
// there, not at a receive timeout after it).
struct Report {
  uint64_t received = 0;
  double last_packet_s = 0;
};

Report* SharedReport() {
  void* mem = mmap(nullptr, sizeof(Report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("process_link_bench: mmap");
    std::exit(1);
  }
  return new (mem) Report;
}

bool ExitedCleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Runs `producer` and `consumer` in two child processes, which exit 0 when
// all went well. CPU per packet is over the packets the consumer took (a
// lost packet's receive work was never done).
template <typename P, typename C>
Result RunPair(uint64_t packets, P producer, C consumer) {
  Report* report = SharedReport();
  const double t0 = Now();
  const double c0 = CpuOfChildren();
  const pid_t p = fork();
  if (p == 0) _exit(producer());
  const pid_t c = p < 0 ? -1 : fork();
  if (c == 0) _exit(consumer(report));
  int status_p = 0, status_c = 0;
  if (p < 0 || c < 0) {
    std::perror("process_link_bench: fork");
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, &status_p, 0);
    }
    std::exit(1);
  }
  // The consumer first: a producer whose consumer failed would wait for
  // room in the ring for ever, so it is stopped.
  waitpid(c, &status_c, 0);
  if (!ExitedCleanly(status_c)) kill(p, SIGKILL);
  waitpid(p, &status_p, 0);
  const double cpu = CpuOfChildren() - c0;
  if (!ExitedCleanly(status_p) || !ExitedCleanly(status_c) || report->received == 0) {
    std::fprintf(stderr, "process_link_bench: a side failed (producer status %d, consumer %d)\n",
                 status_p, status_c);
    std::exit(1);
  }
  const double wall = report->last_packet_s - t0;
  Result r{cpu / static_cast<double>(report->received) * 1e6,
           static_cast<double>(report->received) / wall, packets - report->received};
  munmap(report, sizeof(Report));
  return r;
}

// ---- the kernel: UDP with segmentation and receive offload

Result RunUdp(uint64_t packets) {
  const int rx = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const int one = 1, big = 64 << 20;
  if (rx < 0 || bind(rx, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(rx, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) {
    std::perror("process_link_bench: udp socket");
    std::exit(1);
  }
  if (setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0) {
    setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  }
  const uint64_t runs = packets / kRunPackets;
  auto producer = [&]() -> int {
    Endpoint e;
    const int tx = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(tx, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    std::vector<uint8_t> run(kRunPackets * kPacketBytes);
    for (uint64_t r = 0; r < runs; ++r) {
      for (size_t k = 0; k < kRunPackets; ++k) e.Build(run.data() + k * kPacketBytes, r * kRunPackets + k);
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
      iovec iov{run.data(), run.size()};
      msghdr m{};
      m.msg_name = &addr;
      m.msg_namelen = sizeof(addr);
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
      cmsghdr* cm = CMSG_FIRSTHDR(&m);
      cm->cmsg_level = SOL_UDP;
      cm->cmsg_type = UDP_SEGMENT;
      cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = kPacketBytes;
      std::memcpy(CMSG_DATA(cm), &segment, sizeof(segment));
      for (int tries = 0; sendmsg(tx, &m, 0) < 0; ++tries) {
        if (tries > 10000) return 2;  // 1 s of ENOBUFS: give up
        usleep(100);
      }
    }
    return 0;
  };
  auto consumer = [&](Report* report) -> int {
    Endpoint e;
    constexpr int kReads = 8;
    std::vector<uint8_t> buffers(kReads * 65536);
    timeval timeout{0, 200000};  // the end: 200 ms without a packet
    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    uint64_t got = 0;
    const uint64_t want = runs * kRunPackets;
    while (got < want) {
      mmsghdr msgs[kReads] = {};
      iovec iovs[kReads];
      for (int k = 0; k < kReads; ++k) {
        iovs[k] = {buffers.data() + k * 65536, 65536};
        msgs[k].msg_hdr.msg_iov = &iovs[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
      }
      const int n = recvmmsg(rx, msgs, kReads, MSG_WAITFORONE, nullptr);
      if (n <= 0) break;
      for (int k = 0; k < n; ++k) {
        for (size_t off = 0; off + kPacketBytes <= msgs[k].msg_len; off += kPacketBytes) {
          uint64_t index;
          if (!e.Take(buffers.data() + k * 65536 + off, &index)) return 1;
          ++got;
        }
      }
      report->last_packet_s = Now();
    }
    report->received = got;
    return 0;
  };
  Result r = RunPair(runs * kRunPackets, producer, consumer);
  close(rx);
  return r;
}

// ---- shared memory: one ring, two futex words

struct alignas(64) Ring {
  alignas(64) std::atomic<uint64_t> head{0};  // written by the producer
  std::atomic<uint32_t> consumer_sleeps{0};
  alignas(64) std::atomic<uint64_t> tail{0};  // written by the consumer
  std::atomic<uint32_t> producer_sleeps{0};
  alignas(64) uint8_t slots[kRingSlots][kPacketBytes];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

void FutexWait(std::atomic<uint32_t>* word) {
  timespec ten_ms{0, 10'000'000};  // a bounded sleep: the condition is checked again
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, 1, &ten_ms, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Sleeps on `flag` until `ready` holds. The flag is raised, then `ready`
// checked again; the other side publishes, then reads the flag. A full
// fence on both sides between the store and the load keeps one of the two
// from missing the other (a store may otherwise wait in the store buffer
// past the load that follows it).
template <typename F>
void SleepUntil(std::atomic<uint32_t>* flag, F ready) {
  while (!ready()) {
    flag->store(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready()) FutexWait(flag);
    flag->store(0);
  }
}

// Publishes `index` and wakes the other side if it sleeps (see SleepUntil).
void Publish(std::atomic<uint64_t>* index, uint64_t value, std::atomic<uint32_t>* sleeps) {
  index->store(value, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeps->load()) FutexWake(sleeps);
}

Result RunShm(uint64_t packets) {
  void* mem = mmap(nullptr, sizeof(Ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("process_link_bench: mmap");
    std::exit(1);
  }
  Ring* ring = new (mem) Ring;
  auto producer = [&]() -> int {
    Endpoint e;
    for (uint64_t i = 0; i < packets; ++i) {
      SleepUntil(&ring->producer_sleeps,
                 [&] { return i - ring->tail.load(std::memory_order_acquire) < kRingSlots; });
      e.Build(ring->slots[i % kRingSlots], i);
      Publish(&ring->head, i + 1, &ring->consumer_sleeps);
    }
    return 0;
  };
  auto consumer = [&](Report* report) -> int {
    Endpoint e;
    for (uint64_t i = 0; i < packets; ++i) {
      SleepUntil(&ring->consumer_sleeps,
                 [&] { return ring->head.load(std::memory_order_acquire) > i; });
      uint64_t index;
      if (!e.Take(ring->slots[i % kRingSlots], &index) || index != i) return 1;
      Publish(&ring->tail, i + 1, &ring->producer_sleeps);
    }
    report->received = packets;
    report->last_packet_s = Now();
    return 0;
  };
  Result r = RunPair(packets, producer, consumer);
  ring->~Ring();
  munmap(mem, sizeof(Ring));
  return r;
}

// The per-byte work alone, in one process: what neither link can go below.
Result RunFloor(uint64_t packets) {
  auto both = [&](Report* report) -> int {
    Endpoint sender, receiver;
    std::vector<uint8_t> packet(kPacketBytes);
    for (uint64_t i = 0; i < packets; ++i) {
      sender.Build(packet.data(), i);
      uint64_t index;
      if (!receiver.Take(packet.data(), &index) || index != i) return 1;
    }
    report->received = packets;
    report->last_packet_s = Now();
    return 0;
  };
  return RunPair(packets, [] { return 0; }, both);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t packets = 300000;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--packets" && i + 1 < argc) {
      packets = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      packets = 30000;
      reps = 1;
    } else {
      std::fprintf(stderr, "usage: process_link_bench [--packets N] [--reps R] [--quick]\n");
      return 2;
    }
  }
  if (packets < kRunPackets || reps < 1) {
    std::fprintf(stderr, "process_link_bench: --packets at least %zu, --reps at least 1\n", kRunPackets);
    return 2;
  }
  std::printf("process_link_bench: %llu packets of %zu bytes, CRC and copy on both sides\n",
              static_cast<unsigned long long>(packets), kPacketBytes);
  std::vector<double> udp_cpu, shm_cpu, floor_cpu;
  uint64_t udp_lost = 0;
  for (int r = 0; r < reps; ++r) {
    const Result u = RunUdp(packets);
    const Result s = RunShm(packets);
    const Result f = RunFloor(packets);
    udp_cpu.push_back(u.cpu_us_per_packet);
    udp_lost += u.lost;
    shm_cpu.push_back(s.cpu_us_per_packet);
    floor_cpu.push_back(f.cpu_us_per_packet);
    std::printf("udp (GSO %zu, GRO): %.2f us CPU/packet, %.0f packets/s%s\n", kRunPackets,
                u.cpu_us_per_packet, u.packets_per_s,
                u.lost > 0 ? (" (" + std::to_string(u.lost) + " lost: receive buffer)").c_str() : "");
    std::printf("shm ring          : %.2f us CPU/packet, %.0f packets/s\n", s.cpu_us_per_packet,
                s.packets_per_s);
    std::printf("no link (floor)   : %.2f us CPU/packet\n", f.cpu_us_per_packet);
  }
  std::printf("CPU per packet, medians: shm / udp %.2fx, floor / udp %.2fx%s\n",
              Median(shm_cpu) / Median(udp_cpu), Median(floor_cpu) / Median(udp_cpu),
              udp_lost > 0 ? " (udp lost packets: its figures are of fewer packets received)" : "");
  return 0;
}
