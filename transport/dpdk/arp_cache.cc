#include "transport/dpdk/arp_cache.h"

#include <algorithm>

namespace netfold::transport::dpdk {

ArpCache::ArpCache(const ArpConfig& config)
    : config_(config),
      reachable_ns_(absl::ToInt64Nanoseconds(config.reachable)),
      lifetime_ns_(absl::ToInt64Nanoseconds(config.lifetime)),
      retry_ns_(absl::ToInt64Nanoseconds(config.retry_interval)) {}

ArpCache::~ArpCache() {
  for (auto& [ip, p] : pending_) PacketPool::FreeBurst(p.held);
}

ArpCache::LookupResult ArpCache::Lookup(uint32_t ip, int64_t now_ns) {
  LookupResult r;
  auto it = entries_.find(ip);
  if (it == entries_.end()) return r;
  Entry& e = it->second;
  const int64_t age = now_ns - e.confirmed_ns;
  if (age > lifetime_ns_) {
    entries_.erase(it);
    return r;
  }
  r.mac = e.mac;
  if (age > reachable_ns_ && now_ns - e.last_request_ns >= retry_ns_) {
    e.last_request_ns = now_ns;
    r.refresh = true;
  }
  return r;
}

bool ArpCache::Store(uint32_t ip, const MacAddress& mac, int64_t now_ns,
                     std::vector<PacketBuffer*>* released) {
  auto it = entries_.find(ip);
  if (it == entries_.end()) {
    if (entries_.size() >= config_.max_entries) {
      absl::erase_if(entries_,
                     [&](const auto& kv) { return now_ns - kv.second.confirmed_ns > lifetime_ns_; });
      if (entries_.size() >= config_.max_entries) return false;
    }
    // A confirmed entry needs no refresh for `reachable`.
    entries_.emplace(ip, Entry{mac, now_ns, now_ns});
  } else {
    it->second.mac = mac;
    it->second.confirmed_ns = now_ns;
  }
  auto p = pending_.find(ip);
  if (p != pending_.end()) {
    released->insert(released->end(), p->second.held.begin(), p->second.held.end());
    pending_.erase(p);
  }
  return true;
}

bool ArpCache::Learn(uint32_t ip, const MacAddress& mac, int64_t now_ns,
                     std::vector<PacketBuffer*>* released) {
  return Store(ip, mac, now_ns, released);
}

bool ArpCache::Update(uint32_t ip, const MacAddress& mac, int64_t now_ns,
                      std::vector<PacketBuffer*>* released) {
  if (!entries_.contains(ip) && !pending_.contains(ip)) return false;
  return Store(ip, mac, now_ns, released);
}

ArpCache::HoldResult ArpCache::Hold(uint32_t ip, PacketBuffer* p, int64_t now_ns) {
  auto it = pending_.find(ip);
  if (it == pending_.end()) {
    if (pending_.size() >= config_.max_entries) return HoldResult::kRefused;
    Pending& fresh = pending_[ip];
    fresh.held.push_back(p);
    fresh.requests_sent = 1;
    fresh.next_request_ns = now_ns + retry_ns_;
    return HoldResult::kHeldSendRequest;
  }
  if (it->second.held.size() >= config_.max_held_per_address) return HoldResult::kRefused;
  it->second.held.push_back(p);
  return HoldResult::kHeld;
}

void ArpCache::Tick(int64_t now_ns, std::vector<uint32_t>* requests,
                    std::vector<PacketBuffer*>* failed) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    if (now_ns < p.next_request_ns) {
      ++it;
      continue;
    }
    if (p.requests_sent >= config_.max_requests) {
      failed->insert(failed->end(), p.held.begin(), p.held.end());
      pending_.erase(it++);
      continue;
    }
    ++p.requests_sent;
    p.next_request_ns = now_ns + retry_ns_;
    requests->push_back(it->first);
    ++it;
  }
}

std::optional<int64_t> ArpCache::NextTimerNs() const {
  std::optional<int64_t> next;
  for (const auto& [ip, p] : pending_) {
    if (!next || p.next_request_ns < *next) next = p.next_request_ns;
  }
  return next;
}

size_t ArpCache::num_held() const {
  size_t n = 0;
  for (const auto& [ip, p] : pending_) n += p.held.size();
  return n;
}

}  // namespace netfold::transport::dpdk
