// `netfold explain`: asks the manager (Admin.Explain, docs/control_plane.md)
// why a group of a running job, or a job not yet created, would not fit
// right now, and renders its answer. Nothing is reserved.
//
//   absl::StatusOr<ExplainOptions> o = ParseExplainOptions(values);  // --job 3 --ranks 0,1
//   absl::StatusOr<control::ExplainRequest> req = BuildExplainRequest(*o, status);
//   std::cout << FormatExplain(*req, answer);
//
// Pure functions; thread-safe.
#ifndef NETFOLD_TOOLS_EXPLAIN_H_
#define NETFOLD_TOOLS_EXPLAIN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control/netfold_control.pb.h"

namespace netfold::tools {

// What to explain: a group of job `job_id` (ranks: `ranks`, or every rank of
// the job when empty), or a job with one rank on each of `hosts`.
struct ExplainOptions {
  std::optional<uint64_t> job_id;  // --job ID
  std::vector<uint32_t> ranks;     // --ranks 0,1,2 (a group)
  std::vector<std::string> hosts;  // --hosts h0,h1 (a job)
  uint32_t num_slots = 0;          // --slots K (0: the job's quota / the manager's default)
  uint32_t slot_bytes = 0;         // --slot-bytes P (0: likewise)
  uint32_t max_groups = 0;         // --groups G (a job's quota; 0: the manager's default)
  uint32_t channels = 0;           // --channels N (a job's NETFOLD_CHANNELS; 0: one)
  uint32_t plane = 0;              // --plane P (a group's data plane)
};

// From the command's --key -> value map ("job", "ranks", "hosts", "slots",
// "slot-bytes", "groups", "channels", "plane"). INVALID_ARGUMENT, with a sentence, for a value
// that does not parse or a combination that makes no sense.
absl::StatusOr<ExplainOptions> ParseExplainOptions(
    const std::map<std::string, std::string>& values);

// The request for `options`; `status` (Admin.GetStatus) supplies a job's
// ranks when none are given. NOT_FOUND if the manager has no such job.
absl::StatusOr<control::ExplainRequest> BuildExplainRequest(
    const ExplainOptions& options, const control::GetStatusResponse& status);

// What was asked and the manager's answer, one shortfall a line.
std::string FormatExplain(const control::ExplainRequest& request,
                          const control::ExplainResponse& response);

}  // namespace netfold::tools

#endif  // NETFOLD_TOOLS_EXPLAIN_H_
