#include "cube3d/core/peer_log.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace cube3d {
namespace {

// "(and 41 more grpc tls_handshake in the last 10 s, not logged)": what the line after a quiet
// spell adds, so that the log tells the size of a flood it did not write out.
std::string left_out(int64_t pending, std::string_view door, std::string_view kind,
                     std::chrono::milliseconds interval) {
  return fmt::format("{} more {} {} in the last {:g} s, not logged", pending, door, kind,
                     static_cast<double>(interval.count()) / 1000.0);
}

std::string key_of(std::string_view door, std::string_view kind) {
  std::string key(door);
  key += ' ';
  key += kind;
  return key;
}

}  // namespace

PeerLog::PeerLog(std::chrono::milliseconds interval, Clock clock)
    : interval_(interval), clock_(std::move(clock)) {}

std::chrono::steady_clock::time_point PeerLog::now() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

void PeerLog::set_counter(Counter counter) {
  const std::lock_guard lock(mutex_);
  counter_ = std::move(counter);
}

void PeerLog::set_interval(std::chrono::milliseconds interval) {
  const std::lock_guard lock(mutex_);
  interval_ = interval;
}

void PeerLog::report(std::string_view door, std::string_view kind, spdlog::level::level_enum level,
                     std::string_view message) {
  Counter counter;
  {
    const std::lock_guard lock(mutex_);
    counter = counter_;
    const std::string key = key_of(door, kind);
    auto it = kinds_.find(key);
    if (it == kinds_.end()) {
      Kind fresh;
      fresh.door = door;
      fresh.kind = kind;
      it = kinds_.emplace(key, std::move(fresh)).first;
    }
    Kind& k = it->second;
    ++k.counts.events;
    k.level = level;
    const auto t = now();
    if (k.logged_once && t - k.last_logged < interval_) {
      ++k.pending;
      ++k.counts.suppressed;
      spdlog::debug("{}", message);
    } else {
      if (k.pending > 0) {
        spdlog::log(level, "{} ({})", message, left_out(k.pending, door, kind, interval_));
      } else {
        spdlog::log(level, "{}", message);
      }
      k.pending = 0;
      k.logged_once = true;
      k.last_logged = t;
    }
  }
  // Outside the lock: the counter is the metrics registry's, which has locks of its own.
  if (counter) counter(door, kind);
}

void PeerLog::flush() {
  const std::lock_guard lock(mutex_);
  const auto t = now();
  for (auto& [key, k] : kinds_) {
    if (k.pending == 0 || t - k.last_logged < interval_) continue;
    spdlog::log(k.level, "{}", left_out(k.pending, k.door, k.kind, interval_));
    k.pending = 0;
    // The summary is this interval's line: the next event waits for the next interval.
    k.last_logged = t;
  }
}

PeerLog::Counts PeerLog::counts(std::string_view door, std::string_view kind) const {
  const std::lock_guard lock(mutex_);
  const auto it = kinds_.find(key_of(door, kind));
  return it == kinds_.end() ? Counts{} : it->second.counts;
}

PeerLog& peer_log() {
  static PeerLog log;
  return log;
}

}  // namespace cube3d
