#include "switch/switchd_config.h"

#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "auth/fabric_credential.h"
#include "auth/tls_files.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "config/yaml_reader.h"
#include "proto/aggregation_header.h"
#include "proto/control/plane_name.h"
#include "proto/slot_size.h"

namespace netfold::sw {
namespace {

using config::CheckKeys;
using config::ErrorAt;
using config::IndexPath;
using config::KeyPath;
using config::ReadOptionalBool;
using config::ReadOptionalDuration;
using config::ReadOptionalString;
using config::ReadOptionalUint;
using config::ReadString;
using config::ReadUint;
using transport::Ipv4Endpoint;

absl::StatusOr<Ipv4Endpoint> ReadEndpoint(const YAML::Node& node, std::string_view where) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadString(node, where));
  absl::StatusOr<Ipv4Endpoint> ep = transport::ParseIpv4Endpoint(text);
  if (!ep.ok()) {
    return ErrorAt(node, where, absl::StrFormat("'%s' is not an ip:port address", text));
  }
  return *ep;
}

absl::Status ParseQuota(const YAML::Node& node, std::string_view where, JobQuota* quota) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node, {"groups", "slots", "qps"}, where));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "groups", where, 1u << 20, &quota->max_groups));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "slots", where, 1u << 24, &quota->max_slots));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "qps", where, 1u << 24, &quota->max_qps));
  return absl::OkStatus();
}

absl::Status OptionalImpairment(const YAML::Node& map, std::string_view key,
                                std::string_view where, transport::ImpairmentConfig* out) {
  std::string text;
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(map, key, where, &text));
  absl::StatusOr<transport::ImpairmentConfig> c = transport::ParseImpairment(text);
  if (!c.ok()) {
    return ErrorAt(config::Child(map, key), KeyPath(where, key), std::string(c.status().message()));
  }
  *out = *c;
  return absl::OkStatus();
}

absl::Status ParseDpdk(const YAML::Node& node, DpdkBackendConfig* d) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node,
                                    {"eal_args", "links", "prefix_length", "gateway", "mac",
                                     "busy_poll", "bridge", "mbufs_per_link", "mbuf_data_size"},
                                    "dpdk"));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "eal_args", "dpdk", &d->eal_args));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "prefix_length", "dpdk", 32, &d->prefix_length));
  if (const YAML::Node g = node["gateway"]; g.IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadString(g, "dpdk.gateway"));
    absl::StatusOr<uint32_t> ip = transport::ParseIpv4Address(text);
    if (!text.empty() && !ip.ok()) {
      return ErrorAt(g, "dpdk.gateway", absl::StrFormat("'%s' is not an IPv4 address", text));
    }
    d->gateway = text.empty() ? 0 : *ip;
  }
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "mac", "dpdk", &d->mac));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalBool(node, "busy_poll", "dpdk", &d->busy_poll));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalBool(node, "bridge", "dpdk", &d->bridge));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalUint(node, "mbufs_per_link", "dpdk", 1u << 20, &d->mbufs_per_link));
  NETFOLD_RETURN_IF_ERROR(
      ReadOptionalUint(node, "mbuf_data_size", "dpdk", 65535, &d->mbuf_data_size));
  if (const YAML::Node links = node["links"]; links.IsDefined()) {
    if (!links.IsSequence()) {
      return ErrorAt(links, "dpdk.links",
                     "expected a list of {device, send_faults, receive_faults}");
    }
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string w = IndexPath("dpdk.links", i);
      NETFOLD_RETURN_IF_ERROR(CheckKeys(links[i], {"device", "send_faults", "receive_faults"}, w));
      DpdkLinkSpec link;
      NETFOLD_ASSIGN_OR_RETURN(link.device, ReadString(links[i]["device"], KeyPath(w, "device")));
      NETFOLD_RETURN_IF_ERROR(OptionalImpairment(links[i], "send_faults", w, &link.send));
      NETFOLD_RETURN_IF_ERROR(OptionalImpairment(links[i], "receive_faults", w, &link.receive));
      d->links.push_back(std::move(link));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LinkFaultSpec> ParseLinkFault(const YAML::Node& node, std::string_view where) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node, {"peer", "direction", "impairment"}, where));
  LinkFaultSpec spec;
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "peer", where, &spec.peer));
  if (spec.peer != "default" && spec.peer != "all" &&
      !transport::ParseIpv4Endpoint(spec.peer).ok()) {
    return ErrorAt(
        node["peer"], KeyPath(where, "peer"),
        absl::StrFormat("'%s' is neither default, all nor an ip:port address", spec.peer));
  }
  std::string direction = "both";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "direction", where, &direction));
  absl::StatusOr<transport::LinkDirection> d = transport::ParseLinkDirection(direction);
  if (!d.ok())
    return ErrorAt(node["direction"], KeyPath(where, "direction"),
                   std::string(d.status().message()));
  spec.direction = *d;
  std::string text;
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "impairment", where, &text));
  absl::StatusOr<transport::ImpairmentConfig> c = transport::ParseImpairment(text);
  if (!c.ok())
    return ErrorAt(node["impairment"], KeyPath(where, "impairment"),
                   std::string(c.status().message()));
  spec.impairment = *c;
  return spec;
}

absl::StatusOr<QpRequest> ParseStaticQp(const YAML::Node& node, std::string_view where) {
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(node, {"qpn", "psn", "job", "pkey", "peer", "remote"}, where));
  QpRequest qp;
  NETFOLD_ASSIGN_OR_RETURN(uint64_t qpn, ReadUint(node["qpn"], KeyPath(where, "qpn"), 0xfffffe));
  if (qpn < 2) {
    return ErrorAt(node["qpn"], KeyPath(where, "qpn"),
                   absl::StrFormat("QPN %d is reserved (0 and 1 are special)", qpn));
  }
  qp.qpn = static_cast<uint32_t>(qpn);
  NETFOLD_ASSIGN_OR_RETURN(uint64_t psn, ReadUint(node["psn"], KeyPath(where, "psn"), 0xffffff));
  qp.psn = static_cast<uint32_t>(psn);
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "job", where, UINT64_MAX, &qp.job_id));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "pkey", where, 0xffff, &qp.pkey));
  qp.peer = absl::StrFormat("static QP 0x%06x", *qp.qpn);
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(node, "peer", where, &qp.peer));
  const YAML::Node remote = node["remote"];
  if (remote.IsDefined()) {
    const std::string rw = KeyPath(where, "remote");
    NETFOLD_RETURN_IF_ERROR(CheckKeys(remote, {"address", "qpn", "psn"}, rw));
    NETFOLD_ASSIGN_OR_RETURN(qp.remote, ReadEndpoint(remote["address"], KeyPath(rw, "address")));
    NETFOLD_ASSIGN_OR_RETURN(uint64_t rq, ReadUint(remote["qpn"], KeyPath(rw, "qpn"), 0xfffffe));
    NETFOLD_ASSIGN_OR_RETURN(uint64_t rp, ReadUint(remote["psn"], KeyPath(rw, "psn"), 0xffffff));
    qp.remote_qpn = static_cast<uint32_t>(rq);
    qp.remote_psn = static_cast<uint32_t>(rp);
  }
  return qp;
}

absl::StatusOr<GroupSpec> ParseStaticGroup(const YAML::Node& node, std::string_view where) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node,
                                    {"tree", "group", "epoch", "job", "pkey", "qkey", "num_slots",
                                     "slot_bytes", "multicast", "parent_qpn", "children"},
                                    where));
  GroupSpec g;
  NETFOLD_ASSIGN_OR_RETURN(uint64_t tree, ReadUint(node["tree"], KeyPath(where, "tree"), 0xffff));
  NETFOLD_ASSIGN_OR_RETURN(uint64_t group,
                           ReadUint(node["group"], KeyPath(where, "group"), 0xffffffffu));
  g.tree_id = static_cast<uint16_t>(tree);
  g.group_id = static_cast<uint32_t>(group);
  g.epoch = 1;
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "epoch", where, 0xffffffffu, &g.epoch));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "job", where, UINT64_MAX, &g.job_id));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "pkey", where, 0xffff, &g.pkey));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "qkey", where, 0xffffffffu, &g.qkey));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "num_slots", where, 1u << 16, &g.num_slots));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(node, "slot_bytes", where, 1u << 20, &g.slot_bytes));
  if (node["multicast"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(g.multicast,
                             ReadEndpoint(node["multicast"], KeyPath(where, "multicast")));
  }
  if (node["parent_qpn"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(uint64_t p,
                             ReadUint(node["parent_qpn"], KeyPath(where, "parent_qpn"), 0xfffffe));
    g.parent_qpn = static_cast<uint32_t>(p);
  }
  const YAML::Node children = node["children"];
  const std::string cw = KeyPath(where, "children");
  if (!children.IsDefined() || !children.IsSequence() || children.size() == 0) {
    return ErrorAt(children, cw, "expected a non-empty list of {qpn, ranks}");
  }
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string w = IndexPath(cw, i);
    NETFOLD_RETURN_IF_ERROR(CheckKeys(children[i], {"qpn", "ranks"}, w));
    GroupChildSpec c;
    NETFOLD_ASSIGN_OR_RETURN(uint64_t qpn,
                             ReadUint(children[i]["qpn"], KeyPath(w, "qpn"), 0xfffffe));
    c.qpn = static_cast<uint32_t>(qpn);
    NETFOLD_ASSIGN_OR_RETURN(
        std::vector<uint64_t> ranks,
        config::ReadUintList(children[i]["ranks"], KeyPath(w, "ranks"), 0xffffffffu));
    c.ranks.assign(ranks.begin(), ranks.end());
    if (c.ranks.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: a child needs at least one rank", w));
    }
    g.children.push_back(std::move(c));
  }
  return g;
}

absl::StatusOr<SwitchdConfig> ParseUnchecked(std::string_view text, SwitchdConfig c) {
  NETFOLD_ASSIGN_OR_RETURN(const YAML::Node root, config::ParseYaml(text));
  if (root.IsNull()) return c;  // an empty file: the defaults
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(root,
                {"name", "data_address", "backend", "dpdk", "admin_address", "admin_detail", "manager",
                 "credential_file", "auth", "tls_dir", "tls", "secret", "log_level", "data_port_file", "admin_port_file", "capacity", "job_quota",
                 "transport", "link_faults", "static"},
                ""));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "name", "", &c.name));
  if (root["data_address"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.data_address, ReadEndpoint(root["data_address"], "data_address"));
  }
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "backend", "", &c.backend));
  if (const YAML::Node d = root["dpdk"]; d.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ParseDpdk(d, &c.dpdk));
  }
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "admin_address", "", &c.admin_address));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalBool(root, "admin_detail", "", &c.admin_detail));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "manager", "", &c.manager_address));
  if (root["secret"].IsDefined()) {
    return ErrorAt(root["secret"], "secret",
                   "is no longer read: a secret in a config file is as safe as the file. Put the "
                   "fabric credential alone in a file only you can read (chmod 600) and name it "
                   "with credential_file (docs/security.md)");
  }
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "credential_file", "", &c.credential_file));
  std::string auth = c.auth_none ? "none" : "credential";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "auth", "", &auth));
  if (auth != "credential" && auth != "none") {
    return ErrorAt(root["auth"], "auth", absl::StrFormat("'%s' must be credential or none", auth));
  }
  c.auth_none = auth == "none";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "tls_dir", "", &c.tls_dir));
  std::string tls = c.tls_none ? "none" : "required";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "tls", "", &tls));
  if (tls != "required" && tls != "none") {
    return ErrorAt(root["tls"], "tls", absl::StrFormat("'%s' must be required or none", tls));
  }
  c.tls_none = tls == "none";
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "log_level", "", &c.log_level));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "data_port_file", "", &c.data_port_file));
  NETFOLD_RETURN_IF_ERROR(ReadOptionalString(root, "admin_port_file", "", &c.admin_port_file));

  if (const YAML::Node cap = root["capacity"]; cap.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(
        CheckKeys(cap, {"trees", "groups", "slots", "slot_bytes", "qps"}, "capacity"));
    SwitchConfig& d = c.data_plane;
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(cap, "trees", "capacity", 1u << 16, &c.max_trees));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(cap, "groups", "capacity", 1u << 20, &d.max_groups));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(cap, "slots", "capacity", 1u << 24, &d.max_slots));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(cap, "slot_bytes", "capacity", 1u << 20, &d.max_slot_bytes));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalUint(cap, "qps", "capacity", 1u << 24, &d.max_qps));
  }
  if (const YAML::Node q = root["job_quota"]; q.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ParseQuota(q, "job_quota", &c.job_quota_given));
    c.data_plane.default_quota = c.QuotaGivenOver(c.data_plane.default_quota);
  }
  if (const YAML::Node t = root["transport"]; t.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(
        t, {"path_mtu", "ack_timeout_ms", "host_ack_timeout_ms", "ack_delay_us", "retry_count",
            "link_failure_ms", "idle_wait_us", "poll_us", "packet_buffers", "receive_queues", "planes", "ip_identification",
            "scheduling"},
        "transport"));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(t, "path_mtu", "transport", 4096, &c.data_plane.path_mtu));
    const absl::Duration ms = absl::Milliseconds(1), us = absl::Microseconds(1);
    NETFOLD_RETURN_IF_ERROR(ReadOptionalDuration(t, "ack_timeout_ms", "transport", ms, 60000,
                                                 &c.data_plane.ack_timeout));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalDuration(t, "host_ack_timeout_ms", "transport", ms, 60000,
                                                 &c.data_plane.host_ack_timeout));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalDuration(t, "ack_delay_us", "transport", us, 1000, &c.data_plane.ack_delay));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(t, "retry_count", "transport", 7, &c.data_plane.retry_count));
    NETFOLD_RETURN_IF_ERROR(ReadOptionalDuration(t, "link_failure_ms", "transport", ms, 600000,
                                                 &c.data_plane.min_failure_time));
    if (t["idle_wait_us"]) {
      absl::Duration idle;
      NETFOLD_RETURN_IF_ERROR(
          ReadOptionalDuration(t, "idle_wait_us", "transport", us, 1000000, &idle));
      c.idle_wait = idle;
    }
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalDuration(t, "poll_us", "transport", us, 1000000, &c.poll_window));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(t, "packet_buffers", "transport", 1u << 20, &c.packet_buffers));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(t, "receive_queues", "transport", 16, &c.receive_queues));
    NETFOLD_RETURN_IF_ERROR(
        ReadOptionalUint(t, "planes", "transport", control::kMaxPlanes, &c.planes));
    std::string id = c.data_plane.solve_ip_identification ? "solve" : "zero";
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(t, "ip_identification", "transport", &id));
    if (id != "zero" && id != "solve") {
      return ErrorAt(t["ip_identification"], "transport.ip_identification",
                     absl::StrFormat("'%s' must be zero or solve", id));
    }
    c.data_plane.solve_ip_identification = id == "solve";
    std::string scheduling = c.sched_batch ? "batch" : "normal";
    NETFOLD_RETURN_IF_ERROR(ReadOptionalString(t, "scheduling", "transport", &scheduling));
    if (scheduling != "batch" && scheduling != "normal") {
      return ErrorAt(t["scheduling"], "transport.scheduling",
                     absl::StrFormat("'%s' must be batch or normal", scheduling));
    }
    c.sched_batch = scheduling == "batch";
  }
  if (const YAML::Node lf = root["link_faults"]; lf.IsDefined()) {
    if (!lf.IsSequence()) {
      return ErrorAt(lf, "link_faults", "expected a list of {peer, direction, impairment}");
    }
    for (size_t i = 0; i < lf.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(LinkFaultSpec spec,
                               ParseLinkFault(lf[i], IndexPath("link_faults", i)));
      c.link_faults.push_back(spec);
    }
  }
  if (const YAML::Node st = root["static"]; st.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(st, {"jobs", "qps", "groups"}, "static"));
    auto list = [&](const char* key) -> absl::StatusOr<YAML::Node> {
      const YAML::Node n = st[key];
      if (n.IsDefined() && !n.IsSequence())
        return ErrorAt(n, KeyPath("static", key), "expected a list");
      return n;
    };
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node jobs, list("jobs"));
    for (size_t i = 0; jobs.IsDefined() && i < jobs.size(); ++i) {
      const std::string w = IndexPath("static.jobs", i);
      NETFOLD_RETURN_IF_ERROR(CheckKeys(jobs[i], {"id", "quota"}, w));
      NETFOLD_ASSIGN_OR_RETURN(uint64_t id, ReadUint(jobs[i]["id"], KeyPath(w, "id"), UINT64_MAX));
      JobQuota quota = c.data_plane.default_quota;
      if (jobs[i]["quota"].IsDefined()) {
        NETFOLD_RETURN_IF_ERROR(ParseQuota(jobs[i]["quota"], KeyPath(w, "quota"), &quota));
      }
      c.static_job_quotas.emplace_back(id, quota);
    }
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node qps, list("qps"));
    for (size_t i = 0; qps.IsDefined() && i < qps.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(QpRequest qp, ParseStaticQp(qps[i], IndexPath("static.qps", i)));
      c.static_qps.push_back(std::move(qp));
    }
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node groups, list("groups"));
    for (size_t i = 0; groups.IsDefined() && i < groups.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(GroupSpec g,
                               ParseStaticGroup(groups[i], IndexPath("static.groups", i)));
      c.static_groups.push_back(std::move(g));
    }
  }
  return c;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

uint32_t MaxSlotBytesForMtu(uint32_t path_mtu) {
  if (path_mtu <= proto::kAggregationHeaderSize) return 0;
  return (path_mtu - static_cast<uint32_t>(proto::kAggregationHeaderSize)) / 16 * 16;
}

absl::StatusOr<SwitchdConfig> ParseSwitchdConfig(std::string_view yaml_text, SwitchdConfig base) {
  // The parse boundary: nothing yaml-cpp throws gets past it.
  try {
    return ParseUnchecked(yaml_text, std::move(base));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("config: %s", e.what()));
  }
}

absl::StatusOr<SwitchdConfig> LoadSwitchdConfig(const std::string& path) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, config::ReadTextFile(path));
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(text);
  if (!c.ok()) return config::InFile(c.status(), path);
  return c;
}

absl::Status LoadSwitchdCredential(SwitchdConfig* c) {
  if (c->auth_none) {
    // The environment's file is ignored: it may be inherited; a file given
    // to this daemon is a contradiction.
    if (!c->credential_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("auth: none (--insecure) and a credential file (%s) both given: drop one",
                          c->credential_file));
    }
    c->credential.clear();
    return absl::OkStatus();
  }
  std::string file = c->credential_file;
  if (file.empty()) {
    if (const char* f = std::getenv(auth::kCredentialFileEnv); f != nullptr) file = f;
  }
  if (file.empty()) {
    if (c->manager_address.empty() && c->admin_address.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "no fabric credential: give --credential_file FILE (or credential_file: in --config, or "
        "NETFOLD_CREDENTIAL_FILE), the manager's credential file (netfold up makes one); the "
        "switch presents it to the manager and asks it of admin callers. Or run without "
        "authentication with --insecure (auth: none), on a machine where you trust every user");
  }
  NETFOLD_ASSIGN_OR_RETURN(c->credential, auth::ReadCredentialFile(file));
  return absl::OkStatus();
}

absl::Status LoadSwitchdTls(SwitchdConfig* c) {
  c->tls.reset();
  if (c->tls_none) {
    if (!c->tls_dir.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tls: none (--plaintext) and a TLS directory (%s) both given: drop one", c->tls_dir));
    }
    return absl::OkStatus();
  }
  if (c->tls_dir.empty()) {
    if (c->credential.empty()) return absl::OkStatus();  // auth: none, or nothing to serve
    return absl::InvalidArgumentError(
        "no TLS: give --tls_dir DIR (or tls_dir: in --config), the manager's directory of "
        "ca.pem, server.pem and server.key (netfold certs makes them), so that the fabric "
        "credential never crosses the network in clear; or run in plaintext with --plaintext "
        "(tls: none), with the manager in plaintext too, on loopback or a network only you can "
        "capture");
  }
  NETFOLD_ASSIGN_OR_RETURN(auth::TlsFiles tls, auth::ReadTlsDir(c->tls_dir));
  c->tls = std::move(tls);
  return absl::OkStatus();
}

absl::Status ValidateSwitchdConfig(const SwitchdConfig& c) {
  auto invalid = [](std::string msg) { return absl::InvalidArgumentError(std::move(msg)); };
  if (!ValidName(c.name)) {
    return invalid(absl::StrFormat(
        "name '%s': give the switch a name of 1..64 characters [A-Za-z0-9._-] (--name or name:)",
        c.name));
  }
  if (c.data_address.ip == 0 || c.data_address.IsMulticast() ||
      c.data_address.ip == 0xffffffffu) {
    return invalid(absl::StrFormat(
        "data_address %s: needs one unicast IPv4 address (the ICRC covers it), not 0.0.0.0, "
        "the broadcast address or a multicast group",
        c.data_address.ToString()));
  }
  if (c.backend == "dpdk") {
#ifndef NETFOLD_HAVE_DPDK
    return absl::UnimplementedError(
        "backend dpdk: this netfold-switchd was built without DPDK (install libdpdk-dev and "
        "rebuild with -Ddpdk=enabled); use udp");
#endif
    if (c.dpdk.links.empty()) {
      return invalid("backend dpdk: dpdk.links lists no device (docs/dpdk.md)");
    }
    for (size_t i = 0; i < c.dpdk.links.size(); ++i) {
      if (c.dpdk.links[i].device.empty()) {
        return invalid(absl::StrFormat("dpdk.links[%d].device is empty", i));
      }
    }
    if (c.dpdk.prefix_length < 1 || c.dpdk.prefix_length > 32) {
      return invalid("dpdk.prefix_length must be 1..32");
    }
    if (c.dpdk.mbufs_per_link < 64) return invalid("dpdk.mbufs_per_link must be at least 64");
    if (c.dpdk.mbuf_data_size != 0 && c.dpdk.mbuf_data_size < c.data_plane.path_mtu + 128) {
      return invalid(absl::StrFormat(
          "dpdk.mbuf_data_size %d cannot hold a frame of the %d-byte path MTU (at least %d)",
          c.dpdk.mbuf_data_size, c.data_plane.path_mtu, c.data_plane.path_mtu + 128));
    }
  } else if (!c.dpdk.links.empty()) {
    return invalid(absl::StrFormat("a dpdk: section with backend %s; set backend: dpdk",
                                   c.backend));
  }
  if (c.backend != "udp" && c.backend != "dpdk") {
    return invalid(absl::StrFormat("backend '%s' is not one of udp, dpdk", c.backend));
  }
  if (!c.admin_address.empty() && !transport::ParseIpv4Endpoint(c.admin_address).ok()) {
    return invalid(absl::StrFormat("admin_address '%s' is not ip:port", c.admin_address));
  }
  if (c.admin_detail) {
    absl::StatusOr<transport::Ipv4Endpoint> admin = transport::ParseIpv4Endpoint(c.admin_address);
    if (!admin.ok() || (admin->ip >> 24) != 127) {
      return invalid(absl::StrFormat(
          "admin_detail needs an admin_address on loopback (127.0.0.0/8), not '%s': the admin "
          "API does not authenticate its callers",
          c.admin_address));
    }
  }
  if (!c.log_level.empty() && !ParseLogLevel(c.log_level).has_value()) {
    return invalid(absl::StrFormat("log_level '%s' is not error, warning, info, debug or trace",
                                   c.log_level));
  }
  const SwitchConfig& d = c.data_plane;
  const uint32_t mtu = d.path_mtu;
  if (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096) {
    return invalid(absl::StrFormat("transport.path_mtu %d is not 256, 512, 1024, 2048 or 4096", mtu));
  }
  if (d.max_slot_bytes == 0 || d.max_slot_bytes % 16 != 0 ||
      d.max_slot_bytes > MaxSlotBytesForMtu(mtu)) {
    return invalid(absl::StrFormat(
        "capacity.slot_bytes %d: must be a positive multiple of 16 and at most %d, so that a "
        "multicast result (40-byte header + slot) fits one %d-byte packet",
        d.max_slot_bytes, MaxSlotBytesForMtu(mtu), mtu));
  }
  if (c.max_trees == 0 || d.max_groups == 0 || d.max_slots == 0 || d.max_qps == 0) {
    return invalid("capacity: trees, groups, slots and qps must be positive");
  }
  if (d.ack_timeout <= absl::ZeroDuration()) return invalid("transport.ack_timeout_ms must be positive");
  if (d.host_ack_timeout <= absl::ZeroDuration()) {
    return invalid("transport.host_ack_timeout_ms must be positive");
  }
  if (d.retry_count > 7) return invalid("transport.retry_count must be 0..7");
  if (c.packet_buffers < 256) return invalid("transport.packet_buffers must be at least 256");
  if (c.receive_queues > 0 && c.backend != "udp") {
    return invalid("transport.receive_queues is for the udp backend (DPDK has queues of its own)");
  }
  if (c.receive_queues > 0 && c.poll_window > absl::ZeroDuration()) {
    return invalid("transport.receive_queues and transport.poll_us do not go together: the "
                   "queues' threads sleep until a packet comes");
  }
  if (c.idle_wait && *c.idle_wait < absl::ZeroDuration()) {
    return invalid("transport.idle_wait_us must not be negative");
  }
  if (c.planes < 1 || c.planes > control::kMaxPlanes) {
    return invalid(absl::StrFormat("transport.planes must be 1..%d", control::kMaxPlanes));
  }
  if (c.plane >= c.planes) {
    return invalid(absl::StrFormat("plane %d of a switch with %d planes", c.plane, c.planes));
  }
  if (c.planes > 1 && c.backend != "udp") {
    return invalid("transport.planes is for the udp backend: each plane has a port of its own");
  }
  if (c.planes > 1 && (!c.static_qps.empty() || !c.static_groups.empty())) {
    return invalid("transport.planes: static QPs and groups belong to one data plane; run "
                   "static mode with one plane");
  }
  for (const LinkFaultSpec& f : c.link_faults) {
    if (f.peer != "default" && f.peer != "all" && !transport::ParseIpv4Endpoint(f.peer).ok()) {
      return invalid(absl::StrFormat("link fault peer '%s' is neither default, all nor ip:port",
                                     f.peer));
    }
  }
  const bool has_static =
      !c.static_qps.empty() || !c.static_groups.empty() || !c.static_job_quotas.empty();
  if (!c.manager_address.empty() && has_static) {
    return invalid(
        "a switch with a manager gets its QPs and groups from it: drop the static: section or "
        "the manager address");
  }
  std::set<uint32_t> qpns;
  for (const QpRequest& qp : c.static_qps) {
    if (!qp.qpn || !qp.psn) return invalid("static.qps: every QP needs qpn and psn");
    if (!qp.remote) {
      return invalid(absl::StrFormat(
          "static.qps: QP 0x%x needs remote: {address, qpn, psn} (no manager will connect it)",
          *qp.qpn));
    }
    if (!qpns.insert(*qp.qpn).second) {
      return invalid(absl::StrFormat("static.qps: QPN 0x%x appears twice", *qp.qpn));
    }
  }
  std::set<std::pair<uint16_t, uint32_t>> groups;
  for (const GroupSpec& g : c.static_groups) {
    if (!groups.insert({g.tree_id, g.group_id}).second) {
      return invalid(
          absl::StrFormat("static.groups: group %d of tree %d appears twice", g.group_id, g.tree_id));
    }
    if (!proto::IsValidSlotBytes(g.slot_bytes) || g.slot_bytes > d.max_slot_bytes) {
      return invalid(absl::StrFormat(
          "static.groups: group %d of tree %d: slot_bytes %d must be a multiple of %d (the "
          "largest element) and at most capacity.slot_bytes (%d)",
          g.group_id, g.tree_id, g.slot_bytes, proto::kSlotAlignment, d.max_slot_bytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LinkFaultSpec>> ParseLinkFaultList(std::string_view text) {
  std::vector<LinkFaultSpec> out;
  for (absl::string_view raw :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ';', absl::SkipWhitespace())) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    std::vector<std::string> parts = absl::StrSplit(entry, absl::MaxSplits('/', 2));
    if (parts.size() != 3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "link fault '%s': expected PEER/DIRECTION/IMPAIRMENT, e.g. all/both/drop=0.01",
          std::string(entry)));
    }
    LinkFaultSpec spec;
    spec.peer = parts[0];
    if (spec.peer != "default" && spec.peer != "all" &&
        !transport::ParseIpv4Endpoint(spec.peer).ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "link fault '%s': peer '%s' is neither default, all nor ip:port", std::string(entry),
          spec.peer));
    }
    absl::StatusOr<transport::LinkDirection> d = transport::ParseLinkDirection(parts[1]);
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("link fault '%s': %s", std::string(entry), d.status().message()));
    }
    spec.direction = *d;
    absl::StatusOr<transport::ImpairmentConfig> c = transport::ParseImpairment(parts[2]);
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("link fault '%s': %s", std::string(entry), c.status().message()));
    }
    spec.impairment = *c;
    out.push_back(spec);
  }
  return out;
}

}  // namespace netfold::sw
