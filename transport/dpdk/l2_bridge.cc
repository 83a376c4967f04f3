#include "transport/dpdk/l2_bridge.h"

#include <cstdlib>

namespace netfold::transport::dpdk {
namespace {

void Bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

L2Bridge::L2Bridge(const BridgeConfig& config)
    : config_(config), aging_ns_(absl::ToInt64Nanoseconds(config.aging)) {}

bool L2Bridge::Learn(const MacAddress& mac, uint32_t link, int64_t now_ns) {
  if (mac.IsMulticast() || mac.IsZero()) {
    Bump(counters_.bad_source);
    return false;
  }
  const uint64_t key = mac.ToU64();
  auto it = table_.find(key);
  if (it != table_.end()) {
    if (it->second.link != link) Bump(counters_.moved);
    it->second = {link, now_ns};
    return true;
  }
  if (table_.size() >= config_.max_entries) {
    Sweep(now_ns);
    if (table_.size() >= config_.max_entries) {
      Bump(counters_.table_full);
      return false;
    }
  }
  table_.emplace(key, Entry{link, now_ns});
  Bump(counters_.learned);
  return true;
}

std::optional<uint32_t> L2Bridge::Lookup(const MacAddress& mac, int64_t now_ns) {
  auto it = table_.find(mac.ToU64());
  if (it == table_.end()) return std::nullopt;
  if (now_ns - it->second.last_seen_ns > aging_ns_) {
    table_.erase(it);
    Bump(counters_.aged);
    return std::nullopt;
  }
  return it->second.link;
}

L2Bridge::Decision L2Bridge::Process(uint32_t in_link, const MacAddress& src,
                                     const MacAddress& dst, int64_t now_ns) {
  if (in_link >= config_.num_links) std::abort();  // a broken invariant of the caller
  Learn(src, in_link, now_ns);
  if (dst.IsMulticast()) {
    Bump(counters_.flooded_group);
    return {Action::kFlood, 0};
  }
  std::optional<uint32_t> out = Lookup(dst, now_ns);
  if (!out) {
    Bump(counters_.flooded_unknown);
    return {Action::kFlood, 0};
  }
  if (*out == in_link) {
    Bump(counters_.filtered);
    return {Action::kFilter, 0};
  }
  Bump(counters_.forwarded);
  return {Action::kForward, *out};
}

void L2Bridge::FlushLink(uint32_t link) {
  absl::erase_if(table_, [link](const auto& kv) { return kv.second.link == link; });
}

void L2Bridge::Sweep(int64_t now_ns) {
  const size_t before = table_.size();
  absl::erase_if(table_,
                 [&](const auto& kv) { return now_ns - kv.second.last_seen_ns > aging_ns_; });
  counters_.aged.fetch_add(before - table_.size(), std::memory_order_relaxed);
}

}  // namespace netfold::transport::dpdk
