// A replica's lease renewal (the Redis job store's tick, the Redis result tier's claims): one
// round every `period`, the next one armed only once the round before it is done (its reply, or
// its failure, came back: a Redis command always ends by its deadline). So a stalled Redis holds
// at most one round of a replica's at a time, never a pile of them that would all land together
// once it is back; and the two stores renew by one rule.
//
// Each round runs on the timer's thread, inside a pass of the owner's gate (so the owner's
// close() waits for it) and with the owner alive; a round that finds the gate closed or the owner
// gone does not run. The owner's close() cancels what `slot` holds, as for any gated timer.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "cube3d/server/timing/action_gate.h"
#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {

// Sends one round. Calls `next` exactly once, from any thread (inline too), when the round is
// done, which arms the next round; a round that does not call it ends the renewal.
using RenewalRound = std::function<void(std::function<void()> next)>;

// Arms the first round `period` from now. `gate`, `timers` and `slot` are the owner's: they must
// live as long as `owner` does. Takes the owner's mutex (through the gate): call without it.
void schedule_renewal_rounds(ActionGate& gate, TimerQueue& timers, TimerQueue::Timer& slot,
                             std::chrono::milliseconds period, std::weak_ptr<const void> owner,
                             RenewalRound round);

}  // namespace cube3d
