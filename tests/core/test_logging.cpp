// Log lines: the text and JSON formats (UTC RFC 3339 timestamps), JSON that stays one valid line
// whatever the message holds, the thread-local LogContext fields and their scopes, and the W3C
// traceparent parser.
#include "cube3d/core/logging.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_logging {

constexpr std::string_view kSpecExample = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS.mmmZ", read as UTC.
double parse_utc(const std::string& time) {
  std::tm tm{};
  int ms = 0;
  EXPECT_EQ(std::sscanf(time.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                        &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms),
            7)
      << time;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const std::regex& rfc3339_ms_utc() {
  static const std::regex re(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$)");
  return re;
}

class LoggingTest : public ::testing::Test {
 protected:
  void use(LogFormat format, const std::string& level = "trace") {
    out_.str("");
    setup_logging_to(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_), level, format);
  }
  void TearDown() override { setup_logging("warn"); }  // before out_ goes away

  std::vector<std::string> lines() const { return split_lines(out_.str()); }

  // The only line logged since the last call, parsed (and checked to be one JSON object).
  nlohmann::json one_json_line() {
    const std::string text = out_.str();
    out_.str("");
    const auto all = split_lines(text);
    EXPECT_EQ(all.size(), 1u) << text;
    EXPECT_FALSE(text.empty() || text.back() != '\n') << text;
    if (all.size() != 1) return nullptr;
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(all.front());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << all.front() << ": " << e.what();
      return nullptr;
    }
    EXPECT_TRUE(parsed.is_object()) << all.front();
    return parsed;
  }

  // The JSON line of one message logged in JSON inside a scope with these fields.
  nlohmann::json json_line_in_scope(const LogFields& fields) {
    use(LogFormat::kJson);
    const LogContext scope(fields);
    spdlog::info("m");
    return one_json_line();
  }

  std::ostringstream out_;
};

TEST_F(LoggingTest, JsonLinesCarryTimeLevelMessageAndLogger) {
  use(LogFormat::kJson);
  const double before = now_seconds();
  spdlog::info("model loaded in {} s", 12);
  const auto line = one_json_line();
  ASSERT_TRUE(line.is_object());
  EXPECT_EQ(line.size(), 4u) << line;
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["message"], "model loaded in 12 s");
  EXPECT_EQ(line["logger"], "cube3d");
  const std::string time = line["time"];
  EXPECT_TRUE(std::regex_match(time, rfc3339_ms_utc())) << time;
  EXPECT_GE(parse_utc(time), before - 1.0);
  EXPECT_LE(parse_utc(time), now_seconds() + 1.0);
}

TEST_F(LoggingTest, JsonKeysComeInAFixedOrder) {
  use(LogFormat::kJson);
  spdlog::warn("x");
  const std::string text = out_.str();
  EXPECT_EQ(text.rfind("{\"time\":\"", 0), 0u) << text;
  EXPECT_NE(text.find("\",\"level\":\"warning\",\"message\":\"x\",\"logger\":\"cube3d\"}\n"),
            std::string::npos)
      << text;
}

TEST_F(LoggingTest, TimestampsAreUtcWhateverTheLocalZone) {
  const char* const old = std::getenv("TZ");
  const std::string saved = old ? old : "";
  setenv("TZ", "XYZ+07:30", 1);  // far from UTC, with a half hour
  tzset();
  use(LogFormat::kJson);
  spdlog::info("json");
  const std::string json_time = one_json_line()["time"];
  use(LogFormat::kText);
  spdlog::info("text");
  const auto text_lines = lines();
  if (old) {
    setenv("TZ", saved.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
  EXPECT_NEAR(parse_utc(json_time), now_seconds(), 5.0) << json_time;
  ASSERT_EQ(text_lines.size(), 1u);
  EXPECT_NEAR(parse_utc(text_lines[0].substr(1, 24)), now_seconds(), 5.0) << text_lines[0];
}

TEST_F(LoggingTest, LevelsFilterAndAreNamed) {
  use(LogFormat::kJson, "info");
  spdlog::debug("hidden");
  spdlog::info("a");
  spdlog::warn("b");
  spdlog::error("c");
  spdlog::critical("d");
  const auto all = lines();
  ASSERT_EQ(all.size(), 4u) << out_.str();
  const std::vector<std::string> levels = {"info", "warning", "error", "critical"};
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(nlohmann::json::parse(all[i])["level"], levels[i]);
  }
}

TEST_F(LoggingTest, HostileMessagesStayOneValidLine) {
  use(LogFormat::kJson);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"say \"hi\"", "say \"hi\""},
      {"back\\slash", "back\\slash"},
      {"two\nlines\r\n", "two\nlines\r\n"},
      {"tab\tbell\x07\x01 esc\x1b[31m del\x7f nul" + std::string(1, '\0') + "!",
       "tab\tbell\x07\x01 esc\x1b[31m del\x7f nul" + std::string(1, '\0') + "!"},
      {"bad \xff byte", "bad \xEF\xBF\xBD byte"},
      {"cut \xE6\x97", "cut \xEF\xBF\xBD\xEF\xBF\xBD"},
      {"surrogate \xED\xA0\x80!", "surrogate \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!"},
      {"x\"}{\"level\":\"error\",\"message\":\"forged",
       "x\"}{\"level\":\"error\",\"message\":\"forged"},
      {"naïve 日本 🐉 \u2028", "naïve 日本 🐉 \u2028"},
      {"", ""},
  };
  for (const auto& [message, expected] : cases) {
    spdlog::info("{}", message);
    const auto line = one_json_line();
    ASSERT_TRUE(line.is_object()) << message;
    EXPECT_EQ(line["message"], expected) << message;
    EXPECT_EQ(line["level"], "info");
    EXPECT_EQ(line.size(), 4u);
  }
}

TEST(JsonString, EscapesPerRfc8259) {
  const auto quoted = [](std::string_view text) {
    std::string out = "prefix:";
    append_json_string(out, text);
    return out;
  };
  EXPECT_EQ(quoted(""), "prefix:\"\"");
  EXPECT_EQ(quoted("plain"), "prefix:\"plain\"");
  EXPECT_EQ(quoted("\"\\/"), R"(prefix:"\"\\/")");
  EXPECT_EQ(quoted("\b\f\n\r\t"), R"(prefix:"\b\f\n\r\t")");
  EXPECT_EQ(quoted(std::string_view("\0\x01\x1f\x7f", 4)), R"(prefix:"\u0000\u0001\u001f\u007f")");
  EXPECT_EQ(quoted("\x20~"), "prefix:\" ~\"");
  EXPECT_EQ(quoted("é日🐉"), "prefix:\"é日🐉\"");  // valid UTF-8 passes through
  EXPECT_EQ(quoted("\xff"), "prefix:\"\xEF\xBF\xBD\"");
  EXPECT_EQ(quoted("a\x80"
                   "b\xC0\xAF"
                   "c"),
            "prefix:\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD"
            "c\"");
  EXPECT_EQ(quoted("\xF4\x90\x80\x80"),  // above U+10FFFF
            "prefix:\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_EQ(quoted("end\xE6"), "prefix:\"end\xEF\xBF\xBD\"");
}

TEST(JsonString, EveryByteGivesValidJson) {
  for (int b = 0; b < 256; ++b) {
    std::string text = "<";
    text += static_cast<char>(b);
    text += '>';
    std::string out;
    append_json_string(out, text);
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(out)) << b;
    const std::string back = parsed;
    if (b < 0x80) {
      EXPECT_EQ(back, text) << b;
    } else {
      EXPECT_EQ(back, "<\xEF\xBF\xBD>") << b;
    }
  }
}

TEST_F(LoggingTest, ContextFieldsAppearOnlyInsideTheScope) {
  use(LogFormat::kJson);
  spdlog::info("before");
  EXPECT_EQ(one_json_line().size(), 4u);
  {
    const LogContext scope(
        {.request_id = "req-1", .api_key = "team-a", .traceparent = std::string(kSpecExample)});
    spdlog::info("inside");
    const auto line = one_json_line();
    EXPECT_EQ(line["request_id"], "req-1");
    EXPECT_EQ(line["api_key"], "team-a");
    EXPECT_EQ(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_EQ(line["span_id"], "00f067aa0ba902b7");
    EXPECT_EQ(line.size(), 8u);
    EXPECT_EQ(LogContext::current().request_id, "req-1");
  }
  spdlog::info("after");
  const auto after = one_json_line();
  EXPECT_EQ(after.size(), 4u) << after;
  EXPECT_FALSE(after.contains("request_id"));
  EXPECT_FALSE(after.contains("trace_id"));
  EXPECT_TRUE(LogContext::current().request_id.empty());
  EXPECT_FALSE(LogContext::current().trace.has_value());
}

TEST_F(LoggingTest, NestedScopesInheritOverrideAndRestore) {
  use(LogFormat::kJson);
  const LogContext outer({.request_id = "outer", .api_key = "team-a"});
  {
    const LogContext inner({.request_id = "inner", .traceparent = std::string(kSpecExample)});
    spdlog::info("inner");
    const auto line = one_json_line();
    EXPECT_EQ(line["request_id"], "inner");
    EXPECT_EQ(line["api_key"], "team-a");  // inherited
    EXPECT_EQ(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  }
  spdlog::info("outer again");
  const auto line = one_json_line();
  EXPECT_EQ(line["request_id"], "outer");
  EXPECT_EQ(line["api_key"], "team-a");
  EXPECT_FALSE(line.contains("trace_id"));
  EXPECT_FALSE(line.contains("span_id"));
}

TEST_F(LoggingTest, SettersUpdateTheInnermostScopeOnly) {
  use(LogFormat::kJson);
  LogContext::set_request_id("leaked");  // no scope: no effect
  spdlog::info("none");
  EXPECT_FALSE(one_json_line().contains("request_id"));
  {
    const LogContext scope({.api_key = "team-b"});
    spdlog::info("unvalidated");
    EXPECT_FALSE(one_json_line().contains("request_id"));
    LogContext::set_request_id("req-7");
    LogContext::set_traceparent(kSpecExample);
    spdlog::info("validated");
    auto line = one_json_line();
    EXPECT_EQ(line["request_id"], "req-7");
    EXPECT_EQ(line["span_id"], "00f067aa0ba902b7");
    LogContext::set_traceparent("garbage");
    LogContext::set_api_key("team-c");
    spdlog::info("retraced");
    line = one_json_line();
    EXPECT_FALSE(line.contains("trace_id"));
    EXPECT_EQ(line["api_key"], "team-c");
  }
  spdlog::info("gone");
  EXPECT_EQ(one_json_line().size(), 4u);
}

TEST_F(LoggingTest, InvalidTraceparentIsIgnored) {
  const auto line = json_line_in_scope({.request_id = "r", .traceparent = "00-XYZ"});
  EXPECT_EQ(line["request_id"], "r");
  EXPECT_FALSE(line.contains("trace_id"));
  EXPECT_FALSE(line.contains("span_id"));
}

TEST_F(LoggingTest, ContextFieldsAreEscaped) {
  const auto line = json_line_in_scope({.request_id = "a\"}\n{\xff", .api_key = "k\\"});
  EXPECT_EQ(line["request_id"], "a\"}\n{\xEF\xBF\xBD");
  EXPECT_EQ(line["api_key"], "k\\");
}

TEST_F(LoggingTest, ContextIsPerThread) {
  use(LogFormat::kJson);
  const LogContext scope({.request_id = "main-thread"});
  std::thread([] { spdlog::info("other thread"); }).join();
  const auto line = one_json_line();
  EXPECT_EQ(line["message"], "other thread");
  EXPECT_FALSE(line.contains("request_id"));
}

TEST_F(LoggingTest, TextFormatKeepsItsLayoutWithUtcTimestamps) {
  use(LogFormat::kText, "info");
  const LogContext scope({.request_id = "not-in-text"});
  spdlog::debug("hidden");
  spdlog::info("hello {}", "world");
  spdlog::warn("careful");
  const auto all = lines();
  ASSERT_EQ(all.size(), 2u) << out_.str();
  const std::regex layout(
      R"(^\[\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z\] \[(info|warning)\] (.*)$)");
  std::smatch match;
  ASSERT_TRUE(std::regex_match(all[0], match, layout)) << all[0];
  EXPECT_EQ(match[1], "info");
  EXPECT_EQ(match[2], "hello world");
  ASSERT_TRUE(std::regex_match(all[1], match, layout)) << all[1];
  EXPECT_EQ(match[1], "warning");
  EXPECT_NEAR(parse_utc(all[0].substr(1, 24)), now_seconds(), 5.0) << all[0];
}

TEST_F(LoggingTest, RejectsUnknownLevelsBeforeChangingTheLogger) {
  use(LogFormat::kJson);
  std::ostringstream other;
  try {
    setup_logging_to(std::make_shared<spdlog::sinks::ostream_sink_mt>(other), "loud",
                     LogFormat::kText);
    ADD_FAILURE() << "accepted level 'loud'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("trace, debug, info, warn, error, critical, off"),
              std::string::npos);
  }
  spdlog::info("still json");
  EXPECT_EQ(one_json_line()["message"], "still json");
  EXPECT_TRUE(other.str().empty());
  EXPECT_THROW(setup_logging("loud"), Error);
  EXPECT_THROW(setup_logging("verbose", LogFormat::kJson), Error);
}

TEST(LogFormatParse, AcceptsTextAndJsonOnly) {
  EXPECT_EQ(parse_log_format("text"), LogFormat::kText);
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_EQ(to_string(LogFormat::kText), "text");
  EXPECT_EQ(to_string(LogFormat::kJson), "json");
  for (const char* bad : {"", "JSON", "Text", "logfmt", "json "}) {
    try {
      parse_log_format(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                "log format '" + std::string(bad) + "' is not one of text, json");
    }
  }
}

TEST(TraceParent, AcceptsTheSpecExample) {
  const auto parsed = parse_traceparent(kSpecExample);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->version, 0);
  EXPECT_EQ(parsed->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(parsed->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(parsed->flags, 1);
  const auto unsampled =
      parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_EQ(unsampled->flags, 0);
  // HTTP's optional whitespace around a header value.
  EXPECT_TRUE(parse_traceparent(" \t" + std::string(kSpecExample) + "\t ").has_value());
}

TEST(TraceParent, AcceptsLaterVersionsByTheirFirstFourFields) {
  const std::string body = "-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const auto v1 = parse_traceparent("01" + body);
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->version, 1);
  EXPECT_EQ(v1->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  const auto longer = parse_traceparent("cc" + body + "-what-the-future-will-bring");
  ASSERT_TRUE(longer.has_value());
  EXPECT_EQ(longer->version, 0xcc);
  EXPECT_EQ(longer->parent_id, "00f067aa0ba902b7");
  EXPECT_FALSE(parse_traceparent("cc" + body + "x-more").has_value());  // no '-' after flags
  EXPECT_FALSE(parse_traceparent("00" + body + "-more").has_value());   // 00 is exactly 55
}

TEST(TraceParent, RejectsInvalidValues) {
  const std::vector<std::string> bad = {
      "",
      "   ",
      "00",
      // uppercase anywhere
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
      "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
      // wrong lengths
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b77-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
      "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      // all zeros
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      // version ff
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      // separators and characters
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
      "00-4bf92f35-77b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  };
  for (const auto& value : bad) {
    EXPECT_FALSE(parse_traceparent(value).has_value()) << "'" << value << "'";
  }
}

TEST(Logging, OneArgumentSetupStillWorks) {
  setup_logging("warn");
  EXPECT_EQ(spdlog::default_logger()->name(), "cube3d");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);
  setup_logging("info", LogFormat::kJson);
  EXPECT_EQ(spdlog::get_level(), spdlog::level::info);
  setup_logging("warn");
}

}  // namespace test_logging
}  // namespace cube3d
