// Issue 23, "Authenticated control plane": the control plane of a
// `netfold up` fabric speaks TLS with a CA of its own. Someone who can
// capture the traffic (here a TCP proxy between the client and the daemon
// that records every byte) no longer reads the fabric credential; a client
// that does not trust the fabric's CA (another CA, or plaintext) gets
// nowhere; a daemon refuses a server key others can read, and a credential
// without TLS unless told to run in plaintext (docs/security.md, "TLS on
// the control plane").
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "auth/grpc_credential.h"
#include "auth/owned_file.h"
#include "auth/tls_certificates.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "tests/manager/subprocess.h"
#include "tools/local_fabric.h"

namespace netfold {
namespace {

namespace fs = std::filesystem;

// A TCP proxy on 127.0.0.1 to `target_port` that records every byte in
// either direction: what anyone who can capture the network sees. Every
// wait is a poll of at most 100 ms; the destructor stops and joins.
class RecordingProxy {
 public:
  explicit RecordingProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~RecordingProxy() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  int port() const { return port_; }
  std::string address() const { return absl::StrFormat("127.0.0.1:%d", port_); }
  std::string recorded() {
    absl::MutexLock lock(&mu_);
    return recorded_;
  }

 private:
  struct Pair {
    int client;
    int server;
  };

  int ConnectToTarget() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
  }

  // Moves what `from` has to `to`; false when either side is done.
  bool Pump(int from, int to) {
    char buf[16384];
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) return false;
    {
      absl::MutexLock lock(&mu_);
      recorded_.append(buf, static_cast<size_t>(n));
    }
    ssize_t done = 0;
    while (done < n) {
      const ssize_t w = write(to, buf + done, static_cast<size_t>(n - done));
      if (w <= 0) return false;
      done += w;
    }
    return true;
  }

  void Run() {
    std::vector<Pair> pairs;
    while (!stop_.load()) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (const Pair& p : pairs) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        const int server = client >= 0 ? ConnectToTarget() : -1;
        if (server >= 0) {
          pairs.push_back({client, server});
        } else if (client >= 0) {
          close(client);
        }
      }
      std::vector<Pair> alive;
      for (size_t i = 0; i < pairs.size(); ++i) {
        const Pair p = pairs[i];
        bool ok = true;
        if (i * 2 + 2 < fds.size()) {
          if (fds[1 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) ok = Pump(p.client, p.server);
          if (ok && fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) {
            ok = Pump(p.server, p.client);
          }
        }
        if (ok) {
          alive.push_back(p);
        } else {
          close(p.client);
          close(p.server);
        }
      }
      pairs = std::move(alive);
    }
    for (const Pair& p : pairs) {
      close(p.client);
      close(p.server);
    }
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::string recorded_ ABSL_GUARDED_BY(mu_);
};

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

std::unique_ptr<tools::LocalFabric> StartFabric() {
  tools::LocalFabricOptions o;  // as netfold up: TLS unless told otherwise
  o.hosts = 2;
  auto fabric = tools::LocalFabric::Start(o);
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  return fabric.ok() ? *std::move(fabric) : nullptr;
}

grpc::Status GetStatus(const std::string& address, const auth::ClientAuth& client_auth) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(address, client_auth));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  control::GetStatusResponse r;
  return stub->GetStatus(&c, control::GetStatusRequest(), &r);
}

grpc::Status GetCounters(const std::string& address, const auth::ClientAuth& client_auth) {
  auto stub = control::SwitchAdmin::NewStub(auth::CreateChannel(address, client_auth));
  grpc::ClientContext c;
  c.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  control::GetCountersResponse r;
  return stub->GetCounters(&c, control::GetCountersRequest(), &r);
}

TEST(ControlPlaneTls, TheCredentialNeverCrossesTheWireInClear) {
  auto fabric = StartFabric();
  ASSERT_NE(fabric, nullptr);
  const std::string secret = fabric->credential();
  ASSERT_GE(secret.size(), 32u);
  // The operator's calls, through a proxy that records them: the manager's
  // Admin and a switch's admin API (the daemons' own calls to the manager
  // take the same CreateChannel).
  RecordingProxy manager(PortOf(fabric->manager_address()));
  RecordingProxy admin(PortOf(fabric->switch_admin_addresses().at(0)));
  ASSERT_NE(manager.port(), 0);
  ASSERT_NE(admin.port(), 0);
  for (int i = 0; i < 3; ++i) {
    grpc::Status s = GetStatus(manager.address(), fabric->client_auth());
    ASSERT_TRUE(s.ok()) << s.error_message();
    s = GetCounters(admin.address(), fabric->client_auth());
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  for (RecordingProxy* p : {&manager, &admin}) {
    const std::string wire = p->recorded();
    EXPECT_GT(wire.size(), 1000u) << "the calls did not go through the proxy";
    EXPECT_EQ(wire.find(secret), std::string::npos) << "the credential crossed in clear";
    EXPECT_EQ(wire.find(secret.substr(0, 16)), std::string::npos);
    EXPECT_EQ(wire.find("netfold-credential"), std::string::npos);
    EXPECT_EQ(wire.find("netfold.control"), std::string::npos) << "method names in clear";
  }
}

TEST(ControlPlaneTls, AClientThatDoesNotTrustTheFabricsCaIsRefused) {
  auto fabric = StartFabric();
  ASSERT_NE(fabric, nullptr);
  absl::StatusOr<auth::FabricCertificates> other = auth::MakeFabricCertificates({});
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string secret = fabric->credential();
  const std::vector<std::string> servers = {fabric->manager_address(),
                                            fabric->switch_admin_addresses().at(0)};
  for (size_t i = 0; i < servers.size(); ++i) {
    SCOPED_TRACE(servers[i]);
    auto call = [&](const auth::ClientAuth& a) {
      return i == 0 ? GetStatus(servers[i], a) : GetCounters(servers[i], a);
    };
    // Another CA: the daemon's certificate does not check; the call (and
    // the credential in it) never leaves the client.
    grpc::Status s = call({secret, other->ca_pem});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    // Plaintext, even with the right credential.
    s = call({secret, ""});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    // The fabric's own clients.
    s = call(fabric->client_auth());
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
}

// A directory with a topology, a credential and a TLS set, for daemons
// started by hand; removed at the end.
class DaemonFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / "netfold-tls-XXXXXX").string();
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    ASSERT_TRUE(auth::WriteOwnedFile(dir_ + "/credential", std::string(64, 'a') + "\n").ok());
    absl::StatusOr<auth::FabricCertificates> c = auth::MakeFabricCertificates({});
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(auth::WriteOwnedFile(dir_ + "/ca.pem", c->ca_pem).ok());
    ASSERT_TRUE(auth::WriteOwnedFile(dir_ + "/server.pem", c->cert_pem).ok());
    ASSERT_TRUE(auth::WriteOwnedFile(dir_ + "/server.key", c->key_pem).ok());
    std::ofstream(dir_ + "/topology.yaml")
        << "name: t\ndefaults:\n  capacity: {trees: 1, groups: 1, slots: 8, slot_bytes: 1024, "
           "qps: 8}\nswitches:\n  - {name: leaf0, tier: 0}\nhosts:\n  - {name: h0, switch: leaf0}\n";
    absl::StatusOr<std::string> managerd = tools::LocalFabric::FindDaemon("netfold-managerd");
    absl::StatusOr<std::string> switchd = tools::LocalFabric::FindDaemon("netfold-switchd");
    ASSERT_TRUE(managerd.ok() && switchd.ok()) << managerd.status() << switchd.status();
    managerd_ = *managerd;
    switchd_ = *switchd;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The daemons' command lines, with `extra` flags.
  std::vector<std::vector<std::string>> Daemons(const std::vector<std::string>& extra) const {
    std::vector<std::vector<std::string>> d = {
        {managerd_, "--topology", dir_ + "/topology.yaml", "--listen", "127.0.0.1:0",
         "--credential_file", dir_ + "/credential"},
        {switchd_, "--name", "leaf0", "--data_address", "127.0.0.1:0", "--manager",
         "127.0.0.1:1", "--credential_file", dir_ + "/credential"},
    };
    for (auto& argv : d) argv.insert(argv.end(), extra.begin(), extra.end());
    return d;
  }

  // Runs `argv` until it exits (at most 30 s): its wait status and output.
  std::pair<int, std::string> Exit(const std::vector<std::string>& argv) const {
    absl::StatusOr<std::unique_ptr<manager::Subprocess>> p =
        manager::Subprocess::Start(argv, dir_ + "/daemon.log");
    if (!p.ok()) return {-1, std::string(p.status().message())};
    std::optional<int> status = (*p)->Wait(absl::Seconds(30));
    std::string log = (*p)->Log();
    fs::remove(dir_ + "/daemon.log");
    return {status.value_or(-1), log};
  }

  std::string dir_;
  std::string managerd_;
  std::string switchd_;
};

TEST_F(DaemonFilesTest, AServerKeyOthersCanReadIsRefusedWithAClearMessage) {
  const std::string key = dir_ + "/server.key";
  ASSERT_EQ(chmod(key.c_str(), 0644), 0);
  for (const auto& argv : Daemons({"--tls_dir", dir_})) {
    SCOPED_TRACE(argv[0]);
    auto [status, log] = Exit(argv);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << log;
    EXPECT_NE(log.find("TLS key file " + key + " has mode 0644"), std::string::npos) << log;
    EXPECT_NE(log.find("chmod 600 " + key), std::string::npos) << log;
  }
  // A link to a private key is refused as well: whoever can replace the
  // link chooses the key.
  ASSERT_EQ(chmod(key.c_str(), 0600), 0);
  ASSERT_EQ(rename(key.c_str(), (dir_ + "/real.key").c_str()), 0);
  ASSERT_EQ(symlink((dir_ + "/real.key").c_str(), key.c_str()), 0);
  for (const auto& argv : Daemons({"--tls_dir", dir_})) {
    SCOPED_TRACE(argv[0]);
    auto [status, log] = Exit(argv);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << log;
    EXPECT_NE(log.find("symbolic link"), std::string::npos) << log;
  }
}

TEST_F(DaemonFilesTest, ACredentialWithoutTlsIsRefusedUnlessPlaintextIsAskedFor) {
  for (const auto& argv : Daemons({})) {
    SCOPED_TRACE(argv[0]);
    auto [status, log] = Exit(argv);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << log;
    EXPECT_NE(log.find("no TLS: give --tls_dir DIR"), std::string::npos) << log;
    EXPECT_NE(log.find("--plaintext"), std::string::npos) << log;
  }
  // Told: it runs, and says so on stderr whatever the log level.
  for (const auto& argv : Daemons({"--plaintext", "--log_level", "error"})) {
    SCOPED_TRACE(argv[0]);
    absl::StatusOr<std::unique_ptr<manager::Subprocess>> p =
        manager::Subprocess::Start(argv, dir_ + "/plain.log");
    ASSERT_TRUE(p.ok()) << p.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline && (*p)->Log().find("PLAINTEXT") == std::string::npos &&
           (*p)->running()) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_TRUE((*p)->running()) << (*p)->Log();
    EXPECT_NE((*p)->Log().find("WARNING: PLAINTEXT"), std::string::npos) << (*p)->Log();
    p->reset();  // SIGKILL and reap
    fs::remove(dir_ + "/plain.log");
  }
  // And both at once is a contradiction.
  for (const auto& argv : Daemons({"--plaintext", "--tls_dir", dir_})) {
    auto [status, log] = Exit(argv);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << log;
  }
}

}  // namespace
}  // namespace netfold
