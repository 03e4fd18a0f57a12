// The HTTP/JSON front door's map from the service's codes to HTTP statuses, and its error body.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/http/http_status.h"

namespace cube3d {
namespace test_http_status {

TEST(HttpStatus, EveryCodeHasItsHttpStatus) {
  const std::vector<std::pair<ErrorCode, int>> expected = {
      {ErrorCode::kOk, 200},
      {ErrorCode::kCancelled, 499},
      {ErrorCode::kInvalidArgument, 400},
      {ErrorCode::kDeadlineExceeded, 504},
      {ErrorCode::kNotFound, 404},
      {ErrorCode::kAlreadyExists, 409},
      {ErrorCode::kPermissionDenied, 403},
      {ErrorCode::kUnauthenticated, 401},
      {ErrorCode::kResourceExhausted, 429},
      {ErrorCode::kFailedPrecondition, 409},
      {ErrorCode::kUnimplemented, 501},
      {ErrorCode::kInternal, 500},
      {ErrorCode::kUnavailable, 503},
  };
  ASSERT_EQ(expected.size(), 13u);  // every code the service has
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(http_status_of(code), http) << to_string(code);
  }
}

TEST(HttpStatus, TheHttpServersOwnAnswersHaveACode) {
  EXPECT_EQ(code_of_http_status(400), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of_http_status(431), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of_http_status(404), ErrorCode::kNotFound);
  EXPECT_EQ(code_of_http_status(405), ErrorCode::kUnimplemented);
  EXPECT_EQ(code_of_http_status(408), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(code_of_http_status(413), ErrorCode::kResourceExhausted);
  EXPECT_EQ(code_of_http_status(417), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(code_of_http_status(418), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of_http_status(502), ErrorCode::kInternal);
}

TEST(HttpStatus, ErrorBodyCarriesTheHttpCodeTheCodeNameAndTheMessage) {
  const auto body = nlohmann::json::parse(
      http_error_body(Status(ErrorCode::kInvalidArgument, "top_p must be in (0, 1], got 2")));
  ASSERT_TRUE(body.contains("error"));
  ASSERT_EQ(body.size(), 1u);
  const auto& error = body["error"];
  EXPECT_EQ(error.size(), 3u);
  EXPECT_EQ(error["code"], 400);
  EXPECT_EQ(error["status"], "INVALID_ARGUMENT");
  EXPECT_EQ(error["message"], "top_p must be in (0, 1], got 2");
  EXPECT_EQ(http_error_body(Status(ErrorCode::kNotFound, "no such path")),
            R"({"error":{"code":404,"status":"NOT_FOUND","message":"no such path"}})");
}

TEST(HttpStatus, ErrorBodyForEachClass) {
  for (const auto& [code, name] : std::vector<std::pair<ErrorCode, std::string>>{
           {ErrorCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
           {ErrorCode::kDeadlineExceeded, "DEADLINE_EXCEEDED"},
           {ErrorCode::kUnavailable, "UNAVAILABLE"},
           {ErrorCode::kCancelled, "CANCELLED"},
           {ErrorCode::kInternal, "INTERNAL"}}) {
    const auto body = nlohmann::json::parse(http_error_body(Status(code, "m")));
    EXPECT_EQ(body["error"]["code"], http_status_of(code)) << name;
    EXPECT_EQ(body["error"]["status"], name);
  }
}

TEST(HttpStatus, ErrorBodyWithAnExplicitHttpStatus) {
  // The gateway's own answers: 405, 406, 413 have no code of their own.
  const auto body =
      nlohmann::json::parse(http_error_body(405, ErrorCode::kUnimplemented, "GET is not allowed"));
  EXPECT_EQ(body["error"]["code"], 405);
  EXPECT_EQ(body["error"]["status"], "UNIMPLEMENTED");
}

TEST(HttpStatus, ErrorBodyIsValidJsonWhateverTheMessageHolds) {
  const std::string message = std::string("quote \" backslash \\ newline \n tab \t bad \xff end");
  const std::string text = http_error_body(Status(ErrorCode::kInvalidArgument, message));
  EXPECT_EQ(text.find('\n'), std::string::npos);  // one line: fits an SSE data field
  const auto body = nlohmann::json::parse(text);
  const std::string parsed = body["error"]["message"];
  EXPECT_NE(parsed.find("quote \" backslash \\ newline \n tab \t bad "), std::string::npos);
  EXPECT_NE(parsed.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD for the invalid byte
  EXPECT_NE(parsed.find(" end"), std::string::npos);
}

TEST(HttpStatus, TheServicesTrailersBecomeHeadersInTheirUsualSpelling) {
  EXPECT_EQ(http::header_case("retry-after"), "Retry-After");
  EXPECT_EQ(http::header_case("x-request-id"), "X-Request-Id");
  EXPECT_EQ(http::header_case("Retry-After"), "Retry-After");
  const http::Response response = http::status_response(
      Status(ErrorCode::kResourceExhausted, "over the key's limit"), 1, {{"retry-after", "7"}});
  // One field, spelt as HTTP answers spell it (a client reading headers as a plain table looks
  // up one spelling), with the service's value.
  size_t fields = 0;
  for (const auto& [name, value] : response.headers) {
    if (http::iequals(name, "Retry-After")) {
      ++fields;
      EXPECT_EQ(name, "Retry-After");
      EXPECT_EQ(value, "7");
    }
  }
  EXPECT_EQ(fields, 1u);
}

TEST(HttpStatus, OnlyTheSchedulersFullQueueCarriesItsRetryAfter) {
  // Known by its reason, not its words: a message that merely reads alike gets the 429's floor.
  const auto retry_after = [](const Status& status) {
    return http::status_response(status, 5, {}).headers.value_or("Retry-After");
  };
  EXPECT_EQ(retry_after(Status(queue_full("queue full (64 waiting); retry later"))), "5");
  EXPECT_EQ(retry_after(Status(ErrorCode::kResourceExhausted, "queue full, says the message")),
            "1");
  EXPECT_EQ(retry_after(Status(resource_exhausted("the answer is over limits.max_message_bytes"))),
            "1");
}

}  // namespace test_http_status
}  // namespace cube3d
