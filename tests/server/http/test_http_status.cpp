// The HTTP/JSON front door's map from gRPC codes to HTTP statuses, and its error body.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/http/http_status.h"

namespace cube3d {
namespace test_http_status {

TEST(HttpStatus, EveryGrpcCodeHasItsHttpStatus) {
  const std::vector<std::pair<grpc::StatusCode, int>> expected = {
      {grpc::StatusCode::OK, 200},
      {grpc::StatusCode::CANCELLED, 499},
      {grpc::StatusCode::UNKNOWN, 500},
      {grpc::StatusCode::INVALID_ARGUMENT, 400},
      {grpc::StatusCode::DEADLINE_EXCEEDED, 504},
      {grpc::StatusCode::NOT_FOUND, 404},
      {grpc::StatusCode::ALREADY_EXISTS, 409},
      {grpc::StatusCode::PERMISSION_DENIED, 403},
      {grpc::StatusCode::UNAUTHENTICATED, 401},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, 429},
      {grpc::StatusCode::FAILED_PRECONDITION, 400},
      {grpc::StatusCode::ABORTED, 409},
      {grpc::StatusCode::OUT_OF_RANGE, 400},
      {grpc::StatusCode::UNIMPLEMENTED, 501},
      {grpc::StatusCode::INTERNAL, 500},
      {grpc::StatusCode::UNAVAILABLE, 503},
      {grpc::StatusCode::DATA_LOSS, 500},
  };
  ASSERT_EQ(expected.size(), 17u);  // every code gRPC defines
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(http_status_of(code), http) << "gRPC code " << static_cast<int>(code);
  }
  // A code from a newer gRPC than this map knows: a server error, not a crash.
  EXPECT_EQ(http_status_of(static_cast<grpc::StatusCode>(99)), 500);
}

TEST(HttpStatus, ErrorBodyCarriesTheHttpCodeTheGrpcNameAndTheMessage) {
  const auto body = nlohmann::json::parse(http_error_body(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in (0, 1], got 2")));
  ASSERT_TRUE(body.contains("error"));
  ASSERT_EQ(body.size(), 1u);
  const auto& error = body["error"];
  EXPECT_EQ(error.size(), 3u);
  EXPECT_EQ(error["code"], 400);
  EXPECT_EQ(error["status"], "INVALID_ARGUMENT");
  EXPECT_EQ(error["message"], "top_p must be in (0, 1], got 2");
  EXPECT_EQ(http_error_body(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such path")),
            R"({"error":{"code":404,"status":"NOT_FOUND","message":"no such path"}})");
}

TEST(HttpStatus, ErrorBodyForEachClass) {
  for (const auto& [code, name] : std::vector<std::pair<grpc::StatusCode, std::string>>{
           {grpc::StatusCode::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
           {grpc::StatusCode::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
           {grpc::StatusCode::UNAVAILABLE, "UNAVAILABLE"},
           {grpc::StatusCode::CANCELLED, "CANCELLED"},
           {grpc::StatusCode::INTERNAL, "INTERNAL"}}) {
    const auto body = nlohmann::json::parse(http_error_body(grpc::Status(code, "m")));
    EXPECT_EQ(body["error"]["code"], http_status_of(code)) << name;
    EXPECT_EQ(body["error"]["status"], name);
  }
}

TEST(HttpStatus, ErrorBodyWithAnExplicitHttpStatus) {
  // The gateway's own answers: 405, 406, 413 have no gRPC code of their own.
  const auto body = nlohmann::json::parse(
      http_error_body(405, grpc::StatusCode::UNIMPLEMENTED, "GET is not allowed"));
  EXPECT_EQ(body["error"]["code"], 405);
  EXPECT_EQ(body["error"]["status"], "UNIMPLEMENTED");
}

TEST(HttpStatus, ErrorBodyIsValidJsonWhateverTheMessageHolds) {
  const std::string message = std::string("quote \" backslash \\ newline \n tab \t bad \xff end");
  const std::string text =
      http_error_body(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message));
  EXPECT_EQ(text.find('\n'), std::string::npos);  // one line: fits an SSE data field
  const auto body = nlohmann::json::parse(text);
  const std::string parsed = body["error"]["message"];
  EXPECT_NE(parsed.find("quote \" backslash \\ newline \n tab \t bad "), std::string::npos);
  EXPECT_NE(parsed.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD for the invalid byte
  EXPECT_NE(parsed.find(" end"), std::string::npos);
}

}  // namespace test_http_status
}  // namespace cube3d
