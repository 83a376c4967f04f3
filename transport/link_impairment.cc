#include "transport/link_impairment.h"

#include <algorithm>

#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace netfold::transport {
namespace {

absl::StatusOr<double> ParseNumber(std::string_view text, std::string_view item) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrFormat("impairment '%s': '%s' is not a number",
                                                      item, text));
  }
  return value;
}

absl::StatusOr<double> ParseProbability(std::string_view text, std::string_view item) {
  auto v = ParseNumber(text, item);
  if (!v.ok()) return v;
  if (*v < 0 || *v > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("impairment '%s': probability must be in [0, 1]", item));
  }
  return v;
}

absl::StatusOr<absl::Duration> ParseDurationItem(std::string_view text, std::string_view item) {
  struct Unit {
    std::string_view suffix;
    absl::Duration unit;
  };
  static constexpr Unit kUnits[] = {{"ns", absl::Nanoseconds(1)}, {"us", absl::Microseconds(1)},
                                    {"ms", absl::Milliseconds(1)}, {"s", absl::Seconds(1)}};
  for (const Unit& u : kUnits) {
    if (text.size() > u.suffix.size() && text.ends_with(u.suffix)) {
      std::string_view number = text.substr(0, text.size() - u.suffix.size());
      // "5ms" also ends with "s": make sure the rest is a plain number.
      auto v = ParseNumber(number, item);
      if (!v.ok()) continue;
      if (*v < 0) break;
      return *v * u.unit;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "impairment '%s': '%s' is not a duration (number with ns, us, ms or s)", item, text));
}

absl::StatusOr<uint64_t> ParseRate(std::string_view text, std::string_view item) {
  std::string_view t = text;
  if (t.ends_with("bit")) t.remove_suffix(3);
  double mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': mult = 1e3; t.remove_suffix(1); break;
      case 'm': case 'M': mult = 1e6; t.remove_suffix(1); break;
      case 'g': case 'G': mult = 1e9; t.remove_suffix(1); break;
      default: break;
    }
  }
  auto v = ParseNumber(t, item);
  if (!v.ok() || *v < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("impairment '%s': rate must look like 100mbit, 1gbit or 5000000", item));
  }
  return static_cast<uint64_t>(*v * mult);
}

std::string DurationText(absl::Duration d) { return absl::FormatDuration(d); }

// Splits on `sep`, keeping empty fields unless `skip_empty`.
std::vector<std::string_view> Split(std::string_view text, char sep, bool skip_empty) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    std::string_view field = text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start);
    if (!field.empty() || !skip_empty) out.push_back(field);
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

}  // namespace

bool ImpairmentConfig::IsIdentity() const {
  return !link_down && drop == 0 && multicast_drop == 0 && burst_enter == 0 && duplicate == 0 && corrupt == 0 &&
         reorder == 0 && delay == absl::ZeroDuration() && jitter == absl::ZeroDuration() &&
         rate_bps == 0;
}

std::string ImpairmentConfig::ToString() const {
  if (IsIdentity()) return "none";
  std::vector<std::string> parts;
  parts.push_back(absl::StrFormat("seed=%d", seed));
  if (link_down) parts.push_back("down=1");
  if (drop > 0) parts.push_back(absl::StrFormat("drop=%g", drop));
  if (multicast_drop > 0) parts.push_back(absl::StrFormat("mcast_drop=%g", multicast_drop));
  if (burst_enter > 0) {
    parts.push_back(absl::StrFormat("burst=%g:%g:%g", burst_enter, burst_exit, burst_drop));
  }
  if (duplicate > 0) parts.push_back(absl::StrFormat("dup=%g", duplicate));
  if (corrupt > 0) parts.push_back(absl::StrFormat("corrupt=%g", corrupt));
  if (reorder > 0) {
    parts.push_back(absl::StrFormat("reorder=%g:%s", reorder, DurationText(reorder_delay)));
  }
  if (delay > absl::ZeroDuration()) parts.push_back("delay=" + DurationText(delay));
  if (jitter > absl::ZeroDuration()) parts.push_back("jitter=" + DurationText(jitter));
  if (rate_bps > 0) {
    parts.push_back(absl::StrFormat("rate=%dbit", rate_bps));
    parts.push_back("queue=" + DurationText(rate_queue));
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

absl::StatusOr<ImpairmentConfig> ParseImpairment(std::string_view text) {
  ImpairmentConfig c;
  std::string compact;
  for (char ch : text) {
    if (ch != ' ' && ch != '\t') compact.push_back(ch);
  }
  if (compact.empty() || compact == "none") return c;
  for (std::string_view item : Split(compact, ',', /*skip_empty=*/true)) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("impairment '%s': expected key=value", item));
    }
    std::string_view key = item.substr(0, eq);
    std::string_view value = item.substr(eq + 1);
    std::vector<std::string_view> fields = Split(value, ':', /*skip_empty=*/false);
    auto want_fields = [&](size_t lo, size_t hi) -> absl::Status {
      if (fields.size() < lo || fields.size() > hi) {
        return absl::InvalidArgumentError(
            absl::StrFormat("impairment '%s': wrong number of ':'-separated values", item));
      }
      return absl::OkStatus();
    };
#define NF_TRY(lhs, expr)                 \
  do {                                    \
    auto v_ = (expr);                     \
    if (!v_.ok()) return v_.status();     \
    lhs = *v_;                            \
  } while (false)
    if (key == "seed") {
      uint64_t seed = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("impairment '%s': seed must be a non-negative integer", item));
      }
      c.seed = seed;
    } else if (key == "down") {
      if (value != "0" && value != "1") {
        return absl::InvalidArgumentError(
            absl::StrFormat("impairment '%s': down must be 0 or 1", item));
      }
      c.link_down = value == "1";
    } else if (key == "drop") {
      NF_TRY(c.drop, ParseProbability(value, item));
    } else if (key == "mcast_drop") {
      NF_TRY(c.multicast_drop, ParseProbability(value, item));
    } else if (key == "burst") {
      if (absl::Status s = want_fields(2, 3); !s.ok()) return s;
      NF_TRY(c.burst_enter, ParseProbability(fields[0], item));
      NF_TRY(c.burst_exit, ParseProbability(fields[1], item));
      if (fields.size() == 3) NF_TRY(c.burst_drop, ParseProbability(fields[2], item));
    } else if (key == "dup") {
      NF_TRY(c.duplicate, ParseProbability(value, item));
    } else if (key == "corrupt") {
      NF_TRY(c.corrupt, ParseProbability(value, item));
    } else if (key == "reorder") {
      if (absl::Status s = want_fields(1, 2); !s.ok()) return s;
      NF_TRY(c.reorder, ParseProbability(fields[0], item));
      if (fields.size() == 2) NF_TRY(c.reorder_delay, ParseDurationItem(fields[1], item));
    } else if (key == "delay") {
      NF_TRY(c.delay, ParseDurationItem(value, item));
    } else if (key == "jitter") {
      NF_TRY(c.jitter, ParseDurationItem(value, item));
    } else if (key == "rate") {
      NF_TRY(c.rate_bps, ParseRate(value, item));
    } else if (key == "queue") {
      NF_TRY(c.rate_queue, ParseDurationItem(value, item));
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "impairment '%s': unknown key '%s' (seed, down, drop, mcast_drop, burst, dup, corrupt, reorder, "
          "delay, jitter, rate, queue)",
          item, key));
    }
#undef NF_TRY
  }
  return c;
}

LinkImpairment::LinkImpairment(const ImpairmentConfig& config, const Clock& clock)
    : clock_(clock), config_(config), active_(config), rng_(config.seed) {}

LinkImpairment::~LinkImpairment() { DropHeld(); }

void LinkImpairment::SetConfig(const ImpairmentConfig& config) {
  absl::MutexLock lock(&mu_);
  config_ = config;
  config_changed_.store(true, std::memory_order_release);
}

ImpairmentConfig LinkImpairment::config() const {
  absl::MutexLock lock(&mu_);
  return config_;
}

double LinkImpairment::Uniform() {
  // 53 random bits -> [0, 1), identical on every platform.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

namespace {

// A copy of `p`'s bytes and addresses in a buffer of its pool; nullptr if
// the pool has none free. A packet of a pool that another thread allocates
// from (a receive queue's, MultiQueueUdpPort) is copied into a buffer of
// its own instead.
PacketBuffer* CopyPacket(const PacketBuffer& p) {
  PacketPool* pool = p.pool();
  PacketBuffer* copy = pool != nullptr && !pool->returns_from_any_thread()
                           ? pool->Alloc()
                           : PacketPool::NewHeapBuffer(std::max<uint32_t>(p.len(), 1));
  if (copy == nullptr) return nullptr;
  std::memcpy(copy->data(), p.data(), p.len());
  copy->set_len(p.len());
  copy->src = p.src;
  copy->dst = p.dst;
  copy->ip_id = p.ip_id;  // the identification its ICRC was computed with
  return copy;
}

}  // namespace

PacketBuffer* LinkImpairment::Corrupt(PacketBuffer* p) {
  if (p->len() == 0) return p;
  if (p->is_view()) {
    // A view shares its bytes (a sender's frame it may send again, the rest
    // of a received batch): the flips go to a copy. Without a buffer for
    // it, the packet is lost instead (as a corrupted one would be).
    PacketBuffer* copy = CopyPacket(*p);
    PacketPool::Free(p);
    if (copy == nullptr) return nullptr;
    p = copy;
  }
  const int flips = 1 + static_cast<int>(rng_() % 3);
  for (int i = 0; i < flips; ++i) {
    const uint64_t bit = rng_() % (static_cast<uint64_t>(p->len()) * 8);
    p->data()[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  return p;
}

void LinkImpairment::Emit(PacketBuffer* p, int64_t due_ns, int64_t now_ns,
                          std::vector<PacketBuffer*>* out) {
  if (due_ns <= now_ns && held_.empty()) {
    out->push_back(p);
    counters_.packets_out.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Anything behind a held packet waits its turn unless it is due earlier,
  // which is how delay and reorder let packets overtake each other.
  p->due_ns = due_ns;
  held_.push({due_ns, order_++, p});
}

void LinkImpairment::Process(std::span<PacketBuffer* const> in, std::vector<PacketBuffer*>* out) {
  if (config_changed_.load(std::memory_order_acquire)) {
    absl::MutexLock lock(&mu_);
    if (config_.seed != active_.seed) {
      rng_.seed(config_.seed);
      burst_bad_ = false;
    }
    active_ = config_;
    config_changed_.store(false, std::memory_order_relaxed);
  }
  const ImpairmentConfig& c = active_;
  const int64_t now = clock_.NowNanos();
  Release(out);
  if (c.IsIdentity() && held_.empty()) {
    out->insert(out->end(), in.begin(), in.end());
    counters_.packets_in.fetch_add(in.size(), std::memory_order_relaxed);
    counters_.packets_out.fetch_add(in.size(), std::memory_order_relaxed);
    return;
  }
  for (PacketBuffer* p : in) {
    // A stage may read the packet's bytes or hold it past the send that
    // gave it (PacketBuffer::external).
    p->Materialize();
    counters_.packets_in.fetch_add(1, std::memory_order_relaxed);
    if (c.link_down) {
      counters_.dropped_down.fetch_add(1, std::memory_order_relaxed);
      PacketPool::Free(p);
      continue;
    }
    if (c.multicast_drop > 0 && p->dst.IsMulticast() && Uniform() < c.multicast_drop) {
      counters_.dropped_multicast.fetch_add(1, std::memory_order_relaxed);
      PacketPool::Free(p);
      continue;
    }
    if (c.drop > 0 && Uniform() < c.drop) {
      counters_.dropped_random.fetch_add(1, std::memory_order_relaxed);
      PacketPool::Free(p);
      continue;
    }
    if (c.burst_enter > 0) {
      burst_bad_ = burst_bad_ ? !(Uniform() < c.burst_exit) : Uniform() < c.burst_enter;
      if (burst_bad_ && Uniform() < c.burst_drop) {
        counters_.dropped_burst.fetch_add(1, std::memory_order_relaxed);
        PacketPool::Free(p);
        continue;
      }
    }
    int64_t due = now;
    if (c.rate_bps > 0) {
      const int64_t tx_ns =
          static_cast<int64_t>(static_cast<double>(p->len()) * 8e9 / static_cast<double>(c.rate_bps));
      const int64_t start = std::max(now, rate_free_at_ns_);
      if (start - now > absl::ToInt64Nanoseconds(c.rate_queue)) {
        counters_.dropped_rate.fetch_add(1, std::memory_order_relaxed);
        PacketPool::Free(p);
        continue;
      }
      rate_free_at_ns_ = start + tx_ns;
      due = rate_free_at_ns_;
    }
    if (c.corrupt > 0 && Uniform() < c.corrupt) {
      p = Corrupt(p);
      counters_.corrupted.fetch_add(1, std::memory_order_relaxed);
      if (p == nullptr) continue;
    }
    PacketBuffer* copy = nullptr;
    if (c.duplicate > 0 && Uniform() < c.duplicate) {
      copy = CopyPacket(*p);
      if (copy != nullptr) counters_.duplicated.fetch_add(1, std::memory_order_relaxed);
    }
    if (c.delay > absl::ZeroDuration() || c.jitter > absl::ZeroDuration()) {
      due += absl::ToInt64Nanoseconds(c.delay) +
             static_cast<int64_t>(Uniform() * static_cast<double>(absl::ToInt64Nanoseconds(c.jitter)));
      counters_.delayed.fetch_add(1, std::memory_order_relaxed);
    }
    if (c.reorder > 0 && Uniform() < c.reorder) {
      due += absl::ToInt64Nanoseconds(c.reorder_delay);
      counters_.reordered.fetch_add(1, std::memory_order_relaxed);
    }
    Emit(p, due, now, out);
    if (copy != nullptr) Emit(copy, due, now, out);
  }
  Release(out);
}

void LinkImpairment::Release(std::vector<PacketBuffer*>* out) {
  if (held_.empty()) return;
  const int64_t now = clock_.NowNanos();
  while (!held_.empty() && held_.top().due_ns <= now) {
    out->push_back(held_.top().packet);
    held_.pop();
    counters_.packets_out.fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<int64_t> LinkImpairment::NextDueNs() const {
  if (held_.empty()) return std::nullopt;
  return held_.top().due_ns;
}

void LinkImpairment::DropHeld() {
  while (!held_.empty()) {
    PacketPool::Free(held_.top().packet);
    held_.pop();
  }
}

}  // namespace netfold::transport
