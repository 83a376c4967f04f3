// The ICRC hands the caller's thread back its vector registers as it found
// them: ISA-L's AVX-512 kernel returns with their upper halves in use, and
// every legacy-SSE instruction the thread runs afterwards (an application's
// BLAS, after a collective) then pays for that state (proto/icrc.cc).
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "gtest/gtest.h"
#include "proto/icrc.h"

namespace netfold::proto {
namespace {

#if defined(__x86_64__)
// XINUSE bits of the vector state a legacy-SSE instruction can stumble
// on: the upper halves of YMM0-15 (2) and of ZMM0-15 (6).
constexpr uint64_t kUpperState = (1u << 2) | (1u << 6);

// Whether XGETBV with ECX = 1 reports which state components are in use.
bool CanReadStateInUse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & bit_OSXSAVE) == 0 || (c & bit_AVX) == 0) {
    return false;
  }
  if (!__get_cpuid_count(0xD, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 2)) != 0;
}
__attribute__((target("xsave"))) uint64_t StateInUse() { return _xgetbv(1); }
__attribute__((target("avx"))) void UseUpperHalves() {
  asm volatile("vpcmpeqd %%ymm1, %%ymm1, %%ymm1" ::: "xmm1");
}
__attribute__((target("avx"))) void ZeroUpperHalves() { _mm256_zeroupper(); }
#endif

TEST(IcrcVectorState, LeavesTheUpperHalvesOfTheVectorRegistersUnused) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#else
  if (!CanReadStateInUse()) {
    GTEST_SKIP() << "this CPU does not report which vector state is in use (XGETBV 1)";
  }
  // The check itself: it sees the state used, and VZEROUPPER release it.
  UseUpperHalves();
  if ((StateInUse() & kUpperState) == 0) {
    GTEST_SKIP() << "this CPU does not track the upper halves' state";
  }
  ZeroUpperHalves();
  ASSERT_EQ(StateInUse() & kUpperState, 0u);

  // Packets of every size the kernels dispatch on, the largest a whole
  // 4 KiB payload.
  const IcrcAddresses addrs{.src_ip = 0x0A000001, .dst_ip = 0x0A000002, .src_port = 49152};
  for (size_t size : {12, 64, 300, 1024, 4096 + 12 + 40}) {
    std::vector<uint8_t> covered(size);
    for (size_t i = 0; i < size; ++i) covered[i] = static_cast<uint8_t>(i * 7);
    const uint32_t icrc = ComputeIcrc(addrs, covered);
    const uint64_t in_use = StateInUse();
    EXPECT_EQ(in_use & kUpperState, 0u)
        << size << " bytes: the ICRC left the upper halves in use (state 0x" << std::hex
        << in_use << ", icrc 0x" << icrc << ")";
  }
#endif
}

}  // namespace
}  // namespace netfold::proto
