// A token bucket for one limit "<amount> per minute": it holds at most one minute's worth
// (the burst), refills continuously, and may be charged into debt. The work-based limits
// (shape tokens, occupancy points) are charged when the work is done, with what it really took,
// while admission checks what a request will need; a request that took more than was left puts
// the bucket in debt, and the next one waits until the refill has paid it off.
#pragma once

#include <cstdint>

#include "cube3d/core/clock.h"

namespace cube3d {

class TokenBucket {
 public:
  // Full at `now`.
  TokenBucket(double per_minute, SteadyClock::time_point now);

  double per_minute() const { return per_minute_; }
  // The level at `now` (refilled; at most per_minute, negative in debt).
  double level(SteadyClock::time_point now);

  // Seconds until `need` is available (0: now; at most a day). A need over one minute's worth
  // waits only for a full bucket (which it then takes into debt): it could never be admitted
  // otherwise.
  int64_t wait_seconds(double need, SteadyClock::time_point now);
  // Takes `amount` (may leave the bucket in debt).
  void take(double amount, SteadyClock::time_point now);
  // A new rate (the keys file re-read): the level is kept, capped at the new burst.
  void set_per_minute(double per_minute, SteadyClock::time_point now);
  // Whether the bucket is full at `now` (its state is then the same as a new bucket's).
  bool full(SteadyClock::time_point now) const { return refilled_level(now) >= per_minute_; }

 private:
  void refill(SteadyClock::time_point now);
  double refilled_level(SteadyClock::time_point now) const;

  double per_minute_;
  double level_;
  SteadyClock::time_point refilled_;
};

}  // namespace cube3d
