#include "proto/control/grpc_status.h"

#include <gtest/gtest.h>

namespace netfold::control {
namespace {

TEST(GrpcStatus, EveryCanonicalCodeKeepsItsNumberBothWays) {
  for (int code = 1; code <= 16; ++code) {
    const grpc::Status g(static_cast<grpc::StatusCode>(code), "why");
    const absl::Status a = FromGrpc(g);
    EXPECT_EQ(static_cast<int>(a.code()), code);
    EXPECT_EQ(a.message(), "why");
    const grpc::Status back = ToGrpc(a);
    EXPECT_EQ(static_cast<int>(back.error_code()), code);
    EXPECT_EQ(back.error_message(), "why");
  }
  EXPECT_TRUE(FromGrpc(grpc::Status::OK, "ignored").ok());
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
}

TEST(GrpcStatus, TheContextComesBeforeTheMessage) {
  const absl::Status a =
      FromGrpc(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no credential"),
               "switch leaf0: GetCounters");
  EXPECT_TRUE(absl::IsPermissionDenied(a));
  EXPECT_EQ(a.message(), "switch leaf0: GetCounters: no credential");
}

TEST(GrpcStatus, ACodeOutsideTheCanonicalOnesIsUnknown) {
  EXPECT_EQ(CanonicalCode(17), absl::StatusCode::kUnknown);
  EXPECT_EQ(CanonicalCode(-1), absl::StatusCode::kUnknown);
  EXPECT_EQ(CanonicalCode(5), absl::StatusCode::kNotFound);
  const absl::Status a = FromGrpc(grpc::Status(static_cast<grpc::StatusCode>(42), "new"));
  EXPECT_TRUE(absl::IsUnknown(a));
  EXPECT_EQ(a.message(), "new");
  EXPECT_EQ(ToGrpc(absl::Status(static_cast<absl::StatusCode>(99), "x")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace netfold::control
