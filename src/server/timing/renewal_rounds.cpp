#include "cube3d/server/timing/renewal_rounds.h"

#include <utility>

namespace cube3d {
namespace {

// What the rounds share: the owner's gate, timers and slot (by reference, touched only while
// the owner is alive) and the round.
struct Rounds : std::enable_shared_from_this<Rounds> {
  Rounds(ActionGate& gate_in, TimerQueue& timers_in, TimerQueue::Timer& slot_in,
         std::chrono::milliseconds period_in, std::weak_ptr<const void> owner_in,
         RenewalRound round_in)
      : gate(gate_in),
        timers(timers_in),
        slot(slot_in),
        period(period_in),
        owner(std::move(owner_in)),
        round(std::move(round_in)) {}

  void arm() {
    gate.schedule(timers, slot, period, [self = shared_from_this()] { self->run(); });
  }

  void run() {
    const auto alive = owner.lock();
    if (!alive) return;
    const ActionGate::Pass pass = gate.enter();
    if (!pass) return;
    round([self = shared_from_this()] {
      // The owner may have gone while the round's reply was on its way.
      if (const auto still = self->owner.lock()) self->arm();
    });
  }

  ActionGate& gate;
  TimerQueue& timers;
  TimerQueue::Timer& slot;
  const std::chrono::milliseconds period;
  const std::weak_ptr<const void> owner;
  const RenewalRound round;
};

}  // namespace

void schedule_renewal_rounds(ActionGate& gate, TimerQueue& timers, TimerQueue::Timer& slot,
                             std::chrono::milliseconds period, std::weak_ptr<const void> owner,
                             RenewalRound round) {
  std::make_shared<Rounds>(gate, timers, slot, period, std::move(owner), std::move(round))->arm();
}

}  // namespace cube3d
