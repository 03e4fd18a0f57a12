#include "cube3d/core/logging.h"

#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

constexpr std::string_view kLoggerName = "cube3d";
constexpr std::string_view kTextPattern = "[%Y-%m-%dT%H:%M:%S.%eZ] [%^%l%$] %v";

spdlog::level::level_enum parse_level(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  // from_str answers "off" for anything it does not know; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    throw invalid_argument("log level '" + level +
                           "' is not one of trace, debug, info, warn, error, critical, off");
  }
  return parsed;
}

// "2026-11-30T21:40:07.123Z": RFC 3339, UTC, milliseconds.
void append_rfc3339_utc_ms(std::string& out, spdlog::log_clock::time_point time) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const auto since_epoch = time.time_since_epoch();
  const auto whole = std::chrono::floor<seconds>(since_epoch);
  const auto ms = duration_cast<milliseconds>(since_epoch - whole).count();
  const std::time_t t = static_cast<std::time_t>(whole.count());
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buffer[40];
  const int n = std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                              utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                              utc.tm_min, utc.tm_sec, static_cast<int>(ms));
  if (n > 0) out.append(buffer, std::min(static_cast<size_t>(n), sizeof buffer - 1));
}

void append_field(std::string& line, std::string_view name, std::string_view value) {
  line += ',';
  append_json_string(line, name);
  line += ':';
  append_json_string(line, value);
}

thread_local LogContext::Current tl_context;
thread_local int tl_depth = 0;

// One JSON object per line: time, level, message, logger, then this thread's LogContext fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line;
    line.reserve(160 + msg.payload.size());
    line += "{\"time\":\"";
    append_rfc3339_utc_ms(line, msg.time);
    line += '"';
    const auto level = spdlog::level::to_string_view(msg.level);
    append_field(line, "level", std::string_view(level.data(), level.size()));
    append_field(line, "message", std::string_view(msg.payload.data(), msg.payload.size()));
    append_field(line, "logger", std::string_view(msg.logger_name.data(), msg.logger_name.size()));
    const auto& context = LogContext::current();
    if (!context.request_id.empty()) append_field(line, "request_id", context.request_id);
    if (!context.api_key.empty()) append_field(line, "api_key", context.api_key);
    if (context.trace) {
      append_field(line, "trace_id", context.trace->trace_id);
      append_field(line, "span_id", context.trace->parent_id);
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::unique_ptr<spdlog::formatter> make_formatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  return std::make_unique<spdlog::pattern_formatter>(std::string(kTextPattern),
                                                     spdlog::pattern_time_type::utc);
}

bool is_lower_hex(std::string_view text) {
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool is_all_zero(std::string_view text) { return text.find_first_not_of('0') == text.npos; }

uint8_t hex_byte(std::string_view two) {
  const auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  return static_cast<uint8_t>(digit(two[0]) * 16 + digit(two[1]));
}

}  // namespace

LogFormat parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  throw invalid_argument("log format '" + std::string(name) + "' is not one of text, json");
}

std::string_view to_string(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

void setup_logging_to(std::shared_ptr<spdlog::sinks::sink> sink, const std::string& level,
                      LogFormat format) {
  const auto parsed = parse_level(level);
  auto logger = std::make_shared<spdlog::logger>(std::string(kLoggerName), std::move(sink));
  // Replaces (and registers) the default logger, a former "cube3d" one included.
  spdlog::set_default_logger(std::move(logger));
  spdlog::set_formatter(make_formatter(format));
  spdlog::set_level(parsed);
}

void setup_logging(const std::string& level, LogFormat format) {
  parse_level(level);  // before touching the loggers
  // JSON goes out uncoloured: a collector reads it, and colour codes would only be noise.
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (format == LogFormat::kJson) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  }
  setup_logging_to(std::move(sink), level, format);
}

std::optional<TraceParent> parse_traceparent(std::string_view value) {
  const auto first = value.find_first_not_of(" \t");
  if (first == value.npos) return std::nullopt;
  value = value.substr(first, value.find_last_not_of(" \t") - first + 1);
  // version "-" trace-id "-" parent-id "-" trace-flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr size_t kLength = 55;
  if (value.size() < kLength) return std::nullopt;
  const std::string_view version = value.substr(0, 2);
  if (!is_lower_hex(version) || version == "ff") return std::nullopt;
  if (version == "00" ? value.size() != kLength : value.size() > kLength && value[kLength] != '-') {
    return std::nullopt;
  }
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  const std::string_view trace_id = value.substr(3, 32);
  const std::string_view parent_id = value.substr(36, 16);
  const std::string_view flags = value.substr(53, 2);
  if (!is_lower_hex(trace_id) || is_all_zero(trace_id)) return std::nullopt;
  if (!is_lower_hex(parent_id) || is_all_zero(parent_id)) return std::nullopt;
  if (!is_lower_hex(flags)) return std::nullopt;
  return TraceParent{.version = hex_byte(version),
                     .trace_id = std::string(trace_id),
                     .parent_id = std::string(parent_id),
                     .flags = hex_byte(flags)};
}

LogContext::LogContext(const LogFields& fields) {
  Current next = tl_context;
  if (!fields.request_id.empty()) next.request_id = fields.request_id;
  if (!fields.api_key.empty()) next.api_key = fields.api_key;
  if (!fields.traceparent.empty()) next.trace = parse_traceparent(fields.traceparent);
  previous_ = std::exchange(tl_context, std::move(next));
  ++tl_depth;
}

LogContext::~LogContext() {
  tl_context = std::move(previous_);
  --tl_depth;
}

void LogContext::set_request_id(std::string_view request_id) {
  if (tl_depth > 0) tl_context.request_id = request_id;
}

void LogContext::set_api_key(std::string_view api_key_name) {
  if (tl_depth > 0) tl_context.api_key = api_key_name;
}

void LogContext::set_traceparent(std::string_view traceparent) {
  if (tl_depth > 0) tl_context.trace = parse_traceparent(traceparent);
}

const LogContext::Current& LogContext::current() { return tl_context; }

}  // namespace cube3d
