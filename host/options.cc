#include "host/options.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "auth/fabric_credential.h"
#include "auth/tls_files.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/control/plane_name.h"

namespace netfold::host {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

absl::Status ApplyEnvironment(ContextOptions* o) {
  if (std::string v = Env("NETFOLD_MANAGER"); !v.empty() && o->manager.empty()) o->manager = v;
  if (o->manager.empty()) o->manager = "127.0.0.1:47910";
  if (o->credential_file.empty()) o->credential_file = auth::DefaultCredentialFile();
  if (o->tls_ca_file.empty()) o->tls_ca_file = auth::DefaultTlsCaFile(o->credential_file);
  if (std::string v = Env("NETFOLD_HOST"); !v.empty() && o->host_name.empty()) o->host_name = v;
  if (o->host_name.empty()) o->host_name = absl::StrFormat("h%d", o->rank);
  if (std::string v = Env("NETFOLD_LOCAL_ADDRESS"); !v.empty()) o->local_address = v;
  if (std::string v = Env("NETFOLD_FAULTS"); !v.empty() && o->faults.empty()) o->faults = v;
  if (std::string v = Env("NETFOLD_TIMEOUT_MS"); !v.empty()) {
    int ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_TIMEOUT_MS='%s' is not a positive number of milliseconds", v));
    }
    o->timeout = absl::Milliseconds(ms);
  }
  if (std::string v = Env("NETFOLD_CONNECT_TIMEOUT_MS"); !v.empty()) {
    int ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "NETFOLD_CONNECT_TIMEOUT_MS='%s' is not a positive number of milliseconds", v));
    }
    o->connect_timeout = absl::Milliseconds(ms);
  }
  auto number = [](const char* name, uint32_t* out) -> absl::Status {
    std::string v = Env(name);
    if (v.empty() || *out != 0) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out) || *out == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s='%s' is not a positive number", name, v));
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_SLOTS", &o->num_slots));
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_SLOT_BYTES", &o->slot_bytes));
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_MAX_GROUPS", &o->max_groups));
  NETFOLD_RETURN_IF_ERROR(number("NETFOLD_BCAST_RUN", &o->bcast_run));
  if (std::string v = Env("NETFOLD_DELIVERY"); !v.empty()) {
    if (v == "multicast") {
      o->delivery = proto::DeliveryMode::kMulticast;
    } else if (v == "rc" || v == "rc_tree") {
      o->delivery = proto::DeliveryMode::kRcTree;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_DELIVERY='%s': use multicast or rc", v));
    }
  }
  if (std::string v = Env("NETFOLD_REDUCE_DATA"); !v.empty()) {
    if (v == "root") {
      o->reduce_data = ReduceData::kRoot;
    } else if (v == "all") {
      o->reduce_data = ReduceData::kAll;
    } else if (v == "auto") {
      o->reduce_data = ReduceData::kAuto;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_REDUCE_DATA='%s': use auto, root or all", v));
    }
  }
  if (std::string v = Env("NETFOLD_ALGORITHM"); !v.empty()) {
    NETFOLD_ASSIGN_OR_RETURN(o->algorithm, algorithms::ParseAlgorithmPolicy(v));
  }
  if (std::string v = Env("NETFOLD_TRANSPORT"); !v.empty()) {
    if (v == "soft") {
      o->transport = ContextOptions::Transport::kSoft;
    } else if (v == "verbs") {
      o->transport = ContextOptions::Transport::kVerbs;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_TRANSPORT='%s': use soft or verbs", v));
    }
  }
  if (std::string v = Env("NETFOLD_VERBS_DEVICE"); !v.empty() && o->verbs_device.empty()) {
    o->verbs_device = v;
  }
  auto bounded = [](const char* name, uint32_t max, uint32_t* out) -> absl::Status {
    std::string v = Env(name);
    if (v.empty()) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out) || *out > max) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s='%s' is not a number from 0 to %d", name, v, max));
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_PORT", 255, &o->verbs_port));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_RELEASED_REDUCES", 8, &o->released_reduces));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_KEEP_GROUPS", 64, &o->keep_groups));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_PLANES", control::kMaxPlanes, &o->planes));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_CHANNELS", control::kMaxPlanes, &o->channels));
  NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_MTU", 4096, &o->verbs_mtu));
  if (!Env("NETFOLD_POLL_US").empty()) {
    uint32_t us = 0;
    NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_POLL_US", 1000000, &us));
    o->poll_window = absl::Microseconds(us);
  }
  auto on_off = [](const char* name, bool* out) -> absl::Status {
    std::string v = Env(name);
    if (v.empty()) return absl::OkStatus();
    if (v == "1" || v == "on" || v == "yes") {
      *out = true;
    } else if (v == "0" || v == "off" || v == "no") {
      *out = false;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat("%s='%s': use 1 or 0", name, v));
    }
    return absl::OkStatus();
  };
  NETFOLD_RETURN_IF_ERROR(on_off("NETFOLD_PROGRESS_THREAD", &o->progress_thread));
  NETFOLD_RETURN_IF_ERROR(on_off("NETFOLD_PLACE_RESULTS", &o->place_results));
  if (!Env("NETFOLD_PROGRESS_TAKEOVER_US").empty()) {
    uint32_t us = 0;
    NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_PROGRESS_TAKEOVER_US", 10000000, &us));
    o->progress_takeover = absl::Microseconds(us);
  }
  if (!Env("NETFOLD_VERBS_GID_INDEX").empty()) {
    uint32_t index = 0;
    NETFOLD_RETURN_IF_ERROR(bounded("NETFOLD_VERBS_GID_INDEX", 255, &index));
    o->verbs_gid_index = index;
  }
  if (std::string v = Env("NETFOLD_INTEGRITY"); !v.empty()) {
    if (v == "1" || v == "on" || v == "yes") {
      o->integrity = true;
    } else if (v != "0" && v != "off" && v != "no") {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_INTEGRITY='%s': use 1 or 0", v));
    }
  }
  if (std::string v = Env("NETFOLD_PARTITION"); !v.empty()) {
    if (v == "default") {
      o->default_partition = true;
    } else if (v != "job") {
      return absl::InvalidArgumentError(
          absl::StrFormat("NETFOLD_PARTITION='%s': use job or default", v));
    }
  }
  if (auto level = Env("NETFOLD_LOG_LEVEL"); !level.empty() && !ParseLogLevel(level)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NETFOLD_LOG_LEVEL='%s': use error, warning, info, debug or trace", level));
  }
  return absl::OkStatus();
}

}  // namespace netfold::host
