// Log lines that a peer causes (a failed TLS handshake, a request refused before it reaches the
// service, bytes that are no request): an unauthenticated client must not decide how much the
// server writes to its log. Each kind (a door and what happened: "grpc" "tls_handshake") is
// logged at most once per interval; what comes within the interval after a logged line is
// counted, not logged (at debug level it still is), and the next line of that kind, or flush()
// once the interval has passed, says how many were left out. Every event, logged or not, goes to
// the counter (the server's cube3d_peer_errors_total), so the log's silence hides no number.
//
// Thread-safe: every door's threads report into one PeerLog (the process's is peer_log()).
#pragma once

#include <spdlog/common.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace cube3d {

class PeerLog {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // Called once per event (door, kind), logged or not, outside the lock's hold on the log.
  using Counter = std::function<void(std::string_view door, std::string_view kind)>;

  static constexpr std::chrono::seconds kDefaultInterval{10};

  explicit PeerLog(std::chrono::milliseconds interval = kDefaultInterval, Clock clock = {});

  // The counter of every event (replaces the one before; empty: none).
  void set_counter(Counter counter);
  // 0 logs every event (a test, or an operator who asked for it).
  void set_interval(std::chrono::milliseconds interval);

  // One event: logged at `level` as "<message>" when its kind logged nothing within the
  // interval (with the number left out since, when any was), else counted and logged at debug.
  void report(std::string_view door, std::string_view kind, spdlog::level::level_enum level,
              std::string_view message);

  // Logs, for each kind whose interval has passed with events left out, one line saying how
  // many (so that a flood that stops is still told in full); called now and then by a thread
  // that has the time (the server's gauge loop).
  void flush();

  // Events of a kind since the start, and those left out of the log (tests, /metrics has them).
  struct Counts {
    int64_t events = 0;
    int64_t suppressed = 0;
  };
  Counts counts(std::string_view door, std::string_view kind) const;

 private:
  struct Kind {
    std::string door;
    std::string kind;
    std::chrono::steady_clock::time_point last_logged{};
    bool logged_once = false;
    int64_t pending = 0;  // left out since the last line of this kind
    spdlog::level::level_enum level = spdlog::level::info;
    Counts counts;
  };
  std::chrono::steady_clock::time_point now() const;

  mutable std::mutex mutex_;
  std::chrono::milliseconds interval_;
  Clock clock_;
  Counter counter_;
  std::map<std::string, Kind, std::less<>> kinds_;  // by "<door> <kind>"
};

// The process's PeerLog: what the front doors and gRPC's own log lines report into.
PeerLog& peer_log();

}  // namespace cube3d
