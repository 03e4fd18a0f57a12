// Logging setup. Library code logs through spdlog (never std::cout); binaries call
// setup_logging once with the level (and format) from their flags or config.
//
// Two line formats on stderr, both with RFC 3339 UTC timestamps with milliseconds:
//   text: [2026-11-30T21:40:07.123Z] [info] message
//   json: {"time":"2026-11-30T21:40:07.123Z","level":"info","message":"...","logger":"cube3d",
//          "request_id":"...","api_key":"...","trace_id":"...","span_id":"..."}
// One JSON object per line, always valid JSON whatever the message holds (quotes, newlines,
// control bytes, invalid UTF-8). The last four fields come from the LogContext of the logging
// thread and appear only when set. Levels are spdlog's names (trace, debug, info, warning, error,
// critical) in both formats.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cube3d/core/json_string.h"  // append_json_string, for the log lines

namespace spdlog::sinks {
class sink;
}  // namespace spdlog::sinks

namespace cube3d {

enum class LogFormat { kText, kJson };

// "text" or "json". Throws invalid_argument otherwise.
LogFormat parse_log_format(std::string_view name);
std::string_view to_string(LogFormat format);

// level: trace, debug, info, warn, error, critical, off. Throws invalid_argument otherwise.
// Logs go to stderr so that tools can keep stdout for their results. Makes the "cube3d" logger
// the default one; call it before other threads log.
void setup_logging(const std::string& level, LogFormat format = LogFormat::kText);

// setup_logging with the "cube3d" logger writing to `sink` instead of stderr (tests capture the
// lines with an ostream sink).
void setup_logging_to(std::shared_ptr<spdlog::sinks::sink> sink, const std::string& level,
                      LogFormat format);

// A W3C Trace Context traceparent header: "<version>-<trace-id>-<parent-id>-<trace-flags>".
struct TraceParent {
  uint8_t version = 0;
  std::string trace_id;   // 32 lowercase hex digits, not all zero
  std::string parent_id;  // 16 lowercase hex digits, not all zero (the caller's span)
  uint8_t flags = 0;      // bit 0: sampled
};

// Parses a traceparent value per the W3C Trace Context spec: version 00 is exactly 55 characters;
// a later version (any but ff) may be longer, in which case its first four fields are read and a
// '-' must follow them. Lowercase hex only; an all-zero trace-id or parent-id, and version ff,
// are invalid. Spaces and tabs around the value (HTTP's optional whitespace) are ignored.
// nullopt when invalid: callers then simply have no trace id.
std::optional<TraceParent> parse_traceparent(std::string_view value);

// The fields a LogContext sets; empty strings are not set.
// (Default member initializers: designated initializers may leave any of them out without
// -Wmissing-field-initializers. Designators must keep this order.)
struct LogFields {
  std::string request_id = {};
  std::string api_key = {};      // the API key's NAME (from the key file), never the key itself
  std::string traceparent = {};  // a W3C traceparent header value; ignored when invalid
};

// The context of the log lines of one thread: a RAII scope.
//   LogContext scope({.request_id = id, .api_key = key_name, .traceparent = header});
// sets the fields for every log call on this thread until `scope` is destroyed, which restores
// the previous ones. Scopes nest: an inner scope starts from the enclosing one's fields and
// replaces those it sets. JSON lines carry the fields (the text format does not). The formatter
// reads them on the logging thread: synchronous loggers only (ours are).
class LogContext {
 public:
  explicit LogContext(const LogFields& fields);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

  // Update a field of this thread's innermost scope (e.g. the request id once it is validated),
  // until that scope ends. No effect outside any scope, so that nothing leaks into later work of
  // a pooled thread.
  static void set_request_id(std::string_view request_id);
  static void set_api_key(std::string_view api_key_name);
  static void set_traceparent(std::string_view traceparent);  // invalid: clears the trace

  // This thread's current fields (empty outside any scope).
  struct Current {
    std::string request_id;
    std::string api_key;
    std::optional<TraceParent> trace;
  };
  static const Current& current();

 private:
  Current previous_;
};

}  // namespace cube3d
