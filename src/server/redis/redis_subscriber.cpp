#include "cube3d/server/redis/redis_subscriber.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/guarded_call.h"

namespace cube3d {
namespace {

using SubscriberClock = std::chrono::steady_clock;

constexpr auto kPingEvery = std::chrono::seconds(5);
constexpr auto kResubscribeFirstBackoff = std::chrono::milliseconds(100);
constexpr auto kResubscribeMostBackoff = std::chrono::milliseconds(2000);

}  // namespace

class RedisSubscriber::Impl : public std::enable_shared_from_this<RedisSubscriber::Impl> {
 public:
  explicit Impl(RedisClientOptions options)
      : options_(std::move(options)), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd_ < 0) throw internal_error("redis subscriber: eventfd failed");
  }
  ~Impl() { ::close(wake_fd_); }

  void start() {
    thread_ = std::thread([self = shared_from_this()] {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &set, nullptr);
      self->run();
    });
  }

  void stop() {
    stopping_ = true;
    wake();
    if (thread_.joinable()) thread_.join();
  }

  void subscribe(const std::string& channel, std::function<void(const std::string&)> handler) {
    {
      const std::lock_guard lock(mutex_);
      handlers_[channel] = std::move(handler);
    }
    wake();
  }

  void on_connected(std::function<void()> handler) {
    const std::lock_guard lock(mutex_);
    connected_handlers_.push_back(std::move(handler));
  }

  std::atomic<bool> connected_{false};

 private:
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t rc = ::write(wake_fd_, &one, sizeof one);
  }
  void drain_wake() {
    uint64_t value = 0;
    [[maybe_unused]] const ssize_t rc = ::read(wake_fd_, &value, sizeof value);
  }
  // Subscribes to the channels not subscribed yet on this connection.
  void subscribe_new(RedisConnection& connection, std::set<std::string>& subscribed);
  void dispatch(const RedisReply& message);
  void run();
  // Sleeps for the backoff, or less when woken to stop.
  void pause(std::chrono::milliseconds delay);

  const RedisClientOptions options_;
  const int wake_fd_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::map<std::string, std::function<void(const std::string&)>> handlers_;
  std::vector<std::function<void()>> connected_handlers_;
  std::thread thread_;
};

void RedisSubscriber::Impl::subscribe_new(RedisConnection& connection,
                                          std::set<std::string>& subscribed) {
  std::vector<std::string> channels;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [channel, handler] : handlers_) {
      if (subscribed.count(channel) == 0) channels.push_back(channel);
    }
  }
  if (channels.empty()) return;
  std::vector<std::string> argv = {"SUBSCRIBE"};
  argv.insert(argv.end(), channels.begin(), channels.end());
  connection.send(argv, SubscriberClock::now() + options_.command_timeout);
  // The confirmations come as replies in order; messages of earlier channels may come between.
  size_t confirmed = 0;
  const SubscriberClock::time_point deadline = SubscriberClock::now() + options_.command_timeout;
  while (confirmed < channels.size()) {
    std::optional<RedisReply> reply = connection.read(deadline);
    if (!reply) throw unavailable("redis subscriber: SUBSCRIBE was not confirmed in time");
    if (reply->type == RedisReply::Type::kArray && !reply->elements.empty() &&
        reply->elements[0].text == "subscribe") {
      ++confirmed;
    } else {
      dispatch(*reply);
    }
  }
  subscribed.insert(channels.begin(), channels.end());
}

void RedisSubscriber::Impl::dispatch(const RedisReply& message) {
  if (message.type != RedisReply::Type::kArray || message.elements.size() != 3 ||
      message.elements[0].text != "message") {
    return;  // a PING's pong, a confirmation
  }
  std::function<void(const std::string&)> handler;
  {
    const std::lock_guard lock(mutex_);
    const auto it = handlers_.find(message.elements[1].text);
    if (it != handlers_.end()) handler = it->second;
  }
  if (handler)
    guarded_call("redis subscriber", "a message handler", handler, message.elements[2].text);
}

void RedisSubscriber::Impl::pause(std::chrono::milliseconds delay) {
  const SubscriberClock::time_point until = SubscriberClock::now() + delay;
  while (!stopping_ && SubscriberClock::now() < until) {
    std::this_thread::sleep_for(std::min<SubscriberClock::duration>(until - SubscriberClock::now(),
                                                                    std::chrono::milliseconds(50)));
  }
}

void RedisSubscriber::Impl::run() {
  std::chrono::milliseconds backoff = kResubscribeFirstBackoff;
  bool warned = false;
  while (!stopping_) {
    std::unique_ptr<RedisConnection> connection;
    std::set<std::string> subscribed;
    try {
      // To the primary of now (a failover moved it), though a replica would hear the
      // messages too: PUBLISH reaches every replica's subscribers.
      connection = std::make_unique<RedisConnection>(
          connection_endpoint(options_.endpoint, options_.sentinels, options_.connect,
                              SubscriberClock::now() + options_.connect.connect_timeout),
          options_.connect);
      drain_wake();
      subscribe_new(*connection, subscribed);
      connected_ = true;
      backoff = kResubscribeFirstBackoff;
      if (warned) spdlog::info("redis subscriber: connected again");
      warned = false;
      std::vector<std::function<void()>> handlers;
      {
        const std::lock_guard lock(mutex_);
        handlers = connected_handlers_;
      }
      for (auto& handler : handlers)
        guarded_call("redis subscriber", "a connected handler", handler);
      SubscriberClock::time_point last_heard = SubscriberClock::now();
      bool ping_out = false;
      while (!stopping_) {
        const SubscriberClock::time_point now = SubscriberClock::now();
        if (!ping_out && now - last_heard >= kPingEvery) {
          connection->send({"PING"}, now + options_.command_timeout);
          ping_out = true;
        }
        if (ping_out && now - last_heard >= kPingEvery + options_.command_timeout) {
          throw unavailable("redis subscriber: no answer to PING");
        }
        std::optional<RedisReply> reply = connection->read(now + std::chrono::seconds(1), wake_fd_);
        if (reply) {
          last_heard = SubscriberClock::now();
          ping_out = false;
          dispatch(*reply);
          continue;
        }
        drain_wake();
        subscribe_new(*connection, subscribed);
      }
    } catch (const std::exception& e) {
      connected_ = false;
      if (!warned) spdlog::warn("redis subscriber: {}; reconnecting", e.what());
      warned = true;
      pause(backoff);
      backoff = std::min<std::chrono::milliseconds>(2 * backoff, kResubscribeMostBackoff);
    }
  }
  connected_ = false;
}

RedisSubscriber::RedisSubscriber(RedisClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->start();
}

RedisSubscriber::~RedisSubscriber() { impl_->stop(); }

void RedisSubscriber::subscribe(const std::string& channel,
                                std::function<void(const std::string&)> handler) {
  impl_->subscribe(channel, std::move(handler));
}

void RedisSubscriber::on_connected(std::function<void()> handler) {
  impl_->on_connected(std::move(handler));
}

bool RedisSubscriber::connected() const { return impl_->connected_.load(); }

}  // namespace cube3d
