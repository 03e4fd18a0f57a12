// Test support: a redis-server of the test's own on a free loopback port, its files in a
// temporary folder, stopped (SIGTERM) with the object. Tests that need one skip with a message
// naming the package when Debian's redis-server is not installed (scripts/setup.sh installs it).
// stop(), start() again on the same port, pause() (SIGSTOP: a Redis that answers nothing) and
// resume() are for the tests of a Redis that goes away.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/server/redis/redis_connection.h"
#include "temp_dir.h"

extern char** environ;

namespace cube3d::testing {

inline std::string redis_server_binary() {
  for (const char* path : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

class RedisTestServer {
 public:
  // `extra`: more redis-server arguments ("--requirepass", "s3cret", ...). `sentinel`: a Redis
  // Sentinel instead (its config file, which it rewrites, in the temporary folder; `extra` then
  // gives its directives: "--sentinel", "monitor", "m", "127.0.0.1", "6379", "1").
  explicit RedisTestServer(std::vector<std::string> extra = {}, bool sentinel = false)
      : binary_(redis_server_binary()), extra_(std::move(extra)), sentinel_(sentinel) {
    if (binary_.empty()) return;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_loopback_port();
      if (start()) return;
    }
    throw std::runtime_error("redis-server did not start (5 ports tried)");
  }
  ~RedisTestServer() { stop(); }
  RedisTestServer(const RedisTestServer&) = delete;
  RedisTestServer& operator=(const RedisTestServer&) = delete;

  static bool installed() { return !redis_server_binary().empty(); }
  static const char* skip_message() {
    return "redis-server is not installed (Debian's redis-server; scripts/setup.sh installs it)";
  }

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  RedisEndpoint endpoint() const { return parse_redis_url(url()); }

  // Starts it (again) on its port and waits until it answers PING; false when it exits first
  // (the port was taken).
  bool start() {
    std::vector<std::string> args = {binary_};
    if (sentinel_) {
      const std::string config = dir_.path() + "/sentinel.conf";
      if (::access(config.c_str(), F_OK) != 0) std::fclose(std::fopen(config.c_str(), "w"));
      args.insert(args.end(), {config, "--sentinel"});
    }
    args.insert(args.end(), {"--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", dir_.path(), "--daemonize", "no",
                             "--loglevel", "warning", "--logfile", dir_.path() + "/redis.log"});
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, binary_.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      try {
        // With --requirepass the PING answers NOAUTH: an answer all the same.
        RedisConnection connection(endpoint(), {});
        connection.command({"PING"},
                           std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
        return true;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    stop();
    return false;
  }

  // SIGTERM and wait: the port refuses connections from here on.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

 private:
  const std::string binary_;
  const std::vector<std::string> extra_;
  const bool sentinel_;
  TempDir dir_{"cube3d_redis"};
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace cube3d::testing
