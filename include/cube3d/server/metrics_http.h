// A minimal HTTP endpoint that serves the Prometheus text exposition of a registry at /metrics.
//
// Why not prometheus-cpp's own Exposer: it runs civetweb, which starts its threads with a small
// fixed stack, and libtorch's large static thread-local storage does not fit in it, so every
// thread creation fails ("Cannot create threads") in any process that links libtorch.
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cube3d {

class MetricsHttpServer {
 public:
  // listen: "host:port" ("[::1]:port" for IPv6). Throws invalid_argument when it cannot bind.
  MetricsHttpServer(const std::string& listen, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void answer(int client) const;  // on the connection's thread

  // One thread per scrape being answered; reaped by the acceptor once done.
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<Connection> connections_;  // the acceptor thread's (and the destructor's)
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace cube3d
