// Cancels what does not finish in time: each watch carries a cancel action, run once on the
// watchdog's own thread when the watch is still open after the time limit. MeshServiceImpl
// watches the read of each gRPC call's request message with it (limits.request_read_timeout_ms):
// a client that opens a call and stalls would otherwise hold a handler thread until its deadline,
// or for ever without one. gRPC-free (the action is a function), so it is tested on its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace cube3d {

class Watchdog {
 public:
  explicit Watchdog(std::chrono::milliseconds limit);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // An open watch; closing it (or destroying it) withdraws the cancel action.
  class Watch {
   public:
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    ~Watch();
    // Closes the watch: true when the time had run out and the cancel action ran (it has
    // returned by then). Later calls answer false.
    bool close();

   private:
    friend class Watchdog;
    Watch(Watchdog* owner, uint64_t id) : owner_(owner), id_(id) {}
    Watchdog* owner_;
    uint64_t id_;
  };

  // `cancel` runs at most once, on the watchdog's thread, while the watch is still open (so
  // whatever it touches is still alive, as long as it lives until close()).
  Watch watch(std::function<void()> cancel);

  std::chrono::milliseconds limit() const { return limit_; }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point due;
    std::function<void()> cancel;
    bool fired = false;
  };
  bool close(uint64_t id);
  void run();

  const std::chrono::milliseconds limit_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, Entry> open_;  // ids grow with time: the first is due first
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace cube3d
