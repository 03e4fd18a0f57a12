// The service boundary's error mapping: every cube3d::ErrorCode becomes the gRPC status code
// clients expect, the message travels unchanged, and status names read as gRPC spells them.
#include "cube3d/api/grpc_status.h"

#include <grpcpp/support/status.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_grpc_status {

// Every ErrorCode with the gRPC code it must become.
const std::vector<std::pair<ErrorCode, grpc::StatusCode>>& expected_mapping() {
  static const std::vector<std::pair<ErrorCode, grpc::StatusCode>> mapping = {
      {ErrorCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {ErrorCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {ErrorCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {ErrorCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {ErrorCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {ErrorCode::kInternal, grpc::StatusCode::INTERNAL},
      {ErrorCode::kCancelled, grpc::StatusCode::CANCELLED},
      {ErrorCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {ErrorCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
  };
  return mapping;
}

TEST(GrpcStatusTest, EveryErrorCodeMapsToItsGrpcCode) {
  for (const auto& [ours, theirs] : expected_mapping()) {
    SCOPED_TRACE(std::string(to_string(ours)));
    EXPECT_EQ(to_grpc_code(ours), theirs);
  }
}

TEST(GrpcStatusTest, MappedCodeHasTheSameNameAsTheErrorCode) {
  // ErrorCode names follow gRPC's, so the status name a client sees is the code's own name.
  for (const auto& entry : expected_mapping()) {
    const ErrorCode ours = entry.first;
    EXPECT_EQ(std::string(grpc_code_name(to_grpc_code(ours))), std::string(to_string(ours)));
  }
}

TEST(GrpcStatusTest, StatusKeepsTheCodeAndTheMessage) {
  for (const auto& [ours, theirs] : expected_mapping()) {
    SCOPED_TRACE(std::string(to_string(ours)));
    const std::string message = "prompt is empty (" + std::string(to_string(ours)) + ")";
    const grpc::Status status = to_grpc_status(Error(ours, message));
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(status.error_code(), theirs);
    EXPECT_EQ(status.error_message(), message);
  }
}

TEST(GrpcStatusTest, StatusFromShorthandConstructorsKeepsTheMessage) {
  const grpc::Status status = to_grpc_status(invalid_argument("top_p must be in (0, 1], got 2"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "top_p must be in (0, 1], got 2");

  const grpc::Status unavailable_status = to_grpc_status(unavailable("shutting down"));
  EXPECT_EQ(unavailable_status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(unavailable_status.error_message(), "shutting down");
}

TEST(GrpcStatusTest, StatusKeepsAnEmptyMessageAndNonAsciiText) {
  const grpc::Status empty = to_grpc_status(Error(ErrorCode::kInternal, ""));
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(empty.error_message(), "");

  const std::string text = "prompt \xe6\xa4\x85\xe5\xad\x90: bad\nnext line";
  EXPECT_EQ(to_grpc_status(invalid_argument(text)).error_message(), text);
}

TEST(GrpcStatusTest, OutOfRangeErrorCodeMapsToUnknown) {
  EXPECT_EQ(to_grpc_code(static_cast<ErrorCode>(99)), grpc::StatusCode::UNKNOWN);
}

// A code with the name it must have: its enumerator as gRPC spells it.
#define SPELLED(code) std::pair<grpc::StatusCode, const char*>(grpc::StatusCode::code, #code)

void expect_names(const std::vector<std::pair<grpc::StatusCode, const char*>>& names) {
  for (const auto& [code, name] : names) {
    SCOPED_TRACE(name);
    EXPECT_STREQ(grpc_code_name(code), name);
  }
}

TEST(GrpcStatusTest, CodeNamesForCommonCodes) {
  expect_names({SPELLED(OK), SPELLED(CANCELLED), SPELLED(INVALID_ARGUMENT),
                SPELLED(DEADLINE_EXCEEDED), SPELLED(NOT_FOUND), SPELLED(RESOURCE_EXHAUSTED),
                SPELLED(UNAVAILABLE), SPELLED(INTERNAL)});
}

TEST(GrpcStatusTest, CodeNamesForCodesThisServerNeverProduces) {
  expect_names({SPELLED(UNKNOWN), SPELLED(ALREADY_EXISTS), SPELLED(PERMISSION_DENIED),
                SPELLED(UNAUTHENTICATED), SPELLED(ABORTED), SPELLED(OUT_OF_RANGE),
                SPELLED(DATA_LOSS)});
}

#undef SPELLED

TEST(GrpcStatusTest, CodeNameOfAnUnlistedValueIsUnknown) {
  EXPECT_STREQ(grpc_code_name(static_cast<grpc::StatusCode>(1234)), "UNKNOWN");
}

}  // namespace test_grpc_status
}  // namespace cube3d
