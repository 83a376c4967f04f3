#include "tests/host/fabric_rank_streams.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "reduce/reduce.h"

namespace netfold::fabric_rank {

using proto::DataType;
using proto::ReduceOp;

int g_rank = 0, g_size = 1;
std::string g_failure;

void Check(bool ok, const std::string& what) {
  if (!ok && g_failure.empty()) g_failure = what;
}

void CheckRc(int rc, const std::string& what) {
  if (rc != NETFOLD_SUCCESS && g_failure.empty()) {
    g_failure = absl::StrFormat("%s: %s: %s", what, netfold_strerror(rc), netfold_last_error());
  }
}

// Order-free inputs (see tools/demo.cc): exact in any association.
std::vector<uint8_t> Input(DataType t, ReduceOp op, int rank, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed * 7777 + static_cast<uint64_t>(rank));
  const size_t size = netfold::proto::DataTypeSize(t);
  std::vector<uint8_t> b(count * size);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = b.data() + i * size;
    const int small = static_cast<int>(rng() % 9) - 4;
    const float pm1 = rng() % 2 ? 1.0f : -1.0f;
    switch (t) {
      case DataType::kFp32: {
        float v = op == ReduceOp::kProd ? pm1 : static_cast<float>(small);
        std::memcpy(e, &v, 4);
        break;
      }
      case DataType::kFp64: {
        double v = op == ReduceOp::kProd ? pm1 : small;
        std::memcpy(e, &v, 8);
        break;
      }
      case DataType::kFp16:
      case DataType::kBf16: {
        float f = op == ReduceOp::kProd ? pm1 : static_cast<float>(small);
        uint16_t v = t == DataType::kFp16 ? netfold::reduce::FloatToFp16(f)
                                          : netfold::reduce::FloatToBf16(f);
        std::memcpy(e, &v, 2);
        break;
      }
      default:
        if (netfold::proto::IsPairType(t)) {
          std::memset(e, 0, size);
          if (t == DataType::kFloatInt) {
            float v = static_cast<float>(small);
            std::memcpy(e, &v, 4);
          } else if (t == DataType::kDoubleInt) {
            double v = small;
            std::memcpy(e, &v, 8);
          } else {
            int64_t v = small;
            std::memcpy(e, &v, netfold::proto::PairValueSize(t));
          }
          int32_t idx = rank;
          std::memcpy(e + netfold::proto::PairIndexOffset(t), &idx, 4);
        } else {
          for (size_t k = 0; k < size; ++k) e[k] = static_cast<uint8_t>(rng());
        }
    }
  }
  return b;
}

std::vector<uint8_t> Reference(DataType t, ReduceOp op, size_t count, uint64_t seed) {
  std::vector<std::vector<uint8_t>> in;
  std::vector<const void*> ptrs;
  for (int r = 0; r < g_size; ++r) in.push_back(Input(t, op, r, count, seed));
  for (auto& v : in) ptrs.push_back(v.data());
  std::vector<uint8_t> out(count * netfold::proto::DataTypeSize(t));
  (void)netfold::reduce::FoldScalarReference(t, op, out.data(), ptrs, count);
  return out;
}

// One checked operation of 1 to 3 slots' worth per block: an allreduce,
// a reduce-scatter (k % 4 == 1) or an allgather (k % 4 == 3). Returns the
// netfold code, with *wrong set if the result differed from the reference.
int CheckedOperation(netfold_group_t g, uint64_t k, bool* wrong) {
  const size_t count = 1 + (k * 97) % 700;
  const uint64_t seed = 5000 + k;
  const size_t size = static_cast<size_t>(g_size);
  std::vector<uint8_t> out, want;
  int rc = NETFOLD_SUCCESS;
  if (k % 4 == 1) {
    std::vector<uint8_t> in = Input(DataType::kInt32, ReduceOp::kSum, g_rank, count * size, seed);
    out.resize(count * 4);
    rc = netfold_reduce_scatter_block(g, in.data(), out.data(), count, NETFOLD_DTYPE_INT32,
                                      NETFOLD_OP_SUM);
    const std::vector<uint8_t> all = Reference(DataType::kInt32, ReduceOp::kSum, count * size, seed);
    want.assign(all.begin() + g_rank * count * 4, all.begin() + (g_rank + 1) * count * 4);
  } else if (k % 4 == 3) {
    std::vector<uint8_t> in = Input(DataType::kInt32, ReduceOp::kSum, g_rank, count, seed);
    out.resize(count * 4 * size);
    rc = netfold_allgather(g, in.data(), out.data(), count, NETFOLD_DTYPE_INT32);
    for (int r = 0; r < g_size; ++r) {
      std::vector<uint8_t> block = Input(DataType::kInt32, ReduceOp::kSum, r, count, seed);
      want.insert(want.end(), block.begin(), block.end());
    }
  } else {
    std::vector<uint8_t> in = Input(DataType::kInt32, ReduceOp::kSum, g_rank, count, seed);
    out.resize(in.size());
    rc = netfold_allreduce(g, in.data(), out.data(), count, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM);
    want = Reference(DataType::kInt32, ReduceOp::kSum, count, seed);
  }
  *wrong = rc == NETFOLD_SUCCESS && out != want;
  return rc;
}

// NETFOLD_TEST_HOLD_AT (see the top of this file), after operation `done`.
void MaybeHold(int done) {
  static const int at = [] {
    int k = 0;
    const char* v = std::getenv("NETFOLD_TEST_HOLD_AT");
    if (v != nullptr && !absl::SimpleAtoi(v, &k)) Check(false, "NETFOLD_TEST_HOLD_AT is no number");
    return k;
  }();
  if (at <= 0 || done != at) return;
  std::printf("rank %d: holding at %d\n", g_rank, done);
  std::fflush(stdout);
  const char* flag = std::getenv("NETFOLD_TEST_RELEASE");
  Check(flag != nullptr, "NETFOLD_TEST_HOLD_AT without NETFOLD_TEST_RELEASE");
  for (int i = 0; flag != nullptr && i < 12000 && access(flag, F_OK) != 0; ++i) usleep(50000);
  std::printf("rank %d: resumed\n", g_rank);
  std::fflush(stdout);
}

// Checked operations on `groups` in turn until the test creates
// $NETFOLD_TEST_RELEASE (at most 10 minutes); prints "streaming" after the
// first and the tally at the end, and fails unless every one succeeded
// with the exact result. Every 20 operations the ranks agree (out of band)
// whether to stop, so that they all run the same number. Nothing runs if
// a group is missing (its creation failed at every rank alike).
void StreamUntilReleased(netfold::host::Oob& oob, const std::vector<netfold_group_t>& groups) {
  const char* flag = std::getenv("NETFOLD_TEST_RELEASE");
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  StreamResult r;
  auto stop = [&] {
    const uint8_t mine = flag == nullptr || access(flag, F_OK) == 0 || absl::Now() >= deadline;
    std::vector<uint8_t> all(static_cast<size_t>(g_size));
    if (!oob.Allgather(&mine, all.data(), 1).ok()) return true;
    for (uint8_t v : all) {
      if (v != 0) return true;
    }
    return false;
  };
  const bool all_there =
      std::find(groups.begin(), groups.end(), nullptr) == groups.end() && !groups.empty();
  for (uint64_t k = 0; all_there && (k % 20 != 0 || !stop()); ++k) {
    bool wrong = false;
    const int rc = CheckedOperation(groups[k % groups.size()], k, &wrong);
    if (rc == NETFOLD_SUCCESS && !wrong) {
      ++r.ok;
    } else if (wrong) {
      ++r.wrong;
    } else if (++r.errors == 1) {
      r.first_error = absl::StrFormat("%s: %s", netfold_strerror(rc), netfold_last_error());
    }
    if (k == 0) {
      std::printf("rank %d: streaming\n", g_rank);
      std::fflush(stdout);
    }
  }
  std::printf("rank %d: stream ok=%d errors=%d wrong=%d%s%s\n", g_rank, r.ok, r.errors, r.wrong,
              r.first_error.empty() ? "" : " first error: ", r.first_error.c_str());
  Check(flag != nullptr, "NETFOLD_TEST_RELEASE is not set");
  Check(r.ok > 0 && r.errors == 0 && r.wrong == 0, "operations failed or were wrong");
}

// One application thread's share of threads_until: checked operations on
// `g` until $NETFOLD_TEST_RELEASE exists (at most 10 minutes), the group's
// ranks agreeing every 20 operations over `g` itself (no OOB, which is not
// for two threads at once). Touches no global but stdout.
void StreamOnAThreadUntilReleased(int thread, netfold_group_t g, StreamResult* r) {
  const char* flag = std::getenv("NETFOLD_TEST_RELEASE");
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  for (uint64_t k = 0;; ++k) {
    if (k % 20 == 0) {
      const int32_t mine = flag == nullptr || access(flag, F_OK) == 0 || absl::Now() >= deadline;
      int32_t any = 1;
      const int rc = netfold_allreduce(g, &mine, &any, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_MAX);
      if (rc != NETFOLD_SUCCESS && ++r->errors == 1) {
        r->first_error = absl::StrFormat("stop vote: %s: %s", netfold_strerror(rc),
                                         netfold_last_error());
      }
      if (rc != NETFOLD_SUCCESS || any != 0) return;
    }
    bool wrong = false;
    const int rc = CheckedOperation(g, k, &wrong);
    if (rc == NETFOLD_SUCCESS && !wrong) {
      ++r->ok;
    } else if (wrong) {
      ++r->wrong;
    } else if (++r->errors == 1) {
      r->first_error = absl::StrFormat("%s: %s", netfold_strerror(rc), netfold_last_error());
    }
    if (k == 0) {
      std::printf("rank %d: thread %d: streaming\n", g_rank, thread);
      std::fflush(stdout);
    }
  }
}

StreamResult Stream(netfold_group_t g, int n, bool stop_at_error, int lag_us) {
  StreamResult r;
  for (int k = 0; k < n; ++k) {
    if (lag_us > 0) usleep(static_cast<useconds_t>(lag_us));
    bool wrong = false;
    const int rc = CheckedOperation(g, static_cast<uint64_t>(k), &wrong);
    if (rc == NETFOLD_SUCCESS && !wrong) {
      ++r.ok;
    } else if (wrong) {
      ++r.wrong;
    } else {
      ++r.errors;
      if (r.first_error.empty()) {
        r.first_error = absl::StrFormat("%s: %s", netfold_strerror(rc), netfold_last_error());
      }
      if (stop_at_error) break;
    }
    MaybeHold(k + 1);
  }
  return r;
}

// N fp32 sums of values whose magnitudes differ so much that the
// association order shows in the bits; returns a digest of every result
// (FNV-1a), or "" after an error.
std::string FloatDigest(netfold_group_t g, int n, int* errors) {
  uint64_t digest = 1469598103934665603ull;
  for (int k = 0; k < n; ++k) {
    const size_t count = 1000;
    std::mt19937_64 rng(static_cast<uint64_t>(k) * 1000003u + static_cast<uint64_t>(g_rank));
    std::vector<float> v(count);
    for (float& x : v) {
      const int exp = static_cast<int>(rng() % 40) - 20;
      x = std::ldexp(static_cast<float>(rng() % 1000000) / 1e6f - 0.5f, exp);
    }
    const int rc = netfold_allreduce(g, NETFOLD_IN_PLACE, v.data(), count, NETFOLD_DTYPE_FP32,
                                     NETFOLD_OP_SUM);
    if (rc != NETFOLD_SUCCESS) {
      ++*errors;
      CheckRc(rc, absl::StrFormat("fp32 sum %d", k));
      return "";
    }
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    for (size_t i = 0; i < count * sizeof(float); ++i) digest = (digest ^ b[i]) * 1099511628211ull;
    MaybeHold(k + 1);
  }
  return absl::StrFormat("%016x", digest);
}

}  // namespace netfold::fabric_rank
