#include "cube3d/server/redis/redis_client.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

using ClientClock = RedisClient::Clock;

constexpr auto kFirstBackoff = std::chrono::milliseconds(100);
constexpr auto kMostBackoff = std::chrono::milliseconds(2000);
constexpr auto kSentinelPoll = std::chrono::milliseconds(1000);

double seconds_between(ClientClock::time_point a, ClientClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A write to a socket the peer closed raises SIGPIPE; OpenSSL's writes cannot ask for
// MSG_NOSIGNAL, so the client's threads keep it blocked (the write then fails with EPIPE).
void block_sigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace

class RedisClient::Impl : public std::enable_shared_from_this<RedisClient::Impl> {
 public:
  Impl(RedisClientOptions options, RedisObserver observer)
      : options_(std::move(options)), observer_(std::move(observer)) {
    require_in_range("redis.connections", options_.lanes, 1, 64);
    require_in_range("redis.timeout_ms", options_.command_timeout.count(), 1, 3'600'000);
    require_in_range("redis.connect_timeout_ms", options_.connect.connect_timeout.count(), 1,
                     3'600'000);
    require_in_range("redis max_pending", options_.max_pending, 1, int64_t{1} << 40);
    for (int64_t i = 0; i < options_.lanes; ++i) lanes_.push_back(std::make_unique<Lane>());
  }

  void start() {
    for (auto& lane : lanes_) {
      lane->thread = std::thread([self = shared_from_this(), lane = lane.get()] {
        block_sigpipe();
        self->serve(*lane);
      });
    }
    watchdog_ = std::thread([self = shared_from_this()] { self->watch(); });
    if (options_.sentinels.enabled()) {
      sentinel_watch_ = std::thread([self = shared_from_this()] {
        block_sigpipe();
        self->follow_sentinels();
      });
    }
  }

  void stop();
  void run(Commands commands, Done done, uint64_t lane,
           std::optional<ClientClock::time_point> deadline);

  bool up() const {
    const std::lock_guard lock(mutex_);
    return up_;
  }
  std::string last_error() const {
    const std::lock_guard lock(mutex_);
    return last_error_;
  }

  const RedisClientOptions options_;

 private:
  struct Pending {
    Commands commands;
    Done done;
    ClientClock::time_point queued;
    ClientClock::time_point deadline;
    std::atomic<bool> answered{false};
  };
  struct Lane {
    std::deque<std::shared_ptr<Pending>> queue;
    std::condition_variable work;
    std::thread thread;
  };

  void serve(Lane& lane);
  void watch();
  // redis.sentinels: asks them for the primary every kSentinelPoll; when it moves (a failover,
  // +switch-master), the lanes drop connections to the old one before their next command, also
  // when the old one still takes writes (a primary cut off from the sentinels, whose writes a
  // rejoin would throw away).
  void follow_sentinels();
  // Whether `connection` goes to the primary the sentinels named last (always without them).
  bool to_current_primary(const RedisConnection& connection) const;
  // Answers once (the first of the lane and the watchdog wins); the callback runs without the
  // lock.
  void answer(Pending& item, Result result);
  Status down_status() const;  // mutex_ held
  void connected();
  void failed(const std::string& why, bool connecting);
  void report_state();
  // A new connection for `item`, to the primary of now; false when none could be made (the
  // item is then answered UNAVAILABLE).
  bool open_connection(std::unique_ptr<RedisConnection>& connection, Pending& item,
                       ClientClock::time_point now);
  static bool reached_replica(const std::vector<RedisReply>& replies);

  const RedisObserver observer_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  int64_t queued_ = 0;
  bool stopping_ = false;
  bool up_ = false;
  bool ever_tried_ = false;
  std::string last_error_;
  ClientClock::time_point retry_at_{};
  std::chrono::milliseconds backoff_ = kFirstBackoff;
  std::multimap<ClientClock::time_point, std::weak_ptr<Pending>> deadlines_;
  std::condition_variable watchdog_wake_;
  std::thread watchdog_;
  std::thread sentinel_watch_;
  std::condition_variable sentinel_wake_;
  std::optional<RedisEndpoint> named_primary_;  // mutex_

  std::mutex report_mutex_;
  std::optional<bool> reported_;
};

Status RedisClient::Impl::down_status() const {
  return Status(ErrorCode::kUnavailable, "redis at " + endpoint_text(options_.endpoint) +
                                             " is unreachable (" + last_error_ +
                                             "); retrying in the background");
}

void RedisClient::Impl::run(Commands commands, Done done, uint64_t lane_index,
                            std::optional<ClientClock::time_point> deadline) {
  const ClientClock::time_point now = ClientClock::now();
  auto item = std::make_shared<Pending>();
  item->commands = std::move(commands);
  item->done = std::move(done);
  item->queued = now;
  item->deadline = deadline.value_or(now + options_.command_timeout);
  std::optional<Status> refused;
  Lane& lane = *lanes_[lane_index % lanes_.size()];
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) {
      refused = Status(ErrorCode::kUnavailable, "redis: the client is shutting down");
    } else if (queued_ >= options_.max_pending) {
      refused = Status(ErrorCode::kUnavailable,
                       "redis: " + std::to_string(queued_) +
                           " commands are waiting already (Redis is slow or stalled)");
    } else if (!up_ && ever_tried_ && now < retry_at_) {
      refused = down_status();
    } else {
      lane.queue.push_back(item);
      ++queued_;
      deadlines_.emplace(item->deadline, item);
    }
  }
  if (refused) return answer(*item, std::move(*refused));
  lane.work.notify_one();
  watchdog_wake_.notify_one();
}

void RedisClient::Impl::answer(Pending& item, Result result) {
  if (item.answered.exchange(true)) return;
  const bool ok = std::holds_alternative<std::vector<RedisReply>>(result);
  if (observer_.on_call) {
    const std::string name = item.commands.empty() || item.commands.front().empty()
                                 ? std::string("NONE")
                                 : item.commands.front().front();
    observer_.on_call(name, seconds_between(item.queued, ClientClock::now()), ok);
  }
  Done done = std::move(item.done);
  try {
    if (done) done(std::move(result));
  } catch (const std::exception& e) {
    spdlog::error("redis: a command's callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("redis: a command's callback threw");
  }
}

void RedisClient::Impl::connected() {
  {
    const std::lock_guard lock(mutex_);
    up_ = true;
    ever_tried_ = true;
    backoff_ = kFirstBackoff;
    last_error_.clear();
  }
  report_state();
}

void RedisClient::Impl::failed(const std::string& why, bool connecting) {
  bool first = false;
  {
    const std::lock_guard lock(mutex_);
    first = up_ || !ever_tried_;
    up_ = false;
    ever_tried_ = true;
    last_error_ = why;
    if (connecting) {
      // Nobody gets to wait out another connect until the backoff has passed.
      retry_at_ = ClientClock::now() + backoff_;
      // At most a connect's own time between tries: a Redis back from a stall is found within
      // one connect timeout, well inside a job's lease.
      backoff_ = std::min<std::chrono::milliseconds>(
          {2 * backoff_, kMostBackoff, std::max(kFirstBackoff, options_.connect.connect_timeout)});
    }
  }
  if (first) spdlog::warn("{}", why);
  report_state();
}

void RedisClient::Impl::report_state() {
  if (!observer_.on_state) return;
  const std::lock_guard report(report_mutex_);
  const bool now_up = up();
  if (reported_ == now_up) return;
  reported_ = now_up;
  observer_.on_state(now_up);
}

void RedisClient::Impl::serve(Lane& lane) {
  std::unique_ptr<RedisConnection> connection;
  for (;;) {
    std::shared_ptr<Pending> item;
    {
      std::unique_lock lock(mutex_);
      lane.work.wait(lock, [&] { return stopping_ || !lane.queue.empty(); });
      if (stopping_) break;
      item = std::move(lane.queue.front());
      lane.queue.pop_front();
      --queued_;
    }
    if (item->answered.load()) continue;  // the watchdog answered it
    const ClientClock::time_point now = ClientClock::now();
    if (now >= item->deadline) {
      answer(*item, Status(ErrorCode::kUnavailable, "redis: no answer within redis.timeout_ms"));
      continue;
    }
    // A connection Redis closed while it sat idle (a restart) is replaced before the command
    // goes out, so the restart costs no command; so is one to a primary the sentinels no longer
    // name.
    if (connection && !to_current_primary(*connection)) {
      spdlog::info("redis.sentinels: the primary is no longer {}: reconnecting",
                   endpoint_text(connection->endpoint()));
      connection.reset();
    }
    if (!connection || !connection->idle_and_open()) {
      connection.reset();
      std::optional<Status> down;
      {
        const std::lock_guard lock(mutex_);
        if (!up_ && ever_tried_ && now < retry_at_) down = down_status();
      }
      if (down) {
        answer(*item, std::move(*down));
        continue;
      }
      if (!open_connection(connection, *item, now)) continue;
    }
    try {
      std::vector<RedisReply> replies = connection->pipeline(item->commands, item->deadline);
      if (reached_replica(replies)) {
        // Nothing this pipeline writes ran on a replica: sent again to the primary of now.
        const std::string where = endpoint_text(connection->endpoint());
        spdlog::warn("redis at {} answered READONLY (a replica now): reconnecting to the primary",
                     where);
        connection.reset();
        if (!open_connection(connection, *item, ClientClock::now())) continue;
        replies = connection->pipeline(item->commands, item->deadline);
        if (reached_replica(replies)) {
          const std::string why = "redis at " + where + " and then " +
                                  endpoint_text(connection->endpoint()) +
                                  " answered READONLY: a replica, not the primary (a failover "
                                  "under way?)";
          connection.reset();
          failed(why, true);
          answer(*item, Status(ErrorCode::kUnavailable, why));
          continue;
        }
      }
      answer(*item, std::move(replies));
    } catch (const std::exception& e) {
      connection.reset();
      failed(e.what(), false);
      answer(*item, Status(ErrorCode::kUnavailable, e.what()));
    }
  }
}

bool RedisClient::Impl::open_connection(std::unique_ptr<RedisConnection>& connection, Pending& item,
                                        ClientClock::time_point now) {
  RedisConnectOptions connect = options_.connect;
  connect.connect_timeout =
      std::min(connect.connect_timeout,
               std::chrono::duration_cast<std::chrono::milliseconds>(item.deadline - now));
  try {
    const RedisEndpoint endpoint =
        connection_endpoint(options_.endpoint, options_.sentinels, connect, item.deadline);
    if (options_.sentinels.enabled()) {
      const std::lock_guard lock(mutex_);
      named_primary_ = endpoint;  // the newest word: the poll must not undo it
    }
    connection = std::make_unique<RedisConnection>(endpoint, connect);
    connected();
    return true;
  } catch (const std::exception& e) {
    failed(e.what(), true);
    answer(item, Status(ErrorCode::kUnavailable, e.what()));
    return false;
  }
}

bool RedisClient::Impl::reached_replica(const std::vector<RedisReply>& replies) {
  // On a replica every write answers READONLY and none runs; its reads ran, and run again
  // harmlessly. (A primary demoted between two commands of a pipeline may have run the first:
  // the resync with the new primary throws that write away, so sending it there is right.)
  return std::any_of(replies.begin(), replies.end(), [](const RedisReply& reply) {
    return reply.error() && read_only_replica_reply(reply.text);
  });
}

void RedisClient::Impl::follow_sentinels() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::optional<RedisEndpoint> named;
    try {
      named = resolve_primary(options_.endpoint, options_.sentinels, options_.connect,
                              ClientClock::now() + options_.connect.connect_timeout);
    } catch (const std::exception&) {
      // None answered: the lanes keep their connections; their own failures say why.
    }
    lock.lock();
    if (named && named_primary_ && *named != *named_primary_) {
      spdlog::warn("redis.sentinels: the primary of \"{}\" moved from {} to {}",
                   options_.sentinels.master_name, endpoint_text(*named_primary_),
                   endpoint_text(*named));
    }
    if (named) named_primary_ = std::move(named);
    sentinel_wake_.wait_for(lock, kSentinelPoll, [this] { return stopping_; });
  }
}

bool RedisClient::Impl::to_current_primary(const RedisConnection& connection) const {
  const std::lock_guard lock(mutex_);
  return !named_primary_ || (named_primary_->host == connection.endpoint().host &&
                             named_primary_->port == connection.endpoint().port);
}

void RedisClient::Impl::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      watchdog_wake_.wait(lock);
      continue;
    }
    const ClientClock::time_point due = deadlines_.begin()->first;
    if (ClientClock::now() < due) {
      watchdog_wake_.wait_until(lock, due);
      continue;
    }
    std::vector<std::shared_ptr<Pending>> late;
    const ClientClock::time_point now = ClientClock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      if (auto item = deadlines_.begin()->second.lock()) late.push_back(std::move(item));
      deadlines_.erase(deadlines_.begin());
    }
    lock.unlock();
    for (const auto& item : late) {
      answer(*item, Status(ErrorCode::kUnavailable,
                           "redis at " + endpoint_text(options_.endpoint) +
                               ": no answer within redis.timeout_ms (" +
                               std::to_string(options_.command_timeout.count()) + " ms)"));
    }
    lock.lock();
  }
}

void RedisClient::Impl::stop() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  for (auto& lane : lanes_) lane->work.notify_all();
  watchdog_wake_.notify_all();
  sentinel_wake_.notify_all();
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
  }
  if (watchdog_.joinable()) watchdog_.join();
  if (sentinel_watch_.joinable()) sentinel_watch_.join();
  std::vector<std::shared_ptr<Pending>> left;
  {
    const std::lock_guard lock(mutex_);
    for (auto& lane : lanes_) {
      for (auto& item : lane->queue) left.push_back(std::move(item));
      lane->queue.clear();
    }
    deadlines_.clear();
    queued_ = 0;
  }
  for (const auto& item : left) {
    answer(*item, Status(ErrorCode::kUnavailable, "redis: the client is shutting down"));
  }
}

RedisClient::RedisClient(RedisClientOptions options, RedisObserver observer)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(observer))) {
  impl_->start();
}

RedisClient::~RedisClient() { impl_->stop(); }

void RedisClient::run(Commands commands, Done done, uint64_t lane,
                      std::optional<ClientClock::time_point> deadline) {
  impl_->run(std::move(commands), std::move(done), lane, deadline);
}

RedisClient::Result RedisClient::run_sync(Commands commands, uint64_t lane) {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  impl_->run(
      std::move(commands), [promise](Result result) { promise->set_value(std::move(result)); },
      lane, std::nullopt);
  return future.get();
}

Status RedisClient::check() {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  const auto& options = impl_->options_;
  impl_->run(
      {{"PING"}}, [promise](Result result) { promise->set_value(std::move(result)); }, 0,
      ClientClock::now() + options.connect.connect_timeout + options.command_timeout);
  const Result result = future.get();
  if (const auto* status = std::get_if<Status>(&result)) return *status;
  const RedisReply& reply = std::get<std::vector<RedisReply>>(result).front();
  if (reply.error()) {
    return Status(ErrorCode::kUnavailable, "redis at " + endpoint_text(options.endpoint) +
                                               " answered PING with " + reply.text);
  }
  return Status();
}

bool RedisClient::up() const { return impl_->up(); }

std::string RedisClient::last_error() const { return impl_->last_error(); }

const RedisClientOptions& RedisClient::options() const { return impl_->options_; }

uint64_t RedisClient::lane_of(std::string_view key) { return std::hash<std::string_view>()(key); }

}  // namespace cube3d
