#include "cube3d/server/app/signal_watcher.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace cube3d {
namespace {

// SIGUSR1 only wakes the watcher when it is destroyed.
sigset_t watched_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&set, s);
  return set;
}

// Blocked in the calling thread before the watcher starts, so that every thread made later
// inherits the mask and only the watcher ever takes these signals.
bool block_watched_signals() {
  const sigset_t set = watched_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return true;
}

}  // namespace

SignalWatcher::SignalWatcher()
    : thread_((block_watched_signals(), std::thread([this] { watch(); }))) {}

SignalWatcher::~SignalWatcher() {
  {
    const std::lock_guard lock(mutex_);
    closing_ = true;
  }
  pthread_kill(thread_.native_handle(), SIGUSR1);
  thread_.join();
}

void SignalWatcher::on_reload(std::function<void()> hook) {
  const std::lock_guard lock(mutex_);
  reload_ = std::move(hook);
}

void SignalWatcher::serving() {
  const std::lock_guard lock(mutex_);
  serving_ = true;
}

int SignalWatcher::wait_for_stop() {
  std::unique_lock lock(mutex_);
  stopped_.wait(lock, [this] { return stop_signal_ != 0; });
  return stop_signal_;
}

void SignalWatcher::watch() {
  const sigset_t set = watched_signals();
  for (;;) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    std::unique_lock lock(mutex_);
    if (closing_) return;
    if (signal_number == SIGHUP) {
      const std::function<void()> reload = reload_;
      lock.unlock();
      if (reload) {
        reload();
      } else {
        spdlog::info("signal {} (SIGHUP): nothing to reload", signal_number);
      }
      continue;
    }
    if (signal_number != SIGTERM && signal_number != SIGINT) continue;
    if (!serving_) {
      spdlog::info("signal {} during start-up: exiting now (nothing is in flight)", signal_number);
      spdlog::shutdown();
      std::_Exit(0);
    }
    if (stop_signal_ != 0) {
      spdlog::info("signal {}: already draining", signal_number);
      continue;
    }
    stop_signal_ = signal_number;
    stopped_.notify_all();
  }
}

}  // namespace cube3d
