#include "tests/netns/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace netfold::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Starts, once per process and tag, a detached shell that waits for this
// process to exit (its stdin is a pipe only we hold open) and then deletes
// every namespace and root-side link named with `prefix`.
void StartReaper(const std::string& prefix) {
  static std::mutex mu;
  static std::vector<std::string>* started = new std::vector<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& p : *started) {
    if (p == prefix) return;
  }
  const std::string script = absl::StrFormat(
      "cat >/dev/null; "
      "for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^%sn'); do "
      "ip netns del \"$n\" 2>/dev/null; done; "
      "for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | "
      "grep '^%sr'); do ip link del \"$l\" 2>/dev/null; done",
      prefix, prefix);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec. A session of its own so that
    // signals for the test's process group do not reach it.
    setsid();
    dup2(fds[0], STDIN_FILENO);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    execv("/bin/sh", const_cast<char**>(argv));
    _exit(127);
  }
  close(fds[0]);
  // fds[1] stays open (close-on-exec) until this process ends: then the
  // reaper's cat sees EOF, it cleans up and init reaps it.
  started->push_back(prefix);
}

// Deletes namespaces and links of `tag` whose pid is no longer alive.
void SweepStale(const std::string& tag) {
  auto dead = [&](const std::string& name, char kind) {
    if (name.rfind(tag, 0) != 0) return false;
    size_t i = tag.size();
    size_t j = i;
    while (j < name.size() && isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j == i || j >= name.size() || name[j] != kind) return false;
    const pid_t pid = static_cast<pid_t>(std::stol(name.substr(i, j - i)));
    return kill(pid, 0) != 0 && errno == ESRCH;
  };
  std::istringstream ns(RunCommand("ip netns list 2>/dev/null | awk '{print $1}'").output);
  for (std::string name; std::getline(ns, name);) {
    if (dead(name, 'n')) RunCommand("ip netns del " + ShellQuote(name));
  }
  std::istringstream links(
      RunCommand("ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1").output);
  for (std::string name; std::getline(links, name);) {
    if (dead(name, 'r')) RunCommand("ip link del " + ShellQuote(name));
  }
}

// Turns off checksum offload and segmentation on `ifname` (in the calling
// thread's namespace), as `ethtool -K ifname tx off tso off gso off` would.
void DisableOffloads(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  for (uint32_t cmd : {ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO}) {
    ethtool_value value{};
    value.cmd = cmd;
    value.data = 0;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
    ifr.ifr_data = reinterpret_cast<char*>(&value);
    ioctl(fd, SIOCETHTOOL, &ifr);  // best effort
  }
  close(fd);
}

}  // namespace

CommandResult RunCommand(const std::string& command, absl::Duration timeout) {
  CommandResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return result;
  const std::string secs = absl::StrFormat("%.3f", absl::ToDoubleSeconds(timeout));
  const char* argv[] = {"timeout", "-k", "2", secs.c_str(), "/bin/sh", "-c", command.c_str(),
                        nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvp("timeout", const_cast<char**>(argv));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  while (true) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (result.exit_code == 124 || result.exit_code == 137) result.exit_code = -1;  // timed out
  return result;
}

std::string NetnsUnavailableReason() {
  if (geteuid() != 0) return "needs root (network namespaces, veth pairs, raw sockets)";
  if (RunCommand("ip -V").exit_code != 0) return "the 'ip' command (iproute2) is not installed";
  const std::string probe = absl::StrFormat("nfprobe%d", getpid());
  CommandResult r = RunCommand("ip netns add " + probe);
  if (r.exit_code != 0) return "cannot create a network namespace: " + r.output;
  RunCommand("ip netns del " + probe);
  return "";
}

NetnsTestbed::NetnsTestbed(std::string tag) : prefix_(absl::StrFormat("%s%d", tag, getpid())) {
  SweepStale(tag);
  StartReaper(prefix_);
}

NetnsTestbed::~NetnsTestbed() {
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    RunCommand("ip netns del " + ShellQuote(*it));
  }
  for (const std::string& l : root_links_) {
    // Deleting a namespace deletes its veth ends and so their root peers;
    // this only catches links whose namespace was never entered.
    RunCommand("ip link del " + ShellQuote(l) + " 2>/dev/null");
  }
}

absl::StatusOr<std::string> NetnsTestbed::AddNamespace() {
  const std::string name = absl::StrFormat("%sn%d", prefix_, next_ns_++);
  CommandResult r = RunCommand("ip netns add " + name);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrFormat("ip netns add %s: %s", name, r.output));
  }
  namespaces_.push_back(name);
  r = RunCommand(absl::StrFormat(
      "ip -n %s link set lo up && ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
      "net.ipv6.conf.default.disable_ipv6=1",
      name, name));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrFormat("setting up %s: %s", name, r.output));
  }
  return name;
}

absl::StatusOr<NetnsTestbed::Veth> NetnsTestbed::AddVeth(const std::string& ns,
                                                         const std::string& cidr, int mtu) {
  const int k = next_link_++;
  Veth v{absl::StrFormat("%sr%d", prefix_, k), absl::StrFormat("%sh%d", prefix_, k), ns};
  // The inner end is created under a temporary root-side name and renamed
  // in the namespace, so its name cannot collide in the root namespace.
  const std::string cmd = absl::StrFormat(
      "set -e; ip link add %s mtu %d type veth peer name %s mtu %d; "
      "ip link set %s netns %s; "
      "sysctl -qw net.ipv6.conf.%s.disable_ipv6=1; ip link set %s up; "
      "ip -n %s addr add %s dev %s; ip -n %s link set %s up",
      v.root_if, mtu, v.ns_if, mtu, v.ns_if, ns, v.root_if, v.root_if, ns, cidr, v.ns_if, ns,
      v.ns_if);
  root_links_.push_back(v.root_if);
  CommandResult r = RunCommand(cmd);
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrFormat("creating veth %s: %s", v.root_if, r.output));
  }
  const std::string ns_if = v.ns_if;
  absl::Status s = RunIn(ns, [&] { DisableOffloads(ns_if); });
  if (!s.ok()) return s;
  return v;
}

CommandResult NetnsTestbed::Exec(const std::string& ns, const std::string& command,
                                 absl::Duration timeout) {
  return RunCommand("ip netns exec " + ShellQuote(ns) + " /bin/sh -c " + ShellQuote(command),
                    timeout);
}

absl::StatusOr<int> NetnsTestbed::Ping(const std::string& ns, const std::string& dst_ip,
                                      int count, absl::Duration wait) {
  in_addr dst{};
  if (inet_pton(AF_INET, dst_ip.c_str(), &dst) != 1) {
    return absl::InvalidArgumentError("not an IPv4 address: " + dst_ip);
  }
  int fd = -1;
  int err = 0;
  absl::Status s = RunIn(ns, [&] {
    fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
    err = errno;
  });
  if (!s.ok()) return s;
  if (fd < 0) return absl::InternalError(absl::StrFormat("raw ICMP socket: %s", std::strerror(err)));
  static std::atomic<uint16_t> next_id{0};
  const uint16_t id = static_cast<uint16_t>(getpid() ^ (next_id.fetch_add(1) << 10));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr = dst;
  int replies = 0;
  for (int seq = 0; seq < count; ++seq) {
    uint8_t req[40] = {8, 0, 0, 0, static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id),
                       static_cast<uint8_t>(seq >> 8), static_cast<uint8_t>(seq)};
    for (size_t i = 8; i < sizeof(req); ++i) req[i] = static_cast<uint8_t>(i);
    uint32_t sum = 0;
    for (size_t i = 0; i < sizeof(req); i += 2) sum += static_cast<uint32_t>(req[i] << 8 | req[i + 1]);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    req[2] = static_cast<uint8_t>(~sum >> 8);
    req[3] = static_cast<uint8_t>(~sum);
    if (sendto(fd, req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0) continue;
    const absl::Time deadline = absl::Now() + wait;
    bool answered = false;
    while (!answered && absl::Now() < deadline) {
      pollfd pfd{fd, POLLIN, 0};
      const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) + 1;
      if (poll(&pfd, 1, ms) <= 0) continue;
      uint8_t buf[1500];
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 28 || from.sin_addr.s_addr != dst.s_addr) continue;
      const size_t ihl = static_cast<size_t>(buf[0] & 0x0f) * 4;
      if (static_cast<size_t>(n) < ihl + 8) continue;
      const uint8_t* icmp = buf + ihl;
      answered = icmp[0] == 0 && (icmp[4] << 8 | icmp[5]) == id && (icmp[6] << 8 | icmp[7]) == seq;
    }
    if (answered) ++replies;
  }
  close(fd);
  return replies;
}

absl::Status NetnsTestbed::RunIn(const std::string& ns, const std::function<void()>& fn) {
  absl::Status status;
  std::thread t([&] {
    const std::string path = "/run/netns/" + ns;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      status = absl::NotFoundError(absl::StrFormat("open %s: %s", path, std::strerror(errno)));
      return;
    }
    if (setns(fd, CLONE_NEWNET) != 0) {
      status = absl::InternalError(absl::StrFormat("setns %s: %s", ns, std::strerror(errno)));
      close(fd);
      return;
    }
    close(fd);
    fn();
  });
  t.join();
  return status;
}

}  // namespace netfold::testing
