#include "tools/status_text.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace netfold::tools {
namespace {

// Left-aligned columns sized to their widest cell.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size(); ++i) {
      line += " " + row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size(), ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string UsedOf(uint32_t used, uint32_t capacity) {
  return absl::StrFormat("%d/%d (%d free)", used, capacity, capacity - std::min(used, capacity));
}

std::string Ranks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
  std::string out;
  for (int i = 0; i < ranks.size(); ++i) {
    if (i == 12) return out + absl::StrFormat(",... (%d)", ranks.size());
    out += absl::StrFormat("%s%d", i == 0 ? "" : ",", ranks.Get(i));
  }
  return out;
}

// "1 damaged record", "2 damaged records".
std::string Count(uint64_t n, const char* what) {
  return absl::StrFormat("%d %s%s", n, what, n == 1 ? "" : "s");
}

// One line about the state directory, then a warning line for each thing an
// operator should act on: damage found at start, appends refused now.
std::string StateLines(const control::StateStatus& st) {
  if (!st.journaled()) return "state: not journaled (no --state_dir)\n";
  std::string line = absl::StrFormat("state: %s journaled, %s replayed", st.state_dir(),
                                     Count(st.records_replayed(), "record"));
  if (st.damaged_records_skipped() > 0) {
    line += ", " + Count(st.damaged_records_skipped(), "damaged record") + " skipped";
  }
  if (st.torn_bytes_dropped() > 0) {
    line += absl::StrFormat(", torn tail of %d B dropped", st.torn_bytes_dropped());
  }
  if (!st.saved_copies().empty()) {
    line += st.saved_copies_size() == 1 ? " (copy kept: " : " (copies kept: ";
    for (int i = 0; i < st.saved_copies_size(); ++i) {
      line += (i == 0 ? "" : ", ") + st.saved_copies(i);
    }
    line += ")";
  }
  if (st.failed_appends() > 0) {
    line += ", " + Count(st.failed_appends(), "append") + " failed since start";
  }
  std::string out = line + "\n";
  if (st.damaged_records_skipped() > 0) {
    out += absl::StrFormat(
        "WARNING: %s skipped at start: damaged on disk; the manager's log names each one and "
        "whether a later record replaced it (docs/manager.md, \"Durability\")\n",
        Count(st.damaged_records_skipped(), "damaged record"));
  }
  if (st.torn_bytes_dropped() > 0) {
    out += absl::StrFormat(
        "WARNING: a torn last record (%d B) dropped at start: an append cut short by a crash, "
        "never acknowledged\n",
        st.torn_bytes_dropped());
  }
  if (st.appends_refused()) {
    out += absl::StrFormat(
        "WARNING: the journal refuses appends, so every change fails, until a snapshot succeeds "
        "or the manager restarts: %s\n",
        st.refused_reason().empty() ? "no reason given" : st.refused_reason());
  }
  return out;
}

}  // namespace

std::string SwitchStateName(control::SwitchStatus::State state) {
  switch (state) {
    case control::SwitchStatus::UNKNOWN:
      return "unknown";
    case control::SwitchStatus::RECONCILING:
      return "reconciling";
    case control::SwitchStatus::UP:
      return "up";
    case control::SwitchStatus::DEAD:
      return "dead";
    default:
      return "?";
  }
}

std::string FormatStatus(const control::GetStatusResponse& st) {
  std::string out = absl::StrFormat("manager %016x, topology %s\n", st.manager_incarnation(),
                                    st.topology_name()) +
                    // A manager older than the field says nothing about its state.
                    (st.has_state() ? StateLines(st.state()) : "") + "\n";
  std::vector<std::vector<std::string>> rows = {
      {"SWITCH", "TIER", "STATE", "HEARTBEAT", "GROUPS", "SLOTS", "QPS", "P", "TREES", "ADDRESS"}};
  for (const auto& s : st.switches()) {
    rows.push_back(
        {s.name(), absl::StrFormat("%d", s.tier()), SwitchStateName(s.state()),
         s.last_heartbeat_ms_ago() < 0 ? "never"
                                       : absl::StrFormat("%dms ago", s.last_heartbeat_ms_ago()),
         UsedOf(s.used().groups(), s.capacity().max_groups()),
         UsedOf(s.used().slots(), s.capacity().num_slots()),
         UsedOf(s.used().qps(), s.capacity().max_qps()),
         absl::StrFormat("%d", s.capacity().slot_bytes()), absl::StrFormat("%d", s.num_trees()),
         s.data_address().empty() ? "-" : s.data_address()});
  }
  out += Table(rows) + "\n";

  rows = {{"TREE", "ROOT", "SWITCHES", "GROUPS", "LINKS"}};
  for (const auto& t : st.trees()) {
    int connected = 0, down = 0;
    for (const auto& e : t.edges()) {
      connected += e.connected() ? 1 : 0;
      down += e.down() ? 1 : 0;
    }
    rows.push_back({absl::StrFormat("%d", t.tree_id()), t.root(),
                    absl::StrFormat("%d", t.switches_size()), absl::StrFormat("%d", t.num_groups()),
                    absl::StrFormat("%d/%d connected%s", connected, t.edges_size(),
                                    down > 0 ? absl::StrFormat(", %d down", down) : "")});
  }
  out += Table(rows) + "\n";

  if (st.jobs().empty()) {
    out += "  no jobs\n";
  } else {
    rows = {{"JOB", "NAME", "RANKS", "ATTACHED", "GROUPS", "QUOTA (groups x K x P)", "P_KEY"}};
    for (const auto& j : st.jobs()) {
      rows.push_back({absl::StrFormat("%d", j.job_id()), j.name(),
                      absl::StrFormat("%d", j.num_ranks()), absl::StrFormat("%d", j.num_attached()),
                      absl::StrFormat("%d", j.num_groups()),
                      absl::StrFormat("%d x %d x %d B", j.quota().max_groups(),
                                      j.quota().num_slots(), j.quota().slot_bytes()),
                      absl::StrFormat("0x%04x", j.pkey())});
    }
    out += Table(rows);
  }
  out += "\n";
  if (st.groups().empty()) {
    out += "  no groups\n";
  } else {
    rows = {{"GROUP", "JOB", "TREE", "EPOCH", "ROOT", "K x P", "RANKS", "SWITCHES"}};
    for (const auto& g : st.groups()) {
      std::string switches;
      for (int i = 0; i < g.switches_size(); ++i) {
        switches += (i == 0 ? "" : ",") + g.switches(i);
      }
      rows.push_back({absl::StrFormat("%d", g.group_id()), absl::StrFormat("%d", g.job_id()),
                      absl::StrFormat("%d", g.tree_id()), absl::StrFormat("%d", g.epoch()),
                      g.root_switch(), absl::StrFormat("%d x %d", g.num_slots(), g.slot_bytes()),
                      Ranks(g.ranks()), switches});
    }
    out += Table(rows);
  }
  return out;
}

namespace {

bool AnyNonZero(const google::protobuf::RepeatedPtrField<control::NamedCount>& counts) {
  for (const control::NamedCount& c : counts) {
    if (c.count() != 0) return true;
  }
  return false;
}

// "<prefix>name=count" for every non-zero count of `counts`, onto `out`.
void AppendNonZero(const google::protobuf::RepeatedPtrField<control::NamedCount>& counts,
                   std::string_view prefix, std::vector<std::string>* out) {
  for (const control::NamedCount& c : counts) {
    if (c.count() != 0) out->push_back(absl::StrFormat("%s%s=%d", prefix, c.name(), c.count()));
  }
}

// " name=count" for every non-zero count, " none" if there is none.
std::string Counts(const google::protobuf::RepeatedPtrField<control::NamedCount>& counts) {
  std::vector<std::string> named;
  AppendNonZero(counts, "", &named);
  return named.empty() ? " none" : " " + absl::StrJoin(named, " ");
}

// "sent N (N retransmitted), received N, timeouts N", then how many of
// the timeouts were spurious, NAKs and drops (out of sequence, duplicate,
// ...) only when there are any: what an operator chasing retransmissions
// looks for.
std::string QpCounts(const control::QpCounters& q) {
  std::string out = absl::StrFormat("sent %d (%d retransmitted), received %d, timeouts %d",
                                    q.packets_sent(), q.packets_retransmitted(),
                                    q.packets_received(), q.timeouts());
  if (q.spurious_timeouts() != 0) {
    out += absl::StrFormat(" (%d spurious)", q.spurious_timeouts());
  }
  if (q.naks_sent() != 0 || q.naks_received() != 0) {
    out += absl::StrFormat(", NAKs sent %d received %d", q.naks_sent(), q.naks_received());
  }
  if (AnyNonZero(q.drops())) out += "; drops:" + Counts(q.drops());
  return out;
}

}  // namespace

std::string FormatSwitchCounters(const control::GetCountersResponse& r, const std::string& admin) {
  std::string out;
  absl::StrAppendFormat(&out, "switch %s: data %s (%s), admin %s, up %.1f s, incarnation %d\n", r.name(),
              r.data_address(), r.backend(), admin,
              static_cast<double>(r.uptime_ms()) / 1000.0, r.incarnation());
  // How many packets the kernel handled a batch at a time (UDP GRO and GSO):
  // none on a busy udp port means the batching did not engage.
  std::vector<std::string> rx_notes;
  if (r.port().rx_batched() != 0) {
    rx_notes.push_back(absl::StrFormat("%d in batches", r.port().rx_batched()));
  }
  if (r.port().rx_batch_copied() != 0) {
    rx_notes.push_back(absl::StrFormat("%d copied out of their batch", r.port().rx_batch_copied()));
  }
  const std::string rx_batches =
      rx_notes.empty() ? std::string() : absl::StrFormat(" (%s)", absl::StrJoin(rx_notes, ", "));
  const std::string tx_batches =
      r.port().tx_batched() == 0 ? std::string()
                                 : absl::StrFormat(" (%d in batches)", r.port().tx_batched());
  // Looks at the port that found nothing: system calls that did no work.
  const std::string empty_reads =
      r.port().rx_empty_reads() == 0
          ? std::string()
          : absl::StrFormat("; %d reads found nothing", r.port().rx_empty_reads());
  absl::StrAppendFormat(&out,
                        "  port: rx %d packets%s %d bytes, tx %d packets%s %d bytes%s; drops:%s\n",
                        r.port().rx_packets(), rx_batches, r.port().rx_bytes(),
                        r.port().tx_packets(), tx_batches, r.port().tx_bytes(), empty_reads,
                        Counts(r.port().drops()));
  const std::string in_memory =
      r.in_process_messages() == 0
          ? std::string()
          : absl::StrFormat(" (%d in memory to switches of this process)", r.in_process_messages());
  // Not drops: what the peers of QPs just destroyed still sent them.
  const std::string late =
      r.late_for_destroyed_qp() == 0
          ? std::string()
          : absl::StrFormat(" (and %d late ACKs to QPs within 10 s of their destruction)",
                            r.late_for_destroyed_qp());
  absl::StrAppendFormat(
      &out, "  aggregation messages: %d received, %d sent%s, %d multicasts; data-plane drops:%s%s\n",
      r.messages_received(), r.messages_sent(), in_memory, r.multicasts_sent(), Counts(r.drops()),
      late);
  absl::StrAppendFormat(&out, "  resources: %d groups, %d slots, %d QPs in use\n", r.usage().groups(),
              r.usage().slots(), r.usage().qps());
  for (const control::PeerCounters& p : r.peers()) {
    absl::StrAppendFormat(&out, "  peer %-21s %-24s rx %d tx %d  faults: send %s, receive %s; dropped: send%s, "
                 "receive%s\n",
                 p.peer(), p.name(), p.rx_packets(), p.tx_packets(), p.send_impairment(),
                 p.receive_impairment(), Counts(p.send_stage().drops()),
                 Counts(p.receive_stage().drops()));
  }
  for (const control::QpCounters& q : r.qps()) {
    absl::StrAppendFormat(&out, "  qp 0x%06x %-5s %-24s %s%s%s\n", q.qpn(), q.state(), q.peer(),
                          QpCounts(q), q.error().empty() ? "" : ", error: ", q.error());
  }
  if (r.has_all_qps()) {
    absl::StrAppendFormat(&out, "  every QP since start (destroyed ones too): %s\n",
                          QpCounts(r.all_qps()));
  }
  for (const control::GroupCounters& g : r.groups()) {
    absl::StrAppendFormat(&out, "  group %d (tree %d, epoch %d, job %d): %d requests "
                "(%d waited, %d copied), %d completed, %d results, %d repairs answered, %d/%d slots busy; "
                "drops:%s\n",
                g.group_id(), g.tree_id(), g.epoch(), g.job_id(), g.requests_received(),
                g.contributions_buffered(), g.contributions_copied(), g.operations_completed(),
                g.results_distributed(), g.repairs_answered(), g.busy_slots(), g.num_slots(),
                Counts(g.drops()));
  }
  if (r.backend_counters_size() > 0) {
    absl::StrAppendFormat(&out, "  backend:%s\n", Counts(r.backend_counters()));
  }
  return out;
}

namespace {

// Every drop the switch counted, "name=count" for those not zero: its
// port's, its data plane's and, in a detailed answer (where `drops` leaves
// them out), those of every QP it has had, as "qp.<reason>".
std::vector<std::string> NamedDrops(const control::GetCountersResponse& r) {
  std::vector<std::string> out;
  AppendNonZero(r.port().drops(), "", &out);
  AppendNonZero(r.drops(), "", &out);
  if (r.detailed()) AppendNonZero(r.all_qps().drops(), "qp.", &out);
  return out;
}

std::string Share(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.0f %%", 100.0 * part / whole);
}

// Packets at or above this many bytes on average are full-size chunks,
// which the ranks and switches send in GSO runs.
constexpr uint64_t kFullPacketBytes = 2048;
// Enough packets that batching must have shown, and enough messages
// between switches that the in-memory links must have.
constexpr uint64_t kEnoughPackets = 1000;

}  // namespace

std::string FormatSwitchTraffic(const control::GetCountersResponse& r) {
  const control::SwitchPortCounters& p = r.port();
  const std::vector<std::string> drops = NamedDrops(r);
  return absl::StrFormat(
      "%s: messages %d in, %d out (%d to switches, %d of them in memory); port rx %d packets "
      "(%s in batches), tx %d (%s in batches); drops: %s",
      r.name(), r.messages_received(), r.messages_sent(), r.messages_to_switches(),
      r.in_process_messages(), p.rx_packets(), Share(p.rx_batched(), p.rx_packets()),
      p.tx_packets(), Share(p.tx_batched(), p.tx_packets()),
      drops.empty() ? "none" : absl::StrJoin(drops, " "));
}

std::vector<std::string> SwitchTrafficWarnings(
    const std::vector<control::GetCountersResponse>& switches, bool one_process,
    bool batches_expected) {
  std::vector<std::string> out;
  uint64_t sent = 0, in_memory = 0;
  for (const control::GetCountersResponse& r : switches) {
    sent += r.messages_to_switches();
    in_memory += r.in_process_messages();
  }
  if (one_process && switches.size() > 1 && sent >= kEnoughPackets && in_memory == 0) {
    out.push_back(absl::StrFormat(
        "the switches run in one process but none of their %d messages to each other went in "
        "memory: every one crossed the kernel (docs/switch.md, \"Several switches in one "
        "process\")",
        sent));
  }
  for (const control::GetCountersResponse& r : switches) {
    const control::SwitchPortCounters& p = r.port();
    if (!batches_expected || r.backend() != "udp") continue;
    if (p.tx_packets() >= kEnoughPackets && p.tx_bytes() / p.tx_packets() >= kFullPacketBytes &&
        p.tx_batched() == 0) {
      out.push_back(absl::StrFormat(
          "%s sent %d full-size packets one system call each: UDP GSO did not engage "
          "(docs/transport.md, \"Batched I/O\")", r.name(), p.tx_packets()));
    }
    if (p.rx_packets() >= kEnoughPackets && p.rx_bytes() / p.rx_packets() >= kFullPacketBytes &&
        p.rx_batched() == 0) {
      out.push_back(absl::StrFormat(
          "%s read %d full-size packets one at a time: UDP GRO did not engage "
          "(docs/transport.md, \"Batched I/O\")", r.name(), p.rx_packets()));
    }
  }
  return out;
}

absl::StatusOr<std::vector<control::GetCountersResponse>> ParseSwitchCountersLines(
    const std::string& text) {
  std::vector<control::GetCountersResponse> out;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    control::GetCountersResponse r;
    const auto parsed = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(line.data(), line.size()), &r);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "line %d is not a switch's counters in JSON: %s", number, parsed.ToString()));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace netfold::tools
