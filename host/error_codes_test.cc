#include "host/error_codes.h"

#include "gtest/gtest.h"

namespace netfold::host {
namespace {

TEST(ErrorCodes, CanonicalCodesMap) {
  EXPECT_EQ(ToErrorCode(absl::OkStatus()), NETFOLD_SUCCESS);
  EXPECT_EQ(ToErrorCode(absl::InvalidArgumentError("")), NETFOLD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ToErrorCode(absl::UnimplementedError("")), NETFOLD_ERR_NOT_SUPPORTED);
  EXPECT_EQ(ToErrorCode(absl::ResourceExhaustedError("")), NETFOLD_ERR_NO_RESOURCES);
  EXPECT_EQ(ToErrorCode(absl::UnavailableError("")), NETFOLD_ERR_UNAVAILABLE);
  EXPECT_EQ(ToErrorCode(absl::DeadlineExceededError("")), NETFOLD_ERR_TIMEOUT);
  EXPECT_EQ(ToErrorCode(absl::AbortedError("")), NETFOLD_ERR_ABORTED);
  EXPECT_EQ(ToErrorCode(absl::PermissionDeniedError("")), NETFOLD_ERR_PERMISSION);
  EXPECT_EQ(ToErrorCode(absl::UnauthenticatedError("")), NETFOLD_ERR_PERMISSION);
  EXPECT_EQ(ToErrorCode(absl::DataLossError("")), NETFOLD_ERR_DATA_LOSS);
  EXPECT_EQ(ToErrorCode(absl::InternalError("")), NETFOLD_ERR_INTERNAL);
}

TEST(ErrorCodes, AnAttachedCodeWins) {
  absl::Status s = WithErrorCode(absl::InvalidArgumentError("ranks disagree"), NETFOLD_ERR_MISMATCH);
  EXPECT_EQ(ToErrorCode(s), NETFOLD_ERR_MISMATCH);
  EXPECT_EQ(s.message(), "ranks disagree");
  EXPECT_TRUE(WithErrorCode(absl::OkStatus(), NETFOLD_ERR_OOB).ok());
}

TEST(ErrorCodes, EveryCodeHasAName) {
  for (int code = NETFOLD_ERR_INTERNAL; code <= NETFOLD_SUCCESS; ++code) {
    EXPECT_STRNE(ErrorCodeName(code), "unknown error code") << code;
  }
  EXPECT_STREQ(ErrorCodeName(-999), "unknown error code");
}

}  // namespace
}  // namespace netfold::host
