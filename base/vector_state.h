// Whether the calling thread's vector registers have their upper halves in
// use (x86-64: XGETBV with ECX = 1, the XINUSE bitmap). A library that runs
// AVX code on an application's thread must hand it back unused: legacy-SSE
// instructions run afterwards pay for that state (proto/icrc.cc). Header
// only, so that programs that link nothing of netfold's (the MPI test
// programs) can check it too.
//
//   if (auto in_use = netfold::UpperVectorStateInUse(); in_use && *in_use) ...
#ifndef NETFOLD_BASE_VECTOR_STATE_H_
#define NETFOLD_BASE_VECTOR_STATE_H_

#include <cstdint>
#include <optional>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace netfold {

#if defined(__x86_64__)
namespace vector_state_internal {
// XINUSE bits a legacy-SSE instruction can stumble on: the upper halves of
// YMM0-15 (2) and of ZMM0-15 (6). Not ZMM16-31 (7): SSE code cannot reach
// them, and VZEROUPPER does not clear them.
inline constexpr uint64_t kUpperState = (1u << 2) | (1u << 6);
__attribute__((target("xsave"))) inline uint64_t StateInUse() { return _xgetbv(1); }
inline bool CanReadStateInUse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & bit_OSXSAVE) == 0 || (c & bit_AVX) == 0) {
    return false;
  }
  if (!__get_cpuid_count(0xD, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 2)) != 0;
}
}  // namespace vector_state_internal
#endif

// True or false on a CPU that reports it; nullopt where it cannot be known
// (not x86-64, no AVX, no XGETBV 1, or a CPU that does not show the state
// coming and going: the SDM lets XINUSE stay set). The reading comes first;
// the check that the CPU tracks the state runs after it (it leaves the
// upper halves unused).
inline std::optional<bool> UpperVectorStateInUse() {
#if defined(__x86_64__)
  using namespace vector_state_internal;
  if (!CanReadStateInUse()) return std::nullopt;
  const bool in_use = (StateInUse() & kUpperState) != 0;
  // Plain asm, not an AVX function: the compiler would end that with its
  // own VZEROUPPER.
  asm volatile("vpcmpeqd %%ymm1, %%ymm1, %%ymm1" ::: "xmm1");
  const bool seen_used = (StateInUse() & kUpperState) != 0;
  asm volatile("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
               "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  const bool seen_unused = (StateInUse() & kUpperState) == 0;
  if (!seen_used || !seen_unused) return std::nullopt;
  return in_use;
#else
  return std::nullopt;
#endif
}

}  // namespace netfold

#endif  // NETFOLD_BASE_VECTOR_STATE_H_
