#include "cube3d/server/http/call_context.h"

#include <chrono>
#include <string>

#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/http/whole_number.h"

namespace cube3d::http {
namespace {

constexpr const char* kTimeoutHeader = "X-Request-Timeout-Ms";
constexpr const char* kTimeoutParam = "timeout_ms";
// A year: "no limit" for practical purposes, and far from overflowing the steady clock.
constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 3600 * 1000;

SteadyClock::time_point deadline_of(const Request& req, SteadyClock::time_point now) {
  std::string text;
  std::string source;
  if (const auto header = req.headers.get(kTimeoutHeader)) {
    text = std::string(*header);
    source = std::string("header ") + kTimeoutHeader;
  } else if (const auto param = req.query_param(kTimeoutParam)) {
    text = *param;
    source = std::string("query parameter ") + kTimeoutParam;
  } else {
    return SteadyClock::time_point::max();
  }
  return now +
         std::chrono::milliseconds(whole_number(text, source, "milliseconds", 1, kMaxTimeoutMs));
}

}  // namespace

CallContext call_context_of(const Request& req, SteadyClock::time_point now) {
  CallContext call;
  call.deadline = deadline_of(req, now);
  call.transport = "http";
  call.authorization = req.headers.value_or("Authorization");
  call.traceparent = req.headers.value_or("traceparent");
  call.end_user_count = req.headers.count(kEndUserHeader);
  if (call.end_user_count > 0) call.end_user = req.headers.value_or(kEndUserHeader);
  return call;
}

Status client_went_away() {
  return Status(ErrorCode::kCancelled,
                "the client went away (it closed the connection, or read nothing within "
                "http.write_timeout_ms)");
}

}  // namespace cube3d::http
