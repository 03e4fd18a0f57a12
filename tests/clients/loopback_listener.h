// Test support for the senders' tests: a listener on a free 127.0.0.1 port that accepts on a
// thread of its own and serves each connection on a thread of its own. The scripted servers of
// the HTTP and HTTPS sender tests differ only in how they serve a connection.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace cube3d::testing {

class LoopbackListener {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using Serve = std::function<void(Socket)>;

  // `serve` runs once for each connection. A `silent` listener serves none: it holds each
  // connection open and never sends a byte. Declare the listener after whatever `serve` uses,
  // so that it is destroyed (and its threads joined) first.
  explicit LoopbackListener(Serve serve, bool silent = false)
      : serve_(std::move(serve)), acceptor_(io_, loopback(0)), silent_(silent) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~LoopbackListener() {
    stopping_ = true;
    {
      // Wake the blocking accept with a connection of our own.
      Socket wake(io_);
      boost::system::error_code ignored;
      wake.connect(loopback(port_), ignored);
    }
    accept_thread_.join();
    for (auto& t : connections_) t.join();
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  static boost::asio::ip::tcp::endpoint loopback(int port) {
    return {boost::asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)};
  }

  void accept_loop() {
    for (;;) {
      Socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_ || ec) return;
      ++accepted_;
      if (silent_) {
        held_.push_back(std::move(socket));  // open, and never a byte
        continue;
      }
      connections_.emplace_back([this, s = std::move(socket)]() mutable { serve_(std::move(s)); });
    }
  }

  const Serve serve_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  const bool silent_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::vector<Socket> held_;  // silent: only the accept thread touches them
  std::thread accept_thread_;
  std::vector<std::thread> connections_;  // only the accept thread adds, before the join
};

}  // namespace cube3d::testing
