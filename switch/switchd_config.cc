#include "switch/switchd_config.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "base/errno_status.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "proto/aggregation_header.h"
#include "yaml-cpp/yaml.h"

namespace netfold::sw {
namespace {

using transport::Ipv4Endpoint;

// yaml-cpp throws; every helper below runs inside ParseSwitchdConfig's try.

std::string At(const YAML::Node& node, std::string_view where) {
  if (!node.IsDefined()) return std::string(where);
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return std::string(where);
  return absl::StrFormat("%s (line %d)", where, mark.line + 1);
}

absl::Status CheckKeys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                       std::string_view where) {
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected a map", At(node, where)));
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string list;
    for (std::string_view a : allowed) list += absl::StrFormat("%s%s", list.empty() ? "" : ", ", a);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown key '%s' (known: %s)", At(kv.first, where), key, list));
  }
  return absl::OkStatus();
}

std::string Path(std::string_view where, std::string_view key) {
  return where.empty() ? std::string(key) : absl::StrFormat("%s.%s", where, key);
}

absl::StatusOr<uint64_t> ReadUint(const YAML::Node& node, std::string_view where,
                                  uint64_t max_value) {
  if (!node.IsDefined() || node.IsNull()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: missing", where));
  }
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected a number", At(node, where)));
  }
  const std::string text = node.Scalar();
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const std::string digits = hex ? text.substr(2) : text;
  const std::string_view allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  if (digits.empty() || digits.size() > 20 || digits.find_first_not_of(allowed) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not a non-negative integer", At(node, where), text));
  }
  const uint64_t base = hex ? 16 : 10;
  uint64_t value = 0;
  for (char c : digits) {
    const uint64_t d = c <= '9' ? static_cast<uint64_t>(c - '0')
                                : static_cast<uint64_t>((c | 0x20) - 'a' + 10);
    if (d > max_value || value > (max_value - d) / base) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s is larger than %d", At(node, where), text, max_value));
    }
    value = value * base + d;
  }
  return value;
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node, std::string_view where) {
  if (!node.IsDefined()) return absl::InvalidArgumentError(absl::StrFormat("%s: missing", where));
  if (node.IsNull()) return std::string();
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected a string", At(node, where)));
  }
  return node.Scalar();
}

absl::StatusOr<Ipv4Endpoint> ReadEndpoint(const YAML::Node& node, std::string_view where) {
  NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadString(node, where));
  absl::StatusOr<Ipv4Endpoint> ep = transport::ParseIpv4Endpoint(text);
  if (!ep.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not an ip:port address", At(node, where), text));
  }
  return *ep;
}

absl::StatusOr<std::vector<uint32_t>> ReadUintList(const YAML::Node& node, std::string_view where,
                                                   uint32_t max_value) {
  if (!node.IsDefined() || !node.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected a list", At(node, where)));
  }
  std::vector<uint32_t> out;
  for (size_t i = 0; i < node.size(); ++i) {
    NETFOLD_ASSIGN_OR_RETURN(uint64_t v,
                             ReadUint(node[i], absl::StrFormat("%s[%d]", where, i), max_value));
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

// Reads `key` of `map` into `*out` if present.
template <typename T>
absl::Status OptionalUint(const YAML::Node& map, std::string_view key, std::string_view where,
                          uint64_t max_value, T* out) {
  const YAML::Node n = map[std::string(key)];
  if (!n.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(uint64_t v, ReadUint(n, Path(where, key), max_value));
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status OptionalString(const YAML::Node& map, std::string_view key, std::string_view where,
                            std::string* out) {
  const YAML::Node n = map[std::string(key)];
  if (!n.IsDefined()) return absl::OkStatus();
  NETFOLD_ASSIGN_OR_RETURN(*out, ReadString(n, Path(where, key)));
  return absl::OkStatus();
}

absl::Status ParseQuota(const YAML::Node& node, std::string_view where, JobQuota* quota) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node, {"groups", "slots", "qps"}, where));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "groups", where, 1u << 20, &quota->max_groups));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "slots", where, 1u << 24, &quota->max_slots));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "qps", where, 1u << 24, &quota->max_qps));
  return absl::OkStatus();
}

absl::Status OptionalBool(const YAML::Node& map, std::string_view key, std::string_view where,
                          bool* out) {
  const YAML::Node n = map[std::string(key)];
  if (!n.IsDefined()) return absl::OkStatus();
  const std::string text = n.IsScalar() ? n.Scalar() : "";
  if (text == "true" || text == "yes" || text == "on") {
    *out = true;
  } else if (text == "false" || text == "no" || text == "off") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: '%s' is not true or false", At(n, Path(where, key)), text));
  }
  return absl::OkStatus();
}

absl::Status OptionalImpairment(const YAML::Node& map, std::string_view key,
                                std::string_view where, transport::ImpairmentConfig* out) {
  std::string text;
  NETFOLD_RETURN_IF_ERROR(OptionalString(map, key, where, &text));
  absl::StatusOr<transport::ImpairmentConfig> c = transport::ParseImpairment(text);
  if (!c.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s", At(map[std::string(key)], Path(where, key)), c.status().message()));
  }
  *out = *c;
  return absl::OkStatus();
}

absl::Status ParseDpdk(const YAML::Node& node, DpdkBackendConfig* d) {
  NETFOLD_RETURN_IF_ERROR(CheckKeys(node,
                                    {"eal_args", "links", "prefix_length", "gateway", "mac",
                                     "busy_poll", "bridge", "mbufs_per_link", "mbuf_data_size"},
                                    "dpdk"));
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "eal_args", "dpdk", &d->eal_args));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "prefix_length", "dpdk", 32, &d->prefix_length));
  if (const YAML::Node g = node["gateway"]; g.IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(std::string text, ReadString(g, "dpdk.gateway"));
    absl::StatusOr<uint32_t> ip = transport::ParseIpv4Address(text);
    if (!text.empty() && !ip.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: '%s' is not an IPv4 address", At(g, "dpdk.gateway"), text));
    }
    d->gateway = text.empty() ? 0 : *ip;
  }
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "mac", "dpdk", &d->mac));
  NETFOLD_RETURN_IF_ERROR(OptionalBool(node, "busy_poll", "dpdk", &d->busy_poll));
  NETFOLD_RETURN_IF_ERROR(OptionalBool(node, "bridge", "dpdk", &d->bridge));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "mbufs_per_link", "dpdk", 1u << 20, &d->mbufs_per_link));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "mbuf_data_size", "dpdk", 65535, &d->mbuf_data_size));
  if (const YAML::Node links = node["links"]; links.IsDefined()) {
    if (!links.IsSequence()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: expected a list of {device, send_faults, receive_faults}", At(links, "dpdk.links")));
    }
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string w = absl::StrFormat("dpdk.links[%d]", i);
      NETFOLD_RETURN_IF_ERROR(CheckKeys(links[i], {"device", "send_faults", "receive_faults"}, w));
      DpdkLinkSpec link;
      NETFOLD_ASSIGN_OR_RETURN(link.device, ReadString(links[i]["device"], Path(w, "device")));
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
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "peer", where, &spec.peer));
  if (spec.peer != "default" && spec.peer != "all" &&
      !transport::ParseIpv4Endpoint(spec.peer).ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: '%s' is neither default, all nor an ip:port address", At(node["peer"], Path(where, "peer")),
        spec.peer));
  }
  std::string direction = "both";
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "direction", where, &direction));
  absl::StatusOr<transport::LinkDirection> d = transport::ParseLinkDirection(direction);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s", At(node["direction"], Path(where, "direction")), d.status().message()));
  }
  spec.direction = *d;
  std::string text;
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "impairment", where, &text));
  absl::StatusOr<transport::ImpairmentConfig> c = transport::ParseImpairment(text);
  if (!c.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s", At(node["impairment"], Path(where, "impairment")), c.status().message()));
  }
  spec.impairment = *c;
  return spec;
}

absl::StatusOr<QpRequest> ParseStaticQp(const YAML::Node& node, std::string_view where) {
  NETFOLD_RETURN_IF_ERROR(
      CheckKeys(node, {"qpn", "psn", "job", "pkey", "peer", "remote"}, where));
  QpRequest qp;
  NETFOLD_ASSIGN_OR_RETURN(uint64_t qpn, ReadUint(node["qpn"], Path(where, "qpn"), 0xfffffe));
  if (qpn < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: QPN %d is reserved (0 and 1 are special)", At(node["qpn"], Path(where, "qpn")), qpn));
  }
  qp.qpn = static_cast<uint32_t>(qpn);
  NETFOLD_ASSIGN_OR_RETURN(uint64_t psn, ReadUint(node["psn"], Path(where, "psn"), 0xffffff));
  qp.psn = static_cast<uint32_t>(psn);
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "job", where, UINT64_MAX, &qp.job_id));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "pkey", where, 0xffff, &qp.pkey));
  qp.peer = absl::StrFormat("static QP 0x%06x", *qp.qpn);
  NETFOLD_RETURN_IF_ERROR(OptionalString(node, "peer", where, &qp.peer));
  const YAML::Node remote = node["remote"];
  if (remote.IsDefined()) {
    const std::string rw = Path(where, "remote");
    NETFOLD_RETURN_IF_ERROR(CheckKeys(remote, {"address", "qpn", "psn"}, rw));
    NETFOLD_ASSIGN_OR_RETURN(qp.remote, ReadEndpoint(remote["address"], Path(rw, "address")));
    NETFOLD_ASSIGN_OR_RETURN(uint64_t rq, ReadUint(remote["qpn"], Path(rw, "qpn"), 0xfffffe));
    NETFOLD_ASSIGN_OR_RETURN(uint64_t rp, ReadUint(remote["psn"], Path(rw, "psn"), 0xffffff));
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
  NETFOLD_ASSIGN_OR_RETURN(uint64_t tree, ReadUint(node["tree"], Path(where, "tree"), 0xffff));
  NETFOLD_ASSIGN_OR_RETURN(uint64_t group,
                           ReadUint(node["group"], Path(where, "group"), 0xffffffffu));
  g.tree_id = static_cast<uint16_t>(tree);
  g.group_id = static_cast<uint32_t>(group);
  g.epoch = 1;
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "epoch", where, 0xffffffffu, &g.epoch));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "job", where, UINT64_MAX, &g.job_id));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "pkey", where, 0xffff, &g.pkey));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "qkey", where, 0xffffffffu, &g.qkey));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "num_slots", where, 1u << 16, &g.num_slots));
  NETFOLD_RETURN_IF_ERROR(OptionalUint(node, "slot_bytes", where, 1u << 20, &g.slot_bytes));
  if (node["multicast"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(g.multicast,
                             ReadEndpoint(node["multicast"], Path(where, "multicast")));
  }
  if (node["parent_qpn"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(uint64_t p,
                             ReadUint(node["parent_qpn"], Path(where, "parent_qpn"), 0xfffffe));
    g.parent_qpn = static_cast<uint32_t>(p);
  }
  const YAML::Node children = node["children"];
  const std::string cw = Path(where, "children");
  if (!children.IsDefined() || !children.IsSequence() || children.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected a non-empty list of {qpn, ranks}", At(children, cw)));
  }
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string w = absl::StrFormat("%s[%d]", cw, i);
    NETFOLD_RETURN_IF_ERROR(CheckKeys(children[i], {"qpn", "ranks"}, w));
    GroupChildSpec c;
    NETFOLD_ASSIGN_OR_RETURN(uint64_t qpn, ReadUint(children[i]["qpn"], Path(w, "qpn"), 0xfffffe));
    c.qpn = static_cast<uint32_t>(qpn);
    NETFOLD_ASSIGN_OR_RETURN(c.ranks,
                             ReadUintList(children[i]["ranks"], Path(w, "ranks"), 0xffffffffu));
    if (c.ranks.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: a child needs at least one rank", w));
    }
    g.children.push_back(std::move(c));
  }
  return g;
}

absl::StatusOr<SwitchdConfig> ParseUnchecked(std::string_view text, SwitchdConfig c) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("YAML syntax error: %s", e.what()));
  }
  if (root.IsNull()) return c;  // an empty file: the defaults
  NETFOLD_RETURN_IF_ERROR(CheckKeys(root,
                                    {"name", "data_address", "backend", "dpdk", "admin_address",
                                     "manager",
                                     "secret", "log_level", "data_port_file", "admin_port_file",
                                     "capacity", "job_quota", "transport", "link_faults", "static"},
                                    "config"));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "name", "", &c.name));
  if (root["data_address"].IsDefined()) {
    NETFOLD_ASSIGN_OR_RETURN(c.data_address, ReadEndpoint(root["data_address"], "data_address"));
  }
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "backend", "", &c.backend));
  if (const YAML::Node d = root["dpdk"]; d.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ParseDpdk(d, &c.dpdk));
  }
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "admin_address", "", &c.admin_address));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "manager", "", &c.manager_address));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "secret", "", &c.secret));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "log_level", "", &c.log_level));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "data_port_file", "", &c.data_port_file));
  NETFOLD_RETURN_IF_ERROR(OptionalString(root, "admin_port_file", "", &c.admin_port_file));

  if (const YAML::Node cap = root["capacity"]; cap.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(
        CheckKeys(cap, {"trees", "groups", "slots", "slot_bytes", "qps"}, "capacity"));
    SwitchConfig& d = c.data_plane;
    NETFOLD_RETURN_IF_ERROR(OptionalUint(cap, "trees", "capacity", 1u << 16, &c.max_trees));
    NETFOLD_RETURN_IF_ERROR(OptionalUint(cap, "groups", "capacity", 1u << 20, &d.max_groups));
    NETFOLD_RETURN_IF_ERROR(OptionalUint(cap, "slots", "capacity", 1u << 24, &d.max_slots));
    NETFOLD_RETURN_IF_ERROR(
        OptionalUint(cap, "slot_bytes", "capacity", 1u << 20, &d.max_slot_bytes));
    NETFOLD_RETURN_IF_ERROR(OptionalUint(cap, "qps", "capacity", 1u << 24, &d.max_qps));
  }
  if (const YAML::Node q = root["job_quota"]; q.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(ParseQuota(q, "job_quota", &c.data_plane.default_quota));
  }
  if (const YAML::Node t = root["transport"]; t.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(
        t, {"path_mtu", "ack_timeout_ms", "host_ack_timeout_ms", "ack_delay_us", "retry_count",
            "idle_wait_us", "poll_us", "packet_buffers", "ip_identification"},
        "transport"));
    NETFOLD_RETURN_IF_ERROR(OptionalUint(t, "path_mtu", "transport", 4096, &c.data_plane.path_mtu));
    if (t["ack_timeout_ms"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t ms,
                               ReadUint(t["ack_timeout_ms"], "transport.ack_timeout_ms", 60000));
      c.data_plane.ack_timeout = absl::Milliseconds(static_cast<int64_t>(ms));
    }
    if (t["host_ack_timeout_ms"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(
          uint64_t ms, ReadUint(t["host_ack_timeout_ms"], "transport.host_ack_timeout_ms", 60000));
      c.data_plane.host_ack_timeout = absl::Milliseconds(static_cast<int64_t>(ms));
    }
    if (t["ack_delay_us"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t us,
                               ReadUint(t["ack_delay_us"], "transport.ack_delay_us", 1000));
      c.data_plane.ack_delay = absl::Microseconds(static_cast<int64_t>(us));
    }
    NETFOLD_RETURN_IF_ERROR(
        OptionalUint(t, "retry_count", "transport", 7, &c.data_plane.retry_count));
    if (t["idle_wait_us"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t us,
                               ReadUint(t["idle_wait_us"], "transport.idle_wait_us", 1000000));
      c.idle_wait = absl::Microseconds(static_cast<int64_t>(us));
    }
    if (t["poll_us"].IsDefined()) {
      NETFOLD_ASSIGN_OR_RETURN(uint64_t us, ReadUint(t["poll_us"], "transport.poll_us", 1000000));
      c.poll_window = absl::Microseconds(static_cast<int64_t>(us));
    }
    NETFOLD_RETURN_IF_ERROR(
        OptionalUint(t, "packet_buffers", "transport", 1u << 20, &c.packet_buffers));
    if (const YAML::Node id = t["ip_identification"]; id.IsDefined()) {
      const std::string v = id.IsScalar() ? id.as<std::string>() : "";
      if (v != "zero" && v != "solve") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: transport.ip_identification must be zero or solve", At(id, "transport")));
      }
      c.data_plane.solve_ip_identification = v == "solve";
    }
  }
  if (const YAML::Node lf = root["link_faults"]; lf.IsDefined()) {
    if (!lf.IsSequence()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: expected a list of {peer, direction, impairment}",
                          At(lf, "link_faults")));
    }
    for (size_t i = 0; i < lf.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(LinkFaultSpec spec,
                               ParseLinkFault(lf[i], absl::StrFormat("link_faults[%d]", i)));
      c.link_faults.push_back(spec);
    }
  }
  if (const YAML::Node st = root["static"]; st.IsDefined()) {
    NETFOLD_RETURN_IF_ERROR(CheckKeys(st, {"jobs", "qps", "groups"}, "static"));
    auto list = [&](const char* key) -> absl::StatusOr<YAML::Node> {
      const YAML::Node n = st[key];
      if (n.IsDefined() && !n.IsSequence()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: expected a list", At(n, Path("static", key))));
      }
      return n;
    };
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node jobs, list("jobs"));
    for (size_t i = 0; jobs.IsDefined() && i < jobs.size(); ++i) {
      const std::string w = absl::StrFormat("static.jobs[%d]", i);
      NETFOLD_RETURN_IF_ERROR(CheckKeys(jobs[i], {"id", "quota"}, w));
      NETFOLD_ASSIGN_OR_RETURN(uint64_t id, ReadUint(jobs[i]["id"], Path(w, "id"), UINT64_MAX));
      JobQuota quota = c.data_plane.default_quota;
      if (jobs[i]["quota"].IsDefined()) {
        NETFOLD_RETURN_IF_ERROR(ParseQuota(jobs[i]["quota"], Path(w, "quota"), &quota));
      }
      c.static_job_quotas.emplace_back(id, quota);
    }
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node qps, list("qps"));
    for (size_t i = 0; qps.IsDefined() && i < qps.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(QpRequest qp,
                               ParseStaticQp(qps[i], absl::StrFormat("static.qps[%d]", i)));
      c.static_qps.push_back(std::move(qp));
    }
    NETFOLD_ASSIGN_OR_RETURN(YAML::Node groups, list("groups"));
    for (size_t i = 0; groups.IsDefined() && i < groups.size(); ++i) {
      NETFOLD_ASSIGN_OR_RETURN(
          GroupSpec g, ParseStaticGroup(groups[i], absl::StrFormat("static.groups[%d]", i)));
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
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno != 0 ? errno : ENOENT, absl::StrFormat("open %s", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<SwitchdConfig> c = ParseSwitchdConfig(buf.str());
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrFormat("%s: %s", path, c.status().message()));
  }
  return c;
}

absl::Status ValidateSwitchdConfig(const SwitchdConfig& c) {
  auto invalid = [](std::string msg) { return absl::InvalidArgumentError(std::move(msg)); };
  if (!ValidName(c.name)) {
    return invalid(absl::StrFormat(
        "name '%s': give the switch a name of 1..64 characters [A-Za-z0-9._-] (--name or name:)",
        c.name));
  }
  if (c.data_address.ip == 0 || c.data_address.IsMulticast()) {
    return invalid(absl::StrFormat(
        "data_address %s: needs one unicast IPv4 address (the ICRC covers it), not 0.0.0.0 or a "
        "multicast group",
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
  if (c.idle_wait < absl::ZeroDuration()) return invalid("transport.idle_wait_us must not be negative");
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
