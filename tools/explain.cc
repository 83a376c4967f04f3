#include "tools/explain.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace netfold::tools {
namespace {

absl::Status Number(const std::map<std::string, std::string>& values, const std::string& key,
                    uint32_t* out) {
  auto it = values.find(key);
  if (it == values.end()) return absl::OkStatus();
  if (!absl::SimpleAtoi(it->second, out)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s '%s': give a non-negative number", key, it->second));
  }
  return absl::OkStatus();
}

// "0,1,2" or "0-3,6" (ranges inclusive).
absl::Status RankList(const std::string& text, std::vector<uint32_t>* out) {
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    uint32_t first = 0, last = 0;
    if (!absl::SimpleAtoi(ends[0], &first) ||
        (ends.size() == 2 ? !absl::SimpleAtoi(ends[1], &last) : (last = first, false)) ||
        last < first || last - first >= (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--ranks '%s': give ranks and ranges separated by commas, e.g. 0,1,4-7", text));
    }
    for (uint32_t r = first;; ++r) {
      out->push_back(r);
      if (r == last) break;
    }
  }
  return absl::OkStatus();
}

std::string Ranks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
  std::string out;
  for (int i = 0; i < ranks.size(); ++i) {
    // Consecutive runs as ranges: 0-7,9.
    int j = i;
    while (j + 1 < ranks.size() && ranks.Get(j + 1) == ranks.Get(j) + 1) ++j;
    out += absl::StrFormat("%s%d", out.empty() ? "" : ",", ranks.Get(i));
    if (j > i) out += absl::StrFormat("-%d", ranks.Get(j));
    i = j;
  }
  return out;
}

std::string OrDefault(uint32_t v, const char* what) {
  return v == 0 ? absl::StrFormat("%s", what) : absl::StrFormat("%d", v);
}

}  // namespace

absl::StatusOr<ExplainOptions> ParseExplainOptions(
    const std::map<std::string, std::string>& values) {
  ExplainOptions o;
  if (auto it = values.find("job"); it != values.end()) {
    uint64_t id = 0;
    if (!absl::SimpleAtoi(it->second, &id) || id == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--job '%s': give a job id (netfold status lists them)", it->second));
    }
    o.job_id = id;
  }
  if (auto it = values.find("ranks"); it != values.end()) {
    if (absl::Status s = RankList(it->second, &o.ranks); !s.ok()) return s;
  }
  if (auto it = values.find("hosts"); it != values.end()) {
    for (absl::string_view h : absl::StrSplit(it->second, ',', absl::SkipEmpty())) {
      o.hosts.emplace_back(h);
    }
    if (o.hosts.empty()) return absl::InvalidArgumentError("--hosts: give host names, e.g. h0,h1");
  }
  for (const auto& [key, field] : {std::pair<const char*, uint32_t*>{"slots", &o.num_slots},
                                   {"slot-bytes", &o.slot_bytes},
                                   {"groups", &o.max_groups},
                                   {"channels", &o.channels},
                                   {"plane", &o.plane}}) {
    if (absl::Status s = Number(values, key, field); !s.ok()) return s;
  }
  if (o.job_id.has_value() == !o.hosts.empty()) {
    return absl::InvalidArgumentError(
        "say what to explain: --job ID (a group of a running job) or --hosts H0,H1,... (a new "
        "job)");
  }
  if (!o.job_id && o.plane != 0) {
    return absl::InvalidArgumentError("--plane is where a group goes: use it with --job");
  }
  if (o.job_id && (o.max_groups != 0 || o.channels != 0)) {
    return absl::InvalidArgumentError(
        "--groups and --channels are a new job's: use them with --hosts");
  }
  if (!o.hosts.empty() && !o.ranks.empty()) {
    return absl::InvalidArgumentError("--ranks names a group's members: use it with --job");
  }
  return o;
}

absl::StatusOr<control::ExplainRequest> BuildExplainRequest(
    const ExplainOptions& o, const control::GetStatusResponse& status) {
  control::ExplainRequest req;
  if (!o.hosts.empty()) {
    control::CreateJobRequest* job = req.mutable_job();
    job->set_protocol_version(control::PROTOCOL_VERSION_CURRENT);
    job->set_name("explain");
    for (size_t r = 0; r < o.hosts.size(); ++r) {
      control::RankSpec* rank = job->add_ranks();
      rank->set_rank(static_cast<uint32_t>(r));
      rank->set_host(o.hosts[r]);
    }
    job->mutable_quota()->set_max_groups(o.max_groups);
    job->set_channels(o.channels);
    job->mutable_quota()->set_num_slots(o.num_slots);
    job->mutable_quota()->set_slot_bytes(o.slot_bytes);
    return req;
  }
  control::ExplainGroup* group = req.mutable_group();
  group->set_job_id(*o.job_id);
  group->set_num_slots(o.num_slots);
  group->set_slot_bytes(o.slot_bytes);
  group->set_plane(o.plane);
  if (!o.ranks.empty()) {
    for (uint32_t r : o.ranks) group->add_ranks(r);
    return req;
  }
  std::string ids;
  for (const control::JobStatus& j : status.jobs()) {
    if (j.job_id() == *o.job_id) {
      for (uint32_t r = 0; r < j.num_ranks(); ++r) group->add_ranks(r);
      return req;
    }
    ids += absl::StrFormat("%s%d", ids.empty() ? "" : ", ", j.job_id());
  }
  return absl::NotFoundError(absl::StrFormat("the manager has no job %d (jobs: %s)", *o.job_id,
                                             ids.empty() ? "none" : ids));
}

std::string FormatExplain(const control::ExplainRequest& req,
                          const control::ExplainResponse& resp) {
  std::string out;
  if (req.has_job()) {
    const control::CreateJobRequest& j = req.job();
    out += absl::StrFormat("a new job of %d rank%s (%s groups, K %s, P %s):\n", j.ranks_size(),
                           j.ranks_size() == 1 ? "" : "s",
                           OrDefault(j.quota().max_groups(), "default"),
                           OrDefault(j.quota().num_slots(), "default"),
                           OrDefault(j.quota().slot_bytes(), "default"));
  } else {
    const control::ExplainGroup& g = req.group();
    out += absl::StrFormat("a group of job %d, ranks %s (K %s, P %s):\n", g.job_id(),
                           Ranks(g.ranks()), OrDefault(g.num_slots(), "of the quota"),
                           OrDefault(g.slot_bytes(), "of the quota"));
  }
  if (resp.fits()) {
    out += absl::StrFormat("  fits: %s\n", resp.summary());
    return out;
  }
  out += "  does not fit:\n";
  for (const control::Shortfall& s : resp.shortfalls()) {
    std::string where;
    if (s.tree_id() >= 0) where += absl::StrFormat("tree %d, ", s.tree_id());
    if (!s.switch_name().empty()) where += absl::StrFormat("switch %s, ", s.switch_name());
    std::string numbers;
    // A switch's resource with its figures; a quota's are in its reason.
    if (!s.switch_name().empty() && s.capacity() != 0) {
      numbers = absl::StrFormat(" (needs %d, %d free of %d)", s.needed(), s.free(), s.capacity());
    }
    out += absl::StrFormat("  - %s%s: %s%s\n", where, s.resource(), s.reason(), numbers);
  }
  if (resp.shortfalls_size() == 0) out += absl::StrFormat("  - %s\n", resp.summary());
  return out;
}

}  // namespace netfold::tools
