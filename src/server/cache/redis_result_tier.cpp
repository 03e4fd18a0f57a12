#include "cube3d/server/cache/redis_result_tier.h"

#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/cache/entry_files.h"
#include "cube3d/server/cache/redis_result_tier_scripts.h"  // generated: src/server/cache/lua/
#include "cube3d/server/timing/action_gate.h"
#include "cube3d/server/timing/renewal_rounds.h"

namespace cube3d {
namespace {

using TierClock = RedisResultTier::Clock;
// The scripts (src/server/cache/lua/*.lua, embedded at build time).
namespace tier_scripts = redis_result_tier_scripts;

// A claim read as lapsed this long after its PTTL said: the lookup looks again then.
constexpr auto kLapseMargin = std::chrono::milliseconds(50);

}  // namespace

class RedisResultTier::Claim {
 public:
  Claim(std::shared_ptr<Impl> tier, std::string hex)
      : tier_(std::move(tier)), hex_(std::move(hex)) {}
  ~Claim();
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;

 private:
  std::shared_ptr<Impl> tier_;
  const std::string hex_;
};

class RedisResultTier::Impl : public std::enable_shared_from_this<RedisResultTier::Impl> {
 public:
  Impl(RedisClient& client, RedisSubscriber& subscriber, TimerQueue& timers,
       RedisResultTierOptions options, RedisResultTierObserver observer)
      : options_(std::move(options)),
        client_(client),
        subscriber_(subscriber),
        timers_(timers),
        observer_(std::move(observer)),
        entry_prefix_(options_.key_prefix + "cache:"),
        claim_prefix_(options_.key_prefix + "cache-claim:"),
        ready_channel_(options_.key_prefix + "cache-ready") {
    require_in_range("cache.redis_ttl_s", options_.ttl_s, 1, int64_t{366} * 24 * 3600);
    require_in_range("jobs.lease_ms (the cache's claims)", options_.claim_ms, 100, 3'600'000);
  }

  void start() {
    const std::weak_ptr<Impl> weak = weak_from_this();
    subscriber_.subscribe(ready_channel_, [weak](const std::string& hex) {
      if (const auto self = weak.lock()) self->wake(hex);
    });
    subscriber_.on_connected([weak] {
      if (const auto self = weak.lock()) self->wake_all();
    });
    schedule_renewal_rounds(gate_, timers_, renewal_,
                            std::chrono::milliseconds(options_.claim_ms / 3), weak,
                            [weak](std::function<void()> next) {
                              if (const auto self = weak.lock()) self->renew(std::move(next));
                            });
  }

  void close();
  void lookup(const CacheKey& key, TierClock::time_point until, std::function<void(Value)> done,
              bool waited);
  void store(const CacheKey& key, const Value& value);
  void erase(const CacheKey& key);
  std::shared_ptr<Claim> claim(const CacheKey& key);
  void release(const std::string& hex);

  const RedisResultTierOptions options_;

 private:
  struct Waiter {
    CacheKey key;
    TierClock::time_point until;
    std::function<void(Value)> done;
    TimerQueue::Timer timer;
  };
  struct Found {
    enum class What { kHit, kMiss, kOurs, kOthers } what = What::kMiss;
    Value value;
    int64_t claim_left_ms = 0;
    const char* result = "miss";  // for on_lookup: hit, miss, corrupt, error
  };

  void read(const CacheKey& key, std::function<void(Found)> then);
  // Waits for another replica's result: until a message on the channel, the claim's lapse or
  // `until`, whichever is first.
  void wait(const CacheKey& key, TierClock::time_point until, int64_t claim_left_ms,
            std::function<void(Value)> done);
  void wake(const std::string& hex);
  void wake_all();
  void waiter_due(const std::string& hex, uint64_t seq);
  // The renewal round of this replica's claims (timing/renewal_rounds.h); `next` arms the next
  // one once the reply is in.
  void renew(std::function<void()> next);
  void report(const char* result) {
    if (observer_.on_lookup) observer_.on_lookup(result);
  }

  RedisClient& client_;
  RedisSubscriber& subscriber_;
  TimerQueue& timers_;
  const RedisResultTierObserver observer_;
  const std::string entry_prefix_;
  const std::string claim_prefix_;
  const std::string ready_channel_;

  std::mutex mutex_;
  ActionGate gate_{mutex_};  // close() against the waiters' and the renewal's timer actions
  std::map<std::string, std::map<uint64_t, Waiter>> waiters_;  // by hex
  uint64_t next_waiter_ = 0;
  std::map<std::string, int> claims_;  // hex -> handles alive
  TimerQueue::Timer renewal_;
};

RedisResultTier::Claim::~Claim() { tier_->release(hex_); }

void RedisResultTier::Impl::read(const CacheKey& key, std::function<void(Found)> then) {
  const std::string hex = to_hex(key);
  client_.run(
      {{"EVAL", std::string(tier_scripts::kLookup), "2", entry_prefix_ + hex, claim_prefix_ + hex,
        options_.replica}},
      [this, self = shared_from_this(), key, hex,
       then = std::move(then)](RedisClient::Result result) {
        Found found;
        const auto* replies = std::get_if<std::vector<RedisReply>>(&result);
        if (replies == nullptr || replies->front().error() ||
            replies->front().type != RedisReply::Type::kArray ||
            replies->front().elements.empty()) {
          found.result = "error";
          return then(found);
        }
        const std::vector<RedisReply>& fields = replies->front().elements;
        switch (fields[0].as_int()) {
          case 1: {
            const std::string& entry = fields.size() > 1 ? fields[1].text : std::string();
            std::string problem;
            if (entry.size() < kEntryHeaderBytes) {
              problem = "shorter than its header";
            } else {
              const EntryHeaderCheck check =
                  check_entry_header(std::string_view(entry).substr(0, kEntryHeaderBytes), key,
                                     entry.size() - kEntryHeaderBytes);
              problem = check.problem;
              if (problem.empty() && entry_sha256(std::string_view(entry).substr(
                                         kEntryHeaderBytes)) != check.payload_sha256) {
                problem = "its payload does not match its SHA-256";
              }
            }
            if (problem.empty()) {
              found.what = Found::What::kHit;
              found.value = std::make_shared<const std::string>(entry.substr(kEntryHeaderBytes));
              found.result = "hit";
              return then(found);
            }
            spdlog::warn("result cache: redis entry {}{}: {}; deleted it (recomputed)",
                         entry_prefix_, hex, problem);
            client_.run(
                {{"DEL", entry_prefix_ + hex}}, [](RedisClient::Result) {},
                RedisClient::lane_of(hex));
            found.result = "corrupt";
            return then(found);
          }
          case 2:
            found.what = Found::What::kOurs;
            break;
          case 3:
            found.what = Found::What::kOthers;
            found.claim_left_ms = fields.size() > 1 ? fields[1].as_int() : 0;
            break;
          default:
            break;
        }
        then(found);
      },
      RedisClient::lane_of(hex));
}

void RedisResultTier::Impl::lookup(const CacheKey& key, TierClock::time_point until,
                                   std::function<void(Value)> done, bool waited) {
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return done(nullptr);
  }
  read(key, [this, key, until, waited, done = std::move(done)](Found found) mutable {
    if (found.what == Found::What::kOthers && TierClock::now() < until) {
      return wait(key, until, found.claim_left_ms, std::move(done));
    }
    if (waited && observer_.on_waited) observer_.on_waited(found.what == Found::What::kHit);
    report(found.result);
    if (found.what == Found::What::kHit) return done(std::move(found.value));
    done(nullptr);  // a miss, ours to compute
  });
}

void RedisResultTier::Impl::wait(const CacheKey& key, TierClock::time_point until,
                                 int64_t claim_left_ms, std::function<void(Value)> done) {
  const std::string hex = to_hex(key);
  // The claim lapses without a message when its replica died: look again just after.
  const TierClock::time_point lapse =
      TierClock::now() + std::chrono::milliseconds(std::max<int64_t>(claim_left_ms, 0)) +
      kLapseMargin;
  const TierClock::time_point due = std::min(until, lapse);
  {
    const std::lock_guard lock(mutex_);
    if (!gate_.closed()) {
      const uint64_t seq = next_waiter_++;
      Waiter& waiter = waiters_[hex][seq];
      waiter.key = key;
      waiter.until = until;
      waiter.done = std::move(done);
      waiter.timer = timers_.schedule(due, [weak = weak_from_this(), hex, seq] {
        if (const auto self = weak.lock()) self->waiter_due(hex, seq);
      });
      return;
    }
  }
  done(nullptr);
}

void RedisResultTier::Impl::waiter_due(const std::string& hex, uint64_t seq) {
  const ActionGate::Pass pass = gate_.enter();
  if (!pass) return;
  std::optional<Waiter> waiter;
  {
    const std::lock_guard lock(mutex_);
    const auto it = waiters_.find(hex);
    if (it != waiters_.end()) {
      if (const auto found = it->second.find(seq); found != it->second.end()) {
        waiter = std::move(found->second);
        it->second.erase(found);
        if (it->second.empty()) waiters_.erase(it);
      }
    }
  }
  if (waiter) {
    if (TierClock::now() >= waiter->until) {
      if (observer_.on_waited) observer_.on_waited(false);
      report("miss");
      waiter->done(nullptr);  // the caller's deadline: it computes (or has ended)
    } else {
      lookup(waiter->key, waiter->until, std::move(waiter->done), true);
    }
  }
}

void RedisResultTier::Impl::wake(const std::string& hex) {
  std::map<uint64_t, Waiter> woken;
  {
    const std::lock_guard lock(mutex_);
    const auto it = waiters_.find(hex);
    if (gate_.closed() || it == waiters_.end()) return;
    woken = std::move(it->second);
    waiters_.erase(it);
  }
  for (auto& [seq, waiter] : woken) {
    waiter.timer.cancel();
    lookup(waiter.key, waiter.until, std::move(waiter.done), true);
  }
}

void RedisResultTier::Impl::wake_all() {
  std::vector<std::string> hexes;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [hex, waiters] : waiters_) hexes.push_back(hex);
  }
  for (const std::string& hex : hexes) wake(hex);
}

void RedisResultTier::Impl::store(const CacheKey& key, const Value& value) {
  if (static_cast<int64_t>(value->size()) > options_.max_entry_bytes) return;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
  }
  const std::string hex = to_hex(key);
  std::string entry = encode_entry_header(key, *value);
  entry += *value;
  client_.run(
      {{"EVAL", std::string(tier_scripts::kStore), "2", entry_prefix_ + hex, claim_prefix_ + hex,
        std::move(entry), std::to_string(options_.ttl_s), options_.replica, ready_channel_, hex}},
      [](RedisClient::Result) {}, RedisClient::lane_of(hex));
}

void RedisResultTier::Impl::erase(const CacheKey& key) {
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
  }
  const std::string hex = to_hex(key);
  client_.run(
      {{"DEL", entry_prefix_ + hex}}, [](RedisClient::Result) {}, RedisClient::lane_of(hex));
}

std::shared_ptr<RedisResultTier::Claim> RedisResultTier::Impl::claim(const CacheKey& key) {
  const std::string hex = to_hex(key);
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return nullptr;
    if (claims_[hex]++ > 0) return std::make_shared<Claim>(shared_from_this(), hex);
  }
  client_.run(
      {{"SET", claim_prefix_ + hex, options_.replica, "NX", "PX",
        std::to_string(options_.claim_ms)}},
      [](RedisClient::Result) {}, RedisClient::lane_of(hex));
  return std::make_shared<Claim>(shared_from_this(), hex);
}

void RedisResultTier::Impl::release(const std::string& hex) {
  {
    const std::lock_guard lock(mutex_);
    const auto it = claims_.find(hex);
    if (it == claims_.end() || --it->second > 0) return;
    claims_.erase(it);
    if (gate_.closed()) return;
  }
  // On the key's lane, after its store: a result stored already took the claim with it.
  client_.run(
      {{"EVAL", std::string(tier_scripts::kReleaseClaim), "1", claim_prefix_ + hex,
        options_.replica, ready_channel_, hex}},
      [](RedisClient::Result) {}, RedisClient::lane_of(hex));
}

void RedisResultTier::Impl::renew(std::function<void()> next) {
  RedisClient::Command command = {"EVAL", std::string(tier_scripts::kRenewClaims)};
  {
    const std::lock_guard lock(mutex_);
    command.push_back(std::to_string(claims_.size()));
    for (const auto& [hex, count] : claims_) command.push_back(claim_prefix_ + hex);
  }
  command.push_back(options_.replica);
  command.push_back(std::to_string(options_.claim_ms));
  if (command[2] == "0") {
    next();  // no claims to renew this round
    return;
  }
  client_.run({std::move(command)}, [next = std::move(next)](RedisClient::Result) { next(); });
}

void RedisResultTier::Impl::close() {
  std::map<std::string, std::map<uint64_t, Waiter>> waiters;
  TimerQueue::Timer renewal;
  std::vector<std::string> claimed;
  {
    std::unique_lock lock(mutex_);
    gate_.close_locked();
    waiters.swap(waiters_);
    renewal = std::move(renewal_);
    for (const auto& [hex, count] : claims_) claimed.push_back(hex);
    gate_.wait_idle(lock);
  }
  renewal.cancel();
  for (auto& [hex, by_seq] : waiters) {
    for (auto& [seq, waiter] : by_seq) {
      waiter.timer.cancel();
      waiter.done(nullptr);
    }
  }
  for (const std::string& hex : claimed) {
    client_.run(
        {{"EVAL", std::string(tier_scripts::kReleaseClaim), "1", claim_prefix_ + hex,
          options_.replica, ready_channel_, hex}},
        [](RedisClient::Result) {}, RedisClient::lane_of(hex));
  }
}

RedisResultTier::RedisResultTier(RedisClient& client, RedisSubscriber& subscriber,
                                 TimerQueue& timers, RedisResultTierOptions options,
                                 RedisResultTierObserver observer)
    : impl_(std::make_shared<Impl>(client, subscriber, timers, std::move(options),
                                   std::move(observer))) {
  impl_->start();
}

RedisResultTier::~RedisResultTier() { impl_->close(); }

void RedisResultTier::lookup(const CacheKey& key, TierClock::time_point wait_until,
                             std::function<void(Value)> done) {
  impl_->lookup(key, wait_until, std::move(done), false);
}

void RedisResultTier::store(const CacheKey& key, const Value& value) { impl_->store(key, value); }

void RedisResultTier::erase(const CacheKey& key) { impl_->erase(key); }

std::shared_ptr<RedisResultTier::Claim> RedisResultTier::claim(const CacheKey& key) {
  return impl_->claim(key);
}

const RedisResultTierOptions& RedisResultTier::options() const { return impl_->options_; }

}  // namespace cube3d
