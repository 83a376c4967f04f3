// Internal: pins the floating-point environment the reduction kernels
// compute in, whatever the caller set.
//
//   {
//     FpEnvGuard guard;  // round to nearest even, no FTZ/DAZ, traps masked
//     ... floating-point arithmetic ...
//   }                    // the caller's environment is back
//
// A process linked with -ffast-math/-Ofast (crtfastmath.o) runs with
// flush-to-zero and denormals-are-zero on x86; a library may change the
// rounding mode or unmask exceptions. Without this guard a host-side
// fallback in such a process would produce other bits than the switch.
// On x86 the guard costs one STMXCSR when the environment is already the
// default (the common case), and an LDMXCSR pair otherwise. Elsewhere it
// pins the rounding mode only (<cfenv>). Exception flags raised inside the
// guarded region are not part of any contract. Not copyable; thread-local by
// nature (the FP environment is per thread).
#ifndef NETFOLD_REDUCE_FP_ENV_H_
#define NETFOLD_REDUCE_FP_ENV_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#else
#include <cfenv>
#endif

namespace netfold::reduce::internal {

class FpEnvGuard {
 public:
  FpEnvGuard() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    if ((saved_ & kControlMask) != kDefaultControl) {
      _mm_setcsr((saved_ & ~kControlMask) | kDefaultControl);
      changed_ = true;
    }
#else
    saved_ = std::fegetround();
    if (saved_ != FE_TONEAREST) {
      std::fesetround(FE_TONEAREST);
      changed_ = true;
    }
#endif
  }

  ~FpEnvGuard() {
    if (!changed_) return;
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved_);
#else
    std::fesetround(saved_);
#endif
  }

  FpEnvGuard(const FpEnvGuard&) = delete;
  FpEnvGuard& operator=(const FpEnvGuard&) = delete;

#if defined(__x86_64__) || defined(__i386__)
  // MXCSR: bits 0-5 exception flags, 6 DAZ, 7-12 exception masks, 13-14
  // rounding control, 15 FTZ. The default control: all exceptions masked,
  // round to nearest even, FTZ and DAZ off.
  static constexpr unsigned kControlMask = 0xFFC0u;
  static constexpr unsigned kDefaultControl = 0x1F80u;
#endif

 private:
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved_ = 0;  // MXCSR
#else
  int saved_ = 0;  // rounding mode
#endif
  bool changed_ = false;
};

}  // namespace netfold::reduce::internal

#endif  // NETFOLD_REDUCE_FP_ENV_H_
