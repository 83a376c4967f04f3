#include "transport/packet_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include "gtest/gtest.h"

namespace netfold::transport {
namespace {

TEST(PacketPool, AllocatesEveryBufferOnceThenFails) {
  PacketPool pool({.num_buffers = 4, .buffer_size = 100, .headroom = 32});
  std::set<PacketBuffer*> seen;
  PacketBuffer* bufs[4];
  for (auto& b : bufs) {
    b = pool.Alloc();
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(seen.insert(b).second);
    EXPECT_EQ(b->len(), 0u);
    EXPECT_EQ(b->capacity(), 100u);
    EXPECT_EQ(b->headroom(), 32u);
    EXPECT_EQ(b->headroom_start() + 32, b->data());
    EXPECT_EQ(b->pool(), &pool);
  }
  EXPECT_EQ(pool.Alloc(), nullptr);
  EXPECT_EQ(pool.num_alloc_failures(), 1u);
  EXPECT_EQ(pool.num_in_use(), 4u);
  PacketPool::FreeBurst(bufs);
  EXPECT_EQ(pool.num_free(), 4u);
}

// This thread's alone: another thread's faults must not count.
long MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

// Writes the first `n` buffers Alloc hands out, whole; returns the page
// faults that took.
long FaultsWritingNext(PacketPool& pool, int n, std::vector<PacketBuffer*>& taken) {
  const long before = MinorFaults();
  for (int i = 0; i < n; ++i) {
    PacketBuffer* b = pool.Alloc();
    std::memset(b->data(), 0xA5, b->capacity());
    taken.push_back(b);
  }
  return MinorFaults() - before;
}

// Prefault writes the buffers Alloc hands out next: their first use takes
// no page fault, where untouched ones of the same pool take one per page.
TEST(PacketPool, PrefaultedBuffersTakeNoPageFaultOnFirstUse) {
  PacketPool pool({.num_buffers = 32, .buffer_size = 64 * 1024});
  {
    // The buffers' pages given back, whatever wrote them before (meson runs
    // tests with MALLOC_PERTURB_, which fills new memory): untouched again.
    std::vector<PacketBuffer*> all;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (PacketBuffer* b; (b = pool.Alloc()) != nullptr;) {
      all.push_back(b);
      lo = std::min(lo, reinterpret_cast<uintptr_t>(b->data()));
      hi = std::max(hi, reinterpret_cast<uintptr_t>(b->data()) + b->capacity());
    }
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    lo = (lo + page - 1) / page * page;
    hi = hi / page * page;
    ASSERT_EQ(madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED), 0);
    for (auto it = all.rbegin(); it != all.rend(); ++it) PacketPool::Free(*it);
  }
  pool.Prefault(8);
  std::vector<PacketBuffer*> taken;
  const long prefaulted = FaultsWritingNext(pool, 8, taken);
  const long untouched = FaultsWritingNext(pool, 8, taken);
  if (untouched == 0) GTEST_SKIP() << "the pool's memory took no page faults (huge pages?)";
  EXPECT_GE(untouched, 8 * 16 - 8);  // a fault per 4 KiB page, give or take the edges
  EXPECT_LE(prefaulted, 2);
  for (PacketBuffer* b : taken) PacketPool::Free(b);
  pool.Prefault(1000);  // at most every free one
}

// A buffer is written once: asking again (a switch does at every group it
// installs) passes over the buffers already written, whatever they hold.
TEST(PacketPool, PrefaultWritesABufferOnce) {
  PacketPool pool({.num_buffers = 4, .buffer_size = 256});
  pool.Prefault(4);
  PacketBuffer* b = pool.Alloc();
  ASSERT_NE(b, nullptr);
  std::memset(b->data(), 0xa5, b->capacity());
  PacketPool::Free(b);  // the next one Alloc hands out
  pool.Prefault(4);
  PacketBuffer* again = pool.Alloc();
  ASSERT_EQ(again, b);
  for (uint32_t i = 0; i < again->capacity(); ++i) ASSERT_EQ(again->data()[i], 0xa5) << i;
  PacketPool::Free(again);
}

TEST(PacketPool, BuffersDoNotOverlap) {
  PacketPool pool({.num_buffers = 8, .buffer_size = 77, .headroom = 16});
  PacketBuffer* bufs[8];
  ASSERT_EQ(pool.AllocBurst(bufs), 8u);
  for (int i = 0; i < 8; ++i) {
    for (uint32_t j = 0; j < 77; ++j) bufs[i]->data()[j] = static_cast<uint8_t>(i);
    bufs[i]->set_len(77);
  }
  for (int i = 0; i < 8; ++i) {
    for (uint8_t byte : bufs[i]->bytes()) ASSERT_EQ(byte, i);
    // Cache-line aligned headroom start.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs[i]->headroom_start()) % 64, 0u);
  }
  PacketPool::FreeBurst(bufs);
}

TEST(PacketPool, ReusedBufferIsReset) {
  PacketPool pool({.num_buffers = 1, .buffer_size = 10});
  PacketBuffer* p = pool.Alloc();
  p->set_len(5);
  p->dst = {1, 2};
  p->due_ns = 7;
  PacketPool::Free(p);
  p = pool.Alloc();
  EXPECT_EQ(p->len(), 0u);
  EXPECT_EQ(p->dst, (Ipv4Endpoint{}));
  EXPECT_EQ(p->due_ns, 0);
  PacketPool::Free(p);
}

TEST(PacketPoolDeathTest, DoubleFreeAndOverlongLengthAbort) {
  PacketPool pool({.num_buffers = 2, .buffer_size = 10});
  PacketBuffer* p = pool.Alloc();
  EXPECT_DEATH(p->set_len(11), "beyond capacity");
  PacketPool::Free(p);
  EXPECT_DEATH(PacketPool::Free(p), "freed twice");
}

TEST(PacketBatch, FreesWhatItStillHolds) {
  PacketPool pool({.num_buffers = 3, .buffer_size = 10});
  {
    PacketBatch batch;
    batch.Push(pool.Alloc());
    batch.Push(pool.Alloc());
    batch.Push(pool.Alloc());
    PacketBuffer* taken = batch[0];
    batch.Consume(1);  // someone took the first one
    EXPECT_EQ(batch.size(), 2u);
    PacketPool::Free(taken);
  }
  EXPECT_EQ(pool.num_free(), 3u);
}

// Views show parts of a buffer without copying; the buffer, freed while
// views live, goes back to its pool with the last of them.
TEST(PacketPool, ViewsHoldTheirBufferUntilTheLastIsFreed) {
  PacketPool batches({.num_buffers = 1, .buffer_size = 1000, .headroom = 0});
  PacketPool views({.num_buffers = 1, .buffer_size = 100, .num_views = 2});
  PacketBuffer* batch = batches.Alloc();
  ASSERT_NE(batch, nullptr);
  for (uint32_t i = 0; i < 300; ++i) batch->data()[i] = static_cast<uint8_t>(i);
  batch->set_len(300);
  PacketBuffer* a = views.AllocView(batch, 0, 100);
  PacketBuffer* b = views.AllocView(batch, 100, 200);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->is_view());
  EXPECT_EQ(b->len(), 200u);
  EXPECT_EQ(b->data()[0], 100);
  EXPECT_EQ(views.AllocView(batch, 0, 1), nullptr) << "no view header left";
  EXPECT_EQ(views.num_free_views(), 0u);
  PacketPool::Free(batch);  // its views still show it
  EXPECT_EQ(batches.num_free(), 0u);
  PacketPool::Free(a);
  EXPECT_EQ(batches.num_free(), 0u);
  PacketPool::Free(b);
  EXPECT_EQ(batches.num_free(), 1u);
  EXPECT_EQ(views.num_free_views(), 2u);
  // Out of range, or a view of a view: refused.
  batch = batches.Alloc();
  batch->set_len(10);
  EXPECT_EQ(views.AllocView(batch, 5, 6), nullptr);
  PacketBuffer* c = views.AllocView(batch, 0, 10);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(views.AllocView(c, 0, 1), nullptr);
  PacketPool::Free(c);
  PacketPool::Free(batch);
  EXPECT_EQ(batches.num_free(), 1u);
}

// A heap buffer (a sender's message laid out as packets) lends views as a
// pool buffer does; freed while they live, it is deleted with the last.
TEST(PacketPool, AHeapBufferOutlivesItsOwnerWhileViewsOfItLive) {
  PacketPool views({.num_buffers = 1, .buffer_size = 100, .num_views = 2});
  PacketBuffer* frames = PacketPool::NewHeapBuffer(8192);
  ASSERT_NE(frames, nullptr);
  EXPECT_EQ(frames->pool(), nullptr);
  EXPECT_EQ(frames->capacity(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(frames->data()) % 64, 0u) << "cache-line aligned";
  for (uint32_t i = 0; i < 8192; ++i) frames->data()[i] = static_cast<uint8_t>(i * 3);
  frames->set_len(8192);
  PacketBuffer* a = views.AllocView(frames, 4096, 100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(frames->num_views(), 1u);
  PacketPool::Free(frames);  // the owner lets go; the view still shows it
  EXPECT_EQ(a->data()[0], static_cast<uint8_t>(4096 * 3));
  EXPECT_EQ(a->data()[99], static_cast<uint8_t>(4195 * 3));
  PacketPool::Free(a);  // deletes the heap buffer
  EXPECT_EQ(views.num_free_views(), 2u);
  // Without views, Free deletes it at once; twice is a broken invariant.
  PacketBuffer* alone = PacketPool::NewHeapBuffer(64);
  PacketPool::Free(alone);
}

TEST(PacketPoolDeathTest, AHeapBufferFreedTwiceWhileViewedAborts) {
  PacketPool views({.num_buffers = 1, .buffer_size = 100, .num_views = 1});
  PacketBuffer* frames = PacketPool::NewHeapBuffer(100);
  frames->set_len(100);
  PacketBuffer* v = views.AllocView(frames, 0, 10);
  PacketPool::Free(frames);
  EXPECT_DEATH(PacketPool::Free(frames), "freed twice");
  PacketPool::Free(v);
}

// returns_from_any_thread: buffers freed on other threads, while the owner
// keeps allocating, all come back exactly once; a view of one (a header of
// another pool), freed on another thread, returns it with its last view.
TEST(PacketPool, BuffersFreedOnOtherThreadsReturnToTheirPool) {
  PacketPool pool({.num_buffers = 64, .buffer_size = 128, .returns_from_any_thread = true});
  PacketPool views({.num_buffers = 1, .buffer_size = 16, .num_views = 8});
  std::vector<PacketBuffer*> handed;
  for (int round = 0; round < 200; ++round) {
    handed.clear();
    while (PacketBuffer* p = pool.Alloc()) handed.push_back(p);
    ASSERT_EQ(handed.size(), 64u) << "round " << round;
    std::vector<std::thread> freers;
    for (int t = 0; t < 4; ++t) {
      freers.emplace_back([&, t] {
        for (size_t i = static_cast<size_t>(t); i < handed.size(); i += 4) {
          PacketPool::Free(handed[i]);
        }
      });
    }
    for (std::thread& t : freers) t.join();
  }
  pool.Reclaim();
  EXPECT_EQ(pool.num_free(), 64u);
  PacketBuffer* p = pool.Alloc();
  p->set_len(100);
  PacketBuffer* v = views.AllocView(p, 10, 20);
  ASSERT_NE(v, nullptr);
  PacketPool::Free(p);
  pool.Reclaim();
  EXPECT_EQ(pool.num_free(), 63u) << "held by its view";
  std::thread([v] { PacketPool::Free(v); }).join();
  pool.Reclaim();
  EXPECT_EQ(pool.num_free(), 64u);
}

}  // namespace
}  // namespace netfold::transport
