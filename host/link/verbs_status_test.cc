#include "host/link/verbs_status.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace netfold::host {
namespace {

using ::testing::HasSubstr;

TEST(VerbsStatus, SuccessIsOk) {
  EXPECT_TRUE(StatusFromCompletion(IBV_WC_SUCCESS, 0, "x").ok());
}

TEST(VerbsStatus, ASwitchThatStopsAnsweringIsUnavailable) {
  for (ibv_wc_status s : {IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_RESP_TIMEOUT_ERR,
                          IBV_WC_WR_FLUSH_ERR}) {
    absl::Status status = StatusFromCompletion(s, 0x51, "a request");
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << s;  // NETFOLD_ERR_UNAVAILABLE
        EXPECT_THAT(std::string(status.message()), HasSubstr("a request"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(ibv_wc_status_str(s)));
    EXPECT_THAT(std::string(status.message()), HasSubstr("0x51"));
  }
  EXPECT_THAT(std::string(StatusFromCompletion(IBV_WC_RETRY_EXC_ERR, 0, "r").message()),
              HasSubstr("stopped acknowledging"));
}

TEST(VerbsStatus, RefusalsAreProtocolMismatches) {
  for (ibv_wc_status s : {IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR}) {
    absl::Status status = StatusFromCompletion(s, 0, "a request");
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << s;  // NETFOLD_ERR_INTERNAL
    EXPECT_THAT(std::string(status.message()), HasSubstr("path MTU"));
  }
  EXPECT_EQ(StatusFromCompletion(IBV_WC_LOC_LEN_ERR, 0, "a result").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(StatusFromCompletion(IBV_WC_LOC_PROT_ERR, 0, "a request").code(),
            absl::StatusCode::kInternal);
}

TEST(VerbsStatus, ErrnoMapsToCanonicalCodes) {
  EXPECT_EQ(StatusFromErrno(ENOMEM, "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusFromErrno(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromErrno(ENODEV, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusFromErrno(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromErrno(ETIMEDOUT, "x").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusFromErrno(EAGAIN, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromErrno(EOPNOTSUPP, "x").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(StatusFromErrno(EIO, "x").code(), absl::StatusCode::kInternal);
  absl::Status s = StatusFromErrno(EINVAL, "moving the RC QP to RTR");
  EXPECT_THAT(std::string(s.message()), HasSubstr("moving the RC QP to RTR"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("errno 22"));
}

TEST(VerbsStatus, OnlyFatalAsyncEventsFailTheLink) {
  for (ibv_event_type e : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
                           IBV_EVENT_PORT_ERR, IBV_EVENT_DEVICE_FATAL, IBV_EVENT_CQ_ERR}) {
    absl::Status s = StatusFromAsyncEvent(e);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << e;
    EXPECT_THAT(std::string(s.message()), HasSubstr(ibv_event_type_str(e)));
  }
  for (ibv_event_type e : {IBV_EVENT_PORT_ACTIVE, IBV_EVENT_LID_CHANGE, IBV_EVENT_GID_CHANGE,
                           IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_CLIENT_REREGISTER}) {
    EXPECT_TRUE(StatusFromAsyncEvent(e).ok()) << e;
  }
}

}  // namespace
}  // namespace netfold::host
