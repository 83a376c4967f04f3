#include "tools/fabric_daemons.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "auth/fabric_credential.h"
#include "auth/grpc_credential.h"
#include "auth/tls_files.h"
#include "base/errno_status.h"
#include "base/status_macros.h"
#include "proto/control/netfold_control.grpc.pb.h"
#include "proto/control/plane_name.h"
#include "tools/daemon_pids.h"
#include "tools/multicast_claim.h"

namespace netfold::tools {
namespace {

constexpr absl::Duration kExitWait = absl::Seconds(5);

// The signals `netfold kill` sends, by name.
constexpr std::pair<int, const char*> kSignals[] = {
    {SIGKILL, "KILL"}, {SIGTERM, "TERM"}, {SIGSTOP, "STOP"}, {SIGCONT, "CONT"}};

const char* SignalName(int signal) {
  for (const auto& [number, name] : kSignals) {
    if (number == signal) return name;
  }
  return "?";
}

// A running fabric's directory and its daemons as fabric.pids lists them.
struct Fabric {
  StateDir dir;
  std::vector<DaemonRecord> records;
};

absl::StatusOr<Fabric> OpenFabric(const std::string& state_dir) {
  absl::StatusOr<StateDir> dir = StateDir::Open(state_dir, /*create=*/false);
  if (absl::IsNotFound(dir.status())) {
    return absl::NotFoundError(absl::StrFormat("no fabric runs from %s", state_dir));
  }
  if (!dir.ok()) return dir.status();
  NETFOLD_ASSIGN_OR_RETURN(std::vector<DaemonRecord> records, ReadFabricRecords(*dir));
  return Fabric{*std::move(dir), std::move(records)};
}

// The value of `--key=` in `argv`, "" if absent.
std::string FlagValue(const std::vector<std::string>& argv, std::string_view key) {
  const std::string prefix = "--" + std::string(key) + "=";
  for (const std::string& a : argv) {
    if (absl::StartsWith(a, prefix)) return a.substr(prefix.size());
  }
  return "";
}

// The switches a daemon's command line runs (NAME, NAME@1, ... with
// --planes), as netfold-switchd names them; none for the manager.
std::vector<std::string> SwitchesOf(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  const std::string names = FlagValue(argv, "name");
  if (names.empty()) return out;
  uint32_t planes = 1;
  if (!absl::SimpleAtoi(FlagValue(argv, "planes"), &planes) || planes == 0 ||
      planes > control::kMaxPlanes) {
    planes = 1;
  }
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    for (uint32_t p = 0; p < planes; ++p) {
      out.push_back(control::PlaneSwitchName(std::string_view(name.data(), name.size()), p));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadArgv(const StateDir& dir, const std::string& name) {
  absl::StatusOr<std::string> text = dir.ReadFile(name + ".argv");
  if (absl::IsNotFound(text.status())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has no command line on record (%s): the fabric was started by an older netfold; "
        "netfold down and netfold up again",
        name, dir.PathOf(name + ".argv")));
  }
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<std::string>> argv = ParseArgv(*text);
  if (!argv.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %s", dir.PathOf(name + ".argv"), argv.status().message()));
  }
  return argv;
}

// The record of `name`, or an error that says why a name has none: a switch
// (or a data plane) that shares its process, or a name this fabric lacks.
absl::StatusOr<size_t> FindRecord(const Fabric& f, const std::string& name) {
  std::vector<std::string> names;
  for (size_t i = 0; i < f.records.size(); ++i) {
    if (f.records[i].name == name) return i;
    names.push_back(f.records[i].name);
  }
  for (const DaemonRecord& r : f.records) {
    absl::StatusOr<std::vector<std::string>> argv = ReadArgv(f.dir, r.name);
    if (!argv.ok()) continue;
    const std::vector<std::string> switches = SwitchesOf(*argv);
    if (std::find(switches.begin(), switches.end(), name) == switches.end()) continue;
    if (r.name == "switches") {
      return absl::FailedPreconditionError(absl::StrFormat(
          "switch %s runs in one process with every switch of this fabric (%s): `netfold kill "
          "switches` signals them together; `netfold up --switch-processes each` gives each "
          "switch a process of its own",
          name, absl::StrJoin(switches, ", ")));
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a data plane of switch %s, whose planes share one process: signal them "
        "together as %s",
        name, r.name, r.name));
  }
  return absl::NotFoundError(absl::StrFormat("no daemon '%s' in the fabric of %s: its daemons "
                                             "are %s",
                                             name, f.dir.path(), absl::StrJoin(names, ", ")));
}

// N of the fabric's multicast prefix 239.N, from the manager's config.
absl::StatusOr<int> MulticastOctet(const StateDir& dir) {
  NETFOLD_ASSIGN_OR_RETURN(std::string config, dir.ReadFile("manager.yaml"));
  for (absl::string_view line : absl::StrSplit(config, '\n')) {
    absl::string_view v = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&v, "multicast_prefix:")) continue;
    v = absl::StripAsciiWhitespace(v);
    v = absl::StripPrefix(absl::StripSuffix(v, "\""), "\"");
    int octet = 0;
    if (absl::ConsumePrefix(&v, "239.") && absl::SimpleAtoi(v, &octet)) return octet;
  }
  return absl::FailedPreconditionError(
      absl::StrFormat("%s names no multicast_prefix 239.N", dir.PathOf("manager.yaml")));
}

// At most 2 s, and not past `deadline`.
std::chrono::system_clock::time_point RpcDeadline(absl::Time deadline) {
  const absl::Duration left = std::clamp(deadline - absl::Now(), absl::ZeroDuration(),
                                         absl::Seconds(2));
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(left);
}

// The incarnation the switch serving its admin API at `address` has, asked
// until `deadline` (a loaded machine may be slow to answer the first call).
absl::StatusOr<uint64_t> OwnIncarnation(const std::string& address, const auth::ClientAuth& auth,
                                        absl::Time deadline) {
  auto stub = control::SwitchAdmin::NewStub(auth::CreateChannel(address, auth));
  grpc::Status s;
  do {
    grpc::ClientContext c;
    c.set_deadline(RpcDeadline(deadline));
    control::GetCountersResponse counters;
    s = stub->GetCounters(&c, control::GetCountersRequest(), &counters);
    if (s.ok()) return counters.incarnation();
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  return absl::DeadlineExceededError(
      absl::StrFormat("restarted, but its admin API %s did not answer: %s", address,
                      s.error_message()));
}

// Until the manager lists each switch of `want` UP with the incarnation
// given (0: any), while `pid` runs.
absl::Status WaitUpAtManager(const std::string& manager, const auth::ClientAuth& auth,
                             const std::map<std::string, uint64_t>& want, pid_t pid,
                             absl::Time deadline, const std::string& log) {
  auto stub = control::Admin::NewStub(auth::CreateChannel(manager, auth));
  std::string missing = "no answer";
  while (absl::Now() < deadline) {
    grpc::ClientContext c;
    c.set_deadline(RpcDeadline(deadline));
    control::GetStatusResponse status;
    if (grpc::Status s = stub->GetStatus(&c, control::GetStatusRequest(), &status); s.ok()) {
      std::vector<std::string> waiting;
      for (const auto& [name, incarnation] : want) {
        bool up = false;
        for (const control::SwitchStatus& sw : status.switches()) {
          up = up || (sw.name() == name && sw.state() == control::SwitchStatus::UP &&
                      (incarnation == 0 || sw.incarnation() == incarnation));
        }
        if (!up) waiting.push_back(name);
      }
      if (waiting.empty()) return absl::OkStatus();
      missing = absl::StrFormat("%s not up", absl::StrJoin(waiting, ", "));
    } else {
      missing = absl::StrFormat("manager %s: %s", manager, s.error_message());
    }
    int exit_status = 0;
    if (waitpid(pid, &exit_status, WNOHANG) == pid) {
      return absl::UnavailableError(absl::StrFormat(
          "the restarted daemon exited (status %d); see %s", exit_status, log));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "started, but not ready in time (%s); it still runs and fabric.pids records it", missing));
}

// What the fabric's clients present and trust: its credential and CA (none
// for a fabric run with --plaintext).
absl::StatusOr<auth::ClientAuth> FabricAuth(const StateDir& dir) {
  auth::ClientAuth out;
  NETFOLD_ASSIGN_OR_RETURN(out.credential,
                           auth::ReadCredentialFile(dir.PathOf(auth::kCredentialFileName)));
  absl::StatusOr<std::string> ca = auth::ReadTlsCaFile(dir.PathOf(auth::kTlsCaFileName));
  if (ca.ok()) out.tls_ca_pem = *std::move(ca);
  if (!ca.ok() && !absl::IsNotFound(ca.status())) return ca.status();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<DaemonRecord>> ReadFabricRecords(const StateDir& dir) {
  absl::StatusOr<std::string> text = dir.ReadFile("fabric.pids");
  if (absl::IsNotFound(text.status()) || (text.ok() && text->empty())) {
    return absl::NotFoundError(absl::StrFormat("no fabric runs from %s", dir.path()));
  }
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<DaemonRecord>> records = ParseDaemonRecords(*text);
  if (!records.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s; no process was signalled", dir.PathOf("fabric.pids"),
        records.status().message()));
  }
  return records;
}

const std::vector<std::string>& DaemonPrograms() {
  static const std::vector<std::string>* const kPrograms =
      new std::vector<std::string>{"netfold-managerd", "netfold-switchd"};
  return *kPrograms;
}

std::string FormatArgv(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& a : argv) {
    text += a;
    text.push_back('\0');
  }
  return text;
}

absl::StatusOr<std::vector<std::string>> ParseArgv(std::string_view text) {
  if (text.empty() || text.back() != '\0') {
    return absl::InvalidArgumentError("not a command line (arguments each ended by a NUL)");
  }
  text.remove_suffix(1);
  std::vector<std::string> argv = absl::StrSplit(absl::string_view(text.data(), text.size()), '\0');
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return absl::InvalidArgumentError("the command line does not start with a program's path");
  }
  return argv;
}

absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& argv, int log_fd, int claim_fd,
                                  bool detach) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to start");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    // A session of its own, always: with the scheduler's autogroups (on
    // by default) CPU time is shared between sessions first, so a daemon
    // in the launcher's session got one share among every rank's when
    // the machine is busy, where `netfold up`'s got one beside the job's.
    setsid();
    if (!detach) {
      // Children of a test, the demo or the benchmark die with their parent.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
    }
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    // Every daemon holds the fabric's multicast claim: it lasts while any
    // of them runs, also after the launcher is gone.
    if (claim_fd >= 0) fcntl(claim_fd, F_SETFD, 0);
    execv(args[0], args.data());
    static constexpr char kExecFailed[] = "netfold: could not exec the daemon\n";
    (void)!write(STDERR_FILENO, kExecFailed, sizeof(kExecFailed) - 1);
    _exit(127);
  }
  return pid;
}

absl::StatusOr<int> WaitForPortFile(const StateDir& dir, const std::string& name, pid_t pid,
                                    absl::Duration timeout, const std::string& log) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string text = dir.ReadFile(name).value_or("");
    int port = 0;
    if (!text.empty() && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) && port > 0) {
      return port;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return absl::UnavailableError(absl::StrFormat(
          "the daemon exited before it was ready (status %d); its log %s says:\n%s", status,
          dir.PathOf(log), dir.ReadFile(log).value_or("").substr(0, 2000)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrFormat("no port in %s after %s (log: %s)",
                                                     dir.PathOf(name),
                                                     absl::FormatDuration(timeout),
                                                     dir.PathOf(log)));
}

absl::StatusOr<int> ParseSignalName(std::string_view name) {
  std::string n = absl::AsciiStrToUpper(std::string(name));
  absl::string_view v = n;
  absl::ConsumePrefix(&v, "SIG");
  for (const auto& [number, known] : kSignals) {
    if (v == known) return number;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("signal '%s': use KILL, TERM, STOP or CONT", name));
}

absl::StatusOr<std::string> FormatFabricDaemons(const std::string& state_dir) {
  NETFOLD_ASSIGN_OR_RETURN(Fabric f, OpenFabric(state_dir));
  size_t width = 0;
  for (const DaemonRecord& r : f.records) width = std::max(width, r.name.size());
  std::string out = absl::StrFormat("daemons (%s):\n", f.dir.PathOf("fabric.pids"));
  for (const DaemonRecord& r : f.records) {
    const bool running = CheckDaemon(r, DaemonPrograms(), nullptr) == DaemonState::kRunning;
    const char* state = !running ? "gone" : DaemonStopped(r) ? "stopped" : "running";
    absl::StatusOr<std::vector<std::string>> argv = ReadArgv(f.dir, r.name);
    const std::string switches = argv.ok() ? absl::StrJoin(SwitchesOf(*argv), ", ") : "";
    const bool alone = switches.empty() || switches == r.name;
    absl::StrAppendFormat(&out, "  %-*s pid %-8d %s\n", static_cast<int>(width), r.name, r.pid,
                          alone ? state : absl::StrFormat("%-8s %s", state, switches));
  }
  return out;
}

absl::StatusOr<std::string> SignalFabricDaemon(const std::string& state_dir,
                                               const std::string& name, int signal) {
  NETFOLD_ASSIGN_OR_RETURN(Fabric f, OpenFabric(state_dir));
  NETFOLD_ASSIGN_OR_RETURN(size_t i, FindRecord(f, name));
  const DaemonRecord& r = f.records[i];
  const bool ends = signal == SIGKILL || signal == SIGTERM;
  NETFOLD_RETURN_IF_ERROR(
      SignalDaemon(r, DaemonPrograms(), signal, ends ? kExitWait : absl::ZeroDuration()));
  return absl::StrFormat("sent SIG%s to %s (pid %d)%s", SignalName(signal), name, r.pid,
                         ends ? "; it has exited" : "");
}

absl::StatusOr<std::string> RestartFabricDaemon(const std::string& state_dir,
                                                const std::string& name,
                                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<StateDir> opened = StateDir::Open(state_dir, /*create=*/false);
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(absl::StrFormat("no fabric runs from %s", state_dir));
  }
  if (!opened.ok()) return opened.status();
  // No other up, down or restart changes fabric.pids meanwhile.
  NETFOLD_ASSIGN_OR_RETURN(StateDir::Lock lock,
                           opened->TakeLock(kFabricLock, timeout));
  NETFOLD_ASSIGN_OR_RETURN(Fabric f, OpenFabric(state_dir));
  NETFOLD_ASSIGN_OR_RETURN(size_t i, FindRecord(f, name));
  const StateDir& dir = f.dir;
  if (CheckDaemon(f.records[i], DaemonPrograms(), nullptr) == DaemonState::kRunning) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is running (pid %d): `netfold kill %s` first", name, f.records[i].pid, name));
  }
  NETFOLD_ASSIGN_OR_RETURN(const std::vector<std::string> argv, ReadArgv(dir, name));
  const std::string program = argv[0].substr(argv[0].rfind('/') + 1);
  if (std::find(DaemonPrograms().begin(), DaemonPrograms().end(), program) ==
      DaemonPrograms().end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: '%s' is not a netfold daemon", dir.PathOf(name + ".argv"), argv[0]));
  }
  NETFOLD_ASSIGN_OR_RETURN(const auth::ClientAuth auth, FabricAuth(dir));

  // The fabric's multicast prefix: taken again by this daemon if free; else
  // it must be held by one of the fabric's daemons that run (a daemon
  // restarted beside them runs without a claim of its own).
  NETFOLD_ASSIGN_OR_RETURN(const int octet, MulticastOctet(dir));
  std::optional<MulticastClaim> claim;
  absl::StatusOr<MulticastClaim> taken = MulticastClaim::TakeExactly(octet);
  if (taken.ok()) {
    claim.emplace(*std::move(taken));
  } else if (!absl::IsAlreadyExists(taken.status())) {
    return taken.status();
  } else {
    std::vector<pid_t> running;
    for (const DaemonRecord& d : f.records) {
      if (CheckDaemon(d, DaemonPrograms(), nullptr) == DaemonState::kRunning) {
        running.push_back(d.pid);
      }
    }
    if (!MulticastClaim::HeldByOneOf(octet, running)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "a process outside the fabric holds its multicast prefix 239.%d (another fabric "
          "took it while none of this fabric's daemons held it): netfold down and netfold up "
          "again",
          octet));
    }
  }

  if (name == "manager") dir.Remove("manager.port");
  const std::vector<std::string> switches = SwitchesOf(argv);
  for (const std::string& sw : switches) dir.Remove(sw + ".admin_port");
  NETFOLD_RETURN_IF_ERROR(dir.Rename(name + ".log", name + ".log.1"));
  NETFOLD_ASSIGN_OR_RETURN(const int log_fd, dir.CreateFile(name + ".log"));
  absl::StatusOr<pid_t> pid = SpawnDaemon(argv, log_fd, claim ? claim->fd() : -1,
                                          /*detach=*/true);
  close(log_fd);
  if (!pid.ok()) return pid.status();
  f.records[i].pid = *pid;
  f.records[i].start_time = ProcessStartTime(*pid).value_or(0);
  if (absl::Status s = dir.WriteFile("fabric.pids", FormatDaemonRecords(f.records)); !s.ok()) {
    // Not recorded, so `down` would never stop it: it goes now.
    kill(*pid, SIGKILL);
    waitpid(*pid, nullptr, 0);
    return s;
  }
  lock = StateDir::Lock(-1);

  // Ready: its port files, then the manager lists the restarted switches
  // with the incarnations they report themselves (a killed one may still
  // be UP there under its old one), or, for the manager, every switch of
  // the daemons that run.
  const std::string log = name + ".log";
  const auto left = [deadline] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };
  std::map<std::string, uint64_t> want;
  if (name == "manager") {
    NETFOLD_RETURN_IF_ERROR(WaitForPortFile(dir, "manager.port", *pid, left(), log).status());
    for (const DaemonRecord& d : f.records) {
      if (d.name == "manager" || CheckDaemon(d, DaemonPrograms(), nullptr) !=
                                     DaemonState::kRunning) {
        continue;
      }
      absl::StatusOr<std::vector<std::string>> its = ReadArgv(dir, d.name);
      if (its.ok()) {
        for (const std::string& sw : SwitchesOf(*its)) want[sw] = 0;
      }
    }
  }
  for (const std::string& sw : switches) {
    NETFOLD_ASSIGN_OR_RETURN(const int port,
                             WaitForPortFile(dir, sw + ".admin_port", *pid, left(), log));
    NETFOLD_ASSIGN_OR_RETURN(
        want[sw], OwnIncarnation(absl::StrFormat("127.0.0.1:%d", port), auth, deadline));
  }
  const std::string manager =
      std::string(absl::StripAsciiWhitespace(dir.ReadFile("manager.address", 256).value_or("")));
  NETFOLD_RETURN_IF_ERROR(WaitUpAtManager(manager, auth, want, *pid, deadline, dir.PathOf(log)));
  return absl::StrFormat("restarted %s (pid %d)%s", name, *pid,
                         want.empty() ? "" : "; its switches are up at the manager");
}

}  // namespace netfold::tools
