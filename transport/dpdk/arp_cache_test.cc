// The ARP cache: hits, refresh, expiry, held packets, retries, limits.
#include "transport/dpdk/arp_cache.h"

#include "gtest/gtest.h"

namespace netfold::transport::dpdk {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSecond = 1000 * kMs;
const MacAddress kMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddress kOtherMac{{0x02, 0, 0, 0, 0, 2}};
constexpr uint32_t kIp = 0xc6120001;

ArpConfig Config() {
  return {.reachable = absl::Seconds(30),
          .lifetime = absl::Seconds(300),
          .retry_interval = absl::Milliseconds(100),
          .max_requests = 3,
          .max_held_per_address = 2};
}

TEST(ArpCache, LearnThenLookup) {
  ArpCache arp(Config());
  std::vector<PacketBuffer*> released;
  EXPECT_FALSE(arp.Lookup(kIp, 0).mac.has_value());
  EXPECT_TRUE(arp.Learn(kIp, kMac, 0, &released));
  EXPECT_TRUE(released.empty());
  ArpCache::LookupResult r = arp.Lookup(kIp, kSecond);
  ASSERT_TRUE(r.mac.has_value());
  EXPECT_EQ(*r.mac, kMac);
  EXPECT_FALSE(r.refresh);
  // A new MAC for the address replaces the old one.
  arp.Learn(kIp, kOtherMac, 2 * kSecond, &released);
  EXPECT_EQ(*arp.Lookup(kIp, 2 * kSecond).mac, kOtherMac);
}

TEST(ArpCache, OldEntriesAskForRefreshThenExpire) {
  ArpCache arp(Config());
  std::vector<PacketBuffer*> released;
  arp.Learn(kIp, kMac, 0, &released);
  ArpCache::LookupResult r = arp.Lookup(kIp, 31 * kSecond);
  EXPECT_TRUE(r.mac.has_value());  // still used while being refreshed
  EXPECT_TRUE(r.refresh);
  // One request per retry interval.
  EXPECT_FALSE(arp.Lookup(kIp, 31 * kSecond + 50 * kMs).refresh);
  EXPECT_TRUE(arp.Lookup(kIp, 31 * kSecond + 100 * kMs).refresh);
  // Confirmed again: fresh.
  arp.Learn(kIp, kMac, 32 * kSecond, &released);
  EXPECT_FALSE(arp.Lookup(kIp, 33 * kSecond).refresh);
  // Never confirmed for the lifetime: gone.
  EXPECT_FALSE(arp.Lookup(kIp, 333 * kSecond).mac.has_value());
  EXPECT_EQ(arp.num_entries(), 0u);
}

TEST(ArpCache, HeldPacketsAreReleasedByTheReply) {
  PacketPool pool({.num_buffers = 8, .buffer_size = 128});
  ArpCache arp(Config());
  PacketBuffer* a = pool.Alloc();
  PacketBuffer* b = pool.Alloc();
  PacketBuffer* c = pool.Alloc();
  EXPECT_EQ(arp.Hold(kIp, a, 0), ArpCache::HoldResult::kHeldSendRequest);
  EXPECT_EQ(arp.Hold(kIp, b, 0), ArpCache::HoldResult::kHeld);
  EXPECT_EQ(arp.Hold(kIp, c, 0), ArpCache::HoldResult::kRefused);  // 2 per address
  PacketPool::Free(c);
  EXPECT_EQ(arp.num_held(), 2u);
  std::vector<PacketBuffer*> released;
  // Update (not a request for us) resolves an awaited address too.
  EXPECT_TRUE(arp.Update(kIp, kMac, 10 * kMs, &released));
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0], a);
  EXPECT_EQ(released[1], b);
  EXPECT_EQ(arp.num_pending(), 0u);
  PacketPool::FreeBurst(released);
}

TEST(ArpCache, UpdateDoesNotLearnStrangers) {
  ArpCache arp(Config());
  std::vector<PacketBuffer*> released;
  EXPECT_FALSE(arp.Update(kIp, kMac, 0, &released));
  EXPECT_FALSE(arp.Contains(kIp));
}

TEST(ArpCache, RetriesThenFails) {
  PacketPool pool({.num_buffers = 8, .buffer_size = 128});
  ArpCache arp(Config());
  PacketBuffer* a = pool.Alloc();
  ASSERT_EQ(arp.Hold(kIp, a, 0), ArpCache::HoldResult::kHeldSendRequest);  // request 1
  EXPECT_EQ(arp.NextTimerNs(), 100 * kMs);
  std::vector<uint32_t> requests;
  std::vector<PacketBuffer*> failed;
  arp.Tick(50 * kMs, &requests, &failed);
  EXPECT_TRUE(requests.empty());
  arp.Tick(100 * kMs, &requests, &failed);  // request 2
  arp.Tick(200 * kMs, &requests, &failed);  // request 3
  EXPECT_EQ(requests, (std::vector<uint32_t>{kIp, kIp}));
  EXPECT_TRUE(failed.empty());
  arp.Tick(300 * kMs, &requests, &failed);  // no reply after 3 requests
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], a);
  EXPECT_EQ(arp.num_pending(), 0u);
  EXPECT_FALSE(arp.NextTimerNs().has_value());
  PacketPool::FreeBurst(failed);
}

TEST(ArpCache, DestructionFreesHeldPackets) {
  PacketPool pool({.num_buffers = 4, .buffer_size = 128});
  {
    ArpCache arp(Config());
    arp.Hold(kIp, pool.Alloc(), 0);
    arp.Hold(kIp + 1, pool.Alloc(), 0);
    EXPECT_EQ(pool.num_in_use(), 2u);
  }
  EXPECT_EQ(pool.num_in_use(), 0u);
}

TEST(ArpCache, TableLimit) {
  ArpConfig c = Config();
  c.max_entries = 2;
  ArpCache arp(c);
  std::vector<PacketBuffer*> released;
  EXPECT_TRUE(arp.Learn(1, kMac, 0, &released));
  EXPECT_TRUE(arp.Learn(2, kMac, 0, &released));
  EXPECT_FALSE(arp.Learn(3, kMac, kSecond, &released));
  // Expired entries make room.
  EXPECT_TRUE(arp.Learn(3, kMac, 301 * kSecond, &released));
}

}  // namespace
}  // namespace netfold::transport::dpdk
