// The ICRC hands the caller's thread back its vector registers as it found
// them: ISA-L's AVX-512 kernel returns with their upper halves in use, and
// every legacy-SSE instruction the thread runs afterwards (an application's
// BLAS, after a collective) then pays for that state (proto/icrc.cc). On a
// CPU where ISA-L runs a kernel of 128-bit registers (no VPCLMULQDQ) the
// state stays unused with or without the fix.
#include <cstdint>
#include <optional>
#include <vector>

#include "base/vector_state.h"
#include "gtest/gtest.h"
#include "proto/icrc.h"

namespace netfold::proto {
namespace {

TEST(IcrcVectorState, LeavesTheUpperHalvesOfTheVectorRegistersUnused) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#else
  if (!UpperVectorStateInUse().has_value()) {
    GTEST_SKIP() << "this CPU does not report the vector registers' upper state (XGETBV 1)";
  }
  // Packets of every size the kernels dispatch on, the largest a whole
  // 4 KiB payload.
  const IcrcAddresses addrs{.src_ip = 0x0A000001, .dst_ip = 0x0A000002, .src_port = 49152};
  for (size_t size : {12, 64, 300, 1024, 4096 + 12 + 40}) {
    std::vector<uint8_t> covered(size);
    for (size_t i = 0; i < size; ++i) covered[i] = static_cast<uint8_t>(i * 7);
    const uint32_t icrc = ComputeIcrc(addrs, covered);
    EXPECT_EQ(UpperVectorStateInUse(), std::optional<bool>(false))
        << size << " bytes: the ICRC left the upper halves in use (icrc 0x" << std::hex << icrc
        << ")";
  }
#endif
}

}  // namespace
}  // namespace netfold::proto
