// PeerLog: a flood of one kind of peer-caused line writes one line per interval, the next line
// (or flush) tells how many were left out, every event is counted, kinds and doors are apart,
// suppressed lines still show at debug level, and an interval of 0 logs every one.
#include "cube3d/core/peer_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cube3d/core/logging.h"

namespace cube3d {
namespace test_peer_log {

using namespace std::chrono_literals;

class PeerLogTest : public ::testing::Test {
 protected:
  void SetUp() override { capture("info"); }
  void TearDown() override { setup_logging("warn"); }  // before out_ goes away

  void capture(const std::string& level) {
    out_.str("");
    setup_logging_to(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_), level,
                     LogFormat::kText);
  }

  std::vector<std::string> take_lines() {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    out_.str("");
    return lines;
  }

  // A clock the test moves.
  std::unique_ptr<PeerLog> make_log(std::chrono::milliseconds interval) {
    auto log = std::make_unique<PeerLog>(interval, [this] { return now_; });
    log->set_counter([this](std::string_view door, std::string_view kind) {
      ++counted_[std::string(door) + " " + std::string(kind)];
    });
    return log;
  }

  std::ostringstream out_;
  std::chrono::steady_clock::time_point now_{std::chrono::hours(1)};
  std::map<std::string, int> counted_;
};

TEST_F(PeerLogTest, AFloodWritesOneLinePerIntervalAndCountsEveryEvent) {
  const auto log = make_log(10s);
  for (int i = 0; i < 800; ++i) {
    log->report("grpc", "tls_handshake", spdlog::level::info, "handshake " + std::to_string(i));
    now_ += 1ms;  // 800 in 0.8 s
  }
  std::vector<std::string> lines = take_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("handshake 0"), std::string::npos) << lines[0];
  EXPECT_EQ(counted_["grpc tls_handshake"], 800);
  EXPECT_EQ(log->counts("grpc", "tls_handshake").events, 800);
  EXPECT_EQ(log->counts("grpc", "tls_handshake").suppressed, 799);

  // The next one after the interval is logged, saying how many were left out.
  now_ += 10s;
  log->report("grpc", "tls_handshake", spdlog::level::info, "handshake late");
  lines = take_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("handshake late (799 more grpc tls_handshake in the last 10 s, not "
                          "logged)"),
            std::string::npos)
      << lines[0];
}

TEST_F(PeerLogTest, FlushTellsTheRestOfAFloodThatStopped) {
  const auto log = make_log(10s);
  for (int i = 0; i < 5; ++i) log->report("http", "protocol", spdlog::level::info, "bad head");
  take_lines();
  log->flush();  // the interval has not passed: nothing yet
  EXPECT_TRUE(take_lines().empty());
  now_ += 11s;
  log->flush();
  std::vector<std::string> lines = take_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("4 more http protocol in the last 10 s, not logged"), std::string::npos)
      << lines[0];
  log->flush();  // told once
  EXPECT_TRUE(take_lines().empty());
}

TEST_F(PeerLogTest, KindsAndDoorsAreLimitedApart) {
  const auto log = make_log(10s);
  for (int i = 0; i < 3; ++i) {
    log->report("grpc", "tls_handshake", spdlog::level::info, "g");
    log->report("http", "tls_handshake", spdlog::level::info, "h");
    log->report("http", "protocol", spdlog::level::info, "p");
  }
  EXPECT_EQ(take_lines().size(), 3u);
  EXPECT_EQ(counted_["grpc tls_handshake"], 3);
  EXPECT_EQ(counted_["http tls_handshake"], 3);
  EXPECT_EQ(counted_["http protocol"], 3);
}

TEST_F(PeerLogTest, SuppressedLinesStillShowAtDebugLevel) {
  capture("debug");
  const auto log = make_log(10s);
  for (int i = 0; i < 3; ++i) log->report("grpc", "protocol", spdlog::level::info, "junk");
  const std::vector<std::string> lines = take_lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("[info]"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("[debug]"), std::string::npos) << lines[2];
}

TEST_F(PeerLogTest, AnIntervalOfZeroLogsEveryEvent) {
  const auto log = make_log(0ms);
  for (int i = 0; i < 4; ++i) log->report("http", "refused", spdlog::level::info, "404");
  EXPECT_EQ(take_lines().size(), 4u);
  EXPECT_EQ(log->counts("http", "refused").suppressed, 0);
}

}  // namespace test_peer_log
}  // namespace cube3d
