#include "transport/dpdk/dpdk_runtime.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"

namespace netfold::transport::dpdk {
namespace {

absl::Mutex g_mu;
DpdkRuntime* g_runtime ABSL_GUARDED_BY(g_mu) = nullptr;
absl::Status* g_failure ABSL_GUARDED_BY(g_mu) = nullptr;

std::string JoinArgs(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

absl::Status EalError(int err, const std::vector<std::string>& args) {
  const std::string what = absl::StrFormat("rte_eal_init(%s) failed: %s (rte_errno %d)",
                                           JoinArgs(args), rte_strerror(err), err);
  const std::string root_hint =
      geteuid() == 0 ? "" : "; DPDK with af_packet/tap devices needs root (CAP_NET_RAW, CAP_SYS_ADMIN)";
  switch (err) {
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(what + root_hint);
    case EINVAL:
      return absl::InvalidArgumentError(what + " (see the EAL's message above)");
    case EALREADY:
      return absl::FailedPreconditionError(what + " (the EAL was initialised before)");
    default:
      return absl::UnavailableError(what + root_hint);
  }
}

}  // namespace

std::vector<std::string> DefaultEalArgs() {
  return {"--no-huge", "--no-shconf", "--no-pci", "-m", "256", "-l", "0", "--no-telemetry",
          "--log-level=*:warning"};
}

std::vector<std::string> SplitEalArgs(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\n') ++j;
    if (j > i) out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

absl::StatusOr<DpdkRuntime*> DpdkRuntime::Initialize(const std::vector<std::string>& eal_args) {
  absl::MutexLock lock(&g_mu);
  if (g_runtime != nullptr) {
    if (g_runtime->eal_args() != eal_args) {
      NETFOLD_LOG(kInfo) << "DPDK EAL already initialised with '" << JoinArgs(g_runtime->eal_args())
                         << "'; ignoring '" << JoinArgs(eal_args) << "'";
    }
    return g_runtime;
  }
  if (g_failure != nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "DPDK EAL initialisation failed earlier in this process: %s", g_failure->message()));
  }

  // The EAL keeps pointers into argv (e.g. the program name): the strings
  // live as long as the process.
  static std::vector<std::string>* storage = new std::vector<std::string>();
  storage->clear();
  storage->push_back("netfold");
  storage->insert(storage->end(), eal_args.begin(), eal_args.end());
  static std::vector<char*>* argv = new std::vector<char*>();
  argv->clear();
  for (std::string& s : *storage) argv->push_back(s.data());
  argv->push_back(nullptr);

  cpu_set_t affinity;
  const bool have_affinity = sched_getaffinity(0, sizeof(affinity), &affinity) == 0;
  const int rc = rte_eal_init(static_cast<int>(argv->size() - 1), argv->data());
  if (have_affinity) sched_setaffinity(0, sizeof(affinity), &affinity);
  if (rc < 0) {
    const absl::Status status = EalError(rte_errno, eal_args);
    g_failure = new absl::Status(status);
    return status;
  }
  g_runtime = new DpdkRuntime(eal_args);
  NETFOLD_LOG(kInfo) << "DPDK EAL initialised: " << JoinArgs(eal_args);
  return g_runtime;
}

DpdkRuntime* DpdkRuntime::Get() {
  absl::MutexLock lock(&g_mu);
  return g_runtime;
}

std::vector<std::string> DpdkRuntime::PortNames() const {
  std::vector<std::string> names;
  uint16_t port_id;
  RTE_ETH_FOREACH_DEV(port_id) {
    char name[RTE_ETH_NAME_MAX_LEN];
    if (rte_eth_dev_get_name_by_port(port_id, name) == 0) names.emplace_back(name);
  }
  return names;
}

}  // namespace netfold::transport::dpdk
