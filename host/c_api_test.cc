// The C API without a fabric: argument checking, error codes and messages,
// and a missing manager reported within the deadline.
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "netfold/netfold.h"

namespace {

int OneRankAllgather(void*, const void* send, void* recv, size_t bytes) {
  std::memcpy(recv, send, bytes);
  return 0;
}
int OneRankBcast(void*, void*, size_t, int) { return 0; }
int OneRankBarrier(void*) { return 0; }

netfold_init_spec_t OneRankSpec() {
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = 0;
  spec.world_size = 1;
  spec.oob.allgather = OneRankAllgather;
  spec.oob.bcast = OneRankBcast;
  spec.oob.barrier = OneRankBarrier;
  return spec;
}

TEST(CApi, InitRejectsBadArguments) {
  netfold_context_t ctx = reinterpret_cast<netfold_context_t>(1);
  EXPECT_EQ(netfold_init(nullptr, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  netfold_init_spec_t spec = OneRankSpec();
  EXPECT_EQ(netfold_init(&spec, nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  netfold_init_spec_t zeroed = spec;
  zeroed.struct_size = 0;
  EXPECT_EQ(netfold_init(&zeroed, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("struct_size"), std::string::npos);
  // A caller built before `integrity` existed passes a shorter struct: the
  // size check lets it through (it fails here on the callbacks, later).
  netfold_init_spec_t older = spec;
  older.struct_size = offsetof(netfold_init_spec_t, integrity);
  older.oob.barrier = nullptr;
  EXPECT_EQ(netfold_init(&older, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("callbacks"), std::string::npos);
  netfold_init_spec_t no_oob = spec;
  no_oob.oob.barrier = nullptr;
  EXPECT_EQ(netfold_init(&no_oob, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("callbacks"), std::string::npos);
  netfold_init_spec_t bad_rank = spec;
  bad_rank.rank = 3;
  EXPECT_EQ(netfold_init(&bad_rank, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  netfold_init_spec_t bad_timeout = spec;
  bad_timeout.timeout_ms = -5;
  EXPECT_EQ(netfold_init(&bad_timeout, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
}

TEST(CApi, BadEnvironmentIsAClearError) {
  netfold_init_spec_t spec = OneRankSpec();
  netfold_context_t ctx = nullptr;
  setenv("NETFOLD_TIMEOUT_MS", "soon", 1);
  EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_TIMEOUT_MS"), std::string::npos);
  unsetenv("NETFOLD_TIMEOUT_MS");
  setenv("NETFOLD_INTEGRITY", "perhaps", 1);
  EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_INTEGRITY"), std::string::npos);
  unsetenv("NETFOLD_INTEGRITY");
  setenv("NETFOLD_DELIVERY", "carrier-pigeon", 1);
  EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  unsetenv("NETFOLD_DELIVERY");
  setenv("NETFOLD_REDUCE_DATA", "some", 1);
  EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_REDUCE_DATA"), std::string::npos);
  unsetenv("NETFOLD_REDUCE_DATA");
  setenv("NETFOLD_RELEASED_REDUCES", "9", 1);
  EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_RELEASED_REDUCES"), std::string::npos);
  unsetenv("NETFOLD_RELEASED_REDUCES");
  for (const char* bad : {"two", "-1", "17"}) {
    setenv("NETFOLD_CHANNELS", bad, 1);
    EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_CHANNELS"), std::string::npos);
  }
  unsetenv("NETFOLD_CHANNELS");
  for (const char* bad : {"many", "0", "-3"}) {
    setenv("NETFOLD_MAX_GROUPS", bad, 1);
    EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_MAX_GROUPS"), std::string::npos);
  }
  unsetenv("NETFOLD_MAX_GROUPS");
  for (const char* bad : {"fast", "-1", "1000001"}) {
    setenv("NETFOLD_POLL_US", bad, 1);
    EXPECT_EQ(netfold_init(&spec, &ctx), NETFOLD_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(netfold_last_error()).find("NETFOLD_POLL_US"), std::string::npos);
  }
  unsetenv("NETFOLD_POLL_US");
}

TEST(CApi, MissingManagerFailsWithinTheDeadline) {
  netfold_init_spec_t spec = OneRankSpec();
  spec.manager = "127.0.0.1:1";  // nothing listens there
  spec.timeout_ms = 500;
  netfold_context_t ctx = reinterpret_cast<netfold_context_t>(1);
  const absl::Time start = absl::Now();
  const int rc = netfold_init(&spec, &ctx);
  EXPECT_TRUE(rc == NETFOLD_ERR_UNAVAILABLE || rc == NETFOLD_ERR_TIMEOUT) << netfold_strerror(rc);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(netfold_last_error()).find("manager"), std::string::npos)
      << netfold_last_error();
}

TEST(CApi, NullHandlesAreInvalidArguments) {
  int x = 0;
  netfold_request_t req = nullptr;
  EXPECT_EQ(netfold_allreduce(nullptr, &x, &x, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_allreduce_nb(nullptr, &x, &x, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM, &req),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_bcast(nullptr, &x, 1, NETFOLD_DTYPE_INT32, 0), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_barrier(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  size_t counts[1] = {1};
  EXPECT_EQ(netfold_allgather(nullptr, &x, &x, 1, NETFOLD_DTYPE_INT32),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_allgatherv_nb(nullptr, &x, &x, counts, NETFOLD_DTYPE_INT32, &req),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_reduce_scatter_block(nullptr, &x, &x, 1, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_reduce_scatter_nb(nullptr, &x, &x, counts, NETFOLD_DTYPE_INT32,
                                      NETFOLD_OP_SUM, &req),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_request_test(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_request_wait(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_request_free(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_progress(nullptr, 0), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_group_destroy(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_group_keep_data(nullptr, &x, nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_group_take_data(nullptr), nullptr);
  EXPECT_EQ(netfold_finalize(nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_query_caps(nullptr, nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_get_stats(nullptr, nullptr), NETFOLD_ERR_INVALID_ARGUMENT);
  netfold_group_t group = reinterpret_cast<netfold_group_t>(1);
  EXPECT_EQ(netfold_group_create(nullptr, nullptr, &group), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(group, nullptr);
}

TEST(CApi, OpSupportFollowsMpi) {
  EXPECT_EQ(netfold_op_supported(NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM), 1);
  EXPECT_EQ(netfold_op_supported(NETFOLD_DTYPE_FP32, NETFOLD_OP_BXOR), 0);
  EXPECT_EQ(netfold_op_supported(NETFOLD_DTYPE_2INT, NETFOLD_OP_MINLOC), 1);
  EXPECT_EQ(netfold_op_supported(NETFOLD_DTYPE_INT32, NETFOLD_OP_MAXLOC), 0);
  EXPECT_EQ(netfold_op_supported(static_cast<netfold_dtype_t>(0), NETFOLD_OP_SUM), 0);
  EXPECT_EQ(netfold_op_supported(NETFOLD_DTYPE_INT8, static_cast<netfold_op_t>(99)), 0);
  EXPECT_EQ(netfold_op_supported(static_cast<netfold_dtype_t>(-3), NETFOLD_OP_SUM), 0);
}

TEST(CApi, ReduceLocalFoldsLeftToRightWithTheSwitchesArithmetic) {
  // 1e8 + 1 - 1e8 in fp32: ((a + b) + c) = 0, while a + (b + c) would be 0
  // too, and (a + c) + b = 1: the order shows.
  const float a[1] = {1e8f}, b[1] = {1.0f}, c[1] = {-1e8f};
  const void* in[3] = {a, b, c};
  float out[1] = {-7};
  ASSERT_EQ(netfold_reduce_local(in, 3, out, 1, NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM),
            NETFOLD_SUCCESS);
  EXPECT_EQ(out[0], (1e8f + 1.0f) + -1e8f);
  const void* swapped[3] = {a, c, b};
  ASSERT_EQ(netfold_reduce_local(swapped, 3, out, 1, NETFOLD_DTYPE_FP32, NETFOLD_OP_SUM),
            NETFOLD_SUCCESS);
  EXPECT_EQ(out[0], 1.0f);
  int x[2] = {1, 2}, y[2] = {10, 20};
  const void* ints[2] = {x, y};
  ASSERT_EQ(netfold_reduce_local(ints, 2, x, 2, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
            NETFOLD_SUCCESS)
      << "out may be the first input";
  EXPECT_EQ(x[0], 11);
  EXPECT_EQ(x[1], 22);
  EXPECT_EQ(netfold_reduce_local(nullptr, 2, x, 2, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_reduce_local(ints, 0, x, 2, NETFOLD_DTYPE_INT32, NETFOLD_OP_SUM),
            NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(netfold_reduce_local(in, 3, out, 1, NETFOLD_DTYPE_FP32, NETFOLD_OP_BXOR),
            NETFOLD_ERR_NOT_SUPPORTED);
  EXPECT_EQ(netfold_reduce_local(in, 3, out, 1, static_cast<netfold_dtype_t>(250), NETFOLD_OP_SUM),
            NETFOLD_ERR_INVALID_ARGUMENT);
}

TEST(CApi, StrerrorNamesEveryCode) {
  EXPECT_STREQ(netfold_strerror(NETFOLD_SUCCESS), "success");
  EXPECT_STREQ(netfold_strerror(NETFOLD_ERR_MISMATCH), "ranks disagree on the operation");
  EXPECT_STREQ(netfold_strerror(12345), "unknown error code");
}

}  // namespace
