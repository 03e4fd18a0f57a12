// The server's signals, taken by one thread from the first instruction of main on.
//
// Constructed first (before any other thread exists, so that every thread inherits the blocked
// mask), it takes SIGTERM, SIGINT and SIGHUP with sigwait on its own thread:
//   - SIGTERM / SIGINT before serving() (start-up: loading a model can take minutes, and an
//     orchestrator that gives up on a pod must not wait for it): logged, then the process
//     exits at once, status 0 (nothing is in flight yet);
//   - SIGTERM / SIGINT after serving(): wait_for_stop() returns the signal (the drain starts);
//     later ones are logged and ignored (the drain has its own grace period);
//   - SIGHUP: the reload hook runs (API keys); without one it is logged and ignored.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace cube3d {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Runs on the watcher's thread for every SIGHUP; must not throw.
  void on_reload(std::function<void()> hook);
  // From now on a stop signal is returned by wait_for_stop() instead of exiting.
  void serving();
  // Blocks until SIGTERM or SIGINT after serving(); returns the signal number.
  int wait_for_stop();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable stopped_;
  std::function<void()> reload_;
  bool serving_ = false;
  bool closing_ = false;
  int stop_signal_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace cube3d
