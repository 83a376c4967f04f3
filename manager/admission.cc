#include "manager/admission.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "manager/endpoint_address.h"
#include "proto/aggregation_tag.h"
#include "proto/slot_size.h"
#include "auth/secrets.h"

namespace netfold::manager {

using auth::ConstantTimeEquals;

namespace {

constexpr uint32_t kMax24 = 0xFFFFFF;

absl::Status UnsupportedVersion(uint32_t version) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "protocol version %d is not supported (this manager speaks %d)", version, kProtocolVersion));
}

// A request over a quota or a policy limit.
Shortfall QuotaShortfall(std::string reason, uint64_t needed, uint64_t limit) {
  Shortfall s;
  s.resource = "quota";
  s.needed = needed;
  s.free = limit;
  s.capacity = limit;
  s.reason = std::move(reason);
  return s;
}

}  // namespace

absl::Status ValidateRegistration(const Topology& topo, const ManagerOptions& /*options*/,
                                  const control::RegisterSwitch& req) {
  if (req.protocol_version() != kProtocolVersion) {
    return UnsupportedVersion(req.protocol_version());
  }
  const int sw = topo.FindSwitch(req.name());
  if (sw < 0) {
    return absl::NotFoundError(absl::StrFormat("switch '%s' is not in topology '%s'",
                                               req.name().substr(0, 64), topo.name()));
  }
  NETFOLD_RETURN_IF_ERROR(CheckDataEndpoint(
      req.data_address(), absl::StrFormat("switch %s data_address", req.name())));
  if (!req.admin_address().empty()) {
    NETFOLD_RETURN_IF_ERROR(CheckEndpointAddress(
        req.admin_address(), absl::StrFormat("switch %s admin_address", req.name())));
  }
  const Capacity& want = topo.switch_at(sw).capacity;
  const control::SwitchCapacity& have = req.capacity();
  struct Cmp {
    const char* what;
    uint32_t have, want;
  };
  for (Cmp c :
       {Cmp{"trees", have.max_trees(), want.trees}, Cmp{"groups", have.max_groups(), want.groups},
        Cmp{"slots", have.num_slots(), want.slots},
        Cmp{"slot_bytes", have.slot_bytes(), want.slot_bytes},
        Cmp{"qps", have.max_qps(), want.qps}}) {
    if (c.have < c.want) {
      return absl::FailedPreconditionError(
          absl::StrFormat("switch %s offers %s=%d but topology '%s' declares %d", req.name(),
                          c.what, c.have, topo.name(), c.want));
    }
  }
  if (req.qpns_size() > 1 << 20 || req.installed_groups_size() > 1 << 20) {
    return absl::InvalidArgumentError("registration reports too much state");
  }
  return absl::OkStatus();
}

absl::StatusOr<Job*> AuthenticateJob(std::map<uint64_t, Job>& jobs,
                                     const control::JobCredentials& creds) {
  if (creds.job_key().empty()) {
    return absl::UnauthenticatedError("missing job key (JobCredentials.job_key)");
  }
  auto it = jobs.find(creds.job_id());
  if (it == jobs.end() || !ConstantTimeEquals(creds.job_key(), it->second.key)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("job %d: unknown job or wrong job key", creds.job_id()));
  }
  return &it->second;
}

absl::Status CheckJobRequest(const FabricState& state, const control::CreateJobRequest& req,
                             control::JobQuota* quota,
                             std::vector<std::pair<int, uint32_t>>* qps_per_leaf,
                             std::vector<Shortfall>* shortfalls) {
  const Topology& topo = state.topo;
  if (req.protocol_version() != kProtocolVersion) {
    return UnsupportedVersion(req.protocol_version());
  }
  if (!req.name().empty() && !IsValidName(req.name())) {
    return absl::InvalidArgumentError("job name must be 1..64 of [A-Za-z0-9._-]");
  }
  const JobLimits& lim = state.options.limits;
  const int n = req.ranks_size();
  if (n == 0) return absl::InvalidArgumentError("a job needs at least one rank");
  if (static_cast<uint32_t>(n) > lim.max_ranks_per_job) {
    shortfalls->push_back(QuotaShortfall(
        absl::StrFormat("%d ranks exceed the per-job limit of %d", n, lim.max_ranks_per_job), n,
        lim.max_ranks_per_job));
    return absl::OkStatus();
  }
  std::vector<bool> seen(n, false);
  std::map<int, uint32_t> per_leaf;
  std::map<int, uint32_t> first_rank_on;
  for (const control::RankSpec& r : req.ranks()) {
    if (r.rank() >= static_cast<uint32_t>(n)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rank %d is out of range: a job of %d ranks has ranks 0..%d", r.rank(), n, n - 1));
    }
    if (seen[r.rank()]) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is listed twice", r.rank()));
    }
    seen[r.rank()] = true;
    int host = topo.FindHost(r.host());
    if (host < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank %d: host '%s' is not in topology '%s'", r.rank(),
                          r.host().substr(0, 64), topo.name()));
    }
    int leaf = topo.host_at(host).switch_index;
    per_leaf[leaf] += 1;
    first_rank_on.emplace(leaf, r.rank());
  }

  *quota = req.quota();
  if (quota->max_groups() == 0) {
    // Channels spend the quota a group per plane per communicator: the
    // default once per channel, so that as many communicators are offloaded
    // as without (docs/manager.md, "Allocation and explanations").
    const uint64_t channels = std::clamp<uint32_t>(req.channels(), 1, topo.planes());
    quota->set_max_groups(static_cast<uint32_t>(std::min<uint64_t>(
        uint64_t{lim.default_groups_per_job} * channels, lim.max_groups_per_job)));
  }
  // Left to the manager: the default window, within what the switches hold.
  const DefaultWindow window = DefaultWindowFor(lim, topo);
  if (quota->num_slots() == 0) quota->set_num_slots(window.num_slots);
  if (quota->slot_bytes() == 0) quota->set_slot_bytes(window.slot_bytes);
  if (quota->slot_bytes() % proto::kSlotAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slot_bytes %d is not a multiple of %d (a slot holds whole elements of every data type)",
        quota->slot_bytes(), proto::kSlotAlignment));
  }
  if (quota->max_groups() > lim.max_groups_per_job) {
    shortfalls->push_back(
        QuotaShortfall(absl::StrFormat("max_groups %d exceeds the per-job limit of %d",
                                       quota->max_groups(), lim.max_groups_per_job),
                       quota->max_groups(), lim.max_groups_per_job));
  }
  if (quota->num_slots() > lim.max_slots_per_group) {
    shortfalls->push_back(
        QuotaShortfall(absl::StrFormat("num_slots %d exceeds the per-group limit of %d",
                                       quota->num_slots(), lim.max_slots_per_group),
                       quota->num_slots(), lim.max_slots_per_group));
  }
  if (quota->slot_bytes() > lim.max_slot_bytes) {
    shortfalls->push_back(QuotaShortfall(absl::StrFormat("slot_bytes %d exceeds the limit of %d",
                                                         quota->slot_bytes(), lim.max_slot_bytes),
                                         quota->slot_bytes(), lim.max_slot_bytes));
  }
  if (state.jobs.size() >= lim.max_jobs) {
    shortfalls->push_back(QuotaShortfall(
        absl::StrFormat("the manager already runs %d jobs (its limit)", state.jobs.size()), 1, 0));
  }

  for (const auto& [leaf_index, count] : per_leaf) {
    // A copy: clang 14 cannot capture a structured binding in a lambda.
    const auto leaf = leaf_index;
    const SwitchSpec& spec = topo.switch_at(leaf);
    auto add = [&](std::string resource, uint64_t needed, uint64_t free, uint64_t cap,
                   std::string reason) {
      Shortfall s;
      s.switch_index = leaf;
      s.switch_name = spec.name;
      s.resource = std::move(resource);
      s.needed = needed;
      s.free = free;
      s.capacity = cap;
      s.reason = std::move(reason);
      shortfalls->push_back(std::move(s));
    };
    if (!state.alloc.SwitchUsable(leaf)) {
      const Switch& s = state.switches[leaf];
      add("switch", 1, 0, 1,
          absl::StrFormat("switch %s (leaf of rank %d) is unusable: %s", spec.name,
                          first_rank_on[leaf],
                          s.state == SwitchState::kDead          ? "dead: " + s.dead_reason
                          : s.state == SwitchState::kReconciling ? std::string("reconciling")
                                                                 : std::string("not registered")));
      continue;
    }
    if (quota->slot_bytes() > spec.capacity.slot_bytes) {
      add("slot_bytes", quota->slot_bytes(), spec.capacity.slot_bytes, spec.capacity.slot_bytes,
          absl::StrFormat("switch %s holds at most %d bytes per slot, the job asks %d", spec.name,
                          spec.capacity.slot_bytes, quota->slot_bytes()));
    }
    if (quota->num_slots() > spec.capacity.slots) {
      add("slots", quota->num_slots(), spec.capacity.slots, spec.capacity.slots,
          absl::StrFormat("switch %s has %d slots in all, the job asks %d per group", spec.name,
                          spec.capacity.slots, quota->num_slots()));
    }
    const uint32_t used = state.alloc.used(leaf).qps;
    const uint32_t free = spec.capacity.qps - std::min(spec.capacity.qps, used);
    if (count > free) {
      add("qps", count, free, spec.capacity.qps,
          absl::StrFormat("switch %s has %d of %d QPs free, needs %d for this job's ranks",
                          spec.name, free, spec.capacity.qps, count));
    }
    qps_per_leaf->emplace_back(leaf, count);
  }
  return absl::OkStatus();
}

absl::Status CheckGroupRequest(const Job& job, const std::vector<uint32_t>& ranks,
                               uint32_t num_slots, uint32_t slot_bytes, GroupRequest* out,
                               std::vector<Shortfall>* shortfalls, uint32_t plane) {
  if (ranks.empty()) return absl::InvalidArgumentError("a group needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!job.ranks.count(ranks[i])) {
      return absl::InvalidArgumentError(absl::StrFormat("job %d has no rank %d", job.id, ranks[i]));
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is listed twice", ranks[i]));
    }
  }
  out->num_slots = num_slots == 0 ? job.quota.num_slots() : num_slots;
  out->slot_bytes = slot_bytes == 0 ? job.quota.slot_bytes() : slot_bytes;
  if (out->slot_bytes % proto::kSlotAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slot_bytes %d is not a multiple of %d (a slot holds whole elements of every data type)",
        out->slot_bytes, proto::kSlotAlignment));
  }
  if (out->num_slots > job.quota.num_slots()) {
    shortfalls->push_back(
        QuotaShortfall(absl::StrFormat("K=%d slots exceeds job %d's quota of %d per group",
                                       out->num_slots, job.id, job.quota.num_slots()),
                       out->num_slots, job.quota.num_slots()));
  }
  if (out->slot_bytes > job.quota.slot_bytes()) {
    shortfalls->push_back(
        QuotaShortfall(absl::StrFormat("P=%d bytes exceeds job %d's quota of %d per slot",
                                       out->slot_bytes, job.id, job.quota.slot_bytes()),
                       out->slot_bytes, job.quota.slot_bytes()));
  }
  if (job.groups.size() >= job.quota.max_groups()) {
    shortfalls->push_back(
        QuotaShortfall(absl::StrFormat("job %d has %d of %d groups (its quota)", job.id,
                                       job.groups.size(), job.quota.max_groups()),
                       1, 0));
  }
  out->members.clear();
  out->plane = plane;
  for (uint32_t r : ranks) {
    const LeafAttachment* a = job.ranks.at(r).In(plane);
    if (a == nullptr || !a->attached) {
      return absl::FailedPreconditionError(
          plane == 0
              ? absl::StrFormat("rank %d of job %d is not attached (call Attach first)", r, job.id)
              : absl::StrFormat("rank %d of job %d is not attached in plane %d (call Attach "
                                "with plane %d first)",
                                r, job.id, plane, plane));
    }
    out->members.emplace_back(r, a->leaf);
  }
  return absl::OkStatus();
}

absl::Status CheckRankEndpoint(uint32_t rank, const control::Endpoint& ep) {
  NETFOLD_RETURN_IF_ERROR(
      CheckDataEndpoint(ep.address(), absl::StrFormat("rank %d endpoint address", rank)));
  if (ep.qpn() < 2 || ep.qpn() > kMax24) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d: QPN %d is out of range (2..0xffffff)", rank, ep.qpn()));
  }
  if (ep.psn() > kMax24) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d: PSN %d does not fit 24 bits", rank, ep.psn()));
  }
  return absl::OkStatus();
}

std::string IntegrityKeyFor(const control::CreateJobRequest& request,
                            const ManagerOptions& options) {
  if (!request.integrity() && !options.require_integrity) return "";
  return proto::AggregationKeyBytes(proto::NewAggregationKey());
}

}  // namespace netfold::manager
