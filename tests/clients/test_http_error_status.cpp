// HTTP error answers -> the status a record counts under: the body's error.status when it is
// a gRPC code name, the HTTP status otherwise, for plain error answers and error events.
#include "cube3d/clients/http_error_status.h"

#include <gtest/gtest.h>

#include <string>

namespace cube3d {
namespace test_http_error_status {

std::string body(int code, const std::string& status) {
  return "{\"error\": {\"code\": " + std::to_string(code) + ", \"status\": \"" + status +
         "\", \"message\": \"m\"}}";
}

TEST(HttpErrorStatusTest, TheBodysStatusNamesTheCode) {
  EXPECT_EQ(status_of_http_error(429, body(429, "RESOURCE_EXHAUSTED")), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(status_of_http_error(401, body(401, "UNAUTHENTICATED")), "UNAUTHENTICATED");
  EXPECT_EQ(status_of_http_error(503, body(503, "UNAVAILABLE")), "UNAVAILABLE");
  EXPECT_EQ(status_of_http_error(504, body(504, "DEADLINE_EXCEEDED")), "DEADLINE_EXCEEDED");
  // The body wins where the HTTP status is ambiguous (400 is three codes, 500 several).
  EXPECT_EQ(status_of_http_error(400, body(400, "FAILED_PRECONDITION")), "FAILED_PRECONDITION");
  EXPECT_EQ(status_of_http_error(400, body(400, "OUT_OF_RANGE")), "OUT_OF_RANGE");
  EXPECT_EQ(status_of_http_error(500, body(500, "DATA_LOSS")), "DATA_LOSS");
  EXPECT_EQ(status_of_http_error(409, body(409, "ALREADY_EXISTS")), "ALREADY_EXISTS");
}

TEST(HttpErrorStatusTest, WhatTheServerWritesReadsBack) {
  // http_error_body's exact output (server/http/http_status.cpp), compact and ordered.
  EXPECT_EQ(
      status_of_http_error(
          429, R"({"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"queue full"}})"),
      "RESOURCE_EXHAUSTED");
}

TEST(HttpErrorStatusTest, WithoutAUsableStatusTheHttpStatusDecides) {
  // Not JSON (a proxy's HTML page), empty, another shape, a status that is no code name.
  EXPECT_EQ(status_of_http_error(502, "<html>Bad Gateway</html>"), "UNAVAILABLE");
  EXPECT_EQ(status_of_http_error(503, ""), "UNAVAILABLE");
  EXPECT_EQ(status_of_http_error(404, R"({"message": "no such path"})"), "NOT_FOUND");
  EXPECT_EQ(status_of_http_error(404, R"({"error": "not found"})"), "NOT_FOUND");
  EXPECT_EQ(status_of_http_error(429, R"({"error": {"status": 8}})"), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(status_of_http_error(429, body(429, "resource_exhausted")), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(status_of_http_error(500, body(500, "SOMETHING_ELSE")), "INTERNAL");
  EXPECT_EQ(status_of_http_error(413, "[1, 2]"), "RESOURCE_EXHAUSTED");
  // OK is no error: an error answer that says OK is read by its HTTP status.
  EXPECT_EQ(status_of_http_error(500, body(500, "OK")), "INTERNAL");
}

TEST(HttpErrorStatusTest, HttpStatusMap) {
  EXPECT_EQ(grpc_code_name_of_http_status(400), "INVALID_ARGUMENT");
  EXPECT_EQ(grpc_code_name_of_http_status(401), "UNAUTHENTICATED");
  EXPECT_EQ(grpc_code_name_of_http_status(403), "PERMISSION_DENIED");
  EXPECT_EQ(grpc_code_name_of_http_status(404), "NOT_FOUND");
  EXPECT_EQ(grpc_code_name_of_http_status(408), "DEADLINE_EXCEEDED");
  EXPECT_EQ(grpc_code_name_of_http_status(409), "ABORTED");
  EXPECT_EQ(grpc_code_name_of_http_status(413), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(grpc_code_name_of_http_status(429), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(grpc_code_name_of_http_status(499), "CANCELLED");
  EXPECT_EQ(grpc_code_name_of_http_status(500), "INTERNAL");
  EXPECT_EQ(grpc_code_name_of_http_status(501), "UNIMPLEMENTED");
  EXPECT_EQ(grpc_code_name_of_http_status(502), "UNAVAILABLE");
  EXPECT_EQ(grpc_code_name_of_http_status(503), "UNAVAILABLE");
  EXPECT_EQ(grpc_code_name_of_http_status(504), "DEADLINE_EXCEEDED");
  EXPECT_EQ(grpc_code_name_of_http_status(507), "INTERNAL");
  EXPECT_EQ(grpc_code_name_of_http_status(418), "UNKNOWN");
  EXPECT_EQ(grpc_code_name_of_http_status(302), "UNKNOWN");
}

TEST(HttpErrorStatusTest, ErrorEvents) {
  EXPECT_EQ(status_of_error_event(body(504, "DEADLINE_EXCEEDED")), "DEADLINE_EXCEEDED");
  EXPECT_EQ(status_of_error_event(body(499, "CANCELLED")), "CANCELLED");
  EXPECT_EQ(status_of_error_event(body(500, "INTERNAL")), "INTERNAL");
  // No usable status: the code field is the HTTP status.
  EXPECT_EQ(status_of_error_event(R"({"error": {"code": 503}})"), "UNAVAILABLE");
  EXPECT_EQ(status_of_error_event(R"({"error": {"code": 99999999999}})"), "UNKNOWN");
  EXPECT_EQ(status_of_error_event(R"({"error": {}})"), "UNKNOWN");
  EXPECT_EQ(status_of_error_event("not json"), "UNKNOWN");
  EXPECT_EQ(status_of_error_event(""), "UNKNOWN");
}

}  // namespace test_http_error_status
}  // namespace cube3d
